"""The index keys of dispatched messages, for a whole batch at once, and the check of a hit.

RocketMQ 4.9.8's ``IndexService.buildIndex`` indexes, per message, ``topic#UNIQ_KEY`` (when the
``UNIQ_KEY`` property is present) and then ``topic#token`` for every non-empty token of the
``KEYS`` property split on ``MessageConst.KEY_SEPARATOR`` (one space), in that order; a
rolled-back transaction record (SYSFLAG transaction bits 0xC) gets no key. The key hash is
``abs(String.hashCode(topic + "#" + key))``, 0 for ``Integer.MIN_VALUE``.

Here ``hash(topic + "#" + key)`` is ``hash(topic + "#") * 31^len(key) + hash(key)`` (mod
2^32, ``len`` in UTF-16 units): the topic part is hashed once per distinct topic, the keys
column by column (:mod:`rmqlog.index.java_hash`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError
from ..hashing import java_string_hash
from ..log.properties import PROPERTY_UNIQ_KEY
from .java_hash import (
    concat_hash,
    index_key_hash,
    index_key_hash_scalar,
    java_hash_column,
    java_hash_spans,
    java_utf8,
    string_parts,
)

#: ``MessageConst.KEY_SEPARATOR``.
KEY_SEPARATOR = " "
#: SYSFLAG transaction bits and the rolled-back type (``MessageSysFlag``).
TRANSACTION_MASK = 0xC
TRANSACTION_ROLLBACK = 0xC


def build_key(topic: str, key: str) -> str:
    """RocketMQ's ``IndexService.buildKey``: ``topic + "#" + key``."""
    return f"{topic}#{key}"


def key_hash(topic: str, key: str) -> int:
    """The index hash of one key (``abs(hashCode(topic#key))``, 0 for ``MIN_VALUE``)."""
    return index_key_hash_scalar(java_string_hash(build_key(topic, key)))


@dataclass(frozen=True)
class KeyBatch:
    """The keys of a batch of messages, in RocketMQ's order (message by message; within a
    message UNIQ_KEY first, then the KEYS tokens in order).

    ``message``: the row of each key's message (int64, non-decreasing); ``ordinal``: the
    key's position within its message (int64); ``key_hash``: the index hash (int32, >= 0).
    """

    message: np.ndarray
    ordinal: np.ndarray
    key_hash: np.ndarray

    def __len__(self) -> int:
        return len(self.message)

    def take(self, keep: np.ndarray) -> KeyBatch:
        return KeyBatch(self.message[keep], self.ordinal[keep], self.key_hash[keep])


