"""Stored records read back as the rows of a wire put: what a broker needs to put a stored
message again somewhere else, without a message table in between. One module for both reads a
broker makes, sharing one column builder (:func:`_columns`, whole columns, no step per message):

- :func:`stored_rows` (:meth:`rmqlog.access.wire.WireCalls.stored_rows`): RocketMQ's transactional
  messages (``EndTransactionProcessor.endMessageTransaction``: a half message stored again in its
  real topic; ``TransactionalMessageBridge.renewHalfMessageInner``: a half message put back to be
  checked later). The records are named by their commitlog offsets *and* the queue they must
  belong to (topic, queue id, queue offset per record), so an offset from a client
  (``END_TRANSACTION``'s ``commitLogOffset`` and ``tranStateTableOffset``) is checked before
  anything is believed: the read is :meth:`rmqlog.log.commitlog.CommitLog.read_record_columns`
  with a :class:`~rmqlog.log.decode.RecordCheck` (magic, lengths, topic, QUEUEID, QUEUEOFFSET,
  body CRC, nothing at or past the published tail). A request naming no such record is an
  expected outcome, not an error: its row is left out and marked in the ``found`` mask (the
  read is retried without it: one more whole-column read per bad row, the error path only).
  The properties string comes back as stored with the names in ``drop`` cut out, in
  whole-column passes (:class:`rmqlog.log.properties.ParsedProperties`), and the value of each
  name in ``find`` comes as a column of its own (null where absent).
- :func:`wire_records` (:meth:`rmqlog.access.wire.WireCalls.wire_records`): a consumer's send-back
  (``CONSUMER_SEND_MSG_BACK``: RocketMQ's ``lookMessageByOffset`` with ``deCompressBody=false``),
  the records at commitlog offsets *as stored* (sysFlag and properties untouched, the offset
  msgId beside them), with no queue to check them against: an offset where no record starts
  is left out (``found``: the indexes of those kept), a record that starts there but is
  damaged is :class:`rmqlog.errors.CorruptRecordError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptRecordError, InvalidArgumentError
from ..log.decode import BadRecordError, RecordCheck, RecordColumns, msg_ids
from ..log.properties import STORE_PROPERTY_PREFIX, ParsedProperties
from ..log.record import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, ScanKind
from ..schema import WIRE_PUT_FIELDS

if TYPE_CHECKING:
    from ..parts import StoreParts

#: the columns of :func:`stored_rows`' table before the ``find`` ones: a wire put's
#: (:data:`rmqlog.log.encode.wire_put.WIRE_COLUMNS`), then where each record is
STORED_ROW_SCHEMA = pa.schema(
    [
        *WIRE_PUT_FIELDS,
        ("commitLogOffset", pa.int64()),
        ("queueOffset", pa.int64()),
        ("storeTimestamp", pa.int64()),
    ]
)
#: the columns of :func:`wire_records`' table: a put_wire's, then where the record lies
WIRE_RECORD_SCHEMA = pa.schema(
    [
        *WIRE_PUT_FIELDS,
        ("commitLogOffset", pa.int64()),
        ("msgId", pa.string()),
        ("queueOffset", pa.int64()),
    ]
)
_HOST_BITS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6


def stored_rows(
    parts: StoreParts,
    tail: int,
    offsets: np.ndarray,
    *,
    topic: str,
    queue_id: int,
    queue_offsets: np.ndarray,
    drop: tuple[str, ...],
    find: tuple[str, ...],
    crc: bool,
) -> tuple[pa.Table, np.ndarray]:
    """(the rows found, in request order; ``found``: a bool per requested offset). Raises
    :class:`InvalidArgumentError` when ``offsets`` and ``queue_offsets`` differ in length."""
    offsets = np.asarray(offsets, np.int64).ravel()
    queue_offsets = np.asarray(queue_offsets, np.int64).ravel()
    if offsets.shape != queue_offsets.shape:
        raise InvalidArgumentError(f"{len(offsets)} offsets but {len(queue_offsets)} queue offsets")
    commitlog = parts.commitlog
    found = (offsets >= commitlog.min_offset()) & (offsets >= 0) & (offsets < tail)
    cols: list[RecordColumns] = []
    while found.any():
        rows = np.flatnonzero(found)
        order = np.argsort(offsets[rows], kind="stable")  # segment by segment
        want = rows[order]
        check = RecordCheck(queue_id=queue_id, queue_offset=queue_offsets[want], crc=crc)
        try:
            read = commitlog.read_record_columns(offsets[want], topic=topic, check=check, tail=tail)
        except BadRecordError as e:  # not this queue's record (or damaged): that request finds nothing
            found[want[e.row]] = False
            continue
        cols, back = read, np.argsort(order, kind="stable")
        break
    else:
        return _empty(find), found
    table = _table(cols, drop, find)
    return table.take(pa.array(back)), found


def _empty(find: tuple[str, ...]) -> pa.Table:
    schema = STORED_ROW_SCHEMA
    for name in find:
        schema = schema.append(pa.field(name, pa.string()))
    return schema.empty_table()


def wire_records(parts: StoreParts, tail: int, offsets: np.ndarray, *, crc: bool) -> tuple[pa.Table, np.ndarray]:
    """(the :data:`WIRE_RECORD_SCHEMA` rows of the records starting at ``offsets`` (int64, 1-D), in
    request order; ``found``: the indexes into ``offsets`` of those rows). One vectorized read of
    every offset; offsets below the log's first, at or past ``tail`` or starting no record are left
    out. Raises :class:`CorruptRecordError` for a record that starts there but is damaged (lengths;
    body CRC with ``crc``)."""
    commitlog = parts.commitlog
    found = np.flatnonzero((offsets >= commitlog.min_offset()) & (offsets < tail))
    check = RecordCheck(crc=crc)
    try:
        cols = commitlog.read_record_columns(offsets[found], check=check, tail=tail)
    except BadRecordError:
        # error path: some offset starts no record (a client's offset is anything). Keep
        # those where one starts (the scalar decoder, per offset), then read them again
        starts = []
        for i in found:
            rec = commitlog.record_at(int(offsets[i]), tail)
            if rec is not None and rec.kind is ScanKind.RECORD:
                starts.append(i)
        found = np.array(starts, np.int64)
        try:
            cols = commitlog.read_record_columns(offsets[found], check=check, tail=tail)
        except BadRecordError as e:
            raise CorruptRecordError(f"damaged commitlog record: {e.reason}", path=e.path, offset=e.offset) from None
    if not cols:
        return WIRE_RECORD_SCHEMA.empty_table(), found
    c = _columns(cols)
    c["msgId"] = _join([msg_ids(p) for p in cols])
    return pa.Table.from_arrays([c[name] for name in WIRE_RECORD_SCHEMA.names], schema=WIRE_RECORD_SCHEMA), found


def _join(arrays: list[pa.Array]) -> pa.Array:
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _born_hosts(cols: RecordColumns) -> pa.Array:
    """BORNHOST as the record holds it (8 or 20 bytes a row: what ``put_wire`` takes as is),
    without formatting and parsing ``ip:port`` text."""
    raw = cols.born_host_raw
    n = len(cols)
    if isinstance(raw, np.ndarray) and raw.dtype == np.uint8 and raw.ndim == 2:
        width = raw.shape[1]
        offsets = pa.py_buffer((np.arange(n + 1, dtype=np.int32) * width).tobytes())
        return pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(np.ascontiguousarray(raw).tobytes())])
    return pa.array([bytes(r) for r in raw], pa.binary())  # (IPv6 among them: rows of either width)


def _columns(parts: list[RecordColumns]) -> dict[str, pa.Array]:
    """The fields both tables take, as stored, one whole column each over ``parts`` (at least one,
    in their order): ``topic``, ``queueId``, ``body`` (null for a part read without bodies),
    ``flag``, ``sysFlag`` (host bits included), ``bornTimestamp``, ``bornHost`` (the record's 8/20
    bytes), ``properties`` (the stored string), ``reconsumeTimes``, ``commitLogOffset``,
    ``queueOffset``, ``storeTimestamp``; typed as :data:`WIRE_RECORD_SCHEMA` and
    :data:`STORED_ROW_SCHEMA` name them."""

    def field(name: str) -> np.ndarray:
        return np.concatenate([p.header[name] for p in parts])

    return {
        "topic": _join([p.topic for p in parts]),
        "queueId": pa.array(field("queueId").astype(np.int32)),
        "body": _join([p.body if p.body is not None else pa.nulls(len(p), pa.binary()) for p in parts]).cast(
            pa.binary()
        ),
        "flag": pa.array(field("flag").astype(np.int32)),
        "sysFlag": pa.array(field("sysFlag").astype(np.int32)),
        "bornTimestamp": pa.array(field("bornTimestamp").astype(np.int64)),
        "bornHost": _join([_born_hosts(p) for p in parts]),
        "properties": _join([p.properties for p in parts]).cast(pa.string()),
        "reconsumeTimes": pa.array(field("reconsumeTimes").astype(np.int32)),
        "commitLogOffset": pa.array(np.concatenate([p.offsets for p in parts]).astype(np.int64)),
        "queueOffset": pa.array(field("queueOffset").astype(np.int64)),
        "storeTimestamp": pa.array(field("storeTimestamp").astype(np.int64)),
    }


def _table(parts: list[RecordColumns], drop: tuple[str, ...], find: tuple[str, ...]) -> pa.Table:
    c = _columns(parts)
    n = len(c["topic"])
    props = c["properties"]
    parsed = ParsedProperties(props, names=find)
    found_cols = [parsed.column(name) for name in find]
    if drop:
        keys = parsed.keys
        kept = ~np.asarray(
            pc.or_(pc.is_in(keys, pa.array(list(drop), pa.string())), pc.starts_with(keys, STORE_PROPERTY_PREFIX))
        )
        sel = pa.array(kept)
        pairs = pc.binary_join_element_wise(
            keys.filter(sel), NAME_VALUE_SEPARATOR, parsed.values.filter(sel), PROPERTY_SEPARATOR, ""
        )
        row_offsets = np.zeros(n + 1, np.int32)
        np.cumsum(np.bincount(parsed.parent[kept], minlength=n), out=row_offsets[1:])
        props = pc.fill_null(pc.binary_join(pa.ListArray.from_arrays(pa.array(row_offsets), pairs), ""), "")
    c["properties"] = props.cast(pa.string())
    c["sysFlag"] = pa.array((np.asarray(c["sysFlag"]) & ~_HOST_BITS).astype(np.int32))
    arrays = [c[name] for name in STORED_ROW_SCHEMA.names]
    schema = STORED_ROW_SCHEMA
    for name, col in zip(find, found_cols, strict=True):
        schema = schema.append(pa.field(name, pa.string()))
        arrays.append(col.cast(pa.string()))
    return pa.Table.from_arrays(arrays, schema=schema)
