"""One read of a window of a queue: RocketMQ's ``getMessage`` (``DefaultMessageStore``, 4.9.8),
answered as the message table or as the stored records byte-exact.

Every read of messages by queue position for a consumer goes through :func:`read_window`:
``get_messages`` (the store's ``getMessage``), the Spark source's tasks, and the network
side's pull to come. The rules, each RocketMQ's unless said:

| case | status | next offset |
|---|---|---|
| no such queue | ``NO_MATCHED_LOGIC_QUEUE`` | 0 |
| the queue is empty (max offset 0) | ``NO_MESSAGE_IN_QUEUE`` | 0 |
| offset < min offset | ``OFFSET_TOO_SMALL`` | min offset |
| offset == max offset | ``OFFSET_OVERFLOW_ONE`` | offset |
| offset > max offset | ``OFFSET_OVERFLOW_BADLY`` | max offset |
| the consume-queue file holding offset went (retention) | ``OFFSET_FOUND_NULL`` | the queue's min offset now (1) |
| a message found | ``FOUND`` | offset + units scanned |
| none found, a matching unit's record deleted (or a filler) | ``MESSAGE_WAS_REMOVING`` | offset + units scanned |
| none found, every unit filtered out | ``NO_MATCHED_MESSAGE`` | offset + units scanned |

(1) RocketMQ answers the first offset of the next consume-queue file; a consumer that goes
there gets ``OFFSET_TOO_SMALL`` and then the min offset, where this read sends it at once.
A consume-queue file missing *inside* the queue (the min offset is at or below ``offset``)
is damage: :class:`rmqlog.errors.CorruptStoreError` naming the folder.

The scan: at most ``max(800, max_count)`` units (RocketMQ's ``max(16000 bytes, maxMsgNums
units)``), never past the max offset, ``until`` or the end of the consume-queue file holding
``offset`` (a RocketMQ pull never crosses one). Units are filtered on their tag hash; before
each unit, RocketMQ's ``isTheBatchFull``: once a message is taken, the batch is full when
``max_count`` are taken or when the unit's size would carry the bytes taken past
``max_bytes`` (whatever the unit is: a filtered-out unit ends the batch too). So the first
matching message is always returned, however large. The scan stops at the first such unit:
that is what "units scanned" counts. All of it is numpy over the window's units.

Then the messages taken are read and checked (:mod:`rmqlog.queue.checked_read`): decoded into
the message table, or gathered as stored (:class:`rmqlog.results.StoredRecords`, one gather
per commitlog segment). Both then keep only the exact tags asked for (a tag hash can
collide), so the stored records decode to exactly the table. Stored records without a tag
filter (a broker's pull) take the fast form first: checked on their raw bytes, then copied
whole (:func:`rmqlog.queue.checked_read.read_unit_stored`); whatever it declines goes the general
way, which raises the typed error, so both give the same bytes and the same errors. A window of
at most :data:`rmqlog.access.small_window.SMALL_WINDOW` such units (a pull of 32) takes the direct
path of :mod:`rmqlog.access.small_window` first: the same steps unit by unit, no fixed cost of
numpy and Arrow calls; anything it does not take comes here.

Per unit, the limits are ``max_count``/``max_bytes``, or with ``disk``
(:class:`rmqlog.results.DiskLimits`, a broker's pull) RocketMQ's on-disk pair for the units
whose records start more than ``disk.memory`` bytes behind the published tail.

The retention race, handled here once: the read is planned against the commitlog's first
offset when the bounds were taken (no second listing of the commitlog's folder). A record
whose segment retention deleted before the read reached it cannot be read; the read then
fails with :class:`rmqlog.errors.MessagesDeletedError` and is planned again against the
first offset now: the units that point at or past the first offset of the bounds but below
it now are skipped, as RocketMQ skips them, and reported in ``removed`` (the Spark source
turns them into its data-loss policy). Each retry is against a higher first offset: it
ends. (A segment this process still had mapped keeps its bytes: its records are read.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptStoreError, MessagesDeletedError
from ..hashing import java_string_hash
from ..log.decode import RecordColumns, concat_tables, empty_message_table, message_table
from ..log.properties import PROPERTY_TAGS, ParsedProperties
from ..queue.checked_read import read_unit_columns, read_unit_records, read_unit_stored, read_units
from ..queue.consume_queue import CQ_UNIT, FILLER_SIZE, ConsumeQueue
from ..results import DiskLimits, GetMessageResult, GetMessageStatus, StoredRecords
from .small_window import SMALL_WINDOW, read_small
from .window_request import WindowRequest

if TYPE_CHECKING:
    from ..log.commitlog import CommitLog
    from ..parts import StoreParts

_T = TypeVar("_T")

#: Units a filtered read scans at least (RocketMQ: ``max(16000, maxMsgNums * 20)`` bytes of units).
SCAN_UNITS = 800


class Reader(Protocol):
    """What a window read needs of :class:`rmqlog.access.reader.QueueReader` (which imports this module)."""

    parts: StoreParts

    def queue_exists(self, topic: str, queue_id: int) -> bool: ...
    def read_bounds(self, cq: ConsumeQueue) -> tuple[int, int, int]: ...
    def read_plan(self, cq: ConsumeQueue) -> tuple[int, int, int, int]: ...
    def check_crc(self, check_crc: object) -> bool: ...


def read_window(reader: Reader, req: WindowRequest) -> GetMessageResult:
    """The window ``req`` asks for (see the module docstring): the message table or, with
    ``req.raw``, the stored records. A damaged unit or record raises
    :class:`rmqlog.errors.CorruptQueueError` / :class:`rmqlog.errors.CorruptRecordError`."""
    plan = _plan(reader, req)
    if isinstance(plan, GetMessageResult):
        return plan
    units = _first_units(reader.parts.commitlog, plan, req)
    if isinstance(units, GetMessageResult):
        return units
    if not len(units):  # the file holding ``offset`` is not there
        return _file_gone(reader, plan, req)
    low = plan.floor  # the first plan: nothing deleted since the bounds (no second listing of the folder)
    while True:
        try:
            scan = _scan(plan, req, units, low)
            if scan is None:  # the first units did not decide it: the whole window
                units, plan.whole = plan.cq.read(req.offset, plan.stop - req.offset), True
                continue
            if not scan.n_taken:
                return _nothing_taken(plan, req, scan)
            return _taken(plan, req, units, scan)
        except MessagesDeletedError:  # retention overtook the record read: plan again against the new first offset
            low = plan.commitlog.min_offset()


@dataclass
class _Plan:
    """Where a window read stands once its queue's bounds are taken: ``lo``/``hi`` (its bounds),
    ``floor`` (the commitlog's first offset they were taken against), ``tail`` (the published
    tail read after them: every unit below ``hi`` points below it); the scan ends at ``stop``;
    ``first_look`` units are read first unless ``whole`` (every unit up to ``stop``)."""

    commitlog: CommitLog
    cq: ConsumeQueue
    lo: int
    hi: int
    floor: int
    tail: int
    stop: int
    first_look: int
    whole: bool


def _empty(
    req: WindowRequest,
    status: GetMessageStatus,
    next_offset: int,
    lo: int = 0,
    hi: int = 0,
    removed: tuple[int, int] | None = None,
) -> GetMessageResult:
    """An answer with no message."""
    empty = StoredRecords.empty() if req.raw else None
    return GetMessageResult(status, next_offset, lo, hi, empty_message_table(req.columns), empty, removed)


def _plan(reader: Reader, req: WindowRequest) -> _Plan | GetMessageResult:
    """The queue's bounds and the scan's extent; RocketMQ's answer when there is no such queue
    or the offset lies outside the bounds."""
    if req.queue_id < 0 or not reader.queue_exists(req.topic, req.queue_id):
        return _empty(req, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0)
    cq = reader.parts.consume_queue(req.topic, req.queue_id)
    lo, hi, floor, tail = reader.read_plan(cq)
    offset = req.offset
    early = status_outside(offset, lo, hi)
    if early is not None:
        return _empty(req, early[0], early[1], lo, hi)
    per = cq.units_per_segment
    file_end = offset - offset % per + per
    disk_count = req.disk.max_count if req.disk is not None else 0
    scan = max(SCAN_UNITS, req.max_count, disk_count)
    stop = min(hi, offset + scan, file_end, req.until if req.until is not None else hi)
    # Without a tag filter the batch is decided within its largest count of units, unless
    # fillers or deleted records are among them: those units first, the whole scan only then.
    first_look = max(req.max_count, disk_count)
    whole = req.wanted is not None or req.sql92 is not None or stop - offset <= first_look
    return _Plan(reader.parts.commitlog, cq, lo, hi, floor, tail, stop, first_look, whole)


def _first_units(commitlog: CommitLog, plan: _Plan, req: WindowRequest) -> np.ndarray | GetMessageResult:
    """The units to scan first; a small window's answer when its direct path gives one (else
    the general read takes the same units, bounds and tail)."""
    count = plan.stop - req.offset if plan.whole else plan.first_look
    if not (req.raw and req.wanted is None and req.sql92 is None and count <= SMALL_WINDOW):
        return plan.cq.read(req.offset, count)
    stored = plan.cq.read_stored(req.offset, count)
    if stored is None:
        return np.zeros(0, CQ_UNIT)
    direct = read_small(commitlog, stored, req, lo=plan.lo, hi=plan.hi, floor=plan.floor, tail=plan.tail)
    return direct if direct is not None else np.frombuffer(stored, CQ_UNIT)


def _file_gone(reader: Reader, plan: _Plan, req: WindowRequest) -> GetMessageResult:
    """The consume-queue file holding the offset went (retention): the queue's first offset
    now; a file missing inside the queue is damage."""
    now_lo = reader.read_bounds(plan.cq)[0]
    if now_lo <= req.offset:
        raise CorruptStoreError(
            f"consume-queue segment holding queue offset {req.offset} is missing", path=str(plan.cq.directory)
        )
    return _empty(req, GetMessageStatus.OFFSET_FOUND_NULL, now_lo, plan.lo, plan.hi, (req.offset, now_lo))


@dataclass
class _Scan:
    """What the scan of the units decided: ``taken`` among the ``scanned`` first units (of
    which ``n_taken``), ``real`` (not fillers), ``removed`` (records deleted since the bounds:
    skipped, reported), ``chunks`` (the records a SQL92 filter read)."""

    taken: np.ndarray
    scanned: int
    n_taken: int
    real: np.ndarray
    removed: np.ndarray | None
    chunks: list[_Chunk]

    def lost(self, offset: int) -> tuple[int, int] | None:
        """The queue offsets of the removed units scanned (first, last + 1), ``None`` if none."""
        gone = np.flatnonzero(self.removed[: self.scanned]) if self.removed is not None else np.zeros(0, np.int64)
        return (offset + int(gone[0]), offset + int(gone[-1]) + 1) if len(gone) else None


def _scan(plan: _Plan, req: WindowRequest, units: np.ndarray, low: int) -> _Scan | None:
    """The units taken under the tag filter, the limits and the SQL92 filter (records at or past
    ``plan.floor`` but below ``low``, the first offset now, are skipped); ``None`` when the
    first units read did not decide it."""
    wanted = req.wanted
    codes = np.array([java_string_hash(t) for t in wanted], np.int64) if wanted is not None else None
    off, size = units["offset"].astype(np.int64), units["size"].astype(np.int64)
    real = size != FILLER_SIZE
    match = real if codes is None else real & np.isin(units["tagsCode"].astype(np.int64), codes)
    count_limit, bytes_limit = _limits(off, plan.tail, req.max_count, req.max_bytes, req.disk)
    # records at or past ``floor`` but below the first offset now: deleted since the bounds
    # were taken (a unit below ``floor`` is damage, and its read says so)
    removed = match & (off >= plan.floor) & (off < low) if low > plan.floor else None
    candidate = match if removed is None else match & ~removed
    chunks: list[_Chunk] = []
    if req.sql92 is None:
        taken, scanned = batch_taken(candidate, size, real, count_limit, bytes_limit)
    else:
        taken, scanned = _filtered_batch(plan, req, units, candidate, size, real, count_limit, bytes_limit, chunks)
    n_taken = int(np.count_nonzero(taken))
    if not plan.whole and scanned == len(units) and n_taken < scanned:
        return None
    return _Scan(taken, scanned, n_taken, real, removed, chunks)


def _nothing_taken(plan: _Plan, req: WindowRequest, scan: _Scan) -> GetMessageResult:
    """No unit taken: a removed record or a filler among the scanned, else nothing matched."""
    lost = scan.lost(req.offset)
    status = (
        GetMessageStatus.MESSAGE_WAS_REMOVING
        if lost is not None or not scan.real[: scan.scanned].all()
        else GetMessageStatus.NO_MATCHED_MESSAGE
    )
    return _empty(req, status, req.offset + scan.scanned, plan.lo, plan.hi, lost)


def _checked(read: Callable[..., _T], plan: _Plan, req: WindowRequest, units: np.ndarray, logical: np.ndarray) -> _T:
    """One checked read of these units' records (:mod:`rmqlog.queue.checked_read`)."""
    return read(
        plan.commitlog,
        plan.cq,
        units,
        logical,
        topic=req.topic,
        queue_id=req.queue_id,
        floor=plan.floor,
        tail=plan.tail,
        check_crc=req.check_crc,
    )


