"""A put of messages as a RocketMQ client sends them (``SEND_MESSAGE`` 10, ``SEND_MESSAGE_V2``
310, the rows of ``SEND_BATCH_MESSAGE`` 320): the wire table turned into the put path's table
and the header fields a put table has no column for.

Wire columns (:data:`WIRE_COLUMNS`): ``topic`` (string), ``queueId`` (int; null: round
robin), ``body`` (binary, stored as sent: a body the client compressed stays compressed),
``flag`` (int32), ``sysFlag`` (int32, RocketMQ's ``MessageSysFlag``), ``bornTimestamp``
(int64 ms or timestamp), ``bornHost`` (``"ip:port"`` / ``"[v6]:port"`` string, or the 8/20
bytes a record stores), ``properties`` (the wire string ``name\\x01value\\x02``...),
``reconsumeTimes`` (int32 >= 0), ``delayLevel`` (int, null or <= 0: none; a broker's own
path, as a ``DELAY`` property routes: the properties then keep the fast path below). Only
``topic`` and ``body`` are required.

The rules, as RocketMQ 4.9.8's broker and store apply them:

- **properties** are parsed as ``MessageDecoder.string2messageProperties`` does, in
  whole-column splits (on ``\\x02``, then once on ``\\x01``): an item without a name or a value
  is dropped, as Java drops it. ``WAIT`` is dropped (``SendMessageProcessor`` does not store
  it); ``cluster`` (the broker's ``brokerClusterName``), when given, is stored as ``CLUSTER``
  in place of any the client sent (``putProperty``). The rest keeps the client's order.
  ``KEYS``, ``TAGS`` (tagsCode from its hash) and the client's ``UNIQ_KEY`` are kept and
  indexed; a row without ``UNIQ_KEY`` gets one (the store's put does; RocketMQ's store does
  not, its client always sends one). ``DELAY`` routes the row to the schedule topic and the
  timer properties to the timer topic, exactly as :meth:`rmqlog.MessageStore.put` does.
- **refused** (:class:`InvalidMessageError` naming row and field): names the store sets
  itself, which RocketMQ's store would overwrite or misread (``REAL_TOPIC``, ``REAL_QID``, the
  timer's own ``TIMER_OUT_MS``, ``TIMER_ENQUEUE_MS``, ``TIMER_DEQUEUE_MS``, ``TIMER_ROLL_TIMES``,
  ``TIMER_DEL_UNIQKEY``, ``TIMER_DELAY_LEVEL``) and every ``RMQLOG_*``; a value holding
  ``\\x01``. A name given twice is stored as sent (readers take the last one, as RocketMQ's
  map does). Every other RocketMQ system name (``PGROUP``, ``TRAN_MSG``,
  ``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID``, ``MAX_RECONSUME_TIMES``...) is stored as sent.
- **sysFlag**: ``COMPRESSED`` (1), ``MULTI_TAGS`` (2) and ``TRANSACTION_COMMIT`` (8) are kept
  as given; ``TRANSACTION_PREPARED`` (4) and ``TRANSACTION_ROLLBACK`` (12) are refused
  (RocketMQ's broker hands those to its transaction service, which stores a half message with
  the bits cleared in ``RMQ_SYS_TRANS_HALF_TOPIC``: ``put_wire(system=True)``; a prepared
  record would get no queue offset); the host
  bits (16, 32) are the store's, set from ``bornHost`` and the store host: given, they must
  agree; any other bit is refused, named.
- ``bornHost``: every row of one batch must have the same form (IPv4 or IPv6: one record
  header layout per batch); a broker's batch comes from one connection.

No per-message Python step: hosts are parsed per distinct value, the rest is whole columns.

**The fast path** (:func:`joined_wire_properties`): what clients send is almost always
``name\x01value\x02`` repeated, ASCII, with no name the rules above route or refuse. One
screen over the whole values buffer (the separators' positions, each name's first byte and
length) proves that; the strings are then stored as sent (their ``WAIT`` items, and
``CLUSTER`` ones when ``cluster`` replaces them, cut out by one byte mask) and handed to the
encoder pre-joined (:attr:`WireHeader.properties`), with no map built, routed and joined again:
the same bytes for ~1/10 of the Arrow calls. Anything else takes the general parse. Integer
and host columns are read through numpy views when they hold no null (no Arrow kernel).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import ConfigError, InvalidMessageError
from ...hosts import host_bytes
from ..properties import (
    STORE_PROPERTY_PREFIX,
)
from ..record import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_MULTI_TAGS,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
)
from .arrays import all_equal, first, flat, is_stringish
from .columns import utf8_checked
from .kept_properties import (
    PROPERTY_CLUSTER,
    PROPERTY_WAIT,
    SYSTEM_ALLOWED,
    WIRE_RESERVED,
    joined_wire_properties,
)
from .trailer import JoinedProperties

WIRE_COLUMNS = (
    "topic",
    "queueId",
    "body",
    "flag",
    "sysFlag",
    "bornTimestamp",
    "bornHost",
    "properties",
    "reconsumeTimes",
    "delayLevel",
)
#: the client's bits a put keeps (the others are refused, or the store's host bits)
_KEPT_BITS = SYSFLAG_COMPRESSED | SYSFLAG_MULTI_TAGS | SYSFLAG_TRANSACTION_COMMIT
_KNOWN_BITS = (
    SYSFLAG_COMPRESSED | SYSFLAG_MULTI_TAGS | SYSFLAG_TRANSACTION_MASK | SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
)


@dataclass(frozen=True)
class WireHeader:
    """The header fields of a wire put that a put table has no column for, one per row:
    SYSFLAG's client bits (host bits cleared), RECONSUMETIMES, and BORNHOST ((n, 8|20) uint8);
    and ``properties``: the rows' properties already in their stored form when the fast path
    took them (:func:`joined_wire_properties`; the put table then has no ``properties``
    column), ``None`` when they are the put table's map column."""

    sys_flag: np.ndarray
    reconsume_times: np.ndarray
    born_host: np.ndarray
    properties: JoinedProperties | None = None


