"""Under ``SYNC_FLUSH``: the POP log's appends on disk before the answers that depend on them.

RocketMQ stores its checkpoints and acks as messages of its revive topic, so under
``flushDiskType=SYNC_FLUSH`` a pop or ack is answered after they are flushed. Here the POP log
(:class:`rmqlog.PopLog`) is written before every answer and survives a process kill through the
page cache; :class:`PopLogSync` adds the power-loss half: a pop, ack or change answers once an
``fsync`` covering its write returned. The ``fsync`` runs in a worker thread, never on the
event loop, one for every waiter of a turn of the loop at once (a group commit, as the sends'
flush): it starts at the end of the turn, and waiters that arrive while one runs get the next. Under ``ASYNC_FLUSH``
nothing waits (the log is synced at
a clean stop).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from rmqlog import PopLog

log = logging.getLogger(__name__)


class PopLogSync:
    """The group commit of ``log``'s appends, when ``enabled()`` (the broker's ``sync_flush``
    now)."""

    def __init__(self, log: PopLog, enabled: Callable[[], bool]) -> None:
        self.log = log
        self.enabled = enabled
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._running = False
        self._scheduled = False
        #: fsyncs made (tests count them)
        self.syncs = 0

    @property
    def busy(self) -> bool:
        """A sync runs or is about to (the log must not be rewritten meanwhile)."""
        return self._running or self._scheduled

    def wait(self) -> asyncio.Future[None] | None:
        """A future done once every append so far is on disk (its exception: the ``OSError``
        of a failed ``fsync``), or ``None`` when nothing is to wait for (``ASYNC_FLUSH``, or
        every append already synced). Call on the event loop's thread."""
        if not self.enabled() or self.log.writes <= self.log.synced_writes:
            return None
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append((self.log.writes, fut))
        if not self._running and not self._scheduled:
            # started at the end of this turn of the loop: every request of the turn shares it
            self._scheduled = True
            loop.call_soon(self._start, loop)
        return fut

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = False
        self._running = True
        loop.run_in_executor(None, self.log.sync).add_done_callback(self._done)

    def _done(self, f: asyncio.Future[int]) -> None:
        self._running = False
        exc = f.exception() if not f.cancelled() else asyncio.CancelledError()
        covered = self.log.synced_writes
        if exc is None:
            self.syncs += 1
            covered = self.log.synced_writes = max(self.log.synced_writes, f.result())
        else:
            log.error("syncing the POP log failed: %s: %s", type(exc).__name__, exc)
        keep: list[tuple[int, asyncio.Future[None]]] = []
        for target, fut in self._waiters:
            if fut.done():
                continue
            if exc is not None:
                fut.set_exception(exc)
            elif target <= covered:
                fut.set_result(None)
            else:
                keep.append((target, fut))
        self._waiters = keep
        if keep and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._start, asyncio.get_running_loop())


__all__ = ["PopLogSync"]
