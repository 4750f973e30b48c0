"""Queue selection for the sink: which queue of its topic each row goes to.

- ``hash``: ``abs(javaHashCode(key)) % queues`` where the key is the ``shardingKey`` column or,
  without it, the row's keys joined by spaces: the same key always lands on the same queue,
  so messages of one key keep their order (RocketMQ's ``SelectMessageQueueByHash``; the
  hash equals Java's ``String.hashCode`` for ASCII keys and is a stable hash otherwise).
- ``roundRobin`` (default): rows are spread over the queues in turn.

:func:`route` applies this to a DataFrame and repartitions it by (topic, queueId) so that each
queue is appended by exactly one task; the sink applies the same selection to rows that
arrive without a ``queueId``. The hash is vectorized over the Arrow string buffers (one numpy
pass over the key bytes), never a Python loop per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_MASK32 = np.uint64(0xFFFFFFFF)
_POW31: np.ndarray = np.ones(1, np.uint64)


def _pow31(n: int) -> np.ndarray:
    """31**k mod 2**32 for k < n (cached, grown on demand)."""
    global _POW31
    if len(_POW31) < n:
        out = np.empty(max(n, 2 * len(_POW31)), np.uint64)
        out[0] = 1
        for k in range(1, len(out)):  # once per distinct key length, not per row
            out[k] = (out[k - 1] * np.uint64(31)) & _MASK32
        _POW31 = out
    return _POW31[:n]


def java_hash(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Java ``String.hashCode`` (signed int32, as int64) of each string; 0 for null.

    Computed over UTF-8 bytes: equal to Java's for ASCII strings. ``h = sum(b[i] *
    31**(n-1-i)) mod 2**32``, so each byte's term is independent and one ``reduceat`` sums them.
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    keys = keys.cast(pa.large_string()) if keys.type != pa.large_string() else keys
    n = len(keys)
    out = np.zeros(n, np.int64)
    if n == 0:
        return out
    bufs = keys.buffers()
    offsets = np.frombuffer(bufs[1], np.int64)[keys.offset : keys.offset + n + 1]
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    total = int(offsets[-1] - offsets[0])
    if total:
        raw = data[int(offsets[0]) : int(offsets[-1])].astype(np.uint64)
        row = np.repeat(np.arange(n), lengths)
        exp = (offsets[1:] - offsets[0])[row] - 1 - np.arange(total)
        terms = (raw * _pow31(int(lengths.max()))[exp]) & _MASK32
        nonempty = np.flatnonzero(lengths)
        starts = (offsets[:-1] - offsets[0])[nonempty]
        sums = np.add.reduceat(terms, starts) & _MASK32
        h = sums.astype(np.int64)
        out[nonempty] = np.where(h >= 1 << 31, h - (1 << 32), h)
    if keys.null_count:
        out[np.asarray(keys.is_null())] = 0
    return out


def hash_queue(keys: pa.Array | pa.ChunkedArray, queue_counts: np.ndarray) -> pa.Array:
    """Queue id per row from its key's hash; null where the key is null (round robin then)."""
    h = np.abs(java_hash(keys))
    q = (h % np.maximum(queue_counts, 1)).astype(np.int32)
    mask = np.asarray(pc.is_null(keys)) if keys.null_count else None
    return pa.array(q, pa.int32(), mask=mask)


def keys_as_string(keys: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A list<string> keys column joined by spaces (its hashing key); strings pass through."""
    if pa.types.is_list(keys.type) or pa.types.is_large_list(keys.type):
        joined = pc.binary_join(keys, " ")
        return pc.if_else(pc.equal(joined, ""), pa.scalar(None, pa.string()), joined)
    return keys


def round_robin_queue(n: int, first: int, queue_counts: np.ndarray) -> pa.Array:
    return pa.array(((np.arange(n, dtype=np.int64) + first) % np.maximum(queue_counts, 1)).astype(np.int32))


def route(
    df: DataFrame,
    path: str,
    *,
    topic: str | None = None,
    queue_selector: str = "roundRobin",
    sharding_key: str | None = None,
    num_partitions: int | None = None,
) -> DataFrame:
    """Give every row a ``queueId`` and repartition by (topic, queueId) before writing.

    Rows that already have a non-null ``queueId`` keep it. ``topic`` fills a missing topic
    column. After this each queue's rows are in one partition, so one task appends each
    queue and the rows of one key keep their relative order. Queue counts come from the
    store's ``topics.json`` (unknown topics: the store's default, as auto-creation would do).
    """
    from pyspark.sql import functions as F

    from store import MessageStore

    from .options import QUEUE_SELECTORS

    if queue_selector not in QUEUE_SELECTORS:
        from .errors import RmqLogOptionError

        raise RmqLogOptionError("queueSelector", f"must be one of {', '.join(QUEUE_SELECTORS)}, got {queue_selector!r}")
    if topic is not None:
        df = df.withColumn("topic", F.coalesce(F.col("topic"), F.lit(topic)) if "topic" in df.columns else F.lit(topic))
    if "topic" not in df.columns:
        from .errors import RmqLogOptionError

        raise RmqLogOptionError("topic", "the DataFrame has no topic column and no topic was given")
    with MessageStore.open(path) as ms:
        counts = {t: c.write_queue_nums for t, c in ms.topics().items()}
        default = ms.config.default_topic_queue_nums
    if "queueId" not in df.columns:
        df = df.withColumn("queueId", F.lit(None).cast("int"))
    else:
        df = df.withColumn("queueId", F.col("queueId").cast("int"))
    key_col = sharding_key if sharding_key is not None else "keys"
    if queue_selector == "hash" and key_col not in df.columns:
        from .errors import RmqLogOptionError

        raise RmqLogOptionError("shardingKey", f"column {key_col!r} not found for queueSelector=hash")
    schema = df.schema
    selector = queue_selector

    def assign(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        seen = (ctx.partitionId() * 7919) if ctx is not None else 0  # spread partitions' first queues
        for b in batches:
            topics = b.column(b.schema.get_field_index("topic"))
            enc = pc.dictionary_encode(topics)
            n_of = np.array([counts.get(t, default) for t in enc.dictionary.to_pylist()], np.int64)
            qc = n_of[np.asarray(enc.indices.fill_null(0), np.int64)] if len(n_of) else np.ones(len(b), np.int64)
            if selector == "hash":
                chosen = hash_queue(keys_as_string(b.column(b.schema.get_field_index(key_col))), qc)
            else:
                chosen = round_robin_queue(len(b), seen, qc)
            seen += len(b)
            i = b.schema.get_field_index("queueId")
            q = pc.coalesce(b.column(i), chosen)
            yield b.set_column(i, "queueId", q)

    routed = df.mapInArrow(assign, schema)
    n = num_partitions or max(1, sum(counts.values()) if counts else default)
    return routed.repartition(n, "topic", "queueId")
