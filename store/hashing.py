"""Java ``String.hashCode`` as RocketMQ uses it (tagsCode, index keys).

``h = 31*h + c`` over the UTF-16 code units of the string with 32-bit overflow; the result
is a signed 32-bit int, sign-extended to 64 bits where RocketMQ stores a long (tagsCode).
``"TAG1"`` -> 2567159, ``"TagA"`` -> 2598919.

Tags and topics have few distinct values, so the vectorized form hashes the distinct values
of a column once each and spreads the results with their dictionary indices.
"""

from __future__ import annotations

import operator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: 31**k mod 2**32 for k = _POW_MAX - 1 down to 0: an ASCII string of n characters hashes as
#: the sum of its bytes times the last n of them (one C-level map, no Python step per character)
_POW_MAX = 1024
_POWERS = [pow(31, k, 1 << 32) for k in range(_POW_MAX - 1, -1, -1)]


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text`` as a signed 32-bit int."""
    if text.isascii() and len(text) <= _POW_MAX:  # (one UTF-16 unit per byte)
        data = text.encode()
        h = sum(map(operator.mul, data, _POWERS[_POW_MAX - len(data) :])) & 0xFFFFFFFF
        return h - (1 << 32) if h & 0x80000000 else h
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_codes(tags: pa.Array) -> np.ndarray:
    """int64 tagsCode per row of a string array; 0 where the value is null (no tags)."""
    n = len(tags)
    if n == 0 or tags.null_count == n:
        return np.zeros(n, np.int64)
    encoded = pc.dictionary_encode(tags)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    uniq = encoded.dictionary.to_pylist()
    table = np.fromiter((java_string_hash(u) for u in uniq), np.int64, len(uniq))
    idx = encoded.indices.to_numpy(zero_copy_only=False)
    if encoded.null_count:
        valid = ~np.asarray(encoded.is_null())
        out = np.zeros(n, np.int64)
        out[valid] = table[idx[valid].astype(np.int64)]
        return out
    return table[idx.astype(np.int64)]
