"""The read path: messages of a queue by logical offset (RocketMQ's ``getMessage``), queue
bounds, the offset for a time, and a message by commitlog offset or offset msgId.

Every message read is checked against its consume-queue unit, and its body CRC unless
turned off (:mod:`rmqlog.queue.checked_read`): a unit that does not match its record raises
:class:`rmqlog.errors.CorruptQueueError`, a damaged record
:class:`rmqlog.errors.CorruptRecordError`. Bounds are taken under the dispatch lock (shared)
against the commitlog's first offset at that moment; a read that retention overtakes is
answered with what exists once the deletion is done (:class:`rmqlog.errors.MessagesDeletedError`
is caught and the read clamped).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import safe_open
from ..arguments import bool_arg, int_arg, optional_bool_arg, queue_id_arg
from ..errors import (
    CorruptRecordError,
    CorruptStoreError,
    IndexDisabledError,
    InvalidArgumentError,
    MessagesDeletedError,
)
from ..index.lookup import messages_by_key, records_by_key
from ..log.decode import BadRecordError, RecordCheck, RecordColumns, empty_message_table
from ..log.msgid import is_uniq_key, parse_offset_msg_id
from ..log.properties import WAITING_TOPICS
from ..log.record import ScanKind
from ..paths import validate_group, validate_topic
from ..queue.checked_read import read_unit_columns, read_units, unit_store_timestamp
from ..queue.consume_queue import FILLER_SIZE, ConsumeQueue
from ..results import GetMessageResult, StoredRecords
from .window import read_window
from .window_request import WindowRequest

_T = TypeVar("_T")

if TYPE_CHECKING:
    from ..config_files import TopicConfig
    from ..index.index_service import IndexService
    from ..parts import StoreParts


class ReadPlan(NamedTuple):
    """What a read of a queue is planned against (:meth:`QueueReader.read_plan`)."""

    lo: int
    hi: int
    floor: int
    tail: int


class QueueReader:
    """Reads of the store of ``parts`` (see the module docstring)."""

    def __init__(self, parts: StoreParts) -> None:
        self.parts = parts

    def check_crc(self, check_crc: object) -> bool:
        """A call's ``check_crc`` (``None``: the config's ``check_crc_on_read``); else a bool."""
        flag = optional_bool_arg("check_crc", check_crc)
        return self.parts.config.check_crc_on_read if flag is None else flag

    # ------------------------------------------------------------- bounds
    def queue_exists(self, topic: str, queue_id: int) -> bool:
        tc = self.parts.topic_config.get(topic)
        if tc is None:
            self.parts.topic_config.reload()
            tc = self.parts.topic_config.get(topic)
        if tc is not None:
            return 0 <= queue_id < max(tc.read_queue_nums, tc.write_queue_nums) or safe_open.is_folder(
                self.parts.paths.queue_dir(topic, queue_id)
            )
        return safe_open.is_folder(self.parts.paths.queue_dir(topic, queue_id))

    def read_plan(self, cq: ConsumeQueue) -> ReadPlan:
        """A read's plan of a queue: its (first live offset, end), the commitlog's first offset
        they were taken against (every unit from the first live one on points at or after
        it: see :mod:`rmqlog.queue.checked_read`) and the published tail read after them
        (every unit below the end points below it), from one look at the published append
        state. No folder is listed unless the kept listings cannot be right
        (:meth:`rmqlog.log.commitlog.CommitLog.min_offset`,
        :meth:`rmqlog.queue.consume_queue.ConsumeQueue.bounds`, which reads the queue's next
        offset in that state after the end)."""
        parts, key = self.parts, cq.state_key
        tail = [0]

        def published() -> int | None:
            state = parts.published_state()
            if state is None:
                tail[0] = 0
                return None
            tail[0] = state.tail
            return state.queues.get(key, 0)  # (a queue it does not name: nothing published for it)

        lock = parts.dispatch_lock
        lock.acquire(shared=True)  # (as ``held``, without a generator's cost on every read)
        try:
            floor = parts.commitlog.min_offset()
            lo, hi = cq.bounds(floor, published)
        finally:
            lock.release()
        return ReadPlan(lo, hi, floor, tail[0])

    def read_bounds(self, cq: ConsumeQueue) -> tuple[int, int, int]:
        """(first live offset, end, the commitlog's first offset) of :meth:`read_plan`."""
        lo, hi, floor, _ = self.read_plan(cq)
        return lo, hi, floor

    def bounds(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset, max offset) of a queue; arguments validated."""
        validate_topic(topic)
        lo, hi, _ = self.read_bounds(self.parts.consume_queue(topic, queue_id_arg(queue_id)))
        return lo, hi

    # -------------------------------------------------------------- reads
    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tags: str | None,
        check_crc: bool | None,
    ) -> GetMessageResult:
        """RocketMQ's ``getMessage``; see :meth:`rmqlog.MessageStore.get_messages`."""
        validate_group(group)
        req = WindowRequest.of(
            topic, queue_id, offset, max_count=max_count, tags=tags, check_crc=check_crc, crc=self.check_crc
        )
        return self.read_window(req)

    def read_window(self, req: WindowRequest) -> GetMessageResult:
        """A window of a queue (:mod:`rmqlog.access.window`); see :meth:`rmqlog.MessageStore.read_window`."""
        return read_window(self, req)

    def read_units(
        self,
        cq: ConsumeQueue,
        topic: str,
        queue_id: int,
        first: int,
        units: np.ndarray,
        rows: np.ndarray,
        floor: int,
        check_crc: bool | None,
    ) -> pa.Table:
        """The messages of ``units[rows]`` (units read from queue offset ``first``), checked."""
        return self._read_units(read_units, cq, topic, queue_id, first, units, rows, floor, check_crc)

    def read_unit_columns(
        self,
        cq: ConsumeQueue,
        topic: str,
        queue_id: int,
        first: int,
        units: np.ndarray,
        rows: np.ndarray,
        floor: int,
        check_crc: bool | None,
    ) -> list[RecordColumns]:
        """:meth:`read_units` stopping at the records' raw columns (one per commitlog segment)."""
        return self._read_units(read_unit_columns, cq, topic, queue_id, first, units, rows, floor, check_crc)

    def _read_units(
        self,
        read: Callable[..., _T],
        cq: ConsumeQueue,
        topic: str,
        queue_id: int,
        first: int,
        units: np.ndarray,
        rows: np.ndarray,
        floor: int,
        check_crc: bool | None,
    ) -> _T:
        if len(rows) == len(units):  # every unit (the usual case): no copy of them
            sel, logical = units, np.arange(first, first + len(units), dtype=np.int64)
        else:
            sel, logical = units[rows], first + rows.astype(np.int64)
        return read(
            self.parts.commitlog,
            cq,
            sel,
            logical,
            topic=topic,
            queue_id=queue_id,
            floor=floor,
            tail=self.parts.published_tail(),
            check_crc=self.check_crc(check_crc),
        )

    def read_queue(self, topic: str, queue_id: int, start: int, end: int, check_crc: bool | None) -> pa.Table:
        """Every message of a queue in ``[start, end)``; see :meth:`rmqlog.MessageStore.read_queue`."""
        validate_topic(topic)
        queue_id, start, end = queue_id_arg(queue_id), int_arg("start", start), int_arg("end", end)
        check_crc = self.check_crc(check_crc)
        cq = self.parts.consume_queue(topic, queue_id)
        while True:
            lo, hi, floor = self.read_bounds(cq)
            first, last = max(start, lo), min(end, hi)
            if last <= first:
                return empty_message_table()
            units = cq.read(first, last - first)
            if len(units) < last - first and (now_first := self.bounds(topic, queue_id)[0]) > first:
                start = now_first  # its first segments went while it read: clamp again
                continue
            try:
                return self.read_units(
                    cq, topic, queue_id, first, units, np.flatnonzero(units["size"] != FILLER_SIZE), floor, check_crc
                )
            except MessagesDeletedError as gone:
                start = gone.end

    def record_sizes(self, topic: str, queue_id: int, start: int, end: int) -> np.ndarray:
        """TOTALSIZE of each message of ``[start, end)`` of a queue, from its units (0 for a
        filler); clamped to what the queue holds. See :meth:`rmqlog.MessageStore.record_sizes`."""
        validate_topic(topic)
        queue_id, start, end = queue_id_arg(queue_id), int_arg("start", start), int_arg("end", end)
        cq = self.parts.consume_queue(topic, queue_id)
        lo, hi, _ = self.read_bounds(cq)
        first, last = max(start, lo), min(end, hi)
        if last <= first:
            return np.zeros(0, np.int64)
        sizes = cq.read(first, last - first)["size"].astype(np.int64)
        return np.where(sizes == FILLER_SIZE, 0, sizes)

    def offset_for_timestamp(self, topic: str, queue_id: int, ts_ms: int) -> int:
        """Binary search of a queue by store time; see :meth:`rmqlog.MessageStore.offset_for_timestamp`."""
        validate_topic(topic)
        queue_id, ts_ms = queue_id_arg(queue_id), int_arg("ts_ms", ts_ms)
        cq = self.parts.consume_queue(topic, queue_id)
        lo, hi, floor = self.read_bounds(cq)
        tail = self.parts.published_tail()
        left, right = lo, hi
        while left < right:
            mid = (left + right) // 2
            unit = cq.read(mid, 1)
            if not len(unit):
                raise CorruptStoreError(
                    f"consume-queue segment holding queue offset {mid} is missing", path=str(cq.directory)
                )
            if unit["size"][0] == FILLER_SIZE:
                left = mid + 1
                continue
            store_ts = unit_store_timestamp(
                self.parts.commitlog, cq, unit, mid, topic=topic, queue_id=queue_id, floor=floor, tail=tail
            )
            if store_ts < ts_ms:
                left = mid + 1
            else:
                right = mid
        return left

    def query_by_time(
        self,
        configured: Mapping[str, TopicConfig],
        topics: object,
        begin_ms: int,
        end_ms: int | None,
        max_count: int,
    ) -> pa.Table:
        """:meth:`rmqlog.MessageStore.query_by_time` over the ``configured`` topics."""
        if topics is not None and (isinstance(topics, str | bytes) or not isinstance(topics, Iterable)):
            raise InvalidArgumentError(
                f"topics must be an iterable of topic names or None, got {type(topics).__name__}"
            )
        # every topic but the ones where delayed messages wait (they are not stored "yet")
        names = (
            [t for t in configured if t not in WAITING_TOPICS]
            if topics is None
            else [validate_topic(t) for t in topics]
        )
        queues = [
            (t, q)
            for t in names
            if t in configured
            for q in range(max(configured[t].read_queue_nums, configured[t].write_queue_nums))
        ]
        end = (1 << 63) - 1 if end_ms is None else end_ms
        return self.messages_between(queues, begin_ms, end, max_count)

    def messages_between(self, queues: list[tuple[str, int]], begin_ms: int, end_ms: int, max_count: int) -> pa.Table:
        """The messages of ``queues`` stored in ``[begin_ms, end_ms]``, by store time (ties in
        queue order), at most ``max_count``: per queue, its offsets found by binary search on
        store time (:meth:`offset_for_timestamp`), then at most ``max_count`` of them read."""
        begin_ms, end_ms, max_count = (
            int_arg("begin_ms", begin_ms),
            int_arg("end_ms", end_ms),
            int_arg("max_count", max_count),
        )
        if max_count <= 0:
            raise InvalidArgumentError(f"max_count must be positive, got {max_count}")
        tables = []
        for topic, qid in queues:
            lo = self.offset_for_timestamp(topic, qid, begin_ms)
            hi = (
                self.offset_for_timestamp(topic, qid, end_ms + 1)
                if end_ms < (1 << 63) - 1
                else self.bounds(topic, qid)[1]
            )
            if hi > lo:
                tables.append(self.read_queue(topic, qid, lo, min(hi, lo + max_count), None))
        if not tables:
            return empty_message_table()
        table = pa.concat_tables(tables)
        order = pc.sort_indices(table, [("storeTimestamp", "ascending")])  # stable: queue order within a time
        return table.take(order).slice(0, max_count)

    def message_by_offset(self, commit_log_offset: int) -> dict[str, Any] | None:
        """The message whose record starts at this commitlog offset; see the facade's method."""
        commit_log_offset = int_arg("commit_log_offset", commit_log_offset)
        commitlog = self.parts.commitlog
        if commit_log_offset < commitlog.min_offset():
            return None
        tail = self.parts.published_tail()
        rec = commitlog.record_at(int(commit_log_offset), tail)
        if rec is None or rec.kind is not ScanKind.RECORD:
            return None
        try:
            table = commitlog.read_messages(
                np.array([commit_log_offset], np.int64),
                check=RecordCheck(crc=self.parts.config.check_crc_on_read),
                tail=tail,
            )
        except BadRecordError as e:
            raise CorruptRecordError(f"damaged commitlog record: {e.reason}", path=e.path, offset=e.offset) from None
        rows = table.to_pylist()
        return rows[0] if rows else None

    def message_by_offset_id(self, msg_id: str) -> dict[str, Any] | None:
        """The message with this offset msgId (store host + commitlog offset); ``None`` if none."""
        parsed = parse_offset_msg_id(msg_id)
        if parsed is None:
            return None
        _host, offset = parsed
        row = self.message_by_offset(offset)
        # the decoded record's own msgId carries its store host: a foreign host does not match
        if row is None or row["msgId"] != msg_id.upper():
            return None
        return row

    def message_by_id(self, msg_id: str, topics: Callable[[], Iterable[str]]) -> dict[str, Any] | None:
        """:meth:`rmqlog.MessageStore.message_by_id`: an offset msgId, else a client msgId looked
        up through the index files of every topic of ``topics()`` (the last one found)."""
        row = self.message_by_offset_id(msg_id)
        if row is None and self.parts.index_service is not None and is_uniq_key(msg_id):
            for topic in topics():
                table = self.by_key(
                    topic, msg_id, self.parts.config.max_msgs_num_batch, 0, None, None, False, unique=True
                )
                assert isinstance(table, pa.Table)  # (raw=False: the message table)
                if table.num_rows:
                    return table.to_pylist()[-1]
        return row

    # -------------------------------------------------------------- by key
    def by_key(
        self,
        topic: str,
        key: str,
        max_count: int,
        begin_ms: int,
        end_ms: int | None,
        check_crc: object,
        raw: object,
        *,
        unique: bool,
    ) -> pa.Table | StoredRecords:
        """The messages of ``topic`` under ``key`` through the index files (``unique``: the
        client msgId); see :meth:`rmqlog.MessageStore.query_by_key`."""
        validate_topic(topic)
        crc = self.check_crc(check_crc)
        lookup = records_by_key if bool_arg("raw", raw) else messages_by_key
        return lookup(
            self.index(),
            self.parts.commitlog,
            self.parts.published_tail(),
            topic,
            key,
            max_count=max_count,
            begin_ms=begin_ms,
            end_ms=end_ms,
            check_crc=crc,
            unique=unique,
        )

    def index(self) -> IndexService:
        """The store's index; :class:`rmqlog.errors.IndexDisabledError` without one."""
        if self.parts.index_service is None:
            raise IndexDisabledError("this store has no index (message_index_enable is off)")
        return self.parts.index_service
