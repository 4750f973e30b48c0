"""Vectorized decoding of commitlog records into Arrow columns.

Input: one segment's bytes (an Arrow buffer over the mapped file, zero-copy) and the
positions of whole records in it, in log order. Each variable part (headers, bodies, topics,
properties) is copied out with one :func:`store.gather.gather_slices` call; fixed fields are
read through the numpy dtype of :mod:`store.record`. Rows with IPv6 hosts (other header
sizes) are decoded in their own group. The result never references the mapped file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .gather import fixed_rows, gather_slices, to_binary, utf8_lossy
from .hashing import tags_codes
from .hosts import format_host
from .msgid import hex_rows, offset_msg_ids
from .properties import PROPERTY_KEYS, PROPERTY_TAGS, ParsedProperties, split_keys
from .record import (
    HEADER_V4,
    MAGIC_V2,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    header_dtype,
)
from .schema import MESSAGE_SCHEMA, TS


@dataclass
class RecordColumns:
    """The raw columns of a run of records (numpy for fixed fields, Arrow for variable ones)."""

    offsets: np.ndarray  # commitlog offset of each record (int64)
    header: dict[str, np.ndarray]  # fixed fields by record.header_dtype names, native dtypes
    body: pa.Array | None
    topic: pa.StringArray
    properties: pa.StringArray
    born_host: pa.Array  # string
    store_host: pa.Array  # string
    store_host_raw: np.ndarray  # (n, 8|20) uint8 of the store host (for msgIds), or object rows

    def __len__(self) -> int:
        return len(self.offsets)

    def take(self, n: int) -> RecordColumns:
        """The first ``n`` records' columns."""
        if n == len(self.offsets):
            return self
        return RecordColumns(
            self.offsets[:n], {k: v[:n] for k, v in self.header.items()}, None if self.body is None else self.body.slice(0, n),
            self.topic.slice(0, n), self.properties.slice(0, n), self.born_host.slice(0, n), self.store_host.slice(0, n),
            self.store_host_raw[:n],
        )


