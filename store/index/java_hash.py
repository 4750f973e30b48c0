"""Java's ``String.hashCode`` over a whole Arrow string column at once (index keys).

``h = 31*h + c`` over the string's UTF-16 code units, 32-bit wrapping (``s[0]*31^(n-1) + ... +
s[n-1]``). Strings arrive as UTF-8 (Arrow string or binary columns); a code point above U+FFFF
is two UTF-16 units (a surrogate pair), as in Java.

Two vectorized forms, no loop per string or per character. numpy's uint32 arithmetic wraps
modulo 2^32, which is exactly Java's int overflow.

- Strings of one length ``L`` (client msgIds: 32 hex digits) form an ``(n, L)`` matrix, and
  Horner's rule runs over its columns, 4 at a time (:func:`_horner_hash`).
- Any lengths: with the code units of a chunk of strings at flat positions ``p``::

      h(s) = 31^(e-1) * sum_{b <= p < e} u_p * inv31^p      (mod 2^32)

  where ``[b, e)`` are the string's positions and ``inv31`` is 31's inverse modulo 2^32 (31
  is odd): one multiplication, one cumulative sum and two gathers over the whole chunk
  (:func:`_prefix_sum_hash`).

Strings are spans of one UTF-8 buffer (the rows of an Arrow column, or the KEYS tokens
inside them, :func:`java_hash_spans`): ASCII bytes are their own UTF-16 units; other text is
decoded to UTF-16 for the whole buffer at once.

Bytes that are not valid UTF-8 (a record written by another tool) are decoded as Java's
``new String(bytes, UTF_8)`` does in RocketMQ's ``MessageDecoder``: each malformed sequence
becomes U+FFFD. Those rows (only those) go through Python's ``bytes.decode(errors="replace")``,
which follows the same Unicode "maximal subpart" rule.

A plain scalar reference is :func:`rmqlog.hashing.java_string_hash`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_INV31 = pow(31, -1, 1 << 32)
#: Code units hashed per step: bounds the power tables (4 MiB each) and the temporaries.
CHUNK_UNITS = 1 << 20

_pow31 = np.ones(1, np.uint32)
_inv31 = np.ones(1, np.uint32)


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``31^p`` and ``inv31^p`` (mod 2^32) for ``p < n``, cached and grown by doubling."""
    global _pow31, _inv31
    if len(_pow31) < n:
        size = max(n, 2 * len(_pow31), 1024)
        with np.errstate(over="ignore"):
            a = np.full(size, 31, np.uint32)
            a[0] = 1
            b = np.full(size, _INV31, np.uint32)
            b[0] = 1
            _pow31 = np.cumprod(a, dtype=np.uint32)
            _inv31 = np.cumprod(b, dtype=np.uint32)
    return _pow31, _inv31


def pow31(exponents: np.ndarray) -> np.ndarray:
    """``31^e mod 2^32`` (uint32) for each exponent (non-negative ints)."""
    e = np.asarray(exponents, np.int64)
    table, _ = _powers(int(e.max()) + 1 if len(e) else 1)
    return table[e]


def string_parts(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(row offsets into the data, int64, ``n+1`` of them starting at 0; the data bytes, uint8)
    of a string or binary array (large variants too). Raises ``TypeError`` for other types."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        width = 8
    elif pa.types.is_string(t) or pa.types.is_binary(t):
        width = 4
    else:
        raise TypeError(f"expected a string or binary array, not {t}")
    n = len(arr)
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], np.int32 if width == 4 else np.int64, n + 1, arr.offset * width).astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    data = data[off[0] : off[-1]]
    return off - off[0], data


def is_ascii(data: np.ndarray) -> bool:
    return not len(data) or int(data.max()) < 0x80


