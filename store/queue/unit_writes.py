"""Consume-queue units written from records' fields: each queue's units of a run as one
slice, all or nothing (a failed write takes the queues this call wrote back to their ends),
a gap below a run walked back for or refused (:class:`~rmqlog.queue.gaps.QueueBehind`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from .. import crash_points
from .consume_queue import CQ_UNIT, ConsumeQueue
from .gaps import QueueBehind

log = logging.getLogger(__name__)

#: the queue of (topic, queue id), opened or made
QueueFor = Callable[[str, int], ConsumeQueue]
#: where walking the log must start for a queue to get its units from an offset on
ResumePoint = Callable[[ConsumeQueue, int], int]


def write_units(
    queue_for: QueueFor,
    resume_point: ResumePoint,
    topics: list[str],
    tidx: np.ndarray,
    qid: np.ndarray,
    qoff: np.ndarray,
    offsets: np.ndarray,
    sizes: np.ndarray,
    codes: np.ndarray,
    maxes: dict[tuple[str, int], int],
    gaps_ok: set[tuple[str, int]] | None = None,
) -> None:
    """Write the units of records (any order) into their queues, one slice per run.

    All or nothing: if a write fails (a full disk), the queues this call wrote go back to
    where they ended before it (and ``maxes`` with them). A process killed part-way is
    another matter: some queues then have the run's units and others not, which is why the
    dispatcher's position is derived from every queue the append state knows, and why a gap
    is walked back for (``gaps_ok``: the queues whose gaps may be filled; ``None``: all,
    else :class:`QueueBehind` for the others).
    """
    key, qoff, units = _by_queue(topics, tidx, qid, qoff, offsets, sizes, codes)
    before: list[tuple[ConsumeQueue, int, tuple[str, int], int | None]] = []
    try:
        _write_runs(queue_for, resume_point, topics, key, qoff, units, maxes, before, gaps_ok)
    except BaseException:
        for cq, end, queue, prior in reversed(before):
            if prior is None:
                maxes.pop(queue, None)
            else:
                maxes[queue] = prior
            try:
                cq.truncate(end)
            except OSError:
                log.warning("could not undo the units written to %s past %d", cq.directory, end, exc_info=True)
        raise


def _by_queue(
    topics: list[str],
    tidx: np.ndarray,
    qid: np.ndarray,
    qoff: np.ndarray,
    offsets: np.ndarray,
    sizes: np.ndarray,
    codes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The units grouped by queue, each queue's in offset order: (each unit's queue key
    ``topic index << 32 | queue id``, its queue offset, the units)."""
    tidx, qid, qoff = np.asarray(tidx, np.int64), np.asarray(qid, np.int64), np.asarray(qoff, np.int64)
    span = int(qid.max()) + 1 if len(qid) else 1
    order = None
    if len(topics) * span <= 1 << 16:
        # records come in log order, where each queue's offsets already increase: a
        # stable sort by queue alone (a radix sort on 16-bit keys, linear) groups them,
        # checked below; lexsort on (queue, offset) cost ~100 ms per million units
        dense = (tidx * span + qid).astype(np.uint16)
        order = np.argsort(dense, kind="stable")
        sd = dense[order]
        same = sd[1:] == sd[:-1]
        sorted_qoff = qoff[order]
        if not (np.diff(sorted_qoff)[same] > 0).all():
            order = None
    if order is None:
        order = np.lexsort((qoff, (tidx << 32) | qid))
        sorted_qoff = qoff[order]
    key = ((tidx << 32) | qid)[order]
    qoff = sorted_qoff
    units = np.empty(len(key), CQ_UNIT)
    units["offset"] = np.asarray(offsets)[order]
    units["size"] = np.asarray(sizes)[order]
    units["tagsCode"] = np.asarray(codes)[order]
    return key, qoff, units


def _write_runs(
    queue_for: QueueFor,
    resume_point: ResumePoint,
    topics: list[str],
    key: np.ndarray,
    qoff: np.ndarray,
    units: np.ndarray,
    maxes: dict[tuple[str, int], int],
    before: list[tuple[ConsumeQueue, int, tuple[str, int], int | None]],
    gaps_ok: set[tuple[str, int]] | None,
) -> None:
    """:func:`write_units`' writes, one slice per run of each queue; appends each queue and its
    end to ``before`` as it starts on it."""
    bounds = np.flatnonzero(np.diff(key)) + 1
    edges = [0, *bounds.tolist(), len(key)]  # (lists: np.r_ costs ~25 us a call, and this runs per queue)
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        if hi <= lo:
            continue
        k = int(key[lo])
        topic, q = topics[k >> 32], k & 0xFFFFFFFF
        cq = queue_for(topic, q)
        prior = maxes.get((topic, q))
        cur = cq.max_offset() if prior is None else prior
        # runs of consecutive queue offsets (a gap: records not walked, or not in the log)
        run_breaks = np.flatnonzero(np.diff(qoff[lo:hi]) != 1) + 1
        runs = [0, *run_breaks.tolist(), hi - lo]
        if gaps_ok is not None and (topic, q) not in gaps_ok:
            end = cur  # before writing anything: would a run start past the queue's end?
            for a, b in zip(runs[:-1], runs[1:], strict=True):
                first = int(qoff[lo + a])
                if first > end:
                    raise QueueBehind((topic, q), end, first, resume_point(cq, cur))
                end = max(end, first + (b - a))
        before.append((cq, cur, (topic, q), prior))
        for a, b in zip(runs[:-1], runs[1:], strict=True):
            first = int(qoff[lo + a])
            if first > cur:
                log.warning("consume queue %s/%d: gap %d..%d filled", topic, q, cur, first)
            cq.write(first, units[lo + a : lo + b], cur)
            cur = max(cur, first + (b - a))
        if crash_points.reached is not None:
            crash_points.reached("dispatch.queue")
        maxes[(topic, q)] = cur
