"""A few stored records decoded one at a time into rows: a small pull reply's messages at a
cost proportional to their number (:func:`decode_record_rows`).

:func:`rmqlog.log.wire.decode_records` builds the whole message table with Arrow and numpy:
~1 ms whatever the number of records (a few dozen calls of fixed cost), which is most of what
a client spends on a pull of a few messages. Here each record is read with one ``struct``
unpack of its header, its body CRC computed, its topic and properties decoded, and its row
made as a dict: a few microseconds a record, no Arrow call.

Guarantees: the rows are exactly ``decode_records(data).to_pylist()`` (the same names in the
same order, the same values: ``properties`` as ``(name, value)`` pairs with the store's
``RMQLOG_*`` markers left out, ``keys`` the ``KEYS`` value split on spaces, ``tags`` the last
``TAGS``, timestamps as UTC datetimes, hosts ``ip:port``, offset msgIds), and the same
records are refused with the same :class:`rmqlog.errors.CorruptRecordError`: every check of
the general decode is made here (magic, lengths adding up to TOTALSIZE, the header fields no
store writes, the body CRC, records back to back up to the last byte), and at the first doubt
the general decode runs and answers (or raises). ``tests/test_decode_rows.py`` pins both to
each other on random records and random damage.
"""

from __future__ import annotations

import datetime as _dt
import functools
import struct
import zoneinfo
from typing import Any, overload

from ..arguments import int_arg
from ..hosts import format_host
from ..schema import MESSAGE_SCHEMA
from .properties import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, STORE_PROPERTY_PREFIX
from .record import (
    HEADER_V4,
    MAGIC_V1,
    MAGIC_V2,
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    TRAILER_LENGTH_FIELDS,
    crc32,
)
from .wire import bytes_view, decode_records

_UTC = zoneinfo.ZoneInfo("UTC")  # what Arrow's timestamp[us, tz=UTC] gives back
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_UTC)
_MIN_SIZE = HEADER_V4.itemsize + TRAILER_LENGTH_FIELDS
_PREFIX = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP (48 bytes)
_NAMES = tuple(MESSAGE_SCHEMA.names)


@functools.cache
def _rest(born_v6: bool, store_v6: bool) -> struct.Struct:
    """BORNHOST .. BODYLENGTH for one host layout."""
    return struct.Struct(f">{20 if born_v6 else 8}sq{20 if store_v6 else 8}siqi")


@functools.lru_cache(maxsize=1024)
def _host(raw: bytes) -> str:
    return format_host(raw)


class _Doubt(Exception):
    """A record the fast walk does not vouch for: the general decode answers."""


@overload
def decode_record_rows(data: Any, max_rows: None = None) -> list[dict[str, Any]]: ...


@overload
def decode_record_rows(data: Any, max_rows: int) -> list[dict[str, Any]] | None: ...


