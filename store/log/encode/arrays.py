"""Arrow buffer helpers of the encoder: offsets and lengths read straight from an array's
buffers, cheap screens over whole columns, and numpy shortcuts without Python wrappers (every
put runs them: a put's cost is mostly per call, not per byte)."""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from . import native


def flat(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array; a column of one chunk is used as is (no copy of the bodies)."""
    if isinstance(col, pa.ChunkedArray):
        return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col


def data_and_offsets(arr: pa.Array, a: int = 0, b: int | None = None) -> tuple[int, np.ndarray]:
    """(address of the data buffer, int64 value offsets of rows ``[a, b)``) of a binary or
    string array."""
    b = len(arr) if b is None else b
    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
        off = np.frombuffer(arr.buffers()[1], np.int64, b - a + 1, (arr.offset + a) * 8)
    else:
        off = np.frombuffer(arr.buffers()[1], np.int32, b - a + 1, (arr.offset + a) * 4).astype(np.int64)
    data = arr.buffers()[2]
    return (data.address if data is not None else 0), off


def value_lengths(arr: pa.Array) -> np.ndarray:
    """Byte length of each value of a binary/string array (0 for a null), from its offsets."""
    if len(arr) == 0:
        return np.zeros(0, np.int64)
    offsets = data_and_offsets(arr)[1]
    lengths = offsets[1:] - offsets[:-1]  # np.diff's Python wrapper costs more than the subtraction here
    if arr.null_count:  # Arrow lets a null's offsets span bytes: it has none
        lengths[np.asarray(arr.is_null())] = 0
    return lengths


def first(mask: np.ndarray) -> int:
    """The first row where ``mask`` is true (the row an error names)."""
    return int(np.flatnonzero(mask)[0])


def is_stringish(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def all_equal(col: pa.StringArray) -> bool:
    """Whether every value of a string column without nulls is the same (cheap screen).

    All values as long as the first and every value equal to the next one (one compare of
    the value bytes with themselves shifted by a value): ~3x cheaper than ``pc.equal``
    against the first value, which dominated the encoding of one-topic batches. Straight
    from the Arrow buffers (int32 offsets), with no numpy wrapper functions: every put runs it.
    The C helper's ``all_same`` (a memcmp per row) does it in one call when built.
    """
    n = len(col)
    buffers = col.buffers()
    if native.all_same is not None:
        return bool(native.all_same(buffers[1], col.offset, n, buffers[2] if buffers[2] is not None else b""))
    offsets = np.frombuffer(buffers[1], np.int32, n + 1, col.offset * 4)
    start = int(offsets[0])
    width = int(offsets[1]) - start
    if int(offsets[n]) - start != n * width or not (offsets[1:] - offsets[:-1] == width).all():
        return False
    if width == 0 or buffers[2] is None:
        return True
    raw = np.frombuffer(buffers[2], np.uint8, n * width, start)
    return bool((raw[width:] == raw[:-width]).all())


def int64_array(values: np.ndarray) -> pa.Array:
    """``pa.array(values)`` of integers as an int64 Arrow array sharing their memory (no
    null): ``pa.array`` of a numpy array costs ~20 us a call, wrapping its buffer ~4 us. The
    caller must not change ``values`` afterwards (the array sees it)."""
    values = np.ascontiguousarray(values, np.int64)
    return pa.Array.from_buffers(_INT64, len(values), [None, pa.py_buffer(values)])


_INT64 = pa.int64()


def int64_filled(n: int, value: int) -> np.ndarray:
    """``np.full(n, value, np.int64)`` without its Python wrapper (per put, in the hot path)."""
    out = np.empty(n, np.int64)
    out.fill(value)
    return out


def repeat_cycle(values: np.ndarray, n: int) -> np.ndarray:
    """``values[i % len(values)]`` for ``i < n``: whole copies of ``values`` one after another.

    ``np.repeat`` of the row copies whole rows: ~5x cheaper than ``%`` over the rows, and
    far cheaper than ``np.tile`` (Python overhead) or a broadcast with an inner dimension of
    a few queues.
    """
    return values[None, :].repeat(-(-n // len(values)), axis=0).ravel()[:n]  # the method: no numpy wrapper


@functools.lru_cache(maxsize=1024)
def binary_scalar(value: bytes) -> pa.Scalar:
    """``pa.scalar(value, pa.binary())``, made once per value: a scalar costs ~10 us in a put
    (the topic's prefix, the properties length), and these repeat from put to put."""
    return pa.scalar(value, pa.binary())
