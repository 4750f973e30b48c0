"""The name server as a running service: :class:`NameServer` on the transport, its expiry on a
timer, and a clean stop.

``await NameServerProcess(host, port).start()`` listens (127.0.0.1 by default; port 0 picks a
free one, read :attr:`NameServerProcess.port`); every request is answered by the core at the
clock's monotonic time in ms (the core only compares times: a broker's last registration with
now; a wall clock that steps would expire brokers early or late); a connection that closes drops the brokers registered
over it; every
:attr:`BrokerExpiry.interval_ms` the expiry drops brokers silent for 120 s and closes their
connections. ``await stop()`` stops accepting, answers what is in flight and closes every
connection. :meth:`NameServerProcess.serve` runs until SIGTERM or SIGINT, then stops.
``config`` (:class:`~rmqnet.namesrv.config.NamesrvConfig`, namesrv.conf) sets who may
register brokers. With ``metrics_listen``, ``/metrics`` is served there on a thread of its own
(:mod:`rmqnet.namesrv.metrics`); its answers are counted either way.

Footprint: the process imports the wire (:mod:`rmqnet.remoting`), the transport and this
package, nothing of the store, pyarrow, pandas or numpy (a routing table needs none of them;
``tests/wire/test_namesrv_footprint.py`` checks it). The default clock is the event loop's.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from ..metrics import RpcLatency
from ..remoting import RemotingCommand
from ..transport import Connection, Limits, LoopClock, MonotonicClock, RemotingServer
from .config import NamesrvConfig
from .server import BrokerExpiry, NameServer

log = logging.getLogger(__name__)

#: RocketMQ's name server port (``NettyServerConfig.listenPort`` as ``mqnamesrv`` sets it)
DEFAULT_PORT = 9876


class NameServerProcess:
    """One name server on a socket (see the module docstring)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        clock: MonotonicClock | None = None,
        limits: Limits | None = None,
        config: NamesrvConfig | None = None,
        metrics_listen: tuple[str, int] | None = None,
    ) -> None:
        self.clock: MonotonicClock = clock or LoopClock()
        self.config = config or NamesrvConfig()
        self.server = NameServer(self.config.policy())
        self.expiry = BrokerExpiry(self.server)
        self.remoting = RemotingServer(self._handle, host=host, port=port, limits=limits, clock=self.clock)
        #: the answers' latency (``rocketmq_rpc_latency``), counted whether or not /metrics is served
        self.rpc = RpcLatency()
        self.remoting.observer = self.rpc.observe
        #: ``/metrics`` on this address (None: not served; :mod:`rmqnet.namesrv.metrics`)
        self.metrics_listen = metrics_listen
        self.metrics: Any = None
        self._timer: asyncio.TimerHandle | None = None
        self._stopping = False

    def now_ms(self) -> int:
        """The clock's monotonic time in ms: the core's ``now_ms``."""
        return int(self.clock.monotonic() * 1000)

    @property
    def port(self) -> int:
        return self.remoting.port

    @property
    def address(self) -> str:
        return self.remoting.address

    def _handle(self, conn: Connection, req: RemotingCommand) -> RemotingCommand | None:
        if "namesrv" not in conn.attrs:  # the first request of this connection: watch its end
            conn.attrs["namesrv"] = True
            conn.on_close.append(self._closed)
        return self.server.handle(req, self.now_ms(), conn, conn.remote)

    def _closed(self, conn: Connection) -> None:
        self.server.connection_closed(conn)

    async def start(self) -> None:
        """Listen and start the expiry timer; ``OSError`` if the address cannot be bound."""
        await self.remoting.start()
        if self.metrics_listen is not None:
            from .metrics import endpoint  # (prometheus_client only when asked)

            self.metrics = endpoint(self, *self.metrics_listen)
            try:
                self.metrics.start()
            except OSError:
                await self.remoting.stop(0)
                raise
        self._schedule()
        log.info("name server listening on %s", self.address)

    def _schedule(self) -> None:
        if not self._stopping:
            self._timer = asyncio.get_running_loop().call_later(self.expiry.interval_ms / 1000, self._expire)

    def _expire(self) -> None:
        try:
            for _, conn in self.expiry.run_once(self.now_ms()):
                if isinstance(conn, Connection):
                    conn.close()  # as Java closes an expired broker's channel
        except Exception:  # a failed scan must not end the timer
            log.exception("the broker expiry scan failed")
        self._schedule()

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, answer what is in flight (up to ``grace_s``), close every connection."""
        self._stopping = True
        if self._timer is not None:
            self._timer.cancel()
        await self.remoting.stop(grace_s)
        if self.metrics is not None:
            self.metrics.stop()
        log.info("name server stopped")

    async def serve(self, ready: asyncio.Event | None = None) -> None:
        """Start, run until SIGTERM or SIGINT, stop. ``ready`` is set once listening."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await self.start()
            if ready is not None:
                ready.set()
            await stop.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await self.stop()
