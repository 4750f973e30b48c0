"""Pull and query bodies (stored commitlog records, concatenated) into the message table.

The store's vectorized decoder (``rmqlog.decode_records``) is used when the store exports it.
Until it does, :func:`_decode_stopgap` stands in: TO BE REPLACED by ``rmqlog.decode_records``
(asked of the store API; its layout is the one of ``rmqlog`` ``log/record.py``). The stopgap
walks the TOTALSIZE chain with a loop that reads one int per record (the positions only),
then reads every field of every record with numpy at once; it checks lengths, not body CRCs,
and leaves IPv6 host texts null.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import rmqlog
from rmqlog import MESSAGE_SCHEMA, CorruptRecordError

from .slices import gather

MAGIC_V1 = -626843481  # 0xDAA320A7: 1-byte topic length
MAGIC_V2 = -626843477  # 0xDAA320AB: 2-byte topic length
_SYSFLAG_BORNHOST_V6 = 0x10
_SYSFLAG_STOREHOST_V6 = 0x20
_I32 = struct.Struct(">i")
_HEX = np.array([f"{i:02X}".encode() for i in range(256)], dtype="S2")


def decode_records(data: bytes | memoryview) -> pa.Table:
    """The message table (``rmqlog.MESSAGE_SCHEMA``) of ``data``; raises
    ``rmqlog.CorruptRecordError`` when it is not whole records."""
    store_decoder: Any = getattr(rmqlog, "decode_records", None)
    if store_decoder is not None:
        return store_decoder(data)
    return _decode_stopgap(data)


def _be(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed integers of ``width`` bytes at ``pos``."""
    idx = pos[:, None] + np.arange(width)
    raw = np.ascontiguousarray(buf[idx])
    return raw.view(f">i{width}").reshape(-1).astype(np.int64)


def _hosts(buf: np.ndarray, pos: np.ndarray, v6: np.ndarray) -> pa.Array:
    ip4 = buf[pos[:, None] + np.arange(4)].astype(np.int64)
    port4 = _be(buf, pos + 4, 4)
    port6 = _be(buf, pos + 16, 4)
    parts = [pa.array(ip4[:, i]).cast(pa.string()) for i in range(4)]
    text = pc.binary_join_element_wise(*parts, ".")
    port = pa.array(np.where(v6, port6, port4)).cast(pa.string())
    # IPv6 hosts: the stopgap leaves their text null (the store's decoder renders them)
    return pc.if_else(pa.array(v6), pa.nulls(len(pos), pa.string()), pc.binary_join_element_wise(text, port, ":"))


