"""The broker process: ``rmqlog broker ROOT -c broker.conf [--listen HOST:PORT] [--namesrv ADDR]``.

:class:`BrokerProcess` (all on one asyncio loop):

1. binds the listening socket (``--listen``, else ``brokerIP1:listenPort``; ``127.0.0.1`` by
   default), so the advertised address and the store's STOREHOST carry the real port;
2. opens the store root as its first opener (recovery as any first open does) with the
   store's keys of ``broker.conf``, and starts the store's services (dispatcher, retention,
   scheduler: not on a ``SLAVE``, whose master's deliveries arrive as records);
3. builds the :class:`~rmqnet.broker.broker.Broker`, starts its replication role
   (:mod:`rmqnet.broker.replication`: a master's HA server on ``haListenPort``, a slave's
   link to its master) and serves it
   (``RemotingServer(lambda conn, req: broker.table.process(broker, conn, req), ...)``);
4. with ``grpcListenPort`` set, starts the gRPC endpoint (:mod:`rmqnet.broker.grpc_server`,
   RocketMQ 5's protocol) on the same host and the same event loop (``grpc.aio``: a gRPC
   send reaches the send path's futures in the loop that puts them; docs/decisions.md) and
   prints ``broker <name> grpc at <ip:port>``;
5. runs the broker's services (registration with the name servers among them when
   ``namesrvAddr`` is set: :meth:`Broker.add_registrar`) every ``SERVICE_INTERVAL_S``;
6. prints one line ``broker <name> ready at <ip:port>`` (tests wait for it), and with
   ``metricsExporterType=PROM`` a second, ``metrics at http://<ip:port>/metrics`` (the endpoint
   started with step 4, :mod:`rmqnet.broker.metrics_export`);
7. on SIGTERM or SIGINT: refuses new sends, stops accepting, lets requests in flight finish
   (``grace_s``), closes the broker's services (:meth:`Broker.close`: the state tables' last
   persist, :mod:`rmqnet.broker.state`; the registrar unregisters), flushes and closes the store: the
   next open is a normal one (no recovery). :func:`main` then returns 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmqlog import ConfigError, MessageStore, StoreConfig, StoreError, SystemClock

from .. import transport
from ..metrics import RpcLatency
from ..remoting import RemotingCommand
from ..remoting.address import parse_host_port
from .broker import Broker
from .config import BrokerConfig
from .grpc_server import GrpcEndpoint
from .registration import Registrar
from .serve_lock import RootServedError, ServeLock

if TYPE_CHECKING:
    from ..transport import Connection, RequestHandler

log = logging.getLogger(__name__)

#: how often the broker's services run (registration keeps its own 30 s period inside)
SERVICE_INTERVAL_S = 0.1
#: how long requests in flight may take to finish at a stop
GRACE_S = 5.0


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too); ``ValueError`` naming what is wrong."""
    return parse_host_port("--listen", listen, 0)  # (AddressError: a ValueError)


def _transport() -> Any:
    """``rmqnet.transport`` (the asyncio server): the tests hand a process a stand-in here."""
    return transport


#: exit statuses of :func:`main`, as the name server's and the store command's: 0 a clean
#: stop, 2 what was asked is wrong (broker.conf, --listen, the ACL files), 3 it cannot be done
#: (an address that cannot be bound, a root another broker serves), 1 the store cannot be opened
OK, STORE, WRONG, CANNOT = 0, 1, 2, 3


class CannotListen(Exception):
    """The broker's or its HA service's address cannot be bound (``address``; ``strerror``:
    the system's reason, e.g. "Address already in use")."""

    def __init__(self, address: str, exc: OSError) -> None:
        self.address = address
        self.strerror = exc.strerror or str(exc)
        super().__init__(f"cannot listen on {address}: {self.strerror}")


