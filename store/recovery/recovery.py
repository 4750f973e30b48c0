"""Recovery on open: find where the commitlog really ends, cut everything past it, repair the rest.

Run by the *first opener* of a store (see :mod:`rmqlog.durability.lock_file`), under the append lock,
before anything else reads or writes. RocketMQ's two paths:

- **normal** (no ``abort`` file: the last owner closed cleanly): walk the last 3 commitlog
  segments from their start;
- **abnormal** (``abort`` exists: a process was killed, or the machine lost power): walk from
  the checkpoint's safe point, the newest segment whose first record was stored before
  ``min(physicMsgTimestamp, logicsMsgTimestamp) - 3 s``; re-dispatch every good record from
  there (idempotently: consume-queue units from that point on are cut first).

The walk stops at the first bad record (bad magic, lengths that do not add up, body CRC
mismatch when ``check_crc_on_recover``, the default): the log end seen on disk, ``W``.
Three more positions decide what is kept, the end ``E``:

| position | file | meaning |
|---|---|---|
| ``P`` | ``append.state`` tail | the last published tail (not fsynced: may be stale or empty after a power loss) |
| ``F`` | ``flush.state`` | durable, a published tail, every byte below it synced: acknowledged data |
| ``W`` | the walk | how far whole, valid records reach on disk |

- ``F <= P <= W`` (a kill, or a clean close): ``E = P``. Bytes past ``P`` are a killed
  writer's unpublished batch: never acknowledged, and keeping a part of it would break the
  all-or-nothing batch.
- otherwise, with ``F`` known and ``F <= W`` (the state is missing, unreadable, behind ``F``
  or ahead of the log: a power loss): ``E = F``. What lies past ``F`` was never reported
  flushed, and its batch boundaries are unknown.
- neither file (a store written by RocketMQ): ``E = W``.
- ``W < F``, or (without ``F``) a bad record followed by later segments holding data:
  acknowledged data is damaged. Opening fails with :class:`DataLossError` (offset and segment named) unless the
  caller asked for ``repair``, which keeps ``E = W`` and drops the rest.

Then: bytes past ``E`` are zeroed and later segments deleted; consume-queue units pointing at
or past ``E`` (abnormal path: past the walk's start) are truncated and the dispatch position
is re-derived; the append state is kept when it matches ``E`` and rebuilt from the commitlog
otherwise (the rebuild keeps idempotence markers, which the log carries); ``flush.state`` is
lowered to ``E`` if it was past it, and created (durably, with its name) if there was none.

What the walk counts as a bad record: lengths that do not add up, a TOTALSIZE no record can
have, header values no store writes (:func:`rmqlog.log.record.field_problems`), a QUEUEOFFSET
that breaks its queue's density (:class:`rmqlog.log.scan.QueueDensity`), a body CRC mismatch.

``repair=True`` walks every segment (not the last 3), resizes segments of the wrong size,
cuts at the first bad record even below ``F``, and checks every consume-queue unit against
the walk, as the abnormal path does past its start. On every path the consume queues are
then completed: files missing or of the wrong size are dropped, queues short of the append
state's offsets re-dispatched, everything published dispatched (RocketMQ's broker does at
start-up), and no queue's next offset falls below its units. See ``docs/reliability.md``.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from .. import safe_open
from ..durability.checkpoint import Checkpoint
from ..errors import CorruptStoreError, DataLossError, WrongFileTypeError
from ..index.feed import recover_index
from ..log.decode import RecordColumns, read_columns
from ..log.record import ScanKind, decode_at, is_consumable
from ..log.scan import QueueDensity, SegmentScan, StopReason, scan_segment
from ..retention.leftovers import finish_at_open
from .queue_repair import (
    check_units,
    complete_queues,
    cut_queues,
    dispatch,
    drop_bad_queue_files,
    finish_deletions,
    queues_never_go_back,
)
from .recovery_report import RecoveryReport, Walked

if TYPE_CHECKING:
    from ..log.append_state import AppendState
    from ..log.mapped_file import MappedFile
    from ..parts import StoreParts

log = logging.getLogger(__name__)

#: RocketMQ's recoverNormally walks this many of the newest segments.
NORMAL_RECOVERY_SEGMENTS = 3
_ZERO_CHUNK = 16 << 20
#: Bytes of commitlog checked per step of the walk: bounds memory whatever the segment size.
WALK_CHUNK = 64 << 20


def trusted_checkpoint(parts: StoreParts) -> Checkpoint | None:
    """The checkpoint when it is readable and plausible (no time past both the newest store
    time the append state records and the wall clock), else ``None`` (logged): it is only a
    hint of where a walk may start."""
    try:
        cp = parts.checkpoint_file.read()
    except CorruptStoreError as exc:
        log.warning("%s; walking the commitlog from its first segment", exc)
        return None
    state = parts.state_file.load()
    ceiling = max(state.store_timestamp if state is not None else 0, parts.clock.wall_ms())
    if cp is not None and not cp.plausible(ceiling):
        log.warning(
            "checkpoint %s holds times past the newest record and the clock (%s, limit %d); ignored",
            parts.checkpoint_file.path,
            cp,
            ceiling,
        )
        return None
    return cp


def walk_start(parts: StoreParts, abnormal: bool, repair: bool = False) -> int:
    """Where recovery starts walking (see the module docstring)."""
    starts = parts.commitlog.segments.segment_starts()
    if not starts:
        return 0
    if repair:  # asked to repair: every record is checked, from the oldest
        return starts[0]
    if not abnormal:
        return starts[max(0, len(starts) - NORMAL_RECOVERY_SEGMENTS)]
    cp = trusted_checkpoint(parts)
    if cp is None:
        return starts[0]
    safe = cp.safe_timestamp()
    for start in reversed(starts):
        seg = parts.commitlog.segments.get(start)
        assert seg is not None
        first = decode_at(memoryview(seg.mm), 0, base=start)
        if first.kind is ScanKind.RECORD and first.record is not None and 0 < first.record.store_timestamp <= safe:
            return start
    return starts[0]


def recover(parts: StoreParts, *, abnormal: bool, repair: bool = False) -> RecoveryReport:
    """Recover the store ``parts`` (caller holds the append lock). Raises :class:`DataLossError`."""
    report = RecoveryReport(abnormal=abnormal)
    report.problems += finish_at_open(parts)  # a retention pass cut short: the log starts where it recorded
    cl = parts.commitlog
    _fix_segment_sizes(parts, report, repair)
    starts = cl.segments.segment_starts()
    state = parts.state_file.load()
    flushed = parts.flush_service.state_file.read()
    report.published = state.tail if state is not None else None
    report.flushed = flushed.offset if flushed is not None else None
    if not starts:
        _recover_empty_log(parts, report, state, repair)
        return report
    start = walk_start(parts, abnormal, repair)
    report.walk_start = start
    # ---- the walk: how far whole, valid records reach (W)
    walked = Walked()
    w, bad_seg, bad_detail = _walk(parts, start, walked)
    report.log_end = w
    later_data = [s for s in starts if s > cl.segments.segment_start_for(w) and _has_data(parts, s)]
    end = _acknowledged_end(parts, report, w, bad_seg, bad_detail, later_data, repair)
    state, end = _state_at_end(parts, report, state, end, start, repair)
    report.dropped_bytes = _truncate_commitlog(parts, end)
    # repair: every unit is checked against the walk of the whole log, as after a crash
    checked = abnormal or repair
    _finish(parts, report, state, cut=min(start, end) if checked else end, walked=walked if checked else None)
    return report


def _recover_empty_log(parts: StoreParts, report: RecoveryReport, state: AppendState | None, repair: bool) -> None:
    """A commitlog without a segment: a new store, or one whose every segment is gone (data
    loss when anything was acknowledged: refused, or with ``repair`` started over empty)."""
    cl = parts.commitlog
    # what a lost log would lose: the flushed position when it is known (past it nothing
    # was reported flushed, and a power loss before the first flush loses the segments'
    # names, whatever append.state says, as the walk tolerates a lost unflushed tail); the
    # published tail only for a store without a flush position
    acknowledged = report.flushed if report.flushed is not None else (report.published or 0)
    if report.flushed == 0 and (report.published or 0) > 0:
        log.warning(
            "commitlog %s holds no segment; %d bytes were published but none flushed (a power loss "
            "before the first flush): the log starts over empty",
            cl.segments.directory,
            report.published,
        )
    if acknowledged > 0:  # every segment gone (commitlog/ emptied or deleted): not a new store
        msg = (
            f"commitlog {cl.segments.directory} holds no segment, but {acknowledged} bytes were "
            f"{'flushed' if report.flushed is not None else 'published'}"
        )
        if not repair:
            raise DataLossError(
                msg + "; open with repair=True to start over from an empty log",
                path=str(cl.segments.directory),
                offset=0,
            )
        log.error("repair: %s; the log starts over empty", msg)
        report.problems.append(msg)
    report.end = report.log_end = cl.min_offset()
    if state is None or state.tail != report.end:
        state, report.state_rebuilt = parts.rebuild_state(report.end), True
    _finish(parts, report, state, cut=report.end)


def _acknowledged_end(
    parts: StoreParts,
    report: RecoveryReport,
    w: int,
    bad_seg: MappedFile | None,
    bad_detail: str,
    later_data: list[int],
    repair: bool,
) -> int:
    """The end (E) of the recovered log: the published tail (P) or the flushed position (F)
    when the walk (W) reaches it, else W; damage below what was acknowledged is refused (or
    with ``repair`` cut at W), a torn tail past it is cut."""
    cl = parts.commitlog
    p, f = report.published, report.flushed
    if p is not None and (f or 0) <= p <= w:
        end = p
    elif f is not None and f <= w:
        end = f
    else:
        end = w
    # damage counts only below what was acknowledged: below F when it is known (past F nothing
    # was reported flushed, so a torn tail followed by a half-rolled segment is just cut);
    # without F (a RocketMQ store), a bad record with valid segments after it is not a tail
    damaged = (w < f) if f is not None else bool(bad_seg is not None and later_data)
    if damaged:
        where = (
            bad_seg.path if bad_seg is not None else cl.segments.directory / f"{cl.segments.segment_start_for(w):020d}"
        )
        if not bad_detail:
            bad_detail = "segment missing" if safe_open.kind(where) is None else "no valid record"
        msg = (
            f"commitlog damaged below its flushed/acknowledged data: {bad_detail} "
            f"at offset {w} (segment {where}); flushed up to {f}, later segments {later_data}"
        )
        if not repair:
            raise DataLossError(
                msg + "; open with repair=True to drop everything from there on", path=str(where), offset=w
            )
        log.error("repair: %s; dropping everything from offset %d", msg, w)
        report.problems.append(msg)
        end = w
    elif bad_seg is not None and w >= end:
        log.warning("commitlog: %s at offset %d of %s: a torn tail, cut", bad_detail, w, bad_seg.path)
    # a log whose first segments vanished (a power loss before anything was flushed: the
    # segments' names never reached the disk) starts later than the flushed position
    report.end = end = max(end, cl.min_offset())
    return end


def _state_at_end(
    parts: StoreParts, report: RecoveryReport, state: AppendState | None, end: int, start: int, repair: bool
) -> tuple[AppendState, int]:
    """The append state at ``end``: the published one, or rebuilt from the log (before anything
    is cut: a rebuild that cannot reach the end, a bad record below the walk's start, fails
    the open with nothing changed, or with ``repair`` moves the end down to where it stops)."""
    if state is not None and state.tail == end:
        return state, end
    cl = parts.commitlog
    try:
        # the walk already checked the CRCs of everything from its start
        state = parts.rebuild_state(end, check_crc=None if start > cl.min_offset() else False)
    except (ValueError, pa.ArrowException) as exc:  # lengths and CRC fine, content not decodable
        raise CorruptStoreError(
            f"cannot rebuild the append state from the commitlog: {exc}", path=str(cl.segments.directory)
        ) from exc
    report.state_rebuilt = True
    if state.tail != end:
        msg = f"commitlog damaged at offset {state.tail}, below the recovered end {end}"
        if not repair:
            raise DataLossError(
                msg + "; open with repair=True to drop everything from there on",
                path=str(cl.segments.directory),
                offset=state.tail,
            )
        report.problems.append(msg)
        end = report.end = state.tail
    return state, end


def _fix_segment_sizes(parts: StoreParts, report: RecoveryReport, repair: bool) -> None:
    """Commitlog segments of the wrong size: refused, or (``repair``) brought back to the size.

    A segment cut short (a filesystem's crash, a copy that stopped) is extended with zeros,
    one too long is cut to the size: the walk then finds where its valid records end, and
    the usual rules decide what is kept (damage below the flushed position is reported).
    """
    segs = parts.commitlog.segments
    if not segs.odd:
        return
    if not repair:
        segs.check_sizes()
    for start, size in sorted(segs.odd.items()):
        path = segs.directory / f"{start:020d}"
        msg = f"segment {path} was {size} bytes, not {segs.size}: resized"
        log.error("repair: %s", msg)
        report.problems.append(msg)
        segs.forget(start)
        safe_open.truncate(path, segs.size)
    segs.odd.clear()


def _walk(parts: StoreParts, start: int, walked: Walked) -> tuple[int, MappedFile | None, str]:
    """Walk from ``start`` across segments; returns (W, segment of a bad record or None, why).

    In windows of ``WALK_CHUNK`` bytes (memory stays bounded), and each segment only up to
    its first hole (``SEEK_HOLE``): segments are sparse and written from the front, so the
    hole is where the data ends, and the walk does not read the zero pages of a 1 GiB
    segment that is mostly empty. If the hole guess cuts a record, the window is widened.
    """
    cl = parts.commitlog
    pos = start
    clip = True
    density = QueueDensity(from_log_start=start == 0)
    while True:
        seg = cl.segments.for_offset(pos)
        if seg is None:
            return pos, None, ""
        limit = min(seg.end, pos + WALK_CHUNK)
        hole = seg.start + _first_hole(seg)
        if clip and hole > pos:
            limit = min(limit, hole)
        arr = seg.array()
        res = scan_segment(
            arr, pos - seg.start, limit - seg.start, check_crc=parts.config.check_crc_on_recover, base=seg.start
        )
        if len(res.positions):
            cols = read_columns(seg.buffer(), seg.start, res.positions, with_body=False)
            res, cut = _dense(res, cols, density)
            walked.add(seg.start, res.positions, res.sizes, cols.take(cut))
        new = seg.start + res.end
        if res.reason is StopReason.BLANK:
            pos, clip = seg.end, True
        elif res.reason is StopReason.CORRUPT:
            return new, seg, res.detail
        elif res.reason is StopReason.END:
            return new, None, ""
        elif new > pos:  # LIMIT: go on from the last whole record
            pos, clip = new, True
        elif clip and limit < min(seg.end, pos + WALK_CHUNK) and not seg.bounded_reads:
            clip = False  # the hole guess was short: look again with the whole window (never
            # on tmpfs, where reading a hole through the mapping allocates it: SIGBUS when full)
        else:
            return new, None, ""  # a record cut by the segment's end: not there


def _dense(res: SegmentScan, cols: RecordColumns, density: QueueDensity) -> tuple[SegmentScan, int]:
    """``res`` cut at the first record whose QUEUEOFFSET breaks its queue's density (damage),
    and how many records are kept."""
    enc = cols.topic.dictionary_encode()
    h = cols.header
    cut, why = density.first_break(
        enc.dictionary.to_pylist(),
        np.asarray(enc.indices, np.int64),
        h["queueId"],
        h["queueOffset"],
        np.asarray(is_consumable(h["sysFlag"]), bool),
    )
    if cut == len(res.positions):
        return res, cut
    return SegmentScan(res.positions[:cut], res.sizes[:cut], int(res.positions[cut]), StopReason.CORRUPT, why), cut


def _first_hole(seg: MappedFile) -> int:
    """Offset (relative) of the first hole in the segment file; its size if none or unknown."""
    try:
        fd = safe_open.open_file(seg.path, os.O_RDONLY)
    except (OSError, WrongFileTypeError):  # (met, typed, when the segment is mapped)
        return seg.size
    try:
        return min(seg.size, os.lseek(fd, 0, os.SEEK_HOLE))
    except OSError:
        return seg.size
    finally:
        os.close(fd)


def _has_data(parts: StoreParts, start: int) -> bool:
    seg = parts.commitlog.segments.get(start)
    return seg is not None and any(seg.read(0, 8))  # pread: no fault on a hole (tmpfs, see rmqlog.log.mapped_file)


def _truncate_commitlog(parts: StoreParts, end: int) -> int:
    """Remove what killed writers left beside the segments, then :func:`cut_commitlog` at
    ``end``; returns the non-zero bytes dropped."""
    segs = parts.commitlog.segments
    # a writer killed while creating a segment leaves its temporary file
    for name, found in safe_open.entries(segs.directory):
        if name.startswith(".") and name.endswith(".tmp") and found != safe_open.FOLDER:
            safe_open.unlink(segs.directory / name)
    # segments prepared ahead (rmqlog.log.allocate): only zeros
    for name, found in safe_open.entries(segs.prepared_dir):
        if found != safe_open.FOLDER and not safe_open.is_set_aside(name):
            safe_open.unlink(segs.prepared_dir / name)
    return cut_commitlog(parts, end)


def cut_commitlog(parts: StoreParts, end: int) -> int:
    """Clear the bytes past ``end`` in its segment and delete later segments; returns the non-zero bytes dropped.

    The oldest segment is cleared rather than deleted, so the log keeps its start offset.
    Only data regions are read (holes are zeros), with ``pread``, and cleared by
    :meth:`MappedFile.clear` (holes punched, never a store into the mapping: no SIGBUS on
    a full disk, and the blocks are freed), then synced so the cut survives a power loss.
    Recovery (alone with the store) and a replica truncation of an open store
    (:mod:`rmqlog.recovery.truncate`, under the append lock) call it; a segment deleted here
    that a reader of this process still maps stays readable to it until it lets go.
    """
    segs = parts.commitlog.segments
    starts = segs.segment_starts()
    dropped = 0
    for start in starts:
        if start + segs.size <= end:
            continue
        seg = segs.get(start)
        assert seg is not None
        if start >= end and start != starts[0]:
            dropped += segs.size if _has_data(parts, start) else 0
            segs.forget(start)
            safe_open.unlink(seg.path)
            continue
        rel = max(0, end - start)
        nonzero = _count_nonzero(seg, rel)
        if nonzero:
            dropped += nonzero
            seg.clear(rel, seg.size)
            seg.sync(rel, seg.size)
    return dropped


def _count_nonzero(seg: MappedFile, rel: int) -> int:
    """Non-zero bytes of the segment from ``rel`` on (data regions only, read in bounded chunks)."""
    count = 0
    for lo, hi in seg.data_regions(rel, seg.size):
        for at in range(lo, hi, _ZERO_CHUNK):
            count += int(np.count_nonzero(np.frombuffer(seg.read(at, min(hi, at + _ZERO_CHUNK) - at), np.uint8)))
    return count


def _finish(
    parts: StoreParts,
    report: RecoveryReport,
    state: AppendState,
    cut: int,
    walked: Walked | None = None,
) -> None:
    """Make the append state, flush position, consume queues and dispatch position agree with E."""
    end = report.end
    if report.state_rebuilt:
        # not fsynced: after a power loss a stale or empty state is caught by the rules above
        parts.state_file.publish(state)
    from ..durability.flush import FlushPosition

    flushed = parts.flush_service.state_file.read()
    if flushed is None:
        # a new store, or one another tool wrote: from now on the flushed position is known
        # (durably, name included), so a power loss can never make recovery take a log whose
        # first segments vanished for one that starts there
        if end > parts.commitlog.min_offset():
            parts.flush_service._sync_commitlog(parts.commitlog.min_offset(), end)
        parts.flush_service.state_file.write(FlushPosition(end, state.store_timestamp))
    elif flushed.offset > end:
        parts.flush_service.state_file.write(FlushPosition(end, state.store_timestamp))
    with parts.dispatch_lock.held():
        for cq in parts.queues.all():
            drop_bad_queue_files(cq, report, whole_log=parts.commitlog.min_offset() == 0)
        if walked is None:  # normal path: units at or past the end go
            cut_queues(parts, cut)
            parts.dispatcher.reset_position(cut)
        else:
            resume = check_units(parts, cut, end, walked)
            parts.dispatcher.set_position(resume)
        _recover_index(parts, report)
    # RocketMQ's broker dispatches at start-up too: whatever was published is readable at once
    report.redispatched = dispatch(parts)
    report.redispatched += complete_queues(parts, state, report)
    finish_deletions(parts)
    queues_never_go_back(parts, state, report)


def _recover_index(parts: StoreParts, report: RecoveryReport) -> None:
    """The index files made to agree with the log (:func:`rmqlog.index.feed.recover_index`);
    caller holds the dispatch lock."""
    if parts.index_service is None:
        return
    cp = trusted_checkpoint(parts)  # unreadable or implausible: no index file is covered, all are rebuilt
    dropped, report.index_entries_cut, report.reindexed = recover_index(
        parts.index_service,
        parts.commitlog,
        abnormal=report.abnormal,
        index_msg_timestamp=cp.index_msg_timestamp if cp else 0,
        end=report.end,
        dispatched=parts.dispatcher.dispatched()[0],
    )
    report.index_files_dropped = [p.name for p in dropped]
