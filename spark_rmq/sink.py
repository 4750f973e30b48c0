"""The ``rmqlog`` sink: Arrow writers that append whole batches with the store's vectorized put.

Exactly-once (why it holds):

- Each task appends its whole input with **one** ``put_batches`` call, which is
  all-or-nothing: every Arrow batch is validated and encoded as it arrives (overlapping the
  transfer of the next one), and all are appended under one hold of the append lock and
  published once. So bad input fails the task with the store's typed error (row and field
  named, rows counted across the task) and leaves nothing of that task visible.
- The call is idempotent: ``writer`` = ``"<job or query id>/<partitionId>"`` and
  ``sequence`` = the micro-batch id (streams) or 0 (batch jobs). The store publishes the
  writer's sequence atomically with the data, and skips a batch whose sequence it already
  has. A retried task attempt (same job, same partition) and a micro-batch replayed after a
  restart from the checkpoint (same query id, same batch id, same partition, same rows
  because Spark replays the offsets it logged) are therefore no-ops.
- The query id comes from Spark's local property ``sql.streaming.queryId`` (stable across
  restarts from one checkpoint); batch jobs get a fresh id when the writer is created on the
  driver, shared by all attempts of the job's tasks. The ``writerId`` option replaces it.
- Each task dispatches right after its append (overlapping other tasks), from the batch's own
  fields when the dispatcher has caught up, so the data is readable when the commit returns;
  the driver's ``commit`` runs the dispatcher only when a task could not say it dispatched (a
  replayed attempt appends nothing and says nothing), and an abort always does.

Memory: a task holds at most ``bufferBytes`` (256 MiB) of encoded records; a larger task
takes the store's append lock and writes the rest as it arrives, unseen until its last batch
is published with all of it (:meth:`rmqlog.MessageStore.put_stream`): still all or nothing,
other writers of the store waiting meanwhile. Rejected alternative: appending each Arrow batch
as it arrives with ``sequence = batchId * 2**20 + chunk``: a bad row in a later chunk would
leave the earlier chunks of the task visible, and a replay in another row order would skip
the wrong rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from rmqlog import InvalidMessageError, MessageStore, check_utf8_column

from .errors import RmqLogOptionError, UnsupportedFieldError
from .options import SinkOptions
from .routing import hash_queue, is_key_list, keys_as_string
from .sink_target import SinkCommit, SinkTarget
from .stores import using

_INT = (IntegerType, LongType, ShortType, ByteType)
_STR = (StringType,)
#: column -> accepted Spark types
INPUT_COLUMNS: dict[str, tuple[type[DataType], ...]] = {
    "body": (BinaryType, StringType),
    "topic": _STR,
    "queueId": _INT,
    "tags": _STR,
    "keys": (ArrayType, StringType),
    "properties": (MapType,),
    "flag": _INT,
    "delayLevel": _INT,
    "deliverTime": (TimestampType, TimestampNTZType),
}
#: columns the store gives no meaning to yet: rejected when non-null (none today: delayLevel,
#: RocketMQ 4's delay level, and deliverTime, RocketMQ 5's timer, pass to the store)
UNSUPPORTED_YET: tuple[str, ...] = ()


def validate_input_schema(schema: StructType, opts: SinkOptions) -> None:
    """Check the DataFrame's columns on the driver, before any task runs.

    Raises :class:`rmqlog.InvalidMessageError` naming the column (unknown column, wrong type,
    missing body or topic).
    """
    names = schema.names
    for f in schema.fields:
        if f.name == opts.sharding_key:
            continue
        allowed = INPUT_COLUMNS.get(f.name)
        if allowed is None:
            raise InvalidMessageError(
                f"unknown column for the rmqlog sink (accepted: {', '.join(INPUT_COLUMNS)}"
                + (f", and the shardingKey column {opts.sharding_key!r})" if opts.sharding_key else ")"),
                row=None,
                field=f.name,
            )
        if not isinstance(f.dataType, allowed):
            raise InvalidMessageError(
                f"has type {f.dataType.simpleString()}, expected {' or '.join(a.__name__ for a in allowed)}",
                row=None,
                field=f.name,
            )
        if (
            f.name == "keys"
            and isinstance(f.dataType, ArrayType)
            and not isinstance(f.dataType.elementType, StringType)
        ):
            raise InvalidMessageError("must be array<string> or a space-separated string", row=None, field="keys")
        if f.name == "properties" and not (
            isinstance(f.dataType, MapType)
            and isinstance(f.dataType.keyType, StringType)
            and isinstance(f.dataType.valueType, StringType)
        ):
            raise InvalidMessageError("must be map<string,string>", row=None, field="properties")
    if "body" not in names:
        raise InvalidMessageError("is required (binary or string)", row=None, field="body")
    if "topic" not in names and opts.topic is None:
        raise InvalidMessageError("is required: add a topic column or set the topic option", row=None, field="topic")
    if opts.sharding_key is not None and opts.sharding_key not in names:
        raise RmqLogOptionError("shardingKey", f"column {opts.sharding_key!r} is not in the DataFrame")


def to_put_table(table: pa.Table, opts: SinkOptions, ms: MessageStore) -> pa.Table:
    """The sink's input rows as a ``put_batch`` table (vectorized; rows keep their order).

    ``delayLevel`` and ``deliverTime`` pass to the store (rows with a level above 0 wait in
    ``SCHEDULE_TOPIC_XXXX``, rows with a delivery time ahead in ``rmq_sys_wheel_timer``, until
    due; the store names the row of a bad value).
    """
    n = table.num_rows
    names = table.column_names
    # string columns the sink computes on itself (splits, hashes) are checked for UTF-8 first,
    # as the store would (naming the row): Arrow's string kernels assume it
    hashed = ("keys", opts.sharding_key, "topic" if opts.queue_selector == "hash" else None)
    for name in [n for n in names if n in hashed]:
        column = _array(table[name])
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            check_utf8_column(column, name, topic=name == "topic")
    for name in UNSUPPORTED_YET:
        if name in names and table[name].null_count < n:
            row = int(np.flatnonzero(np.asarray(pc.is_valid(_array(table[name]))))[0])
            raise UnsupportedFieldError(
                "is not supported yet (RocketMQ 5's timed messages); leave it null or use delayLevel",
                row=row,
                field=name,
            )
    cols: dict[str, pa.ChunkedArray | pa.Array] = {}
    if "topic" in names:
        topic = table["topic"]
        cols["topic"] = pc.fill_null(topic, opts.topic) if opts.topic is not None else topic
    else:
        cols["topic"] = pa.array(np.full(n, opts.topic, object), pa.string())
    cols["body"] = table["body"]
    if "tags" in names:
        cols["tags"] = table["tags"]
    if "keys" in names:
        cols["keys"] = _keys_list(table["keys"])
    if "properties" in names:
        cols["properties"] = table["properties"]
    # flag and queueId go to the store as they are (int64 at most): a narrowing cast here would
    # fail with an untyped Arrow error, the store names the row and field of a bad value
    if "flag" in names:
        cols["flag"] = table["flag"]
    for name in ("delayLevel", "deliverTime"):
        if name in names and table[name].null_count < n:
            cols[name] = table[name]
    qid = pc.cast(table["queueId"], pa.int64()) if "queueId" in names else pa.nulls(n, pa.int64())
    if opts.queue_selector == "hash" and (not isinstance(qid, pa.Array) or qid.null_count) and n:
        key = table[opts.sharding_key] if opts.sharding_key else cols.get("keys")
        if key is not None:
            if not (pa.types.is_string(key.type) or pa.types.is_large_string(key.type) or is_key_list(key.type)):
                key = pc.cast(key, pa.string())
            topics = pc.dictionary_encode(_array(cols["topic"]))
            counts = np.asarray(
                ms.topic_config.planned_queue_counts(
                    topics.dictionary.to_pylist(), unknown=ms.config.default_topic_queue_nums
                ),
                np.int64,
            )
            per_row = counts[np.asarray(topics.indices.fill_null(0), np.int64)] if len(counts) else np.ones(n, np.int64)
            qid = pc.coalesce(qid, hash_queue(keys_as_string(key), per_row).cast(pa.int64()))
    # a null queueId is left to the store's round robin (the default selector)
    cols["queueId"] = qid
    return pa.table(cols)


def _array(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def _keys_list(keys: pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """array<string> passes through; a string is split on spaces (RocketMQ's KEYS format)."""
    if pa.types.is_list(keys.type) or pa.types.is_large_list(keys.type):
        return keys
    trimmed = pc.utf8_trim(keys, " ")
    parts = pc.split_pattern_regex(trimmed, " +")
    return pc.if_else(pc.equal(trimmed, ""), pa.scalar([], pa.list_(pa.string())), parts)


class StoreTarget:
    """Where the sink writes with ``path``: the store's files, one idempotent, all-or-nothing
    append per task (module docstring). The brokers' twin: :class:`spark_rmq.wire_sink.BrokerTarget`."""

    @staticmethod
    def write(
        opts: SinkOptions, iterator: Iterator[pa.RecordBatch], writer: str, sequence: int, partition: int
    ) -> SinkCommit:
        with using(opts.path) as ms:  # a crash inside leaves the store to abnormal recovery
            done = ms.writer_sequence(writer)
            if done is not None and done >= sequence:  # a replay: skip encoding too
                return SinkCommit(partition, writer, sequence, sum(b.num_rows for b in iterator), 0)
            rows = 0

            def tables() -> Iterator[pa.Table]:
                nonlocal rows
                for b in iterator:
                    if b.num_rows:
                        try:
                            yield to_put_table(pa.Table.from_batches([b]), opts, ms)
                        except InvalidMessageError as exc:  # number the row within the task
                            if exc.row is not None:
                                exc.row += rows
                                exc.args = (f"row {exc.row}, field {exc.field!r}: {exc.reason}",)
                            raise
                        rows += b.num_rows

            # Each Arrow batch is encoded as it arrives (overlapping the transfer of the next),
            # and all of them are appended under one lock hold and published once: the task is
            # all-or-nothing and idempotent as a whole. Up to bufferBytes of encoded records are
            # held; a larger task writes the rest as it arrives (the lock held meanwhile). Its
            # units are dispatched right away (while other tasks are still receiving).
            appended = ms.put_stream(
                tables(), writer=writer, sequence=sequence, dispatch=True, buffer_bytes=opts.buffer_bytes
            )
        return SinkCommit(partition, writer, sequence, rows, appended, dispatched=True)

    @staticmethod
    def finish(opts: SinkOptions, messages: list[WriterCommitMessage | None]) -> None:
        """Make every task's rows readable: nothing to do when each task's append returned
        dispatched (the usual case: no store is opened on the driver), else a dispatch."""
        if messages and all(isinstance(m, SinkCommit) and m.dispatched for m in messages):
            return
        with using(opts.path) as ms:
            ms.dispatch()


def sink_target(opts: SinkOptions) -> SinkTarget:
    """The target the options name, picked once when the writer is made; the network side is
    imported only for brokers (the ``--py-files`` zip holds ``rmqlog`` and ``spark_rmq``)."""
    if opts.name_server is None:
        return StoreTarget()
    from .wire_sink import BrokerTarget

    return BrokerTarget()


class _ArrowSink:
    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        self.opts = SinkOptions.parse(options)
        if overwrite:
            raise RmqLogOptionError("mode", "the log is append-only: use mode('append') / outputMode('append')")
        validate_input_schema(schema, self.opts)
        self.target = sink_target(self.opts)
        self.job_id = uuid.uuid4().hex  # a batch job's id; every task attempt gets this same copy

    def _writer_and_sequence(self) -> tuple[str, int]:
        raise NotImplementedError

    def _append(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        writer, sequence = self._writer_and_sequence()
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        return self.target.write(self.opts, iterator, f"{writer}/{partition}", sequence, partition)

    def _dispatch(self, messages: list[WriterCommitMessage | None]) -> None:
        self.target.finish(self.opts, messages)


class RmqLogArrowWriter(_ArrowSink, DataSourceArrowWriter):
    """``df.write.format("rmqlog").mode("append").save()``: atomic and idempotent per task."""

    def _writer_and_sequence(self) -> tuple[str, int]:
        return f"spark-job/{self.opts.writer_id or self.job_id}", 0

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return self._append(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._dispatch(messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Tasks that succeeded stay appended (a log has no rollback); each task is atomic.
        self._dispatch([])


class RmqLogStreamArrowWriter(_ArrowSink, DataSourceStreamArrowWriter):
    """``df.writeStream.format("rmqlog")``: exactly-once per micro-batch (see module doc)."""

    def _writer_and_sequence(self) -> tuple[str, int]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        if batch is None or (query is None and self.opts.writer_id is None):
            raise RuntimeError("rmqlog stream sink: Spark did not pass the query id / batch id to the task")
        return f"spark-query/{self.opts.writer_id or query}", int(batch)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return self._append(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._dispatch(messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._dispatch([])