def _taken(plan: _Plan, req: WindowRequest, units: np.ndarray, scan: _Scan) -> GetMessageResult:
    """The answer of the units taken: their records read and checked, the exact tags kept."""
    offset, scanned, wanted, columns = req.offset, scan.scanned, req.wanted, req.columns
    if scan.n_taken == scanned:  # every unit scanned taken (a pull without a filter): a view, no take
        rows: np.ndarray | slice = slice(0, scanned)
        logical = np.arange(offset, offset + scanned, dtype=np.int64)
    else:
        rows = np.flatnonzero(scan.taken)
        logical = offset + rows.astype(np.int64)
    records: StoredRecords | None = None
    if req.sql92 is not None:
        messages, records = _chunks_taken(scan.chunks, scanned, req.raw, columns)
    elif req.raw:
        # no tag filter: the records checked on their own bytes (None: the general read decides)
        records = _checked(read_unit_stored, plan, req, units[rows], logical) if wanted is None else None
        if records is None:
            records = _exact_tags(_checked(read_unit_records, plan, req, units[rows], logical), wanted, logical)
        messages = empty_message_table(columns)
    elif columns is None:
        messages = _with_tags(_checked(read_units, plan, req, units[rows], logical), wanted)
    else:  # the same checked read, only the columns asked for made (and the tags to filter on)
        made = columns if wanted is None or "tags" in columns else (*columns, "tags")
        got = _checked(read_unit_columns, plan, req, units[rows], logical)
        messages = _with_tags(concat_tables([message_table(c, made) for c in got], made), wanted)
        if made is not columns:
            messages = messages.select(list(columns))
    found = len(records) if records is not None else messages.num_rows
    status = GetMessageStatus.FOUND if found else GetMessageStatus.NO_MATCHED_MESSAGE
    return GetMessageResult(status, offset + scanned, plan.lo, plan.hi, messages, records, scan.lost(offset))


