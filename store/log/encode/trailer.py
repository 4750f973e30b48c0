"""A record's trailer: TOPICLEN, TOPIC, PROPERTIESLENGTH, PROPERTIES (see :mod:`rmqlog.log.record`).

PROPERTIES is built from the put's columns, in this order: the user's ``properties`` map, then
``KEYS`` (the ``keys`` column), ``TAGS`` (the ``tags`` column), the generated ``UNIQ_KEY``
(unless the row's own map carries one) and, on the last row of an idempotent batch, the
store's ``RMQLOG_WRITER`` marker: each ``name\\x01value\\x02`` as RocketMQ's
``MessageDecoder.messageProperties2String`` writes it. Values are validated here (typed errors
naming the row and field: separators, empty names or values, reserved names, a name given
twice) and the whole trailer stays a list of *join pieces* (Arrow arrays, or scalars equal on
every row), joined or packed chunk by chunk only when the records are written. A wire put
whose properties are already in their stored form hands them over as
:class:`JoinedProperties` instead of a map (one join piece, nothing to check again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import InvalidMessageError, MessageTooLargeError
from ..msgid import UNIQ_ID_AT, UNIQ_PROPERTY_WIDTH, UniqKeyGenerator, fixed_strings
from ..properties import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    bad_uniq_key,
    join_pairs,
    list_offsets,
    reserved_name_problem,
    single_property,
)
from ..record import NAME_VALUE_SEPARATOR, PROPERTIES_MAX_BYTES, PROPERTY_SEPARATOR, TRAILER_LENGTH_FIELDS
from .arrays import binary_scalar, first, is_stringish, value_lengths
from .columns import as_string, may_be_empty, no_separators, utf8_checked

_SEP2 = pa.scalar(PROPERTY_SEPARATOR.encode(), pa.binary())
_EMPTY_BIN = pa.scalar(b"", pa.binary())
_NO_STRING = pa.scalar(None, pa.string())


@dataclass(frozen=True)
class LazyUniqKeys:
    """The generated ``UNIQ_KEY`` property items of a batch, made chunk by chunk when written.

    ``given`` marks the rows whose own properties carry a ``UNIQ_KEY`` (they get none).
    Items are generated as the chunks are packed or joined: under the append lock, or before
    it for a put packed ahead (:meth:`rmqlog.log.encode.batch.EncodedBatch.prepack`); the
    generator is thread-safe.
    """

    generator: UniqKeyGenerator
    given: np.ndarray | None
    #: (first row, items) of every chunk made, kept for the index (the ids are known nowhere
    #: else before the records are read back)
    made: list[tuple[int, pa.BinaryArray]] = field(default_factory=list)

    def lengths(self, n: int) -> np.ndarray:
        out = np.full(n, UNIQ_PROPERTY_WIDTH, np.int64)
        if self.given is not None:
            out[self.given] = 0
        return out

    def make(self, a: int, b: int) -> pa.BinaryArray:
        items = self.generator.generate_property(b - a)
        if self.given is not None and self.given[a:b].any():
            items = pc.if_else(pa.array(self.given[a:b]), _EMPTY_BIN, items)
        else:
            self.made.append((a, items))
        return items

    def ids(self, n: int) -> pa.StringArray | None:
        """The 32-hex ids of rows ``[0, n)`` as made, when every row got one made here (none
        given, every chunk made once), else ``None``."""
        made = sorted(self.made, key=lambda m: m[0])
        if (
            self.given is not None
            or sum(len(items) for _, items in made) != n
            or any(
                a != b
                for a, b in zip([m[0] for m in made], np.cumsum([0] + [len(i) for _, i in made[:-1]]), strict=True)
            )
        ):
            return None
        rows = [np.frombuffer(items.buffers()[2], np.uint8)[: len(items) * UNIQ_PROPERTY_WIDTH] for _, items in made]
        data = (np.concatenate(rows) if len(rows) != 1 else rows[0]).reshape(n, UNIQ_PROPERTY_WIDTH)
        return fixed_strings(np.ascontiguousarray(data[:, UNIQ_ID_AT : UNIQ_ID_AT + 32]))


Piece: TypeAlias = pa.Array | pa.Scalar | LazyUniqKeys
_Part: TypeAlias = pa.Array | pa.Scalar | LazyUniqKeys | tuple[pa.Scalar, pa.Array, pa.Scalar]


@dataclass(frozen=True)
class JoinedProperties:
    """A batch's user properties already in their stored form and checked (a wire put's
    fast path, :func:`rmqlog.log.encode.kept_properties.joined_wire_properties`): ``items`` per row
    (binary: ``name\x01value\x02``... exactly as the map column would be joined), ``suffix``
    added to every row after them (``b""``: none), ``own_uniq`` the rows carrying their own
    ``UNIQ_KEY`` (``None``: none) and ``has_tags`` whether some row names ``TAGS``."""

    items: pa.Array
    suffix: bytes
    own_uniq: np.ndarray | None
    has_tags: bool


@dataclass
class Properties:
    """The PROPERTIES of a batch's records: join pieces and each row's length."""

    pieces: list[Piece]
    lengths: np.ndarray  # PROPERTIESLENGTH per row
    tags: pa.Array | None  # the tags column (strings, null = no tag), if any
    tags_from_properties: bool  # TAGS came in the user's properties map
    #: KEYS per row as stored (null: none), when only the ``keys`` column can give it; and
    #: whether the index keys (KEYS, UNIQ_KEY) come only from the columns and the generated
    #: ids (no properties map naming them, no system or wire items): the index can then be
    #: fed from the batch without reading the records back
    keys: pa.Array | None = None
    index_from_batch: bool = False


def build_properties(
    cols: dict[str, pa.Array],
    n: int,
    uniq_keys: UniqKeyGenerator,
    last_row_property: tuple[str, str] | None,
    system_properties: pa.Array | None = None,
    *,
    wire: bool = False,
    joined: JoinedProperties | None = None,
) -> Properties:
    """PROPERTIES of every row (see the module docstring); raises naming the first bad row.
    ``system_properties``: the store's own items per row, pre-joined (binary, empty: none).
    ``wire``: the map is a wire put's (:mod:`rmqlog.log.encode.wire_put`), whose names were
    checked there: RocketMQ's system names are kept, the client's ``UNIQ_KEY`` as it is.
    ``joined``: the user's items already joined and checked, in place of a ``properties``
    map (a wire put's fast path; the table then has no ``properties`` column)."""
    parts: list[_Part] = []
    has_uniq = np.zeros(n, bool)
    if system_properties is not None:
        parts.append(system_properties)
        # a row whose own items carry its UNIQ_KEY (a delivered copy keeps the client msgId);
        # no other system name ends with UNIQ_KEY and values hold no \x01: a substring is exact
        has_uniq |= np.asarray(
            pc.fill_null(pc.match_substring(system_properties, PROPERTY_UNIQ_KEY + NAME_VALUE_SEPARATOR), False)
        )
    user_has_tags = user_has_keys = False
    pm = cols.get("properties")
    if joined is not None:
        parts.append(joined.items)
        if joined.suffix:
            parts.append(binary_scalar(joined.suffix))
        if joined.own_uniq is not None:
            has_uniq |= joined.own_uniq
        user_has_tags = joined.has_tags
    elif pm is not None and not pa.types.is_null(pm.type):
        part, user_has_tags, user_has_keys = _user_properties(pm, n, has_uniq, wire)
        parts.append(part)
    kc = cols.get("keys")
    keys_value: pa.Array | None = None
    if kc is not None and not pa.types.is_null(kc.type):
        keys_value = _keys_value(kc, n, user_has_keys)
        parts.append(single_property(PROPERTY_KEYS, keys_value))
    tags_col: pa.Array | None = None
    if "tags" in cols:
        tags_part, tags_col = _tags_property(cols["tags"], n, user_has_tags)
        parts.append(tags_part)
    # 'UNIQ_KEY\x01<32 hex>\x02' items are made chunk by chunk as the records are written
    # (overlapping the writes; their length is fixed, so the record lengths are known now)
    if not (n and has_uniq.all()):  # (every row has its own: a scheduler's copies)
        parts.append(LazyUniqKeys(uniq_keys, has_uniq if has_uniq.any() else None))
    if last_row_property is not None and n:
        parts.append(_last_row_only(last_row_property, n))
    pieces, props_len = _pieces_and_lengths(parts, n)
    if n and props_len.max() > PROPERTIES_MAX_BYTES:
        row = first(props_len > PROPERTIES_MAX_BYTES)
        raise MessageTooLargeError(
            f"properties are {props_len[row]} bytes, over {PROPERTIES_MAX_BYTES}", row=row, field="properties"
        )
    index_from_batch = (
        system_properties is None and joined is None and not wire and not user_has_keys and not has_uniq.any()
    )
    return Properties(pieces, props_len, tags_col, user_has_tags, keys_value, index_from_batch)


def _user_properties(pm: pa.Array, n: int, has_uniq: np.ndarray, wire: bool = False) -> tuple[pa.Array, bool, bool]:
    """The ``properties`` map column joined per row; marks ``has_uniq`` (rows giving their own
    UNIQ_KEY). Returns (the joined column, whether a map names TAGS, whether one names KEYS)."""
    if not pa.types.is_map(pm.type) or not (is_stringish(pm.type.key_type) and is_stringish(pm.type.item_type)):
        raise InvalidMessageError(
            f"must be map<string,string>, got {pm.type}", row=0 if n else None, field="properties"
        )
    offsets = list_offsets(pm)
    lens = np.diff(offsets)
    lens[np.asarray(pm.is_null())] = 0
    base = int(np.asarray(pm.offsets)[0])
    keys = pm.keys.cast(pa.string()).slice(base, int(offsets[-1]))
    vals = pm.items.cast(pa.string()).slice(base, int(offsets[-1]))
    parent = np.repeat(np.arange(n), np.diff(offsets))
    _check_names_and_values(keys, vals, parent)
    if pm.null_count:  # null maps contribute nothing
        valid_rows = ~np.asarray(pm.is_null())
        keep = valid_rows[parent]
        keys, vals, parent = keys.filter(pa.array(keep)), vals.filter(pa.array(keep)), parent[keep]
        lens = np.where(valid_rows, lens, 0)
        offsets = np.concatenate([[0], np.cumsum(lens)])
    has_tags = has_keys = False
    if len(keys):
        is_uniq = np.asarray(pc.equal(keys, PROPERTY_UNIQ_KEY))
        if not wire:
            _check_property_names(keys, vals, parent, is_uniq)
        has_uniq[parent[is_uniq]] = True
        has_tags = bool(pc.any(pc.equal(keys, PROPERTY_TAGS)).as_py())
        has_keys = bool(pc.any(pc.equal(keys, PROPERTY_KEYS)).as_py())
    return join_pairs(keys, vals, offsets), has_tags, has_keys


def _check_names_and_values(keys: pa.Array, vals: pa.Array, parent: np.ndarray) -> None:
    """No null or empty value (RocketMQ's client refuses them too, and its decoder drops them),
    no empty name, no separator in either."""
    if vals.null_count:
        i = first(np.asarray(vals.is_null()))
        raise InvalidMessageError(
            f"property {keys[i].as_py()!r} has a null value", row=int(parent[i]), field="properties"
        )
    empty = np.asarray(pc.equal(pc.binary_length(keys), 0)) if len(keys) else np.zeros(0, bool)
    if empty.any():
        raise InvalidMessageError("a property name is empty", row=int(parent[first(empty)]), field="properties")
    blank = np.asarray(pc.equal(pc.binary_length(vals), 0)) if len(vals) else np.zeros(0, bool)
    if blank.any():
        i = first(blank)
        raise InvalidMessageError(
            f"property {keys[i].as_py()!r} has an empty value", row=int(parent[i]), field="properties"
        )
    utf8_checked(keys, "properties", parent)
    utf8_checked(vals, "properties", parent)
    no_separators(keys, "properties", parent)
    no_separators(vals, "properties", parent)


def _check_property_names(keys: pa.Array, vals: pa.Array, parent: np.ndarray, is_uniq: np.ndarray) -> None:
    """Refuse user properties the store or RocketMQ reserves (``RMQLOG_*``, RocketMQ's system
    names, delay/timer names) and a given ``UNIQ_KEY`` that is not a RocketMQ client message
    id; see :func:`rmqlog.log.properties.reserved_name_problem`. ``keys``/``vals``: the batch's
    flattened user properties, ``parent`` their rows, ``is_uniq`` which names are UNIQ_KEY."""
    problem = reserved_name_problem(keys)
    if problem is not None:
        i, reason = problem
        raise InvalidMessageError(reason, row=int(parent[i]), field="properties")
    i_bad = bad_uniq_key(vals, is_uniq)
    if i_bad is not None:
        raise InvalidMessageError(
            f"property 'UNIQ_KEY' {vals[i_bad].as_py()!r} is not a RocketMQ client message id (32 or 56 uppercase hex "
            "digits)",
            row=int(parent[i_bad]),
            field="properties",
        )


def _keys_value(kc: pa.Array, n: int, user_has_keys: bool) -> pa.Array:
    """The ``KEYS`` value per row from a ``keys`` column (null: none): list<string> joined by
    spaces, or one space-separated string; no null or empty key, no separator or space inside a key."""
    if is_stringish(kc.type) or pa.types.is_dictionary(kc.type):  # one space-separated string
        ks = as_string(kc, "keys")
        no_separators(ks, "keys")
        keys_value = pc.if_else(pc.equal(pc.binary_length(ks), 0), _NO_STRING, ks)
    elif (pa.types.is_list(kc.type) or pa.types.is_large_list(kc.type)) and (
        is_stringish(kc.type.value_type) or pa.types.is_null(kc.type.value_type)
    ):
        offsets = list_offsets(kc)
        flat = kc.values.slice(int(np.asarray(kc.offsets)[0]), int(offsets[-1]))
        flat = pa.nulls(len(flat), pa.string()) if pa.types.is_null(flat.type) else flat.cast(pa.string())
        parent = np.repeat(np.arange(n), np.diff(offsets))
        utf8_checked(flat, "keys", parent)
        if flat.null_count:
            raise InvalidMessageError("a key is null", row=int(parent[first(np.asarray(flat.is_null()))]), field="keys")
        empty = np.asarray(pc.equal(pc.binary_length(flat), 0)) if len(flat) else np.zeros(0, bool)
        if empty.any():
            raise InvalidMessageError("a key is empty", row=int(parent[first(empty)]), field="keys")
        no_separators(flat, "keys", parent, space=True)
        lists = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), flat)
        joined = pc.binary_join(lists, " ")
        keys_value = pc.if_else(pc.equal(pc.binary_length(joined), 0), _NO_STRING, joined)
        if kc.null_count:
            keys_value = pc.if_else(kc.is_null(), _NO_STRING, keys_value)
    else:
        raise InvalidMessageError(
            f"must be list<string> (or a space-separated string), got {kc.type}", row=0 if n else None, field="keys"
        )
    if user_has_keys and keys_value.null_count < n:
        raise InvalidMessageError(
            "KEYS given both as the keys column and in properties",
            row=first(~np.asarray(keys_value.is_null())),
            field="keys",
        )
    return keys_value


