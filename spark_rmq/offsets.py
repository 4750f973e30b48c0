"""Source offsets: which queues a query reads, where it starts and ends, how much per trigger.

Offsets are consume-queue logical offsets per queue, as a JSON object whose keys are
``"topic/queueId"`` in sorted order (``{"orders/0": 120, "orders/1": 98}``), never
commitlog byte offsets. Everything here runs on the driver against an open store.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Protocol

import numpy as np

from rmqlog import MIN_RECORD_SIZE, WAITING_TOPICS, MessageStore, safe_open
from rmqlog.paths import parse_queue_dir_name, topic_problem

from .errors import OffsetsWentBackError, QueryDataLossError
from .options import EARLIEST, EARLIEST_OFFSET, LATEST, LATEST_OFFSET, SourceOptions

log = logging.getLogger(__name__)

Offsets = dict[str, int]


class QueueOffsets(Protocol):
    """What planning asks of where the queues are: an open :class:`rmqlog.MessageStore`, or a
    queue source (:mod:`spark_rmq.queue_source`; over the wire, queue names are
    ``"topic/brokerName"``)."""

    def min_offset(self, topic: str, queue_id: int) -> int: ...
    def max_offset(self, topic: str, queue_id: int) -> int: ...
    def offset_for_timestamp(self, topic: str, queue_id: int, ts_ms: int) -> int: ...
    def record_sizes(self, topic: str, queue_id: int, start: int, end: int) -> np.ndarray: ...


def queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}/{int(queue_id)}"


def split_key(key: str) -> tuple[str, int]:
    topic, _, qid = key.rpartition("/")
    return topic, int(qid)


def topic_of(name: str) -> str:
    """The topic of a planner's queue name: ``"topic"`` (a store) or ``"topic/brokerName"``
    (over the wire); a topic holds no ``/``."""
    return name.partition("/")[0]


def sorted_offsets(offsets: dict[str, int]) -> Offsets:
    """The same mapping with keys in (topic, queueId) order, as offsets are serialized."""
    return {k: int(offsets[k]) for k in sorted(offsets, key=split_key)}


def _topic_queue_ids(ms: MessageStore, topic: str, configured: dict) -> list[int]:
    """Queue ids of a topic: those in topics.json plus any consume-queue directory found."""
    ids: set[int] = set()
    tc = configured.get(topic)
    if tc is not None:
        ids.update(range(max(tc.read_queue_nums, tc.write_queue_nums)))
    if topic_problem(topic) is None:  # (links are not followed, see rmqlog.safe_open)
        ids.update(
            q
            for name, found in safe_open.entries(ms.paths.consumequeue_dir / topic)
            if found == safe_open.FOLDER and (q := parse_queue_dir_name(name)) is not None
        )
    return sorted(ids)


def discover_queues(ms: MessageStore, opts: SourceOptions) -> list[tuple[str, int]]:
    """The (topic, queueId) pairs the query reads now (topics and queues may appear later)."""
    if opts.assign is not None:
        return [(t, q) for t, qids in opts.assign for q in qids]
    configured = ms.topics()
    if opts.topics is not None:
        names: Iterable[str] = opts.topics
    else:
        pattern = re.compile(opts.topic_pattern or "")
        found = set(configured)
        # a folder whose name is not a valid topic is not a topic (names on disk are not trusted)
        found.update(
            name
            for name, kind in safe_open.entries(ms.paths.consumequeue_dir)
            if kind == safe_open.FOLDER and topic_problem(name) is None
        )
        # the store's own topic of waiting delayed messages is never matched by a pattern
        # (RocketMQ's system topics are not subscribed by wildcards); name it to read it
        names = sorted(t for t in found if pattern.fullmatch(t) and t not in WAITING_TOPICS)
    return [(t, q) for t in names for q in _topic_queue_ids(ms, t, configured)]


def bounds(ms: QueueOffsets, queues: list[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """(first, end) logical offsets of each queue (first = oldest offset still stored)."""
    return {queue_key(t, q): (ms.min_offset(t, q), ms.max_offset(t, q)) for t, q in queues}


def resolve(
    ms: QueueOffsets,
    queues: list[tuple[str, int]],
    spec: str | dict[str, int] | None,
    timestamp_ms: int | None,
    default: str,
    option: str,
) -> Offsets:
    """Offsets of ``queues`` for a starting/ending spec (earliest/latest/JSON) or a timestamp.

    A queue missing from a JSON spec gets ``default``; -2/-1 in JSON mean earliest/latest.
    A timestamp resolves per queue to the first offset stored at or after it.

    An offset past a queue's end is clamped to the end (RocketMQ corrects a consumer's
    overflowing offset to the queue's max the same way): an ``endingOffsets`` of 50 on a
    queue of 5 messages, or ``2**63-1``, reads to the end; a ``startingOffsets`` past the end
    starts there (a batch read of that queue is empty). Units past a queue's end do not
    exist, so reading them would be taken for a damaged queue. An offset below the queue's
    first is kept: :func:`check_data_loss` decides about it.
    """
    b = bounds(ms, queues)
    out: Offsets = {}
    for t, q in queues:
        key = queue_key(t, q)
        lo, hi = b[key]
        if timestamp_ms is not None:
            out[key] = ms.offset_for_timestamp(t, q, timestamp_ms)
            continue
        value: str | int = default if spec is None else spec if isinstance(spec, str) else spec.get(key, default)
        if value in (EARLIEST, EARLIEST_OFFSET):
            out[key] = lo
        elif value in (LATEST, LATEST_OFFSET):
            out[key] = hi
        else:
            out[key] = min(int(value), hi)
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - {queue_key(t, q) for t, q in queues})
        if unknown:
            from .errors import RmqLogOptionError

            raise RmqLogOptionError(option, f"names queues the query does not read: {', '.join(unknown)}")
    return sorted_offsets(out)


def check_data_loss(key: str, start: int, first: int, fail: bool, *, warn: bool = True) -> int:
    """The start to use for a queue whose oldest stored offset is ``first``.

    Raises :class:`QueryDataLossError` when ``start < first`` and ``fail``; otherwise skips to
    ``first`` in one step, with a warning unless ``warn`` is false (the caller already
    reported this skip).
    """
    if start >= first:
        return start
    if fail:
        raise QueryDataLossError(key, start, first)
    if warn:
        log.warning(
            "rmqlog: queue %s lost offsets [%d, %d) to retention; skipping them (failOnDataLoss=false)",
            key,
            start,
            first,
        )
    return first


def check_went_back(key: str, start: int, end: int, fail: bool, *, warn: bool = True) -> int:
    """The start to use for a queue that now ends at ``end``, read up to ``start``.

    Raises :class:`OffsetsWentBackError` when ``start > end`` (the log was cut or the store
    replaced: the offsets from ``end`` on will name new messages) and ``fail``; otherwise goes
    on from ``end``, with a warning unless ``warn`` is false (already reported)."""
    if start <= end:
        return start
    if fail:
        raise OffsetsWentBackError(key, start, end)
    if warn:
        log.warning(
            "rmqlog: queue %s now ends at %d, below offset %d the query had read to (the log was cut or "
            "the store replaced); going on from %d (failOnDataLoss=false)",
            key,
            end,
            start,
            end,
        )
    return end


# ----------------------------------------------------------------- admission control


def split_messages(start: Offsets, end: Offsets, budget: int) -> Offsets:
    """Cap the total of ``end - start`` at ``budget``, in proportion to each queue's backlog.

    Every queue with a backlog gets at least one message (none is starved, so a trigger may
    exceed ``budget`` by at most the number of queues when the budget is smaller than that);
    what rounding leaves over goes to the largest remainders.
    """
    keys = sorted(end, key=split_key)
    backlog = np.array([max(0, end[k] - start.get(k, end[k])) for k in keys], np.int64)
    total = int(backlog.sum())
    if total <= budget:
        return dict(end)
    exact = backlog * budget / total
    take = np.minimum(np.floor(exact).astype(np.int64), backlog)
    take = np.where(backlog > 0, np.maximum(take, 1), 0)
    # the minimum of one may overshoot: give it back from the largest shares
    excess = int(take.sum()) - max(budget, int((backlog > 0).sum()))
    for i in np.argsort(-take, kind="stable")[: len(take)] if excess > 0 else ():  # one step per queue
        cut = min(excess, int(take[i]) - 1)
        if cut > 0:
            take[i] -= cut
            excess -= cut
        if excess <= 0:
            break
    left = budget - int(take.sum())
    if left > 0:
        # largest remainders first, skipping queues already at their backlog; the total room
        # is at least ``left`` (total > budget), so the loop ends, usually after one round
        room = backlog - take
        order = np.argsort(-(exact - np.floor(exact)), kind="stable")
        while left > 0:
            step = order[room[order] > 0][:left]
            take[step] += 1
            room[step] -= 1
            left -= len(step)
    return {
        k: start.get(k, end[k]) + int(t) if end[k] > start.get(k, end[k]) else end[k]
        for k, t in zip(keys, take.tolist(), strict=True)
    }


def unit_sizes(ms: QueueOffsets, key: str, start: int, end: int) -> np.ndarray:
    """TOTALSIZE of each message of ``[start, end)`` of a queue, read from its consume queue."""
    topic, qid = split_key(key)
    if end <= start:
        return np.zeros(0, np.int64)
    return ms.record_sizes(topic, qid, start, end)


def split_bytes(ms: QueueOffsets, start: Offsets, end: Offsets, budget: int) -> Offsets:
    """Cap the total record bytes of ``[start, end)`` at ``budget``; sizes come from the consume queues.

    The budget is split over queues in proportion to their backlog (in messages); each queue
    takes the messages whose exact record sizes fit in its share, and at least one, so no
    queue is starved by a small budget. At most ``share / MIN_RECORD_SIZE + 1`` units are read
    per queue (``MIN_RECORD_SIZE``: the smallest record), so a huge backlog costs no more than the
    budget does.
    """
    keys = [k for k in sorted(end, key=split_key) if end[k] > start.get(k, end[k])]
    backlog = np.array([end[k] - start[k] for k in keys], np.int64)
    out = dict(end)
    total = int(backlog.sum())
    for k, b in zip(keys, backlog.tolist(), strict=True):
        share = budget * b // total
        sizes = unit_sizes(ms, k, start[k], start[k] + min(b, share // MIN_RECORD_SIZE + 1))
        n = int(np.searchsorted(np.cumsum(sizes), share, side="right"))  # messages whose bytes fit
        out[k] = start[k] + min(b, max(1, n))
    return out


# ------------------------------------------------------------------------ planning


def pack_ranges(ranges: list[tuple[str, int, int]], planned: Offsets, budget: int) -> list[list[tuple[str, int, int]]]:
    """Group the ranges of a batch into tasks: the ranges of queues with fewer than ``budget``
    messages in the batch share tasks of at most ``budget`` messages, in queue order; a larger
    queue's ranges (one each) stay alone. ``budget`` 0 packs nothing.

    A task costs Spark a fixed ~0.1-0.2 s here (a Python worker for its read and another for
    its write, the Arrow hand-overs, a store lock per task) whatever it holds, and a small
    streaming micro-batch would otherwise pay it once per queue. ``planned`` (queue key ->
    messages the batch holds there, from the offsets Spark logged) decides the grouping, not
    the ranges' lengths, which retention may have shortened since: a replayed batch is then
    cut into the same tasks, as the stream sink's per-task idempotence needs.
    """
    groups: list[list[tuple[str, int, int]]] = []
    pack: list[tuple[str, int, int]] = []
    held = 0
    for r in ranges:
        size = planned.get(r[0], r[2] - r[1])
        if not budget or size >= budget:
            groups.append([r])
            continue
        if pack and held + size > budget:
            groups.append(pack)
            pack, held = [], 0
        pack.append(r)
        held += size
    if pack:
        groups.append(pack)
    return groups


def plan_ranges(start: Offsets, end: Offsets, per_task: int | None) -> list[tuple[str, int, int]]:
    """(queue key, first, end) ranges to read; large ranges cut into ``per_task`` messages each."""
    out: list[tuple[str, int, int]] = []
    for key in sorted(end, key=split_key):
        lo, hi = start[key], end[key]
        if hi <= lo:
            continue
        step = per_task or (hi - lo)
        out.extend((key, a, min(a + step, hi)) for a in range(lo, hi, step))
    return out
