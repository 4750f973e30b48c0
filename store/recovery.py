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
- ``W < F``, or a bad record followed by later segments holding data: acknowledged data is
  damaged. Opening fails with :class:`DataLossError` (offset and segment named) unless the
  caller asked for ``repair``, which keeps ``E = W`` and drops the rest.

Then: bytes past ``E`` are zeroed and later segments deleted; consume-queue units pointing at
or past ``E`` (abnormal path: past the walk's start) are truncated and the dispatch position
is re-derived; the append state is kept when it matches ``E`` and rebuilt from the commitlog
otherwise (the rebuild keeps idempotence markers, which the log carries); ``flush.state`` is
lowered to ``E`` if it was past it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .errors import DataLossError
from .record import ScanKind, decode_at
from .scan import StopReason

if TYPE_CHECKING:
    from .append_state import AppendState
    from .message_store import MessageStore

log = logging.getLogger(__name__)

#: RocketMQ's recoverNormally walks this many of the newest segments.
NORMAL_RECOVERY_SEGMENTS = 3
_ZERO_CHUNK = 16 << 20


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
        first = decode_at(memoryview(seg.array()), 0)
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
    w, bad_seg, bad_detail = start, None, ""
    limit = starts[-1] + cl.segment_size
    for seg, scan in cl.scan(start, limit, check_crc=ms.config.check_crc_on_recover):
        w = seg.start + scan.end
        if scan.reason is StopReason.BLANK:
            w = seg.end
        elif scan.reason is StopReason.CORRUPT:
            bad_seg, bad_detail = seg, scan.detail
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
    damaged = (f is not None and w < f) or (bad_seg is not None and later_data)
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
        state = ms._rebuild_state(end)
        report.state_rebuilt = True
        if state.tail != end:
            msg = f"commitlog damaged at offset {state.tail}, below the recovered end {end}"
            if not repair:
                raise DataLossError(msg + "; open with repair=True to drop everything from there on",
                                    path=str(cl.segments.directory), offset=state.tail)
            report.problems.append(msg)
            end = report.end = state.tail
    report.dropped_bytes = _truncate_commitlog(ms, end)
    _finish(ms, report, state, cut=min(start, end) if abnormal else end)
    return report


def _has_data(ms: MessageStore, start: int) -> bool:
    seg = ms.commitlog.segments.get(start)
    return seg is not None and bool(seg.array()[:8].any())


def _truncate_commitlog(ms: MessageStore, end: int) -> int:
    """Zero the bytes past ``end`` in its segment and delete later segments; returns the non-zero bytes dropped.

    The oldest segment is zeroed rather than deleted, so the log keeps its start offset.
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
        arr = seg.array()
        for lo in range(max(0, end - start), segs.size, _ZERO_CHUNK):  # bounded memory
            chunk = arr[lo : min(segs.size, lo + _ZERO_CHUNK)]
            nonzero = int(np.count_nonzero(chunk))
            if nonzero:
                dropped += nonzero
                chunk[:] = 0
                seg.flush(lo, lo + len(chunk))
    return dropped


def _finish(ms: MessageStore, report: RecoveryReport, state: AppendState, cut: int) -> None:
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
        for cq in ms._all_queues():
            first = cq.first_at_or_past(cut)
            if first < cq.max_offset():
                cq.truncate(first)
        ms.dispatcher.reset_position(cut)
    if report.abnormal:
        report.redispatched = ms.dispatcher.dispatch()
