"""Crash points: named places inside the store's operations where a crash test stops a process.

A kill test must know that its SIGKILL landed inside the operation it names, not before or
after it: timing a kill from outside misses a dispatch that takes 20 ms. So the store marks
the moments worth crashing at, and a test child asks to be stopped at one of them:

    RMQLOG_CRASH_AT=<point>:<n>     (set in the child's environment before it imports rmqlog)

The ``n``-th time (1-based) the process reaches ``<point>``, it writes the line
``crash point <point> <n>`` to its standard output (file descriptor 1, unbuffered) and waits
there for a signal, forever: the parent reads that line, kills the child (SIGKILL), and knows
exactly where it died. A child that never reaches the point ends normally without the line,
and the test fails on that. An unknown point name is a ``ValueError`` at import (a misspelt
point would otherwise never be reached, and a kill test would pass without killing anything).

Off (the environment variable unset, the normal case) the store's cost is one module
attribute load and a ``None`` comparison per point reached, once per batch or file step,
never per message::

    if crash_points.reached is not None:
        crash_points.reached("dispatch.units")

The points (each where a crash leaves the most to recover):
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

#: point -> where it is; the moment just after what the description says
POINTS = {
    "append.written": "a batch's records are written past the published tail, the append state not yet published",
    "append.published": (
        "a batch is published (append.state), the append lock still held, nothing flushed or dispatched"
    ),
    "dispatch.queue": "a dispatched run's units are written into one of its queues, its other queues not yet",
    "dispatch.units": "a dispatched run's consume-queue units are written, its index entries not yet",
    "dispatch.position": "a dispatch round's units and index entries are written, dispatch.state not yet moved",
    "index.entries": "an index file's new entries are written, its hash slots and header not yet",
    "index.slots": "an index file's hash slots point at the new entries, its header (indexCount) not yet",
    "index.created": "a new index file is made under its temporary name, not yet linked into place",
    "schedule.delivered": "a delay level's batch of copies is appended, config/delayOffset.json not yet saved",
    "schedule.saved": "config/delayOffset.json is saved, the timer's part of the pass not yet run",
    "timer.enqueued": (
        "a batch of timer-queue units is linked into timer/log and timer/wheel, timer/state not yet saved"
    ),
    "timer.delivered": "a batch of timed messages' copies is appended, timer/state not yet saved",
    "delete.recorded": (
        "a topic's delete is recorded (deletedTopics.json, pending), its config entry, offsets "
        "and units not yet removed"
    ),
    "delete.config": "a topic's delete removed its topics.json entry, its offsets and units not yet",
    "delete.offsets": "a topic's delete removed every group's offsets of it, its units not yet",
    "delete.units": (
        "a topic's delete removed one queue's units, its other queues' not yet, the delete not yet marked done"
    ),
    "truncate.flushed": "a replica truncation lowered flush.state, the append state not yet published",
    "truncate.published": "a replica truncation published the cut append state, units and commitlog bytes not yet cut",
    "truncate.queues": (
        "a replica truncation cut the consume-queue units and index entries, the commitlog bytes not yet"
    ),
    "truncate.cut": "a replica truncation cut the commitlog, the checkpoint not yet written",
}

ENV = "RMQLOG_CRASH_AT"

#: ``None`` unless :data:`ENV` is set: then called with a point's name each time one is reached
reached: Callable[[str], None] | None = None


def _stopper(point: str, n: int) -> Callable[[str], None]:
    if point not in POINTS:
        raise ValueError(f"{ENV}: unknown crash point {point!r}; known: {', '.join(sorted(POINTS))}")
    if n < 1:
        raise ValueError(f"{ENV}: the count must be 1 or more, got {n}")
    seen = 0

    def stop(name: str) -> None:
        nonlocal seen
        if name != point:
            return
        seen += 1
        if seen == n:
            os.write(1, f"crash point {point} {n}\n".encode())
            while True:  # until the test's SIGKILL
                signal.pause()

    return stop


def _from_env(value: str | None) -> Callable[[str], None] | None:
    if not value:
        return None
    point, _, count = value.rpartition(":")
    if not point or not count.isdigit():
        raise ValueError(f"{ENV} must be <point>:<n>, got {value!r}")
    return _stopper(point, int(count))


reached = _from_env(os.environ.get(ENV))
