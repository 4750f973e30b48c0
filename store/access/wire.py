"""The broker's face of a store: ``store.wire``, a :class:`WireCalls` (RocketMQ's requests
name the calls): puts as clients send them, the arrival signal for held pulls, the byte-exact
reads of ``VIEW_MESSAGE_BY_ID`` (33), the records a broker puts again (send-back,
transactions), the index's last update of ``QUERY_MESSAGE`` (12), a queue's earliest store
time (32) and the dispatcher's position.

Each call checks the store is open (writable for a change) and calls the part doing the work.
Users' calls stay on :class:`rmqlog.MessageStore`; replication's are ``store.replica``
(:mod:`rmqlog.recovery.replication_calls`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..arguments import (
    JAVA_INT_MAX,
    bool_arg,
    callable_arg,
    int_arg,
    long_array_arg,
    queue_id_arg,
    text_arg,
)
from ..errors import (
    CorruptRecordError,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidTopicError,
    out_of_files_typed,
)
from ..log.decode import BadRecordError, RecordCheck
from ..log.encode.arrays import all_equal, first, flat
from ..log.encode.direct import WireMessage
from ..log.encode.wire_put import wire_table
from ..log.point_read import java_properties
from ..log.properties import SCHEDULE_TOPIC, TIMER_TOPIC, WAITING_TOPICS
from ..log.record import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, ScanKind
from ..log.wire import stored_records
from ..log.writer_marker import writer_marker
from ..paths import topic_problem, validate_topic
from ..queue.arrival import ArrivalListener
from ..results import RecordHead, StoredRecords
from .direct_append import PutRows, dispatch_put, put_direct

if TYPE_CHECKING:
    from ..parts import StoreParts
    from .appender import Appender
    from .reader import QueueReader

#: RocketMQ 4.9.8's ``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``: topics no client sends to
NOT_ALLOWED_SEND_TOPICS = frozenset(
    (
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    )
)


#: RocketMQ's transaction topics: the half messages, their ops (commit/rollback records) and
#: the half messages checked too often; a broker's own put (``system=True``) may write them
TRANSACTION_TOPICS = frozenset(
    ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC")
)

_NOT_ALLOWED_ARRAY = pa.array(sorted(NOT_ALLOWED_SEND_TOPICS), pa.string())
_NOT_ALLOWED_SYSTEM = NOT_ALLOWED_SEND_TOPICS - TRANSACTION_TOPICS
_NOT_ALLOWED_SYSTEM_ARRAY = pa.array(sorted(_NOT_ALLOWED_SYSTEM), pa.string())
#: the store's own topics a put is refused, in the order the put's routing checks them
#: (:func:`rmqlog.schedule.routing.refuse_topic`): what to give instead
_WAITING_REFUSALS = (
    (TIMER_TOPIC, "timed messages: give a deliverTime"),
    (SCHEDULE_TOPIC, "delayed messages: give a delayLevel"),
)


def _refuse_waiting_topic(col: pa.Array) -> None:
    """The refusal of a row written to the timer or schedule topic directly, as the routing
    of a put with a ``properties`` map makes it before encoding (a wire put whose properties
    took the fast path has no map: without this, the encoder would name it only after its
    own checks)."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return  # not a string column: the encoder names it
    for name, what in _WAITING_REFUSALS:
        hit = pc.fill_null(pc.equal(col, name), False)
        if pc.any(hit).as_py():
            raise InvalidMessageError(
                f"{name} is the store's topic for {what} instead", row=first(np.asarray(hit)), field="topic"
            )


def _cluster_arg(cluster: object) -> str | None:
    if cluster is not None:
        text_arg("cluster", cluster)
        assert isinstance(cluster, str)
        if not cluster or NAME_VALUE_SEPARATOR in cluster or PROPERTY_SEPARATOR in cluster:
            raise InvalidArgumentError(f"cluster {cluster!r} must be a non-empty name without \\x01 or \\x02")
    return cluster


