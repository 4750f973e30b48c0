"""Reads through a consume queue: each unit's record decoded and checked against the unit.

A consume-queue unit (:mod:`rmqlog.queue.consume_queue`) is only (commitlog offset, size, tag
hash), and nothing checksums it: a damaged unit may point at another queue's record, into
the middle of one, at a blank, past the published tail. A read must then fail, never return
another record's data. Every read of messages by queue offset (``get_messages``,
``read_queue``, ``offset_for_timestamp``, the Spark source) goes through here. The checks,
each one numpy comparison over the whole read and each done before the gather it guards:

1. From the units alone, before a byte is gathered: the record starts at or after ``floor``
   (the commitlog's first offset when the caller took the queue's bounds: from the queue's
   first live unit on, every unit points there or later), ends at or below the published
   tail, lies inside one segment, and is at least the smallest record size.
2. From the gathered headers: a record starts there (magic V1/V2; not a blank, not zeros),
   its TOTALSIZE is the unit's size, its QUEUEID the queue's, its QUEUEOFFSET the unit's
   logical offset; then its lengths add up to TOTALSIZE and its topic is the queue's.
3. With ``check_crc``: each body's CRC equals its BODYCRC (one batch CRC call).

A light message queue's units (``%LMQ%...``, :mod:`rmqlog.log.lmq`) point at records of other
queues: step 2 there checks TOTALSIZE and the lengths, and either QUEUEID, QUEUEOFFSET and
the topic (a record sent to it) or that the record's ``INNER_MULTI_DISPATCH`` names the queue
with the unit's logical offset at the same place of its ``INNER_MULTI_QUEUE_OFFSET``
(:func:`check_lmq_units`; no fast path: each such read decodes those properties).

Errors: a unit that does not match its record raises :class:`CorruptQueueError` (the
consume-queue file, the logical offset, the commitlog offset); a record damaged in itself
:class:`CorruptRecordError` (the segment file, the commitlog offset). Either names the first
bad unit of the read in queue order. A read that retention overtook (units that point below
the commitlog's first offset *now*, whose segments were deleted while it read) raises
:class:`MessagesDeletedError` naming the queue and the lost offsets instead; a segment it had
already reached keeps its data for the read (see :mod:`rmqlog.log.pins`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptQueueError, CorruptRecordError, MessagesDeletedError
from ..log.commitlog import CommitLog
from ..log.decode import MIN_RECORD_SIZE, BadRecordError, RecordCheck, RecordColumns
from ..log.lmq import LMQ_PREFIX, in_lmq
from ..log.pins import pinned
from ..log.raw_check import read_checked
from ..log.record import MAGIC_V1, MAGIC_V2
from ..log.record_check import not_a_record, raise_first_bad_row
from ..paths import segment_name
from ..results import StoredRecords
from .consume_queue import CQ_UNIT_SIZE, ConsumeQueue

_T = TypeVar("_T")


def read_units(
    commitlog: CommitLog,
    cq: ConsumeQueue,
    units: np.ndarray,
    logical: np.ndarray,
    *,
    topic: str,
    queue_id: int,
    floor: int,
    tail: int,
    check_crc: bool,
) -> pa.Table:
    """The messages ``units`` (consume-queue units, no fillers) point at, checked against them.

    ``logical``: each unit's queue offset (ascending). ``floor``: see the module docstring.
    Raises :class:`CorruptQueueError`, :class:`CorruptRecordError` or
    :class:`MessagesDeletedError`.
    """
    return _checked(commitlog.read_messages, commitlog, cq, units, logical, topic, queue_id, floor, tail, check_crc)


def read_unit_columns(
    commitlog: CommitLog,
    cq: ConsumeQueue,
    units: np.ndarray,
    logical: np.ndarray,
    *,
    topic: str,
    queue_id: int,
    floor: int,
    tail: int,
    check_crc: bool,
) -> list[RecordColumns]:
    """:func:`read_units` (the same checks and errors) stopping at the records' raw columns, one
    :class:`RecordColumns` per commitlog segment (the scheduler's copies are made from them)."""
    return _checked(
        commitlog.read_record_columns, commitlog, cq, units, logical, topic, queue_id, floor, tail, check_crc
    )


def read_unit_records(
    commitlog: CommitLog,
    cq: ConsumeQueue,
    units: np.ndarray,
    logical: np.ndarray,
    *,
    topic: str,
    queue_id: int,
    floor: int,
    tail: int,
    check_crc: bool,
) -> list[tuple[RecordColumns, pa.LargeBinaryArray]]:
    """:func:`read_units` (the same checks and errors) giving the records as stored, byte-exact,
    beside their raw columns, one pair per commitlog segment
    (:meth:`rmqlog.log.commitlog.CommitLog.read_stored_records`)."""
    return _checked(
        commitlog.read_stored_records, commitlog, cq, units, logical, topic, queue_id, floor, tail, check_crc
    )


def read_unit_stored(
    commitlog: CommitLog,
    cq: ConsumeQueue,
    units: np.ndarray,
    logical: np.ndarray,
    *,
    topic: str,
    queue_id: int,
    floor: int,
    tail: int,
    check_crc: bool,
) -> StoredRecords | None:
    """The fast form of :func:`read_unit_records` for a read without a tag filter: the records
    as stored, checked where they lie and then copied whole, one gather per segment
    (:func:`rmqlog.log.raw_check.read_checked`: the same checks, on the raw bytes), or
    ``None`` whenever that check does not take them (a unit out of bounds, a record that is
    not the unit's, a deleted segment, a V2 or IPv6 record). The caller then reads them with
    :func:`read_unit_records`, which raises the typed error naming the first bad unit or reads
    what this declined: so no refusal, no error and no byte differs between the two paths."""
    if topic.startswith(LMQ_PREFIX):
        return None  # (its records are other queues': check_lmq_units, in the general read)
    off = units["offset"].astype(np.int64)
    size = units["size"].astype(np.int64)
    # check_bounds' step 1 as one verdict (a damaged offset may make ``end`` wrap; then
    # ``off.max() < tail`` is false, and the conditions only count together)
    end = off + size
    seg = commitlog.segment_size
    if not (
        off.min() >= floor
        and size.min() >= MIN_RECORD_SIZE
        and end.max() <= tail
        and off.max() < tail
        and (off // seg == (end - 1) // seg).all()
    ):
        return None  # step 1 fails somewhere: check_bounds names it in the general read
    logical = np.asarray(logical, np.int64)
    array = read_checked(commitlog, off, size, logical, topic=topic.encode(), queue_id=queue_id, crc=check_crc)
    return None if array is None else StoredRecords(array, off, size, logical)


def _checked(
    read: Callable[..., _T],
    commitlog: CommitLog,
    cq: ConsumeQueue,
    units: np.ndarray,
    logical: np.ndarray,
    topic: str,
    queue_id: int,
    floor: int,
    tail: int,
    check_crc: bool,
) -> _T:
    try:
        return _read(read, commitlog, units, logical, topic, queue_id, floor, tail, check_crc)
    except BadRecordError as e:
        first = e
    deleted = deleted_error(commitlog, cq, units, logical, topic, queue_id, floor)
    if deleted is not None:
        raise deleted from None
    # Error path only: the rows before the bad one passed the checks that ran before it
    # failed, not necessarily the later ones (the CRC, say). Read them again, so that the
    # error names the first bad unit in queue order (each retry is shorter: this ends).
    while first.row > 0:
        try:
            _read(read, commitlog, units[: first.row], logical[: first.row], topic, queue_id, floor, tail, check_crc)
            break
        except BadRecordError as earlier:
            first = earlier
    raise _public_error(first, cq, topic, queue_id, int(logical[first.row]), int(units["offset"][first.row])) from None


def deleted_error(
    commitlog: CommitLog,
    cq: ConsumeQueue,
    units: np.ndarray,
    logical: np.ndarray,
    topic: str,
    queue_id: int,
    floor: int,
) -> MessagesDeletedError | None:
    """After a failed read: the error to raise when retention deleted records the read needed
    (some ``units`` point at or past ``floor``, the commitlog's first offset when the read was
    planned, but below its first offset now), else ``None``. A unit below ``floor`` is damage,
    never a deletion. The lost range runs from the first such unit to the queue's first
    offset still stored."""
    low = commitlog.min_offset()
    if low <= floor:
        return None
    off = units["offset"].astype(np.int64)
    gone = np.flatnonzero((off >= floor) & (off < low))
    if not len(gone):
        return None
    start = int(logical[gone[0]])
    end = max(cq.min_offset(low), int(logical[gone[-1]]) + 1)
    return MessagesDeletedError(topic, queue_id, start, end, detail="deleted while the read was under way")


def _read(
    read: Callable[..., _T],
    commitlog: CommitLog,
    units: np.ndarray,
    logical: np.ndarray,
    topic: str,
    queue_id: int,
    floor: int,
    tail: int,
    check_crc: bool,
) -> _T:
    off = units["offset"].astype(np.int64)
    size = units["size"].astype(np.int64)
    check_bounds(off, size, floor, tail, commitlog.segment_size)
    if topic.startswith(LMQ_PREFIX):
        check_lmq_units(commitlog, off, size, np.asarray(logical, np.int64), topic, queue_id, tail)
        return read(off, check=RecordCheck(size=size, crc=check_crc), tail=tail)
    check = RecordCheck(size=size, queue_id=queue_id, queue_offset=np.asarray(logical, np.int64), crc=check_crc)
    return read(off, topic=topic, check=check, tail=tail)


def check_lmq_units(
    commitlog: CommitLog, off: np.ndarray, size: np.ndarray, logical: np.ndarray, topic: str, queue_id: int, tail: int
) -> None:
    """Step 2 for the units of light message queue ``topic`` (the module docstring): raises
    :class:`BadRecordError` (against the unit) for the first whose record is not in the queue
    at its logical offset (a record sent to the queue itself is, as any queue's)."""
    row = 0
    for cols in commitlog.read_record_columns(off, check=RecordCheck(size=size, crc=False), tail=tail):
        n = len(cols.offsets)
        h, at_ = cols.header, logical[row : row + n]
        own = (
            np.asarray(pc.equal(pc.cast(cols.topic, pa.string()), topic).fill_null(False))
            & (h["queueId"].astype(np.int64) == queue_id)
            & (h["queueOffset"].astype(np.int64) == at_)
        )
        bad = np.flatnonzero(~(own | in_lmq(cols.properties, topic, at_)))
        if len(bad):
            at = row + int(bad[0])
            raise BadRecordError(
                f"the record there is not in {topic} at queue offset {int(logical[at])}",
                row=at,
                offset=int(off[at]),
                against_unit=True,
            )
        row += n


def check_bounds(off: np.ndarray, size: np.ndarray, floor: int, tail: int, segment_size: int) -> None:
    """Step 1: where units point, before anything is gathered there (raises :class:`BadRecordError`)."""
    tests: list[tuple[np.ndarray, Callable[[int], str], bool]] = [
        (off < floor, lambda r: f"it points below the commitlog's first offset {floor}", True),
        # written so that no sum can overflow, whatever the unit holds
        (
            (off >= tail) | (size > tail - off),
            lambda r: f"it points past the published tail {tail} (a {size[r]}-byte record)",
            True,
        ),
        (size < MIN_RECORD_SIZE, lambda r: f"its size {size[r]} is smaller than any record", True),
        (
            off // segment_size != (off + size - 1) // segment_size,
            lambda r: "its record would cross a commitlog segment end",
            True,
        ),
    ]
    raise_first_bad_row(0, off, tests)


def _public_error(
    e: BadRecordError,
    cq: ConsumeQueue,
    topic: str,
    queue_id: int,
    queue_offset: int,
    commit_log_offset: int,
) -> CorruptQueueError | CorruptRecordError:
    if e.against_unit:
        per = cq.units_per_segment
        path = cq.directory / segment_name(queue_offset // per * per * CQ_UNIT_SIZE)
        return CorruptQueueError(
            f"consume-queue unit of {topic}/{queue_id} does not match the commitlog: {e.reason}",
            path=str(path),
            queue_offset=queue_offset,
            commit_log_offset=commit_log_offset,
        )
    return CorruptRecordError(
        f"damaged commitlog record ({topic}/{queue_id} queue offset {queue_offset}): {e.reason}",
        path=e.path,
        offset=e.offset,
    )


def unit_store_timestamp(
    commitlog: CommitLog,
    cq: ConsumeQueue,
    units: np.ndarray,
    logical: int,
    *,
    topic: str,
    queue_id: int,
    floor: int,
    tail: int,
) -> int:
    """STORETIMESTAMP (ms) of the record one unit (``units``, one row) points at, the unit
    checked as :func:`read_units` does but without the body CRC (only the header is used).

    Scalar (one record decoded in Python, ~20x cheaper than a one-row :func:`read_units`):
    ``offset_for_timestamp``'s binary search calls it once per step.
    """
    off, size = units["offset"][:1].astype(np.int64), units["size"][:1].astype(np.int64)
    try:
        check_bounds(off, size, floor, tail, commitlog.segment_size)
        return _store_timestamp(commitlog, int(off[0]), int(size[0]), topic, queue_id, logical, tail)
    except BadRecordError as e:
        deleted = deleted_error(commitlog, cq, units[:1], np.array([logical], np.int64), topic, queue_id, floor)
        raise (deleted or _public_error(e, cq, topic, queue_id, logical, int(off[0]))) from None


def _store_timestamp(
    commitlog: CommitLog, off: int, size: int, topic: str, queue_id: int, logical: int, tail: int
) -> int:
    def bad(reason: str, unit: bool = True) -> BadRecordError:
        return BadRecordError(reason, row=0, offset=off, against_unit=unit, path=str(seg.path) if seg else None)

    seg = commitlog.segments.for_offset(off)
    if seg is None:
        raise bad("no commitlog segment holds its record")
    with pinned(seg) as held:  # a read in progress: retention leaves the file alone
        if not held:
            raise bad("its commitlog segment was deleted")
        total, magic = struct.unpack(">ii", seg.read(off - seg.start, 8))  # inside: checked by check_bounds
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise bad(f"no record there: {not_a_record(magic, total)}")
    if total != size:
        raise bad(f"the record there has TOTALSIZE {total}, the unit says {size}")
    found = commitlog.record_at(off, tail)
    if found is None or found.record is None:
        raise bad(found.reason if found is not None and found.reason else "undecodable record", unit=False)
    rec = found.record
    if topic.startswith(LMQ_PREFIX):
        check_lmq_units(commitlog, np.array([off]), np.array([size]), np.array([logical]), topic, queue_id, tail)
        return rec.store_timestamp
    if rec.queue_id != queue_id:
        raise bad(f"the record there is of queue {rec.queue_id}, not {queue_id}")
    if rec.queue_offset != logical:
        raise bad(f"the record there has queue offset {rec.queue_offset}")
    if rec.topic != topic:
        raise bad(f"the record there is of topic {rec.topic!r}")
    return rec.store_timestamp


__all__ = [
    "read_units",
    "read_unit_columns",
    "read_unit_records",
    "read_unit_stored",
    "check_bounds",
    "unit_store_timestamp",
    "deleted_error",
    "check_lmq_units",
]
