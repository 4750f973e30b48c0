"""A send's rows on their way to the store: the put's columns (:data:`WIRE_SCHEMA`), the one
call that puts them (:func:`put_wire`), a batch body decoded, RocketMQ's properties string read
and written, and the rows of a round of sends joined into one table."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

import rmqlog
from rmqlog import MessageStore

from ..remoting.headers import IdempotenceMarker
from ..remoting.names import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PROPERTY_WAIT,
    properties_text,
    property_mark,
)

_WAIT_MARK = property_mark(PROPERTY_WAIT)
#: the columns of a put (``MessageStore.put_wire``), in this order and of these types
WIRE_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("queueId", pa.int32()),
        ("body", pa.binary()),
        ("flag", pa.int32()),
        ("sysFlag", pa.int32()),
        ("bornTimestamp", pa.int64()),
        ("bornHost", pa.string()),
        ("properties", pa.string()),
        ("reconsumeTimes", pa.int32()),
    ]
)


def put_wire(
    store: MessageStore,
    table: pa.Table,
    marker: IdempotenceMarker | None = None,
    system: bool = False,
    cluster: str | None = None,
) -> pa.Table:
    """Append ``table`` (:data:`WIRE_SCHEMA`) as one all-or-nothing batch; per row
    ``commitLogOffset``, ``queueOffset``, ``msgId``, ``storeTimestamp``. The one place a send
    reaches the store (``MessageStore.put_wire``, the store's put of wire-form messages). With
    ``marker``, the store's idempotent put: a replay writes nothing and returns no row.
    ``system``: half messages (:mod:`rmqnet.broker.transactions`), the broker's own rows."""
    if marker is None:
        return store.wire.put_wire(table, system=system, cluster=cluster, wait_flush=False)
    return store.wire.put_wire(
        table, writer=marker.writer, sequence=marker.sequence, system=system, cluster=cluster, wait_flush=False
    )


def decode_batch(body: bytes, append_properties: str) -> pa.Table:
    """A SEND_BATCH_MESSAGE body (``MessageDecoder.encodeMessages``) as columns ``body``,
    ``flag``, ``properties`` (each message's with ``append_properties`` appended), by the
    store's vectorized decoder. Raises :class:`rmqlog.InvalidMessageError` for a body that is
    not such a batch, :class:`rmqlog.MessageTooLargeError` for properties past 32767 bytes."""
    return rmqlog.decode_message_batch(body, append_properties)


def parse_properties(text: str) -> dict[str, str]:
    """RocketMQ's ``string2messageProperties``: ``name\\x01value\\x02``...; an entry without
    exactly one ``\\x01`` is dropped, as Java drops it."""
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        kv = item.split(NAME_VALUE_SEPARATOR)
        if len(kv) == 2:
            out[kv[0]] = kv[1]
    return out


def format_properties(props: dict[str, str]) -> str:
    """RocketMQ's ``messageProperties2String`` (every entry ends with ``\\x02``)."""
    return properties_text(props)


def waits_for_store(properties: str) -> bool:
    """Java's ``isWaitStoreMsgOK``: no ``WAIT`` property, or one ``Boolean.parseBoolean`` reads
    as true. Every Java client's message carries ``WAIT``: its value is found from its item
    (the last one, as the parse keeps it) without parsing the rest; an item the parse would
    treat otherwise (a value holding ``\\x01``) takes the parse."""
    if _WAIT_MARK not in properties:
        return True
    at = properties.rfind(_WAIT_MARK)
    end = properties.find(PROPERTY_SEPARATOR, at)
    start = at + len(_WAIT_MARK)
    value = properties[start:] if end < 0 else properties[start:end]
    if (at and properties[at - 1] != PROPERTY_SEPARATOR) or NAME_VALUE_SEPARATOR in value:
        parsed = parse_properties(properties).get(PROPERTY_WAIT)  # (a name ending in WAIT, a value holding \x01)
        return parsed is None or parsed.lower() == "true"
    return value.lower() == "true"


def repeat_value(value: Any, typ: pa.DataType, n: int) -> pa.Array:
    """``value`` ``n`` times (Arrow fills the array from one scalar: no Python loop)."""
    return pa.repeat(pa.scalar(value, typ), n)


def concat_rows(rows: list[pa.Table | tuple[Any, ...]], cluster: str) -> pa.Table:
    """The rows of sends in order (a batch's table, or one message's column values), as one
    :data:`WIRE_SCHEMA` table; single sends' properties as stored (WAIT dropped, CLUSTER set:
    what the store's ``cluster`` does)."""
    parts: list[pa.Table] = []
    run: list[tuple[Any, ...]] = []
    for r in rows:
        if isinstance(r, pa.Table):
            if run:
                parts.append(_singles_table(run))
                run = []
            parts.append(r)
        else:
            props = parse_properties(r[7])
            props.pop("WAIT", None)
            props["CLUSTER"] = cluster
            run.append((*r[:7], format_properties(props), *r[8:]))
    if run:
        parts.append(_singles_table(run))
    return pa.concat_tables(parts)


def _singles_table(rows: list[tuple[Any, ...]]) -> pa.Table:
    columns = list(zip(*rows, strict=True))
    return pa.Table.from_arrays(
        [pa.array(col, f.type) for col, f in zip(columns, WIRE_SCHEMA, strict=True)], schema=WIRE_SCHEMA
    )
