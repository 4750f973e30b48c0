"""Closing idle connections (RocketMQ's ``IdleStateHandler`` + ``NettyConnectManageHandler``:
a channel with no read or write for ``serverChannelMaxIdleTimeSeconds``, 120 s, is closed) and
stalled ones (bytes to send, none sent for ``Limits.write_timeout_ms``: the peer stopped
reading its answers; a request in flight does not save it).

:class:`IdleSweeper` is a service in the store's style: ``run_once(now_ms)`` does one round
as of ``now_ms`` (milliseconds of a monotonic clock), so tests drive it with a
:class:`rmqlog.ManualClock` and no sleep. Its default clock is the event loop's
(:class:`LoopClock`): the transport asks its loop for the time and imports nothing of the store. The hot path reads no
clock: every read and write
bumps the connection's ``activity`` counter, and a round compares it with what the previous
round saw. A connection is idle from the first round that saw its counter unchanged; it is
closed once a round finds it unchanged for ``idle_ms`` (so it is closed between ``idle_ms``
and ``idle_ms`` + one round interval after its last traffic). A connection with a request in
flight (a held pull) is never idle. Stalls the same way, on the connection's ``sent`` count:
a round that finds bytes buffered and ``sent`` unchanged since the round that first saw it so
for ``write_timeout_ms`` closes it (what is buffered is dropped).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from .connection import Connection

log = logging.getLogger(__name__)


class MonotonicClock(Protocol):
    """What the transport reads the time from: seconds that never go back (``rmqlog.Clock``'s
    ``monotonic``; a :class:`rmqlog.ManualClock` is one)."""

    def monotonic(self) -> float: ...


class LoopClock:
    """The running event loop's time (``loop.time()``, monotonic seconds): the transport's and
    the name server's default clock. Read on the loop's thread only."""

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()


class IdleSweeper:
    """Closes connections idle for ``idle_ms`` or stalled for ``write_timeout_ms`` (see the
    module docstring; ``0`` turns either check off, not both).

    ``connections``: returns the connections to watch (the server's live set). ``clock``:
    where :meth:`tick` reads the time (its ``monotonic()``, in ms; default the loop's).
    """

    name = "idle-sweeper"

    def __init__(
        self,
        connections: Callable[[], Iterable[Connection]],
        idle_ms: int,
        clock: MonotonicClock | None = None,
        *,
        write_timeout_ms: int = 0,
    ) -> None:
        if idle_ms < 0 or write_timeout_ms < 0 or not (idle_ms or write_timeout_ms):
            raise ValueError(f"idle_ms and write_timeout_ms must be >= 0, one > 0, got {idle_ms}, {write_timeout_ms}")
        self.connections = connections
        self.idle_ms = idle_ms
        self.write_timeout_ms = write_timeout_ms
        self.clock: MonotonicClock = clock or LoopClock()

    def now_ms(self) -> int:
        return int(self.clock.monotonic() * 1000)

    def run_once(self, now_ms: int) -> bool:
        """One round as of ``now_ms``; returns whether it closed a connection."""
        closed_any = False
        for conn in list(self.connections()):
            if conn.closed:
                continue
            if self.write_timeout_ms and self._stalled(conn, now_ms):
                log.warning(
                    "closing %s: %d bytes to send and none sent for %d ms (the peer does not read)",
                    conn.remote,
                    conn.buffered,
                    now_ms - conn._stall_since_ms,
                )
                conn.abort()
                closed_any = True
                continue
            if not self.idle_ms:
                continue
            if conn.activity != conn._idle_seen or conn.in_flight:
                conn._idle_seen = conn.activity
                conn._idle_since_ms = now_ms
            elif now_ms - conn._idle_since_ms >= self.idle_ms:
                log.info("closing %s: no traffic for %d ms", conn.remote, now_ms - conn._idle_since_ms)
                conn.abort()  # nothing moved for idle_ms: what is buffered is not being read
                closed_any = True
        return closed_any

    def _stalled(self, conn: Connection, now_ms: int) -> bool:
        """Whether ``conn`` has had bytes to send and sent none for ``write_timeout_ms``."""
        sent = conn.sent
        if not conn.buffered or sent != conn._stall_seen:
            conn._stall_seen = sent if conn.buffered else -1
            conn._stall_since_ms = now_ms
            return False
        return now_ms - conn._stall_since_ms >= self.write_timeout_ms

    def tick(self) -> bool:
        """:meth:`run_once` as of the clock's time now."""
        return self.run_once(self.now_ms())
