"""Vectorized codec of RocketMQ's properties string, ``name \\x01 value \\x02`` repeated.

Known names (exact strings) used by the store: ``KEYS`` (space-separated keys), ``TAGS``,
``UNIQ_KEY`` (client message id), ``DELAY``, ``REAL_TOPIC``, ``REAL_QID``, and our own
``RMQLOG_WRITER`` (idempotence marker). User properties may not use RocketMQ's system names
nor the store's ``RMQLOG_`` prefix (:func:`reserved_name_problem`). The scalar codec is
:func:`rmqlog.log.record.encode_properties` / :func:`rmqlog.log.record.decode_properties`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# the optional C helper's parsers (None without it: the numpy parsers below)
from ..native import copy_properties as _native_copy
from ..native import parse_properties as _native_parse
from .record import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
#: RocketMQ's ``TopicValidator.RMQ_SYS_SCHEDULE_TOPIC``: delayed messages wait here, queue
#: ``level - 1``, until the scheduler delivers them (:mod:`rmqlog.schedule`)
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: RocketMQ 5's ``TimerMessageStore.TIMER_TOPIC``: timed messages (an exact delivery time) wait
#: here, queue 0, until the timer delivers them (:mod:`rmqlog.schedule.timer`)
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: The topics where the store keeps messages that are not delivered yet: never written to
#: directly, never listed among the topics a reader picks by pattern
WAITING_TOPICS = frozenset((SCHEDULE_TOPIC, TIMER_TOPIC))
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
# ours: "<sequence> <writer>" on the last record of an idempotent batch (MessageStore.put_batch)
PROPERTY_WRITER = "RMQLOG_WRITER"
#: Every property name starting with this is the store's own: users cannot set one.
STORE_PROPERTY_PREFIX = "RMQLOG_"

#: RocketMQ 4.9.8's ``MessageConst.STRING_HASH_SET``: names its client refuses in
#: ``Message.putUserProperty`` ("used by system"). KEYS, TAGS and UNIQ_KEY are among them but
#: are accepted here as the wire form of features the store implements (see
#: :data:`USER_SETTABLE_SYSTEM_PROPERTIES`).
ROCKETMQ_SYSTEM_PROPERTIES = frozenset(
    (
        "TRACE_ON",
        "MSG_REGION",
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
    )
)
#: Timer properties: RocketMQ 5.x's names. A put's ``TIMER_DELIVER_MS``, ``TIMER_DELAY_MS`` and
#: ``TIMER_DELAY_SEC`` are taken from its properties as its delivery time
#: (:mod:`rmqlog.schedule.timer_routing`), and ``DELAY``, 4.x's delay level, as its delay level
#: (:mod:`rmqlog.schedule.routing`); the others are the store's to set.
DELAY_PROPERTIES = frozenset(
    (
        "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS",
        "TIMER_DELAY_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
    )
)
#: System names a user may set: KEYS and TAGS (checked against the keys and tags columns) and
#: UNIQ_KEY (a client message id, kept instead of a generated one; see :data:`UNIQ_KEY_PATTERN`).
USER_SETTABLE_SYSTEM_PROPERTIES = frozenset((PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY))
#: Names a user property may not have (besides the :data:`STORE_PROPERTY_PREFIX` ones).
RESERVED_PROPERTIES: frozenset[str] = (ROCKETMQ_SYSTEM_PROPERTIES | DELAY_PROPERTIES) - USER_SETTABLE_SYSTEM_PROPERTIES
#: A UNIQ_KEY a user may give: what RocketMQ's ``MessageClientIDSetter`` makes, uppercase hex of
#: 16 bytes (IPv4 client) or 28 bytes (IPv6 client); RocketMQ's tools (``getNearlyTimeFromID``,
#: ``getIPStrFromID``) decode only that form.
UNIQ_KEY_PATTERN = "^(?:[0-9A-F]{32}|[0-9A-F]{56})$"

_RESERVED_ARRAY = pa.array(sorted(RESERVED_PROPERTIES), pa.string())


def _screen() -> np.ndarray:
    """``[first byte, min(length, 64)]`` -> whether a name may be reserved: some reserved name
    starts with that byte and has that length, or the byte is the store's prefix's first one
    and the name is at least as long as the prefix. Length 0 (column 0) is never reserved."""
    table = np.zeros((256, 65), bool)
    for name in RESERVED_PROPERTIES:
        b = name.encode()
        assert len(b) < 64
        table[b[0], len(b)] = True
    prefix = STORE_PROPERTY_PREFIX.encode()
    table[prefix[0], len(prefix) :] = True
    return table


_SCREEN = _screen()

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
    pairs = pc.binary_join_element_wise(keys, values, NAME_VALUE_SEPARATOR)
    lists = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pairs)
    joined = pc.binary_join(lists, PROPERTY_SEPARATOR)
    # binary_join puts separators between items only: add the trailing \x02 to non-empty rows
    nonempty = pc.greater(pc.binary_length(joined), 0)
    return pc.if_else(nonempty, pc.binary_join_element_wise(joined, PROPERTY_SEPARATOR, ""), _EMPTY_STR)


def single_property(name: str, values: pa.Array) -> pa.Array:
    """``name\\x01value\\x02`` per row; the empty string where ``values`` is null."""
    s = pc.binary_join_element_wise(name + NAME_VALUE_SEPARATOR, values, PROPERTY_SEPARATOR, "")
    return pc.fill_null(s, _EMPTY_STR)


def find_values(props: pa.Array, names: tuple[str, ...]) -> list[pa.StringArray] | None:
    """The value of each of ``names`` per row of a properties column (null where absent; the
    last one wins, as in Java's map), found in one pass of the C helper over the bytes with
    Java's parsing rules: no map is built. ``None`` without the helper (or for nulls)."""
    props = _flat(props)
    if (
        _native_copy is None
        or props.null_count
        or not (pa.types.is_string(props.type) or pa.types.is_binary(props.type))
    ):
        return None
    distinct = list(dict.fromkeys(names))  # (the C helper fills the first of equal names only)
    n, k = len(props), len(distinct)
    off = np.frombuffer(props.buffers()[1], np.int32, n + 1, props.offset * 4)
    data = props.buffers()[2] or pa.py_buffer(b"")
    start, length = np.empty(k * n, np.int64), np.empty(k * n, np.int64)
    _native_copy(data, off, (), (), tuple(name.encode() for name in distinct), None, None, start, length)
    from .gather import gather_slices, to_binary

    # every name's values in one gather (its fixed cost once, not per name), each name's
    # column a slice of it: rows [j*n, (j+1)*n), with the shared validity bitmap where it has nulls
    found = start >= 0
    values = to_binary(gather_slices(data, np.where(found, start, 0), length))
    bitmap = None if found.all() else pa.py_buffer(np.packbits(found, bitorder="little"))
    buffers = values.buffers()[1:]
    out = []
    for j in range(k):
        validity = None if bitmap is None or found[j * n : (j + 1) * n].all() else bitmap
        out.append(pa.Array.from_buffers(pa.string(), n, [validity, *buffers], offset=values.offset + j * n))
    return [out[distinct.index(name)] for name in names]


class ParsedProperties:
    """Properties strings parsed into a map column, with TAGS and KEYS pulled out.

    The map (``keys``, ``values``, ``parent``, ``offsets``) is parsed on first use; until then
    :meth:`column` finds a name's values in one pass of the C helper (:func:`find_values`),
    which is all a dispatch asks for (TAGS; the index's KEYS and UNIQ_KEY). ``names``: the
    names the caller will ask :meth:`column` for; the first such ask finds them all in that
    one pass (the helper's fixed cost paid once, not per name; the values are the same)."""

    keys: pa.StringArray
    values: pa.StringArray
    parent: np.ndarray
    offsets: np.ndarray

    def __init__(self, props: pa.Array, *, names: tuple[str, ...] = ()) -> None:
        self._props = _flat(props)
        self.n = len(self._props)
        self._names = names
        self._found: dict[str, pa.StringArray] = {}  # columns found by find_values, by name

    def __getattr__(self, name: str) -> object:
        if name in ("keys", "values", "parent", "offsets"):  # the map, parsed on first use
            self._parse()
            return self.__dict__[name]
        raise AttributeError(name)

    def _parse(self) -> None:
        props = self._props
        if not (self._parse_native(props) or self._parse_well_formed(props)):
            self._parse_general(props)
        counts = np.bincount(self.parent, minlength=self.n) if len(self.keys) else np.zeros(self.n, np.int64)
        self.offsets = counts_to_offsets(counts)

    def _parse_native(self, props: pa.Array) -> bool:
        """One pass of the C helper (:mod:`rmqlog.native`) over the bytes (Java's rules, any input)."""
        if (
            _native_parse is None
            or props.null_count
            or not (pa.types.is_string(props.type) or pa.types.is_binary(props.type))
        ):
            return False
        n = len(props)
        off = np.frombuffer(props.buffers()[1], np.int32, n + 1, props.offset * 4)
        data = props.buffers()[2] or pa.py_buffer(b"")
        out = np.empty((5, 4 * n + 16), np.int64)  # room for 4 pairs per row, the usual case
        try:
            m = _native_parse(data, off, *out)
        except ValueError:  # more pairs than room: one per 0x01 byte is always enough
            out = np.empty((5, int(np.count_nonzero(np.frombuffer(data, np.uint8) == 1)) + 16), np.int64)
            m = _native_parse(data, off, *out)
        from .gather import gather_slices, to_binary

        string = pa.string()
        self.keys = to_binary(gather_slices(data, out[0, :m], out[1, :m])).view(string)
        self.values = to_binary(gather_slices(data, out[2, :m], out[3, :m])).view(string)
        self.parent = out[4, :m]
        return True

    def _parse_well_formed(self, props: pa.Array) -> bool:
        """Fast path from the separator positions alone (no string splitting).

        Applies when every row is ``k\x01v\x02`` repeated (what RocketMQ and this store
        write): the separators of the whole column then alternate \x01, \x02 and each pair
        lies in one row. Returns ``False`` (nothing parsed) otherwise.
        """
        if props.null_count or not (pa.types.is_string(props.type) or pa.types.is_binary(props.type)):
            return False
        n = len(props)
        off = np.frombuffer(props.buffers()[1], np.int32, n + 1, props.offset * 4).astype(np.int64)
        data = props.buffers()[2]
        if n == 0 or data is None or off[-1] == off[0]:
            return False
        raw = np.frombuffer(data, np.uint8)[off[0] : off[-1]]
        rel = off - off[0]
        pos = np.flatnonzero(raw < 3)
        if len(pos) % 2:
            return False
        p1, p2 = pos[0::2], pos[1::2]
        if not ((raw[p1] == 1).all() and (raw[p2] == 2).all()):
            return False
        row = np.searchsorted(rel, p1, side="right") - 1
        if not (np.searchsorted(rel, p2, side="right") - 1 == row).all():
            return False
        ends = rel[1:]
        nonempty = ends > rel[:-1]
        if not (raw[ends[nonempty] - 1] == 2).all():  # no bytes after a row's last \x02
            return False
        keep = p2 - p1 > 1  # Java drops an item with an empty value ('k\x01\x02')
        if not keep.all():
            p1, p2, row = p1[keep], p2[keep], row[keep]
            if not len(p1):
                return False
        # a key starts after the previous \x02 (dropped items included) or at its row's start
        all_p2 = pos[1::2]
        before = np.searchsorted(all_p2, p1) - 1
        prev_end = np.where(before >= 0, all_p2[np.maximum(before, 0)] + 1, 0)
        key_start = np.maximum(prev_end, rel[row])
        from .gather import gather_slices

        base = int(off[0])
        string = pa.string()
        self.keys = gather_slices(data, base + key_start, p1 - key_start).cast(pa.binary()).view(string)
        self.values = gather_slices(data, base + p1 + 1, p2 - p1 - 1).cast(pa.binary()).view(string)
        self.parent = row
        return True

    def _parse_general(self, props: pa.Array) -> None:
        """Any properties string, with Java's ``string2messageProperties`` rules.

        Split on \x02, each item on every \x01; like Java's ``String.split``, trailing empty
        tokens do not count; an item is kept only if that leaves exactly (name, value).
        """
        n = len(props)
        parts = pc.split_pattern(pc.fill_null(props, _EMPTY_STR), PROPERTY_SEPARATOR)
        items = pc.list_flatten(parts)
        item_row = np.asarray(pc.list_parent_indices(parts))
        tokens = pc.split_pattern(items, NAME_VALUE_SEPARATOR)
        flat = pc.list_flatten(tokens)
        tok_item = np.asarray(pc.list_parent_indices(tokens))
        tok_off = np.asarray(tokens.offsets, np.int64)
        tok_off = tok_off - tok_off[0]
        m = len(items)
        # per item: index (within the item) of its last non-empty token, -1 if none
        pos_in_item = np.arange(len(flat), dtype=np.int64) - tok_off[tok_item] if len(flat) else np.zeros(0, np.int64)
        nonempty = np.asarray(pc.greater(pc.binary_length(flat), 0)) if len(flat) else np.zeros(0, bool)
        last = np.full(m, -1, np.int64)
        if nonempty.any():
            np.maximum.at(last, tok_item[nonempty], pos_in_item[nonempty])
        keep = last == 1
        first = tok_off[:-1][keep]
        self.keys = flat.take(pa.array(first)).cast(pa.string()) if len(first) else pa.array([], pa.string())
        self.values = flat.take(pa.array(first + 1)).cast(pa.string()) if len(first) else pa.array([], pa.string())
        self.parent = item_row[keep] if n else np.zeros(0, np.int64)

    def map_array(self, *, hide_prefix: str | None = None) -> pa.MapArray:
        """The map column; entries whose name starts with ``hide_prefix`` left out (the
        message table hides the store's own ``RMQLOG_*`` markers, which stay on disk)."""
        keys, values, offsets = self.keys, self.values, self.offsets
        if hide_prefix is not None and len(keys):
            hidden = np.asarray(pc.starts_with(keys, hide_prefix))
            if hidden.any():
                keep = pa.array(~hidden)
                keys, values = keys.filter(keep), values.filter(keep)
                offsets = counts_to_offsets(np.bincount(self.parent[~hidden], minlength=self.n))
        return pa.MapArray.from_arrays(pa.array(offsets), keys, values)

    def column(self, name: str) -> pa.StringArray:
        """The value of property ``name`` per row, null where absent (the last one wins)."""
        if "keys" not in self.__dict__:  # no map yet: find it without building one
            hit = self._found.get(name)
            if hit is not None:
                return hit
            names = self._names if name in self._names else (name,)
            found = find_values(self._props, names)
            if found is not None:
                self._found.update(zip(names, found, strict=True))
                return self._found[name]
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
    if keys_prop.null_count == n:  # no message has keys (common): n empty lists
        return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.string()))
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


