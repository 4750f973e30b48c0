"""The figures the console's charts draw over the last minutes, kept in the console's memory
(the brokers keep no history of their rates): :class:`History`, series of ``(ms, value)``
points of bounded length, and :class:`Sampler`, the service (``run_once(now_ms)`` on the
console's clock) that adds the cluster's messages in and out per second at each round. A
group's lag is added by the group page's answers (:meth:`History.add` at most once per
``every_ms`` per series), so only groups someone looks at are followed."""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from .backend import ConsoleBackend, ConsoleError

log = logging.getLogger(__name__)
#: points kept per series: 120 rounds of 5 s are the last 10 minutes
POINTS = 120
#: the most series followed (a console left open on many groups forgets the oldest)
MAX_SERIES = 1024


class History:
    def __init__(self, every_ms: int = 5000, points: int = POINTS) -> None:
        self.every_ms = every_ms
        self.points = points
        self._series: dict[str, deque[tuple[int, float]]] = {}

    def add(self, name: str, now_ms: int, value: float) -> None:
        """Append a point unless the series got one less than ``every_ms`` ago."""
        s = self._series.get(name)
        if s is None:
            if len(self._series) >= MAX_SERIES:
                self._series.pop(next(iter(self._series)))
            s = self._series[name] = deque(maxlen=self.points)
        if s and now_ms - s[-1][0] < self.every_ms:
            return
        s.append((now_ms, float(value)))

    def series(self, name: str) -> list[list[float]]:
        """The points as ``[[ms, value], ...]``, oldest first (JSON for the page's chart)."""
        return [[t, v] for t, v in self._series.get(name, ())]


class Sampler:
    """Adds the cluster's total messages in and out per second (and each broker's) to the
    history at each round; a round the cluster does not answer adds nothing."""

    def __init__(self, backend: ConsoleBackend, history: History) -> None:
        self.backend = backend
        self.history = history
        self.last: dict[str, Any] | None = None

    def run_once(self, now_ms: int) -> None:
        try:
            status = self.backend.cluster()
        except ConsoleError as exc:
            log.warning("cluster sample: %s", exc)
            return
        self.record(status, now_ms)

    def record(self, status: dict[str, Any], now_ms: int) -> None:
        self.last = status
        totals = status.get("totals") or {}
        self.history.add("cluster.in", now_ms, totals.get("inTps", 0.0))
        self.history.add("cluster.out", now_ms, totals.get("outTps", 0.0))
        for b in status.get("brokers", []):
            if "error" not in b:
                name = f"{b['brokerName']}/{b['brokerId']}"
                self.history.add(f"broker.in.{name}", now_ms, b.get("inTps", 0.0))
                self.history.add(f"broker.out.{name}", now_ms, b.get("outTps", 0.0))
