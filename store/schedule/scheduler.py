"""The scheduler: delivers delayed messages once due, exactly once (RocketMQ's
``ScheduleMessageService``).

A pass (:meth:`DelayScheduler.deliver_due`) first dispatches what is published, then, for
each delay level ``L``: the units of
``SCHEDULE_TOPIC_XXXX`` queue ``L - 1`` from the level's progress on hold, as tagsCode, the
time each message is due (:mod:`rmqlog.schedule.levels`). Store times never go back within a
queue and a level has one delay, so the due units are a prefix: the pass reads it, makes the
delivered copies (:mod:`rmqlog.schedule.timeup`) and appends them in one batch to their real
topics and queues, then moves the level's progress past them.

Never early. A unit's tagsCode is derived data (computed at dispatch with the levels then
configured; not checksummed), so it only picks the candidates: those it says are due, and
those it says are due later than ``now + delay(L)`` (RocketMQ's ``correctDeliverTimestamp``
delivers these at once: the clock went back, or the level's delay was shortened). Each
candidate's record then decides: it is delivered only when its STORETIMESTAMP plus the
level's configured delay is at most the pass's time. So neither a caller's ``now_ms``, nor a
wall clock that went back, nor a damaged tagsCode makes a delivery early; a clock that went
back delays deliveries by as much (store times never go back: :mod:`rmqlog.log.commitlog`).

The clock. A pass's time is ``now_ms`` or the store's clock (:mod:`rmqlog.clock`, given at
open), which is also the clock of the store times: with a :class:`rmqlog.clock.ManualClock`
a test puts a delayed or timed message, moves the clock past its due time and runs a pass,
without waiting. Timed messages go by the clock alone (read before the pass takes the append
lock, less 1 ms: :mod:`rmqlog.schedule.timer`), never by a later ``now_ms``.

Levels removed from ``message_delay_level`` (a store reopened with fewer levels): their
queues are still delivered, with the delay of the last level still configured, and a warning
names the levels and how many messages wait there.

Exactly once. Each level's batch is an idempotent append (``put_batch(writer=, sequence=)``):
writer ``schedule/level-L``, sequence = the queue offset after the batch. The store publishes
the sequence atomically with the batch and keeps it in the commitlog, so the batch and the
progress it makes commit together; ``config/delayOffset.json`` is written after it, as a
hint. Where a level resumes (:func:`resume_offset`): at the writer's sequence when the log
has one (the file is then only checked against it: a larger offset in the file, which no
pass writes, is reported and not followed); otherwise at the file's offset, the only record
of a RocketMQ broker's deliveries, as far as the log confirms it (:meth:`DelayScheduler.
confirmed_offset`: the delivered copy of the message before it is in the index) and
corrected as RocketMQ's ``correctDelayOffset`` does but for one case (a warning names the
level and the offsets): below the queue's minimum it becomes the minimum; past the queue's
end (RocketMQ: the end, which would skip every message waiting there) it is not followed at
all and the level resumes at the queue's minimum, so a wrong file may repeat a RocketMQ
broker's deliveries but never loses one. A pass killed at
any moment neither loses nor repeats a delivery. An unreadable file (and ``.bak``) stops the
pass with :class:`rmqlog.errors.CorruptStoreError`; ``repair=True`` sets it aside and the
levels resume from the log.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .. import crash_points, safe_open
from ..errors import MessagesDeletedError
from ..log.properties import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    SCHEDULE_TOPIC,
    ParsedProperties,
)
from ..log.writer_marker import writer_marker
from ..paths import parse_queue_dir_name
from ..queue.consume_queue import FILLER_SIZE
from .delay_offsets import FILE_NAME, load_delay_offsets, save_delay_offsets
from .timeup import Copies, StoredMessages, delivered_copies

if TYPE_CHECKING:
    from ..access.reader import QueueReader
    from ..parts import StoreParts
    from .timer import TimerDelivery

log = logging.getLogger(__name__)

#: Units read (and messages delivered) per step of a level: bounds a pass's memory.
DELIVER_BATCH = 65_536
#: Units whose records are read per step when not all of them are due by their tagsCode
#: (clock corrections, removed levels): bounds the reads of a pass that finds nothing due.
CHECK_WINDOW = 1_024
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
    ``reader``: its read path; ``wall_ms``: the clock (default: the store's, :mod:`rmqlog.clock`;
    tests drive it, or the store's manual clock)."""

    name = "rmq-scheduler"
    repeat_when_busy = True
    wait_first = False

    def __init__(
        self,
        parts: StoreParts,
        reader: QueueReader,
        put: Put,
        levels_ms: tuple[int, ...],
        *,
        interval_ms: int = 100,
        wall_ms: Callable[[], int] | None = None,
    ) -> None:
        self.parts = parts
        self.reader = reader
        self.put = put
        self.levels_ms = levels_ms
        self.interval_s = interval_ms / 1000.0
        self.wall_ms = wall_ms or parts.clock.wall_ms
        self.offsets_path = parts.paths.config_dir / FILE_NAME
        self.lock_path = parts.paths.root / LOCK_NAME
        self.last_error: BaseException | None = None
        self._thread_lock = threading.Lock()
        #: the timed messages' delivery (:mod:`rmqlog.schedule.timer`), run in each pass
        self.timer: TimerDelivery | None = None
        self._warned_removed: set[int] = set()  # levels no longer configured, warned about
        #: whether a message whose client msgId (``UNIQ_KEY``) is the second argument is stored
        #: in the topic named first (the facade sets it through the index files; ``None``
        #: without them): confirms a ``delayOffset.json`` offset no writer marker confirms
        self.delivered_probe: Callable[[str, str], bool] | None = None
        self._confirmed: dict[tuple[int, int], int] = {}  # (level, file's offset) -> confirmed

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No pass of this process runs while held (the replication calls that change what a
        pass reads: a replica truncation, a slave's copy of its master's delay offsets)."""
        with self._thread_lock:
            yield

    def log_cut(self) -> None:
        """The log was cut back (a replica truncation): what this scheduler remembers of it is
        forgotten, and the timer's index is rebuilt from the timer queue at the next pass (its
        files may hold entries of records that are gone; its progress, if past what the kept
        log's ``timer`` marker says, would skip them). Caller holds :meth:`paused`."""
        self._confirmed.clear()
        if self.timer is not None:
            self.timer.forget()

    def now_ms(self) -> int:
        """The scheduler's clock (``wall_ms``: the store's clock unless a test set another)."""
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
        queues = {
            parse_queue_dir_name(name)
            for name in safe_open.listdir_or_empty(self.parts.paths.consumequeue_dir / SCHEDULE_TOPIC)
        }
        top = len(self.levels_ms)
        for queue in sorted(q for q in queues if q is not None and q >= 0):
            level = queue + 1
            cq = self.parts.consume_queue(SCHEDULE_TOPIC, queue)
            bounds = self.reader.read_bounds(cq)
            done = state.writers.get(level_writer(level))
            in_file = offsets.get(level)
            if done is None and in_file is not None and bounds[0] < in_file <= bounds[1]:
                in_file = self.confirmed_offset(level, queue, in_file, bounds)
            start = resume_offset(level, in_file, int(done) if done is not None else None, bounds[0], bounds[1])
            if level > top:
                self._warn_removed(level, bounds[1] - max(start, bounds[0]))
            offsets[level] = self._deliver_level(level, queue, start, now, report, bounds)
        if offsets != before:
            save_delay_offsets(self.offsets_path, {k: v for k, v in offsets.items() if v or k in before})
            if crash_points.reached is not None:
                crash_points.reached("schedule.saved")
        if self.timer is not None:
            # timed messages go by the wall clock: a pass asked to run "later" than it (now_ms)
            # must not move the timer's progress past records not stored yet
            report.timed, lost = self.timer.deliver(int(min(now, wall - 1)))
            report.lost += lost
        return report

    def confirmed_offset(self, level: int, queue: int, claimed: int, bounds: tuple[int, int, int]) -> int:
        """How far the log confirms ``claimed``, a level's offset in ``delayOffset.json`` that
        no writer marker backs (a RocketMQ broker's deliveries, or a damaged file): the largest
        ``k <= claimed`` whose message before it (queue offset ``k - 1``) has its delivered copy
        in the log, found by bisection (a level is delivered in queue order); the queue's
        minimum when none is (or without the index files: nothing can be confirmed). So a
        wrong offset repeats deliveries at worst, never strands a message. Remembered per
        level and offset for the store's life (the file changes when a pass moves it)."""
        key = (level, claimed)
        if key not in self._confirmed:
            good, bad = bounds[0], claimed  # delivered up to `good`; not known past `bad`
            if self._delivered_before(queue, claimed, bounds):
                good = claimed
            while bad - good > 1:
                mid = (good + bad) // 2
                if self._delivered_before(queue, mid, bounds):
                    good = mid
                else:
                    bad = mid
            if good != claimed:
                log.warning(
                    "scheduler: level %d: %s says offset %d, but the log confirms deliveries only up to %d "
                    "(queue offsets %d..%d); resuming there (a message may be delivered again, none is lost)",
                    level,
                    FILE_NAME,
                    claimed,
                    good,
                    bounds[0],
                    bounds[1],
                )
            self._confirmed[key] = good
        return self._confirmed[key]

    def _delivered_before(self, queue: int, k: int, bounds: tuple[int, int, int]) -> bool:
        """Whether the last message of the level's queue below offset ``k`` has its delivered
        copy in the log (fillers hold none: the one before them decides; none left below
        ``k``, or records retention deleted meanwhile: nothing to deliver, true)."""
        lo, _, floor = bounds
        cq = self.parts.consume_queue(SCHEDULE_TOPIC, queue)
        while True:
            first = max(lo, k - CHECK_WINDOW)
            units = cq.read(first, k - first)
            real = np.flatnonzero(units["size"] != FILLER_SIZE)
            if len(real):
                break
            if first == lo:
                return True
            k = first
        row = real[-1:]
        try:
            columns = self.reader.read_unit_columns(cq, SCHEDULE_TOPIC, queue, first, units, row, floor, None)
        except MessagesDeletedError:
            return True
        props = ParsedProperties(StoredMessages.of(columns).properties)
        uniq, topic = props.column(PROPERTY_UNIQ_KEY)[0].as_py(), props.column(PROPERTY_REAL_TOPIC)[0].as_py()
        if self.delivered_probe is None or not uniq or not topic:
            return False  # nothing to confirm it with
        return self.delivered_probe(topic, uniq)

    def _warn_removed(self, level: int, waiting: int) -> None:
        """Once per level and process: a level no longer configured still holds messages."""
        if waiting <= 0 or level in self._warned_removed:
            return
        self._warned_removed.add(level)
        top = len(self.levels_ms)
        log.warning(
            "scheduler: delay level %d is no longer configured (message_delay_level has %d levels) but %d "
            "message(s) wait at it; they are delivered with level %d's delay (%d ms)",
            level,
            top,
            waiting,
            top,
            self.levels_ms[-1],
        )

    def _deliver_level(
        self,
        level: int,
        queue: int,
        start: int,
        now: int,
        report: PassReport,
        bounds: tuple[int, int, int],
    ) -> int:
        cq = self.parts.consume_queue(SCHEDULE_TOPIC, queue)
        lo, hi, floor = bounds
        pos = max(start, lo)
        if pos > start:
            report.lost += pos - start
            log.warning("scheduler: level %d: queue offsets %d..%d were deleted before delivery", level, start, pos)
        # a level no longer configured goes with the last configured one's delay
        delay = self.levels_ms[min(level, len(self.levels_ms)) - 1]
        removed = level > len(self.levels_ms)
        while pos < hi:
            units = cq.read(pos, min(DELIVER_BATCH, hi - pos))
            if not len(units):
                break
            due_at = units["tagsCode"].astype(np.int64)
            # candidates (the tagsCode is derived data): due by it, or implausibly late for the
            # level's delay (RocketMQ's correctDeliverTimestamp case); a removed level's
            # tagsCodes were computed with another delay: every unit is a candidate
            said_due = due_at <= now
            candidate = np.ones(len(units), bool) if removed else said_due | (due_at > now + delay)
            k = len(units) if candidate.all() else int(np.argmin(candidate))
            if not said_due[:k].all():
                k = min(k, CHECK_WINDOW)  # records read to decide: bounded while most are not due
            if k == 0:
                break
            rows = np.flatnonzero(units["size"][:k] != FILLER_SIZE)
            messages = None
            if len(rows):
                try:
                    messages = StoredMessages.of(
                        self.reader.read_unit_columns(cq, SCHEDULE_TOPIC, queue, pos, units[:k], rows, floor, None)
                    )
                except MessagesDeletedError as gone:
                    report.lost += gone.end - pos
                    pos = gone.end
                    continue
                # the record decides: never before its store time plus the level's delay
                late = np.flatnonzero(messages.stored + delay > now)
                if len(late):
                    first_late = int(late[0])
                    k = int(rows[first_late])  # units before it are due (fillers included)
                    messages = _head(messages, first_late) if first_late else None
            if k == 0:
                break
            end = pos + k
            if messages is not None:
                self.put(messages, delivered_copies(messages), writer_marker(level_writer(level), end))
                if crash_points.reached is not None:
                    crash_points.reached("schedule.delivered")
                report.delivered[level] = report.delivered.get(level, 0) + len(messages)
            pos = end
            if k < len(units):
                break
        return pos


