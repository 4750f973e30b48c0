"""Messages sent back by their consumers (RocketMQ 4.9.8's ``CONSUMER_SEND_MSG_BACK``, 36), made
from the stored records in one pass over a batch: the broker's own path for the retry
properties, which a user's put may not set (:data:`rmqlog.log.properties.RESERVED_PROPERTIES`).

What RocketMQ's ``SendMessageProcessor.asyncConsumerSendMsgBack`` stores, per message, and what
:func:`send_back_table` makes from a :meth:`rmqlog.access.wire.WireCalls.wire_records` row:

(field: the new record)
- topic, queueId: the caller's (``%RETRY%<group>`` or ``%DLQ%<group>``, queue 0)
- body, flag, bornTimestamp, bornHost: as stored (a compressed body stays compressed)
- sysFlag: as stored, its host bits left to the new record's layout
- reconsumeTimes: stored + 1
- ``RETRY_TOPIC``: kept when present, else the stored record's topic (where it came from)
- ``ORIGIN_MESSAGE_ID``: kept when present and not blank, else the stored record's offset msgId
- ``DELAY``: the caller's level when > 0, given as the put's ``delayLevel`` column (the store routes it to the schedule
  topic and writes ``DELAY`` there; the properties keep the wire put's fast path), else none
- ``REAL_TOPIC``, ``REAL_QID``: dropped: the store sets them again for a delay (RocketMQ overwrites them)
- ``WAIT``: dropped (RocketMQ stores ``WAIT=false``; a put here never stores ``WAIT``)
- ``RMQLOG_*``: dropped: the store's markers (a scheduler's delivery carries one) belong to the put that wrote them
- every other property: kept, in stored order

Whole columns only: the properties are rewritten by the C helper's ``copy_properties`` (one
pass over the bytes, the scheduler's copies' helper), or without it through the parsed map,
with the same result.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..arguments import long_array_arg
from ..errors import InvalidArgumentError
from ..native import copy_properties as _native_copy
from ..schema import WIRE_PUT_FIELDS
from .gather import gather_slices, to_binary
from .properties import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    STORE_PROPERTY_PREFIX,
    ParsedProperties,
)
from .record import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_WAIT = "WAIT"
#: names a sent-back message loses (see the module docstring)
DROPPED = (PROPERTY_DELAY, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID, PROPERTY_WAIT)
#: the names whose stored values decide what is appended
FOUND = (PROPERTY_RETRY_TOPIC, PROPERTY_ORIGIN_MESSAGE_ID)
#: SYSFLAG bits a sent-back record keeps (compressed, multi tags, transaction); the host bits
#: (16, 32) are the put's, from the hosts
CLIENT_SYSFLAG_BITS = 0xF

#: the columns :func:`send_back_table` returns: a ``put_wire``'s
SEND_BACK_SCHEMA = pa.schema(
    [
        *WIRE_PUT_FIELDS,
        ("delayLevel", pa.int32()),
    ]
)


def drop_and_find(
    props: pa.Array, drop: tuple[str, ...], find: tuple[str, ...]
) -> tuple[pa.StringArray, list[pa.Array]]:
    """Per row of a properties column: the stored items without the names in ``drop`` and
    the store's ``RMQLOG_*`` markers (``name\\x01value\\x02``... in stored order) and the values of ``find`` (null where
    absent;
    the last one wins, as in Java's map), by Java's parsing rules."""
    if isinstance(props, pa.ChunkedArray):
        props = props.combine_chunks()
    props = props.cast(pa.string())
    n = len(props)
    if _native_copy is not None and not props.null_count and n:
        off = np.frombuffer(props.buffers()[1], np.int32, n + 1, props.offset * 4)
        data = props.buffers()[2] or pa.py_buffer(b"")
        out = np.empty(data.size + n, np.uint8)
        row_offsets = np.empty(n + 1, np.int64)
        k = len(find)
        start, length = np.empty(k * n, np.int64), np.empty(k * n, np.int64)
        _native_copy(
            data,
            off,
            tuple(x.encode() for x in drop),
            (STORE_PROPERTY_PREFIX.encode(),),
            tuple(x.encode() for x in find),
            out,
            row_offsets,
            start,
            length,
        )
        if row_offsets[-1] < 1 << 31:
            kept = pa.StringArray.from_buffers(
                n,
                pa.py_buffer((row_offsets - row_offsets[0]).astype(np.int32)),
                pa.py_buffer(out[row_offsets[0] : row_offsets[-1]]),
            )
            values = []
            for j in range(k):
                s, ln = start[j * n : (j + 1) * n], length[j * n : (j + 1) * n]
                found = s >= 0
                if not found.any():  # (the usual case of a first retry: no Arrow call)
                    values.append(pa.nulls(n, pa.string()))
                    continue
                v = to_binary(gather_slices(data, np.maximum(s, 0), ln)).view(pa.string())
                values.append(v if found.all() else pc.if_else(pa.array(found), v, pa.scalar(None, pa.string())))
            return kept, values
    parsed = ParsedProperties(props)
    keys = parsed.keys
    keep = (
        ~np.asarray(
            pc.fill_null(
                pc.or_(pc.is_in(keys, pa.array(list(drop), pa.string())), pc.starts_with(keys, STORE_PROPERTY_PREFIX)),
                False,
            )
        )
        if len(keys)
        else np.zeros(0, bool)
    )
    sel = pa.array(keep, pa.bool_())
    pairs = pc.binary_join_element_wise(
        keys.filter(sel), NAME_VALUE_SEPARATOR, parsed.values.filter(sel), PROPERTY_SEPARATOR, ""
    )
    row_offsets32 = np.concatenate([[0], np.cumsum(np.bincount(parsed.parent[keep], minlength=n))]).astype(np.int32)
    kept_arr = pc.fill_null(pc.binary_join(pa.ListArray.from_arrays(pa.array(row_offsets32), pairs), ""), "")
    return kept_arr, [parsed.column(name) for name in find]


#: the columns :func:`send_back_table` and :func:`resend_table` read, and their types
_RECORD_COLUMNS = {
    "topic": pa.string(),
    "body": pa.binary(),
    "flag": pa.int32(),
    "sysFlag": pa.int32(),
    "bornTimestamp": pa.int64(),
    "bornHost": pa.binary(),
    "properties": pa.string(),
    "reconsumeTimes": pa.int32(),
    "msgId": pa.string(),
}


def _check_records(records: object) -> int:
    """The rows of a ``wire_records`` table; :class:`InvalidArgumentError` for anything else."""
    if not isinstance(records, pa.Table):
        raise InvalidArgumentError(
            f"records must be a pyarrow Table of MessageStore.wire.wire_records, not {type(records).__name__}"
        )
    for name, typ in _RECORD_COLUMNS.items():
        if name not in records.column_names or records.schema.field(name).type != typ:
            raise InvalidArgumentError(
                f"records must have column {name!r} of type {typ} (MessageStore.wire.wire_records' columns)"
            )
        if records.column(name).null_count:
            raise InvalidArgumentError(f"records column {name!r} holds nulls")
    return records.num_rows


def _strings_of(values: object, n: int, what: str) -> pa.Array:
    try:
        arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else pa.array(values)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"{what} must be {n} strings: {exc}") from None
    if len(arr) != n or not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)) or arr.null_count:
        raise InvalidArgumentError(f"{what} must be {n} strings, not {len(arr)} of {arr.type}")
    return arr


def _item(name: str, values: pa.Array, where: np.ndarray) -> list[pa.Array | str]:
    """The pieces of ``name\\x01value\\x02`` on the rows of ``where``, nothing elsewhere, for
    one ``binary_join_element_wise`` of the whole row: no piece when no row needs it, the
    literal pieces when every row does (the usual cases: no Arrow call of its own; each call
    releases and takes back the GIL, which the broker's dispatcher thread also wants)."""
    if not where.any():
        return []
    if where.all():
        return [name + NAME_VALUE_SEPARATOR, values, PROPERTY_SEPARATOR]
    item = pc.binary_join_element_wise(name + NAME_VALUE_SEPARATOR, values, PROPERTY_SEPARATOR, "")
    return [pc.if_else(pa.array(where, pa.bool_()), item, pa.scalar("", pa.string()))]


def _absent_or_blank(values: pa.Array) -> np.ndarray:
    """Java's ``UtilAll.isBlank`` per row: null, empty or whitespace only."""
    if values.null_count == len(values):
        return np.ones(len(values), bool)
    return np.asarray(pc.fill_null(pc.equal(pc.utf8_trim_whitespace(values), ""), True))


def send_back_table(records: pa.Table, topic: pa.Array, queue_id: np.ndarray, delay_level: np.ndarray) -> pa.Table:
    """The records to put (:data:`SEND_BACK_SCHEMA`, ``put_wire``'s columns) for ``records``
    (rows of :meth:`rmqlog.access.wire.WireCalls.wire_records`) sent back: to ``topic`` / ``queue_id``
    (one per row), with ``delayLevel`` = ``delay_level`` where it is > 0 (see the module docstring).
    Raises :class:`rmqlog.errors.InvalidArgumentError` for arguments of another shape or type."""
    n = _check_records(records)
    topic = _strings_of(topic, n, "topic")
    queue_id, delay_level = long_array_arg("queue_id", queue_id, n), long_array_arg("delay_level", delay_level, n)
    kept, (retry_topic, origin) = drop_and_find(records.column("properties"), DROPPED, FOUND)
    no_retry = (
        np.full(n, retry_topic.null_count == n)
        if retry_topic.null_count in (0, n)
        else ~np.asarray(retry_topic.is_valid())
    )
    no_origin = _absent_or_blank(origin) if n else np.zeros(0, bool)
    levels = np.asarray(delay_level, np.int64)
    pieces = [
        *_item(PROPERTY_RETRY_TOPIC, records.column("topic").combine_chunks(), no_retry),
        *_item(PROPERTY_ORIGIN_MESSAGE_ID, records.column("msgId").combine_chunks(), no_origin),
    ]
    props = pc.binary_join_element_wise(kept, *pieces, "") if pieces else kept
    sys_flag = records.column("sysFlag").to_numpy() & CLIENT_SYSFLAG_BITS
    reconsume = records.column("reconsumeTimes").to_numpy().astype(np.int64) + 1
    return pa.Table.from_arrays(
        [
            topic.cast(pa.string()),
            pa.array(np.asarray(queue_id, np.int32)),
            records.column("body"),
            records.column("flag"),
            pa.array(sys_flag.astype(np.int32)),
            records.column("bornTimestamp"),
            records.column("bornHost"),
            props,
            pa.array(np.minimum(reconsume, (1 << 31) - 1).astype(np.int32)),
            pa.array(np.minimum(levels, (1 << 31) - 1).astype(np.int32), mask=levels <= 0),
        ],
        schema=SEND_BACK_SCHEMA,
    )


#: names a re-sent dead letter loses: the retry's, the delay's and the store's own
RESEND_DROPPED = (PROPERTY_RETRY_TOPIC, PROPERTY_DELAY, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID, PROPERTY_WAIT)


def resend_table(records: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """Dead letters (rows of :meth:`rmqlog.access.wire.WireCalls.wire_records` of a ``%DLQ%`` queue)
    back to the topic they were first sent to (their ``RETRY_TOPIC``), as new messages:
    ``reconsumeTimes`` 0, any queue (``queueId`` null: round robin), body, flag, SYSFLAG's
    client bits, born time and host as stored; properties without ``RETRY_TOPIC``, ``DELAY``,
    ``REAL_TOPIC``/``REAL_QID``, ``WAIT`` and the store's ``RMQLOG_*`` (``ORIGIN_MESSAGE_ID``,
    ``UNIQ_KEY``, tags, keys and the user's kept). Returns ``(table, has_origin)``: the rows of
    records that name their topic (``has_origin``: a bool per record; one without
    ``RETRY_TOPIC``, which no send-back made, is left out)."""
    _check_records(records)
    kept, (origin,) = drop_and_find(records.column("properties"), RESEND_DROPPED, (PROPERTY_RETRY_TOPIC,))
    has = np.asarray(pc.is_valid(origin)) if records.num_rows else np.zeros(0, bool)
    n = records.num_rows
    sys_flag = records.column("sysFlag").to_numpy() & CLIENT_SYSFLAG_BITS
    table = pa.Table.from_arrays(
        [
            origin,
            pa.nulls(n, pa.int32()),
            records.column("body"),
            records.column("flag"),
            pa.array(sys_flag.astype(np.int32)),
            records.column("bornTimestamp"),
            records.column("bornHost"),
            kept,
            pa.array(np.zeros(n, np.int32)),
            pa.nulls(n, pa.int32()),
        ],
        schema=SEND_BACK_SCHEMA,
    )
    return table.filter(pa.array(has)), has