@functools.cache
def _int_range(dtype: np.dtype) -> tuple[int, int]:
    """(min, max) of an integer dtype (``np.iinfo`` costs a few us a call)."""
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _has(table: pa.Table, name: str) -> bool:
    """Whether ``table`` has the column ``name`` (given once: :func:`wire_table` refused
    duplicates). ``get_field_index``: ``column_names`` builds a list each call (~4 us)."""
    return table.schema.get_field_index(name) >= 0


def _int_column(table: pa.Table, name: str, n: int, default: int, lo: int, hi: int) -> np.ndarray:
    if not _has(table, name):
        return np.full(n, default, np.int64)
    col = flat(table.column(name))
    if pa.types.is_null(col.type):
        return np.full(n, default, np.int64)
    if not pa.types.is_integer(col.type):
        raise InvalidMessageError(f"must be an integer column, not {col.type}", row=0 if n else None, field=name)
    if col.null_count:
        col = col.fill_null(default)
    if pa.types.is_uint64(col.type):
        raw = col.to_numpy()
        over = raw > np.uint64(hi)  # (lo <= 0 everywhere: no uint64 is under it)
        if over.any():
            row = first(over)
            raise InvalidMessageError(f"{raw[row]} is not in [{lo}, {hi}]", row=row, field=name)
        return raw.astype(np.int64)
    else:  # numpy's view of the buffer and its widening: no Arrow kernel (each costs ~20 us a put)
        raw = col.to_numpy()
        type_lo, type_hi = _int_range(raw.dtype)
        values = raw.astype(np.int64)
        if lo <= type_lo and type_hi <= hi:  # every value of the type is in range
            return values
    bad = (values < lo) | (values > hi)
    if bad.any():
        row = first(bad)
        raise InvalidMessageError(f"{values[row]} is not in [{lo}, {hi}]", row=row, field=name)
    return values


