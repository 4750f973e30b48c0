"""One read of a window of a queue: RocketMQ's ``getMessage`` (``DefaultMessageStore``, 4.9.8),
answered as the message table or as the stored records byte-exact.

Every read of messages by queue position for a consumer goes through :func:`read_window`:
``get_messages`` (the store's ``getMessage``), the Spark source's tasks, and the network
side's pull to come. The rules, each RocketMQ's unless said:

(case: status; next offset)
- no such queue: ``NO_MATCHED_LOGIC_QUEUE``; 0
- the queue is empty (max offset 0): ``NO_MESSAGE_IN_QUEUE``; 0
- offset < min offset: ``OFFSET_TOO_SMALL``; min offset
- offset == max offset: ``OFFSET_OVERFLOW_ONE``; offset
- offset > max offset: ``OFFSET_OVERFLOW_BADLY``; max offset
- the consume-queue file holding offset went meanwhile (retention): ``OFFSET_FOUND_NULL``; the queue's min offset now
  (1)
- a message found: ``FOUND``; offset + units scanned
- none found, a matching unit's record deleted meanwhile (or a filler): ``MESSAGE_WAS_REMOVING``; offset + units scanned
- none found, every unit filtered out: ``NO_MATCHED_MESSAGE``; offset + units scanned

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

from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..arguments import bool_arg, int_arg, optional_int_arg, text_arg
from ..errors import CorruptStoreError, InvalidArgumentError, MessagesDeletedError
from ..filter.vectorized import Sql92Filter
from ..hashing import java_string_hash
from ..log.decode import RecordColumns, concat_tables, empty_message_table, message_table
from ..log.properties import PROPERTY_TAGS, ParsedProperties
from ..paths import validate_topic
from ..queue.checked_read import read_unit_columns, read_unit_records, read_unit_stored, read_units
from ..queue.consume_queue import CQ_UNIT, FILLER_SIZE, ConsumeQueue
from ..results import DiskLimits, GetMessageResult, GetMessageStatus, StoredRecords
from ..schema import MESSAGE_SCHEMA
from .small_window import SMALL_WINDOW, read_small

if TYPE_CHECKING:
    from ..parts import StoreParts

#: Units a filtered read scans at least (RocketMQ: ``max(16000, maxMsgNums * 20)`` bytes of units).
SCAN_UNITS = 800


class Reader(Protocol):
    """What a window read needs of :class:`rmqlog.access.reader.QueueReader` (which imports this module)."""

    parts: StoreParts

    def queue_exists(self, topic: str, queue_id: int) -> bool: ...
    def read_bounds(self, cq: ConsumeQueue) -> tuple[int, int, int]: ...
    def read_plan(self, cq: ConsumeQueue) -> tuple[int, int, int, int]: ...
    def check_crc(self, check_crc: object) -> bool: ...


def parse_tag_filter(tags: object) -> set[str] | None:
    """``"A || B"`` -> {"A", "B"}; ``"*"``, ``""`` or ``None`` -> None (everything). Anything
    but a string that can be UTF-8 raises :class:`rmqlog.errors.InvalidArgumentError`."""
    if tags is None:
        return None
    text = text_arg("tags", tags, empty=True)
    parts = {t.strip() for t in text.split("||")}
    parts.discard("")
    if not parts or "*" in parts:
        return None
    return parts


def columns_arg(columns: object) -> tuple[str, ...] | None:
    """``columns`` of a read: ``None`` (all), or names of the message table's columns, each once
    (a list or tuple of strings); else :class:`rmqlog.errors.InvalidArgumentError` naming it."""
    if columns is None:
        return None
    if not isinstance(columns, list | tuple) or not columns or not all(isinstance(c, str) for c in columns):
        raise InvalidArgumentError(f"columns must be None or a non-empty list of column names, got {columns!r}")
    unknown = [c for c in columns if c not in MESSAGE_SCHEMA.names]
    if unknown:
        raise InvalidArgumentError(
            f"columns: {unknown[0]!r} is not a column of the message table ({', '.join(MESSAGE_SCHEMA.names)})"
        )
    if len(set(columns)) != len(columns):
        raise InvalidArgumentError(f"columns: {next(c for c in columns if columns.count(c) > 1)!r} is named twice")
    return tuple(columns)


def read_window(
    reader: Reader,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    max_count: int,
    max_bytes: int | None,
    tags: str | None,
    until: int | None,
    check_crc: bool | None,
    raw: bool,
    disk: DiskLimits | None = None,
    sql92: Sql92Filter | None = None,
    columns: tuple[str, ...] | None = None,
) -> GetMessageResult:
    """The window of ``topic``/``queue_id`` from ``offset`` (see the module docstring): at most
    ``max_count`` messages and ``max_bytes`` bytes of records (``None``: no limit), the units
    before ``until`` only (``None``: to the queue's end), as the message table or, with
    ``raw``, as the stored records; with ``disk`` (:class:`rmqlog.results.DiskLimits`), units
    whose records lie "on disk" are judged by its limits instead; with ``sql92``
    (:class:`rmqlog.filter.Sql92Filter`) a unit is taken only when its record's properties
    match (RocketMQ's ``isMatchedByCommitLog``), see the module docstring. ``columns``: only
    these columns of the message table are made, in that order (``None``: all). Arguments are checked first:
    :class:`rmqlog.errors.InvalidArgumentError` / ``InvalidTopicError`` naming the argument.
    A damaged unit or record raises :class:`rmqlog.errors.CorruptQueueError` /
    :class:`rmqlog.errors.CorruptRecordError`."""
    validate_topic(topic)
    queue_id, offset = int_arg("queue_id", queue_id), int_arg("offset", offset)
    max_count = int_arg("max_count", max_count)
    if max_count <= 0:  # RocketMQ answers nothing useful either; say so instead
        raise InvalidArgumentError(f"max_count must be positive, got {max_count}")
    max_bytes = optional_int_arg("max_bytes", max_bytes, 1)
    until = optional_int_arg("until", until)
    if until is not None and until <= offset:
        raise InvalidArgumentError(f"until ({until}) must be past offset ({offset})")
    wanted, check_crc, raw = parse_tag_filter(tags), reader.check_crc(check_crc), bool_arg("raw", raw)
    if disk is not None:
        _check_disk_limits(disk)
    if sql92 is not None and not isinstance(sql92, Sql92Filter):
        raise InvalidArgumentError(
            f"sql92 must be a compiled Sql92Filter (rmqlog.filter.compile_filter) or None, got {type(sql92).__name__}"
        )
    columns = columns_arg(columns)

    def result(status: GetMessageStatus, next_offset: int, lo: int = 0, hi: int = 0, **kw: object) -> GetMessageResult:
        empty = StoredRecords.empty() if raw else None
        return GetMessageResult(status, next_offset, lo, hi, empty_message_table(columns), empty, **kw)  # type: ignore[arg-type]

    if queue_id < 0 or not reader.queue_exists(topic, queue_id):
        return result(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0)
    cq = reader.parts.consume_queue(topic, queue_id)
    lo, hi, floor, tail = reader.read_plan(cq)  # (tail: read after the bounds, every unit below hi points below it)
    early = status_outside(offset, lo, hi)
    if early is not None:
        return result(early[0], early[1], lo, hi)
    per = cq.units_per_segment
    file_end = offset - offset % per + per
    scan = max(SCAN_UNITS, max_count, disk.max_count if disk is not None else 0)
    stop = min(hi, offset + scan, file_end, until if until is not None else hi)
    # Without a tag filter the batch is decided within its largest count of units, unless
    # fillers or deleted records are among them: those units first, the whole scan only then.
    first_look = max(max_count, disk.max_count if disk is not None else 0)
    whole = wanted is not None or sql92 is not None or stop - offset <= first_look
    commitlog = reader.parts.commitlog
    count = stop - offset if whole else first_look
    if raw and wanted is None and sql92 is None and count <= SMALL_WINDOW:
        # a small window: the direct path, else the general read from the same units, bounds and tail
        stored = cq.read_stored(offset, count)
        direct = (
            None
            if stored is None
            else read_small(
                commitlog,
                stored,
                topic,
                queue_id,
                offset,
                max_count=max_count,
                max_bytes=max_bytes,
                disk=disk,
                lo=lo,
                hi=hi,
                floor=floor,
                tail=tail,
                check_crc=check_crc,
                columns=columns,
            )
        )
        if direct is not None:
            return direct
        units = np.frombuffer(stored, CQ_UNIT) if stored is not None else np.zeros(0, CQ_UNIT)
    else:
        units = cq.read(offset, count)
    if not len(units):  # the file holding ``offset`` is not there
        now_lo = reader.read_bounds(cq)[0]
        if now_lo <= offset:
            raise CorruptStoreError(
                f"consume-queue segment holding queue offset {offset} is missing", path=str(cq.directory)
            )
        return result(GetMessageStatus.OFFSET_FOUND_NULL, now_lo, lo, hi, removed=(offset, now_lo))
    codes = np.array([java_string_hash(t) for t in wanted], np.int64) if wanted is not None else None
    low = floor  # the first plan: nothing deleted since the bounds (no second listing of the folder)
    while True:
        off, size = units["offset"].astype(np.int64), units["size"].astype(np.int64)
        real = size != FILLER_SIZE
        match = real if codes is None else real & np.isin(units["tagsCode"].astype(np.int64), codes)
        count_limit, bytes_limit = _limits(off, tail, max_count, max_bytes, disk)
        # records at or past ``floor`` but below the first offset now: deleted since the bounds
        # were taken (a unit below ``floor`` is damage, and its read says so)
        removed = match & (off >= floor) & (off < low) if low > floor else None
        candidate = match if removed is None else match & ~removed
        args = dict(topic=topic, queue_id=queue_id, floor=floor, tail=tail, check_crc=check_crc)
        chunks: list[_Chunk] = []
        if sql92 is None:
            taken, scanned = batch_taken(candidate, size, real, count_limit, bytes_limit)
        else:
            try:
                taken, scanned = _filtered_batch(
                    commitlog,
                    cq,
                    units,
                    offset,
                    candidate,
                    size,
                    real,
                    count_limit,
                    bytes_limit,
                    sql92,
                    wanted,
                    raw,
                    args,
                    chunks,
                )
            except MessagesDeletedError:  # retention overtook the record read: plan again
                low = commitlog.min_offset()
                continue
        n_taken = int(np.count_nonzero(taken))
        if not whole and scanned == len(units) and n_taken < scanned:  # the first units did not decide it
            units, whole = cq.read(offset, stop - offset), True
            continue
        gone = np.flatnonzero(removed[:scanned]) if removed is not None else np.zeros(0, np.int64)
        lost = (offset + int(gone[0]), offset + int(gone[-1]) + 1) if len(gone) else None
        if not n_taken:
            status = (
                GetMessageStatus.MESSAGE_WAS_REMOVING
                if len(gone) or not real[:scanned].all()
                else GetMessageStatus.NO_MATCHED_MESSAGE
            )
            return result(status, offset + scanned, lo, hi, removed=lost)
        if n_taken == scanned:  # every unit scanned taken (a pull without a filter): a view, no take
            rows: np.ndarray | slice = slice(0, scanned)
            logical = np.arange(offset, offset + scanned, dtype=np.int64)
        else:
            rows = np.flatnonzero(taken)
            logical = offset + rows.astype(np.int64)
        try:
            if sql92 is not None:
                messages, records = _chunks_taken(chunks, scanned, raw, columns)
            elif raw:
                # no tag filter: the records checked on their own bytes (None: the general read decides)
                records = read_unit_stored(commitlog, cq, units[rows], logical, **args) if wanted is None else None  # type: ignore[arg-type]
                if records is None:
                    records = _exact_tags(
                        read_unit_records(commitlog, cq, units[rows], logical, **args),  # type: ignore[arg-type]
                        wanted,
                        logical,
                    )
                messages = empty_message_table(columns)
            elif columns is None:
                messages = read_units(commitlog, cq, units[rows], logical, **args)  # type: ignore[arg-type]
                records = None
                if wanted is not None:
                    messages = messages.filter(
                        pc.fill_null(pc.is_in(messages["tags"], pa.array(sorted(wanted))), False)
                    )
            else:  # the same checked read, only the columns asked for made (and the tags to filter on)
                made = columns if wanted is None or "tags" in columns else (*columns, "tags")
                got = read_unit_columns(commitlog, cq, units[rows], logical, **args)  # type: ignore[arg-type]
                messages = concat_tables([message_table(c, made) for c in got], made)
                records = None
                if wanted is not None:
                    messages = messages.filter(
                        pc.fill_null(pc.is_in(messages["tags"], pa.array(sorted(wanted))), False)
                    )
                    if made is not columns:
                        messages = messages.select(list(columns))
        except MessagesDeletedError:  # retention overtook the record read: plan again against the new first offset
            low = commitlog.min_offset()
            continue
        found = len(records) if records is not None else messages.num_rows
        status = GetMessageStatus.FOUND if found else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, offset + scanned, lo, hi, messages, records, lost)


#: A chunk of units read to evaluate a SQL92 filter: (their rows in the window, the records
#: read: (columns, stored bytes or None) per commitlog segment, which of them match).
_Chunk = tuple[np.ndarray, list[tuple[RecordColumns, pa.LargeBinaryArray | None]], np.ndarray]


def _filtered_batch(
    commitlog: object,
    cq: ConsumeQueue,
    units: np.ndarray,
    offset: int,
    candidate: np.ndarray,
    size: np.ndarray,
    real: np.ndarray,
    count_limit: int | np.ndarray,
    bytes_limit: int | np.ndarray | None,
    sql92: Sql92Filter,
    wanted: set[str] | None,
    raw: bool,
    args: dict[str, object],
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
    match = candidate.copy()  # units not yet evaluated count as candidates
    evaluated = 0
    step = max(64, 2 * int(np.max(count_limit)))
    while True:
        upto = min(len(units), evaluated + step)
        rows = evaluated + np.flatnonzero(candidate[evaluated:upto])
        if len(rows):
            logical = offset + rows.astype(np.int64)
            if raw:
                got = read_unit_records(commitlog, cq, units[rows], logical, **args)  # type: ignore[arg-type]
            else:
                got = [(c, None) for c in read_unit_columns(commitlog, cq, units[rows], logical, **args)]  # type: ignore[arg-type]
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


def _check_disk_limits(disk: object) -> None:
    if not isinstance(disk, DiskLimits):
        raise InvalidArgumentError(f"disk must be a DiskLimits or None, got {type(disk).__name__}")
    int_arg("disk.memory", disk.memory, 0)
    int_arg("disk.max_count", disk.max_count, 1)
    int_arg("disk.max_bytes", disk.max_bytes, 1)


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