def java_utf8(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``arr`` as Java reads it: rows that are not valid UTF-8 replaced by their decoding with
    U+FFFD per malformed sequence (``new String(bytes, UTF_8)``), re-encoded. The column
    itself when it is ASCII or valid (the usual case: one check, no copy). Binary in, string out."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    off, data = string_parts(arr)
    as_string = (
        arr
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
        else arr.view(pa.large_string() if pa.types.is_large_binary(arr.type) else pa.string())
    )
    if is_ascii(data):
        return as_string
    bad = _malformed_rows(off, data)
    if not len(bad):
        return as_string
    raw = data.tobytes()
    valid = np.asarray(arr.is_valid(), bool)
    # rare path (records written by other tools): row by row, as Java decodes
    values = [raw[off[i] : off[i + 1]].decode("utf-8", errors="replace") if valid[i] else None for i in range(len(arr))]
    return pa.array(values, pa.large_string())


def _malformed_rows(off: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Rows (indices) whose bytes are not strict UTF-8, as Arrow validates strings."""
    col = pa.LargeStringArray.from_buffers(len(off) - 1, pa.py_buffer(off), pa.py_buffer(data))
    try:
        col.validate(full=True)  # the whole column at once; rows singly only when it fails
        return np.zeros(0, np.int64)
    except pa.ArrowInvalid:
        pass
    raw = data.tobytes()
    bad = []
    for i in range(len(off) - 1):  # rare path: the column holds malformed UTF-8
        try:
            raw[off[i] : off[i + 1]].decode("utf-8")
        except UnicodeDecodeError:
            bad.append(i)
    return np.asarray(bad, np.int64)


def _utf16_units(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(byte position -> UTF-16 unit position, ``len(data)+1`` of them; the units, uint32) of
    UTF-8 bytes. Positions at character boundaries map exactly; a code point above U+FFFF
    gives two units (a surrogate pair)."""
    b = data.astype(np.uint32)
    lead = np.flatnonzero((b & 0xC0) != 0x80)
    b0 = b[lead]
    nb = 1 + (b0 >= 0xC0).astype(np.int64) + (b0 >= 0xE0) + (b0 >= 0xF0)
    padded = np.concatenate([b, np.zeros(3, np.uint32)])
    c1 = padded[lead + 1] & 0x3F
    c2 = padded[lead + 2] & 0x3F
    c3 = padded[lead + 3] & 0x3F
    cp = np.where(
        nb == 1,
        b0,
        np.where(
            nb == 2,
            ((b0 & 0x1F) << 6) | c1,
            np.where(nb == 3, ((b0 & 0x0F) << 12) | (c1 << 6) | c2, ((b0 & 0x07) << 18) | (c1 << 12) | (c2 << 6) | c3),
        ),
    )
    pair = cp >= 0x10000
    per_lead = 1 + pair.astype(np.int64)
    starts = np.cumsum(per_lead) - per_lead
    units = np.empty(int(per_lead.sum()), np.uint32)
    with np.errstate(over="ignore"):
        high = 0xD800 + ((cp - 0x10000) >> 10)
        units[starts] = np.where(pair, high, cp)
        units[starts[pair] + 1] = 0xDC00 + ((cp[pair] - 0x10000) & 0x3FF)
    per_byte = np.zeros(len(b), np.int64)
    per_byte[lead] = per_lead
    cum = np.zeros(len(b) + 1, np.int64)
    np.cumsum(per_byte, out=cum[1:])
    return cum, units


def _prefix_sum_hash(units: np.ndarray, us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """Java hash (uint32) of each span ``[us, ue)`` of ``units`` (spans in increasing order,
    not overlapping), any lengths: the prefix-sum form of the module docstring, in chunks."""
    n = len(us)
    out = np.zeros(n, np.uint32)
    lo = 0
    while lo < n:
        # spans [lo, hi) within CHUNK_UNITS units of the first (at least one span)
        hi = int(np.searchsorted(ue, us[lo] + CHUNK_UNITS, side="right"))
        hi = min(max(hi, lo + 1), n)
        base = int(us[lo])
        seg = units[base : int(ue[hi - 1])]
        pw, inv = _powers(max(len(seg), 1))
        with np.errstate(over="ignore"):
            cs = np.zeros(len(seg) + 1, np.uint32)
            np.cumsum(seg * inv[: len(seg)], dtype=np.uint32, out=cs[1:])
            s = us[lo:hi] - base
            e = ue[lo:hi] - base
            # an empty span's sum is 0, whatever power it is multiplied by
            out[lo:hi] = (cs[e] - cs[s]) * pw[np.maximum(e - 1, 0)]
        lo = hi
    return out


_P1, _P2, _P3, _P4 = (np.uint32(pow(31, k, 1 << 32)) for k in (1, 2, 3, 4))


def _horner_hash(mat: np.ndarray) -> np.ndarray:
    """Java hash (uint32) of each row of an ``(n, L)`` matrix of units (rows of one length).

    Leading zero units do not change the hash, so the rows are padded on the left to a
    multiple of 4 columns, and each group of 4 becomes one number (``a*31^3 + b*31^2 + c*31
    + d``) before Horner's rule runs over the groups with ``31^4``: L/4 steps over whole
    columns. ~0.9 ns per unit where the prefix-sum form costs ~2-3 (and a float64 BLAS
    product, exact for 32 columns, was slower still on this shared 2-core machine: its
    threads spin)."""
    n, width = mat.shape
    pad = (-width) % 4
    cols = np.zeros((width + pad, n), np.uint32)
    cols[pad:] = mat.T
    with np.errstate(over="ignore"):
        q = cols[0::4] * _P3 + cols[1::4] * _P2 + cols[2::4] * _P1 + cols[3::4]
        h = q[0].copy()
        for row in q[1:]:
            h *= _P4
            h += row
    return h


#: Rows of one length up to this many units take Horner's form (a padded copy of the rows).
_HORNER_MAX_WIDTH = 256


def java_hash_spans(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Java ``String.hashCode`` as int32, length in UTF-16 units as int64) of each span
    ``data[starts[i]:ends[i]]`` of UTF-8 bytes.

    Spans are in increasing order, do not overlap, and start and end at character
    boundaries of valid UTF-8 (see :func:`java_utf8`); the bytes between spans do not matter.
    """
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    n = len(starts)
    if n == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    if is_ascii(data):
        units, us, ue = data, starts, ends  # ASCII is its own UTF-16
    else:
        cum, units = _utf16_units(data)
        us, ue = cum[starts], cum[ends]
    lengths = ue - us
    width = int(lengths[0])
    if 0 < width <= _HORNER_MAX_WIDTH and bool((lengths == width).all()):
        if n == 1 or bool((us[1:] == ue[:-1]).all()):
            mat = units[int(us[0]) : int(ue[-1])].reshape(n, width)
        else:
            mat = units[us[:, None] + np.arange(width)]
        h = _horner_hash(mat)
    else:
        h = _prefix_sum_hash(units, us, ue)
    return h.view(np.int32), lengths


def java_hash_column(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(Java ``String.hashCode`` as int32, length in UTF-16 units as int64) per row.

    ``arr`` is an Arrow string or binary array (UTF-8 bytes; large variants accepted;
    malformed rows read as :func:`java_utf8` does); a null row hashes as the empty string
    (0, length 0). Raises ``TypeError`` for other types.
    """
    arr = java_utf8(arr)
    off, data = string_parts(arr)
    ends = off[1:]
    if arr.null_count:  # a null row may still own bytes
        ends = np.where(np.asarray(arr.is_valid(), bool), ends, off[:-1])
    return java_hash_spans(data, off[:-1], ends)


def concat_hash(prefix_hash: np.ndarray, suffix_hash: np.ndarray, suffix_len: np.ndarray) -> np.ndarray:
    """Java hash (int32) of ``prefix + suffix`` from the parts' hashes and the suffix's UTF-16 length:
    ``h(a + b) = h(a) * 31^len(b) + h(b)`` (mod 2^32)."""
    with np.errstate(over="ignore"):
        h = prefix_hash.astype(np.int32).view(np.uint32) * pow31(suffix_len) + suffix_hash.astype(np.int32).view(
            np.uint32
        )
    return h.view(np.int32)


def index_key_hash(h: np.ndarray) -> np.ndarray:
    """RocketMQ's ``IndexFile.indexKeyHashMethod`` per row: ``Math.abs(hashCode)``, and 0 where
    that is still negative (``Math.abs(Integer.MIN_VALUE)`` is ``Integer.MIN_VALUE``). int32."""
    with np.errstate(over="ignore"):
        a = np.abs(np.asarray(h, np.int32))
    a[a < 0] = 0
    return a


def index_key_hash_scalar(java_hash: int) -> int:
    """:func:`index_key_hash` of one signed 32-bit hash."""
    a = abs(java_hash)
    return 0 if a > 0x7FFFFFFF else a