def wire_sys_flag(table: pa.Table, n: int, born_v6: bool, store_v6: bool) -> np.ndarray:
    """The client's SYSFLAG bits per row (host bits cleared), checked (module docstring)."""
    flags = _int_column(table, "sysFlag", n, 0, -(1 << 31), (1 << 31) - 1)
    if not (flags & ~_KEPT_BITS).any():  # (the usual flags: 0, compressed) nothing to refuse
        return flags & _KEPT_BITS
    unknown = (flags & ~_KNOWN_BITS) != 0
    if unknown.any():
        row = first(unknown)
        raise InvalidMessageError(
            f"sysFlag {flags[row]} has bits no put may set: {flags[row] & ~_KNOWN_BITS:#x}", row=row, field="sysFlag"
        )
    tran = flags & SYSFLAG_TRANSACTION_MASK
    half = (tran == SYSFLAG_TRANSACTION_PREPARED) | (tran == SYSFLAG_TRANSACTION_ROLLBACK)
    if half.any():
        row = first(half)
        what = "TRANSACTION_PREPARED (4)" if tran[row] == SYSFLAG_TRANSACTION_PREPARED else "TRANSACTION_ROLLBACK (12)"
        raise InvalidMessageError(
            f"sysFlag {flags[row]}: {what} is not stored by this store (no transactional messages)",
            row=row,
            field="sysFlag",
        )
    for bit, v6, what in (
        (SYSFLAG_BORNHOST_V6, born_v6, "BORNHOST_V6 (16)"),
        (SYSFLAG_STOREHOST_V6, store_v6, "STOREHOST_V6 (32)"),
    ):
        wrong = ((flags & bit) != 0) & (not v6)
        if wrong.any():
            row = first(wrong)
            raise InvalidMessageError(f"sysFlag {flags[row]}: {what} does not match the host", row=row, field="sysFlag")
    return (flags & _KEPT_BITS).astype(np.int64)


def wire_born_hosts(table: pa.Table, n: int, default: bytes) -> np.ndarray:
    """BORNHOST per row as (n, 8|20) uint8: strings parsed once per distinct value; a null
    (or no column) is ``default`` (the config's ``born_host``)."""
    if not n or not _has(table, "bornHost") or pa.types.is_null(table.schema.field("bornHost").type):
        return np.tile(np.frombuffer(default, np.uint8), (n, 1))
    col = flat(table.column("bornHost"))
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if is_stringish(col.type):  # "ip:port" text: Python cannot make a str of bytes that are not UTF-8
        utf8_checked(col, "bornHost")
    if n and col.type == pa.string() and not col.null_count and all_equal(col):
        # one host (a broker's put of one connection's sends, or of a batch): parsed once
        one = _host_bytes(col[0].as_py())
        if one:
            return np.frombuffer(one, np.uint8)[None, :].repeat(n, axis=0)
    encoded = col.dictionary_encode()
    raw: list[bytes] = []
    for value in encoded.dictionary.to_pylist():  # one step per distinct host, not per message
        if isinstance(value, str):
            raw.append(_host_bytes(value))
        elif isinstance(value, bytes) and len(value) in (8, 20):
            raw.append(value)
        else:
            raw.append(b"")
    raw.append(default)  # a null host: the store's default born host
    idx = np.asarray(encoded.indices.fill_null(len(raw) - 1), np.int64)
    widths = np.array([len(r) for r in raw], np.int64)[idx]
    if (widths == 0).any():
        row = first(widths == 0)
        raise InvalidMessageError(
            f"{col[row].as_py()!r} is not a host ('ip:port', '[v6]:port', or its 8/20 record bytes)",
            row=row,
            field="bornHost",
        )
    if (widths != widths[0]).any():
        row = first(widths != widths[0])
        raise InvalidMessageError("mixes IPv4 and IPv6 born hosts in one batch", row=row, field="bornHost")
    table_raw = np.frombuffer(b"".join(raw) if len(set(map(len, raw))) == 1 else b"", np.uint8)
    if not len(table_raw):  # distinct values of both widths, only one of them used: keep that one
        width = int(widths[0])
        table_raw = np.frombuffer(b"".join(r if len(r) == width else bytes(width) for r in raw), np.uint8)
    return table_raw.reshape(len(raw), -1)[idx]