def _with_tags(messages: pa.Table, wanted: set[str] | None) -> pa.Table:
    """The messages whose tags are ``wanted`` exactly (a tag hash can collide); all for ``None``."""
    if wanted is None:
        return messages
    return messages.filter(pc.fill_null(pc.is_in(messages["tags"], pa.array(sorted(wanted))), False))


#: A chunk of units read to evaluate a SQL92 filter: (their rows in the window, the records
#: read: (columns, stored bytes or None) per commitlog segment, which of them match).
_Chunk = tuple[np.ndarray, list[tuple[RecordColumns, pa.LargeBinaryArray | None]], np.ndarray]


def _filtered_batch(
    plan: _Plan,
    req: WindowRequest,
    units: np.ndarray,
    candidate: np.ndarray,
    size: np.ndarray,
    real: np.ndarray,
    count_limit: int | np.ndarray,
    bytes_limit: int | np.ndarray | None,
    chunks: list[_Chunk],
) -> tuple[np.ndarray, int]:
    """RocketMQ's scan with a SQL92 filter: a unit is taken when its record's properties match
    (its record read, as Java's ``isMatchedByCommitLog`` reads it), under ``isTheBatchFull``.
    The records are read and evaluated in at most two chunks: twice the count limit first (a
    filter that matches most messages decides the batch there), else the rest of the window
    (each read has a fixed cost: few reads beat few records). The limits judged before a unit
    depend only on the units before it (and its own size), so a stop at or before the last
    evaluated unit is final. Each chunk's records are kept in
    ``chunks`` for the answer. Returns (taken among the scanned units, units scanned)."""
    sql92, wanted = req.sql92, req.wanted
    assert sql92 is not None
    match = candidate.copy()  # units not yet evaluated count as candidates
    evaluated = 0
    step = max(64, 2 * int(np.max(count_limit)))
    while True:
        upto = min(len(units), evaluated + step)
        rows = evaluated + np.flatnonzero(candidate[evaluated:upto])
        if len(rows):
            logical = req.offset + rows.astype(np.int64)
            got: list[tuple[RecordColumns, pa.LargeBinaryArray | None]]
            if req.raw:
                got = list(_checked(read_unit_records, plan, req, units[rows], logical))
            else:
                got = [(c, None) for c in _checked(read_unit_columns, plan, req, units[rows], logical)]
            props = pa.concat_arrays([c.properties for c, _ in got]) if len(got) > 1 else got[0][0].properties
            ok = sql92.mask_properties(props)
            if wanted is not None:  # a tag filter too: the exact tags (a tag hash can collide)
                tags = ParsedProperties(props).column(PROPERTY_TAGS)
                ok &= np.asarray(pc.fill_null(pc.is_in(tags, pa.array(sorted(wanted), pa.string())), False))
            match[rows] = ok
            chunks.append((rows, got, ok))
        evaluated = upto
        taken, scanned = batch_taken(match, size, real, count_limit, bytes_limit)
        if scanned <= evaluated:
            return taken, scanned
        step = len(units)  # the first chunk did not decide it: the rest of the window in one read