def _tags_property(col: pa.Array, n: int, user_has_tags: bool) -> tuple[_Part, pa.Array]:
    """(the ``TAGS`` item per row, the tags column with empty tags as nulls: no tag)."""
    tags = as_string(col, "tags")
    no_separators(tags, "tags")
    if user_has_tags and tags.null_count < n:
        raise InvalidMessageError(
            "TAGS given both as the tags column and in properties", row=first(~np.asarray(tags.is_null())), field="tags"
        )
    if n and may_be_empty(tags):  # an empty tag is no tag (Java's decoder drops it)
        tags = pc.if_else(pc.equal(pc.binary_length(tags), 0), _NO_STRING, tags)
    if tags.null_count:
        return single_property(PROPERTY_TAGS, tags), tags
    # 'TAGS\x01' + tag + '\x02' as three join pieces: no intermediate column
    return (binary_scalar((PROPERTY_TAGS + NAME_VALUE_SEPARATOR).encode()), tags.view(pa.binary()), _SEP2), tags


def _last_row_only(prop: tuple[str, str], n: int) -> pa.BinaryArray:
    """``name\\x01value\\x02`` on the last row, empty on the others (offsets all 0 but the last)."""
    piece = (prop[0] + NAME_VALUE_SEPARATOR + prop[1] + PROPERTY_SEPARATOR).encode()
    offs = np.zeros(n + 1, np.int32)
    offs[-1] = len(piece)
    return pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offs), pa.py_buffer(piece)])