def _flat(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def _string_column(arr: pa.Array | pa.ChunkedArray | None, n: int, name: str) -> pa.Array | None:
    if arr is None:
        return None
    arr = _flat(arr)
    if len(arr) != n:
        raise InvalidArgumentError(f"{name} has {len(arr)} rows, expected {n}")
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not (
        pa.types.is_string(arr.type)
        or pa.types.is_large_string(arr.type)
        or pa.types.is_binary(arr.type)
        or pa.types.is_large_binary(arr.type)
    ):
        raise InvalidArgumentError(f"{name} must be a string column, not {arr.type}")
    return arr


def _tokens(off: np.ndarray, data: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The KEYS tokens of each row: Java's ``split(" ")`` without its empty strings, i.e. the
    maximal runs of bytes other than 0x20 (a space byte is never part of a multi-byte UTF-8
    character). Returns (row, start, end) per token, in order, as byte spans of ``data``."""
    lengths = np.diff(off)
    sep = data == 0x20
    owned_by_null = ~valid & (lengths > 0)
    if owned_by_null.any():  # Arrow lets a null row own bytes: they are no tokens
        sep |= np.repeat(owned_by_null, lengths)
    rows_used = valid & (lengths > 0)
    if not sep.any():  # one token per non-empty row (the usual KEYS): no scan needed
        rows = np.flatnonzero(rows_used)
        return rows, off[rows], off[rows + 1]
    word = ~sep
    boundary = np.zeros(len(data) + 1, bool)
    boundary[off] = True  # row starts and ends
    before = np.empty(len(data), bool)
    before[0] = True
    before[1:] = sep[:-1]
    before |= boundary[:-1]
    after = np.empty(len(data), bool)
    after[-1] = True
    after[:-1] = sep[1:]
    after |= boundary[1:]
    starts = np.flatnonzero(word & before)
    ends = np.flatnonzero(word & after) + 1
    rows = np.searchsorted(off, starts, side="right") - 1
    return rows, starts, ends


#: topic (str, or bytes for a binary column) -> the Java hash of ``topic + "#"``, for columns
#: of at most _PREFIX_MEMO_TOPICS distinct topics (a dispatch round's); cleared past _PREFIX_MEMO_MAX
_PREFIX_MEMO: dict[str | bytes, int] = {}
_PREFIX_MEMO_TOPICS = 16
_PREFIX_MEMO_MAX = 4096


def _topic_prefix_hashes(topics: pa.Array | pa.ChunkedArray, n: int) -> np.ndarray:
    """Per row, the Java hash (int32) of ``topic + "#"``; a single value when there is one topic."""
    topics = _flat(topics)
    if len(topics) != n:
        raise InvalidArgumentError(f"topics has {len(topics)} rows, expected {n}")
    enc = topics if pa.types.is_dictionary(topics.type) else pc.dictionary_encode(topics)
    if enc.null_count:
        raise InvalidArgumentError("topics has nulls")
    values = enc.dictionary
    if not (
        pa.types.is_string(values.type)
        or pa.types.is_large_string(values.type)
        or pa.types.is_binary(values.type)
        or pa.types.is_large_binary(values.type)
    ):
        raise InvalidArgumentError(f"topics must be a string column, not {topics.type}")
    names = values.to_pylist() if len(values) <= _PREFIX_MEMO_TOPICS else None
    known = [_PREFIX_MEMO.get(name) for name in names] if names is not None else [None]
    if None not in known:  # (a round's few topics, hashed before: no Arrow call, ~60 us)
        prefix = np.array(known, np.int32)
    else:
        h, _ = java_hash_column(values)
        with np.errstate(over="ignore"):
            prefix = (h.view(np.uint32) * np.uint32(31) + np.uint32(ord("#"))).view(np.int32)
        if names is not None:
            if len(_PREFIX_MEMO) > _PREFIX_MEMO_MAX:
                _PREFIX_MEMO.clear()
            _PREFIX_MEMO.update(
                (name, int(v)) for name, v in zip(names, prefix.tolist(), strict=True) if name is not None
            )
    if len(prefix) == 1:
        return prefix  # one topic: one value for every row (broadcast)
    return prefix[np.asarray(enc.indices, np.int64)]


def message_keys(
    topics: pa.Array | pa.ChunkedArray,
    uniq_keys: pa.Array | pa.ChunkedArray | None,
    keys: pa.Array | pa.ChunkedArray | None,
    sys_flags: np.ndarray | None = None,
) -> KeyBatch:
    """The index keys of ``n`` messages (vectorized: no loop per message or per key).

    ``topics``: string (or dictionary of string) column, no nulls; ``uniq_keys``: the
    ``UNIQ_KEY`` property per row (null where absent) or ``None``; ``keys``: the ``KEYS``
    property per row (null where absent) or ``None``; ``sys_flags``: SYSFLAG per row, when
    given rolled-back transaction records get no keys (RocketMQ 4.9.8 indexes prepared ones).
    Raises :class:`InvalidArgumentError` when a column has the wrong length or type.
    """
    n = len(topics)
    uniq = _string_column(uniq_keys, n, "uniq_keys")
    keys_col = _string_column(keys, n, "keys")
    prefix = _topic_prefix_hashes(topics, n)

    # (message row, position among the message's keys after UNIQ_KEY, hash, UTF-16 length)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    has_uniq = np.zeros(n, np.int64)
    if uniq is not None and uniq.null_count < n:
        rows = np.flatnonzero(np.asarray(pc.is_valid(uniq)))
        values = uniq if len(rows) == n else uniq.take(pa.array(rows))
        h, lens = java_hash_column(values)
        parts.append((rows, np.full(len(rows), -1, np.int64), h, lens))
        has_uniq[rows] = 1
    token_rows = np.zeros(0, np.int64)
    if keys_col is not None and keys_col.null_count < n:
        keys_col = java_utf8(keys_col)
        off, data = string_parts(keys_col)
        token_rows, starts, ends = _tokens(off, data, np.asarray(keys_col.is_valid(), bool))
        if len(token_rows):
            counts = np.bincount(token_rows, minlength=n)
            first = np.cumsum(counts) - counts
            pos = np.arange(len(token_rows), dtype=np.int64) - first[token_rows]
            h, lens = java_hash_spans(data, starts, ends)
            parts.append((token_rows, pos, h, lens))
    if not parts:
        empty = np.zeros(0, np.int64)
        return KeyBatch(empty, empty, np.zeros(0, np.int32))

    # place every key at its position: message by message, UNIQ_KEY first, tokens in order
    token_counts = np.bincount(token_rows, minlength=n) if len(token_rows) else np.zeros(n, np.int64)
    if len(parts) == 2 and len(parts[0][0]) == n and len(token_rows) == n and bool((token_counts == 1).all()):
        # every message has a UNIQ_KEY and one token (the usual shape): interleave
        total = 2 * n
        pair = np.arange(total, dtype=np.int64)
        message, ordinal = pair >> 1, pair & 1
        hashes = np.empty(total, np.int32)
        lengths = np.empty(total, np.int64)
        hashes[0::2], hashes[1::2] = parts[0][2], parts[1][2]
        lengths[0::2], lengths[1::2] = parts[0][3], parts[1][3]
    else:
        counts = has_uniq + token_counts
        starts = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=starts[1:])
        total = int(starts[-1])
        message = np.repeat(np.arange(n, dtype=np.int64), counts)
        ordinal = np.arange(total, dtype=np.int64) - starts[message]
        hashes = np.empty(total, np.int32)
        lengths = np.empty(total, np.int64)
        for rows, pos, h, lens in parts:
            # UNIQ_KEY (pos -1) goes first; token j after it
            dest = starts[rows] + has_uniq[rows] + pos
            hashes[dest] = h
            lengths[dest] = lens
    full = concat_hash(prefix if len(prefix) == 1 else prefix[message], hashes, lengths)
    batch = KeyBatch(message, ordinal, index_key_hash(full))
    if sys_flags is not None:
        flags = np.asarray(sys_flags, np.int64)
        if len(flags) != n:
            raise InvalidArgumentError(f"sys_flags has {len(flags)} rows, expected {n}")
        rolled_back = (flags & TRANSACTION_MASK) == TRANSACTION_ROLLBACK
        if rolled_back.any():
            batch = batch.take(~rolled_back[batch.message])
    return batch


def direct_keys(messages: list[tuple[str, str | None, str | None]]) -> list[tuple[int, int, int]]:
    """The keys of a few messages given as ``(topic, UNIQ_KEY, KEYS)`` (``None``: absent), as
    :func:`message_keys` makes them (a test pins the two together), one at a time in plain
    Python (a direct put's dispatch: no Arrow call): ``(message row, ordinal, key hash)``."""
    out: list[tuple[int, int, int]] = []
    for row, (topic, uniq, keys) in enumerate(messages):
        tokens = [uniq] if uniq is not None else []
        if keys is not None:
            tokens += [t for t in keys.split(KEY_SEPARATOR) if t]
        out.extend((row, i, key_hash(topic, token)) for i, token in enumerate(tokens))
    return out


def key_matches(messages: pa.Table, topic: str, key: str) -> np.ndarray:
    """Which rows of a decoded message table (:data:`rmqlog.schema.MESSAGE_SCHEMA`: ``topic``,
    ``keys``, ``properties``) really carry ``key`` in ``topic``: as a ``KEYS`` token or as
    their ``UNIQ_KEY``. The index returns every entry whose hash matches; this removes the
    other keys' messages (hash collisions), as RocketMQ's client does. Returns a bool array.
    """
    n = messages.num_rows
    if n == 0:
        return np.zeros(0, bool)
    same_topic = np.asarray(pc.fill_null(pc.equal(messages.column("topic"), topic), False))
    hit = np.zeros(n, bool)
    if "keys" in messages.column_names:
        lists = _flat(messages.column("keys"))
        if len(lists.values):
            eq = np.asarray(pc.fill_null(pc.equal(lists.flatten(), key), False))
            parents = np.asarray(pc.list_parent_indices(lists), np.int64)
            hit[parents[eq]] = True
    if "properties" in messages.column_names:
        props = _flat(messages.column("properties"))
        uniq = pc.map_lookup(props, PROPERTY_UNIQ_KEY, "last")
        hit |= np.asarray(pc.fill_null(pc.equal(uniq, key), False))
    return same_topic & hit


def matching_messages(messages: pa.Table, topic: str, key: str) -> pa.Table:
    """The rows of ``messages`` for which :func:`key_matches` holds."""
    return messages.filter(pa.array(key_matches(messages, topic, key)))