def _chunks_taken(
    chunks: list[_Chunk],
    scanned: int,
    raw: bool,
    columns: tuple[str, ...] | None = None,
) -> tuple[pa.Table, StoredRecords | None]:
    """The message table (or with ``raw`` the stored records) of the matching units before
    ``scanned``, from the records :func:`_filtered_batch` read (each segment's part cut to
    its matches before anything is joined: the non-matching records are never copied again)."""
    tables: list[pa.Table] = []
    arrays: list[pa.Array] = []
    offsets: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    queue_offsets: list[np.ndarray] = []
    for rows, got, ok in chunks:
        keep = ok & (rows < scanned)
        if not keep.any():
            continue
        start = 0
        for cols, stored in got:
            k = keep[start : start + len(cols)]
            start += len(cols)
            if not k.any():
                continue
            whole = bool(k.all())
            if not raw:
                table = message_table(cols, columns)
                tables.append(table if whole else table.filter(pa.array(k)))
                continue
            assert stored is not None
            arrays.append(stored if whole else stored.filter(pa.array(k)))
            offsets.append(cols.offsets if whole else cols.offsets[k])
            sizes.append(cols.header["totalSize"] if whole else cols.header["totalSize"][k])
            queue_offsets.append(cols.header["queueOffset"] if whole else cols.header["queueOffset"][k])
    if not raw:
        return concat_tables(tables, columns), None
    if not arrays:
        return empty_message_table(), StoredRecords.empty()
    # a gather's, a filter's and a concatenation's value offsets start at 0: ``data`` is the records
    array = arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
    return empty_message_table(), StoredRecords(
        array,
        np.concatenate(offsets).astype(np.int64),
        np.concatenate(sizes).astype(np.int64),
        np.concatenate(queue_offsets).astype(np.int64),
    )


