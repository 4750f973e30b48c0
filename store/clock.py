"""The store's clock: the one place that reads the time.

Every part of a store that needs the time asks the clock given to the store at open
(``MessageStore.open(root, config, clock=...)``, default :data:`SYSTEM_CLOCK`), never the
``time`` module (``tests/test_layout.py`` checks the source: this is the one module allowed
to read it). Two readings:

- :meth:`Clock.wall_ms`: the wall clock, ms since the epoch (int). Store and born
  timestamps, client msgIds, due times of delayed and timed messages, retention's rules,
  index file names, checkpoint plausibility, config-file stamps. It may go back (an NTP step,
  a test): the parts that need an order keep it themselves (a store time never goes back
  within a store: the append state's ``storeTimestamp`` is its floor).
- :meth:`Clock.monotonic`: seconds that never go back, of no fixed origin (float). Intervals
  only: when a service is due, how long to wait for a concurrent writer, how long a disk
  check holds, the Spark source's admission control.

:class:`SystemClock` reads the machine's clocks. :class:`ManualClock` is a test's clock: it
reads what it was set to and moves only when told (:meth:`ManualClock.set`,
:meth:`ManualClock.advance`), so a test drives delays, retention and services without
waiting. The store's clock is also the clock of its timed-message passes, which cover time
up to the clock read before the pass took the append lock (minus 1 ms): with a manual clock,
a test puts a timed message, advances the clock past its due time and runs
``deliver_due()``.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

from .errors import InvalidArgumentError


@runtime_checkable
class Clock(Protocol):
    """What a store reads the time from (see the module docstring)."""

    def wall_ms(self) -> int:
        """The wall clock: ms since the epoch; may go back."""
        ...

    def monotonic(self) -> float:
        """Seconds that never go back (of no fixed origin): for intervals only."""
        ...


class SystemClock:
    """The machine's clocks: ``time.time_ns`` (wall) and ``time.monotonic``."""

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def __repr__(self) -> str:
        return "SystemClock()"


#: the clock of a store opened without one, and the default of every part that takes one
SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that moves only when told: a test's clock (thread-safe).

    ``wall_ms`` starts at ``start_ms`` (default: the system wall clock now, so store times
    look real), ``monotonic`` at ``0.0``. :meth:`advance` moves both by the same amount;
    :meth:`set` sets the wall clock only (it may go back, as a real one can), leaving
    ``monotonic`` where it is, since that one never goes back.
    """

    def __init__(self, start_ms: int | None = None) -> None:
        if start_ms is not None and (not isinstance(start_ms, int) or isinstance(start_ms, bool)):
            raise InvalidArgumentError(f"start_ms must be an int (ms since the epoch), got {type(start_ms).__name__}")
        self._lock = threading.Lock()
        self._wall_ms = SYSTEM_CLOCK.wall_ms() if start_ms is None else start_ms
        self._monotonic = 0.0

    def wall_ms(self) -> int:
        with self._lock:
            return self._wall_ms

    def monotonic(self) -> float:
        with self._lock:
            return self._monotonic

    def set(self, wall_ms: int) -> None:
        """Set the wall clock to ``wall_ms`` (back or ahead); the monotonic clock stays."""
        if not isinstance(wall_ms, int) or isinstance(wall_ms, bool):
            raise InvalidArgumentError(f"wall_ms must be an int (ms since the epoch), got {type(wall_ms).__name__}")
        with self._lock:
            self._wall_ms = wall_ms

    def advance(self, ms: int) -> int:
        """Move both clocks ``ms`` (>= 0) ahead; returns the new wall time."""
        if not isinstance(ms, int) or isinstance(ms, bool) or ms < 0:
            raise InvalidArgumentError(f"ms must be an int >= 0 (a clock never advances backwards), got {ms!r}")
        with self._lock:
            self._wall_ms += ms
            self._monotonic += ms / 1000.0
            return self._wall_ms

    def __repr__(self) -> str:
        return f"ManualClock(wall_ms={self._wall_ms}, monotonic={self._monotonic})"


def clock_arg(clock: object) -> Clock:
    """``clock`` checked as a store's clock (``None``: :data:`SYSTEM_CLOCK`); else
    :class:`InvalidArgumentError`."""
    if clock is None:
        return SYSTEM_CLOCK
    if not isinstance(clock, Clock) or not (callable(clock.wall_ms) and callable(clock.monotonic)):
        raise InvalidArgumentError(
            f"clock must have wall_ms() and monotonic() (a rmqlog.clock.Clock), got {type(clock).__name__}"
        )
    return clock
