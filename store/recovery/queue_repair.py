"""Consume queues made to agree with a recovered commitlog (the second half of recovery,
:mod:`rmqlog.recovery.recovery`): files of the wrong size or unusable dropped, units past
the log's end or not matching their records cut, queues short of the append state's offsets
re-dispatched, and no queue's next offset left below its units. Every function runs in the
first opener, under the append lock; the dispatch-lock holding is noted on each.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from .. import safe_open
from ..catalog import finish_delete
from ..errors import CorruptStoreError, DataLossError, DiskFullError
from ..paths import topic_problem
from ..queue.consume_queue import CQ_UNIT_SIZE, FILLER_SIZE
from .recovery_report import RecoveryReport, Walked

if TYPE_CHECKING:
    from ..log.append_state import AppendState
    from ..parts import StoreParts
    from ..queue.consume_queue import ConsumeQueue

log = logging.getLogger(__name__)


def queues_never_go_back(parts: StoreParts, state: AppendState, report: RecoveryReport) -> None:
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
        report.problems.append(
            "queues continue after units of records no longer in the commitlog: "
            + ", ".join(f"{k} at {v}" for k, v in list(ahead.items())[:5])
        )


def cut_queues(parts: StoreParts, end: int) -> int:
    """Remove every consume-queue unit pointing at or past commitlog offset ``end`` (caller
    holds the dispatch lock); returns how many went."""
    units = 0
    for cq in parts.queues.all():
        first = cq.first_at_or_past(end)
        have = cq.max_offset()
        if first < have:
            cq.truncate(first)
            units += have - first
    return units


def dispatch(parts: StoreParts) -> int:
    """``dispatch()``; a damaged record it meets (below the published tail, in a segment the walk
    did not check) fails the open as damage, with the way out named. A full disk does not fail
    the open: the records wait for a later dispatch, as they would for a writer's."""
    try:
        return parts.dispatcher.dispatch()
    except DiskFullError as exc:  # the store opens; what is published is dispatched once space is freed
        log.error("dispatch at open: %s", exc)
        return 0
    except CorruptStoreError as exc:
        raise DataLossError(
            f"{exc.args[0]}; open with repair=True to check every record and drop everything from the damage on",
            path=exc.path,
            offset=exc.offset,
        ) from exc


def drop_bad_queue_files(cq: ConsumeQueue, report: RecoveryReport, *, whole_log: bool) -> None:
    """Delete a queue's segments from the first one that is missing (a gap) or of the wrong size.

    ``whole_log``: the commitlog still starts at offset 0, so every queue's units must start
    at 0 too; a queue whose first segment starts later lost its first files (retention deletes
    a queue's old files only with the commitlog's) and is rebuilt whole. Consume queues are
    derived data: what is dropped here is rebuilt from the commitlog by
    :func:`_complete_queues`, so no ``repair`` is needed.
    """
    segs = cq.segments
    if segs.wrong:  # a segment's name taken by a folder, a link...: the queue is rebuilt whole (see
        # rmqlog.recovery.survey, which leaves a queue's files to this per-queue pass)
        start, found = min(segs.wrong.items())
        segs.close()
        segs.wrong.clear()
        segs.odd.clear()
        moved = safe_open.set_aside(cq.directory)
        msg = (
            f"consume queue {cq.directory}: {cq.directory / f'{start:020d}'} was {found}, not {safe_open.FILE}: "
            f"the queue's folder set aside as {moved.name}; rebuilt"
        )
        log.warning(msg)
        report.problems.append(msg)
        return
    starts = segs.segment_starts()
    if whole_log and starts and starts[0] > 0:
        bad: int | None = starts[0]
    else:
        bad = next((s for i, s in enumerate(starts) if s in segs.odd or (i and s != starts[i - 1] + segs.size)), None)
    if bad is None and len(starts) > 1 and starts[0] not in segs.odd and _emptied(cq, starts[0]):
        bad = starts[0]  # its first file zeroed: reads would take the queue to start at the next one
    if bad is None:
        return
    msg = (
        f"consume queue {cq.directory}: segment {bad:020d} is missing before it, of the wrong size or "
        "emptied; rebuilt from there"
    )
    log.warning(msg)
    report.problems.append(msg)
    for start in starts:
        if start >= bad:
            segs.forget(start)
            safe_open.unlink(cq.directory / f"{start:020d}")
    segs.odd.clear()


def _emptied(cq: ConsumeQueue, start: int) -> bool:
    """Whether the queue's file at ``start``, not its last, has a zero last unit: a file before
    a queue's last one is full (zeros there: the file was zeroed, its units lost). One pread."""
    seg = cq.segments.get(start)
    return seg is not None and seg.read(seg.size - CQ_UNIT_SIZE + 8, 4) == bytes(4)  # (the unit's size field)


