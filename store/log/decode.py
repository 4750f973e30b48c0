"""Vectorized decoding of commitlog records into Arrow columns.

Input: one segment's bytes (an Arrow buffer over the mapped file, zero-copy) and the
positions of whole records in it, in log order. Each variable part (headers, bodies, topics,
properties) is copied out with one :func:`rmqlog.log.gather.gather_slices` call; fixed fields are
read through the numpy dtype of :mod:`rmqlog.log.record`. Rows with IPv6 hosts (other header
sizes) are decoded in their own group. The result never references the mapped file.

A *checked* decode (``read_columns(..., check=RecordCheck(...))``, what every read of
messages uses) takes positions that may point anywhere (a damaged consume-queue unit, a
msgId) and checks each record before any gather that depends on a field it checks: the
header fits, a record starts there, its fixed fields match what pointed at it, its lengths
add up, its topic, its body CRC. Each check is one numpy comparison over the whole read;
the first bad row raises :class:`BadRecordError`, which the readers turn into
:class:`rmqlog.errors.CorruptQueueError` or :class:`rmqlog.errors.CorruptRecordError`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..hashing import tags_codes
from ..hosts import format_host
from ..native import (
    crc32_batch as _crc32_batch,  # the C helper's: every body's CRC in one call, GIL released
)
from ..schema import MESSAGE_SCHEMA, TS
from .gather import fixed_rows, gather_slices, to_binary, utf8_lossy
from .msgid import hex_rows, offset_msg_ids
from .properties import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    STORE_PROPERTY_PREFIX,
    ParsedProperties,
    split_keys,
)
from .record import (
    HEADER_V4,
    MAGIC_V2,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    TRAILER_LENGTH_FIELDS,
    crc32,
    header_dtype,
)
from .record_check import MIN_RECORD_SIZE, BadRecordError, RecordCheck, raise_first_bad_row

#: Header bytes an IPv6 host adds over an IPv4 one.
IPV6_EXTRA = header_dtype(True, False).itemsize - HEADER_V4.itemsize


@dataclass
class RecordColumns:
    """The raw columns of a run of records (numpy for fixed fields, Arrow for variable ones).

    The hosts as strings are made on first use (only the message table shows them; a
    dispatch or a scheduler's copy never does)."""

    offsets: np.ndarray  # commitlog offset of each record (int64)
    header: dict[str, np.ndarray]  # fixed fields by record.header_dtype names, native dtypes
    body: pa.Array | None
    topic: pa.StringArray
    properties: pa.StringArray
    hosts: Callable[[], tuple[pa.Array, pa.Array]]  # -> (born host, store host) strings
    store_host_raw: np.ndarray  # (n, 8|20) uint8 of the store host (for msgIds), or object rows
    born_host_raw: np.ndarray  # (n, 8) uint8 of the born host when every one is IPv4, else object rows

    @functools.cached_property
    def _host_strings(self) -> tuple[pa.Array, pa.Array]:
        return self.hosts()

    @property
    def born_host(self) -> pa.Array:
        return self._host_strings[0]

    @property
    def store_host(self) -> pa.Array:
        return self._host_strings[1]

    def __len__(self) -> int:
        return len(self.offsets)

    def take(self, n: int) -> RecordColumns:
        """The first ``n`` records' columns."""
        if n == len(self.offsets):
            return self
        return RecordColumns(
            self.offsets[:n],
            {k: v[:n] for k, v in self.header.items()},
            None if self.body is None else self.body.slice(0, n),
            self.topic.slice(0, n),
            self.properties.slice(0, n),
            lambda: (self.born_host.slice(0, n), self.store_host.slice(0, n)),
            self.store_host_raw[:n],
            self.born_host_raw[:n],
        )


def _trailer_min(magic: np.ndarray) -> np.ndarray:
    """Bytes of TOPICLENGTH + PROPERTIESLENGTH: 3 (V1) or 4 (V2)."""
    return TRAILER_LENGTH_FIELDS + (magic == MAGIC_V2)


def body_crcs(body: pa.BinaryArray | pa.LargeBinaryArray) -> np.ndarray:
    """BODYCRC (CRC-32 & 0x7FFFFFFF, int32) of each body of a contiguous binary array.

    One call of the C helper for the whole array when it is built; otherwise one ISA-L/zlib
    call per body (:data:`rmqlog.log.record.crc32`).
    """
    n = len(body)
    if n == 0:
        return np.zeros(0, np.int32)
    wide = pa.types.is_large_binary(body.type)
    dtype = np.int64 if wide else np.int32
    offsets = np.frombuffer(body.buffers()[1], dtype, n + 1, body.offset * np.dtype(dtype).itemsize)
    data = body.buffers()[2]
    if _crc32_batch is not None:
        out = np.empty(n, np.int32)
        _crc32_batch(data if data is not None else b"", offsets, out)
        return out
    mv = memoryview(data if data is not None else b"")
    starts, ends = offsets[:-1].tolist(), offsets[1:].tolist()
    crcs = np.fromiter(map(crc32, map(mv.__getitem__, map(slice, starts, ends))), np.int64, n)
    return (crcs & 0x7FFFFFFF).astype(np.int32)


def repeat_string(value: str, n: int) -> pa.StringArray:
    """``n`` copies of ``value`` as a string array (one C-level bytes repeat, no take)."""
    raw = value.encode()
    offsets = np.arange(0, len(raw) * (n + 1), len(raw), dtype=np.int32) if raw else np.zeros(n + 1, np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def _expected_topic(
    source: pa.Buffer,
    tl_pos: np.ndarray,
    magic: np.ndarray,
    topic: str,
    ends: np.ndarray | None = None,
) -> tuple[pa.StringArray, np.ndarray, np.ndarray | None] | None:
    """(topic column, topic lengths, PROPERTIESLENGTH fields) if every record at ``tl_pos`` is
    a V1 record of ``topic``.

    ``ends`` (a checked read: where each record ends): the same gather also takes each
    record's PROPERTIESLENGTH field (else ``None``), and is only tried when it fits every record.
    """
    raw = topic.encode()
    if len(raw) > 255 or (magic == MAGIC_V2).any():
        return None
    expect = np.frombuffer(bytes([len(raw)]) + raw, np.uint8)
    width = len(expect) + (2 if ends is not None else 0)
    if ends is not None and (tl_pos + width > ends).any():
        return None
    got = fixed_rows(gather_slices(source, tl_pos, np.full(len(tl_pos), width, np.int64)), width)
    if not (got[:, : len(expect)] == expect).all():
        return None
    props_field = None
    if ends is not None:
        props_field = got[:, -2].astype(np.int64) << 8 | got[:, -1]
    return repeat_string(topic, len(tl_pos)), np.full(len(tl_pos), len(raw), np.int64), props_field


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


@dataclass
class _Headers:
    """The fixed fields of the records of one read, every header layout resolved."""

    fields: dict[str, np.ndarray]
    #: header bytes of each record (more with IPv6 hosts)
    size: np.ndarray
    born_raw: np.ndarray
    store_raw: np.ndarray
    hosts: Callable[[], tuple[pa.Array, pa.Array]]


def _read_headers(source: pa.Buffer, base: int, positions: np.ndarray, check: RecordCheck | None) -> _Headers:
    """Stage 1: every record's header. Optimistic: the IPv4 header of every record is read
    in one gather, then rows with IPv6 hosts (other layouts) are read again in their own
    groups. With ``check``, the header is checked to fit first, its fixed fields before the
    wider headers are gathered."""
    n = len(positions)
    if check is not None:
        check.header_fits(base, positions)
    hdr_arr = gather_slices(source, positions, np.full(n, HEADER_V4.itemsize, np.int64))
    hdr = fixed_rows(hdr_arr, HEADER_V4.itemsize).view(HEADER_V4).ravel()
    v6_bits = hdr["sysFlag"].astype(np.int32) & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    names = [name for name in HEADER_V4.names or () if name not in ("bornHost", "storeHost")]
    fields = {name: hdr[name].astype(hdr.dtype[name].newbyteorder("=")) for name in names}
    if check is not None:
        check.headers(base, positions, fields)
    if not v6_bits.any():
        born_raw = np.ascontiguousarray(hdr["bornHost"]).view(np.uint8).reshape(n, 8)
        store_raw = np.ascontiguousarray(hdr["storeHost"]).view(np.uint8).reshape(n, 8)

        def hosts() -> tuple[pa.Array, pa.Array]:
            return _hosts_to_strings(born_raw)[0], _hosts_to_strings(store_raw)[0]

        return _Headers(fields, np.full(n, HEADER_V4.itemsize, np.int64), born_raw, store_raw, hosts)
    return _wider_headers(source, base, positions, check, fields, names, v6_bits)


def _wider_headers(
    source: pa.Buffer,
    base: int,
    positions: np.ndarray,
    check: RecordCheck | None,
    fields: dict[str, np.ndarray],
    names: list[str],
    v6_bits: np.ndarray,
) -> _Headers:
    """Stage 1, for a read with IPv6 hosts: each layout's rows gathered again with its dtype
    (hosts are kept per row: such records are rare)."""
    n = len(positions)
    total = fields["totalSize"].astype(np.int64)
    hsize = HEADER_V4.itemsize + IPV6_EXTRA * (
        (v6_bits & SYSFLAG_BORNHOST_V6 != 0).astype(np.int64) + (v6_bits & SYSFLAG_STOREHOST_V6 != 0)
    )
    if check is not None:  # before the wider headers are gathered
        raise_first_bad_row(
            base,
            positions,
            [
                (
                    total < hsize + _trailer_min(fields["magic"]),
                    lambda r: f"TOTALSIZE {total[r]} is too small for its header",
                    False,
                )
            ],
        )
    born_hosts: list[np.ndarray] = [None] * n  # type: ignore[list-item]
    store_hosts: list[np.ndarray] = [None] * n  # type: ignore[list-item]
    for bits in np.unique(v6_bits):
        rows = np.flatnonzero(v6_bits == bits)
        dt = header_dtype(bool(bits & SYSFLAG_BORNHOST_V6), bool(bits & SYSFLAG_STOREHOST_V6))
        g = (
            fixed_rows(gather_slices(source, positions[rows], np.full(len(rows), dt.itemsize)), dt.itemsize)
            .view(dt)
            .ravel()
        )
        for name in names:
            fields[name][rows] = g[name]
        for r, b, s in zip(rows.tolist(), g["bornHost"], g["storeHost"], strict=True):
            born_hosts[r] = np.frombuffer(bytes(b), np.uint8)
            store_hosts[r] = np.frombuffer(bytes(s), np.uint8)

    def hosts() -> tuple[pa.Array, pa.Array]:
        return (
            pa.array([format_host(h.tobytes()) for h in born_hosts], pa.string()),
            pa.array([format_host(h.tobytes()) for h in store_hosts], pa.string()),
        )

    return _Headers(
        fields,
        hsize,
        np.array([h.tobytes() for h in born_hosts], dtype=object),
        np.array([h.tobytes() for h in store_hosts], dtype=object),
        hosts,
    )


def _read_topics(
    source: pa.Buffer,
    base: int,
    positions: np.ndarray,
    tl_pos: np.ndarray,
    ends: np.ndarray,
    h: _Headers,
    topic: str | None,
    check: RecordCheck | None,
) -> tuple[pa.Array, np.ndarray, np.ndarray | None]:
    """Stage 3: the topic after each body (``tl_pos``: its length field). Returns the topic
    column, where each record's PROPERTIESLENGTH field is, and, when the expected topic's
    gather already read them, those fields. The expected ``topic`` is tried first (one
    fixed-width gather); otherwise the lengths are read, checked to fit, and the topics
    gathered and (with ``check`` and ``topic``) compared."""
    magic, n = h.fields["magic"], len(positions)
    if topic is not None and n:
        expected = _expected_topic(source, tl_pos, magic, topic, ends if check is not None else None)
        if expected is not None:
            topic_arr, topic_len, props_field = expected
            return topic_arr, tl_pos + 1 + topic_len, props_field
    # topic length: 1 byte (V1) or 2 bytes (V2); read 2 bytes and keep what applies
    tl2 = fixed_rows(gather_slices(source, tl_pos, np.full(n, 2, np.int64)), 2)
    is_v2 = magic == MAGIC_V2
    topic_len = np.where(is_v2, tl2[:, 0].astype(np.int64) << 8 | tl2[:, 1], tl2[:, 0]).astype(np.int64)
    topic_start = tl_pos + np.where(is_v2, 2, 1)
    if check is not None:
        total = h.fields["totalSize"]
        raise_first_bad_row(
            base,
            positions,
            [
                (
                    topic_start + topic_len + 2 > ends,
                    lambda r: f"TOPICLENGTH {topic_len[r]} does not fit TOTALSIZE {total[r]}",
                    False,
                )
            ],
        )
    topic_raw = gather_slices(source, topic_start, topic_len)
    if check is not None and topic is not None:
        same = np.asarray(pc.fill_null(pc.equal(topic_raw, pa.scalar(topic.encode(), pa.large_binary())), False))
        raise_first_bad_row(
            base,
            positions,
            [
                (
                    ~same,
                    lambda r: f"the record there is of topic {topic_raw[r].as_py().decode('utf-8', 'replace')!r}",
                    True,
                )
            ],
        )
    return utf8_lossy(topic_raw), topic_start + topic_len, None


def _read_properties(
    source: pa.Buffer,
    base: int,
    positions: np.ndarray,
    pl_pos: np.ndarray,
    ends: np.ndarray,
    props_field: np.ndarray | None,
    check: RecordCheck | None,
) -> pa.Array:
    """Stage 4: the properties, the rest of each record after PROPERTIESLENGTH (at ``pl_pos``).
    With ``check``, that field must say so: nothing checksums the lengths, so they must add
    up, as recovery requires."""
    props_start = pl_pos + 2
    props_len = ends - props_start
    if check is not None:
        if props_field is None:
            pl2 = fixed_rows(gather_slices(source, pl_pos, np.full(len(positions), 2, np.int64)), 2)
            props_field = pl2[:, 0].astype(np.int64) << 8 | pl2[:, 1]
        raise_first_bad_row(
            base, positions, [(props_field != props_len, lambda r: "lengths do not add up to TOTALSIZE", False)]
        )
    return utf8_lossy(gather_slices(source, props_start, props_len))


def read_columns(
    source: pa.Buffer,
    base: int,
    positions: np.ndarray,
    *,
    with_body: bool = True,
    topic: str | None = None,
    check: RecordCheck | None = None,
) -> RecordColumns:
    """Decode the records at ``positions`` (relative to ``source``; ``base`` is its commitlog offset).

    Without ``check``, the records must be whole and valid (found by a scan). With it (reads
    of what units or callers point at), each record is checked as :class:`RecordCheck` says,
    each check one numpy comparison over the whole read, and always before a gather that
    depends on the field checked: the first bad row raises :class:`BadRecordError`.
    ``topic``, when the caller expects every record to be of that topic (a consume queue's
    records), lets the topic be checked with one fixed-width gather instead of read; any
    record that does not match is decoded the general way (and, with ``check``, fails).

    The stages, in the order their checks must run: the headers (:func:`_read_headers`), the
    bodies (their length checked against TOTALSIZE first), the topics (:func:`_read_topics`),
    the properties (:func:`_read_properties`), then the body CRCs.
    """
    positions = np.asarray(positions, np.int64)
    h = _read_headers(source, base, positions, check)
    total = h.fields["totalSize"].astype(np.int64)
    body_len = h.fields["bodyLength"].astype(np.int64)
    ends = positions + total
    if check is not None:
        check.fields(base, positions, h.fields)
        room = total - h.size - _trailer_min(h.fields["magic"])  # the two length fields after the body
        raise_first_bad_row(
            base,
            positions,
            [
                (
                    (body_len < 0) | (body_len > room),
                    lambda r: f"BODYLENGTH {body_len[r]} does not fit TOTALSIZE {total[r]}",
                    False,
                )
            ],
        )
    body_start = positions + h.size
    need_body = with_body or (check is not None and check.crc)
    body = to_binary(gather_slices(source, body_start, body_len)) if need_body else None
    topic_arr, pl_pos, props_field = _read_topics(source, base, positions, body_start + body_len, ends, h, topic, check)
    props = _read_properties(source, base, positions, pl_pos, ends, props_field, check)
    if check is not None and check.crc and len(positions):
        assert body is not None
        crcs = body_crcs(body)
        stored = h.fields["bodyCRC"]
        raise_first_bad_row(
            base,
            positions,
            [(crcs != stored, lambda r: f"body CRC mismatch: BODYCRC {stored[r]}, the body's CRC {crcs[r]}", False)],
        )
    return RecordColumns(
        offsets=base + positions,
        header=h.fields,
        body=body if with_body else None,
        topic=topic_arr,
        properties=props,
        hosts=h.hosts,
        store_host_raw=h.store_raw,
        born_host_raw=h.born_raw,
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
        [
            (bytes(h) + int(o).to_bytes(8, "big", signed=True)).hex().upper()
            for h, o in zip(raw, cols.offsets, strict=True)
        ],
        pa.string(),
    )


def _ms_to_ts(ms: np.ndarray) -> pa.Array:
    return pa.array(ms.astype(np.int64) * 1000, pa.int64()).view(TS)


#: How each column of the message table is made from decoded records (and their parsed
#: properties, made once, and only when a column needs them).
_COLUMN_MAKERS: dict[str, Callable[[RecordColumns, Callable[[], ParsedProperties]], pa.Array]] = {
    "topic": lambda c, p: c.topic,
    "queueId": lambda c, p: pa.array(c.header["queueId"].astype(np.int32)),
    "queueOffset": lambda c, p: pa.array(c.header["queueOffset"].astype(np.int64)),
    "commitLogOffset": lambda c, p: pa.array(c.offsets.astype(np.int64)),
    "msgId": lambda c, p: msg_ids(c),
    "body": lambda c, p: c.body if c.body is not None else pa.nulls(len(c), pa.binary()),
    "tags": lambda c, p: p().column(PROPERTY_TAGS),
    "keys": lambda c, p: split_keys(p().column(PROPERTY_KEYS)),
    "properties": lambda c, p: p().map_array(
        hide_prefix=STORE_PROPERTY_PREFIX
    ),  # the store's markers are not the user's
    "bornTimestamp": lambda c, p: _ms_to_ts(c.header["bornTimestamp"]),
    "storeTimestamp": lambda c, p: _ms_to_ts(c.header["storeTimestamp"]),
    "bornHost": lambda c, p: c.born_host,
    "storeHost": lambda c, p: c.store_host,
    "flag": lambda c, p: pa.array(c.header["flag"].astype(np.int32)),
    "sysFlag": lambda c, p: pa.array(c.header["sysFlag"].astype(np.int32)),
    "reconsumeTimes": lambda c, p: pa.array(c.header["reconsumeTimes"].astype(np.int32)),
    "bodyCRC": lambda c, p: pa.array(c.header["bodyCRC"].astype(np.int32)),
}
assert list(_COLUMN_MAKERS) == MESSAGE_SCHEMA.names


@functools.cache
def message_schema(columns: tuple[str, ...] | None = None) -> pa.Schema:
    """:data:`rmqlog.schema.MESSAGE_SCHEMA`, or its ``columns`` (known names) in that order."""
    return MESSAGE_SCHEMA if columns is None else pa.schema([MESSAGE_SCHEMA.field(c) for c in columns])


def message_table(cols: RecordColumns, columns: tuple[str, ...] | None = None) -> pa.Table:
    """The public message table (:data:`rmqlog.schema.MESSAGE_SCHEMA`) of decoded records, or
    only its ``columns`` (known names, in that order): a column not asked for is not made (the
    msgIds' hex, the properties map and the host strings cost most)."""
    parsed: list[ParsedProperties] = []
    names = MESSAGE_SCHEMA.names if columns is None else columns
    # the properties' values asked for, found in one pass over the bytes (not one per name)
    wanted = tuple(name for column, name in (("tags", PROPERTY_TAGS), ("keys", PROPERTY_KEYS)) if column in names)

    def props() -> ParsedProperties:
        if not parsed:
            parsed.append(ParsedProperties(cols.properties, names=wanted))
        return parsed[0]

    return pa.Table.from_arrays([_COLUMN_MAKERS[name](cols, props) for name in names], schema=message_schema(columns))


def dispatch_columns(cols: RecordColumns) -> tuple[pa.Array, np.ndarray]:
    """(TAGS per row, tagsCode per row) for the dispatcher."""
    tags = ParsedProperties(cols.properties).column(PROPERTY_TAGS)
    return tags, tags_codes(tags)


@functools.cache
def empty_message_table(columns: tuple[str, ...] | None = None) -> pa.Table:
    """The message table (or its ``columns``) without rows (one shared instance: Arrow tables
    are immutable, and building one costs ~150 us, more than a whole 32-message
    ``get_messages`` should)."""
    return message_schema(columns).empty_table()


def concat_tables(tables: list[pa.Table], columns: tuple[str, ...] | None = None) -> pa.Table:
    if not tables:
        return empty_message_table(columns)
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables).combine_chunks()


__all__ = [
    "MIN_RECORD_SIZE",
    "RecordColumns",
    "RecordCheck",
    "BadRecordError",
    "body_crcs",
    "read_columns",
    "message_table",
    "msg_ids",
    "dispatch_columns",
]
