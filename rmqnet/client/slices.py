"""Variable-length slices of byte buffers gathered and scattered with numpy index arithmetic
(no Python loop per slice): the building blocks of the batch encoder and the record decoder.

``np.repeat(start - out_start, lengths) + arange(total)`` maps every byte of the output to
its source byte; one fancy-indexing pass then moves them all.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices of every byte of the slices ``[starts[i], starts[i] + lengths[i])``, in order."""
    lengths = lengths.astype(np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    out_starts = np.cumsum(lengths) - lengths
    return np.repeat(starts.astype(np.int64) - out_starts, lengths) + np.arange(total, dtype=np.int64)


def binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A binary or string array's ``(data uint8, starts, lengths)`` (nulls count as empty)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.large_binary())
        off_type: type = np.int64
    else:
        arr = arr.cast(pa.binary())
        off_type = np.int32
    arr = arr.fill_null(b"")
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], off_type)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return data, offsets[:-1], np.diff(offsets)
