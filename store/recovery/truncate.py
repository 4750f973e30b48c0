"""Cutting an open store's commitlog back to a record boundary (``MessageStore.replica.replica_truncate``):
a replication slave whose log holds records its new master does not (an old master come back
as a slave of the slave promoted in its place) drops them before it replicates.

:func:`truncate_log` keeps the whole records that end at or before the offset asked
(:func:`record_boundary`: a segment's end blank counts as a record ending at the segment's
end) and removes everything past them, as recovery removes a torn tail, in this order:

1. ``flush.state`` lowered to the cut, durably (a crash from here on never keeps cut bytes
   for having been flushed: recovery keeps what it covers);
2. the append state rebuilt from the kept log (:func:`rmqlog.log.state_rebuild.rebuild_state`:
   next queue offsets, store time, the idempotence markers ``RMQLOG_WRITER``, a walk of the
   whole log) and published: from here on nothing past the cut is part of the log;
3. consume-queue units pointing at or past the cut removed, the dispatch position moved back
   to it, index entries past it removed (:meth:`rmqlog.index.index_service.IndexService.truncate`);
   a queue whose records all went before the log's start keeps its next offset (recovery's
   :func:`rmqlog.recovery.queue_repair.queues_never_go_back`);
4. the commitlog bytes past the cut cleared and later segments deleted
   (:func:`rmqlog.recovery.recovery.cut_commitlog`, synced);
5. the checkpoint written (everything kept flushed, the consume queues synced).

A crash at any step leaves a store the next open recovers consistently: before step 2 the
old log (the cut did not happen), from step 2 on the cut one (crash points
``truncate.flushed``, ``truncate.published``, ``truncate.queues``, ``truncate.cut``).

It runs on an open store with its services running, so it holds, in this order, what every
writer of those files holds: the store alone (:meth:`rmqlog.durability.lock_file.StoreLockFile.alone`:
refused with :class:`rmqlog.errors.StoreBusyError` while another process or another open
store of this process has it open; a process opening it meanwhile waits, and recovers it if
this one dies during the cut), then the append lock, the dispatch lock and the flush lock.
The facade also pauses this process's scheduler, retention and replica writer around it
(their own locks, taken before these) and resets what they remember of the log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import crash_points
from ..durability.flush import FlushPosition
from ..errors import CorruptStoreError, ReplicaOffsetError
from ..log.scan import StopReason
from .queue_repair import cut_queues, queues_never_go_back
from .recovery import cut_commitlog
from .recovery_report import RecoveryReport

if TYPE_CHECKING:
    from ..durability.lock_file import StoreLockFile
    from ..parts import StoreParts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TruncateReport:
    """What :func:`truncate_log` did: the offset asked, the new end (the published tail),
    the published bytes dropped (the old tail less the new end), the non-zero bytes cleared
    on disk, consume-queue units and index entries removed."""

    offset: int
    end: int
    dropped: int
    cleared: int = 0
    units: int = 0
    index_entries: int = 0


def record_boundary(parts: StoreParts, offset: int) -> int:
    """The end of the last whole record at or before ``offset`` in the published log: the
    published tail for an offset at or past it, the log's first offset for one at or below it.
    A segment's start is always one (records never cross segments); inside a segment its
    records are walked from its start (one C pass, up to a segment of bytes). A segment's end
    blank is a record that ends at the segment's end; a damaged record before ``offset`` ends
    the walk where it starts."""
    tail = parts.published_tail()
    commitlog = parts.commitlog
    low = commitlog.min_offset()
    if offset >= tail:
        return tail
    if offset <= low:
        return low
    start = commitlog.segments.segment_start_for(offset)
    if offset == start:
        return offset
    for seg, scan in commitlog.scan(start, offset):
        if scan.reason is StopReason.CORRUPT:
            log.warning(
                "commitlog: %s at offset %d of %s, before offset %d",
                scan.detail,
                seg.start + scan.end,
                seg.path,
                offset,
            )
        return seg.start + scan.end  # (a blank that starts before `offset` ends past it: not kept)
    return start  # (no segment there: not below the tail)


def truncate_log(parts: StoreParts, offset: int, owner: StoreLockFile) -> TruncateReport:
    """Cut the commitlog of the open store ``parts`` back to :func:`record_boundary` of
    ``offset`` (see the module docstring); ``owner``: this process's hold of the store.

    Raises :class:`ReplicaOffsetError` (nothing changed) for an offset below the log's first
    offset or past its published tail, :class:`rmqlog.errors.StoreBusyError` when the store is
    open elsewhere, :class:`CorruptStoreError` when the log cannot be walked up to the cut."""
    with owner.alone("replica_truncate"), parts.append_lock.held(), parts.dispatch_lock.held(), parts.flush_lock.held():
        tail = parts.published_tail()
        low = parts.commitlog.min_offset()
        if not low <= offset <= tail:
            raise ReplicaOffsetError(
                f"cannot cut the commitlog at offset {offset}: it holds [{low}, {tail})", offset=offset, end=tail
            )
        end = record_boundary(parts, offset)
        if end == tail:
            return TruncateReport(offset, tail, 0)
        # rebuilt before anything changes: a log that cannot be walked up to the cut fails here
        state = parts.rebuild_state(end, check_crc=False)
        if state.tail != end:
            raise CorruptStoreError(
                f"cannot cut the commitlog at {end}: its records end at {state.tail} before it",
                path=str(parts.commitlog.segments.directory),
                offset=state.tail,
            )
        flush = parts.flush_service
        flushed = flush.flushed()
        if flushed.offset > end:
            flush.state_file.write(FlushPosition(end, state.store_timestamp))
        if crash_points.reached is not None:
            crash_points.reached("truncate.flushed")
        parts.state_file.publish(state)
        if crash_points.reached is not None:
            crash_points.reached("truncate.published")
        units = cut_queues(parts, end)
        if parts.dispatcher.dispatched()[0] > end:
            parts.dispatcher.set_position(end)
        entries = parts.index_service.truncate(end) if parts.index_service is not None else 0
        report = RecoveryReport(abnormal=False)
        queues_never_go_back(parts, state, report)
        if crash_points.reached is not None:
            crash_points.reached("truncate.queues")
        cleared = cut_commitlog(parts, end)
        if crash_points.reached is not None:
            crash_points.reached("truncate.cut")
        flush.checkpoint()
    for problem in report.problems:
        log.warning("replica truncation: %s", problem)
    return TruncateReport(offset, end, tail - end, cleared, units, entries)