class BrokerProcess:
    """One broker serving ``root`` (see the module docstring)."""

    def __init__(
        self, root: str | Path, config: BrokerConfig, *, host: str | None = None, port: int | None = None
    ) -> None:
        self.root = Path(root)
        self.config = config
        self.host = host or config.broker_ip1
        self.port = config.listen_port if port is None else port
        self.store: MessageStore | None = None
        self.broker: Broker | None = None
        self.server: Any = None
        #: the gRPC endpoint (``grpcListenPort``; None: not served)
        self.grpc: GrpcEndpoint | None = None
        self._stop = asyncio.Event()
        self._services_task: asyncio.Task[None] | None = None
        #: ``/metrics`` (``metricsExporterType=PROM``; None: off)
        self.metrics: Any = None
        #: the answers' latency (the broker's ``metrics.rpc``)
        self.rpc = RpcLatency()
        self._served = ServeLock(self.root)

    async def start(self) -> str:
        """Bind, open the store, build the broker, serve; returns the advertised address."""
        transport = _transport()
        # the handler reads self.broker when a request comes: the socket is bound before the
        # store opens (its STOREHOST needs the real port), and no request is read before the
        # broker is set (nothing yields to the loop in between)
        handler: RequestHandler = self._handle  # (what the transport calls: mypy holds the two alike)
        self.server = transport.RemotingServer(
            handler, host=self.host, port=self.port, limits=transport.Limits(**self.config.limits())
        )
        # every answer measured from the first connection on (rocketmq_rpc_latency), into the
        # broker's figures once it is built (rmqnet.broker.metrics)
        self.server.observer = self.rpc.observe
        try:
            await self.server.start()
        except OSError as exc:  # taken, or not an address of this host
            raise CannotListen(f"{self.host}:{self.port}", exc) from None
        try:
            port = self.server.port
            advertised_ip = self.config.broker_ip1 if self.host in ("0.0.0.0", "::") else self.host
            config = self.config.replace(listen_port=port, broker_ip1=advertised_ip)
            store_config: StoreConfig = config.store.replace(store_host=config.advertised(port))
            self.store = MessageStore.open(self.root, store_config)
            self._served.acquire()  # one broker per root (RootServedError): before any service runs
            self.store.start_services(scheduler=not config.slave)  # a slave's deliveries come from its master
            self.broker = Broker(
                self.store, config, clock=SystemClock(), address=config.advertised(port), background_persist=True
            )
            try:
                await self.broker.replication.start(self.host, config.ha_port(self.port))
            except OSError as exc:  # a configured haListenPort that is taken
                raise CannotListen(f"{self.host}:{config.ha_port(self.port)} (haListenPort)", exc) from None
            if config.grpc_listen_port is not None:
                self.grpc = GrpcEndpoint(self.broker, self.host, config.grpc_listen_port, advertised_host=advertised_ip)
                try:
                    await self.grpc.start()
                except OSError as exc:  # grpcListenPort taken
                    raise CannotListen(f"{self.host}:{config.grpc_listen_port} (grpcListenPort)", exc) from None
            await self._start_metrics(self.broker)
            self._add_registrar(self.broker)
        except BaseException:
            await self.server.stop(0)
            if self.grpc is not None:
                await self.grpc.stop(0)
            if self.metrics is not None:
                await self.metrics.close()
            if self.broker is not None:
                await self.broker.replication.close()
            if self.store is not None:
                self.store.close()
            self._served.release()
            raise
        self._services_task = asyncio.create_task(self._run_services())
        return self.broker.address

    def _handle(
        self, conn: Connection, req: RemotingCommand
    ) -> RemotingCommand | None | Awaitable[RemotingCommand | None]:
        """Every request of every connection: the broker's processor table (the connection is
        the handler's peer)."""
        broker = self.broker
        assert broker is not None
        return broker.table.process(broker, conn, req)

    async def _start_metrics(self, broker: Broker) -> None:
        """With ``metricsExporterType=PROM``: answers measured, ``/metrics`` served on its own
        thread (:mod:`rmqnet.broker.metrics_export`); ``OSError`` when its address is taken."""
        server = self.server
        broker.metrics.rpc = self.rpc
        broker.connection_count = lambda: len(server.connections)
        if broker.config.metrics_exporter_type != "PROM":
            return
        from .metrics_export import endpoint  # (prometheus_client only when asked)

        self.metrics = endpoint(broker)
        try:
            await self.metrics.serve()
        except OSError as exc:  # metricsPromExporterPort taken
            c = broker.config
            raise CannotListen(
                f"{c.metrics_prom_exporter_host}:{c.metrics_prom_exporter_port} (metricsPromExporterPort)", exc
            ) from None
        log.info("metrics at http://%s/metrics", self.metrics.address)

    @staticmethod
    def _add_registrar(broker: Broker) -> None:
        """Registration with the name servers (:class:`~rmqnet.broker.registration.Registrar`)
        when ``namesrvAddr`` is set, advertising the HA address the replication bound."""
        if not broker.config.namesrv_list():
            return
        broker.add_registrar(Registrar(broker, ha_server_addr=broker.replication.ha_server_addr))

    async def _run_services(self) -> None:
        assert self.broker is not None
        while not self._stop.is_set():
            try:
                self.broker.run_services()
            except Exception:
                log.exception("a broker service failed (it runs again next round)")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), SERVICE_INTERVAL_S)

    def request_stop(self) -> None:
        """Begin a clean stop (the signal handlers call this)."""
        if self.broker is not None:
            self.broker.begin_stop()
        self._stop.set()

    async def wait_stopped(self, grace_s: float = GRACE_S) -> None:
        """Wait for :meth:`request_stop`, then stop: no new connections, requests in flight
        answered, unregistered, the store flushed and closed."""
        await self._stop.wait()
        if self._services_task is not None:
            await self._services_task
        stops = [self.server.stop(grace_s)] if self.server is not None else []
        if self.grpc is not None:
            stops.append(self.grpc.stop(grace_s))
        await asyncio.gather(*stops)
        if self.metrics is not None:
            await self.metrics.close()
        if self.broker is not None:
            await self.broker.close()  # the last persist; the registrar unregisters
        if self.store is not None:
            self.store.close()
        self._served.release()


