"""The scheduler: delivers delayed messages once due, exactly once (RocketMQ's
``ScheduleMessageService``).

A pass (:meth:`DelayScheduler.deliver_due`) first dispatches what is published, then, for
each delay level ``L``: the units of
``SCHEDULE_TOPIC_XXXX`` queue ``L - 1`` from the level's progress on hold, as tagsCode, the
time each message is due (:mod:`rmqlog.schedule.levels`). Store times never go back within a
queue and a level has one delay, so the due units are a prefix: the pass reads it, makes the
delivered copies (:mod:`rmqlog.schedule.timeup`) and appends them in one batch to their real
topics and queues, then moves the level's progress past them. RocketMQ's clock correction is
kept: a unit due later than ``now + delay(L)`` (the clock went back) is due now.

Exactly once. Each level's batch is an idempotent append (``put_batch(writer=, sequence=)``):
writer ``schedule/level-L``, sequence = the queue offset after the batch. The store publishes
the sequence atomically with the batch and keeps it in the commitlog, so the batch and the
progress it makes commit together; ``config/delayOffset.json`` is written after it, as a
hint. On start a level resumes at the larger of the file's offset and the writer's sequence:
a pass killed at any moment neither loses nor repeats a delivery.

Several processes. Two passes started with different clocks would take different due
prefixes from the same progress, and append overlapping ranges under different sequences
(the second one's sequence is larger, so the idempotence check would let it through): passes
are serialized across processes by ``schedule.lock`` (a POSIX lock the kernel drops when its
process dies). The background service skips its round when another process holds it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .. import safe_open
from ..errors import MessagesDeletedError
from ..log.properties import SCHEDULE_TOPIC
from ..log.writer_marker import writer_marker
from ..paths import parse_queue_dir_name
from ..queue.consume_queue import FILLER_SIZE
from .delay_offsets import FILE_NAME, load_delay_offsets, save_delay_offsets
from .levels import level_queue
from .timeup import Copies, StoredMessages, delivered_copies

if TYPE_CHECKING:
    from ..parts import StoreParts
    from ..queue.reader import QueueReader
    from .timer import TimerDelivery

log = logging.getLogger(__name__)

#: Units read (and messages delivered) per step of a level: bounds a pass's memory.
DELIVER_BATCH = 65_536
LOCK_NAME = "schedule.lock"

#: (stored messages, their copies, idempotence marker) -> appends the copies (the store's put path)
Put = Callable[[StoredMessages, Copies, tuple[str, str] | None], object]


def level_writer(level: int) -> str:
    """The idempotent writer name of a level's deliveries."""
    return f"schedule/level-{level}"


@dataclass
class PassReport:
    """What one pass delivered: messages per level, and skipped units (records retention deleted)."""

    delivered: dict[int, int] = field(default_factory=dict)
    lost: int = 0
    timed: int = 0  # timed messages delivered (RocketMQ 5's timer)

    @property
    def total(self) -> int:
        return sum(self.delivered.values()) + self.timed