def _host_bytes(value: str) -> bytes:
    """:func:`rmqlog.hosts.host_bytes` of a born host, ``b""`` for one that is not a host;
    remembered (a broker sees the same few client addresses put after put; ~50 us each)
    when short enough to be one (the longest, ``[v6]:port``, has 54 characters): what the
    cache holds stays small whatever a caller sends."""
    return _host_bytes_cached(value) if len(value) <= 64 else _host_bytes_now(value)


def _host_bytes_now(value: str) -> bytes:
    try:
        return host_bytes(value)
    except ConfigError:
        return b""


_host_bytes_cached = functools.lru_cache(maxsize=1024)(_host_bytes_now)


def parse_wire_properties(
    col: pa.Array | pa.ChunkedArray, n: int, cluster: str | None, system: bool = False
) -> pa.MapArray:
    """The wire properties strings as a ``map<string,string>`` column (module docstring)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_null(col.type):
        col = pa.nulls(n, pa.string())
    elif pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        try:
            col = col.cast(pa.string())
        except pa.ArrowInvalid:
            raise InvalidMessageError("is not UTF-8", row=_first_bad_utf8(col), field="properties") from None
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise InvalidMessageError(
            f"must be the wire string (string or binary), not {col.type}", row=0 if n else None, field="properties"
        )
    col = pc.fill_null(col.cast(pa.string()), "")
    items = pc.split_pattern(col, PROPERTY_SEPARATOR)
    offsets = np.asarray(items.offsets, np.int64)
    offsets = offsets - offsets[0]
    flat = items.flatten()
    parent = np.repeat(np.arange(n), np.diff(offsets))
    pairs = pc.split_pattern(flat, NAME_VALUE_SEPARATOR, max_splits=1)
    two = np.asarray(pc.equal(pc.list_value_length(pairs), 2).fill_null(False))
    keys = pc.list_element(pairs.filter(pa.array(two)), 0)
    vals = pc.list_element(pairs.filter(pa.array(two)), 1)
    parent = parent[two]
    # Java's rule: an item needs a name and a value (``kvSepIndex > index && < newIndex - 1``)
    ok = np.asarray(pc.and_(pc.greater(pc.binary_length(keys), 0), pc.greater(pc.binary_length(vals), 0)))
    ok &= ~np.asarray(pc.is_in(keys, pa.array([PROPERTY_WAIT] + ([PROPERTY_CLUSTER] if cluster else []))))
    keys, vals, parent = keys.filter(pa.array(ok)), vals.filter(pa.array(ok)), parent[ok]
    _check_wire_names(keys, vals, parent, system)
    if cluster:
        keys = pa.concat_arrays([keys, pa.array([PROPERTY_CLUSTER] * n, pa.string())])
        vals = pa.concat_arrays([vals, pa.array([cluster] * n, pa.string())])
        parent = np.concatenate([parent, np.arange(n)])
        order = np.argsort(parent, kind="stable")  # each row's CLUSTER after its own items
        keys, vals, parent = keys.take(pa.array(order)), vals.take(pa.array(order)), parent[order]
    counts = np.bincount(parent, minlength=n) if n else np.zeros(0, np.int64)
    map_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=map_offsets[1:])
    return pa.MapArray.from_arrays(pa.array(map_offsets), keys, vals)


def _check_wire_names(keys: pa.Array, vals: pa.Array, parent: np.ndarray, system: bool = False) -> None:
    """Refuse the names of :data:`WIRE_RESERVED` (but ``REAL_TOPIC``/``REAL_QID`` in a
    ``system`` put), the store's prefix, values holding ``\\x01``."""
    if not len(keys):
        return
    reserved = WIRE_RESERVED - SYSTEM_ALLOWED if system else WIRE_RESERVED
    bad = np.asarray(
        pc.or_(pc.is_in(keys, pa.array(sorted(reserved), pa.string())), pc.starts_with(keys, STORE_PROPERTY_PREFIX))
    )
    if bad.any():
        i = first(bad)
        raise InvalidMessageError(
            f"property {keys[i].as_py()!r} is the store's to set", row=int(parent[i]), field="properties"
        )
    sep = np.asarray(pc.match_substring(vals, NAME_VALUE_SEPARATOR))
    if sep.any():
        i = first(sep)
        raise InvalidMessageError(
            f"property {keys[i].as_py()!r} has a value holding \\x01", row=int(parent[i]), field="properties"
        )