async def serve(
    root: str | Path, config: BrokerConfig, *, host: str | None = None, port: int | None = None, ready: Any = None
) -> int:
    """Run a broker until SIGTERM/SIGINT; 0 after a clean stop."""
    proc = BrokerProcess(root, config, host=host, port=port)
    address = await proc.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, proc.request_stop)
    assert proc.broker is not None
    if proc.grpc is not None:
        print(f"broker {proc.broker.config.broker_name} grpc at {proc.grpc.address}", flush=True)
    line = f"broker {proc.broker.config.broker_name} ready at {address}"
    print(line, flush=True)
    if proc.metrics is not None:  # (a second line: the first stays what readers of it parse)
        print(f"metrics at http://{proc.metrics.address}/metrics", flush=True)
    if ready is not None:
        ready(address)
    await proc.wait_stopped()
    return 0


def main(root: str, config: str | None, listen: str | None, namesrv: str | None) -> int:
    """``rmqlog broker ROOT [-c broker.conf] [--listen HOST:PORT] [--namesrv ADDR]``: its exit
    status (:data:`OK`, :data:`WRONG`, :data:`CANNOT`, :data:`STORE`), each failure one line on
    stderr, ``rmqlog broker: <why>``, no traceback."""
    try:
        overrides: dict[str, Any] = {}
        host = None
        port = None
        if namesrv is not None:
            overrides["namesrv_addr"] = namesrv
        if listen is not None:
            host, port = parse_listen(listen)
        cfg = BrokerConfig.from_properties(config, **overrides)
        if host is not None and host not in ("0.0.0.0", "::"):
            cfg = cfg.replace(broker_ip1=host)
    except (ValueError, StoreError) as exc:  # ConfigError is both
        print(f"rmqlog broker: {exc}", file=sys.stderr)
        return WRONG
    try:
        return asyncio.run(serve(root, cfg, host=host, port=port))
    except ConfigError as exc:  # found at start (the ACL files of aclEnable=true)
        print(f"rmqlog broker: {exc}", file=sys.stderr)
        return WRONG
    except (CannotListen, RootServedError) as exc:
        print(f"rmqlog broker: {exc}", file=sys.stderr)
        return CANNOT
    except StoreError as exc:
        print(f"rmqlog broker: {type(exc).__name__}: {exc}", file=sys.stderr)
        return STORE
    except OSError as exc:  # what else cannot be done at start (CannotListen names the ports)
        print(f"rmqlog broker: cannot start: {exc.strerror or exc}", file=sys.stderr)
        return CANNOT