def repeat_string(value: str, n: int) -> pa.StringArray:
    """``n`` copies of ``value`` as a string array (one C-level bytes repeat, no take)."""
    raw = value.encode()
    offsets = np.arange(0, len(raw) * (n + 1), len(raw), dtype=np.int32) if raw else np.zeros(n + 1, np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def _expected_topic(
    source: pa.Buffer, tl_pos: np.ndarray, magic: np.ndarray, topic: str,
) -> tuple[pa.StringArray, np.ndarray] | None:
    """(topic column, topic lengths) if every record at ``tl_pos`` is a V1 record of ``topic``."""
    raw = topic.encode()
    if len(raw) > 255 or (magic == MAGIC_V2).any():
        return None
    expect = np.frombuffer(bytes([len(raw)]) + raw, np.uint8)
    got = fixed_rows(gather_slices(source, tl_pos, np.full(len(tl_pos), len(expect), np.int64)), len(expect))
    if not (got == expect).all():
        return None
    return repeat_string(topic, len(tl_pos)), np.full(len(tl_pos), len(raw), np.int64)


def _hosts_to_strings(raw: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """(n, w) host bytes -> string array via the distinct values (hosts are few)."""
    n, w = raw.shape
    if n == 0:
        return pa.array([], pa.string()), np.zeros(0, np.int64)
    keys = np.ascontiguousarray(raw).view(f"V{w}").ravel()
    if w == 8:
        as_int = keys.view(np.uint64)
        if (as_int == as_int[0]).all():  # the usual case: one host for the whole run
            return repeat_string(format_host(bytes(keys[0])), n), np.zeros(n, np.int64)
        uniq_i, inverse = np.unique(as_int, return_inverse=True)
        uniq = uniq_i.view(f"V{w}")
    else:
        uniq, inverse = np.unique(keys, return_inverse=True)
    names = pa.array([format_host(bytes(u)) for u in uniq], pa.string())
    return names.take(pa.array(inverse.astype(np.int64))), inverse


def read_columns(
    source: pa.Buffer, base: int, positions: np.ndarray, *, with_body: bool = True, topic: str | None = None,
) -> RecordColumns:
    """Decode the records at ``positions`` (relative to ``source``; ``base`` is its commitlog offset).

    The records must be whole and valid (below the published tail, or checked by a scan).
    ``topic``, when the caller expects every record to be of that topic (a consume queue's
    records), lets the topic be checked with one fixed-width gather instead of read; any
    record that does not match is decoded the general way.
    """
    positions = np.asarray(positions, np.int64)
    n = len(positions)
    # Optimistic: read the IPv4 header of every record, then redo rows with other layouts.
    hdr_arr = gather_slices(source, positions, np.full(n, HEADER_V4.itemsize, np.int64))
    hdr = fixed_rows(hdr_arr, HEADER_V4.itemsize).view(HEADER_V4).ravel()
    sys_flag = hdr["sysFlag"].astype(np.int32)
    v6_bits = sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    header: dict[str, np.ndarray] = {}
    names = [name for name in HEADER_V4.names or () if name not in ("bornHost", "storeHost")]
    for name in names:
        header[name] = hdr[name].astype(hdr.dtype[name].newbyteorder("="))
    hsize = np.full(n, HEADER_V4.itemsize, np.int64)
    if v6_bits.any():
        born_hosts: list[np.ndarray] = [None] * n  # type: ignore[list-item]
        store_hosts: list[np.ndarray] = [None] * n  # type: ignore[list-item]
        for bits in np.unique(v6_bits):
            rows = np.flatnonzero(v6_bits == bits)
            dt = header_dtype(bool(bits & SYSFLAG_BORNHOST_V6), bool(bits & SYSFLAG_STOREHOST_V6))
            g = fixed_rows(
                gather_slices(source, positions[rows], np.full(len(rows), dt.itemsize)), dt.itemsize
            ).view(dt).ravel()
            for name in names:
                header[name][rows] = g[name]
            hsize[rows] = dt.itemsize
            for r, b, s in zip(rows.tolist(), g["bornHost"], g["storeHost"], strict=True):
                born_hosts[r] = np.frombuffer(bytes(b), np.uint8)
                store_hosts[r] = np.frombuffer(bytes(s), np.uint8)
        born_host = pa.array([format_host(h.tobytes()) for h in born_hosts], pa.string())
        store_host = pa.array([format_host(h.tobytes()) for h in store_hosts], pa.string())
        store_raw = np.array([h.tobytes() for h in store_hosts], dtype=object)
    else:
        born_raw = np.ascontiguousarray(hdr["bornHost"]).view(np.uint8).reshape(n, 8)
        store_raw_arr = np.ascontiguousarray(hdr["storeHost"]).view(np.uint8).reshape(n, 8)
        born_host, _ = _hosts_to_strings(born_raw)
        store_host, _ = _hosts_to_strings(store_raw_arr)
        store_raw = store_raw_arr
    body_len = header["bodyLength"].astype(np.int64)
    body_start = positions + hsize
    body = to_binary(gather_slices(source, body_start, body_len)) if with_body else None
    tl_pos = body_start + body_len
    topic_col = _expected_topic(source, tl_pos, header["magic"], topic) if topic is not None and n else None
    if topic_col is not None:
        topic_arr, topic_len = topic_col
        topic_start = tl_pos + 1
    else:
        # topic length: 1 byte (V1) or 2 bytes (V2); read 2 bytes and keep what applies
        tl2 = fixed_rows(gather_slices(source, tl_pos, np.full(n, 2, np.int64)), 2)
        is_v2 = header["magic"] == MAGIC_V2
        topic_len = np.where(is_v2, tl2[:, 0].astype(np.int64) << 8 | tl2[:, 1], tl2[:, 0]).astype(np.int64)
        topic_start = tl_pos + np.where(is_v2, 2, 1)
        topic_arr = utf8_lossy(gather_slices(source, topic_start, topic_len))
    pl_pos = topic_start + topic_len
    props_start = pl_pos + 2
    props_len = header["totalSize"].astype(np.int64) - (props_start - positions)
    props = utf8_lossy(gather_slices(source, props_start, props_len))
    return RecordColumns(
        offsets=base + positions, header=header, body=body, topic=topic_arr,
        properties=props, born_host=born_host, store_host=store_host, store_host_raw=store_raw,
    )


def msg_ids(cols: RecordColumns) -> pa.Array:
    """Offset msgIds (store host + commitlog offset) of decoded records."""
    n = len(cols)
    raw = cols.store_host_raw
    if isinstance(raw, np.ndarray) and raw.dtype == np.uint8:
        if n and (raw == raw[0]).all():  # one store host (the usual case): hex it once
            return offset_msg_ids(raw[0].tobytes(), cols.offsets)
        ids = np.empty((n, raw.shape[1] + 8), np.uint8)
        ids[:, : raw.shape[1]] = raw
        ids[:, raw.shape[1] :] = cols.offsets.astype(">i8").view(np.uint8).reshape(n, 8)
        return hex_rows(ids)
    return pa.array(
        [(bytes(h) + int(o).to_bytes(8, "big", signed=True)).hex().upper() for h, o in zip(raw, cols.offsets, strict=True)],
        pa.string(),
    )


def _ms_to_ts(ms: np.ndarray) -> pa.Array:
    return pa.array(ms.astype(np.int64) * 1000, pa.int64()).view(TS)


def message_table(cols: RecordColumns) -> pa.Table:
    """The public message table (:data:`store.schema.MESSAGE_SCHEMA`) of decoded records."""
    parsed = ParsedProperties(cols.properties)
    h = cols.header
    arrays = [
        cols.topic,
        pa.array(h["queueId"].astype(np.int32)),
        pa.array(h["queueOffset"].astype(np.int64)),
        pa.array(cols.offsets.astype(np.int64)),
        msg_ids(cols),
        cols.body if cols.body is not None else pa.nulls(len(cols), pa.binary()),
        parsed.column(PROPERTY_TAGS),
        split_keys(parsed.column(PROPERTY_KEYS)),
        parsed.map_array(),
        _ms_to_ts(h["bornTimestamp"]),
        _ms_to_ts(h["storeTimestamp"]),
        cols.born_host,
        cols.store_host,
        pa.array(h["flag"].astype(np.int32)),
        pa.array(h["sysFlag"].astype(np.int32)),
        pa.array(h["reconsumeTimes"].astype(np.int32)),
        pa.array(h["bodyCRC"].astype(np.int32)),
    ]
    return pa.Table.from_arrays(arrays, schema=MESSAGE_SCHEMA)


def dispatch_columns(cols: RecordColumns) -> tuple[pa.Array, np.ndarray]:
    """(TAGS per row, tagsCode per row) for the dispatcher."""
    tags = ParsedProperties(cols.properties).column(PROPERTY_TAGS)
    return tags, tags_codes(tags)


def empty_message_table() -> pa.Table:
    return MESSAGE_SCHEMA.empty_table()


def concat_tables(tables: list[pa.Table]) -> pa.Table:
    if not tables:
        return empty_message_table()
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables).combine_chunks()


__all__ = ["RecordColumns", "read_columns", "message_table", "msg_ids", "dispatch_columns"]