def wire_messages_table(messages: Sequence[object]) -> pa.Table:
    """:meth:`WireCalls.put_messages`' messages as :meth:`WireCalls.put_wire`'s table (the
    vectorized path's input); raises :class:`InvalidMessageError` naming the row and field of
    a message that is not a :class:`WireMessage` or holds a value of the wrong type."""
    rows = []
    for i, m in enumerate(messages):
        if not isinstance(m, tuple) or len(m) not in range(3, len(WireMessage._fields) + 1):
            raise InvalidMessageError(f"is not a WireMessage: {type(m).__name__}", row=i, field="*")
        rows.append(WireMessage(*m))
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in WireMessage._fields]
    arrays = []
    for name, values in zip(_WIRE_MESSAGE_COLUMNS, columns, strict=True):
        typ = _WIRE_MESSAGE_TYPES[name]
        if name == "bornHost" and any(isinstance(v, bytes) for v in values):
            typ = pa.binary()
        try:
            arrays.append(pa.array(values, typ))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            row = next((k for k, v in enumerate(values) if not _converts(v, typ)), 0)
            raise InvalidMessageError(f"{type(exc).__name__}: {exc}", row=row, field=name) from None
    return pa.Table.from_arrays(arrays, names=list(_WIRE_MESSAGE_COLUMNS))


_WIRE_MESSAGE_COLUMNS = (
    "topic",
    "queueId",
    "body",
    "flag",
    "sysFlag",
    "bornTimestamp",
    "bornHost",
    "properties",
    "reconsumeTimes",
)
_WIRE_MESSAGE_TYPES = {
    "topic": pa.string(),
    "queueId": pa.int64(),
    "body": pa.binary(),
    "flag": pa.int64(),
    "sysFlag": pa.int64(),
    "bornTimestamp": pa.int64(),
    "bornHost": pa.string(),
    "properties": pa.string(),
    "reconsumeTimes": pa.int64(),
}


def _converts(value: object, typ: pa.DataType) -> bool:
    try:
        pa.array([value], typ)
        return True
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return False


def _names(name: str, value: object) -> tuple[str, ...]:
    """Property names: a tuple or list of non-empty strings without separators."""
    if not isinstance(value, tuple | list):
        raise InvalidArgumentError(f"{name} must be a tuple of property names, got {type(value).__name__}")
    for item in value:
        text_arg(name, item)
        if not item or NAME_VALUE_SEPARATOR in item or PROPERTY_SEPARATOR in item:
            raise InvalidArgumentError(f"{name}: {item!r} is no property name")
    return tuple(value)


