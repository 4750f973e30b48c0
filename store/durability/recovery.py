"""Recovery on open: find where the commitlog really ends, cut everything past it, repair the rest.

Run by the *first opener* of a store (see :mod:`store.durability.lock_file`), under the append lock,
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
have, header values no store writes (:func:`store.log.record.field_problems`), a QUEUEOFFSET
that breaks its queue's density (:class:`store.log.scan.QueueDensity`), a body CRC mismatch.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..errors import CorruptStoreError, DataLossError, DiskFullError
from ..log.decode import RecordColumns, read_columns
from ..log.record import ScanKind, decode_at, is_consumable
from ..log.scan import QueueDensity, SegmentScan, StopReason, scan_segment
from ..paths import topic_problem
from ..queue.consume_queue import CQ_UNIT_SIZE, FILLER_SIZE
from ..retention.leftovers import finish_at_open

if TYPE_CHECKING:
    from ..log.append_state import AppendState
    from ..log.mapped_file import MappedFile
    from ..parts import StoreParts
    from ..queue.consume_queue import ConsumeQueue

log = logging.getLogger(__name__)

#: RocketMQ's recoverNormally walks this many of the newest segments.
NORMAL_RECOVERY_SEGMENTS = 3
_ZERO_CHUNK = 16 << 20
#: Bytes of commitlog checked per step of the walk: bounds memory whatever the segment size.
WALK_CHUNK = 64 << 20


@dataclass
class RecoveryReport:
    """What recovery found and did (``MessageStore.recovery``)."""

    abnormal: bool
    walk_start: int = 0
    log_end: int = 0  # W
    published: int | None = None  # P
    flushed: int | None = None  # F
    end: int = 0  # E
    dropped_bytes: int = 0
    redispatched: int = 0
    state_rebuilt: bool = False
    index_files_dropped: list[str] = field(default_factory=list)
    index_entries_cut: int = 0
    reindexed: int = 0  # records fed to the index before the dispatch went on
    problems: list[str] = field(default_factory=list)


def walk_start(parts: StoreParts, abnormal: bool, repair: bool = False) -> int:
    """Where recovery starts walking (see the module docstring)."""
    starts = parts.commitlog.segments.segment_starts()
    if not starts:
        return 0
    if repair:  # asked to repair: every record is checked, from the oldest
        return starts[0]
    if not abnormal:
        return starts[max(0, len(starts) - NORMAL_RECOVERY_SEGMENTS)]
    try:
        cp = parts.checkpoint_file.read()
    except CorruptStoreError as exc:  # only a hint of where to start: walk everything instead
        log.warning("%s; walking the commitlog from its first segment", exc)
        cp = None
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
        report.end = report.log_end = cl.min_offset()
        if state is None or state.tail != report.end:
            state, report.state_rebuilt = parts.rebuild_state(report.end), True
        _finish(parts, report, state, cut=report.end)
        return report

    start = walk_start(parts, abnormal, repair)
    report.walk_start = start
    # ---- the walk: how far whole, valid records reach (W)
    walked = Walked()
    w, bad_seg, bad_detail = _walk(parts, start, walked)
    report.log_end = w
    later_data = [s for s in starts if s > cl.segments.segment_start_for(w) and _has_data(parts, s)]

    # ---- the end (E)
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
        where = bad_seg.path if bad_seg is not None else cl.segments.directory / f"{cl.segments.segment_start_for(w):020d}"
        if not bad_detail:
            bad_detail = "segment missing" if not where.exists() else "no valid record"
        msg = (
            f"commitlog damaged below its flushed/acknowledged data: {bad_detail} "
            f"at offset {w} (segment {where}); flushed up to {f}, later segments {later_data}"
        )
        if not repair:
            raise DataLossError(msg + "; open with repair=True to drop everything from there on",
                                path=str(where), offset=w)
        log.error("repair: %s; dropping everything from offset %d", msg, w)
        report.problems.append(msg)
        end = w
    elif bad_seg is not None and w >= end:
        log.warning("commitlog: %s at offset %d of %s: a torn tail, cut", bad_detail, w, bad_seg.path)
    # a log whose first segments vanished (a power loss before anything was flushed: the
    # segments' names never reached the disk) starts later than the flushed position
    end = max(end, cl.min_offset())
    report.end = end
    if state is None or state.tail != end:
        # rebuilt before anything is cut: a rebuild that cannot reach E (a bad record below the
        # walk's start) must fail the open with nothing changed
        try:
            # the walk already checked the CRCs of everything from its start
            state = parts.rebuild_state(end, check_crc=None if start > cl.min_offset() else False)
        except (ValueError, pa.ArrowException) as exc:  # lengths and CRC fine, content not decodable
            raise CorruptStoreError(f"cannot rebuild the append state from the commitlog: {exc}",
                                    path=str(cl.segments.directory)) from exc
        report.state_rebuilt = True
        if state.tail != end:
            msg = f"commitlog damaged at offset {state.tail}, below the recovered end {end}"
            if not repair:
                raise DataLossError(msg + "; open with repair=True to drop everything from there on",
                                    path=str(cl.segments.directory), offset=state.tail)
            report.problems.append(msg)
            end = report.end = state.tail
    report.dropped_bytes = _truncate_commitlog(parts, end)
    # repair: every unit is checked against the walk of the whole log, as after a crash
    checked = abnormal or repair
    _finish(parts, report, state, cut=min(start, end) if checked else end, walked=walked if checked else None)
    return report


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
        os.truncate(path, segs.size)
    segs.odd.clear()


@dataclass
class Walked:
    """The records the walk found: absolute offsets, TOTALSIZEs, whether each gets a unit, and
    its queue (an id in :attr:`queue_ids`) and QUEUEOFFSET."""

    positions: list[np.ndarray] = field(default_factory=list)
    sizes: list[np.ndarray] = field(default_factory=list)
    consumable: list[np.ndarray] = field(default_factory=list)
    queues: list[np.ndarray] = field(default_factory=list)
    queue_offsets: list[np.ndarray] = field(default_factory=list)
    queue_ids: dict[tuple[str, int], int] = field(default_factory=dict)

    def add(self, base: int, positions: np.ndarray, sizes: np.ndarray, cols: RecordColumns) -> None:
        """Note a run of records decoded at ``positions`` (relative to ``base``)."""
        h = cols.header
        enc = cols.topic.dictionary_encode()
        topics = enc.dictionary.to_pylist()
        key = (np.asarray(enc.indices, np.int64) << 32) | h["queueId"].astype(np.int64)
        uniq, inverse = np.unique(key, return_inverse=True)
        ids = np.array([self.queue_ids.setdefault((topics[k >> 32], k & 0xFFFFFFFF), len(self.queue_ids))
                        for k in uniq.tolist()], np.int64)  # one step per queue
        self.positions.append(positions.astype(np.int64) + base)
        self.sizes.append(sizes.astype(np.int64))
        self.consumable.append(np.asarray(is_consumable(h["sysFlag"]), bool))
        self.queues.append(ids[inverse] if len(ids) else np.zeros(0, np.int64))
        self.queue_offsets.append(h["queueOffset"].astype(np.int64))

    def arrays(self, end: int) -> tuple[np.ndarray, ...]:
        """(positions, sizes, consumable, queue ids, queue offsets) of the records below ``end``."""
        def cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dtype)

        pos, size = cat(self.positions, np.int64), cat(self.sizes, np.int64)
        keep = pos + size <= end
        return (pos[keep], size[keep], cat(self.consumable, bool)[keep], cat(self.queues, np.int64)[keep],
                cat(self.queue_offsets, np.int64)[keep])


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
        res = scan_segment(arr, pos - seg.start, limit - seg.start, check_crc=parts.config.check_crc_on_recover, base=seg.start)
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
        enc.dictionary.to_pylist(), np.asarray(enc.indices, np.int64), h["queueId"], h["queueOffset"],
        np.asarray(is_consumable(h["sysFlag"]), bool),
    )
    if cut == len(res.positions):
        return res, cut
    return SegmentScan(res.positions[:cut], res.sizes[:cut], int(res.positions[cut]), StopReason.CORRUPT, why), cut


def _first_hole(seg: MappedFile) -> int:
    """Offset (relative) of the first hole in the segment file; its size if none or unknown."""
    try:
        fd = os.open(seg.path, os.O_RDONLY)
    except OSError:
        return seg.size
    try:
        return min(seg.size, os.lseek(fd, 0, os.SEEK_HOLE))
    except OSError:
        return seg.size
    finally:
        os.close(fd)


def _has_data(parts: StoreParts, start: int) -> bool:
    seg = parts.commitlog.segments.get(start)
    return seg is not None and any(seg.read(0, 8))  # pread: no fault on a hole (tmpfs, see store.log.mapped_file)


def _truncate_commitlog(parts: StoreParts, end: int) -> int:
    """Clear the bytes past ``end`` in its segment and delete later segments; returns the non-zero bytes dropped.

    The oldest segment is cleared rather than deleted, so the log keeps its start offset.
    Only data regions are read (holes are zeros), with ``pread``, and cleared by
    :meth:`MappedFile.clear` (holes punched, never a store into the mapping: no SIGBUS on
    a full disk, and the blocks are freed), then synced so the cut survives a power loss.
    """
    segs = parts.commitlog.segments
    starts = segs.segment_starts()
    dropped = 0
    if segs.directory.is_dir():  # a writer killed while creating a segment leaves its temporary file
        for leftover in segs.directory.glob(".*.tmp"):
            leftover.unlink(missing_ok=True)
    if segs.prepared_dir.is_dir():  # segments prepared ahead (store.log.allocate): only zeros
        for leftover in segs.prepared_dir.iterdir():
            leftover.unlink(missing_ok=True)
    for start in starts:
        if start + segs.size <= end:
            continue
        seg = segs.get(start)
        assert seg is not None
        if start >= end and start != starts[0]:
            dropped += segs.size if _has_data(parts, start) else 0
            segs.forget(start)
            seg.path.unlink(missing_ok=True)
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
    parts: StoreParts, report: RecoveryReport, state: AppendState, cut: int, walked: Walked | None = None,
) -> None:
    """Make the append state, flush position, consume queues and dispatch position agree with E."""
    end = report.end
    if report.state_rebuilt:
        # not fsynced: after a power loss a stale or empty state is caught by the rules above
        parts.state_file.publish(state)
    from .flush import FlushPosition

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
            _drop_bad_queue_files(cq, report, whole_log=parts.commitlog.min_offset() == 0)
        if walked is None:  # normal path: units at or past the end go
            for cq in parts.queues.all():
                first = cq.first_at_or_past(cut)
                if first < cq.max_offset():
                    cq.truncate(first)
            parts.dispatcher.reset_position(cut)
        else:
            resume = _check_units(parts, cut, end, walked)
            parts.dispatcher.set_position(resume)
        _recover_index(parts, report)
    # RocketMQ's broker dispatches at start-up too: whatever was published is readable at once
    report.redispatched = _dispatch(parts)
    report.redispatched += _complete_queues(parts, state, report)
    _queues_never_go_back(parts, state, report)


def _recover_index(parts: StoreParts, report: RecoveryReport) -> None:
    """Make the index files agree with the log (caller holds the dispatch lock).

    After an abnormal exit the files the checkpoint's ``indexMsgTimestamp`` does not cover
    are dropped (RocketMQ's ``IndexService.load(lastExitOK=false)``); entries at or past the
    log's end ``E`` are cut (RocketMQ keeps them); then the records between the index's
    resume point and the dispatch position are indexed again (:func:`store.index.feed.catch_up`),
    so that the dispatch that follows continues the index in commitlog order."""
    index = parts.index_service
    if index is None:
        return
    if report.abnormal:
        cp = parts.checkpoint_file.read()
        report.index_files_dropped = [p.name for p in index.drop_after(cp.index_msg_timestamp if cp else 0)]
    report.index_entries_cut = index.truncate(report.end)
    from ..index.feed import catch_up

    report.reindexed = catch_up(index, parts.commitlog, parts.dispatcher.dispatched()[0])


def _queues_never_go_back(parts: StoreParts, state: AppendState, report: RecoveryReport) -> None:
    """A queue whose units reach further than the append state's next offset (units of records
    whose segments are gone: a power loss that lost the first segments, a state rebuilt from
    what is left) continues after its units, never over them: RocketMQ's
    ``recoverTopicQueueTable`` takes each queue's next offset from its consume queue too.
    Units past the end that point anywhere else are not this log's (damage): they are cut."""
    ahead = {}
    low = parts.commitlog.min_offset()
    for topic, qid, _ in parts.queues.dirs():
        name = f"{topic}/{qid}"
        cq = parts.consume_queue(topic, qid)
        have, expected = cq.max_offset(), state.queues.get(name, 0)
        if have <= expected:
            continue
        # from the queue's first file on: retention deletes a queue's files wholly below the
        # commitlog's start (never its last), so its units may begin past ``expected``
        starts = cq.segments.segment_starts()
        lo = max(expected, starts[0] // CQ_UNIT_SIZE if starts else 0)
        extra = cq.read(lo, have - lo)
        gone = (extra["size"] > 0) & (extra["offset"] >= 0) & (extra["offset"] < low)
        if len(extra) == have - lo and gone.all():
            ahead[name] = have
        else:  # anything else past the queue's end is not a unit of this log: cut
            with parts.dispatch_lock.held():
                cq.truncate(expected)
            report.problems.append(f"consume queue {cq.directory}: units past its end {expected} dropped")
    if ahead:
        state.queues.update(ahead)
        parts.state_file.publish(state)
        report.problems.append("queues continue after units of records no longer in the commitlog: "
                               + ", ".join(f"{k} at {v}" for k, v in list(ahead.items())[:5]))


def _dispatch(parts: StoreParts) -> int:
    """``dispatch()``; a damaged record it meets (below the published tail, in a segment the walk
    did not check) fails the open as damage, with the way out named. A full disk does not fail
    the open: the records wait for a later dispatch, as they would for a writer's."""
    try:
        return parts.dispatcher.dispatch()
    except DiskFullError as exc:  # the store opens; what is published is dispatched once space is freed
        log.error("dispatch at open: %s", exc)
        return 0
    except CorruptStoreError as exc:
        raise DataLossError(f"{exc.args[0]}; open with repair=True to check every record and drop "
                            "everything from the damage on", path=exc.path, offset=exc.offset) from exc


def _drop_bad_queue_files(cq: ConsumeQueue, report: RecoveryReport, *, whole_log: bool) -> None:
    """Delete a queue's segments from the first one that is missing (a gap) or of the wrong size.

    ``whole_log``: the commitlog still starts at offset 0, so every queue's units must start
    at 0 too; a queue whose first segment starts later lost its first files (retention deletes
    a queue's old files only with the commitlog's) and is rebuilt whole. Consume queues are
    derived data: what is dropped here is rebuilt from the commitlog by
    :func:`_complete_queues`, so no ``repair`` is needed.
    """
    segs = cq.segments
    starts = segs.segment_starts()
    if whole_log and starts and starts[0] > 0:
        bad: int | None = starts[0]
    else:
        bad = next((s for i, s in enumerate(starts) if s in segs.odd or (i and s != starts[i - 1] + segs.size)), None)
    if bad is None:
        return
    msg = f"consume queue {cq.directory}: segment {bad:020d} is missing before it or of the wrong size; rebuilt from there"
    log.warning(msg)
    report.problems.append(msg)
    for start in starts:
        if start >= bad:
            segs.forget(start)
            (cq.directory / f"{start:020d}").unlink(missing_ok=True)
    segs.odd.clear()


def _complete_queues(parts: StoreParts, state: AppendState, report: RecoveryReport) -> int:
    """Rebuild consume queues that lack units the commitlog has (files deleted or lost).

    After dispatch, every queue of the append state must reach its next queue offset. A queue
    that does not (its folder deleted, its last segment lost: the dispatch position, a hint,
    still says it is done) is re-dispatched from its last unit's record, or from the start of
    the commitlog when it has none; units already present are skipped, so this only writes
    what is missing. Returns how many records were dispatched again.
    """
    behind: list[tuple[str, ConsumeQueue, int, int]] = []
    for name, expected in state.queues.items():
        topic, _, q = name.rpartition("/")
        if not q.isdigit() or topic_problem(topic) is not None:
            continue
        cq = parts.consume_queue(topic, int(q))
        have = cq.max_offset()
        if have < expected:
            behind.append((name, cq, have, expected))
    if not behind:
        return 0
    resume = min(_resume_point(parts, cq, have) for _, cq, have, _ in behind)
    msg = (f"{len(behind)} consume queue(s) lack units the commitlog has ("
           + ", ".join(f"{name}: {have} of {expected}" for name, _, have, expected in behind[:5])
           + f"); re-dispatched from commitlog offset {resume}")
    log.warning(msg)
    report.problems.append(msg)
    with parts.dispatch_lock.held():
        parts.dispatcher.set_position(resume)
    done = _dispatch(parts)
    still = [name for name, cq, _, expected in behind if cq.max_offset() < expected]
    if still:
        report.problems.append(f"consume queues still short after re-dispatch (their records are gone): {', '.join(still[:5])}")
    return done


def _resume_point(parts: StoreParts, cq: ConsumeQueue, have: int) -> int:
    """Where re-dispatching must start for ``cq`` to get units from offset ``have`` on."""
    low = parts.commitlog.min_offset()
    if have <= cq.min_offset(low):
        return low
    u = cq.read(have - 1, 1)
    if not len(u) or int(u["size"][0]) in (0, FILLER_SIZE) or int(u["offset"][0]) < low:
        return low
    return int(u["offset"][0]) + int(u["size"][0])


def _check_units(parts: StoreParts, cut: int, end: int, walked: Walked) -> int:
    """Abnormal path: keep the units past ``cut`` that point at a walked record, cut the rest.

    A unit is kept only if it points exactly at the start of a record the walk found (below
    E) with the record's size, queue and queue offset, and units of a queue point at
    increasing offsets; the first
    unit of a queue that fails (a lost page reads as zeros, a unit past E) and all after it
    are truncated. Returns where dispatch must resume: the first consumable walked record
    left without a unit (E if none), so re-dispatch rewrites only what is missing and skips
    units already there (idempotent). All vectorized: one read and one ``searchsorted`` per
    queue, no step per record.
    """
    pos, size, consumable, queue, qoff = walked.arrays(end)
    covered = np.zeros(len(pos), bool)
    low = parts.commitlog.min_offset()
    whole = cut <= low
    for cq in parts.queues.all():
        starts = cq.segments.segment_starts()
        # the whole log was walked (repair): every unit is checked, from the queue's first;
        # no binary search, which a damaged unit could send past itself
        first = (starts[0] // CQ_UNIT_SIZE if starts else 0) if whole else cq.first_at_or_past(cut)
        hi = cq.max_offset()
        if hi <= first:
            continue
        u = cq.read(first, hi - first)
        off = u["offset"].astype(np.int64)
        sz = u["size"].astype(np.int64)
        idx = np.searchsorted(pos, off)
        safe = np.minimum(idx, max(len(pos) - 1, 0))
        ok = (idx < len(pos)) & (sz > 0) & (off + sz <= end)
        if len(pos):  # the unit's record: at that offset, of that size, queue and queue offset
            me = walked.queue_ids.get((cq.directory.parent.name, int(cq.directory.name)), -1)
            logical = first + np.arange(len(u))
            ok &= (pos[safe] == off) & (size[safe] == sz) & (queue[safe] == me) & (qoff[safe] == logical)
        ok[1:] &= np.diff(off) > 0
        # fillers before a queue's first message (a queue whose units start past 0) are fine,
        # and so are units of records retention deleted (below the log's start: a queue keeps
        # its last file, whose units tell where the queue goes on)
        before = (sz == FILLER_SIZE) | ((sz > 0) & (off >= 0) & (off < low))
        lead = int(np.argmin(before)) if not before.all() else len(sz)
        ok[:lead] = True
        bad = np.flatnonzero(~ok)
        k = int(bad[0]) if len(bad) else len(u)
        if k < len(u):
            log.warning("consume queue %s: units from %d do not match the commitlog; re-dispatched", cq.directory, first + k)
            cq.truncate(first + k)
        covered[idx[:k]] = True
    missing = np.flatnonzero(consumable & ~covered)
    return int(pos[missing[0]]) if len(missing) else end
