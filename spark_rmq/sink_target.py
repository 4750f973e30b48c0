"""What a sink task reports (:class:`SinkCommit`) and where the sink writes (:class:`SinkTarget`):
a store's files (:class:`spark_rmq.sink.StoreTarget`, option ``path``) or brokers
(:class:`spark_rmq.wire_sink.BrokerTarget`, option ``nameServer``), picked once when the writer
is made (:func:`spark_rmq.sink.sink_target`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from .options import SinkOptions


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    """What one task appended: ``appended`` is 0 when the append was a replay (a no-op);
    ``dispatched``: the task's append returned with its records dispatched (and everything
    before them: :meth:`rmqlog.MessageStore.put_batches` with ``dispatch=True``)."""

    partition: int
    writer: str
    sequence: int
    rows: int
    appended: int
    dispatched: bool = False


class SinkTarget(Protocol):
    """Where the sink writes (module docstring): ``write`` runs in each task (the task's rows,
    its writer name and sequence), ``finish`` on the driver when the job or micro-batch commits
    or aborts (``messages``: what the tasks reported; none on an abort)."""

    def write(
        self, opts: SinkOptions, iterator: Iterator[pa.RecordBatch], writer: str, sequence: int, partition: int
    ) -> SinkCommit: ...

    def finish(self, opts: SinkOptions, messages: list[WriterCommitMessage | None]) -> None: ...