@out_of_files_typed  # (as the store's own calls: running out of descriptors is a typed error)
class WireCalls:
    """The broker's calls of a store, ``store.wire`` (see the module docstring)."""

    def __init__(
        self, parts: StoreParts, appender: Appender, reader: QueueReader, check_open: Callable[..., None]
    ) -> None:
        self._parts, self._appender, self._reader = parts, appender, reader
        #: raises if the store is closed, or read-only for a call that writes (its name given)
        self._check_open = check_open

    def put_wire(
        self,
        table: pa.Table | pa.RecordBatch,
        *,
        dispatch: bool = False,
        cluster: str | None = None,
        writer: str | None = None,
        sequence: int | None = None,
        system: bool = False,
        wait_flush: bool = True,
    ) -> pa.Table:
        """Append messages as a RocketMQ client sends them (a broker's ``SEND_MESSAGE``,
        ``SEND_MESSAGE_V2`` and the rows of ``SEND_BATCH_MESSAGE``, see
        :func:`rmqlog.decode_message_batch`); all or nothing, like :meth:`put_batch`, and the
        same result columns (``commitLogOffset``, ``queueOffset``, ``msgId``: the offset msgId,
        ``storeTimestamp``).

        Columns (only ``topic`` and ``body`` required): ``topic``, ``queueId`` (int; null: round
        robin), ``body`` (stored as sent, compressed or not), ``flag``, ``sysFlag``
        (``MessageSysFlag``), ``bornTimestamp`` (int64 ms), ``bornHost`` (``"ip:port"`` or the
        8/20 record bytes; default the config's ``born_host``), ``properties`` (the wire string
        ``name\\x01value\\x02``...), ``reconsumeTimes`` (int32 >= 0, stored in RECONSUMETIMES),
        ``delayLevel`` (int; null or <= 0: none): routed as a ``DELAY`` property is (a row giving
        both must give the same level; the broker's send-back gives the column).
        The rules (:mod:`rmqlog.log.encode.wire_put`), as RocketMQ 4.9.8's broker and store:
        properties parsed as ``string2messageProperties`` (items without name or value
        dropped), ``WAIT`` not stored, ``cluster`` stored as ``CLUSTER``; ``KEYS``/``TAGS``/the
        client's ``UNIQ_KEY`` kept and indexed (tagsCode: the tags' hash); ``DELAY`` and the
        timer properties route the row as :meth:`put`'s ``delay_level``/``deliver_time_ms``;
        refused: ``REAL_TOPIC``, ``REAL_QID``, the timer's own names and ``RMQLOG_*`` (the
        store's to set), a prepared or rolled-back transaction, sysFlag bits no put sets,
        RocketMQ's not-allowed send topics (:data:`NOT_ALLOWED_SEND_TOPICS`).

        ``system=True``: a broker's own put (RocketMQ's transactional messages, never a
        client's rows as sent): rows may go to :data:`TRANSACTION_TOPICS` and carry
        ``REAL_TOPIC``/``REAL_QID`` (a half message's real destination, stored as given; the
        store routes nothing by them outside the schedule and timer topics).

        ``wait_flush=False`` (SYNC_FLUSH): return after the publish and leave the group commit to
        the caller (:meth:`flush_to`; a broker waits for it off its event loop).

        ``writer``/``sequence``: an idempotent put, exactly as :meth:`rmqlog.MessageStore.put_batch`
        (a batch whose sequence the store already has for the writer is skipped: nothing
        written, an empty result; a broker passes a send's idempotence marker here).

        Raises :class:`InvalidMessageError` (``MESSAGE_ILLEGAL``) naming the first bad row and
        field, :class:`rmqlog.errors.MessageTooLargeError` for a body over ``max_message_size``
        or properties over 32767 bytes, :class:`rmqlog.errors.QueueIdError`,
        :class:`rmqlog.errors.DiskFullError`; nothing of the batch is written then.
        """
        marker = writer_marker(writer, sequence)
        self._check_open("put_wire")
        cluster = _cluster_arg(cluster)
        dispatch = bool_arg("dispatch", dispatch)
        system = bool_arg("system", system)
        wait_flush = bool_arg("wait_flush", wait_flush)
        not_allowed = _NOT_ALLOWED_SYSTEM if system else NOT_ALLOWED_SEND_TOPICS
        appender = self._appender
        put, header = wire_table(
            table,
            default_born_host=appender.born_host,
            store_v6=len(appender.store_host) == 20,
            cluster=cluster,
            system=system,
        )
        topic = flat(put.column("topic"))
        if pa.types.is_string(topic.type) and not topic.null_count and len(topic) and all_equal(topic):
            # one topic (every broker put of single sends to one topic): one set lookup
            try:
                name = topic[0].as_py()
            except UnicodeDecodeError:  # every row is this one name: the put names it
                raise InvalidTopicError("value is not valid UTF-8", row=0, field="topic") from None
            if name in not_allowed:
                raise InvalidMessageError(
                    f"{name} is a RocketMQ system topic no client may send to", row=0, field="topic"
                )
            if header.properties is not None and name in WAITING_TOPICS:
                _refuse_waiting_topic(topic)
        else:
            if pa.types.is_string(topic.type) or pa.types.is_large_string(topic.type):
                hit = np.asarray(
                    pc.fill_null(pc.is_in(topic, _NOT_ALLOWED_SYSTEM_ARRAY if system else _NOT_ALLOWED_ARRAY), False)
                )
                if hit.any():
                    row = int(np.flatnonzero(hit)[0])
                    raise InvalidMessageError(
                        f"{topic[row].as_py()} is a RocketMQ system topic no client may send to", row=row, field="topic"
                    )
            if header.properties is not None:
                _refuse_waiting_topic(topic)
        return appender.put_table(put, marker, dispatch=dispatch, wire=header, wait_flush=wait_flush)[0]

    def put_messages(
        self,
        messages: Sequence[WireMessage],
        *,
        dispatch: bool = False,
        cluster: str | None = None,
        writer: str | None = None,
        sequence: int | None = None,
        system: bool = False,
        wait_flush: bool = True,
        defer_dispatch: bool = False,
    ) -> PutRows:
        """:meth:`put_wire` of a few messages given as :class:`rmqlog.WireMessage` tuples (a
        broker's sends: no table to build), with the same rules, errors and guarantees, and a
        cost in proportion to the messages: a put of up to
        :data:`~rmqlog.log.encode.direct.DIRECT_MAX_MESSAGES` clean messages (what clients send)
        is encoded, appended and dispatched one record at a time
        (:mod:`rmqlog.log.encode.direct`, :mod:`rmqlog.access.direct_append`); any other put
        takes :meth:`put_wire`'s path. Returns :class:`rmqlog.PutRows` (``duplicate``: a replay of
        an idempotent put, nothing written).

        The units of the put are written from its own fields when the dispatcher stands at its
        start (the usual case: a broker dispatches its own sends); otherwise ``dispatch=True``
        runs a full dispatch, else the background dispatcher is woken. ``wait_flush=False``
        (SYNC_FLUSH): return after the publish and leave the group commit to the caller
        (:meth:`flush_to` of ``end``: a broker waits for it off its event loop).
        ``defer_dispatch=True``: the direct path's dispatch is left to :meth:`dispatch_put` of
        the result (a broker answers its sends first); the background dispatcher waits for it a
        few ms, then takes the put itself.
        """
        marker = writer_marker(writer, sequence)
        self._check_open("put_messages")
        defer_dispatch = bool_arg("defer_dispatch", defer_dispatch)
        cluster = _cluster_arg(cluster)
        dispatch = bool_arg("dispatch", dispatch)
        system = bool_arg("system", system)
        wait_flush = bool_arg("wait_flush", wait_flush)
        if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
            raise InvalidArgumentError(f"messages must be a sequence of WireMessage, not {type(messages).__name__}")
        if not messages:
            tail = self._parts.published_tail()
            return PutRows([], [], [], 0, tail, tail)
        not_allowed = _NOT_ALLOWED_SYSTEM if system else NOT_ALLOWED_SEND_TOPICS
        rows = put_direct(
            self._appender,
            messages,
            cluster=cluster,
            system=system,
            marker=marker,
            dispatch=dispatch,
            wait_flush=wait_flush,
            not_allowed=not_allowed,
            defer_dispatch=defer_dispatch,
        )
        if rows is not None:
            return rows
        result = self.put_wire(
            wire_messages_table(messages),
            dispatch=dispatch,
            cluster=cluster,
            writer=writer,
            sequence=sequence,
            system=system,
            wait_flush=wait_flush,
        )
        if not result.num_rows:
            tail = self._parts.published_tail()
            return PutRows([], [], [], 0, tail, tail, duplicate=True)
        offsets = result.column("commitLogOffset").to_pylist()
        stamp = result.column("storeTimestamp")[0].value // 1000
        return PutRows(
            offsets,
            result.column("queueOffset").to_pylist(),
            result.column("msgId").to_pylist(),
            stamp,
            offsets[0],
            self._parts.published_tail(),
        )

    def dispatch_put(self, rows: PutRows) -> bool:
        """The dispatch a :meth:`put_messages` with ``defer_dispatch`` left: the put's units and
        index entries written from its own fields (held pulls told at once); returns whether
        they are written now (else the background dispatcher was woken for them). Nothing
        left to do (a put without ``defer_dispatch``, a second call): True. Raises
        :class:`InvalidArgumentError` for anything but a :class:`PutRows`,
        :class:`rmqlog.errors.DiskFullError` when a write fails (the put stays in the log)."""
        self._check_open("dispatch_put")
        if not isinstance(rows, PutRows):
            raise InvalidArgumentError(f"rows must be the PutRows of a put_messages, not {type(rows).__name__}")
        return dispatch_put(rows)

    def flush_to(self, offset: int) -> int:
        """The group commit covering ``offset`` (a published commitlog offset, e.g. a put's
        ``end``): returns once the commitlog up to it and the flushed position are durable
        (SYNC_FLUSH's wait; one sync shared by every caller waiting meanwhile, in any
        process). Consume queues and the checkpoint are not synced (:meth:`flush` does).
        Returns the flushed commitlog offset. Raises :class:`InvalidArgumentError` for an
        offset that is not a non-negative int, ``OSError`` when the sync fails."""
        self._check_open("flush_to")
        offset = int_arg("offset", offset, 0, 1 << 62)
        self._parts.flush_service.flush_to(min(offset, self._parts.published_tail()))
        return self._parts.flush_service.flushed().offset

    def stored_rows(
        self,
        offsets: np.ndarray,
        queue_offsets: np.ndarray,
        *,
        topic: str,
        queue_id: int,
        drop: tuple[str, ...] = (),
        find: tuple[str, ...] = (),
    ) -> tuple[pa.Table, np.ndarray]:
        """The records at these commitlog offsets as the rows of a wire put, for a broker that
        puts a stored message again (RocketMQ's transactions: a half message committed to its
        real topic, or put back to be checked later): ``(table, found)``.

        Each record must be of ``topic``, queue ``queue_id``, at its ``queue_offsets`` entry,
        published, whole and with a good body CRC (``check_crc_on_read``); a requested offset
        naming no such record is left out of the table and ``False`` in ``found`` (a bool
        array per request). The table, in request order (:mod:`rmqlog.access.stored_rows`):
        ``topic``, ``queueId``, ``body``, ``flag``, ``sysFlag`` (host bits cleared),
        ``bornTimestamp`` (ms), ``bornHost`` (the record's 8/20 bytes), ``properties`` (as
        stored, without the names in ``drop`` and the store's ``RMQLOG_*`` markers),
        ``reconsumeTimes``, then ``commitLogOffset``, ``queueOffset``, ``storeTimestamp`` (ms),
        then one string column per name in ``find`` (its value, null where absent). Raises
        :class:`InvalidArgumentError` for a bad argument."""
        from .stored_rows import stored_rows

        self._check_open()
        validate_topic(topic)
        queue_id = queue_id_arg(queue_id)
        offsets, queue_offsets = long_array_arg("offsets", offsets), long_array_arg("queue_offsets", queue_offsets)
        drop, find = _names("drop", drop), _names("find", find)
        return stored_rows(
            self._parts,
            self._parts.published_tail(),
            offsets,
            topic=topic,
            queue_id=queue_id,
            queue_offsets=queue_offsets,
            drop=drop,
            find=find,
            crc=self._parts.config.check_crc_on_read,
        )

    def on_arrival(self, callback: ArrivalListener) -> Callable[[], None]:
        """Call ``callback(topics: list[str], queue_ids: np.ndarray, max_offsets: np.ndarray)``
        after every dispatch that gave queues new units: once per dispatched run, each queue
        named once with the offset after its last unit (:mod:`rmqlog.queue.arrival`). It runs
        *after* the units are written and the dispatch position saved (a read in the callback
        finds them), outside the dispatch lock, on the dispatching thread: the background
        dispatcher (:meth:`start_services`, which also covers what other processes appended or
        dispatched), :meth:`dispatch`, a put with ``dispatch=True``. A callback's exception is
        logged and never breaks the dispatch. Returns the function that unsubscribes it."""
        self._check_open()
        if callable_arg("callback", callback) is None:
            raise InvalidArgumentError("callback must be callable, got None")
        return self._parts.dispatcher.on_arrival(callback)

    def record_at(self, commit_log_offset: int) -> StoredRecords | None:
        """The record starting at this commitlog offset, byte-exact (``VIEW_MESSAGE_BY_ID``'s
        body), ``None`` when no record starts there (deleted, not yet published, not a record
        start). Checked as :meth:`message_by_offset` (lengths; body CRC when
        ``check_crc_on_read``): :class:`CorruptRecordError` for a damaged one."""
        self._check_open()
        commit_log_offset = int_arg("commit_log_offset", commit_log_offset)
        commitlog = self._parts.commitlog
        tail = self._parts.published_tail()
        if commit_log_offset < commitlog.min_offset():
            return None
        at = commitlog.record_at(commit_log_offset, tail)
        if at is None or at.kind is not ScanKind.RECORD:
            return None
        offsets = np.array([commit_log_offset], np.int64)
        try:
            parts = commitlog.read_stored_records(
                offsets, check=RecordCheck(crc=self._parts.config.check_crc_on_read), tail=tail
            )
        except BadRecordError as e:
            raise CorruptRecordError(f"damaged commitlog record: {e.reason}", path=e.path, offset=e.offset) from None
        return stored_records(parts)

    def record_head(self, commit_log_offset: int) -> RecordHead | None:
        """Where the record starting at this commitlog offset belongs: its topic, queue id,
        queue offset and properties (:class:`RecordHead`), what a broker's access check reads
        for a request that names an offset, not a topic (``VIEW_MESSAGE_BY_ID``,
        ``CONSUMER_SEND_MSG_BACK``). ``None`` when no record starts there that its queue lists
        there: deleted, not yet published or dispatched, not a record start, or bytes inside
        a message body made to look like a record (no queue's unit points at them, so what
        they claim is never taken for a record's). Cost: one record decoded by the scalar
        codec (its lengths and header values checked; no body CRC, the body is not returned)
        and one consume-queue unit read, whatever the store's size. Raises
        :class:`InvalidArgumentError` for a bad argument."""
        self._check_open()
        commit_log_offset = int_arg("commit_log_offset", commit_log_offset)
        commitlog = self._parts.commitlog
        if commit_log_offset < commitlog.min_offset():
            return None
        at = commitlog.record_at(commit_log_offset, self._parts.published_tail())
        if at is None or at.kind is not ScanKind.RECORD or at.record is None:
            return None
        rec = at.record
        if topic_problem(rec.topic) is not None or not 0 <= rec.queue_id <= JAVA_INT_MAX:
            return None  # a name no queue has: nothing to look up
        cq = self._parts.consume_queue(rec.topic, rec.queue_id)
        if not 0 <= rec.queue_offset < self._reader.read_bounds(cq)[1]:
            return None
        units = cq.read(rec.queue_offset, 1)
        if len(units) != 1 or int(units["offset"][0]) != commit_log_offset:
            return None
        return RecordHead(rec.topic, rec.queue_id, rec.queue_offset, dict(java_properties(rec.properties)))

    def wire_records(self, offsets: np.ndarray | list[int]) -> tuple[pa.Table, np.ndarray]:
        """The records starting at these commitlog offsets in :meth:`put_wire`'s columns, as
        stored: what a broker re-stores when a consumer sends a message back
        (``CONSUMER_SEND_MSG_BACK``: RocketMQ's ``lookMessageByOffset`` with
        ``deCompressBody=false``). One vectorized read of every offset (no per-record step
        unless one of them starts no record).

        Returns ``(table, found)``: ``found`` the indexes into ``offsets`` where a record starts
        (in their order; offsets below the log's first, at or past its published tail, or
        starting no record are left out), and ``table`` one row per found offset with
        ``topic``, ``queueId``, ``body`` (as stored: a compressed body stays compressed),
        ``flag``, ``sysFlag`` (as stored, host bits included: ``put_wire`` takes them when
        they agree with the hosts), ``bornTimestamp`` (int64 ms), ``bornHost`` (the record's
        8 or 20 bytes, address and port, as ``put_wire`` takes them),
        ``properties`` (the stored string), ``reconsumeTimes``, ``commitLogOffset``, ``msgId``
        (the offset msgId) and ``queueOffset``.

        Raises :class:`CorruptRecordError` for a record that starts there but is damaged
        (lengths; body CRC when ``check_crc_on_read``), :class:`InvalidArgumentError` for
        offsets that are not integers. The read is
        :func:`rmqlog.access.stored_rows.wire_records`, its columns built as :meth:`stored_rows`' are.
        """
        from .stored_rows import wire_records

        self._check_open()
        return wire_records(
            self._parts,
            self._parts.published_tail(),
            long_array_arg("offsets", offsets),
            crc=self._parts.config.check_crc_on_read,
        )

    def index_last_update(self) -> tuple[int, int]:
        """(``indexLastUpdateTimestamp``, ``indexLastUpdatePhyoffset``) of ``QUERY_MESSAGE``'s
        response: the newest index file's end store time and end commitlog offset, (0, 0)
        without index files. :class:`rmqlog.errors.IndexDisabledError` without an index."""
        self._check_open()
        return self._reader.index().last_update()

    def earliest_store_time(self, topic: str, queue_id: int) -> int:
        """The store time (ms) of the oldest message still in the queue
        (``GET_EARLIEST_MSG_STORETIME``), ``-1`` when it holds none. Checked as reads are."""
        self._check_open()
        validate_topic(topic)
        queue_id = queue_id_arg(queue_id)
        lo, hi = self._reader.bounds(topic, queue_id)
        if lo >= hi:
            return -1
        table = self._reader.read_queue(topic, queue_id, lo, lo + 1, None)
        if not table.num_rows:  # retention overtook the read: the queue's new first message
            lo, hi = self._reader.bounds(topic, queue_id)
            table = self._reader.read_queue(topic, queue_id, lo, lo + 1, None) if lo < hi else table
        if not table.num_rows:
            return -1
        return int(table.column("storeTimestamp").cast(pa.int64())[0].as_py()) // 1000

    def dispatched_offset(self) -> int:
        """How far the consume queues reach: the dispatcher's position (``dispatch.state``,
        read without the dispatch lock: a dispatch in progress may be past it already). The
        published tail minus this is RocketMQ's ``dispatchBehindBytes``."""
        self._check_open()
        return self._parts.dispatcher.dispatched()[0]
