"""A wire put's properties kept as sent (the fast path of
:func:`~rmqlog.log.encode.wire_put.parse_wire_properties`), and the names that decide it: those
a wire put may not carry, those a broker's own put may, and those whose items are dropped.

What clients send is almost always ``name\x01value\x02`` items, ASCII, no name the store
routes or refuses: then Java's parse keeps every item in order and the stored string is the
sent one. One screen of the whole values buffer (names by first byte and length, then an exact
hash lookup of the few it lets through) decides it, with no step per row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..lmq import PROPERTY_INNER_MULTI_DISPATCH
from ..properties import (
    DELAY_PROPERTIES,
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
    STORE_PROPERTY_PREFIX,
)
from ..record import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from .trailer import JoinedProperties

#: Property names a wire put may not carry: the store's to set (see the module docstring).
WIRE_RESERVED = frozenset((PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID)) | (
    DELAY_PROPERTIES - {"TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC"}
)
#: the reserved names a broker's own put (``system=True``: a transaction's half message) stores
SYSTEM_ALLOWED = frozenset((PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID))
PROPERTY_WAIT = "WAIT"
PROPERTY_CLUSTER = "CLUSTER"


#: Names a wire put's fast path leaves to the general path (:func:`parse_wire_properties`):
#: the refused ones, the routed ``DELAY`` and timer inputs, and ``INNER_MULTI_DISPATCH`` (a
#: put naming light message queues reads the map: :mod:`rmqlog.access.lmq`)
_SLOW_NAMES = WIRE_RESERVED | {
    PROPERTY_DELAY,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_INNER_MULTI_DISPATCH,
}
#: Names whose items the fast path drops, as the general path does: ``WAIT`` (every Java
#: client's message carries it), and ``CLUSTER`` when the put gives its own (by ``cluster``)
_DROPPED_NAMES = {False: frozenset((PROPERTY_WAIT,)), True: frozenset((PROPERTY_WAIT, PROPERTY_CLUSTER))}
_UNIQ_BYTES = np.frombuffer(PROPERTY_UNIQ_KEY.encode(), np.uint8)  # (8 bytes: one uint64)
_TAGS_BYTES = np.frombuffer(PROPERTY_TAGS.encode(), np.uint8)  # (4 bytes: one uint32)


def _name_screen(names: frozenset[str]) -> np.ndarray:
    """``[first byte, min(length, 64)]`` -> whether a name may be one of ``names`` or start
    with the store's prefix (a cheap screen; the names it lets through are checked exactly)."""
    table = np.zeros((256, 65), bool)
    for name in names:
        b = name.encode()
        table[b[0], min(len(b), 64)] = True
    prefix = STORE_PROPERTY_PREFIX.encode()
    table[prefix[0], len(prefix) :] = True
    return table


_SCREENS = {c: _name_screen(_SLOW_NAMES | _DROPPED_NAMES[c]) for c in (False, True)}
#: width of the exact check of screened names: every name of the sets fits with at least one
#: NUL of padding (so a longer name, cut to this width, never equals one) and so does the
#: store's prefix; a multiple of 8 (compared as uint64 words)
_EXACT_WIDTH = 32  # (4 words: :func:`_hash_words` and :meth:`_NameSet.contains` name each)
assert all(len(name.encode()) < _EXACT_WIDTH for name in _SLOW_NAMES | _DROPPED_NAMES[True])
#: the masks keeping a name's first ``L`` bytes of its padded words (row ``L``), native order
_LEN_MASKS = np.tril(np.full((_EXACT_WIDTH + 1, _EXACT_WIDTH), 0xFF, np.uint8), -1).view(np.uint64)
#: the store's prefix as the first word of a padded name, and the mask of its bytes
_PREFIX_WORD, _PREFIX_MASK = (
    np.frombuffer(STORE_PROPERTY_PREFIX.encode().ljust(8, b"\0"), np.uint64)[0],
    _LEN_MASKS[len(STORE_PROPERTY_PREFIX.encode()), 0],
)
assert len(STORE_PROPERTY_PREFIX.encode()) <= 8
#: odd multipliers mixing a padded name's words into one hash
_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93], np.uint64)


def _hash_words(words: np.ndarray) -> np.ndarray:
    """One uint64 per padded name (row of ``words``): its words times :data:`_MIX`, xored."""
    mixed = words * _MIX
    return mixed[:, 0] ^ mixed[:, 1] ^ mixed[:, 2] ^ mixed[:, 3]  # (column by column: no reduce over short rows)


