"""A store with timed messages pending, for the timer-damage tests (tests/test_timer_damage.py)
and the fuzz test's timer cases (tests/test_fuzz_damage.py).

:func:`make_timed_store` makes one (:data:`N` timed messages, some delivered by a first pass,
the rest indexed, :data:`LATER` more in the timer queue only) and closes it cleanly.
:func:`deliver_after` reopens it (after the damage) and runs a pass at ``t0 + SECOND`` then
one after the last is due, and says what came out: each pending message must be delivered
exactly once, none before its time. Passes are driven by the scheduler's clock
(``scheduler.wall_ms``), never by waiting.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
from conftest import small_store_config

import rmqlog
from rmqlog.schedule.timer_wheel import TimerWheel, wheel_slots

#: a small wheel (2 * 120 + 3,600 slots of 24 bytes): a check reads it whole in no time
CFG = small_store_config(timer_max_delay_sec=120)
N, LATER = 30, 6
FIRST, SECOND, LAST = 10_000, 20_000, 60_000  # ms after t0: the passes


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def run_pass(s: rmqlog.MessageStore, at: int) -> int:
    """A scheduler pass as if the wall clock read ``at`` (it covers up to ``at - 1``)."""
    s.scheduler.wall_ms = lambda: at
    return s.deliver_due(at)


def delivered(s: rmqlog.MessageStore, topic: str = "T") -> Counter[bytes]:
    """Every body in ``topic``'s queues, with how many times it is there."""
    s.dispatch()
    got: Counter[bytes] = Counter()
    for q in range(s.topics()[topic].write_queue_nums):
        got.update(s.read_queue(topic, q, 0, 1 << 40).column("body").to_pylist())
    return got


def timer_wheel(root: Path) -> TimerWheel:
    """The timer's files of the store at ``root`` (of :data:`CFG`'s geometry), to look at or
    damage them."""
    return TimerWheel(
        root / "timer", wheel_slots(CFG.timer_max_delay_sec * 1000, CFG.timer_precision_ms), CFG.timer_precision_ms
    )


@dataclass
class Timed:
    """What :func:`make_timed_store` put: each body's due time (ms)."""

    t0: int
    due: dict[bytes, int]

    def due_by(self, at: int) -> set[bytes]:
        """Bodies a pass at ``at`` must have delivered (due at or before ``at - 1``)."""
        return {b for b, d in self.due.items() if d <= at - 1}


def _put_timed(s: rmqlog.MessageStore, due: dict[bytes, int]) -> None:
    s.put_batch(
        pa.table(
            {
                "topic": ["T"] * len(due),
                "body": list(due),
                "deliverTime": pa.array(np.array(list(due.values())), pa.int64()),
            }
        )
    )


def make_timed_store(root: Path, *, prefix: bytes = b"m", extra_first: int = 0) -> Timed:
    """A store at ``root``: :data:`N` timed messages due two a second (two to a bucket of the
    wheel) from ``t0 + 5 s`` (``t0``: the next second's start); a pass at ``t0 + FIRST`` (delivers the 10 due by then,
    indexes
    the rest); then :data:`LATER` more due from ``t0 + 25 s``, in the timer queue but not
    indexed yet (no pass since); closed cleanly. ``extra_first`` plain messages are put first
    (another store's commitlog offsets then differ)."""
    p = CFG.timer_precision_ms
    t0 = (now_ms() // p + 1) * p  # a bucket's start: two messages to a bucket whatever the clock
    due = {prefix + b"%02d" % i: t0 + 5000 + (i // 2) * 1000 + (i % 2) * 7 for i in range(N)}
    later = {prefix + b"L%d" % i: t0 + 25_000 + (i // 2) * 1000 + (i % 2) * 500 for i in range(LATER)}
    with rmqlog.MessageStore.open(root, CFG) as s:
        s.create_topic("T", 2)
        if extra_first:
            s.put_batch(pa.table({"topic": ["T"] * extra_first, "body": [b"plain%d" % i for i in range(extra_first)]}))
        _put_timed(s, due)
        assert run_pass(s, t0 + FIRST) == 10
        _put_timed(s, later)
        s.dispatch()
        assert s.max_offset("rmq_sys_wheel_timer", 0) == N + LATER  # (they were put more than 5 s ahead)
    return Timed(t0, due | later)


@dataclass
class Outcome:
    """What the passes after the damage delivered: ``early`` (bodies there before their time),
    ``late`` (bodies due by the middle pass and not there after it), ``duplicates`` (copies
    beyond the first), ``lost`` (bodies never delivered), ``foreign`` (bodies never put);
    ``error``: a typed error raised."""

    early: set[bytes] = field(default_factory=set)
    late: set[bytes] = field(default_factory=set)
    duplicates: int = 0
    lost: set[bytes] = field(default_factory=set)
    foreign: set[bytes] = field(default_factory=set)
    error: rmqlog.StoreError | None = None

    @property
    def ok(self) -> bool:
        return not (self.early or self.late or self.duplicates or self.lost or self.foreign or self.error)


def deliver_after(root: Path, timed: Timed, *, repair: bool = False) -> Outcome:
    """Reopen, pass at ``t0 + SECOND`` and ``t0 + LAST``: see :class:`Outcome`. Only a
    :class:`rmqlog.StoreError` is caught (anything else is a failure of the caller's test)."""
    out = Outcome()
    got: Counter[bytes] = Counter()
    try:
        with rmqlog.MessageStore.open(root, CFG, repair=repair) as s:
            run_pass(s, timed.t0 + SECOND)
            got = delivered(s)
            out.early = set(got) - timed.due_by(timed.t0 + SECOND)
            out.late = timed.due_by(timed.t0 + SECOND) - set(got)
            run_pass(s, timed.t0 + LAST)
            got = delivered(s)
    except rmqlog.StoreError as exc:
        out.error = exc
    out.duplicates = sum(n - 1 for n in got.values() if n > 1)
    out.foreign = set(got) - set(timed.due)
    out.lost = set(timed.due) - set(got)
    return out
