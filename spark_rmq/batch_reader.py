"""``spark.read.format("rmqlog")``: the batch reader, and the one with filter pushdown.

Both plan over a queue source (:mod:`spark_rmq.queue_source`: a store's files or brokers),
opened for the planning call and closed after it; the partitions it makes read themselves on
the executors (:func:`spark_rmq.read.read_partition`).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from .offsets import (
    Offsets,
    bounds,
    check_data_loss,
    pack_ranges,
    plan_ranges,
    resolve,
    split_key,
    topic_of,
)
from .options import EARLIEST, LATEST, SourceOptions
from .queue_source import backend_for
from .read import PackedRanges, read_partition
from .stores import busy

F = TypeVar("F", bound=Callable[..., Any])


def busy_call(method: F) -> F:
    """Run a driver-side reader method as a store operation (see :mod:`spark_rmq.stores`)."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with busy():
            return method(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def packed_partitions(
    make: Callable[[list[tuple[str, int, int]]], list[InputPartition]],
    ranges: list[tuple[str, int, int]],
    planned: Offsets,
    budget: int,
) -> list[InputPartition]:
    """The tasks of a batch: ``make`` turns ranges into partitions, the ranges of small queues
    packed together (:func:`spark_rmq.offsets.pack_ranges`) into a :class:`PackedRanges`."""
    out: list[InputPartition] = []
    for group in pack_ranges(ranges, planned, budget):
        parts = make(group)
        out.append(parts[0] if len(parts) == 1 else PackedRanges(tuple(parts)))
    return out


class RmqLogBatchReader(DataSourceReader):
    """``spark.read.format("rmqlog")``: the range [startingOffsets, endingOffsets) of each queue."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.connect = backend_for(opts)
        self.topic_in: set[str] | None = None
        self.queue_in: set[int] | None = None
        self.queue_min: int | None = None
        self.queue_max: int | None = None
        self.ts_from_ms: int | None = None
        self.ts_until_ms: int | None = None
        self.tags_in: frozenset[str] | None = None

    @busy_call
    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        src = self.connect(opts)
        try:
            src.refresh(deliver=False)  # (a key lookup too: the index is built by the dispatch)
            if opts.key is not None or opts.msg_id is not None:
                topics = tuple(t for t in opts.topics or () if self.topic_in is None or t in self.topic_in)
                return [src.key_lookup(topics)]
            queues = [(n, q) for n, q in src.queues() if self._wanted(topic_of(n), q)]
            start = resolve(src, queues, opts.starting, opts.starting_timestamp, EARLIEST, "startingOffsets")
            end = resolve(src, queues, opts.ending, opts.ending_timestamp, LATEST, "endingOffsets")
            first = bounds(src, queues)
            if self.ts_from_ms is not None:
                start = {k: max(v, src.offset_for_timestamp(*split_key(k), self.ts_from_ms)) for k, v in start.items()}
            if self.ts_until_ms is not None:
                end = {k: min(v, src.offset_for_timestamp(*split_key(k), self.ts_until_ms)) for k, v in end.items()}
        finally:
            src.close()
        for k in start:
            if end[k] > start[k]:
                start[k] = check_data_loss(k, start[k], first[k][0], opts.fail_on_data_loss)
        tag_opts = self._tag_opts()
        parts = packed_partitions(
            lambda group: src.partitions(tag_opts, group, ts_from_ms=self.ts_from_ms, ts_until_ms=self.ts_until_ms),
            plan_ranges(start, end, opts.max_messages_per_partition),
            {k: end[k] - start[k] for k in end},
            opts.pack_budget,
        )
        return parts or [src.empty_partition()]

    def _tag_opts(self) -> SourceOptions:
        if self.tags_in is None:
            return self.opts
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
        return read_partition(partition)


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
    (store times never go back within a queue; over the wire SEARCH_OFFSET_BY_TIMESTAMP) and
    cuts rows exactly.
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
            return self._push_queue_id(f)
        if col == "storeTimestamp" and isinstance(
            f, EqualTo | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual
        ):
            return self._push_store_time(f)
        return False

    def _push_queue_id(self, f: Any) -> bool:
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

    def _push_store_time(self, f: Any) -> bool:
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
