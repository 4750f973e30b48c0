"""``spark.readStream.format("rmqlog")``: the stream reader, over a queue source
(:mod:`spark_rmq.queue_source`: a store's files or brokers) kept for the query's life.

Guarantees:

- **Deterministic**: the same start/end offsets give the same rows (a queue's units below
  its end never change; offsets are consume-queue logical offsets, never byte positions).
- **Everything written is readable**: before planning, the queue source is refreshed (a
  store's dispatcher runs), so messages appended by any writer become visible.
- **No silent loss**: with ``failOnDataLoss=true`` (default), a range retention deleted
  fails the query with :class:`spark_rmq.errors.QueryDataLossError` naming the queue and offsets.
- **Admission control**: ``maxMessagesPerTrigger`` / ``maxBytesPerTrigger`` are split over
  queues in proportion to their backlog (none starved; bytes exact from consume-queue sizes);
  ``minMessagesPerTrigger`` waits for enough data up to ``maxTriggerDelay``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from rmqlog import SystemClock

from .batch_reader import busy_call, packed_partitions
from .offsets import (
    Offsets,
    check_data_loss,
    check_went_back,
    plan_ranges,
    resolve,
    sorted_offsets,
    split_bytes,
    split_key,
    split_messages,
)
from .options import LATEST, SourceOptions
from .queue_source import QueueSource, backend_for
from .read import read_partition


class RmqLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("rmqlog")``.

    Runs on the driver in Spark's long-lived planner process (``initialOffset``,
    ``latestOffset``, ``partitions``, ``commit``); ``read`` runs on executors and uses only
    its partition. Queues that appear mid-stream (new topics matching, resized topics) are
    read from their first offset.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.connect = backend_for(opts)
        self._source: QueueSource | None = None
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
        state["_source"] = None  # an open store (mapped files, fds) or connections never travel
        state["clock"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.clock = SystemClock().monotonic

    @property
    def source(self) -> QueueSource:
        """The reader's own queue source (closed by :meth:`stop`, or, a store, with the
        process's stores when Spark ends the process: it never calls ``stop`` there)."""
        if self._source is None:
            self._source = self.connect(self.opts)
        return self._source

    def _available(self) -> tuple[list[tuple[str, int]], Offsets]:
        """Deliver what is due (``deliverDue``), dispatch, then every queue the query reads and
        its current end: a delayed message enters its real queue once due, and only then."""
        src = self.source
        src.refresh(deliver=self.opts.deliver_due)
        queues = src.queues()
        return queues, sorted_offsets({k: hi for k, (_lo, hi) in src.reachable_bounds(queues).items()})

    @busy_call
    def initialOffset(self) -> dict:
        src = self.source
        src.refresh(deliver=False)
        return resolve(src, src.queues(), self.opts.starting, self.opts.starting_timestamp, LATEST, "startingOffsets")

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_messages:
            return ReadMaxRows(self.opts.max_messages)
        if self.opts.max_bytes:
            return ReadMaxBytes(self.opts.max_bytes)
        if self.opts.min_messages:
            return ReadMinRows(self.opts.min_messages)
        return ReadAllAvailable()

    @busy_call
    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available()[1]

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    @busy_call
    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._commit_group(start)  # ``start`` is the end of the last batch Spark completed
        queues, latest = self._available()
        self._latest = latest
        first = {k: lo for k, (lo, _hi) in self.source.reachable_bounds(queues).items()}
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
                begin[k] = check_went_back(
                    k, begin[k], latest[k], self.opts.fail_on_data_loss, warn=self._went_back.get(k) != seen
                )
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
            end = split_bytes(self.source, begin, end, max_bytes)
        if any(end[k] > begin[k] for k in end):
            self._last_trigger = now
        return end

    @busy_call
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        opts = self.opts
        keys = sorted(end, key=split_key)
        first = self.source.reachable_bounds([split_key(k) for k in keys])
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
        return packed_partitions(lambda group: self.source.partitions(opts, group), ranges, planned, opts.pack_budget)

    def _skip(self, key: str, start: int, first: int) -> int:
        """:func:`check_data_loss` for ``start`` below ``first``, warning once per skip."""
        first = check_data_loss(key, start, first, self.opts.fail_on_data_loss, warn=self._skipped.get(key) != first)
        self._skipped[key] = first
        return first

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    @busy_call
    def commit(self, end: dict) -> None:
        """With ``group`` set, record the processed offsets (a store: config/consumerOffset.json;
        brokers: UPDATE_CONSUMER_OFFSET)."""
        self._commit_group(end)

    def _commit_group(self, end: dict) -> None:
        """Publish ``end`` as the group's progress (for RocketMQ-style lag tools).

        Spark calls :meth:`commit` for a batch only when it plans the next one, and an
        AvailableNow query ends without it; the ``start`` of ``latestOffset`` is the same
        information (the end of the last completed batch) and comes once more before an
        AvailableNow query stops, so both paths publish it. Unchanged offsets are skipped.
        """
        group = self.opts.group
        if group is None or not end:
            return
        offsets = sorted_offsets(end)
        if offsets == self._committed:
            return
        for k, v in offsets.items():
            if self._committed.get(k) != v:
                name, qid = split_key(k)
                self.source.commit_offset(group, name, qid, v)
        self._committed = offsets

    @busy_call
    def stop(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None
