"""``consumeMode=pop``: a stream of a group's POP consumption (RocketMQ 5), acked when the
micro-batch commits: at-least-once.

The driver pops (:class:`rmqnet.client.PopConsumer`, POP_MESSAGE on the masters of each topic's
broker groups) when Spark asks for the latest offset, until no message is left or
``maxMessagesPerTrigger`` came, and keeps the messages and their receipt handles; the offset is
a count of such batches (``{"batch": n}``). The batch's messages travel to the executors in its
partitions (Arrow IPC, at most ``readBatchRows`` a partition). When Spark reports the batch
complete (``commit``, or the ``start`` of the next ``latestOffset``, which also comes after an
AvailableNow query's last batch) the driver acks its handles. What is not acked (a failed
batch, a stopped query, a driver that died, a batch that took longer than ``invisibleTime``) is
handed out again by the brokers once its invisible time has passed, from the group's POP retry
topic with ``reconsumeTimes + 1``. A batch logged but not committed before a restart is run
again empty (its messages are not in the checkpoint; they come again in a later batch).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from rmqnet.client import PopConsumer, retry_topic

from .options import SourceOptions

#: the most messages one pop asks for (the broker's cap)
POP_NUMS = 32
#: messages a trigger pops at most when ``maxMessagesPerTrigger`` is not set (held by the driver)
DEFAULT_TRIGGER_MESSAGES = 100_000
#: handles acked per call (each one an ACK_MESSAGE; sent together)
ACK_CHUNK = 1024
HANDLE = "receiptHandle"


@dataclass(frozen=True)
class PoppedRows(InputPartition):
    """Messages of one batch for one task, as an Arrow IPC stream (the message schema or the
    ``columns`` asked)."""

    ipc: bytes


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


class RmqLogPopStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("rmqlog").option("consumeMode", "pop")`` (module docstring)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._consumer: PopConsumer | None = None
        #: batch number -> (its messages with their handles)
        self._pending: dict[int, pa.Table] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_consumer"] = None  # a client's connections never travel
        state["_pending"] = {}  # nor the driver's messages (executors read their partitions)
        return state

    @property
    def consumer(self) -> PopConsumer:
        if self._consumer is None:
            assert self.opts.name_server is not None and self.opts.group is not None
            self._consumer = PopConsumer(self.opts.group, self.opts.name_server)
        return self._consumer

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.opts.max_messages) if self.opts.max_messages else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """AvailableNow: each batch pops what is there; the query ends at the first pop of none."""

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        done = int(start["batch"])
        self._ack_through(done)  # ``start`` ends the last batch Spark completed
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else self.opts.max_messages or DEFAULT_TRIGGER_MESSAGES
        tables = self._pop(cap)
        if not tables:
            return {"batch": done}
        batch = max([done, *self._pending]) + 1
        self._pending[batch] = pa.concat_tables(tables)
        return {"batch": batch}

    def _pop(self, cap: int) -> list[pa.Table]:
        """Pops of every topic in turn until none hands out a message or ``cap`` came."""
        opts, got, n = self.opts, [], 0
        tags = " || ".join(sorted(opts.tags)) if opts.tags else "*"
        active = list(opts.topics or ())
        while active and n < cap:
            for topic in list(active):
                result = self.consumer.pop(
                    topic, min(POP_NUMS, cap - n), invisible_ms=opts.invisible_ms, tags=tags, init_mode="MIN"
                )
                if not len(result):
                    active.remove(topic)
                    continue
                got.append(result.messages)
                n += len(result)
                if n >= cap:
                    break
        return got

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        tables = [t for b, t in sorted(self._pending.items()) if int(start["batch"]) < b <= int(end["batch"])]
        if not tables:  # a batch planned before a restart: its messages come again later
            return []
        table = pa.concat_tables(tables).drop_columns([HANDLE])
        if self.opts.columns:
            table = table.select(list(self.opts.columns))
        step = self.opts.read_batch_rows
        return [PoppedRows(_ipc(table.slice(i, step))) for i in range(0, table.num_rows, step)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PoppedRows)
        with pa.ipc.open_stream(partition.ipc) as reader:
            yield from reader

    def commit(self, end: dict) -> None:
        self._ack_through(int(end["batch"]))

    def _ack_through(self, batch: int) -> None:
        """Ack every message of the batches up to ``batch`` (Spark completed them)."""
        for b in sorted(k for k in self._pending if k <= batch):
            table = self._pending[b]
            by_topic: dict[str, list[str]] = {}
            for topic, handle in zip(table.column("topic").to_pylist(), table.column(HANDLE).to_pylist(), strict=True):
                by_topic.setdefault(_subscribed(str(topic), self.opts), []).append(str(handle))
            for topic, handles in by_topic.items():
                for i in range(0, len(handles), ACK_CHUNK):
                    self.consumer.ack_many(topic, handles[i : i + ACK_CHUNK])
            del self._pending[b]

    def stop(self) -> None:
        """Close the client; what is not acked comes again after its invisible time."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def _subscribed(topic: str, opts: SourceOptions) -> str:
    """The topic a popped message was popped for (a retried one's is in its POP retry topic's
    name, ``%RETRY%<group>_<topic>``)."""
    assert opts.group is not None  # (a POP source's options name its group)
    prefix = retry_topic(opts.group) + "_"
    return topic[len(prefix) :] if topic.startswith(prefix) else topic


__all__ = ["RmqLogPopStreamReader", "PoppedRows"]
