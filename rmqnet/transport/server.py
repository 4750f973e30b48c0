"""The listening side: :class:`RemotingServer` accepts connections and serves their requests
with one handler (the broker's processor table, the name server's).

Lifecycle: ``await start()`` binds (``127.0.0.1`` and a free port by default: ``port=0``,
read ``.port`` after); ``await stop(grace_s)`` stops accepting, stops reading new requests on
every connection (requests read but not started are answered ``SERVICE_NOT_AVAILABLE``),
waits up to ``grace_s`` for the requests in flight to be answered, then closes every
connection (what is written is flushed; a connection still not closed after the grace is
aborted).

Idle connections (``Limits.idle_ms``) and stalled ones (bytes to send, none sent for
``Limits.write_timeout_ms``) are closed by an :class:`~rmqnet.transport.idle.IdleSweeper` the
server runs on a timer of the event loop every ``sweep_interval_s`` (default: an eighth of the
shorter of the two, between 50 ms and 15 s), reading ``clock`` (default the event loop's);
``server.idle_sweeper`` is there for tests to drive with a manual clock instead
(``sweep_interval_s=0`` turns the timer off).
"""

from __future__ import annotations

import asyncio
import logging

from .connection import AnswerObserver, Connection, RequestHandler
from .idle import IdleSweeper, MonotonicClock
from .limits import Limits

log = logging.getLogger(__name__)


class RemotingServer:
    """Serves ``handler(conn, request)`` on every accepted connection (see the module docstring)."""

    def __init__(
        self,
        handler: RequestHandler,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        limits: Limits | None = None,
        clock: MonotonicClock | None = None,
        sweep_interval_s: float | None = None,
        backlog: int = 1024,
    ) -> None:
        self.handler = handler
        self.host = host
        self.limits = limits or Limits()
        self._requested_port = port
        self._backlog = backlog
        self._server: asyncio.Server | None = None
        self._conns: set[Connection] = set()
        self._stopping = False
        self.idle_sweeper: IdleSweeper | None = (
            IdleSweeper(lambda: self._conns, self.limits.idle_ms, clock, write_timeout_ms=self.limits.write_timeout_ms)
            if self.limits.sweep_ms
            else None
        )
        if sweep_interval_s is None:
            sweep_interval_s = min(15.0, max(0.05, self.limits.sweep_ms / 8000))
        self.sweep_interval_s = sweep_interval_s
        self._sweep_timer: asyncio.TimerHandle | None = None
        #: given to every connection accepted from now on (its answers measured; None: not)
        self.observer: AnswerObserver | None = None

    @property
    def port(self) -> int:
        """The port listened on (known after :meth:`start`)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the server is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def address(self) -> str:
        """``"host:port"`` listened on."""
        return f"{self.host}:{self.port}"

    @property
    def connections(self) -> list[Connection]:
        """The open connections now (a copy)."""
        return list(self._conns)

    def _make_connection(self) -> Connection:
        conn = Connection(self.handler, self.limits)
        conn.observer = self.observer
        conn.on_close.append(self._conns.discard)
        self._conns.add(conn)
        if self._stopping:  # accepted in the instant before close(): serve nothing on it
            conn.drain()
        return conn

    async def start(self) -> None:
        """Listen; raises ``OSError`` if the address cannot be bound."""
        if self._server is not None:
            raise RuntimeError("the server is already started")
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._make_connection, self.host, self._requested_port, backlog=self._backlog, reuse_address=True
        )
        if self.idle_sweeper is not None and self.sweep_interval_s > 0:
            self._sweep_timer = loop.call_later(self.sweep_interval_s, self._sweep)

    def _sweep(self) -> None:
        assert self.idle_sweeper is not None
        try:
            self.idle_sweeper.tick()
        except Exception:
            log.exception("the idle sweep failed")
        if not self._stopping:
            self._sweep_timer = asyncio.get_running_loop().call_later(self.sweep_interval_s, self._sweep)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop (see the module docstring); safe to call twice."""
        if self._server is None or self._stopping:
            return
        self._stopping = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
        self._server.close()  # no new connections
        conns = list(self._conns)
        for c in conns:
            c.drain()
        busy = [c for c in conns if c.in_flight]
        if busy:
            done, pending = await asyncio.wait([asyncio.ensure_future(c.wait_idle()) for c in busy], timeout=grace_s)
            for t in pending:
                t.cancel()
            if pending:
                log.warning(
                    "stopping with requests still in flight on %d connection(s) after %g s", len(pending), grace_s
                )
        for c in conns:
            c.close()
        if conns:
            waits = [asyncio.ensure_future(c.wait_closed()) for c in conns]
            # flushing answers to a peer that reads them; one that does not is aborted below
            _, pending = await asyncio.wait(waits, timeout=max(deadline - loop.time(), 0.1))
            for t in pending:
                t.cancel()
        for c in list(self._conns):
            c.abort()
        await self._server.wait_closed()
