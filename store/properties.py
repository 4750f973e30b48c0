"""Vectorized codec of RocketMQ's properties string, ``name \\x01 value \\x02`` repeated.

Known names (exact strings) used by the store: ``KEYS`` (space-separated keys), ``TAGS``,
``UNIQ_KEY`` (client message id), ``DELAY``, ``REAL_TOPIC``, ``REAL_QID``, and our own
``RMQLOG_WRITER`` (idempotence marker). The scalar codec is
:func:`store.record.encode_properties` / :func:`store.record.decode_properties`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
# ours: "<sequence> <writer>" on the last record of an idempotent batch (MessageStore.put_batch)
PROPERTY_WRITER = "RMQLOG_WRITER"

KEY_SEPARATOR = " "

_EMPTY_STR = pa.scalar("", pa.string())


def _flat(arr: pa.Array) -> pa.Array:
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def list_offsets(lists: pa.ListArray | pa.MapArray) -> np.ndarray:
    """Offsets of a list/map array as int64 numpy, relative to its flattened values."""
    off = np.asarray(lists.offsets, dtype=np.int64)
    return off - off[0]


def counts_to_offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=out[1:])
    return out


def join_pairs(keys: pa.Array, values: pa.Array, offsets: np.ndarray) -> pa.Array:
    """Per row, ``k1\\x01v1\\x02k2\\x01v2\\x02...`` from flattened keys/values and row offsets."""
    pairs = pc.binary_join_element_wise(keys, values, "\x01")
    lists = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pairs)
    joined = pc.binary_join(lists, "\x02")
    # binary_join puts separators between items only: add the trailing \x02 to non-empty rows
    nonempty = pc.greater(pc.binary_length(joined), 0)
    return pc.if_else(nonempty, pc.binary_join_element_wise(joined, "\x02", ""), _EMPTY_STR)


def single_property(name: str, values: pa.Array) -> pa.Array:
    """``name\\x01value\\x02`` per row; the empty string where ``values`` is null."""
    s = pc.binary_join_element_wise(name + "\x01", values, "\x02", "")
    return pc.fill_null(s, _EMPTY_STR)


class ParsedProperties:
    """Properties strings parsed into a map column, with TAGS and KEYS pulled out."""

    def __init__(self, props: pa.Array) -> None:
        props = _flat(props)
        n = len(props)
        parts = pc.split_pattern(props, "\x02")
        flat = pc.list_flatten(parts)
        parent = np.asarray(pc.list_parent_indices(parts))
        kv = pc.split_pattern(flat, "\x01", max_splits=1)
        good = np.asarray(pc.equal(pc.list_value_length(kv), 2))
        if not good.all():  # empty trailing items and malformed ones are dropped, as RocketMQ does
            kv = kv.filter(pa.array(good))
            parent = parent[good]
        pairs = pc.list_flatten(kv)
        m = len(pairs) // 2
        self.keys = pairs.take(pa.array(np.arange(0, 2 * m, 2)))
        self.values = pairs.take(pa.array(np.arange(1, 2 * m, 2)))
        self.parent = parent
        counts = np.bincount(parent, minlength=n) if m else np.zeros(n, np.int64)
        self.offsets = counts_to_offsets(counts)
        self.n = n

    def map_array(self) -> pa.MapArray:
        return pa.MapArray.from_arrays(pa.array(self.offsets), self.keys, self.values)

    def column(self, name: str) -> pa.StringArray:
        """The value of property ``name`` per row, null where absent (the last one wins)."""
        hit = np.flatnonzero(np.asarray(pc.equal(self.keys, name)))
        idx = np.full(self.n, -1, np.int64)
        idx[self.parent[hit]] = hit
        mask = idx < 0
        if mask.all():
            return pa.nulls(self.n, pa.string())
        return self.values.take(pa.array(idx, mask=mask))

    def has(self, name: str) -> np.ndarray:
        hit = np.flatnonzero(np.asarray(pc.equal(self.keys, name)))
        out = np.zeros(self.n, bool)
        out[self.parent[hit]] = True
        return out


def split_keys(keys_prop: pa.Array) -> pa.ListArray:
    """``KEYS`` values split on spaces into list<string>; empty tokens dropped, null -> []."""
    n = len(keys_prop)
    filled = pc.fill_null(keys_prop, _EMPTY_STR)
    parts = pc.split_pattern(filled, KEY_SEPARATOR)
    flat = pc.list_flatten(parts)
    parent = np.asarray(pc.list_parent_indices(parts))
    keep = np.asarray(pc.greater(pc.binary_length(flat), 0))
    if not keep.all():
        flat = flat.filter(pa.array(keep))
        parent = parent[keep]
    counts = np.bincount(parent, minlength=n) if len(parent) else np.zeros(n, np.int64)
    return pa.ListArray.from_arrays(pa.array(counts_to_offsets(counts)), flat)
