"""The put path's entry point before the append lock: a table in, an :class:`EncodedBatch` out
(see :mod:`rmqlog.log.encode` for the whole path)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ...clock import SYSTEM_CLOCK
from ...errors import InvalidMessageError
from ..msgid import UniqKeyGenerator
from ..record import header_dtype
from .batch import EncodedBatch
from .columns import (
    QueueCounts,
    RoundRobin,
    body_column,
    born_column,
    checked_columns,
    flag_column,
    queue_id_column,
    topic_column,
    write_queue_counts,
)
from .crc import LARGE_BODY, BodyCrcs
from .header import HeaderColumns, sys_flag
from .plain import prepare_plain
from .trailer import build_properties, layout_trailer
from .wire_put import WireHeader


def prepare_batch(
    table: pa.Table | pa.RecordBatch,
    *,
    queue_counts: QueueCounts,
    max_message_size: int,
    max_record_size: int,
    store_host: bytes,
    born_host: bytes,
    uniq_keys: UniqKeyGenerator,
    round_robin: RoundRobin,
    last_row_property: tuple[str, str] | None = None,
    plain: bool = True,
    system_properties: pa.Array | None = None,
    born_ms: int | None = None,
    wire: WireHeader | None = None,
) -> EncodedBatch:
    """Validate and encode ``table``; raises :class:`rmqlog.errors.InvalidMessageError` subclasses
    naming the first bad row and field (checked in this order: the columns, topic, body, queue
    id, properties, keys, tags, flag, bornTimestamp, the record's size).

    ``max_record_size`` is the largest record a segment can take (segment size - 8).
    ``round_robin(topic, queues, n)`` returns the first queue for ``n`` rows without queueId.
    ``last_row_property`` (name, value) is added to the properties of the last row only (the
    store's idempotence marker; the caller validated it). ``plain``: a plain batch may be
    packed whole now by :func:`rmqlog.log.encode.plain.prepare_plain` (its copy of the bodies
    then lives until the append; ``put_batches`` of many tables says no, to keep a sink task's
    memory flat). ``system_properties``: the store's own properties per row, pre-joined
    ``name\x01value\x02`` binary strings (empty: none) added as they are (the delay routing's
    ``REAL_TOPIC``/``REAL_QID``/``DELAY``, :mod:`rmqlog.schedule.routing`; not checked here).
    ``born_ms``: the born time of rows without a ``bornTimestamp`` (the store's clock, read by
    the caller; ``None``: the system clock now). ``wire``: the header fields of a wire put
    (:mod:`rmqlog.log.encode.wire_put`: per-row SYSFLAG bits, RECONSUMETIMES, BORNHOST); its
    properties map then holds RocketMQ's system names, checked there.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise InvalidMessageError(
            f"put_batch takes a pyarrow Table or RecordBatch, not {type(table).__name__}", row=None, field="*"
        )
    now_ms = SYSTEM_CLOCK.wall_ms() if born_ms is None else born_ms
    if plain and last_row_property is None and system_properties is None and wire is None:
        packed = prepare_plain(
            table,
            queue_counts,
            max_message_size,
            max_record_size,
            store_host,
            born_host,
            uniq_keys,
            round_robin,
            now_ms,
        )
        if packed is not None:
            return packed
    cols = checked_columns(table)
    n = table.num_rows
    topics, topic_index = topic_column(cols["topic"], n)
    body, body_len = body_column(cols["body"], n, max_message_size)
    large = n > 0 and int(body_len.sum()) >= LARGE_BODY * n
    crcs = BodyCrcs(body, body_len)  # in the background, overlapping the Arrow kernels below
    counts = write_queue_counts(queue_counts, topics, topic_index)
    queue_id, cycle = queue_id_column(cols.get("queueId"), n, topics, topic_index, counts, round_robin)
    props = build_properties(
        cols,
        n,
        uniq_keys,
        last_row_property,
        system_properties,
        wire=wire is not None,
        joined=None if wire is None else wire.properties,
    )
    flag = flag_column(cols.get("flag"), n)
    born = born_column(cols.get("bornTimestamp"), n, now_ms)
    born_hosts: bytes | np.ndarray = born_host if wire is None else wire.born_host
    born_v6 = (len(born_host) if wire is None else wire.born_host.shape[1]) == 20
    dt = header_dtype(born_v6, len(store_host) == 20)
    flags: int | np.ndarray = sys_flag(bytes(20 if born_v6 else 8), store_host)
    if wire is not None:
        flags = wire.sys_flag | flags
    trailer, lengths = layout_trailer(topics, topic_index, props, dt.itemsize + body_len, max_record_size)
    # the header: its fields now, its rows chunk by chunk as they are written
    header = HeaderColumns(
        dtype=dt,
        lengths=lengths,
        queue_id=queue_id,
        flag=flag,
        born=born,
        body_len=body_len,
        sys_flag=flags,
        born_host=born_hosts,
        store_host=store_host,
        reconsume_times=None if wire is None else wire.reconsume_times,
    )
    return EncodedBatch(
        n=n,
        topics=topics,
        topic_index=topic_index,
        queue_id=queue_id.astype(np.int32),
        header=header,
        body=body,
        trailer=trailer,
        lengths=lengths,
        crcs=crcs,
        large_bodies=large,
        tags=props.tags,
        tags_from_properties=props.tags_from_properties,
        round_robin=cycle,
        keys=props.keys,
        index_from_batch=props.index_from_batch,
    )
