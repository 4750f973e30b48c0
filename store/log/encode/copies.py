"""Records made from stored ones: the scheduler's delivered copies (RocketMQ's
``ScheduleMessageService.messageTimeup`` and ``TimerMessageStore.convertMessage``), encoded
straight from the stored records' raw columns (:class:`rmqlog.log.decode.RecordColumns`).

A copy keeps the stored body, FLAG and BORNTIMESTAMP; it gets a new topic and queue and a
properties string its caller rewrote from the stored one (:mod:`rmqlog.schedule.timeup`),
added as the store's own items, then the generated ``UNIQ_KEY`` where the row has none and
the idempotence marker on the last row, as every put's. Nothing goes back through a message
table and the put's checks of user input (property names, keys, tags): those were made when
the message was first put, or the record is RocketMQ's. What the copy changes is checked:
each topic must name a queue directory and not be one of the store's waiting topics, and
each record must fit a segment (typed errors naming the row; the queue ids against the
topics' queue counts are checked by the append, as for every put).

The result is an :class:`~rmqlog.log.encode.batch.EncodedBatch` like the put path's, so the
append, its publish and its idempotence are the put's own.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ...errors import InvalidTopicError
from ..msgid import UniqKeyGenerator
from ..properties import WAITING_TOPICS
from ..record import (
    SYSFLAG_COMPRESSED,
    SYSFLAG_MULTI_TAGS,
    SYSFLAG_TRANSACTION_MASK,
    header_dtype,
)
from .arrays import value_lengths
from .batch import EncodedBatch
from .columns import topic_column
from .crc import LARGE_BODY, BodyCrcs
from .header import HeaderColumns, sys_flag
from .trailer import build_properties, layout_trailer

#: the SYSFLAG bits a copy keeps from the stored record (the host bits are its own layout's)
_CLIENT_BITS = SYSFLAG_COMPRESSED | SYSFLAG_MULTI_TAGS | SYSFLAG_TRANSACTION_MASK


def prepare_copies(
    topic: pa.Array,
    queue_id: np.ndarray,
    body: pa.BinaryArray,
    flag: np.ndarray,
    born: np.ndarray,
    properties: pa.Array,
    *,
    marker: tuple[str, str] | None,
    store_host: bytes,
    born_host: bytes | np.ndarray,
    uniq_keys: UniqKeyGenerator,
    max_record_size: int,
    sys_flags: np.ndarray | None = None,
    reconsume_times: np.ndarray | None = None,
) -> EncodedBatch:
    """The encoded copies, one per row: ``topic`` (strings) and ``queue_id`` where they go,
    ``body``/``flag``/``born`` (ms) as stored, ``properties`` the pre-joined items
    (``name\\x01value\\x02``...) each copy carries; ``marker``: the idempotence marker of the
    last row; ``born_host``: one for every copy, or (n, 8) bytes, each copy's own (IPv4);
    ``sys_flags``/``reconsume_times``: the stored values, kept (the client's SYSFLAG bits,
    the host bits being the copy's layout's; ``None``: 0), as RocketMQ's copies keep them. Raises
    :class:`InvalidTopicError` or :class:`rmqlog.errors.MessageTooLargeError` naming the first
    bad row."""
    n = len(topic)
    topics, topic_index = topic_column(topic, n)
    for i, name in enumerate(topics):
        if name in WAITING_TOPICS:  # a copy must leave the waiting topics, or it would wait again
            raise InvalidTopicError(
                f"a delivered copy cannot go to {name}", row=int(np.flatnonzero(topic_index == i)[0]), field="topic"
            )
    body_len = value_lengths(body)
    props = build_properties({}, n, uniq_keys, marker, system_properties=properties)
    born_v6 = isinstance(born_host, bytes) and len(born_host) == 20
    dt = header_dtype(born_v6, len(store_host) == 20)
    trailer, lengths = layout_trailer(topics, topic_index, props, dt.itemsize + body_len, max_record_size)
    queue_id = np.asarray(queue_id, np.int32)
    host_bits = sys_flag(bytes(20 if born_v6 else 8), store_host)
    flags: int | np.ndarray = host_bits
    if sys_flags is not None and len(sys_flags) and (np.asarray(sys_flags) & _CLIENT_BITS).any():
        flags = (np.asarray(sys_flags, np.int64) & _CLIENT_BITS | host_bits).astype(np.int32)
    header = HeaderColumns(
        dtype=dt,
        lengths=lengths,
        queue_id=queue_id,
        flag=np.asarray(flag, np.int64),
        born=np.asarray(born, np.int64),
        body_len=body_len,
        sys_flag=flags,
        born_host=born_host,
        store_host=store_host,
        reconsume_times=None if reconsume_times is None else np.asarray(reconsume_times, np.int32),
    )
    return EncodedBatch(
        n=n,
        topics=topics,
        topic_index=topic_index,
        queue_id=queue_id,
        header=header,
        body=body,
        trailer=trailer,
        lengths=lengths,
        crcs=BodyCrcs(body, body_len),
        large_bodies=n > 0 and int(body_len.sum()) >= LARGE_BODY * n,
        # TAGS is one of the copied properties: a dispatch reads the records for their tagsCode
        tags=None,
        tags_from_properties=True,
    )