def reserved_name_problem(keys: pa.Array) -> tuple[int, str] | None:
    """The first user property name (index into ``keys``) that a user may not set, and why.

    ``keys`` are the flattened names of a batch's user properties (string, no nulls); ``None``
    when every name is allowed. Vectorized: a screen on each name's first byte and length
    (:data:`_SCREEN`, numpy lookups over the Arrow buffers: ~10 us for a batch of 200 names,
    where ``is_in`` and ``starts_with`` cost ~100 us, ``is_in`` building its hash set per
    call), then, only for the names it
    lets through, ``is_in`` against :data:`RESERVED_PROPERTIES` and ``starts_with`` of the
    store's prefix.
    """
    n = len(keys)
    buffers = keys.buffers()
    if not n or buffers[2] is None or not buffers[2].size:  # no name or only empty ones
        return None
    off = np.frombuffer(buffers[1], np.int32, n + 1, keys.offset * 4)
    lengths = off[1:] - off[:-1]
    np.minimum(lengths, 64, out=lengths)
    # an empty name reads some other name's byte (clipped at the end): row 0 of the table is False
    first = np.frombuffer(buffers[2], np.uint8).take(off[:-1], mode="clip")
    maybe = _SCREEN[first, lengths]
    if not maybe.any():
        return None
    at = np.flatnonzero(maybe)
    names = keys.take(pa.array(at))
    bad = pc.or_(pc.is_in(names, value_set=_RESERVED_ARRAY), pc.starts_with(names, STORE_PROPERTY_PREFIX))
    if not pc.any(bad).as_py():
        return None
    j = int(np.flatnonzero(np.asarray(bad))[0])
    i, name = int(at[j]), names[j].as_py()
    if name in DELAY_PROPERTIES:
        return i, (
            f"property {name!r} is set by the store's timer; give a delivery time with deliverTime, "
            "TIMER_DELIVER_MS, TIMER_DELAY_MS or TIMER_DELAY_SEC"
        )
    if name.startswith(STORE_PROPERTY_PREFIX):
        return i, f"property {name!r}: names starting with {STORE_PROPERTY_PREFIX!r} are reserved for the store"
    return i, f"property {name!r} is a RocketMQ system property name; use another name"


def bad_uniq_key(values: pa.Array, is_uniq: np.ndarray) -> int | None:
    """Index of the first ``UNIQ_KEY`` property (``is_uniq``: the names that are ``UNIQ_KEY``)
    whose value is not a RocketMQ client message id (:data:`UNIQ_KEY_PATTERN`), else ``None``.
    ``values``: the flattened property values, no nulls."""
    if not is_uniq.any():
        return None
    at = np.flatnonzero(is_uniq)
    ok = np.asarray(pc.match_substring_regex(values.take(pa.array(at)), UNIQ_KEY_PATTERN))
    return None if ok.all() else int(at[np.argmin(ok)])
