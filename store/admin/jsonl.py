"""Messages as JSON lines, built a whole column at a time (the ``rmqlog`` command's output).

One JSON object per message, keys in the message table's column order (``topic``,
``queueId``, ..., ``bodyCRC``), the text byte for byte what ``json.dumps(row,
ensure_ascii=False)`` gives for the row as :func:`row_dict` makes it:

- strings (topic, msgId, tags, hosts, keys, property names and values) JSON-escaped
  (``"``, ``\\``, and control characters as ``\\n``, ``\\t``... or ``\\u00XX``; other
  characters as they are, UTF-8); a null is ``null``;
- ``body``: UTF-8 text (bytes that are not UTF-8 become U+FFFD, as Python's ``"replace"``),
  lowercase hex, or left out (``body="none"``);
- ``keys`` a list, ``properties`` an object (a name given twice keeps its last value only in
  :func:`row_dict`; here both are written), timestamps ISO 8601 in UTC to the millisecond
  (``2026-11-24T04:00:00.123+00:00``).

Why not ``json.dumps`` per row: it made export a per-message Python loop (~22 k msgs/s,
40-50 s a million against ~4 s for Parquet). Here every step is an Arrow
compute call or a numpy operation over a whole batch: escaping is ``replace_substring`` over
the column (the 32 control characters only when the column has one), hex is a numpy table
lookup, lists and maps are joined with ``binary_join`` over their offsets, and the lines are
joined element-wise; the batch's text is then one buffer written at once. Bodies that are
not valid UTF-8 are the one exception: the rows of a 256-row block that fails the
UTF-8 check are decoded one by one (``--body hex`` avoids it).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

BODY_MODES = ("text", "hex", "none")

#: json.dumps' escapes of the control characters (ESCAPE_DCT): named ones, else \u00xx
_CONTROL = {i: json.dumps(chr(i))[1:-1] for i in range(32)}
#: byte -> its two hex digits as one uint16 (a 1-D take is ~10x faster than rows of a 2-D table)
_HEX = np.frombuffer(b"".join(b"%02x" % i for i in range(256)), np.uint16)
_TEXT = pa.large_string()
#: string columns of few distinct values
_FEW = frozenset({"topic", "tags", "bornHost", "storeHost"})
#: rows per UTF-8 check of bodies, when a batch holds a body that is not UTF-8
_BLOCK = 256


def row_dict(row: dict[str, Any], body: str) -> dict[str, Any]:
    """One message (a row of ``Table.to_pylist()``) as JSON values: the scalar reference of
    :func:`encode` (the tests check that both agree)."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        if k == "body":
            if body == "none":
                continue
            v = v.hex() if body == "hex" else v.decode("utf-8", "replace")
        elif isinstance(v, dt.datetime):
            v = v.isoformat(timespec="milliseconds")
        elif k == "properties" and v is not None:
            v = dict(v)
        out[k] = v
    return out


def _cat(*parts: pa.Array | str) -> pa.Array:
    """Element-wise concatenation of large_string arrays and constants (null if any is null)."""
    args = [pa.scalar(p, _TEXT) if isinstance(p, str) else p for p in parts]
    return pc.binary_join_element_wise(*args, pa.scalar("", _TEXT))


def _large(a: pa.Array) -> pa.Array:
    return a.cast(_TEXT) if a.type != _TEXT else a


def _special_bytes(a: pa.Array) -> np.ndarray:
    """The distinct bytes of a string array's values that JSON escapes (``"``, ``\\``,
    controls): one numpy pass over the UTF-8 buffer (bytes of other characters are >= 0x80)."""
    n = len(a)
    data = a.buffers()[2]
    if n == 0 or data is None:
        return np.zeros(0, np.uint8)
    width = np.int64 if pa.types.is_large_string(a.type) else np.int32
    offsets = np.frombuffer(a.buffers()[1], width, n + 1, a.offset * np.dtype(width).itemsize)
    raw = np.frombuffer(data, np.uint8)[int(offsets[0]) : int(offsets[-1])]
    return np.unique(raw[(raw < 0x20) | (raw == 0x22) | (raw == 0x5C)])


def _escaped(a: pa.Array) -> pa.Array:
    """JSON string literals (quoted) of a string array; nulls stay null."""
    a = _large(a)
    special = _special_bytes(a)
    if 0x5C in special:  # the backslash first: the escapes below add backslashes
        a = pc.replace_substring(a, "\\", "\\\\")
    for code in special.tolist():
        if code != 0x5C:
            a = pc.replace_substring(a, chr(code), '\\"' if code == 0x22 else _CONTROL[code])
    return _cat('"', a, '"')


def _strings(a: pa.Array, *, few: bool = False) -> pa.Array:
    """JSON values of a string array. ``few``: a column of few distinct values (topic, tags,
    hosts, property names): escaped once per value, then taken."""
    if few and len(a) > 16:
        d = pc.dictionary_encode(a)
        return pc.fill_null(pc.take(_escaped(d.dictionary), d.indices), "null")
    return pc.fill_null(_escaped(a), "null")


def _numbers(a: pa.Array) -> pa.Array:
    return pc.fill_null(a.cast(_TEXT), "null")


#: ".000" .. ".999" and the closing of a time value
_MILLIS = pa.array([f'.{i:03d}+00:00"' for i in range(1000)], _TEXT)


