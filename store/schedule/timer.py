"""Timed messages' delivery (RocketMQ 5's ``TimerMessageStore``), exactly once, each pass in
proportion to what is due.

Where they wait: ``rmq_sys_wheel_timer`` queue 0 (:mod:`rmqlog.schedule.timer_routing`); each
unit's tagsCode is the time the message is due: the time it was sent with, to the
millisecond, never before its store time (:func:`timer_tags_codes`), so the queue alone says
when each is due. The time wheel (:mod:`rmqlog.schedule.timer_wheel`) indexes them by due
time in buckets of ``timer_precision_ms``. A message is delivered by the first pass at or
after its time: late by at most the pass interval (plus the pass), never early.

A pass (:meth:`TimerDelivery.deliver`), run by the scheduler's pass under its lock:

1. ``D_new``: the pass's time, at most the store's clock (:mod:`rmqlog.clock`; a test's
   manual clock, too) read before the scheduler's pass took the append lock, less 1 ms. Every record stored at or before
   ``D_new`` was then already
   published (store times are taken under that lock and never go back), and the pass has
   dispatched it: a message due by ``D_new`` is in the timer queue when the pass looks.
2. ``D_old``: the last pass's ``D_new``, the larger of the state's and of the writer
   ``timer``'s sequence (the progress committed with the deliveries themselves).
3. Enqueue the timer queue's new units: those due after ``D_old`` into the wheel (due at or
   before it: delivered already, by a pass whose state write a crash lost).
4. Deliver what the wheel holds due in ``(D_old, D_new]``, oldest first (then in queue
   order), in batches of 65,536, each an idempotent append (writer ``timer``) whose sequence
   says exactly what is delivered with it: ``due << 20 | k``, every message due before
   ``due`` and the first ``k`` due at ``due`` (``k = 2**20 - 1``: all of them; the last batch
   says ``D_new``). A pass killed at any moment leaves a sequence that splits the messages
   into delivered and not, so nothing is lost or repeated.

After a long stop (``D_new - D_old`` beyond ``timer_max_delay_sec``), a lost or untrusted
index, or a log four times larger than what is pending, the pass scans the whole timer queue
instead (what is due is delivered from the scan, the rest re-indexed): a cost in proportion
to the queue, paid rarely.

The delivered copy (``TimerMessageStore.convertMessage``): topic ``REAL_TOPIC``, queue
``REAL_QID``, both removed from its properties; ``TIMER_OUT_MS`` and the timer property it
was sent with kept; ``TIMER_ENQUEUE_MS`` (its store time) and ``TIMER_DEQUEUE_MS`` (the
pass's wall time) added; body, tags, keys, flag, born time and user properties as sent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import crash_points, safe_open
from ..errors import MessagesDeletedError
from ..log.properties import (
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    TIMER_TOPIC,
    ParsedProperties,
)
from ..log.writer_marker import writer_marker
from ..queue.checked_read import read_unit_columns
from ..queue.consume_queue import CQ_UNIT, FILLER_SIZE
from .timer_wheel import ENTRY, TimerIndexDamaged, TimerState, TimerWheel, wheel_slots
from .timeup import Copies, StoredMessages, delivered_copies

if TYPE_CHECKING:
    from ..access.reader import QueueReader
    from ..parts import StoreParts

log = logging.getLogger(__name__)

#: The idempotent writer of the timer's deliveries.
TIMER_WRITER = "timer"
#: Units read per step while enqueueing or scanning; messages delivered per append.
STEP = 65_536
#: The writer ``timer``'s sequence: ``due << SEQ_SHIFT | k`` (see :meth:`TimerDelivery._deliver`).
SEQ_SHIFT = 20
GROUP_DONE = (1 << SEQ_SHIFT) - 1

#: (stored messages, their copies, idempotence marker) -> appends the copies (the store's put path)
Put = Callable[[StoredMessages, Copies, tuple[str, str] | None], object]


def timer_tags_codes(precision_ms: int):  # noqa: ANN201 - returns the dispatcher's hook
    """The dispatcher's hook giving timer-topic units their due time as tagsCode (see the
    module docstring); other units keep theirs. The time is the one the message was sent
    with (``TIMER_DELIVER_MS``, or its store time plus ``TIMER_DELAY_MS`` / ``TIMER_DELAY_SEC``,
    RocketMQ's precedence), else ``TIMER_OUT_MS + precision`` (a record another tool wrote),
    and never before its store time."""

    def number(parsed: ParsedProperties, name: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values = parsed.column(name).take(pa.array(rows))
        ok = np.asarray(pc.fill_null(pc.match_substring_regex(values, r"^-?[0-9]{1,15}$"), False))
        out = np.zeros(len(rows), np.int64)
        if ok.any():
            out[ok] = np.asarray(values.filter(pa.array(ok)).cast(pa.int64()))
        return out, ok

    def hook(
        topics: list[str], tidx: np.ndarray, parsed: ParsedProperties, header: dict[str, np.ndarray], codes: np.ndarray
    ) -> np.ndarray:
        if TIMER_TOPIC not in topics:
            return codes
        rows = np.flatnonzero(tidx == topics.index(TIMER_TOPIC))
        if not len(rows):
            return codes
        stored = header["storeTimestamp"][rows].astype(np.int64)
        out, has = number(parsed, PROPERTY_TIMER_OUT_MS, rows)
        due = np.where(has, out + precision_ms, stored)  # without any: due when stored
        for name, scale, relative in (
            (PROPERTY_TIMER_DELIVER_MS, 1, False),
            (PROPERTY_TIMER_DELAY_MS, 1, True),
            (PROPERTY_TIMER_DELAY_SEC, 1000, True),
        ):  # the last found wins: RocketMQ's order
            value, ok = number(parsed, name, rows)
            due = np.where(ok, value * scale + (stored if relative else 0), due)
        codes = np.array(codes, np.int64, copy=True)
        codes[rows] = np.maximum(due, stored)
        return codes

    return hook


class TimerDelivery:
    """The timer of the store of ``parts`` (see the module docstring); ``put`` is the store's
    put path, ``wall_ms`` the clock of the copies' ``TIMER_DEQUEUE_MS``."""

    def __init__(
        self,
        parts: StoreParts,
        reader: QueueReader,
        put: Put,
        *,
        max_delay_ms: int,
        precision_ms: int,
        wall_ms: Callable[[], int],
    ) -> None:
        self.parts = parts
        self.reader = reader
        self.put = put
        self.max_delay_ms = max_delay_ms
        self.wall_ms = wall_ms
        self.wheel = TimerWheel(parts.paths.root / "timer", wheel_slots(max_delay_ms, precision_ms), precision_ms)
        self._checked = False  # whether the index's files were checked (or rebuilt) since the store opened

    def forget(self) -> None:
        """Rebuild the index from the timer queue at the next pass (see
        :meth:`rmqlog.schedule.scheduler.DelayScheduler.log_cut`)."""
        self.wheel.invalidate()
        self._checked = False

    def deliver(self, d_new: int) -> tuple[int, int]:
        """One pass up to ``d_new`` (ms; the caller applies step 1's bound). Returns (messages
        delivered, messages lost to retention before delivery)."""
        cq = self.parts.consume_queue(TIMER_TOPIC, 0)
        state = self.wheel.load()
        if state is None and not safe_open.is_folder(cq.directory):
            return 0, 0  # no timed message was ever stored
        lo, hi, floor = self.reader.read_bounds(cq)
        doubt = self._doubt(cq, state, lo, hi) if state is not None else None
        if doubt is not None:  # before its `delivered` is taken: an untrusted state says nothing
            log.warning("timer: the index is not trusted (%s): rebuilt from %s queue 0", doubt, TIMER_TOPIC)
            state = None
        self._checked = True  # the files held together once in this open store, or are rebuilt now
        done = self.parts.append_state().writers.get(TIMER_WRITER)
        d_old = state.delivered if state is not None else 0
        skip: tuple[int, int] | None = None  # (due time, entries of it delivered): a batch cut inside one time
        if done is not None:
            at, k = int(done) >> SEQ_SHIFT, int(done) & GROUP_DONE
            if k == GROUP_DONE:
                d_old = max(d_old, at)
            elif at > d_old:
                d_old, skip = at - 1, (at, k)
        if d_new <= d_old and state is not None:
            return 0, 0
        d_new = max(d_new, d_old)
        lost = 0
        due: np.ndarray | None = None
        if state is not None and d_new - d_old <= self.max_delay_ms and state.log_end <= 4 * state.pending + (1 << 20):
            if state.enqueued < lo:
                lost += lo - state.enqueued
                state.enqueued = lo
            try:
                self._enqueue(cq, state, hi, d_old)
                due = self.wheel.due_between(state, d_old, d_new)  # checked before anything is delivered
            except TimerIndexDamaged as exc:
                log.warning("timer: the index is damaged (%s): rebuilt from %s queue 0", exc, TIMER_TOPIC)
        if due is None or state is None:
            state, due = self._rescan(cq, lo, hi, d_old, d_new)
        delivered, gone = self._deliver(cq, due, floor, d_new, skip)
        state.delivered = d_new
        state.dirty = False
        state.pending = max(0, state.pending - len(due))  # each delivered, gone, or delivered by a killed pass
        if state.pending == 0 and state.log_end:
            self.wheel.reset(state)  # nothing waits: the log starts again empty
        self.wheel.save(state)
        return delivered, lost + gone

    def _doubt(self, cq, state: TimerState, lo: int, hi: int) -> str | None:  # noqa: ANN001 - a ConsumeQueue
        """Why the index of ``state`` cannot be trusted, or ``None``: it has enqueued past the
        timer queue's end; and, at the first pass of this open store, the queue's unit before
        ``enqueued`` is not the one it enqueued last (an index of another store, or of a log cut
        since), or its files do not match it (:meth:`TimerWheel.check`)."""
        if state.enqueued > hi:
            return f"it has enqueued up to offset {state.enqueued}, the timer queue ends at {hi}"
        if self._checked:
            return None
        if lo <= state.enqueued - 1 < hi:
            unit = cq.read(state.enqueued - 1, 1)
            if len(unit) and int(unit["offset"][0]) != state.anchor:
                return (
                    f"the timer queue's unit {state.enqueued - 1} points at commitlog offset {int(unit['offset'][0])}, "
                    f"the index enqueued one at {state.anchor}"
                )
        return self.wheel.check(state)

    def _enqueue(self, cq, state: TimerState, hi: int, d_old: int) -> None:  # noqa: ANN001 - a ConsumeQueue
        """Index the units ``[state.enqueued, hi)`` due after ``d_old`` (dirty while it runs)."""
        if state.enqueued >= hi:
            return
        state.dirty = True
        self.wheel.save(state)
        for e, after, anchor in _unit_entries(cq, state.enqueued, hi, d_old):
            self.wheel.add(state, e["due"], e["offset"], e["queueOffset"], e["size"])
            state.enqueued, state.anchor = after, anchor
            if crash_points.reached is not None:
                crash_points.reached("timer.enqueued")
        state.dirty = False
        self.wheel.save(state)

    def _rescan(self, cq, lo: int, hi: int, d_old: int, d_new: int) -> tuple[TimerState, np.ndarray]:  # noqa: ANN001
        """Rebuild the index from the whole timer queue; returns the new state (dirty until the
        pass has delivered) and the entries due in ``(d_old, d_new]`` (delivered from the scan,
        not indexed: their span may be longer than the wheel's)."""
        state = self.wheel.new_state(lo, d_old)
        self.wheel.reset(state)
        self.wheel.save(state)
        due_parts = []
        for e, after, anchor in _unit_entries(cq, lo, hi, d_old):
            state.enqueued, state.anchor = after, anchor
            now = e["due"] <= d_new
            due_parts.append(e[now])
            state.pending += int(now.sum())  # counted as pending until delivered
            later = e[~now]
            self.wheel.add(state, later["due"], later["offset"], later["queueOffset"], later["size"])
            if crash_points.reached is not None:
                crash_points.reached("timer.enqueued")
        # still dirty: what is due now was taken from the scan, not the wheel, so a pass killed
        # before it delivers them must scan again (cleared when this pass is done)
        self.wheel.save(state)
        log.info(
            "timer: index rebuilt from %s queue 0 [%d, %d): %d pending", TIMER_TOPIC, lo, state.enqueued, state.pending
        )
        return state, (np.concatenate(due_parts) if due_parts else np.zeros(0, ENTRY))

    def _deliver(
        self,
        cq,
        entries: np.ndarray,
        floor: int,
        d_new: int,
        skip: tuple[int, int] | None,  # noqa: ANN001
    ) -> tuple[int, int]:
        """Append the copies of ``entries`` (oldest due first, then queue order) in batches of
        at most :data:`STEP`; ``skip``: the first entries of one due time a killed pass
        delivered already. Returns (delivered, lost to retention).

        Each batch's sequence says exactly what is delivered once it is appended:
        ``due << SEQ_SHIFT | k`` = every entry due before ``due`` and the first ``k`` due at
        ``due`` (``k = GROUP_DONE``: all of them)."""
        entries = entries[np.lexsort((entries["queueOffset"], entries["due"]))]
        due = entries["due"]
        group_start = np.searchsorted(due, due, side="left")  # where each entry's due time begins
        rank = np.arange(len(entries)) - group_start  # its place among the entries of its due time
        if skip is not None:
            keep = ~((due == skip[0]) & (rank < skip[1]))
            entries, due, rank = entries[keep], due[keep], rank[keep]  # ranks still count the skipped ones
        delivered = lost = 0
        start = 0
        while start < len(entries):
            end = min(start + STEP, len(entries))
            if end == len(entries):
                sequence = int(d_new) << SEQ_SHIFT | GROUP_DONE
            elif due[end] != due[end - 1]:
                sequence = int(due[end - 1]) << SEQ_SHIFT | GROUP_DONE
            elif int(rank[end]) < GROUP_DONE:  # cut inside one due time: say how many of it are done
                sequence = int(due[end]) << SEQ_SHIFT | int(rank[end])
            else:  # more than GROUP_DONE entries share one millisecond: the rest of it goes in this batch
                end = int(np.searchsorted(due, due[end], side="right"))
                sequence = (
                    (int(due[end - 1]) << SEQ_SHIFT | GROUP_DONE)
                    if end < len(entries)
                    else int(d_new) << SEQ_SHIFT | GROUP_DONE
                )
            got, gone = self._append(cq, entries[start:end], floor, sequence)
            delivered, lost = delivered + got, lost + gone
            start = end
        return delivered, lost

    def _append(self, cq, batch: np.ndarray, floor: int, sequence: int) -> tuple[int, int]:  # noqa: ANN001
        batch = batch[np.argsort(batch["queueOffset"], kind="stable")]
        lost = 0
        while len(batch):
            units = np.zeros(len(batch), CQ_UNIT)
            units["offset"], units["size"], units["tagsCode"] = batch["offset"], batch["size"], batch["due"]
            try:
                messages = StoredMessages.of(
                    read_unit_columns(
                        self.parts.commitlog,
                        cq,
                        units,
                        batch["queueOffset"],
                        topic=TIMER_TOPIC,
                        queue_id=0,
                        floor=floor,
                        tail=self.parts.published_tail(),
                        check_crc=self.reader.check_crc(None),
                    )
                )
                break
            except MessagesDeletedError as gone:  # retention deleted them before they were due
                keep = batch["queueOffset"] >= gone.end
                lost += int((~keep).sum())
                log.warning(
                    "timer: %s queue 0 offsets %d..%d were deleted before delivery", TIMER_TOPIC, gone.start, gone.end
                )
                batch = batch[keep]
        if not len(batch):
            return 0, lost
        n = len(messages)
        copies = delivered_copies(
            messages,
            drop=(PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID),
            add={
                PROPERTY_TIMER_ENQUEUE_MS: pa.array(messages.stored),
                PROPERTY_TIMER_DEQUEUE_MS: pa.array(np.full(n, self.wall_ms(), np.int64)),
            },
        )
        self.put(messages, copies, writer_marker(TIMER_WRITER, sequence))
        if crash_points.reached is not None:
            crash_points.reached("timer.delivered")
        return n, lost


def _unit_entries(cq, pos: int, hi: int, d_old: int) -> Iterator[tuple[np.ndarray, int, int]]:  # noqa: ANN001 - a ConsumeQueue
    """The timer queue's units ``[pos, hi)`` due after ``d_old`` (fillers skipped), as timer-log
    entries (``prev`` unset), :data:`STEP` units at a time, each with the queue offset after it
    and the commitlog offset in the last unit read (the state's ``anchor``)."""
    while pos < hi:
        units = cq.read(pos, min(STEP, hi - pos))
        if not len(units):
            return
        due = units["tagsCode"].astype(np.int64)
        keep = (units["size"] != FILLER_SIZE) & (due > d_old)
        e = np.zeros(int(keep.sum()), ENTRY)
        e["due"], e["offset"], e["size"] = due[keep], units["offset"][keep], units["size"][keep]
        e["queueOffset"] = pos + np.flatnonzero(keep)
        pos += len(units)
        yield e, pos, int(units["offset"][-1])
