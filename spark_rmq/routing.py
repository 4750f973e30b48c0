"""Queue selection for the sink: which queue of its topic each row goes to.

- ``hash``: ``abs(javaHashCode(key)) % queues`` where the key is the ``shardingKey`` column or,
  without it, the row's keys joined by spaces: the same key always lands on the same queue,
  so messages of one key keep their order (RocketMQ's ``SelectMessageQueueByHash``; the
  hash is Java's ``String.hashCode``, over UTF-16 code units, for any key).
- ``roundRobin`` (default): rows are spread over the queues in turn.

:func:`route` applies this to a DataFrame and repartitions it by (topic, queueId) so that each
queue is appended by exactly one task; the sink applies the same selection to rows that
arrive without a ``queueId``. In the sink the hash is vectorized over the Arrow string buffers (one
numpy pass over the key bytes); in :func:`route` it is a Spark SQL expression computing the
same value, so both place a key on the same queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

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

    Java hashes the UTF-16 code units: ``h = sum(u[i] * 31**(m-1-i)) mod 2**32``. ASCII keys'
    bytes are their code units; otherwise the UTF-8 bytes are decoded to code points and
    split into UTF-16 units (two, a surrogate pair, above U+FFFF), all vectorized. Each
    unit's term is independent, so one ``reduceat`` sums a row.
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
    raw = data[int(offsets[0]) : int(offsets[-1])]
    bounds = offsets - offsets[0]
    if len(raw) and (raw >= 0x80).any():
        units, bounds = _utf16_units(raw, bounds)
    else:
        units = raw
    lengths = np.diff(bounds)
    total = int(bounds[-1])
    if total:
        row = np.repeat(np.arange(n), lengths)
        exp = bounds[1:][row] - 1 - np.arange(total)
        terms = (units.astype(np.uint64) * _pow31(int(lengths.max()))[exp]) & _MASK32
        nonempty = np.flatnonzero(lengths)
        sums = np.add.reduceat(terms, bounds[:-1][nonempty]) & _MASK32
        h = sums.astype(np.int64)
        out[nonempty] = np.where(h >= 1 << 31, h - (1 << 32), h)
    if keys.null_count:
        out[np.asarray(keys.is_null())] = 0
    return out


def _utf16_units(raw: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """UTF-16 code units of UTF-8 bytes ``raw`` and the rows' new bounds (row ``r`` was bytes
    ``bounds[r]:bounds[r+1]``). Arrow strings are valid UTF-8: every code point starts with a
    byte that is not ``10xxxxxx``, and its lead byte says how many bytes follow."""
    starts = np.flatnonzero((raw & 0xC0) != 0x80)
    lead = raw[starts].astype(np.int64)
    width = 1 + (lead >= 0xC0).astype(np.int64) + (lead >= 0xE0) + (lead >= 0xF0)
    cp = lead & np.array([0, 0x7F, 0x1F, 0x0F, 0x07], np.int64)[width]
    padded = np.concatenate([raw, np.zeros(3, np.uint8)]).astype(np.int64)
    for k in (1, 2, 3):  # continuation bytes: 6 bits each
        more = width > k
        cp = np.where(more, (cp << 6) | (padded[starts + k] & 0x3F), cp)
    pair = cp >= 0x10000
    count = 1 + pair.astype(np.int64)
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    units = np.empty(int(count.sum()), np.int64)
    v = cp - 0x10000
    units[first] = np.where(pair, 0xD800 + (v >> 10), cp)
    units[first[pair] + 1] = 0xDC00 + (v[pair] & 0x3FF)
    # a row's new bound: the units of the code points that start before its old bound
    unit_end = np.concatenate([[0], np.cumsum(count)])
    return units, unit_end[np.searchsorted(starts, bounds)]


def hash_queue(keys: pa.Array | pa.ChunkedArray, queue_counts: np.ndarray) -> pa.Array:
    """Queue id per row from its key's hash; null where the key is null (round robin then)."""
    h = np.abs(java_hash(keys))
    q = (h % np.maximum(queue_counts, 1)).astype(np.int32)
    mask = np.asarray(pc.is_null(keys)) if keys.null_count else None
    return pa.array(q, pa.int32(), mask=mask)