def _pieces_and_lengths(parts: list[_Part], n: int) -> tuple[list[Piece], np.ndarray]:
    """The parts as flat join pieces (arrays as binary) and the bytes they add to each row."""
    pieces: list[Piece] = []
    props_len = np.zeros(n, np.int64)
    for part in parts:
        for p in part if isinstance(part, tuple) else (part,):
            if isinstance(p, pa.Scalar):
                props_len += len(p.as_py())
            elif isinstance(p, LazyUniqKeys):
                props_len += p.lengths(n)
            else:
                p = p if p.type == pa.binary() else p.cast(pa.binary())
                props_len += value_lengths(p)
            pieces.append(p)
    return pieces, props_len


def layout_trailer(
    topics: list[str],
    topic_index: np.ndarray,
    props: Properties,
    before_trailer: np.ndarray,
    max_record_size: int,
) -> tuple[list[Piece], np.ndarray]:
    """(the trailer's join pieces, TOTALSIZE per row). ``before_trailer``: each record's header
    and body bytes. A record over ``max_record_size`` (what a segment can hold) is refused."""
    n = len(topic_index)
    topic_bytes = [t.encode() for t in topics]
    topic_len = np.array([len(t) for t in topic_bytes], np.int64)[topic_index] if n else np.zeros(0, np.int64)
    lengths = before_trailer + TRAILER_LENGTH_FIELDS + topic_len + props.lengths
    if n and lengths.max() > max_record_size:
        row = first(lengths > max_record_size)
        raise MessageTooLargeError(
            f"record of {lengths[row]} bytes does not fit a commitlog segment", row=row, field="body"
        )
    # a piece equal on every row is passed to the join as a scalar (cheaper than a column)
    prefixes = [bytes([len(t)]) + t for t in topic_bytes]
    topic_prefix: pa.Array | pa.Scalar
    if len(prefixes) == 1:
        topic_prefix = binary_scalar(prefixes[0])
    else:
        topic_prefix = pa.array(prefixes, pa.binary()).take(pa.array(topic_index))
    props_len = props.lengths
    plen_arr: pa.Array | pa.Scalar
    if n and (props_len == props_len[0]).all():
        plen_arr = binary_scalar(int(props_len[0]).to_bytes(2, "big"))
    else:
        plen = props_len.astype(">u2")
        plen_arr = pa.BinaryArray.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(np.arange(0, 2 * (n + 1), 2, dtype=np.int32)), pa.py_buffer(plen)]
        )
    return merge_scalars([topic_prefix, plen_arr, *props.pieces]), lengths


def merge_scalars(pieces: list[Piece]) -> list[Piece]:
    """Adjacent scalar join pieces merged into one (fewer pieces, faster join)."""
    out: list[Piece] = []
    for p in pieces:
        if isinstance(p, pa.Scalar) and out and isinstance(out[-1], pa.Scalar):
            out[-1] = binary_scalar(out[-1].as_py() + p.as_py())
        else:
            out.append(p)
    return out


def chunk_pieces(pieces: list[Piece], a: int, b: int) -> list[pa.Array | pa.Scalar]:
    """The join pieces of rows ``[a, b)``."""
    return [
        p if isinstance(p, pa.Scalar) else p.make(a, b) if isinstance(p, LazyUniqKeys) else p.slice(a, b - a)
        for p in pieces
    ]