def complete_queues(parts: StoreParts, state: AppendState, report: RecoveryReport) -> int:
    """Rebuild consume queues that lack units the commitlog has (files deleted or lost).

    After dispatch, every queue of the append state must reach its next queue offset. A queue
    that does not (its folder deleted, its last segment lost: the dispatch position, a hint,
    still says it is done) is re-dispatched from its last unit's record, or from the start of
    the commitlog when it has none; units already present are skipped, so this only writes
    what is missing. Returns how many records were dispatched again.
    """
    behind: list[tuple[str, ConsumeQueue, int, int]] = []
    deleted = parts.deleted_topics.table()
    for name, expected in state.queues.items():
        topic, _, q = name.rpartition("/")
        if not q.isdigit() or topic_problem(topic) is not None:
            continue
        cq = parts.consume_queue(topic, int(q))
        have = cq.max_offset()
        if topic in deleted:  # its units below the delete's queue offset went on purpose
            have = max(have, deleted[topic].queue_offsets.get(int(q), 0))
        if have < expected:
            behind.append((name, cq, have, expected))
    if not behind:
        return 0
    resume = min(parts.dispatcher.resume_point(cq, have) for _, cq, have, _ in behind)
    msg = (
        f"{len(behind)} consume queue(s) lack units the commitlog has ("
        + ", ".join(f"{name}: {have} of {expected}" for name, _, have, expected in behind[:5])
        + f"); re-dispatched from commitlog offset {resume}"
    )
    log.warning(msg)
    report.problems.append(msg)
    with parts.dispatch_lock.held():
        parts.dispatcher.set_position(resume)
    done = dispatch(parts)
    still = [name for name, cq, _, expected in behind if cq.max_offset() < expected]
    if still:
        report.problems.append(
            f"consume queues still short after re-dispatch (their records are gone): {', '.join(still[:5])}"
        )
    return done


def finish_deletions(parts: StoreParts) -> None:
    """Every deleted topic's queues without units below where its delete left them
    (:mod:`rmqlog.deleted_topics`): a delete killed part-way (its config entry and offsets
    removed too, :func:`rmqlog.catalog.finish_delete`), or units cut by crash recovery (its
    fillers point at no record), are finished here. One look per queue of a deleted
    topic; the rest of the store is not visited."""
    for topic, deletion in parts.deleted_topics.table().items():
        for qid, floor in deletion.queue_offsets.items():
            cq = parts.consume_queue(topic, qid)
            have = cq.max_offset()
            if have > 0 and floor > 0 and (have < floor or cq.min_offset() < floor):
                with parts.dispatch_lock.held():
                    cq.remove_below(floor)
                log.warning("consume queue %s/%d: units below %d of its deleted topic removed", topic, qid, floor)
    for topic in parts.deleted_topics.pending():  # killed part-way: its config entry and offsets go too
        finish_delete(parts, topic)
        log.warning("the delete of topic %s, killed part-way, finished", topic)


def _lost_head(cq: ConsumeQueue, first: int, mine: np.ndarray, qoff: np.ndarray, consumable: np.ndarray) -> bool:
    """Whether the walk met a record of ``cq`` whose queue offset is below ``first``, the queue's
    first file's first unit: files that retention would not have removed (their records are
    still in the log) are gone, and a read would take the queue to start later."""
    mine = mine & consumable
    if not mine.any() or int(qoff[mine].min()) >= first:
        return False
    log.warning(
        "consume queue %s: its files below queue offset %d are gone while the commitlog holds their "
        "records; rebuilt whole",
        cq.directory,
        first,
    )
    return True


def check_units(parts: StoreParts, cut: int, end: int, walked: Walked) -> int:
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
        me = walked.queue_ids.get((cq.directory.parent.name, int(cq.directory.name)), -1)
        if (
            starts
            and starts[0] > 0
            and me >= 0
            and _lost_head(cq, starts[0] // CQ_UNIT_SIZE, queue == me, qoff, consumable)
        ):
            cq.truncate(0)  # its first files are gone while the log still has their records: rebuilt whole
            starts = []
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
            logical = first + np.arange(len(u))
            ok &= (pos[safe] == off) & (size[safe] == sz) & (queue[safe] == me) & (qoff[safe] == logical)
        ok[1:] &= np.diff(off) > 0
        matched = ok.copy()  # units that point at their own walked record
        # fillers before a queue's first message (a queue whose units start past 0) are fine,
        # and so are units of records retention deleted (below the log's start: a queue keeps
        # its last file, whose units tell where the queue goes on)
        before = (sz == FILLER_SIZE) | ((sz > 0) & (off >= 0) & (off < low))
        lead = int(np.argmin(before)) if not before.all() else len(sz)
        ok[:lead] = True
        bad = np.flatnonzero(~ok)
        k = int(bad[0]) if len(bad) else len(u)
        if k < len(u):
            log.warning(
                "consume queue %s: units from %d do not match the commitlog; re-dispatched", cq.directory, first + k
            )
            cq.truncate(first + k)
        # only units that point at their record cover it (a filler's offset 0, or a unit below
        # the log's start, would land on the first walked record: its own queue's unit would
        # then never be rewritten when that queue was lost)
        covered[idx[:k][matched[:k]]] = True
    missing = np.flatnonzero(consumable & ~covered)
    return int(pos[missing[0]]) if len(missing) else end
