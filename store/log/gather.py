"""Vectorized byte gathering: many (start, length) slices of one buffer into one Arrow array.

The trick: an Arrow binary array of ``2n`` elements whose offsets are
``[s0, e0, s1, e1, ..., e(n-1), e(n-1)]`` over the source buffer is a valid zero-copy view
when the slices are sorted and do not overlap; its even elements are the slices and the odd
ones the gaps between them. ``take`` of the even elements copies exactly the wanted bytes,
in C++, into one contiguous buffer. No Python loop runs per slice.

When the optional C helper ``rmqlog._native`` is built, its ``gather`` does the same copy
with one ``memcpy`` per slice and no per-element bookkeeping (measured 25-50 ns per slice
for ``take``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..native import (
    gather as _native_gather,  # the C helper's (None without it: Arrow's take below)
)

#: The largest offset of a binary array (32-bit offsets).
_INT32_MAX = (1 << 31) - 1


def gather_slices(source: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.LargeBinaryArray:
    """Copy ``source[starts[i] : starts[i] + lengths[i]]`` for each i into one binary array.

    Slices may come in any order and overlap; the usual case (records of a log read in log
    order: ascending, disjoint) is the fast one. The result owns its memory (no reference to
    ``source``). Raises ``ValueError`` if a slice is not inside ``source``.
    """
    n = len(starts)
    if n == 0:
        return pa.array([], pa.large_binary())
    starts = np.asarray(starts, np.int64)
    if _native_gather is not None:  # one memcpy per slice in C, GIL released; checks bounds
        lengths = np.ascontiguousarray(lengths, np.int64)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        out = np.empty(int(offsets[-1]), np.uint8)
        _native_gather(source, np.ascontiguousarray(starts), lengths, out)
        return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out)])
    lengths = np.asarray(lengths, np.int64)
    # Arrow does not validate the view below: a slice outside the source would read outside it
    if (starts < 0).any() or (lengths < 0).any() or (lengths > source.size - starts).any():
        raise ValueError("a slice is outside the source buffer")
    ends = starts + lengths
    if n > 1 and (starts[1:] < ends[:-1]).any():  # out of order or overlapping (damaged input)
        return _gather_any_order(source, starts, lengths)
    offsets = np.empty(2 * n + 1, np.int64)
    offsets[0:-1:2] = starts
    offsets[1::2] = ends
    offsets[-1] = ends[-1]
    view = pa.LargeBinaryArray.from_buffers(pa.large_binary(), 2 * n, [None, pa.py_buffer(offsets), source])
    return view.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))


def _gather_any_order(source: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.LargeBinaryArray:
    """:func:`gather_slices` for slices out of order or overlapping: one numpy take of every
    byte (an index per byte: slower, but only damaged input gets here)."""
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.arange(int(offsets[-1]), dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    out = np.frombuffer(source, np.uint8)[index]
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(out)]
    )


def fixed_rows(arr: pa.LargeBinaryArray | pa.BinaryArray, width: int) -> np.ndarray:
    """The contiguous bytes of an array whose every element is ``width`` bytes, as (n, width) uint8."""
    n = len(arr)
    bufs = arr.buffers()
    offsets_dtype = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    first = (
        int(np.frombuffer(bufs[1], offsets_dtype, count=1, offset=arr.offset * np.dtype(offsets_dtype).itemsize)[0])
        if n
        else 0
    )
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return data[first : first + n * width].reshape(n, width)


def to_binary(arr: pa.Array) -> pa.BinaryArray:
    """A large_binary array as plain binary (32-bit offsets) when it fits."""
    if not pa.types.is_large_binary(arr.type):
        return arr
    n = len(arr)
    if n and arr.offset == 0:
        # what gather_slices makes (offsets from 0): the same buffers with the offsets
        # narrowed by numpy; a cast costs ~20-60 us of fixed set-up, several times a dispatch
        bufs = arr.buffers()
        offsets = np.frombuffer(bufs[1], np.int64, n + 1)
        if bufs[2] is not None and offsets[0] == 0 and offsets[-1] <= _INT32_MAX:
            return pa.BinaryArray.from_buffers(
                pa.binary(), n, [bufs[0], pa.py_buffer(offsets.astype(np.int32)), bufs[2]], null_count=arr.null_count
            )
    return arr.cast(pa.binary())


def utf8_lossy(arr: pa.Array) -> pa.StringArray:
    """Binary -> string the way RocketMQ's broker decodes text (Java's ``new String(b, UTF_8)``).

    Valid UTF-8 (everything our encoder and Java clients write) costs one validating cast.
    Bytes that are not UTF-8 (a non-Java client, a damaged record) must not make a store
    unreadable: only the rows that fail, found by halving the array (a few casts, no loop
    over the valid rows), are decoded with U+FFFD for each malformed sequence, as Java does.
    """
    arr = to_binary(arr)
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        pass
    bad: list[int] = []

    def find(lo: int, hi: int) -> None:
        try:
            arr.slice(lo, hi - lo).cast(pa.string())
        except pa.ArrowInvalid:
            if hi - lo == 1:
                bad.append(lo)
                return
            mid = (lo + hi) // 2
            find(lo, mid)
            find(mid, hi)

    find(0, len(arr))
    mask = np.zeros(len(arr), bool)
    mask[bad] = True
    fixed = pa.array([arr[i].as_py().decode("utf-8", "replace").encode() for i in bad], pa.binary())
    return pc.replace_with_mask(arr, pa.array(mask), fixed).cast(pa.string())