def resume_offset(level: int, in_file: int | None, delivered: int | None, lo: int, hi: int) -> int:
    """Where a level's deliveries resume: ``delivered`` (the writer's sequence, from the log)
    when there is one (past ``hi``: ``hi``), else ``in_file`` (``delayOffset.json``; past
    ``hi``: ``lo``, see the module docstring); an offset below ``lo`` is returned as it is (the
    pass counts what was deleted before delivery). Each correction is logged with the offsets."""
    if delivered is not None:
        if in_file is not None and in_file > max(delivered, lo):
            # no pass writes an offset past its writer's sequence (but over deleted units, which
            # lie below the queue's minimum): the file is not the log's
            log.warning(
                "scheduler: level %d: %s says offset %d, but the log records deliveries up to %d (queue "
                "offsets %d..%d); resuming from the log",
                level,
                FILE_NAME,
                in_file,
                delivered,
                lo,
                hi,
            )
        start = delivered
    else:
        start = in_file if in_file is not None else 0
    if start > hi:
        # RocketMQ's correctDelayOffset clamps to the end; from the file that would skip every
        # message waiting there (the file is certainly wrong, so nothing of it is followed):
        # a level without a marker in the log resumes at its queue's minimum
        fixed = hi if delivered is not None else lo
        log.warning(
            "scheduler: level %d: offset %d (%s) is past the end of its queue (offsets %d..%d); corrected to %d",
            level,
            start,
            "the log" if delivered is not None else FILE_NAME,
            lo,
            hi,
            fixed,
        )
        start = fixed
    elif start < lo:
        log.warning(
            "scheduler: level %d: offset %d (%s) is below its queue's minimum %d (offsets %d..%d)",
            level,
            start,
            "the log" if delivered is not None else FILE_NAME,
            lo,
            lo,
            hi,
        )
    return start


def _head(messages: StoredMessages, n: int) -> StoredMessages:
    """The first ``n`` of ``messages``."""
    return StoredMessages(
        messages.offsets[:n],
        messages.flag[:n],
        messages.born[:n],
        messages.stored[:n],
        messages.body.slice(0, n),
        messages.properties.slice(0, n),
        None if messages.born_host is None else messages.born_host[:n],
        None if messages.sys_flag is None else messages.sys_flag[:n],
        None if messages.reconsume_times is None else messages.reconsume_times[:n],
    )