def _limits(
    off: np.ndarray,
    tail: int,
    max_count: int,
    max_bytes: int | None,
    disk: DiskLimits | None,
) -> tuple[int | np.ndarray, int | np.ndarray | None]:
    """The count and byte limit each unit is judged by: the read's own, or for units whose
    records lie on disk (more than ``disk.memory`` bytes behind ``tail``) ``disk``'s."""
    if disk is None:
        return max_count, max_bytes
    in_disk = tail - off > disk.memory
    if not in_disk.any():
        return max_count, max_bytes
    counts = np.where(in_disk, disk.max_count, max_count)
    nbytes = np.where(in_disk, disk.max_bytes, np.iinfo(np.int64).max if max_bytes is None else max_bytes)
    return counts, nbytes


def batch_taken(
    candidate: np.ndarray,
    size: np.ndarray,
    real: np.ndarray,
    max_count: int | np.ndarray,
    max_bytes: int | np.ndarray | None,
) -> tuple[np.ndarray, int]:
    """(which of the ``candidate`` units are taken, units scanned) under RocketMQ's
    ``isTheBatchFull``, checked before every unit: once one is taken, the batch is full at the
    first unit when ``max_count`` are taken or when its ``size`` would carry the bytes taken
    past ``max_bytes``. Fillers (not ``real``) are no record: their size is no size. The
    limits are scalars or one per unit (RocketMQ judges each unit by where its record lies)."""
    n = len(candidate)
    if isinstance(max_count, int) and not isinstance(max_bytes, np.ndarray) and candidate.all():
        # every unit a record to take (a pull without a filter): the first ``max_count``, cut
        # at the first unit after the first whose bytes so far pass ``max_bytes``
        scanned = min(n, max_count)
        if max_bytes is not None and scanned > 1:
            over = np.flatnonzero(np.cumsum(size[:scanned]) > max_bytes)
            over = over[over >= 1]
            if len(over):
                scanned = int(over[0])
        return candidate[:scanned], scanned
    before = np.cumsum(candidate) - candidate  # taken before each unit, had nothing stopped
    full = before >= max_count
    if max_bytes is not None:
        sizes = np.where(candidate, size, 0)
        full |= (before >= 1) & real & (np.cumsum(sizes) - sizes + size > max_bytes)
    stops = np.flatnonzero(full)
    scanned = int(stops[0]) if len(stops) else len(candidate)
    return candidate[:scanned], scanned


