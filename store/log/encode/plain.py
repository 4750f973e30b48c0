"""The usual small put, encoded and packed by one call of the C helper (``pack_plain``).

A *plain* batch: columns ``topic`` (string, one value, a valid name) and ``body`` (binary),
neither with nulls, of one chunk each, and maybe an integer ``queueId`` of nulls only (as a
Spark sink sends it); one write chunk (at most :data:`~rmqlog.log.encode.crc.MIN_CHUNK_ROWS`
rows, or bodies of at most :data:`~rmqlog.log.encode.crc.CRC_CHUNK_BYTES`: larger batches gain
from the general path's pipelining); the topic exists or may be created. Its records are what
the general path makes of it, byte for byte but for the generated ids and the timestamps:
queue ids round robin, flag 0, BORNTIMESTAMP now, properties just ``UNIQ_KEY``. They are
packed before the append lock, like :meth:`rmqlog.log.encode.batch.EncodedBatch.prepack`; the
lock patches three fields in. Anything else (or anything wrong: the general path then names
the bad row) is not plain, and :func:`prepare_plain` returns ``None``.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from ...paths import topic_problem
from ..msgid import UNIQ_PROPERTY_WIDTH, UniqKeyGenerator
from . import native
from .arrays import all_equal, int64_filled
from .batch import EncodedBatch
from .columns import QueueCounts, RoundRobin
from .crc import CRC_CHUNK_BYTES, LARGE_BODY, MIN_CHUNK_ROWS, BodyCrcs
from .header import HeaderColumns, plain_template, sys_flag

#: The per-message end of a generated UNIQ_KEY item: the sequence's 12 hex digits and \x02.
_UNIQ_TAIL = 13
_PLAIN_COLUMNS = frozenset(("topic", "body"))


@functools.lru_cache(maxsize=1024)
def _plain_trailer_head(topic: str, uniq_head: bytes) -> bytes:
    """TOPICLEN, TOPIC, PROPERTIESLENGTH (just the generated UNIQ_KEY) and the fixed part of
    the UNIQ_KEY item: a plain record's trailer up to the id's 12 per-message hex digits."""
    assert len(uniq_head) + _UNIQ_TAIL == UNIQ_PROPERTY_WIDTH
    t = topic.encode()
    return bytes([len(t)]) + t + UNIQ_PROPERTY_WIDTH.to_bytes(2, "big") + uniq_head


def _plain_columns(table: pa.Table | pa.RecordBatch) -> tuple[pa.StringArray, pa.BinaryArray] | None:
    """(topic, body) of a table shaped as a plain batch (see the module docstring), else ``None``."""
    names = table.column_names
    if (
        len(names) == 3 and "queueId" in names and len(set(names)) == 3
    ):  # all null (as a Spark sink sends it): round robin
        qid = table.column("queueId")
        if qid.null_count != table.num_rows or not (pa.types.is_integer(qid.type) or pa.types.is_null(qid.type)):
            return None
        names = [name for name in names if name != "queueId"]
    if len(names) != 2 or set(names) != _PLAIN_COLUMNS:
        return None
    topic, body = table.column("topic"), table.column("body")
    if isinstance(topic, pa.ChunkedArray):
        if topic.num_chunks != 1 or body.num_chunks != 1:
            return None
        topic, body = topic.chunk(0), body.chunk(0)
    if not len(topic) or topic.type != pa.string() or body.type != pa.binary() or topic.null_count or body.null_count:
        return None
    return topic, body


def prepare_plain(
    table: pa.Table | pa.RecordBatch,
    queue_counts: QueueCounts,
    max_message_size: int,
    max_record_size: int,
    store_host: bytes,
    born_host: bytes,
    uniq_keys: UniqKeyGenerator,
    round_robin: RoundRobin,
    now_ms: int,
) -> EncodedBatch | None:
    """A plain batch encoded and packed by one call of the C helper; ``None`` when the batch is
    not one (see the module docstring), or without the helper. ``now_ms``: the rows' born time
    (the store's clock)."""
    if native.pack_plain is None or not native.CLMUL or not isinstance(table, pa.Table | pa.RecordBatch):
        return None
    columns = _plain_columns(table)
    if columns is None:
        return None
    topic, body = columns
    n = len(topic)
    buffers = body.buffers()
    data = buffers[2] if buffers[2] is not None else b""
    if n > MIN_CHUNK_ROWS and len(data) > CRC_CHUNK_BYTES:  # several chunks (BodyCrcs' rule)
        return None
    if not all_equal(topic):
        return None
    try:
        name = topic[0].as_py()
    except UnicodeDecodeError:  # bytes that are not UTF-8: the general path names the row
        return None
    if topic_problem(name) is not None:
        return None
    dt, template = plain_template(born_host, store_host)
    head = _plain_trailer_head(name, uniq_keys.property_head)
    fixed = dt.itemsize + len(head) + _UNIQ_TAIL  # a record's bytes beyond its body
    max_body = min(max_message_size, max_record_size - fixed)
    assert native.longest_value is not None  # built with pack_plain
    if native.longest_value(buffers[1], body.offset, n, len(data)) > max_body:
        return None  # before the round robin moves on
    count = queue_counts([name])[0]
    if count <= 0:
        return None
    first = round_robin(name, count, n)
    lengths, starts, queue_id = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int32)
    packed = native.pack_plain(
        template,
        now_ms,
        data,
        buffers[1],
        body.offset,
        n,
        head,
        uniq_keys.reserve(n),
        first,
        count,
        max_body,
        lengths,
        starts,
        queue_id,
    )
    assert packed is not None, "longest_value checked the bodies"
    header = HeaderColumns(
        dtype=dt,
        lengths=lengths,
        queue_id=queue_id,
        flag=np.zeros(n, np.int64),
        born=int64_filled(n, now_ms),
        body_len=lengths - fixed,
        sys_flag=sys_flag(born_host, store_host),
        born_host=born_host,
        store_host=store_host,
    )
    return EncodedBatch(
        n=n,
        topics=[name],
        topic_index=np.zeros(n, np.int64),
        queue_id=queue_id,
        header=header,
        body=body,
        trailer=[],
        lengths=lengths,
        crcs=BodyCrcs.computed_in_pack(body),
        large_bodies=len(packed) - n * fixed >= LARGE_BODY * n,
        round_robin=(first, count),
        packed=np.frombuffer(packed, np.uint8),
        packed_starts=starts,
        index_from_batch=True,
    )
