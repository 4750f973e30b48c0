"""The facade: :class:`MessageStore` wires the parts of one store root (:mod:`rmqlog.parts`)
and the services that run on them, and is what other code (the Spark source/sink, jobs, the
CLI, notebooks) uses. It holds no logic of its own: each method checks that the store is
open and calls the part that does the work.

| work | where |
|---|---|
| put path | :mod:`rmqlog.access.appender` |
| the wire's calls (puts as clients send them, arrivals, raw reads, queries by key) | :mod:`rmqlog.access.wire` |
| reads, bounds, by offset/msgId | :mod:`rmqlog.access.reader` |
| topics, consumer offsets | :mod:`rmqlog.catalog` |
| dispatch | :mod:`rmqlog.queue.dispatcher` |
| opening, recovery | :mod:`rmqlog.recovery.opening`, :mod:`rmqlog.recovery.recovery` |
| flush, checkpoint | :mod:`rmqlog.durability.flush` |
| retention | :mod:`rmqlog.retention` |
| verify | :mod:`rmqlog.recovery.verify` |
| failover: truncation, replication checkpoint, delay offsets | :mod:`rmqlog.recovery.replication_calls` |

Concurrency: any number of processes may open the same root and call any method. Appends
are serialized by ``append.lock`` and published atomically (``append.state``), dispatching
by ``dispatch.lock``, config changes by ``config.lock``. Readers never read past what was
published.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .access.appender import Appender
from .access.reader import QueueReader
from .access.wire import WireAccess
from .arguments import (
    bool_arg,
    callable_arg,
    int_arg,
    optional_int_arg,
    queue_id_arg,
    text_arg,
)
from .catalog import Catalog, CatalogCalls
from .clock import Clock, clock_arg
from .config import StoreConfig
from .durability.flush import AsyncFlusher
from .durability.lock_file import StoreLockFile
from .errors import (
    InvalidArgumentError,
    StoreClosedError,
    out_of_files_typed,
)
from .filter.vectorized import Sql92Filter
from .index.geometry import set_aside_geometry
from .index.index_service import IndexConfig
from .index.lookup import messages_by_key
from .log.append_state import AppendState
from .log.encode.single import single_message_table
from .log.msgid import is_uniq_key
from .log.properties import WAITING_TOPICS
from .log.writer_marker import writer_marker, writer_problem
from .parts import StoreParts
from .paths import StorePaths, prepare_root, root_arg, validate_topic
from .queue.consume_queue import ConsumeQueue
from .read_only import open_read_only, refuse
from .recovery.opening import (
    Ownership,
    open_as_owner,
    set_aside_unreadable_config,
    take_ownership,
)
from .recovery.recovery import RecoveryReport
from .recovery.replication_calls import ReplicationCalls
from .recovery.verify import VerifyReport, verify
from .results import DiskLimits, GetMessageResult, PutMessageResult, PutMessageStatus
from .retention import CleanReport, Retention
from .schedule import install as install_schedule
from .schedule.delay_offsets import set_aside_if_unreadable_offsets
from .service import ServiceLoop


@out_of_files_typed  # (running out of descriptors anywhere in a call: a typed error naming the file)
class MessageStore(WireAccess, ReplicationCalls, CatalogCalls):
    """A RocketMQ-compatible message store rooted at a directory.

    Open with :meth:`open`; use as a context manager or call :meth:`close`. The calls a
    broker on the wire needs (``put_wire``, ``on_arrival``, ``record_at``, the queries by key,
    ``index_last_update``, ``earliest_store_time``, the replication stream's) are in
    :class:`rmqlog.access.wire.WireAccess`; failover's (``replica_truncate``, the replication
    checkpoint, the delay offsets) in :class:`rmqlog.recovery.replication_calls.ReplicationCalls`;
    topics, consumer offsets and subscription groups in :class:`rmqlog.catalog.CatalogCalls`.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        config: StoreConfig | None = None,
        *,
        repair: bool = False,
        create: bool = True,
        read_only: bool = False,
        clock: Clock | None = None,
    ) -> None:
        if config is not None and not isinstance(config, StoreConfig):
            raise InvalidArgumentError(f"config must be a StoreConfig or None, got {type(config).__name__}")
        repair, create, read_only = (
            bool_arg("repair", repair),
            bool_arg("create", create),
            bool_arg("read_only", read_only),
        )
        self.config = config or StoreConfig()
        #: where every part of the store reads the time (:mod:`rmqlog.clock`)
        self.clock = clock_arg(clock)
        self.paths = StorePaths(root_arg(root))
        #: opened read-only (:mod:`rmqlog.read_only`): nothing is written, changes are refused
        self.read_only = read_only
        if read_only and repair:
            raise InvalidArgumentError("repair needs a normal open: a read-only open changes nothing")
        prepare_root(self.paths, create=create, read_only=read_only)  # (config/ is made once the store is owned)
        self._closed = False
        self.parts = StoreParts(self.config, self.paths, read_only=read_only, clock=self.clock)
        self._owner: StoreLockFile | None = None
        owned: Ownership | None = None
        try:
            if not read_only:  # the first opener surveys the files before any is opened
                owned = take_ownership(self.parts, repair=repair)
            self._open(repair, owned)
        except BaseException:
            if owned is not None and self._owner is None:
                owned.owner.abandon()
            self.parts.close_files()
            self.parts.release_locks()
            raise

    def _build(self, repair: bool, first: bool = False) -> list[Path]:
        """Wire the parts and services; returns the config files set aside: those ``repair``
        found unreadable and, for the ``first`` opener (alone with the store), an index
        geometry that is unreadable or does not fit the index files (the index is derived:
        rebuilt from the log, nothing is lost)."""
        parts = self.parts
        set_aside = (
            set_aside_unreadable_config(parts, lambda: set_aside_if_unreadable_offsets(parts.paths.config_dir))
            if repair
            else []
        )
        if first and not repair and parts.config.message_index_enable:
            with parts.config_lock.held():
                moved = set_aside_geometry(
                    parts.paths.config_dir,
                    IndexConfig(
                        parts.config.max_hash_slot_num, parts.config.max_index_num, parts.config.max_msgs_num_batch
                    ),
                )
            set_aside += [moved] if moved else []
        parts.wire(repair=repair, first=first)
        self.config = parts.config  # (the store's segment sizes: rmqlog.segment_sizes)
        self.commitlog, self.dispatcher, self.flush_service = parts.commitlog, parts.dispatcher, parts.flush_service
        self.topic_config, self.consumer_offsets, self.checkpoint_file = (
            parts.topic_config,
            parts.consumer_offsets,
            parts.checkpoint_file,
        )
        #: the store's one background thread: the flusher (ASYNC_FLUSH), the preparer, the
        #: dispatcher and retention once started
        self.services = ServiceLoop(clock=self.clock.monotonic)
        self.appender = Appender(parts, self.services)
        self.preparer = self.appender.preparer
        self.reader = QueueReader(parts)
        self.catalog = Catalog(parts)
        self.retention = Retention(parts)
        #: delivers delayed messages once due (:mod:`rmqlog.schedule`)
        self.scheduler = install_schedule(parts, self.appender, self.reader)
        if parts.index_service is not None:
            index = parts.index_service
            # confirms a delay level's progress that only delayOffset.json records (see the scheduler)
            self.scheduler.delivered_probe = lambda topic, key: (
                messages_by_key(
                    index,
                    self.commitlog,
                    self.published_tail(),
                    topic,
                    key,
                    max_count=1,
                    begin_ms=0,
                    end_ms=None,
                    check_crc=False,
                    unique=True,
                ).num_rows
                > 0
            )
        return set_aside

    def _open(self, repair: bool, owned: Ownership | None) -> None:
        """Wire the store; then recover it as its owner (``owned``; ``None``: a read-only open)."""
        parts = self.parts
        self.recovery: RecoveryReport | None = None
        self.flusher: AsyncFlusher | None = None
        set_aside = self._build(repair, first=owned is not None and owned.first)
        if owned is None:
            open_read_only(parts)
            return
        self.recovery = open_as_owner(parts, owned, repair=repair, set_aside=set_aside, topics=self.catalog.topics)
        self._owner = owned.owner
        if self.recovery is not None and (self.recovery.abnormal or repair) and self.scheduler.timer is not None:
            # after a crash its files were not synced; a repair trusts no derived file: the next
            # pass rebuilds the timer's index from the timer queue
            self.scheduler.timer.wheel.invalidate()
        if not self.appender.sync_flush:
            self.flusher = AsyncFlusher(
                self.flush_service,
                interval_ms=self.config.flush_interval_commit_log,
                least_pages=self.config.flush_commit_log_least_pages,
                thorough_interval_ms=self.config.flush_commit_log_thorough_interval,
                clock=self.clock.monotonic,
            )
            self.services.add(self.flusher)

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        config: StoreConfig | None = None,
        *,
        repair: bool = False,
        create: bool = True,
        read_only: bool = False,
        clock: Clock | None = None,
    ) -> MessageStore:
        """Open (creating if needed) the store at ``root``.

        The first process to open a store recovers it (see :mod:`rmqlog.recovery.recovery`): after a
        clean close it checks the last segments, after an abnormal exit it walks from the
        checkpoint, re-dispatches and cuts what is torn. ``MessageStore.recovery`` says what
        it did. Segment sizes of an existing store are taken from its files.

        Raises :class:`rmqlog.errors.DataLossError` when flushed (acknowledged) data is damaged,
        unless ``repair`` is true (then the log is cut at the damage; ``repair`` needs the store
        to itself: :class:`rmqlog.errors.StoreBusyError`, naming the holders' pids, while other
        processes or other stores of this process have it open, with nothing changed), and
        :class:`rmqlog.errors.CorruptStoreError` if the files are not a valid store. With
        ``create=False`` (readers, the CLI) a root that holds no store raises
        :class:`rmqlog.errors.StoreNotFoundError` and nothing is created.

        ``read_only``: look without changing anything (no recovery, no dispatch, no file
        created or written, changes refused with :class:`rmqlog.errors.ReadOnlyStoreError`;
        see :mod:`rmqlog.read_only`). A root that holds no store raises ``StoreNotFoundError``.

        ``clock``: where the store reads the time (:mod:`rmqlog.clock`; default the system
        clock): store and born times, due times of delayed and timed messages, retention, the
        services' intervals. A test gives a :class:`rmqlog.clock.ManualClock` and moves it
        instead of sleeping: ``clock.advance(1000)`` then ``deliver_due()`` delivers what a
        second's delay kept (timed messages too: a pass covers up to the clock's time minus
        1 ms). Store times still never go back when the clock does. Anything but a clock
        raises :class:`InvalidArgumentError`.
        """
        return cls(root, config, repair=repair, create=create, read_only=read_only, clock=clock)

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self, change: str | None = None) -> None:
        """Raise if the store is closed, or if ``change`` (the name of a call that writes) is
        asked of a read-only store."""
        if self._closed:
            raise StoreClosedError("the store is closed")
        if change is not None and self.read_only:
            raise refuse(change)

    # ------------------------------------------------------------ positions
    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The consume queue of (topic, queue id) (no file is created until a unit is written)."""
        return self.parts.consume_queue(validate_topic(topic), queue_id_arg(queue_id))

    def flushed_offset(self) -> int:
        """The commitlog offset below which everything is on disk (survives a power loss).

        Always a published tail, so a batch is either wholly below it or wholly above.
        """
        return self.parts.flushed_offset()

    def published_tail(self) -> int:
        """The commitlog offset below which every record is whole and readable."""
        return self.parts.published_tail()

    def append_state(self) -> AppendState:
        """The published append state: tail, next queue offsets, writers' sequences."""
        return self.parts.append_state()

    def verify(self, progress: Callable[[int, int], object] | None = None) -> VerifyReport:
        """Walk every record (CRCs included) and consume-queue unit; see :mod:`rmqlog.recovery.verify`
        (``progress(done, total)``: commitlog bytes walked, for a progress bar)."""
        self._check_open()
        return verify(self.parts, callable_arg("progress", progress))

    # ------------------------------------------------------------------- put
    def put_batch(
        self,
        table: pa.Table | pa.RecordBatch,
        *,
        writer: str | None = None,
        sequence: int | None = None,
        dispatch: bool = False,
    ) -> pa.Table:
        """Append every row of ``table`` as one message; all or nothing.

        Idempotent appends: with ``writer`` (a name, e.g. ``"<query id>/<partition>"``) and
        ``sequence`` (an int >= 0, increasing per writer), the batch is appended only if the
        store has not yet recorded ``sequence`` (or a later one) for ``writer``; otherwise
        nothing is written and an empty result is returned. The writer's new sequence is
        published atomically with the batch (same ``append.state`` replace) and also stored
        in the commitlog (:mod:`rmqlog.log.writer_marker`), so a rebuild of the state after a
        crash recovers it. A retried or replayed batch with the same (writer, sequence) is
        therefore a no-op.

        Columns: ``topic`` (string) and ``body`` (binary or string) required; optional
        ``queueId`` (int; null or absent = round robin), ``tags`` (string), ``keys``
        (list<string>), ``properties`` (map<string,string>; not RocketMQ's system names nor
        ``RMQLOG_*``, see :func:`rmqlog.log.properties.reserved_name_problem`), ``flag`` (int32),
        ``bornTimestamp`` (timestamp, truncated to ms, or int64 ms; 1970-01-01 to 9999-12-31).
        Each column at most once. Returns, per input row and in input order,
        ``commitLogOffset``, ``queueOffset``, ``msgId``, ``storeTimestamp``.

        With ``dispatch=True`` the batch is also readable through the consume queues when
        the call returns (its units are written from the batch's own fields when the
        dispatcher has reached its start; otherwise a normal :meth:`dispatch` runs).

        Raises :class:`rmqlog.errors.InvalidMessageError` (or a subclass) naming the row and
        field of the first bad row; nothing of the batch is written then. See
        :mod:`rmqlog.access.appender` for the steps and the full-disk behaviour.
        """
        marker = writer_marker(writer, sequence)
        self._check_open("put_batch")
        return self.appender.put_table(table, marker, dispatch=bool_arg("dispatch", dispatch))[0]

    def put_batches(
        self,
        tables: Iterable[pa.Table | pa.RecordBatch],
        *,
        writer: str | None = None,
        sequence: int | None = None,
        dispatch: bool = False,
    ) -> pa.Table:
        """Append the rows of several tables as one all-or-nothing batch, encoding as they come.

        For producers whose rows arrive in pieces (a Spark task receives Arrow batches): each
        table is validated and encoded when the iterator yields it, and all of them are
        appended under one hold of the append lock and published once. Rows are numbered
        across the tables in errors (row ``r`` of the second table of 100 rows is row
        ``100 + r``); a bad row anywhere means nothing is written. ``writer``/``sequence``/
        ``dispatch`` as in :meth:`put_batch`. Returns one result table.
        """
        marker = writer_marker(writer, sequence)
        tables = self._tables_arg(tables, "put_batches")
        return self.appender.put_tables(tables, marker, dispatch=bool_arg("dispatch", dispatch))

    def put_stream(
        self,
        tables: Iterable[pa.Table | pa.RecordBatch],
        *,
        writer: str | None = None,
        sequence: int | None = None,
        dispatch: bool = False,
        buffer_bytes: int = 256 << 20,
    ) -> int:
        """:meth:`put_batches` holding at most ``buffer_bytes`` of encoded records, then writing as
        they arrive (:meth:`rmqlog.access.appender.Appender.put_stream`); returns the rows appended."""
        return self.appender.put_stream(
            self._tables_arg(tables, "put_stream"),
            writer_marker(writer, sequence),
            dispatch=bool_arg("dispatch", dispatch),
            buffer_bytes=int_arg("buffer_bytes", buffer_bytes, 0),
        )

    def _tables_arg(self, tables: object, call: str) -> Iterable[pa.Table | pa.RecordBatch]:
        self._check_open(call)
        if isinstance(tables, pa.Table | pa.RecordBatch) or not isinstance(tables, Iterable):
            raise InvalidArgumentError(
                f"tables must be an iterable of pyarrow Tables or RecordBatches, got {type(tables).__name__}"
            )
        return tables

    def put(
        self,
        topic: str,
        body: bytes | str,
        *,
        queue_id: int | None = None,
        tags: str | None = None,
        keys: Iterable[str] | str = (),
        properties: Mapping[str, str] | None = None,
        flag: int = 0,
        delay_level: int | None = None,
        deliver_time_ms: int | None = None,
    ) -> PutMessageResult:
        """Append one message; see :meth:`put_batch` for the fields and errors. ``delay_level``
        (RocketMQ's ``setDelayTimeLevel``) or ``deliver_time_ms`` (RocketMQ 5's
        ``setDeliverTimeMs``: ms since the epoch, at most ``timer_max_delay_sec`` ahead; a past
        time is no delay): delivered to its topic once due (:meth:`deliver_due`); the result
        then names where it waits (``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``, or
        ``rmq_sys_wheel_timer`` queue 0)."""
        self._check_open("put")
        row = single_message_table(
            topic,
            body,
            queue_id=queue_id,
            tags=tags,
            keys=keys,
            properties=properties,
            flag=flag,
            delay_level=delay_level,
            deliver_time_ms=deliver_time_ms,
        )
        table, queue_ids = self.appender.put_table(row)
        res = table.to_pylist()[0]
        return PutMessageResult(
            PutMessageStatus.PUT_OK,
            res["commitLogOffset"],
            res["queueOffset"],
            res["msgId"],
            res["storeTimestamp"],
            int(queue_ids[0]),
        )

    def writer_sequence(self, writer: str) -> int | None:
        """The last sequence appended by ``writer`` (see :meth:`put_batch`), or ``None``.
        A name ``put_batch`` would refuse raises :class:`InvalidArgumentError`."""
        problem = writer_problem(writer)
        if problem is not None:
            raise InvalidArgumentError(problem)
        value = self.parts.append_state().writers.get(writer)
        return None if value is None else int(value)

    # ------------------------------------------------------- background work
    def dispatch(self) -> int:
        """Build consume-queue units for every published record not yet dispatched; returns how many."""
        self._check_open("dispatch")
        return self.dispatcher.dispatch()

    def start_services(self, *, scheduler: bool = True) -> None:
        """Start every background service on the store's service loop (a second start is a
        no-op): the dispatcher (every ``reput_interval_ms`` while idle), retention passes
        (:meth:`clean_expired`, every ``clean_resource_interval`` ms) and the scheduler
        (:meth:`deliver_due`, every 100 ms; not with ``scheduler=False``: a replication
        slave, whose master's deliveries arrive as records). The async flusher and the segment preparer run
        from the open on. A failed round is logged and kept in the service's ``last_error``
        (``dispatcher.last_error``, ``retention.last_error``, ...); every service keeps running."""
        self._check_open("start_services")
        self.services.add(self.dispatcher)
        self.services.add(self.retention)
        if bool_arg("scheduler", scheduler):
            self.services.add(self.scheduler)

    def stop_services(self) -> None:
        """Stop what :meth:`start_services` started (dispatcher, retention, scheduler); returns
        once their rounds in progress have finished."""
        self.services.remove(self.scheduler)
        self.services.remove(self.retention)
        self.services.remove(self.dispatcher)

    def deliver_due(self, now_ms: int | None = None) -> int:
        """One scheduler pass as of ``now_ms`` (default: the store's clock; timed messages go
        by the clock alone, up to its time less 1 ms): every delayed message due by then is appended to its real topic
        and queue, exactly once (:mod:`rmqlog.schedule.scheduler`).
        Returns how many were delivered. The background service (:meth:`start_services`)
        runs a pass every 100 ms; the Spark source runs one before planning each micro-batch."""
        self._check_open("deliver_due")
        return self.scheduler.deliver_due(optional_int_arg("now_ms", now_ms)).total

    def clean_expired(self, now_ms: int | None = None, *, force: bool = False) -> CleanReport:
        """One retention pass (RocketMQ's clean services); see :mod:`rmqlog.retention.cleaner`."""
        self._check_open("clean_expired")
        return self.retention.clean(optional_int_arg("now_ms", now_ms), force=bool_arg("force", force))

    # ------------------------------------------------------------------ read
    def min_offset(self, topic: str, queue_id: int) -> int:
        """Logical offset of the oldest message still in the queue."""
        self._check_open()
        return self.reader.bounds(topic, queue_id)[0]

    def max_offset(self, topic: str, queue_id: int) -> int:
        """Logical offset after the newest dispatched message of the queue (0 if empty)."""
        self._check_open()
        return self.reader.bounds(topic, queue_id)[1]

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        tags: str | None = "*",
        *,
        check_crc: bool | None = None,
    ) -> GetMessageResult:
        """Read up to ``max_count`` messages of a queue from ``offset`` (RocketMQ's ``getMessage``).

        ``tags`` is a subscription (``"*"`` or ``"A || B"``): units are filtered on their tag
        hash first, then the decoded messages on the exact TAGS string. ``group`` names the
        consumer (validated; reading does not commit anything). The status and
        ``next_begin_offset`` follow RocketMQ: this is :meth:`read_window` as a table, without
        a byte limit.
        Every message is checked (:mod:`rmqlog.access.reader`), its body CRC unless
        ``check_crc`` (default: the config's ``check_crc_on_read``) is false.
        """
        self._check_open()
        return self.reader.get_messages(group, topic, queue_id, offset, max_count, tags, check_crc)

    def read_window(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int = 32,
        max_bytes: int | None = None,
        tags: str | None = "*",
        until: int | None = None,
        check_crc: bool | None = None,
        raw: bool = False,
        disk: DiskLimits | None = None,
        sql92: Sql92Filter | None = None,
        columns: list[str] | tuple[str, ...] | None = None,
    ) -> GetMessageResult:
        """Read a window of a queue from ``offset``: RocketMQ's ``getMessage`` (statuses and next
        offsets as :mod:`rmqlog.access.window` tabulates), at most ``max_count`` messages and,
        after the first, ``max_bytes`` bytes of records (``None``: no limit), scanning no unit at
        or past ``until``. ``raw=False``: the messages as ``messages`` (the message table);
        ``raw=True``: the records byte-exact as ``records`` (:class:`rmqlog.results.StoredRecords`:
        the bytes RocketMQ's pull responses carry, with their commitlog offsets, sizes and queue
        offsets). ``disk`` (:class:`rmqlog.results.DiskLimits`): RocketMQ's limits for records
        it would read from disk, applied to the units whose records lie that far behind the
        commitlog's end (a broker's pull). ``sql92`` (:func:`rmqlog.filter.compile_filter`):
        only messages whose properties match RocketMQ's SQL92 selector are taken, the others
        scanned past as a tag filter's are (a broker's pull with ``expressionType`` SQL92).
        ``columns`` (names of the message table's columns): ``messages`` holds only those, in
        that order, and the others are not made (a reader that needs few of them: the Spark
        source's ``columns`` option). Records retention deleted while the read was under
        way are skipped and named in ``removed``. Checked as :meth:`get_messages` says; a bad
        argument raises :class:`InvalidArgumentError` (``InvalidTopicError`` for a topic) naming it."""
        self._check_open()
        return self.reader.read_window(
            topic,
            queue_id,
            offset,
            max_count=max_count,
            max_bytes=max_bytes,
            tags=tags,
            until=until,
            check_crc=check_crc,
            raw=raw,
            disk=disk,
            sql92=sql92,
            columns=columns,  # type: ignore[arg-type]
        )

    def read_queue(self, topic: str, queue_id: int, start: int, end: int, *, check_crc: bool | None = None) -> pa.Table:
        """Every message of a queue in ``[start, end)`` (clamped to what exists), as one table;
        checked as :meth:`get_messages` says. A read that retention overtook is clamped again."""
        self._check_open()
        return self.reader.read_queue(topic, queue_id, start, end, check_crc)

    def record_sizes(self, topic: str, queue_id: int, start: int, end: int) -> np.ndarray:
        """The record size (TOTALSIZE, bytes) of each message of ``[start, end)`` of a queue
        (clamped to what it holds), from its consume queue without reading a record (0 for a
        filler slot): what a byte budget is planned with."""
        self._check_open()
        return self.reader.record_sizes(topic, queue_id, start, end)

    def offset_for_timestamp(self, topic: str, queue_id: int, ts_ms: int) -> int:
        """The first queue offset whose store time is at or after ``ts_ms`` (max offset if none).

        Store times never go back in this store, so a binary search over the queue is exact.
        (RocketMQ's own lookup returns the nearest message instead; see docs/format.md.)
        Raises :class:`CorruptQueueError` or :class:`CorruptRecordError` for a damaged unit.
        """
        self._check_open()
        return self.reader.offset_for_timestamp(topic, queue_id, ts_ms)

    def message_by_offset(self, commit_log_offset: int) -> dict[str, Any] | None:
        """The message whose record starts at this commitlog offset, as a dict row; ``None`` if none.

        Its body CRC is checked when ``check_crc_on_read`` is on: a mismatch, or lengths that
        do not add up, raise :class:`CorruptRecordError`.
        """
        self._check_open()
        return self.reader.message_by_offset(commit_log_offset)

    def message_by_id(self, msg_id: str) -> dict[str, Any] | None:
        """The message with this msgId, ``None`` if none: an offset msgId (store host +
        commitlog offset, what a put returns) or a client msgId (the ``UNIQ_KEY`` property,
        found through the index files of every topic). Raises as :meth:`message_by_offset`."""
        self._check_open()
        text_arg("msg_id", msg_id)
        row = self.reader.message_by_offset_id(msg_id)
        if row is None and self.parts.index_service is not None and is_uniq_key(msg_id):
            for topic in self.catalog.topics():
                table = self.query_by_unique_key(topic, msg_id)
                if table.num_rows:
                    return table.to_pylist()[-1]
        return row

    def query_by_time(
        self,
        begin_ms: int,
        end_ms: int | None = None,
        *,
        topics: Iterable[str] | None = None,
        max_count: int = 1000,
    ) -> pa.Table:
        """The messages stored in ``[begin_ms, end_ms]`` (ms; ``None``: no end) across ``topics``
        (default: every topic), oldest first, at most ``max_count``: each queue's range found by
        binary search on store time, no index needed. Raises :class:`InvalidArgumentError` for a
        bad argument, :class:`rmqlog.errors.InvalidTopicError` for a bad topic name."""
        self._check_open()
        # every topic but the one where delayed messages wait (they are not stored "yet")
        if topics is not None and (isinstance(topics, str | bytes) or not isinstance(topics, Iterable)):
            raise InvalidArgumentError(
                f"topics must be an iterable of topic names or None, got {type(topics).__name__}"
            )
        names = (
            [t for t in self.catalog.topics() if t not in WAITING_TOPICS]
            if topics is None
            else [validate_topic(t) for t in topics]
        )
        configured = self.catalog.topics()
        queues = [
            (t, q)
            for t in names
            if t in configured
            for q in range(max(configured[t].read_queue_nums, configured[t].write_queue_nums))
        ]
        end = (1 << 63) - 1 if end_ms is None else end_ms
        return self.reader.messages_between(queues, begin_ms, end, max_count)

    # ------------------------------------------------------------------ close
    def flush(self) -> int:
        """Force everything published to disk: commitlog, consume queues, checkpoint.

        Returns the flushed commitlog offset.
        """
        self._check_open("flush")
        self.flush_service.checkpoint()
        return self.flushed_offset()

    def close(self) -> None:
        """Stop the background services, flush, unmap everything. Idempotent.

        Every close flushes the commitlog (ASYNC_FLUSH's final flush). The last process to
        close the store also syncs the consume queues, writes the checkpoint and deletes
        ``abort``: the next open takes the normal recovery path.
        """
        if self._closed:
            return
        self.services.stop()
        self._closed = True
        if self._owner is None:  # read-only: nothing to flush, no ownership to give up
            self.parts.close_files()
            self.parts.release_locks()
            return
        flushed = False
        try:
            self.flush_service.flush_to(self.published_tail())
            flushed = True
        finally:  # a failed final flush (a full disk, EIO) leaves the store to crash recovery
            # append.state is not fsynced at the last close either: after a power loss a stale
            # one is below flush.state, and recovery keeps what flush.state covers
            self._owner.close(self.flush_service.checkpoint, clean=flushed)
        self.parts.close_files()
        self.parts.release_locks()