def _exact_tags(
    parts: list[tuple[RecordColumns, pa.LargeBinaryArray]], wanted: set[str] | None, logical: np.ndarray
) -> StoredRecords:
    """One :class:`StoredRecords` of the per-segment reads, keeping the exact tags ``wanted``;
    ``logical``: the units' queue offsets (a light message queue's differ from its records' own)."""
    cols = [c for c, _ in parts]
    # a gather's and a concatenation's value offsets start at 0: ``data`` is the records
    array = parts[0][1] if len(parts) == 1 else pa.concat_arrays([a for _, a in parts])
    commit_log_offsets = np.concatenate([c.offsets for c in cols]).astype(np.int64)
    sizes = np.concatenate([c.header["totalSize"] for c in cols]).astype(np.int64)
    queue_offsets = np.asarray(logical, np.int64)
    if wanted is not None:
        tags = pa.concat_arrays([ParsedProperties(c.properties).column(PROPERTY_TAGS) for c in cols])
        keep = pc.fill_null(pc.is_in(tags, pa.array(sorted(wanted), pa.string())), False)
        if not pc.all(keep).as_py():  # a hash collision (rare): the kept ones copied again
            mask = keep.to_numpy(zero_copy_only=False)
            array = pa.concat_arrays([array.filter(keep)])
            commit_log_offsets, sizes, queue_offsets = commit_log_offsets[mask], sizes[mask], queue_offsets[mask]
    return StoredRecords(array, commit_log_offsets, sizes, queue_offsets)


def status_outside(offset: int, lo: int, hi: int) -> tuple[GetMessageStatus, int] | None:
    """RocketMQ's status and next offset for a read offset outside ``[lo, hi)``, else ``None``."""
    if hi == 0:
        return GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0
    if offset < lo:
        return GetMessageStatus.OFFSET_TOO_SMALL, lo
    if offset == hi:
        return GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
    if offset > hi:
        return GetMessageStatus.OFFSET_OVERFLOW_BADLY, hi  # RocketMQ 4.9.4 on (before: 0 when min was 0)
    return None