class _NameSet:
    """A set of names, tested against many padded names at once: a sorted hash lookup, then
    an exact compare of the words with the entry found (a hash collision is never a hit)."""

    def __init__(self, names: frozenset[str]) -> None:
        words = np.frombuffer(
            b"".join(n.encode().ljust(_EXACT_WIDTH, b"\0") for n in sorted(names)), np.uint64
        ).reshape(len(names), _EXACT_WIDTH // 8)
        hashes = _hash_words(words)
        order = np.argsort(hashes)
        self.hashes, self.words = hashes[order], words[order]

    def contains(self, words: np.ndarray) -> np.ndarray:
        """Which rows of ``words`` ((k, width / 8) padded names) are names of the set."""
        hashes = _hash_words(words)
        at = np.minimum(np.searchsorted(self.hashes, hashes), len(self.hashes) - 1)
        same = self.words[at] == words
        return (self.hashes[at] == hashes) & same[:, 0] & same[:, 1] & same[:, 2] & same[:, 3]


_SLOW_SET = _NameSet(_SLOW_NAMES)
#: the same for a broker's own put (``system``): ``REAL_TOPIC``/``REAL_QID`` stored as given
_SYSTEM_SCREENS = {c: _name_screen((_SLOW_NAMES - SYSTEM_ALLOWED) | _DROPPED_NAMES[c]) for c in (False, True)}
_SYSTEM_SLOW_SET = _NameSet(_SLOW_NAMES - SYSTEM_ALLOWED)
_DROPPED_SETS = {c: _NameSet(_DROPPED_NAMES[c]) for c in (False, True)}


def _padded_names(raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The names at ``starts`` (of ``lengths`` bytes) in ``raw``, cut to :data:`_EXACT_WIDTH`
    bytes and zero-padded to it, as (k, width / 8) uint64 words: one gather of fixed-width
    windows (a strided view over ``raw`` and a zero tail), one mask per row by its length."""
    ext = np.concatenate((raw, np.zeros(_EXACT_WIDTH, np.uint8)))  # windows at the end stay inside
    windows = np.ndarray((len(raw), _EXACT_WIDTH), np.uint8, ext, 0, (1, 1))
    words = windows[starts].view(np.uint64)
    words &= _LEN_MASKS[np.minimum(lengths, _EXACT_WIDTH)]
    return words


def joined_wire_properties(
    col: pa.Array | pa.ChunkedArray, n: int, cluster: str | None, system: bool = False
) -> JoinedProperties | None:
    """The fast path of :func:`parse_wire_properties`: the wire strings kept as they are
    (less their ``WAIT`` items, and ``CLUSTER`` ones when ``cluster`` is given) when that
    gives the same stored bytes; ``None`` (take the general path) otherwise.

    It applies when every row is ``name\\x01value\\x02`` repeated with non-empty names and
    values (what every client sends), all ASCII, no null, and no name that the general path
    routes or refuses (:data:`_SLOW_NAMES`): Java's parse then keeps every item in order, and
    joining the map again gives back the string itself. Decided over the whole values buffer
    at once (the separator positions, one screen of the names by first byte and length, an
    exact check of the few names it lets through), no per-row step; the dropped items are cut
    out with one byte mask, and the rows that carry their own ``UNIQ_KEY`` and whether any
    names ``TAGS`` are found from the same positions.
    """
    if isinstance(col, pa.ChunkedArray):
        if col.num_chunks != 1:
            return None
        col = col.chunk(0)
    if not (col.type == pa.string() or col.type == pa.binary()) or col.null_count or not n:
        return None
    suffix = f"{PROPERTY_CLUSTER}{NAME_VALUE_SEPARATOR}{cluster}{PROPERTY_SEPARATOR}".encode() if cluster else b""
    items = col.view(pa.binary())
    buffers = col.buffers()
    off = np.frombuffer(buffers[1], np.int32, n + 1, col.offset * 4).astype(np.int64)
    start = int(off[0])
    size = int(off[n]) - start
    if not size:  # no row has a property
        return JoinedProperties(items, suffix, None, False)
    raw = np.frombuffer(buffers[2], np.uint8, size, start)
    if raw.max() >= 0x80:  # not ASCII: the general path checks UTF-8 value by value
        return None
    sep = np.flatnonzero(raw < 3)
    if len(sep) % 2:
        return None
    p1, p2 = sep[0::2], sep[1::2]  # each item's \x01 and \x02
    if not ((raw[p1] == 1).all() and (raw[p2] == 2).all()):
        return None
    rel = off - start
    ends = rel[1:]
    if not (raw[ends[ends > rel[:-1]] - 1] == 2).all():  # a row's bytes after its last \x02
        return None
    # every row ends with \x02, so an item's name starts after the previous item's \x02
    name_start = np.empty(len(p1), np.int64)
    name_start[0] = 0
    name_start[1:] = p2[:-1] + 1
    name_len = p1 - name_start
    if not len(p1) or (name_len < 1).any() or (p2 - p1 < 2).any():  # an empty name or value
        return None
    maybe = (_SYSTEM_SCREENS if system else _SCREENS)[bool(cluster)][raw[name_start], np.minimum(name_len, 64)]
    if maybe.any():
        at = np.flatnonzero(maybe)
        # the screened names as fixed-width words (a name holds no NUL: every byte < 3 is a
        # separator, checked above), looked up by hash: a few vector steps however many rows
        words = _padded_names(raw, name_start[at], name_len[at])
        slow = _SYSTEM_SLOW_SET if system else _SLOW_SET
        if ((words[:, 0] & _PREFIX_MASK) == _PREFIX_WORD).any() or slow.contains(words).any():
            return None
        dropped = _DROPPED_SETS[bool(cluster)].contains(words)
        if dropped.any():
            items, raw, rel, name_start, name_len = _drop_items(raw, rel, name_start, name_len, p2 + 1, at[dropped])
    own_uniq = _rows_naming(raw, name_start, name_len, _UNIQ_BYTES, rel, n)
    has_tags = _rows_naming(raw, name_start, name_len, _TAGS_BYTES, rel, n)
    return JoinedProperties(items, suffix, own_uniq, has_tags is not None)


def _drop_items(
    raw: np.ndarray,
    rel: np.ndarray,
    item_start: np.ndarray,
    name_len: np.ndarray,
    item_end: np.ndarray,
    drop: np.ndarray,
) -> tuple[pa.BinaryArray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows without the items ``drop`` (their indices; items never cross rows): (the
    rows, their bytes, their offsets, the kept items' starts and name lengths in them)."""
    d_start, d_len = item_start[drop], item_end[drop] - item_start[drop]
    before = np.zeros(len(drop) + 1, np.int64)  # bytes dropped before each dropped item, and in all
    np.cumsum(d_len, out=before[1:])
    # the dropped bytes' positions: each span's start repeated over its length, plus a count
    # (np.add.at of span edges costs ~10x more)
    cut = np.arange(int(before[-1]), dtype=np.int64) + np.repeat(d_start - before[:-1], d_len)
    kept = np.ones(len(raw), bool)
    kept[cut] = False
    new_raw = raw[kept]
    new_rel = rel - before[np.searchsorted(d_start, rel)]  # (dropped items starting before each row end)
    keep = np.ones(len(item_start), bool)
    keep[drop] = False
    kept_start = item_start[keep]
    kept_start = kept_start - before[np.searchsorted(d_start, kept_start)]
    rows = pa.BinaryArray.from_buffers(
        pa.binary(), len(rel) - 1, [None, pa.py_buffer(new_rel.astype(np.int32)), pa.py_buffer(new_raw)]
    )
    return rows, new_raw, new_rel, kept_start, name_len[keep]


def _rows_naming(
    raw: np.ndarray, name_start: np.ndarray, name_len: np.ndarray, name: np.ndarray, rel: np.ndarray, n: int
) -> np.ndarray | None:
    """Which rows have an item named ``name`` (``None``: none does)."""
    cand = np.flatnonzero(name_len == len(name))
    if not len(cand):
        return None
    # each candidate's name bytes as one integer (a window view, one gather): one compare a name
    word = np.uint64 if len(name) == 8 else np.uint32
    width = len(name)
    # every ``width`` bytes from each position (a strided view made in C: sliding_window_view's
    # Python costs ~20 us a call)
    windows = np.ndarray((len(raw) - width + 1, width), np.uint8, raw, 0, (raw.strides[0], raw.strides[0]))[
        name_start[cand]
    ]
    hit = cand[windows.view(word).ravel() == name.view(word)[0]]
    if not len(hit):
        return None
    rows = np.zeros(n, bool)
    rows[np.searchsorted(rel, name_start[hit], side="right") - 1] = True
    return rows
