"""Recovery on open: find where the commitlog really ends, cut everything past it, repair the rest.

Run by the *first opener* of a store (see :mod:`store.lock_file`), under the append lock,
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
lowered to ``E`` if it was past it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from .errors import CorruptStoreError, DataLossError
from .record import ScanKind, decode_at, is_consumable
from .scan import StopReason, scan_segment

if TYPE_CHECKING:
    from .append_state import AppendState
    from .mapped_file import MappedFile
    from .message_store import MessageStore

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
    problems: list[str] = field(default_factory=list)


def walk_start(ms: MessageStore, abnormal: bool) -> int:
    """Where recovery starts walking (see the module docstring)."""
    starts = ms.commitlog.segments.segment_starts()
    if not starts:
        return 0
    if not abnormal:
        return starts[max(0, len(starts) - NORMAL_RECOVERY_SEGMENTS)]
    cp = ms.checkpoint_file.read()
    if cp is None:
        return starts[0]
    safe = cp.safe_timestamp()
    for start in reversed(starts):
        seg = ms.commitlog.segments.get(start)
        assert seg is not None
        first = decode_at(memoryview(seg.mm), 0)
        if first.kind is ScanKind.RECORD and first.record is not None and 0 < first.record.store_timestamp <= safe:
            return start
    return starts[0]


def recover(ms: MessageStore, *, abnormal: bool, repair: bool = False) -> RecoveryReport:
    """Recover the store ``ms`` (caller holds the append lock). Raises :class:`DataLossError`."""
    report = RecoveryReport(abnormal=abnormal)
    cl = ms.commitlog
    starts = cl.segments.segment_starts()
    state = ms._state_file.load()
    flushed = ms.flush_service.state_file.read()
    report.published = state.tail if state is not None else None
    report.flushed = flushed.offset if flushed is not None else None
    if not starts:
        report.end = report.log_end = cl.min_offset()
        if state is None or state.tail != report.end:
            state, report.state_rebuilt = ms._rebuild_state(report.end), True
        _finish(ms, report, state, cut=report.end)
        return report

    start = walk_start(ms, abnormal)
    report.walk_start = start
    # ---- the walk: how far whole, valid records reach (W)
    walked = Walked()
    w, bad_seg, bad_detail = _walk(ms, start, walked)
    report.log_end = w
    later_data = [s for s in starts if s > cl.segments.segment_start_for(w) and _has_data(ms, s)]

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
        where = bad_seg.path if bad_seg is not None else cl.segments.directory
        msg = (
            f"commitlog damaged below its flushed/acknowledged data: {bad_detail or 'no valid record'} "
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
    report.end = end
    if state is None or state.tail != end:
        # rebuilt before anything is cut: a rebuild that cannot reach E (a bad record below the
        # walk's start) must fail the open with nothing changed
        try:
            # the walk already checked the CRCs of everything from its start
            state = ms._rebuild_state(end, check_crc=None if start > cl.min_offset() else False)
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
    report.dropped_bytes = _truncate_commitlog(ms, end)
    _finish(ms, report, state, cut=min(start, end) if abnormal else end, walked=walked if abnormal else None)
    return report


@dataclass
class Walked:
    """The records the walk found: absolute offsets, TOTALSIZEs, and whether each gets a unit."""

    positions: list[np.ndarray] = field(default_factory=list)
    sizes: list[np.ndarray] = field(default_factory=list)
    consumable: list[np.ndarray] = field(default_factory=list)

    def arrays(self, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = np.concatenate(self.positions) if self.positions else np.zeros(0, np.int64)
        size = np.concatenate(self.sizes) if self.sizes else np.zeros(0, np.int64)
        cons = np.concatenate(self.consumable) if self.consumable else np.zeros(0, bool)
        keep = pos + size <= end
        return pos[keep], size[keep], cons[keep]


def _walk(ms: MessageStore, start: int, walked: Walked) -> tuple[int, MappedFile | None, str]:
    """Walk from ``start`` across segments; returns (W, segment of a bad record or None, why).

    In windows of ``WALK_CHUNK`` bytes (memory stays bounded), and each segment only up to
    its first hole (``SEEK_HOLE``): segments are sparse and written from the front, so the
    hole is where the data ends, and the walk does not read the zero pages of a 1 GiB
    segment that is mostly empty. If the hole guess cuts a record, the window is widened.
    """
    cl = ms.commitlog
    pos = start
    clip = True
    while True:
        seg = cl.segments.for_offset(pos)
        if seg is None:
            return pos, None, ""
        limit = min(seg.end, pos + WALK_CHUNK)
        hole = seg.start + _first_hole(seg)
        if clip and hole > pos:
            limit = min(limit, hole)
        arr = seg.array()
        res = scan_segment(arr, pos - seg.start, limit - seg.start, check_crc=ms.config.check_crc_on_recover)
        if len(res.positions):
            at = res.positions.astype(np.int64)
            sys_flag = np.ascontiguousarray(arr[(at + 36)[:, None] + np.arange(4)]).view(">i4").ravel()
            walked.positions.append(at + seg.start)
            walked.sizes.append(res.sizes.astype(np.int64))
            walked.consumable.append(np.asarray(is_consumable(sys_flag), bool))
        new = seg.start + res.end
        if res.reason is StopReason.BLANK:
            pos, clip = seg.end, True
        elif res.reason is StopReason.CORRUPT:
            return new, seg, res.detail
        elif res.reason is StopReason.END:
            return new, None, ""
        elif new > pos:  # LIMIT: go on from the last whole record
            pos, clip = new, True
        elif clip and limit < min(seg.end, pos + WALK_CHUNK):
            clip = False  # the hole guess was short: look again with the whole window
        else:
            return new, None, ""  # a record cut by the segment's end: not there


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


def _has_data(ms: MessageStore, start: int) -> bool:
    seg = ms.commitlog.segments.get(start)
    return seg is not None and any(seg.read(0, 8))  # pread: no fault on a hole (tmpfs, see store.mapped_file)


def _truncate_commitlog(ms: MessageStore, end: int) -> int:
    """Clear the bytes past ``end`` in its segment and delete later segments; returns the non-zero bytes dropped.

    The oldest segment is cleared rather than deleted, so the log keeps its start offset.
    Only data regions are read (holes are zeros), with ``pread``, and cleared by
    :meth:`MappedFile.clear` (holes punched, never a store into the mapping: no SIGBUS on
    a full disk, and the blocks are freed), then synced so the cut survives a power loss.
    """
    segs = ms.commitlog.segments
    starts = segs.segment_starts()
    dropped = 0
    if segs.directory.is_dir():  # a writer killed while creating a segment leaves its temporary file
        for leftover in segs.directory.glob(".*.tmp"):
            leftover.unlink(missing_ok=True)
    for start in starts:
        if start + segs.size <= end:
            continue
        seg = segs.get(start)
        assert seg is not None
        if start >= end and start != starts[0]:
            dropped += segs.size if _has_data(ms, start) else 0
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
    ms: MessageStore, report: RecoveryReport, state: AppendState, cut: int, walked: Walked | None = None,
) -> None:
    """Make the append state, flush position, consume queues and dispatch position agree with E."""
    end = report.end
    if report.state_rebuilt:
        # not fsynced: after a power loss a stale or empty state is caught by the rules above
        ms._state_file.publish(state)
    flushed = ms.flush_service.state_file.read()
    if flushed is not None and flushed.offset > end:
        from .flush import FlushPosition

        ms.flush_service.state_file.write(FlushPosition(end, state.store_timestamp))
    with ms._dispatch_lock.held():
        if walked is None:  # normal path: units at or past the end go
            for cq in ms._all_queues():
                first = cq.first_at_or_past(cut)
                if first < cq.max_offset():
                    cq.truncate(first)
            ms.dispatcher.reset_position(cut)
            return
        resume = _check_units(ms, cut, end, walked)
        ms.dispatcher.set_position(resume)
    report.redispatched = ms.dispatcher.dispatch()


def _check_units(ms: MessageStore, cut: int, end: int, walked: Walked) -> int:
    """Abnormal path: keep the units past ``cut`` that point at a walked record, cut the rest.

    A unit is kept only if it points exactly at the start of a record the walk found (below
    E) with the record's size, and units of a queue point at increasing offsets; the first
    unit of a queue that fails (a lost page reads as zeros, a unit past E) and all after it
    are truncated. Returns where dispatch must resume: the first consumable walked record
    left without a unit (E if none), so re-dispatch rewrites only what is missing and skips
    units already there (idempotent). All vectorized: one read and one ``searchsorted`` per
    queue, no step per record.
    """
    pos, size, consumable = walked.arrays(end)
    covered = np.zeros(len(pos), bool)
    for cq in ms._all_queues():
        first = cq.first_at_or_past(cut)
        hi = cq.max_offset()
        if hi <= first:
            continue
        u = cq.read(first, hi - first)
        off = u["offset"].astype(np.int64)
        sz = u["size"].astype(np.int64)
        idx = np.searchsorted(pos, off)
        safe = np.minimum(idx, max(len(pos) - 1, 0))
        ok = (idx < len(pos)) & (sz > 0) & (off + sz <= end)
        if len(pos):
            ok &= (pos[safe] == off) & (size[safe] == sz)
        ok[1:] &= np.diff(off) > 0
        bad = np.flatnonzero(~ok)
        k = int(bad[0]) if len(bad) else len(u)
        if k < len(u):
            log.warning("consume queue %s: units from %d do not match the commitlog; re-dispatched", cq.directory, first + k)
            cq.truncate(first + k)
        covered[idx[:k]] = True
    missing = np.flatnonzero(consumable & ~covered)
    return int(pos[missing[0]]) if len(missing) else end
