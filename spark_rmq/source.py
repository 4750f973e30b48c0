"""The ``rmqlog`` data source: batch and streaming readers (and the entry point to the sink).

Guarantees:

- **Deterministic**: the same start/end offsets give the same rows (a queue's units below
  its end never change; offsets are consume-queue logical offsets, never byte positions).
- **Everything written is readable**: before planning, the driver runs the store's
  dispatcher, so messages appended by any writer (Spark or plain Python) become visible.
- **No silent loss**: with ``failOnDataLoss=true`` (default), a range retention deleted
  fails the query with :class:`spark_rmq.errors.QueryDataLossError` naming the queue and offsets.
- **Reads change no layout**: the store is opened with ``create=False``; a path without a
  store (missing, empty, or another kind of folder) fails the read when it is planned with
  :class:`rmqlog.StoreNotFoundError` naming the path (the CLI's error), and nothing is created.
- **Admission control**: ``maxMessagesPerTrigger`` / ``maxBytesPerTrigger`` are split over
  queues in proportion to their backlog (none starved; bytes exact from consume-queue sizes);
  ``minMessagesPerTrigger`` waits for enough data up to ``maxTriggerDelay``.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from rmqlog import MessageStore, SystemClock

from .offsets import (
    Offsets,
    bounds,
    check_data_loss,
    check_went_back,
    discover_queues,
    pack_ranges,
    plan_ranges,
    resolve,
    sorted_offsets,
    split_bytes,
    split_key,
    split_messages,
)
from .options import EARLIEST, LATEST, SourceOptions, parse_columns
from .read import KeyLookup, PackedRanges, QueueRange, read_key_lookup, read_packed, read_range
from .schema import SPARK_SCHEMA, spark_schema
from .stores import busy, track, untrack

log = logging.getLogger(__name__)

FORMAT_NAME = "rmqlog"


class RmqLogDataSource(DataSource):
    """``format("rmqlog")``: read and write a spark-rmq store (see README for the options)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        # the ``columns`` option's columns, or the whole message schema (other options are
        # checked when the reader is made)
        return spark_schema(list(columns)) if (columns := parse_columns(self.options)) else SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = SourceOptions.parse(self.options, streaming=False)
        pushdown = _filter_pushdown_enabled()
        if opts.name_server is not None:  # over the wire (spark_rmq.wire_readers)
            from .wire_readers import RmqLogWireBatchReader, RmqLogWireFilteringReader

            return RmqLogWireFilteringReader(opts) if pushdown else RmqLogWireBatchReader(opts)
        return RmqLogFilteringReader(opts) if pushdown else RmqLogBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = SourceOptions.parse(self.options, streaming=True)
        if opts.consume_mode == "pop":  # a group's POP, acked at commit (spark_rmq.pop_source)
            from .pop_source import RmqLogPopStreamReader

            return RmqLogPopStreamReader(opts)
        if opts.name_server is not None:
            from .wire_readers import RmqLogWireStreamReader

            return RmqLogWireStreamReader(opts)
        return RmqLogStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import RmqLogArrowWriter

        return RmqLogArrowWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import RmqLogStreamArrowWriter

        return RmqLogStreamArrowWriter(self.options, schema, overwrite)