def decode_record_rows(data: Any, max_rows: int | None = None) -> list[dict[str, Any]] | None:
    """The rows of the stored records in ``data`` (bytes or any buffer: a pull or query body;
    see the module docstring), or ``None`` when
    ``max_rows`` is given and ``data`` holds more records than that (counted by following the
    TOTALSIZE fields before anything is decoded: the caller then takes the Arrow decode).

    Raises :class:`rmqlog.errors.CorruptRecordError` exactly where
    :func:`rmqlog.decode_records` does, :class:`rmqlog.errors.InvalidArgumentError` for
    ``data`` that is not a byte buffer or ``max_rows`` that is not an int >= 0."""
    view = bytes_view("data", data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if max_rows is not None:
        max_rows = int_arg("max_rows", max_rows, 0)
    n = len(view)
    if max_rows is not None and _more_than(view, n, max_rows):
        return None
    try:
        return _walk(view, n)
    except (_Doubt, struct.error, ValueError, UnicodeError):
        return decode_records(data).to_pylist()  # raises the general decode's error, or answers


def _more_than(view: memoryview, n: int, limit: int) -> bool:
    """Whether following TOTALSIZE from byte 0 finds more than ``limit`` records (a damaged
    chain stops the count: the decode then refuses it)."""
    pos = count = 0
    while pos + 4 <= n:
        count += 1
        if count > limit:
            return True
        total = int.from_bytes(view[pos : pos + 4], "big", signed=True)
        if total <= 0:
            return False
        pos += total
    return False


def _walk(view: memoryview, n: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    pos = 0
    prefix, epoch, td = _PREFIX.unpack_from, _EPOCH, _dt.timedelta
    while pos < n:
        if pos + _MIN_SIZE > n:
            raise _Doubt
        total, magic, crc, queue_id, flag, queue_offset, physical, sys_flag, born_ms = prefix(view, pos)
        if magic != MAGIC_V1 and magic != MAGIC_V2:
            raise _Doubt
        born_v6, store_v6 = bool(sys_flag & SYSFLAG_BORNHOST_V6), bool(sys_flag & SYSFLAG_STOREHOST_V6)
        rest = _rest(born_v6, store_v6)
        hsize = _PREFIX.size + rest.size
        end = pos + total
        if total < _MIN_SIZE or total < hsize + TRAILER_LENGTH_FIELDS or end > n:
            raise _Doubt
        born_raw, store_ms, store_raw, reconsume, _prepared, body_len = rest.unpack_from(view, pos + _PREFIX.size)
        body_at = pos + hsize
        if body_len < 0 or hsize + body_len + TRAILER_LENGTH_FIELDS > total:
            raise _Doubt
        tl_at = body_at + body_len
        v2 = magic == MAGIC_V2
        topic_len = (view[tl_at] << 8 | view[tl_at + 1]) if v2 else view[tl_at]
        topic_at = tl_at + (2 if v2 else 1)
        pl_at = topic_at + topic_len
        if pl_at + 2 > end or pl_at + 2 + (view[pl_at] << 8 | view[pl_at + 1]) != end:
            raise _Doubt
        if (
            queue_id < 0
            or queue_offset < 0
            or not 0 <= store_ms <= MAX_TIMESTAMP_MS
            or not MIN_TIMESTAMP_MS <= born_ms <= MAX_TIMESTAMP_MS
        ):
            raise _Doubt
        body = bytes(view[body_at:tl_at])
        if crc32(body) & 0x7FFFFFFF != crc:
            raise _Doubt
        props = _properties(bytes(view[pl_at + 2 : end]).decode("utf-8", "replace"))
        tags = keys = None
        for name, value in props:  # the last one wins, as in Java's map
            if name == PROPERTY_TAGS:
                tags = value
            elif name == PROPERTY_KEYS:
                keys = value
        rows.append(
            dict(
                zip(
                    _NAMES,
                    (
                        bytes(view[topic_at:pl_at]).decode("utf-8", "replace"),
                        queue_id,
                        queue_offset,
                        physical,
                        (store_raw + physical.to_bytes(8, "big", signed=True)).hex().upper(),
                        body,
                        tags,
                        [k for k in keys.split(KEY_SEPARATOR) if k] if keys else [],
                        [p for p in props if not p[0].startswith(STORE_PROPERTY_PREFIX)],
                        epoch + td(milliseconds=born_ms),
                        epoch + td(milliseconds=store_ms),
                        _host(born_raw),
                        _host(store_raw),
                        flag,
                        sys_flag,
                        reconsume,
                        crc,
                    ),
                    strict=True,
                )
            )
        )
        pos = end
    return rows


def _properties(text: str) -> list[tuple[str, str]]:
    """Java's ``string2messageProperties``: items split on \\x02, each on \\x01 (trailing empty
    tokens do not count, as in ``String.split``); an item is kept when that leaves exactly a
    name and a value."""
    out = []
    for item in text.split(PROPERTY_SEPARATOR):
        if NAME_VALUE_SEPARATOR not in item:
            continue
        tokens = item.split(NAME_VALUE_SEPARATOR)
        while tokens and not tokens[-1]:
            tokens.pop()
        if len(tokens) == 2:
            out.append((tokens[0], tokens[1]))
    return out