def _times(a: pa.Array) -> pa.Array:
    """``"YYYY-MM-DDTHH:MM:SS.mmm+00:00"`` (isoformat truncates to ms too): the distinct
    seconds formatted once (a batch spans few), the milliseconds from a table of 1000."""
    ms = pc.cast(a, pa.timestamp("ms", tz="UTC"), safe=False).cast(pa.int64())
    seconds = pc.floor(pc.divide(ms.cast(pa.float64()), 1000.0)).cast(pa.int64())
    millis = pc.subtract(ms, pc.multiply(seconds, 1000))
    d = pc.dictionary_encode(seconds)
    text = pc.strftime(d.dictionary.cast(pa.timestamp("s", tz="UTC")), format='"%Y-%m-%dT%H:%M:%S')
    return pc.fill_null(_cat(pc.take(_large(text), d.indices), pc.take(_MILLIS, millis)), "null")


def _rebased(offsets: pa.Array) -> tuple[pa.Array, int, int]:
    o = offsets.to_numpy()
    return pa.array(o - o[0], pa.int32()), int(o[0]), int(o[-1])


def _lists(a: pa.ListArray) -> pa.Array:
    offsets, lo, hi = _rebased(a.offsets)
    items = _strings(a.values.slice(lo, hi - lo))
    joined = pc.binary_join(pa.ListArray.from_arrays(offsets, items, mask=pc.is_null(a)), pa.scalar(", ", _TEXT))
    return pc.fill_null(_cat("[", joined, "]"), "null")


def _maps(a: pa.MapArray) -> pa.Array:
    offsets, lo, hi = _rebased(a.offsets)
    pairs = _cat(_strings(a.keys.slice(lo, hi - lo), few=True), ": ", _strings(a.items.slice(lo, hi - lo)))
    joined = pc.binary_join(pa.ListArray.from_arrays(offsets, pairs, mask=pc.is_null(a)), pa.scalar(", ", _TEXT))
    return pc.fill_null(_cat("{", joined, "}"), "null")


def _hex(a: pa.BinaryArray) -> pa.Array:
    """Lowercase hex of every value: a numpy table lookup over the values buffer."""
    n = len(a)
    offsets = np.frombuffer(a.buffers()[1], np.int32, n + 1, a.offset * 4).astype(np.int64)
    data = a.buffers()[2]
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    text = np.take(_HEX, raw[offsets[0] : offsets[-1]]).view(np.uint8)
    out = pa.LargeStringArray.from_buffers(n, pa.py_buffer((offsets - offsets[0]) * 2), pa.py_buffer(text))
    quoted = _cat('"', out, '"')
    return pc.if_else(pc.is_null(a), "null", quoted) if a.null_count else quoted


def _text(a: pa.BinaryArray) -> pa.Array:
    """Bodies as UTF-8 text, bytes that are not UTF-8 replaced by U+FFFD (Python's "replace")."""
    try:
        return _strings(a.cast(pa.string()))  # the cast checks UTF-8 for the whole batch at once
    except pa.ArrowInvalid:
        pass
    blocks = []
    for start in range(0, len(a), _BLOCK):
        block = a.slice(start, _BLOCK)
        try:
            blocks.append(block.cast(pa.string()))
        except pa.ArrowInvalid:  # this block has a body that is not UTF-8: decode its rows
            blocks.append(
                pa.array([None if v is None else v.decode("utf-8", "replace") for v in block.to_pylist()], pa.string())
            )
    return _strings(pa.concat_arrays(blocks))


def _column(name: str, a: pa.Array, body: str) -> pa.Array:
    t = a.type
    if name == "body":
        return _hex(a) if body == "hex" else _text(a)
    if pa.types.is_map(t):
        return _maps(a)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _lists(a)
    if pa.types.is_timestamp(t):
        return _times(a)
    if pa.types.is_integer(t):
        return _numbers(a)
    if pa.types.is_boolean(t):
        return pc.fill_null(pc.if_else(a, "true", "false").cast(_TEXT), "null")
    text = a if pa.types.is_string(t) or pa.types.is_large_string(t) else a.cast(pa.string())
    return _strings(text, few=name in _FEW)


def encode(batch: pa.RecordBatch | pa.Table, body: str = "text") -> pa.Array:
    """One JSON object per row (no newline), as a ``large_string`` array without nulls."""
    if body not in BODY_MODES:
        raise ValueError(f"body must be one of {BODY_MODES}, not {body!r}")
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    table = table.combine_chunks()
    pieces: list[Any] = []
    for name in table.column_names:
        if name == "body" and body == "none":
            continue
        col = table.column(name)
        value = _column(name, col.chunk(0) if col.num_chunks else pa.array([], col.type), body)
        pieces += [("{" if not pieces else ", ") + json.dumps(name) + ": ", _large(value)]
    if not pieces:
        return pa.array(["{}"] * table.num_rows, _TEXT)
    return _cat(*pieces, "}")


def lines(batch: pa.RecordBatch | pa.Table, body: str = "text") -> memoryview:
    """The JSON lines of a batch (each object followed by ``\\n``) as one UTF-8 buffer."""
    text = _cat(encode(batch, body), "\n")
    n = len(text)
    if n == 0:
        return memoryview(b"")
    offsets = np.frombuffer(text.buffers()[1], np.int64, n + 1, text.offset * 8)
    return memoryview(text.buffers()[2])[int(offsets[0]) : int(offsets[-1])]
