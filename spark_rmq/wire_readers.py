"""The ``rmqlog`` source's readers over the wire (option ``nameServer``): the batch readers
(with and without filter pushdown) and the stream reader, planning from the brokers
(:mod:`spark_rmq.wire_source`) and reading on executors by pulls (:mod:`spark_rmq.wire_read`).

They are the path readers of :mod:`spark_rmq.source` with the store's questions asked of the
brokers instead (:class:`~spark_rmq.wire_source.BrokerQueues` answers them as a store does):
the same planning, admission control, data-loss policy and group commits, with offsets keyed
``"topic/brokerName/queueId"``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from rmqlog import MESSAGE_SCHEMA
from rmqnet.client import Admin, TopicNotFoundError

from .offsets import (
    Offsets,
    bounds,
    check_data_loss,
    plan_ranges,
    resolve,
    sorted_offsets,
    split_key,
)
from .options import EARLIEST, LATEST, SourceOptions
from .read import PackedRanges, read_packed
from .source import RmqLogBatchReader, RmqLogFilteringReader, RmqLogStreamReader, packed_partitions
from .wire_read import WireRange, read_wire_range
from .wire_source import BrokerQueues, refuse_wire_options, split_wire_name

#: messages asked of each broker for a key (QUERY_MESSAGE's ``maxNum``; a broker also caps it
#: by its ``maxMsgsNumBatch``)
KEY_LOOKUP_MAX = 64


@dataclass(frozen=True)
class WireKeyLookup(InputPartition):
    """The batch options ``key`` / ``msgId`` over the wire: QUERY_MESSAGE (12) on every
    broker of each topic's route."""

    name_server: str
    topics: tuple[str, ...]
    key: str
    unique: bool = False
    columns: tuple[str, ...] | None = None


def read_wire_key_lookup(part: WireKeyLookup, schema: pa.Schema = MESSAGE_SCHEMA) -> Iterator[pa.RecordBatch]:
    """The messages the brokers find for the key (by their index files), per topic."""
    with Admin(part.name_server) as admin:
        for topic in part.topics:
            try:
                table = admin.query_by_key(topic, part.key, max_num=KEY_LOOKUP_MAX, unique=part.unique)
            except TopicNotFoundError:
                continue
            if part.columns is not None:
                table = table.select(list(part.columns))
            if table.num_rows:
                yield from (table if table.schema.equals(schema) or part.columns else table.cast(schema)).to_batches()


def wire_partitions(opts: SourceOptions, ranges: list[tuple[str, int, int]], **kw: Any) -> list[InputPartition]:
    """One :class:`WireRange` per planned range."""
    assert opts.name_server is not None
    tags = tuple(sorted(opts.tags)) if opts.tags else None
    parts: list[InputPartition] = []
    for key, a, b in ranges:
        name, qid = split_key(key)
        topic, broker = split_wire_name(name)
        parts.append(WireRange(opts.name_server, topic, broker, qid, a, b, tags, opts.fail_on_data_loss,
                               opts.read_batch_rows, sql92=opts.sql92, columns=opts.columns, **kw))
    return parts


class _WireBatch(RmqLogBatchReader):
    """``spark.read`` over the wire: [startingOffsets, endingOffsets) of each broker's queue."""

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        assert opts.name_server is not None
        refuse_wire_options(opts)
        if opts.key is not None or opts.msg_id is not None:
            topics = tuple(t for t in opts.topics or () if self.topic_in is None or t in self.topic_in)
            return [WireKeyLookup(opts.name_server, topics, opts.msg_id or opts.key or "", opts.msg_id is not None,
                                  opts.columns)]
        src = BrokerQueues(opts.name_server)
        try:
            queues = [(n, q) for n, q in src.queues(opts) if self._wanted(split_wire_name(n)[0], q)]
            first = bounds(src, queues)
            start = resolve(src, queues, opts.starting, opts.starting_timestamp, EARLIEST, "startingOffsets")
            end = resolve(src, queues, opts.ending, opts.ending_timestamp, LATEST, "endingOffsets")
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
            lambda group: wire_partitions(tag_opts, group, ts_from_ms=self.ts_from_ms, ts_until_ms=self.ts_until_ms),
            plan_ranges(start, end, opts.max_messages_per_partition), {k: end[k] - start[k] for k in end},
            opts.pack_budget)
        return parts or [WireRange(opts.name_server, "", "", 0, 0, 0, columns=opts.columns)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, WireKeyLookup):
            return read_wire_key_lookup(partition)
        if isinstance(partition, PackedRanges):
            return read_packed(partition, read_wire_range)
        assert isinstance(partition, WireRange)
        return read_wire_range(partition)


class RmqLogWireBatchReader(_WireBatch):
    """The batch reader over the wire without filter pushdown."""


class RmqLogWireFilteringReader(_WireBatch, RmqLogFilteringReader):
    """The batch reader over the wire with filter pushdown (``topic``, ``queueId``, ``tags``,
    ``storeTimestamp``: as :class:`spark_rmq.source.RmqLogFilteringReader`; store times
    through SEARCH_OFFSET_BY_TIMESTAMP)."""


class RmqLogWireStreamReader(RmqLogStreamReader):
    """``spark.readStream`` over the wire; the driver's side keeps one
    :class:`~spark_rmq.wire_source.BrokerQueues` (connections, not pickled)."""

    def __init__(self, opts: SourceOptions) -> None:
        refuse_wire_options(opts)
        super().__init__(opts)
        self._brokers: BrokerQueues | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_brokers"] = None
        return state

    @property
    def brokers(self) -> BrokerQueues:
        if self._brokers is None:
            assert self.opts.name_server is not None
            self._brokers = BrokerQueues(self.opts.name_server)
        return self._brokers

    def _available(self) -> tuple[list[tuple[str, int]], Offsets]:
        queues = self.brokers.queues(self.opts)  # each broker dispatches and delivers by itself
        return queues, sorted_offsets({k: hi for k, (_lo, hi) in self.brokers.reachable_bounds(queues).items()})

    def initialOffset(self) -> dict:
        queues = self.brokers.queues(self.opts)
        return resolve(self.brokers, queues, self.opts.starting, self.opts.starting_timestamp, LATEST, "startingOffsets")

    def _bounds(self, queues: list[tuple[str, int]]) -> dict[str, tuple[int, int]]:
        return self.brokers.reachable_bounds(queues)

    def _make_partitions(self, ranges: list[tuple[str, int, int]]) -> list[InputPartition]:
        return wire_partitions(self.opts, ranges)

    def _commit_one(self, key: str, offset: int) -> None:
        name, qid = split_key(key)
        self.brokers.commit_offset(self.opts.group or "", name, qid, offset)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, PackedRanges):
            return read_packed(partition, read_wire_range)
        assert isinstance(partition, WireRange)
        return read_wire_range(partition)

    def stop(self) -> None:
        if self._brokers is not None:
            self._brokers.close()
            self._brokers = None