#: The list type keys are joined in: every list of strings casts to it, whatever its offsets'
#: width, its field's name or nullability (Spark sends ``array(col)`` of a non-nullable column
#: as ``list<element: string not null>``, which ``binary_join`` has no kernel for).
KEY_LIST = pa.large_list(pa.large_string())
_SPACE = pa.scalar(" ", pa.large_string())


def is_key_list(t: pa.DataType) -> bool:
    """A list or large_list of strings (or of nulls): what the store accepts as a keys column."""
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    v = t.value_type
    if pa.types.is_dictionary(v):
        v = v.value_type
    return pa.types.is_string(v) or pa.types.is_large_string(v) or pa.types.is_null(v)


def keys_as_string(keys: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A keys column as its hashing key: a list of strings joined by spaces (null if it has no
    key, or a null key: the store rejects those), a string as it is."""
    if is_key_list(keys.type):
        joined = pc.binary_join(keys.cast(KEY_LIST), _SPACE)
        return pc.if_else(pc.equal(joined, ""), pa.scalar(None, joined.type), joined)
    return keys


def java_hash_column(key: Column) -> Column:
    """Java ``String.hashCode`` of a string column in Spark SQL (same as :func:`java_hash`).

    Kept in Spark expressions (no Python UDF, no pandas): a fold over the characters (code
    points: ``ascii`` of a one-character substring is its code point) in 64-bit arithmetic
    reduced mod 2**32 at each step (ANSI mode forbids int overflow), a character above
    U+FFFF counting as its two UTF-16 surrogates as in Java; then turned into a signed 32-bit
    value. Null for a null key.
    """
    from pyspark.sql import functions as F

    m = F.lit(1 << 32)

    def step(acc: Column, c: Column) -> Column:
        bmp = F.pmod(acc * 31 + c, m)
        hi, lo = F.lit(0xD800) + F.shiftright(c - 0x10000, 10), F.lit(0xDC00) + F.pmod(c - 0x10000, F.lit(1024))
        return F.when(c < 0x10000, bmp).otherwise(F.pmod(F.pmod(acc * 31 + hi, m) * 31 + lo, m))

    folded = F.aggregate(
        F.sequence(F.lit(1), F.greatest(F.length(key), F.lit(1))),
        F.lit(0).cast("bigint"),
        lambda acc, i: F.when(
            i <= F.length(key),
            step(acc, F.ascii(F.substring(key, i, 1)).cast("bigint")),
        ).otherwise(acc),
    )
    return F.when(key.isNotNull(), F.when(folded >= 1 << 31, folded - (1 << 32)).otherwise(folded))


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
    from pyspark.sql.types import ArrayType

    from rmqlog import MessageStore

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
    pairs = [x for t, c in sorted(counts.items()) for x in (F.lit(t), F.lit(c))]
    queues = F.coalesce(F.element_at(F.create_map(*pairs), F.col("topic")), F.lit(default)) if pairs else F.lit(default)
    if queue_selector == "hash":
        key = F.col(key_col)
        if isinstance(df.schema[key_col].dataType, ArrayType):
            key = F.when(F.size(key) > 0, F.array_join(key, " "))
        chosen = F.pmod(F.abs(java_hash_column(key.cast("string"))), queues).cast("int")
    else:
        chosen = F.pmod(F.monotonically_increasing_id(), queues).cast("int")
    routed = df.withColumn("queueId", F.coalesce(F.col("queueId"), chosen))
    n = num_partitions or max(1, sum(counts.values()) if counts else default)
    return routed.repartition(n, "topic", "queueId")