class DelayScheduler:
    """Delivers the delayed messages of the store of ``parts`` (see the module docstring).

    ``levels_ms``: the delay of each level, level 1 first. ``put``: the store's put path;
    ``reader``: its read path; ``wall_ms``: the clock (tests drive it)."""

    name = "rmq-scheduler"
    repeat_when_busy = True
    wait_first = False

    def __init__(
        self, parts: StoreParts, reader: QueueReader, put: Put, levels_ms: tuple[int, ...], *,
        interval_ms: int = 100, wall_ms: Callable[[], int] | None = None,
    ) -> None:
        self.parts = parts
        self.reader = reader
        self.put = put
        self.levels_ms = levels_ms
        self.interval_s = interval_ms / 1000.0
        self.wall_ms = wall_ms or (lambda: time.time_ns() // 1_000_000)
        self.offsets_path = parts.paths.config_dir / FILE_NAME
        self.lock_path = parts.paths.root / LOCK_NAME
        self.last_error: BaseException | None = None
        self._thread_lock = threading.Lock()
        #: the timed messages' delivery (:mod:`rmqlog.schedule.timer`), run in each pass
        self.timer: TimerDelivery | None = None

    def now_ms(self) -> int:
        """The scheduler's clock (``wall_ms``, which tests drive)."""
        return self.wall_ms()

    # ----------------------------------------------------------- service
    def run_once(self, now: float) -> bool:
        """One background round (see :mod:`rmqlog.service`): a pass unless another process
        runs one now; returns whether it delivered anything (then the loop runs again)."""
        report = self._pass(None, wait=False)
        return report is not None and report.total > 0

    # -------------------------------------------------------------- pass
    def deliver_due(self, now_ms: int | None = None) -> PassReport:
        """One pass as of ``now_ms`` (default: the wall clock), waiting for another process's
        pass to end first. Raises the store's errors (a damaged unit or record, a full disk)."""
        report = self._pass(now_ms, wait=True)
        assert report is not None
        return report

    def _pass(self, now_ms: int | None, *, wait: bool) -> PassReport | None:
        with self._thread_lock:
            fd = safe_open.open_file(self.lock_path, os.O_RDWR | os.O_CREAT)
            try:
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return None
                now = self.wall_ms() if now_ms is None else int(now_ms)
                return self._deliver(now)
            finally:
                os.close(fd)  # drops the lock

    def _deliver(self, now: int) -> PassReport:
        report = PassReport()
        wall = self.wall_ms()
        with self.parts.append_lock.held():
            pass  # every record stored before `wall` is published now (store times are taken under this lock)
        self.parts.dispatcher.dispatch()  # the schedule and timer queues hold every published waiting message
        offsets = load_delay_offsets(self.offsets_path)
        before = dict(offsets)
        state = self.parts.append_state()
        # the levels that ever had a message (one listing, not a stat per level)
        queues = {parse_queue_dir_name(name) for name in safe_open.listdir_or_empty(self.parts.paths.consumequeue_dir / SCHEDULE_TOPIC)}
        for level in range(1, len(self.levels_ms) + 1):
            queue = level_queue(level)
            if queue not in queues:
                continue
            done = state.writers.get(level_writer(level))
            start = max(offsets.get(level, 0), int(done) if done is not None else 0)
            offsets[level] = self._deliver_level(level, queue, start, now, report)
        if offsets != before:
            save_delay_offsets(self.offsets_path, {k: v for k, v in offsets.items() if v or k in before})
        if self.timer is not None:
            # timed messages go by the wall clock: a pass asked to run "later" than it (now_ms)
            # must not move the timer's progress past records not stored yet
            report.timed, lost = self.timer.deliver(int(min(now, wall - 1)))
            report.lost += lost
        return report

    def _deliver_level(self, level: int, queue: int, start: int, now: int, report: PassReport) -> int:
        cq = self.parts.consume_queue(SCHEDULE_TOPIC, queue)
        lo, hi, floor = self.reader.read_bounds(cq)
        pos = max(start, lo)
        if pos > start:
            report.lost += pos - start
            log.warning("scheduler: level %d: queue offsets %d..%d were deleted before delivery", level, start, pos)
        delay = self.levels_ms[level - 1]
        while pos < hi:
            units = cq.read(pos, min(DELIVER_BATCH, hi - pos))
            if not len(units):
                break
            due_at = units["tagsCode"].astype(np.int64)
            due = (due_at <= now) | (due_at > now + delay)  # RocketMQ's correctDeliverTimestamp
            k = len(units) if due.all() else int(np.argmin(due))
            if k == 0:
                break
            end = pos + k
            rows = np.flatnonzero(units["size"][:k] != FILLER_SIZE)
            if len(rows):
                try:
                    messages = StoredMessages.of(
                        self.reader.read_unit_columns(cq, SCHEDULE_TOPIC, queue, pos, units[:k], rows, floor, None))
                except MessagesDeletedError as gone:
                    report.lost += gone.end - pos
                    pos = gone.end
                    continue
                self.put(messages, delivered_copies(messages), writer_marker(level_writer(level), end))
                report.delivered[level] = report.delivered.get(level, 0) + len(messages)
            pos = end
            if k < len(units):
                break
        return pos