def _first_bad_utf8(col: pa.Array) -> int:
    lo, hi = 0, len(col)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            col.slice(lo, mid - lo).cast(pa.string())
            lo = mid
        except pa.ArrowInvalid:
            hi = mid
    return lo


def wire_table(
    table: pa.Table | pa.RecordBatch,
    *,
    default_born_host: bytes,
    store_v6: bool,
    cluster: str | None = None,
    system: bool = False,
) -> tuple[pa.Table, WireHeader]:
    """(the put path's table, the header fields it has no column for) of a wire put
    (``system``: a broker's own rows, ``REAL_TOPIC``/``REAL_QID`` allowed); raises
    :class:`InvalidMessageError` naming the first bad row and field (module docstring)."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise InvalidMessageError(
            f"put_wire takes a pyarrow Table or RecordBatch, not {type(table).__name__}", row=None, field="*"
        )
    names = table.column_names
    for name in names:
        if name not in WIRE_COLUMNS:
            raise InvalidMessageError(
                f"unknown column (a wire put has {', '.join(WIRE_COLUMNS)})", row=None, field=name
            )
    if len(set(names)) != len(names):
        raise InvalidMessageError("a column is given twice", row=None, field="*")
    for name in ("topic", "body"):
        if name not in names:
            raise InvalidMessageError("is required", row=None, field=name)
    n = table.num_rows
    born = wire_born_hosts(table, n, default_born_host)
    sys_flag = wire_sys_flag(table, n, born.shape[1] == 20 if n else len(default_born_host) == 20, store_v6)
    reconsume = _int_column(table, "reconsumeTimes", n, 0, 0, (1 << 31) - 1)
    flag = _int_column(table, "flag", n, 0, -(1 << 31), (1 << 31) - 1)
    given_flag = table.column("flag") if "flag" in names else None
    cols: dict[str, pa.Array | pa.ChunkedArray] = {
        "topic": table.column("topic"),
        "body": table.column("body"),
        # an int32 column without nulls holds these very values (every int32 is in range)
        "flag": given_flag
        if given_flag is not None and given_flag.type == pa.int32() and not given_flag.null_count
        else pa.array(flag.astype(np.int32)),
    }
    for name in ("queueId", "bornTimestamp", "delayLevel"):
        if name in names:
            cols[name] = table.column(name)
    props = table.column("properties") if "properties" in names else pa.nulls(n, pa.string())
    joined = joined_wire_properties(props, n, cluster, system)
    if joined is None:
        cols["properties"] = parse_wire_properties(props, n, cluster, system)
    header = WireHeader(sys_flag=sys_flag, reconsume_times=reconsume, born_host=born, properties=joined)
    return pa.table(cols), header