def _decode_stopgap(data: bytes | memoryview) -> pa.Table:
    view = memoryview(data).cast("B")
    buf = np.frombuffer(view, np.uint8)
    starts: list[int] = []
    pos, end = 0, len(buf)
    while pos < end:  # positions only (see the module docstring)
        if end - pos < 4:
            raise CorruptRecordError(f"stored records: byte {pos}: record cut short", offset=pos)
        (size,) = _I32.unpack_from(view, pos)
        if size < 92 or pos + size > end:
            raise CorruptRecordError(f"stored records: byte {pos}: TOTALSIZE {size} does not fit", offset=pos)
        starts.append(pos)
        pos += size
    p = np.asarray(starts, np.int64)
    if not len(p):
        return MESSAGE_SCHEMA.empty_table()
    total = _be(buf, p, 4)
    magic = _be(buf, p + 4, 4)
    if not np.isin(magic, (MAGIC_V1, MAGIC_V2)).all():
        bad = int(p[~np.isin(magic, (MAGIC_V1, MAGIC_V2))][0])
        raise CorruptRecordError(f"stored records: byte {bad}: not a record (magic)", offset=bad)
    sys_flag = _be(buf, p + 36, 4)
    born_v6 = (sys_flag & _SYSFLAG_BORNHOST_V6) != 0
    store_v6 = (sys_flag & _SYSFLAG_STOREHOST_V6) != 0
    store_ts_at = p + 48 + np.where(born_v6, 20, 8)
    store_host_at = store_ts_at + 8
    reconsume_at = store_host_at + np.where(store_v6, 20, 8)
    body_len_at = reconsume_at + 12
    body_len = _be(buf, body_len_at, 4)
    topic_len_at = body_len_at + 4 + body_len
    v2 = magic == MAGIC_V2
    topic_len = np.where(v2, _be(buf, topic_len_at, 2) & 0xFFFF, buf[np.minimum(topic_len_at, len(buf) - 1)].astype(np.int64))
    topic_at = topic_len_at + np.where(v2, 2, 1)
    props_len_at = topic_at + topic_len
    props_len = _be(buf, np.minimum(props_len_at, len(buf) - 2), 2) & 0xFFFF
    if ((props_len_at + 2 + props_len - p) != total).any():
        bad = int(p[(props_len_at + 2 + props_len - p) != total][0])
        raise CorruptRecordError(f"stored records: byte {bad}: lengths do not add up to TOTALSIZE", offset=bad)
    props_text = gather(buf, props_len_at + 2, props_len).cast(pa.string())
    pairs = pc.split_pattern(props_text, "\x02")
    flat = pc.list_flatten(pairs)
    lens = pc.list_value_length(pairs).to_numpy(zero_copy_only=False)
    kv = pc.split_pattern(flat, "\x01", max_splits=1)
    keep = pc.greater(pc.list_value_length(kv), 1).to_numpy(zero_copy_only=False)  # drops the empty tail
    owner = np.repeat(np.arange(len(p)), lens)[keep]
    kv = kv.filter(pa.array(keep))
    names = pc.list_element(kv, 0)
    values = pc.list_element(kv, 1)
    map_offsets = np.zeros(len(p) + 1, np.int32)
    np.cumsum(np.bincount(owner, minlength=len(p)), out=map_offsets[1:])
    props = pa.MapArray.from_arrays(pa.array(map_offsets), names, values)
    tags = pc.list_element(pc.map_lookup(props, "TAGS", "all"), 0) if len(names) else pa.nulls(len(p), pa.string())
    keys_text = pc.map_lookup(props, "KEYS", "first")
    keys = pc.split_pattern(keys_text, " ")
    store_host_raw = buf[store_host_at[:, None] + np.arange(8)]
    offset = _be(buf, p + 28, 8)
    id_raw = np.concatenate([store_host_raw, offset.astype(">i8").view(np.uint8).reshape(-1, 8)], axis=1)
    msg_id = pa.array(np.ascontiguousarray(_HEX[id_raw]).view("S32").reshape(-1)).cast(pa.string())
    ms = pa.timestamp("ms", tz="UTC")
    cols = {
        "topic": gather(buf, topic_at, topic_len).cast(pa.string()),
        "queueId": pa.array(_be(buf, p + 12, 4).astype(np.int32)),
        "queueOffset": pa.array(_be(buf, p + 20, 8)),
        "commitLogOffset": pa.array(offset),
        "msgId": msg_id,
        "body": gather(buf, body_len_at + 4, body_len),
        "tags": tags,
        "keys": keys,
        "properties": props,
        "bornTimestamp": pa.array(_be(buf, p + 40, 8)).cast(ms).cast(MESSAGE_SCHEMA.field("bornTimestamp").type),
        "storeTimestamp": pa.array(_be(buf, store_ts_at, 8)).cast(ms).cast(MESSAGE_SCHEMA.field("storeTimestamp").type),
        "bornHost": _hosts(buf, p + 48, born_v6),
        "storeHost": _hosts(buf, store_host_at, store_v6),
        "flag": pa.array(_be(buf, p + 16, 4).astype(np.int32)),
        "sysFlag": pa.array(sys_flag.astype(np.int32)),
        "reconsumeTimes": pa.array(_be(buf, reconsume_at, 4).astype(np.int32)),
        "bodyCRC": pa.array(_be(buf, p + 8, 4).astype(np.int32)),
    }
    return pa.Table.from_arrays([cols[f.name].cast(f.type) for f in MESSAGE_SCHEMA], schema=MESSAGE_SCHEMA)