def _filter_pushdown_enabled() -> bool:
    """Whether Spark will push filters into this reader.

    Spark (4.1+) refuses a reader that implements ``pushFilters`` when
    ``spark.sql.python.filterPushdown.enabled`` is false, and ``DataSource.reader()`` is not
    told the setting. The planner worker that calls us has it as a local variable
    (``enable_pushdown`` in ``plan_data_source_read._main``); the pushdown worker only runs
    when it is enabled. So: look for that frame; absent it, pushdown is on.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_main" and "enable_pushdown" in frame.f_locals:
            return bool(frame.f_locals["enable_pushdown"])
        frame = frame.f_back  # type: ignore[assignment]
    return True


def _open(opts: SourceOptions) -> MessageStore:
    """Open the store to read (inside :func:`busy`). Raises :class:`rmqlog.StoreNotFoundError`
    naming the path where there is no store: a read never creates or changes a store layout.
    ``readOnly``: a read-only open (:mod:`rmqlog.read_only`)."""
    return MessageStore.open(opts.path, create=False, read_only=opts.read_only)


def _dispatch(ms: MessageStore, opts: SourceOptions) -> None:
    """Make every published record readable before planning, unless the read is ``readOnly``
    (it then plans over what is already dispatched)."""
    if not opts.read_only:
        ms.dispatch()


F = TypeVar("F", bound=Callable[..., Any])


def _busy(method: F) -> F:
    """Run a driver-side reader method as a store operation (see :mod:`spark_rmq.stores`)."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with busy():
            return method(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def packed_partitions(
    make: Callable[[list[tuple[str, int, int]]], list[InputPartition]], ranges: list[tuple[str, int, int]],
    planned: Offsets, budget: int,
) -> list[InputPartition]:
    """The tasks of a batch: ``make`` turns ranges into partitions, the ranges of small queues
    packed together (:func:`spark_rmq.offsets.pack_ranges`) into a :class:`PackedRanges`."""
    out: list[InputPartition] = []
    for group in pack_ranges(ranges, planned, budget):
        parts = make(group)
        out.append(parts[0] if len(parts) == 1 else PackedRanges(tuple(parts)))
    return out


def _partitions(opts: SourceOptions, ranges: list[tuple[str, int, int]], **kw: Any) -> list[InputPartition]:
    parts: list[InputPartition] = []
    tags = tuple(sorted(opts.tags)) if opts.tags else None
    for key, a, b in ranges:
        topic, qid = split_key(key)
        parts.append(QueueRange(opts.path, topic, qid, a, b, tags, opts.fail_on_data_loss, opts.read_batch_rows,
                                check_crc=opts.check_crc, read_only=opts.read_only, sql92=opts.sql92,
                                columns=opts.columns, **kw))
    return parts


# ------------------------------------------------------------------------ batch


class RmqLogBatchReader(DataSourceReader):
    """``spark.read.format("rmqlog")``: the range [startingOffsets, endingOffsets) of each queue."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.topic_in: set[str] | None = None
        self.queue_in: set[int] | None = None
        self.queue_min: int | None = None
        self.queue_max: int | None = None
        self.ts_from_ms: int | None = None
        self.ts_until_ms: int | None = None
        self.tags_in: frozenset[str] | None = None

    @_busy
    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        if opts.key is not None or opts.msg_id is not None:
            with _open(opts) as ms:
                _dispatch(ms, opts)  # the index is built by the dispatch
            topics = tuple(t for t in opts.topics or () if self.topic_in is None or t in self.topic_in)
            return [KeyLookup(opts.path, topics, opts.msg_id or opts.key or "", opts.msg_id is not None, opts.check_crc,
                              opts.read_only, opts.columns)]
        with _open(opts) as ms:
            _dispatch(ms, opts)
            queues = [(t, q) for t, q in discover_queues(ms, opts) if self._wanted(t, q)]
            start = resolve(ms, queues, opts.starting, opts.starting_timestamp, EARLIEST, "startingOffsets")
            end = resolve(ms, queues, opts.ending, opts.ending_timestamp, LATEST, "endingOffsets")
            first = bounds(ms, queues)
            if self.ts_from_ms is not None:
                start = {k: max(v, ms.offset_for_timestamp(*split_key(k), self.ts_from_ms)) for k, v in start.items()}
            if self.ts_until_ms is not None:
                end = {k: min(v, ms.offset_for_timestamp(*split_key(k), self.ts_until_ms)) for k, v in end.items()}
        for k in start:
            if end[k] > start[k]:
                start[k] = check_data_loss(k, start[k], first[k][0], opts.fail_on_data_loss)
        tag_opts = self._tag_opts()
        parts = packed_partitions(
            lambda group: _partitions(tag_opts, group, ts_from_ms=self.ts_from_ms, ts_until_ms=self.ts_until_ms),
            plan_ranges(start, end, opts.max_messages_per_partition), {k: end[k] - start[k] for k in end},
            opts.pack_budget)
        return parts or [QueueRange(opts.path, "", 0, 0, 0, columns=opts.columns)]

    def _tag_opts(self) -> SourceOptions:
        if self.tags_in is None:
            return self.opts
        from dataclasses import replace

        tags = self.tags_in if self.opts.tags is None else self.tags_in & self.opts.tags
        # an empty intersection matches nothing: keep an impossible tag rather than "all"
        return replace(self.opts, tags=tags or frozenset({"\x00"}))

    def _wanted(self, topic: str, qid: int) -> bool:
        if self.topic_in is not None and topic not in self.topic_in:
            return False
        if self.queue_in is not None and qid not in self.queue_in:
            return False
        if self.queue_min is not None and qid < self.queue_min:
            return False
        return not (self.queue_max is not None and qid > self.queue_max)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, KeyLookup):
            return read_key_lookup(partition)
        if isinstance(partition, PackedRanges):
            return read_packed(partition, read_range)
        assert isinstance(partition, QueueRange)
        return read_range(partition)


def _ts_ms(value: Any) -> tuple[int, int] | None:
    """A filter's timestamp as (floor ms, microseconds remainder); None unless tz-aware."""
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        return None
    us = round(value.timestamp() * 1_000_000)
    return us // 1000, us % 1000


class RmqLogFilteringReader(RmqLogBatchReader):
    """The batch reader with filter pushdown (when ``spark.sql.python.filterPushdown.enabled``).

    Pushed down exactly (not re-evaluated by Spark): ``topic`` and ``queueId`` (=, IN, and
    ranges on queueId) select queues; ``tags`` (=, IN) joins the tag filter (hash, then exact);
    ``storeTimestamp`` (=, <, <=, >, >=) narrows each queue's offsets by binary search
    (store times never go back within a queue) and cuts rows exactly.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        if self.opts.key is not None or self.opts.msg_id is not None:
            yield from filters  # a key lookup: Spark applies every filter to what it finds
            return
        for f in filters:
            if not self._push(f):
                yield f

    def _push(self, f: Any) -> bool:  # Any: the Filter subclasses' fields are not on Filter
        col = f.attribute[0] if len(f.attribute) == 1 else None
        if col == "topic" and isinstance(f, EqualTo | In):
            values = {f.value} if isinstance(f, EqualTo) else set(f.value)
            self.topic_in = values if self.topic_in is None else self.topic_in & values
            return True
        if col == "tags" and isinstance(f, EqualTo | In):
            tags = frozenset({f.value} if isinstance(f, EqualTo) else f.value)
            self.tags_in = tags if self.tags_in is None else self.tags_in & tags
            return True
        if col == "queueId":
            if isinstance(f, EqualTo | In):
                values = {f.value} if isinstance(f, EqualTo) else set(f.value)
                self.queue_in = values if self.queue_in is None else self.queue_in & values
                return True
            lo = {GreaterThan: 1, GreaterThanOrEqual: 0}.get(type(f))
            hi = {LessThan: -1, LessThanOrEqual: 0}.get(type(f))
            if lo is not None:
                v = int(f.value) + lo
                self.queue_min = v if self.queue_min is None else max(self.queue_min, v)
                return True
            if hi is not None:
                v = int(f.value) + hi
                self.queue_max = v if self.queue_max is None else min(self.queue_max, v)
                return True
            return False
        if col == "storeTimestamp" and isinstance(f, EqualTo | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual):
            t = _ts_ms(f.value)
            if t is None:
                return False
            ms, rem = t
            # store times are whole milliseconds: turn each bound into [from, until) in ms
            lo = hi = None
            if isinstance(f, GreaterThan):
                lo = ms + 1
            elif isinstance(f, GreaterThanOrEqual):
                lo = ms + (1 if rem else 0)
            elif isinstance(f, LessThan):
                hi = ms + (1 if rem else 0)
            elif isinstance(f, LessThanOrEqual):
                hi = ms + 1
            else:  # EqualTo
                lo, hi = (ms, ms + 1) if not rem else (ms + 1, ms + 1)
            if lo is not None:
                self.ts_from_ms = lo if self.ts_from_ms is None else max(self.ts_from_ms, lo)
            if hi is not None:
                self.ts_until_ms = hi if self.ts_until_ms is None else min(self.ts_until_ms, hi)
            return True
        return False


# ------------------------------------------------------------------------ stream


class RmqLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("rmqlog")``.

    Runs on the driver in Spark's long-lived planner process (``initialOffset``,
    ``latestOffset``, ``partitions``, ``commit``); ``read`` runs on executors and uses only
    its partition. Queues that appear mid-stream (new topics matching, resized topics) are
    read from their first offset.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._ms: MessageStore | None = None
        self._target: Offsets | None = None  # Trigger.AvailableNow: where to stop
        self._latest: Offsets | None = None  # for reportLatestOffset
        self._last_trigger: float | None = None
        self._committed: Offsets = {}
        #: queue -> the first offset a skip to was already reported (failOnDataLoss=false):
        #: planning and then partitioning the same batch warn once, not twice
        self._skipped: Offsets = {}
        self._went_back: dict[str, tuple[int, int]] = {}  # queue -> (read to, its end) reported
        #: seconds that never go back, for admission control (``minOffsetsPerTrigger``'s wait);
        #: the driver's own process clock (tests set another)
        self.clock: Callable[[], float] = SystemClock().monotonic

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_ms"] = None  # an open store (mapped files, fds) never travels
        state["clock"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.clock = SystemClock().monotonic

    @property
    def store(self) -> MessageStore:
        """The reader's own open store (closed by :meth:`stop`, or with the process's stores
        when Spark ends the process: it never calls ``stop`` there)."""
        if self._ms is None:
            self._ms = _open(self.opts)
            track(self._ms)
        return self._ms

    def _available(self) -> tuple[list[tuple[str, int]], Offsets]:
        """Deliver what is due (``deliverDue``), dispatch, then every queue the query reads and
        its current end: a delayed message enters its real queue once due, and only then."""
        ms = self.store
        if self.opts.deliver_due:
            ms.deliver_due()
        _dispatch(ms, self.opts)
        queues = discover_queues(ms, self.opts)
        return queues, sorted_offsets({k: hi for k, (_lo, hi) in bounds(ms, queues).items()})

    @_busy
    def initialOffset(self) -> dict:
        ms = self.store
        _dispatch(ms, self.opts)
        queues = discover_queues(ms, self.opts)
        return resolve(ms, queues, self.opts.starting, self.opts.starting_timestamp, LATEST, "startingOffsets")

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_messages:
            return ReadMaxRows(self.opts.max_messages)
        if self.opts.max_bytes:
            return ReadMaxBytes(self.opts.max_bytes)
        if self.opts.min_messages:
            return ReadMinRows(self.opts.min_messages)
        return ReadAllAvailable()

    @_busy
    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available()[1]

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    @_busy
    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._commit_group(start)  # ``start`` is the end of the last batch Spark completed
        queues, latest = self._available()
        self._latest = latest
        first = {k: lo for k, (lo, _hi) in self._bounds(queues).items()}
        begin = {**first, **{k: int(v) for k, v in start.items()}}  # new queues: from their first offset
        if not self.opts.fail_on_data_loss:
            # offsets retention deleted are skipped here, in one step: a limit then admits
            # messages that exist (otherwise each trigger would plan an empty batch inside the
            # deleted range, maxMessagesPerTrigger at a time)
            for k in start:
                if k in first and begin[k] < first[k]:
                    begin[k] = self._skip(k, begin[k], first[k])
        for k in start:  # a queue that now ends below where the query stood
            if k in latest and begin[k] > latest[k]:
                seen = (begin[k], latest[k])  # (planned again for the same batch: warned once)
                begin[k] = check_went_back(k, begin[k], latest[k], self.opts.fail_on_data_loss,
                                           warn=self._went_back.get(k) != seen)
                self._went_back[k] = seen
        end = {k: max(begin[k], latest.get(k, begin[k])) for k in begin}
        if self._target is not None:  # AvailableNow: nothing past the target, new queues included
            end = {k: min(v, max(begin[k], self._target.get(k, begin[k]))) for k, v in end.items()}
        if not isinstance(limit, ReadAllAvailable):
            end = self._admit(begin, end, limit)
        return sorted_offsets(end)

    def _admit(self, begin: Offsets, end: Offsets, limit: ReadLimit) -> Offsets:
        opts = self.opts
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else opts.max_messages
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else opts.max_bytes
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else opts.min_messages
        now = self.clock()
        if self._last_trigger is None:
            self._last_trigger = now
        if min_rows and self._target is None:  # AvailableNow never waits for more data
            available = sum(end[k] - begin[k] for k in end)
            waited_ms = (now - self._last_trigger) * 1000
            if available < min_rows and waited_ms < opts.max_trigger_delay_ms:
                return begin
        if max_rows:
            end = split_messages(begin, end, max_rows)
        if max_bytes:
            end = split_bytes(self.store, begin, end, max_bytes)
        if any(end[k] > begin[k] for k in end):
            self._last_trigger = now
        return end

    @_busy
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        opts = self.opts
        keys = sorted(end, key=split_key)
        first = self._bounds([split_key(k) for k in keys])
        begin = {}
        for k in keys:
            lo = first[k][0] if k in first else None  # (None: a broker out of reach, over the wire)
            s = int(start[k]) if k in start else lo if lo is not None else int(end[k])
            if end[k] > s and lo is not None and s < lo:
                s = self._skip(k, s, lo)
            begin[k] = min(s, int(end[k])) if k in start else s
        # packed by what the logged offsets span (a new queue: its range), not by the ranges
        # retention may have shortened: a replayed batch gets the same tasks
        planned = {k: int(end[k]) - int(start[k]) for k in keys if k in start}
        ranges = plan_ranges(begin, {k: int(end[k]) for k in keys}, opts.max_messages_per_partition)
        return packed_partitions(self._make_partitions, ranges, planned, opts.pack_budget)

    # ---- what the driver asks of the store (the wire reader asks brokers instead) -----

    def _bounds(self, queues: list[tuple[str, int]]) -> dict[str, tuple[int, int]]:
        """(first, end) of each queue, by queue key (over the wire: of each queue whose broker
        answered; the others are left where they stand)."""
        return bounds(self.store, queues)

    def _make_partitions(self, ranges: list[tuple[str, int, int]]) -> list[InputPartition]:
        return list(_partitions(self.opts, ranges))

    def _commit_one(self, key: str, offset: int) -> None:
        topic, qid = split_key(key)
        self.store.commit_offset(self.opts.group or "", topic, qid, offset)

    def _skip(self, key: str, start: int, first: int) -> int:
        """:func:`check_data_loss` for ``start`` below ``first``, warning once per skip."""
        first = check_data_loss(key, start, first, self.opts.fail_on_data_loss, warn=self._skipped.get(key) != first)
        self._skipped[key] = first
        return first

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, PackedRanges):
            return read_packed(partition, read_range)
        assert isinstance(partition, QueueRange)
        return read_range(partition)

    @_busy
    def commit(self, end: dict) -> None:
        """With ``group`` set, record the processed offsets in config/consumerOffset.json."""
        self._commit_group(end)

    def _commit_group(self, end: dict) -> None:
        """Publish ``end`` as the group's progress (for RocketMQ-style lag tools).

        Spark calls :meth:`commit` for a batch only when it plans the next one, and an
        AvailableNow query ends without it; the ``start`` of ``latestOffset`` is the same
        information (the end of the last completed batch) and comes once more before an
        AvailableNow query stops, so both paths publish it. Unchanged offsets are skipped.
        """
        if self.opts.group is None or not end:
            return
        offsets = sorted_offsets(end)
        if offsets == self._committed:
            return
        for k, v in offsets.items():
            if self._committed.get(k) != v:
                self._commit_one(k, v)
        self._committed = offsets

    @_busy
    def stop(self) -> None:
        if self._ms is not None:
            untrack(self._ms)
            self._ms.close()
            self._ms = None
