"""Stored records read back as the rows of a wire put (:meth:`rmqlog.MessageStore.stored_rows`):
what a broker needs to put a stored message again somewhere else, RocketMQ's transactional
messages (``EndTransactionProcessor.endMessageTransaction``: a half message stored again in
its real topic; ``TransactionalMessageBridge.renewHalfMessageInner``: a half message put back
to be checked later), without a message table in between.

The records are named by their commitlog offsets *and* the queue they must belong to (topic,
queue id, queue offset per record), so an offset from a client (``END_TRANSACTION``'s
``commitLogOffset`` and ``tranStateTableOffset``) is checked before anything is believed: the
read is :meth:`rmqlog.log.commitlog.CommitLog.read_record_columns` with a
:class:`~rmqlog.log.decode.RecordCheck` (magic, lengths, topic, QUEUEID, QUEUEOFFSET, body CRC,
nothing at or past the published tail). A request naming no such record is an expected
outcome, not an error: its row is left out and marked in the ``found`` mask (the read is
retried without it: one more whole-column read per bad row, the error path only).

The properties string comes back as stored with the names in ``drop`` cut out, in whole-column
passes (:class:`rmqlog.log.properties.ParsedProperties`), and the value of each name in
``find`` comes as a column of its own (null where absent). No step per message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidArgumentError
from ..log.decode import BadRecordError, RecordCheck, RecordColumns
from ..log.properties import STORE_PROPERTY_PREFIX, ParsedProperties
from ..log.record import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6

if TYPE_CHECKING:
    from ..parts import StoreParts

#: the columns of :func:`stored_rows`' table before the ``find`` ones: a wire put's
#: (:data:`rmqlog.log.encode.wire_put.WIRE_COLUMNS`), then where each record is
STORED_ROW_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queueId", pa.int32()), ("body", pa.binary()), ("flag", pa.int32()),
    ("sysFlag", pa.int32()), ("bornTimestamp", pa.int64()), ("bornHost", pa.binary()),
    ("properties", pa.string()), ("reconsumeTimes", pa.int32()),
    ("commitLogOffset", pa.int64()), ("queueOffset", pa.int64()), ("storeTimestamp", pa.int64()),
])
_HOST_BITS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6


def stored_rows(parts: StoreParts, tail: int, offsets: np.ndarray, *, topic: str, queue_id: int,
                queue_offsets: np.ndarray, drop: tuple[str, ...], find: tuple[str, ...],
                crc: bool) -> tuple[pa.Table, np.ndarray]:
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


def _table(parts: list[RecordColumns], drop: tuple[str, ...], find: tuple[str, ...]) -> pa.Table:
    def field(name: str) -> np.ndarray:
        return np.concatenate([p.header[name] for p in parts])

    def join(arrays: list[pa.Array]) -> pa.Array:
        return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)

    n = sum(len(p) for p in parts)
    props = join([p.properties for p in parts])
    parsed = ParsedProperties(props, names=find)
    found_cols = [parsed.column(name) for name in find]
    if drop:
        keys = parsed.keys
        kept = ~np.asarray(pc.or_(pc.is_in(keys, pa.array(list(drop), pa.string())),
                                  pc.starts_with(keys, STORE_PROPERTY_PREFIX)))
        sel = pa.array(kept)
        pairs = pc.binary_join_element_wise(keys.filter(sel), "\x01", parsed.values.filter(sel), "\x02", "")
        row_offsets = np.zeros(n + 1, np.int32)
        np.cumsum(np.bincount(parsed.parent[kept], minlength=n), out=row_offsets[1:])
        props = pc.fill_null(pc.binary_join(pa.ListArray.from_arrays(pa.array(row_offsets), pairs), ""), "")
    born = [p.born_host_raw for p in parts]
    if all(b.dtype == np.uint8 for b in born):
        raw = np.ascontiguousarray(np.concatenate(born))
        hosts = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), n, [None, pa.py_buffer(raw.tobytes())]).cast(pa.binary())
    else:
        hosts = pa.array([bytes(b) for p in born for b in p], pa.binary())  # IPv6 rows (rare): one step per row
    bodies = join([p.body for p in parts if p.body is not None])
    arrays = [
        join([p.topic for p in parts]), pa.array(field("queueId").astype(np.int32)), bodies.cast(pa.binary()),
        pa.array(field("flag").astype(np.int32)), pa.array((field("sysFlag") & ~_HOST_BITS).astype(np.int32)),
        pa.array(field("bornTimestamp").astype(np.int64)), hosts, props.cast(pa.string()),
        pa.array(field("reconsumeTimes").astype(np.int32)),
        pa.array(np.concatenate([p.offsets for p in parts]).astype(np.int64)),
        pa.array(field("queueOffset").astype(np.int64)), pa.array(field("storeTimestamp").astype(np.int64)),
    ]
    schema = STORED_ROW_SCHEMA
    for name, col in zip(find, found_cols, strict=True):
        schema = schema.append(pa.field(name, pa.string()))
        arrays.append(col.cast(pa.string()))
    return pa.Table.from_arrays(arrays, schema=schema)
