"""Which queue a send goes to, and which brokers to avoid for a while: RocketMQ 4.9.8's
``MQFaultStrategy``, ``LatencyFaultToleranceImpl`` and ``TopicPublishInfo`` queue selection
(``client/.../latency/``, ``impl/producer/TopicPublishInfo.java``), on an injected clock.

The queues of a topic (:class:`QueueRef`) are listed as ``topicRouteData2TopicPublishInfo``
lists them: the route's queue datas sorted by broker name, each writable broker that has a
master contributing queues ``0..writeQueueNums-1``. One counter per producer
(``sendWhichQueue``) walks that list round robin.

Without ``sendLatencyFaultEnable`` (:attr:`FaultStrategy.enabled` false) a retry takes the
next queue whose broker is not the one that just failed (``selectOneMessageQueue(lastBrokerName)``).

With it, every send's outcome is recorded against its broker (``updateFaultItem``): the
latency ``L`` (ms) of a send that answered, or 30,000 for one that failed (``isolation``),
makes the broker unavailable for ``notAvailableDuration[i]`` where ``latencyMax[i]`` is the
largest bound ``<= L``::

    latencyMax           50   100   550     1000    2000     3000     15000
    notAvailableDuration  0     0   30000   60000   120000   180000   600000   (ms)

so a failed send keeps its broker out for 10 minutes, a 600 ms answer for 30 s, and a
broker answering within 100 ms is never avoided. The next queue in the walk whose broker is
available is chosen; when none is, one of the better half of the known brokers (sorted:
available first, then lower latency, then earlier end of unavailability) is tried anyway, on
a queue of its own (``pickOneAtLeast``), so that sends never stop while brokers exist.

Differences from Java: the first send takes the first queue (Java's counter starts at a random value), so tests
can name the queues a sequence of sends reaches; times come from the producer's clock
(``monotonic``), so a :class:`rmqlog.ManualClock` drives the durations in tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from rmqlog import Clock

from ..remoting.names import PERM_WRITE
from ..remoting.route import TopicRouteData

#: ``MQFaultStrategy.latencyMax`` and ``notAvailableDuration`` (ms)
LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_MS = (0, 0, 30000, 60000, 120000, 180000, 600000)
#: the latency a failed send counts as (``updateFaultItem(..., isolation=true)``)
ISOLATION_LATENCY_MS = 30000


@dataclass(frozen=True, slots=True, order=True)
class QueueRef:
    """A message queue (``MessageQueue``): ordered by topic, broker name, queue id, as Java's
    ``compareTo``."""

    topic: str
    broker_name: str
    queue_id: int


def publish_queues(topic: str, route: TopicRouteData, max_queues: int | None = None) -> list[QueueRef]:
    """The writable queues of ``route`` in ``TopicPublishInfo``'s order (module docstring);
    ``max_queues`` caps each broker's count (a route borrowed from ``TBW102``)."""
    masters = {b.broker_name for b in route.broker_datas if b.master_addr()}
    out: list[QueueRef] = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if q.perm & PERM_WRITE and q.broker_name in masters:
            n = q.write_queue_nums if max_queues is None else min(q.write_queue_nums, max_queues)
            out.extend(QueueRef(topic, q.broker_name, i) for i in range(n))
    return out


@dataclass(slots=True)
class _FaultItem:
    name: str
    latency_ms: int
    start_ms: float  # available again from this (monotonic) time on


class LatencyFaultTolerance:
    """``LatencyFaultToleranceImpl``: per broker name, its last latency and until when it is
    unavailable."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._items: dict[str, _FaultItem] = {}
        self._worst = itertools.count(1)

    def _now_ms(self) -> float:
        return self.clock.monotonic() * 1000.0

    def update(self, name: str, latency_ms: int, not_available_ms: int) -> None:
        self._items[name] = _FaultItem(name, latency_ms, self._now_ms() + not_available_ms)

    def is_available(self, name: str) -> bool:
        item = self._items.get(name)
        return item is None or self._now_ms() >= item.start_ms

    def remove(self, name: str) -> None:
        self._items.pop(name, None)

    def pick_one_at_least(self) -> str | None:
        """One of the better half of the known brokers, in turn (``pickOneAtLeast``)."""
        if not self._items:
            return None
        now = self._now_ms()
        ranked = sorted(self._items.values(), key=lambda f: (now < f.start_ms, f.latency_ms, f.start_ms))
        half = len(ranked) // 2
        return ranked[0].name if half <= 0 else ranked[next(self._worst) % half].name

    def snapshot(self) -> dict[str, tuple[int, float]]:
        """Broker name -> (last latency ms, ms until available; <= 0: available)."""
        now = self._now_ms()
        return {n: (f.latency_ms, f.start_ms - now) for n, f in self._items.items()}


class FaultStrategy:
    """``MQFaultStrategy`` with ``TopicPublishInfo``'s counter (module docstring)."""

    def __init__(
        self,
        clock: Clock,
        *,
        enabled: bool = False,
        latency_max_ms: Sequence[int] = LATENCY_MAX_MS,
        not_available_ms: Sequence[int] = NOT_AVAILABLE_MS,
    ) -> None:
        if len(latency_max_ms) != len(not_available_ms) or list(latency_max_ms) != sorted(latency_max_ms):
            raise ValueError("latency_max_ms must be ascending and as long as not_available_ms")
        self.enabled = enabled
        self.latency_max_ms = tuple(latency_max_ms)
        self.not_available_ms = tuple(not_available_ms)
        self.tolerance = LatencyFaultTolerance(clock)
        self._which = itertools.count(0)  # sendWhichQueue.incrementAndGet(): the first send takes the first queue

    def _next(self) -> int:
        return next(self._which)

    def _round_robin(self, queues: Sequence[QueueRef], last_broker: str | None = None) -> QueueRef:
        if last_broker is not None:
            for _ in range(len(queues)):
                q = queues[self._next() % len(queues)]
                if q.broker_name != last_broker:
                    return q
        return queues[self._next() % len(queues)]

    def select(self, queues: Sequence[QueueRef], last_broker: str | None) -> QueueRef:
        """The queue of the next send (``selectOneMessageQueue``); ``queues`` not empty,
        ``last_broker`` the broker of the attempt that just failed (``None`` at first)."""
        if not queues:
            raise ValueError("no queue to select from")
        if not self.enabled:
            return self._round_robin(queues, last_broker)
        index = self._next()
        for i in range(len(queues)):
            q = queues[(index + i) % len(queues)]
            if self.tolerance.is_available(q.broker_name):
                return q
        not_best = self.tolerance.pick_one_at_least()
        if not_best is not None:
            nums = sum(1 for q in queues if q.broker_name == not_best)
            if nums > 0:
                self._next()  # Java draws a queue first (tpInfo.selectOneMessageQueue()), then replaces it
                return QueueRef(queues[0].topic, not_best, self._next() % nums)
            self.tolerance.remove(not_best)
        return self._round_robin(queues)

    def not_available_for(self, latency_ms: int) -> int:
        """``computeNotAvailableDuration``."""
        for bound, duration in zip(reversed(self.latency_max_ms), reversed(self.not_available_ms), strict=True):
            if latency_ms >= bound:
                return duration
        return 0

    def update(self, broker_name: str, latency_ms: int, isolation: bool) -> None:
        """A send's outcome (``updateFaultItem``): nothing when not enabled."""
        if self.enabled:
            duration = self.not_available_for(ISOLATION_LATENCY_MS if isolation else latency_ms)
            self.tolerance.update(broker_name, latency_ms, duration)
