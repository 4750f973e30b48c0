"""What every client object shares: the name servers, one connection per address (made on
first use, made again after it closed), a request/answer helper that maps failure codes to
:class:`~rmqnet.client.errors.BrokerError`, and routes by topic.

Connections belong to the event loop that made them: a client keeps one set per loop. Its
blocking methods run on the clients' background loop (:mod:`rmqnet.client.loop`); its
``a``-prefixed coroutines run on the caller's own loop, with connections of that loop, so an
asyncio program pays no thread hop per request. Routes are cached per client, shared by all.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable
from typing import Any

from rmqlog import Clock, SystemClock

from ..remoting import RemotingCommand, RequestCode, ResponseCode
from ..remoting.acl_sign import sign
from ..remoting.route import TopicRouteData
from ..transport import ClientConnection, Limits
from .errors import BrokerError, NoRouteError, TopicNotFoundError
from .loop import call


def split_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` (IPv6 hosts bracketed or not: the port is after the last colon)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"not a host:port address: {addr!r}")
    return host.strip("[]"), int(port)


class RemoteClient:
    """Connections to the name servers (``namesrv``: ``"host:port"``, several separated by
    ``;`` as RocketMQ's ``namesrvAddr``) and to brokers, by address. With ``access_key`` and
    ``secret_key`` every request is signed for a broker's ACL (``AccessKey`` and
    ``Signature`` added as RocketMQ's ``AclClientRPCHook`` adds them)."""

    #: a cached route is asked again after this long (RocketMQ's ``pollNameServerInterval``)
    ROUTE_TTL_S = 30.0

    def __init__(self, namesrv: str = "127.0.0.1:9876", *, timeout_s: float = 3.0, limits: Limits | None = None,
                 clock: Clock | None = None, access_key: str | None = None, secret_key: str | None = None) -> None:
        if (access_key is None) != (secret_key is None):
            raise ValueError("access_key and secret_key go together")
        self.credentials = None if access_key is None or secret_key is None else (access_key, secret_key)
        self.clock: Clock = clock or SystemClock()
        self.namesrv_addrs = [a.strip() for a in namesrv.split(";") if a.strip()]
        if not self.namesrv_addrs:
            raise ValueError(f"no name server address in {namesrv!r}")
        for a in self.namesrv_addrs:
            split_addr(a)
        self.timeout_s = timeout_s
        self.limits = limits
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopConnections] = weakref.WeakKeyDictionary()
        self._last: tuple[weakref.ref[asyncio.AbstractEventLoop], _LoopConnections] | None = None
        self._routes: dict[str, tuple[TopicRouteData, float]] = {}  # topic -> (route, when asked)

    # ---- connections -------------------------------------------------------------------

    async def connection(self, addr: str) -> ClientConnection:
        """The running loop's connection to ``addr``, dialled if there is none open (one dial
        at a time per address)."""
        loop = asyncio.get_running_loop()
        last = self._last
        if last is not None and last[0]() is loop:
            mine = last[1]
        else:  # (a WeakKeyDictionary lookup costs a weakref per call: remember the last loop)
            # a connection refers to its loop, so a loop's entry never dies by itself: entries
            # of closed loops (asyncio.run returned) are dropped whenever another loop comes
            for old in [lp for lp in self._loops if lp.is_closed()]:
                del self._loops[old]
            found = self._loops.get(loop)
            mine = found if found is not None else _LoopConnections()
            self._loops[loop] = mine
            self._last = (weakref.ref(loop), mine)
        conn = mine.conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        pending = mine.connecting.get(addr)
        if pending is not None:
            return await asyncio.shield(pending)
        host, port = split_addr(addr)
        fut: asyncio.Future[ClientConnection] = loop.create_future()
        mine.connecting[addr] = fut
        try:
            conn = await ClientConnection.connect(host, port, limits=self.limits, timeout_s=self.timeout_s)
            mine.conns[addr] = conn
            fut.set_result(conn)
            return conn
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: the waiters (if any) re-raise it
            raise
        finally:
            del mine.connecting[addr]

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float | None = None,
                     ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """``cmd`` sent to ``addr``; its answer if its code is in ``ok``, else :class:`BrokerError`."""
        conn = await self.connection(addr)
        if self.credentials is not None:
            sign(cmd, *self.credentials)
        res = await conn.invoke(cmd, self.timeout_s if timeout_s is None else timeout_s)
        if res.code not in ok:
            raise BrokerError(res.code, res.remark, addr, cmd.code)
        return res

    def close(self) -> None:
        """Close every connection of this client, on every loop (each closed by its own loop;
        requests still waiting fail with ``ConnectionLostError``). Does not block."""
        for loop, mine in list(self._loops.items()):
            conns = list(mine.conns.values())
            mine.conns.clear()
            if not loop.is_closed():
                for conn in conns:
                    loop.call_soon_threadsafe(conn.close)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- routes ------------------------------------------------------------------------

    async def _route(self, topic: str) -> TopicRouteData:
        """The route of ``topic`` from the first name server that answers (each tried in
        turn); :class:`TopicNotFoundError` if it has none."""
        last: Exception | None = None
        for addr in self.namesrv_addrs:
            cmd = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic})
            try:
                res = await self.invoke(addr, cmd, ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
            except (OSError, BrokerError) as exc:
                last = exc
                continue
            if res.code == ResponseCode.TOPIC_NOT_EXIST:
                raise TopicNotFoundError(topic, res.remark, addr)
            route = TopicRouteData.decode(res.body_bytes())
            self._routes[topic] = (route, self.clock.monotonic())
            return route
        assert last is not None
        raise last

    #: how long a lookup of a topic the name servers do not know is repeated before
    #: :class:`TopicNotFoundError` (0: not repeated). A topic a send just created on a broker
    #: reaches the name servers with that broker's next registration (within a broker round,
    #: 0.1 s here; RocketMQ's brokers register a new topic at once too), so a consumer asking
    #: right after the send would otherwise miss it.
    route_wait_s: float = 0.0
    #: the pause between two lookups of an unknown topic
    ROUTE_RETRY_S = 0.1

    async def _cached_route(self, topic: str) -> TopicRouteData:
        cached = self._routes.get(topic)
        if cached is not None and self.clock.monotonic() - cached[1] < self.ROUTE_TTL_S:
            return cached[0]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.route_wait_s
        while True:
            try:
                return await self._route(topic)
            except TopicNotFoundError:
                if loop.time() + self.ROUTE_RETRY_S > deadline:
                    raise
            await asyncio.sleep(self.ROUTE_RETRY_S)  # the name server is asked again: its state is remote

    def route(self, topic: str) -> TopicRouteData:
        """The route of ``topic`` (code 105); :class:`TopicNotFoundError` if unknown."""
        return call(self._route(topic))

    async def aroute(self, topic: str) -> TopicRouteData:
        return await self._route(topic)


class _LoopConnections:
    """One loop's connections of a client, by address, and the dials under way."""

    __slots__ = ("conns", "connecting", "__weakref__")

    def __init__(self) -> None:
        self.conns: dict[str, ClientConnection] = {}
        self.connecting: dict[str, asyncio.Future[ClientConnection]] = {}


def master_addr(route: TopicRouteData, broker_name: str, topic: str) -> str:
    """The master address of ``broker_name`` in ``route``; :class:`NoRouteError` if none."""
    for b in route.broker_datas:
        if b.broker_name == broker_name:
            addr = b.master_addr()
            if addr:
                return addr
    raise NoRouteError(f"topic {topic!r}: broker {broker_name!r} has no master address in the route")
