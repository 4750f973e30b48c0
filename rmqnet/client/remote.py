"""What every client object shares: the name servers, one connection per address (made on
first use, made again after it closed), a request/answer helper that maps failure codes to
:class:`~rmqnet.client.errors.BrokerError`, and routes by topic.

Connections belong to the event loop that made them: a client keeps one set per loop. Its
blocking methods run on the clients' background loop (:mod:`rmqnet.client.loop`); its
``a``-prefixed coroutines run on the caller's own loop, with connections of that loop, so an
asyncio program pays no thread hop per request. Routes are cached per client, shared by all.

Reads of a broker group (:meth:`RemoteClient.on_broker`) go to the address the rule of
:mod:`rmqnet.client.failover` puts first; one that fails at the link is marked down (the
client's :class:`~rmqnet.client.failover.DownMarks`, on its clock), the request goes at once
to the group's next address, and the topic's route is asked again at its next use. A route
in which a group has no master is kept only ``down_ms`` (not :attr:`RemoteClient.ROUTE_TTL_S`),
so a master back under its name is seen soon; an address a route shows again after it was
absent is up again at once. A route the name servers cannot give now is answered from the
one cached, however old (Java keeps its route table too).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from rmqlog import Clock, SystemClock

from ..remoting import RemotingCommand, RequestCode, ResponseCode
from ..remoting.acl_sign import sign_bound
from ..remoting.address import is_address, parse_addresses, split_address
from ..remoting.request_headers import TopicHeader
from ..remoting.route import MASTER_ID, TopicRouteData
from ..transport import ClientConnection, Limits
from .errors import BrokerError, NoRouteError, TopicNotFoundError
from .failover import DOWN_MS, DownMarks, candidates, group_of
from .loop import call

T = TypeVar("T")
#: a rule of :mod:`rmqnet.client.failover`: a group's broker ids in the order to try them
Rule = Callable[[Mapping[int, str]], list[int]]


class RemoteClient:
    """Connections to the name servers (``namesrv``: ``"host:port"``, several separated by
    ``;`` as RocketMQ's ``namesrvAddr``) and to brokers, by address. With ``access_key`` and
    ``secret_key`` every request is signed for a broker's ACL in the bound form
    (:func:`rmqnet.remoting.acl_sign.sign_bound`: ``AccessKey``, ``SignatureForm: bound-1``
    and a ``Signature`` over the code, the field names and values, and the body). ``down_ms``: how long
    an address whose request failed at the link is avoided by reads (``down``)."""

    #: a cached route is asked again after this long (RocketMQ's ``pollNameServerInterval``)
    ROUTE_TTL_S = 30.0

    def __init__(
        self,
        namesrv: str = "127.0.0.1:9876",
        *,
        timeout_s: float = 3.0,
        limits: Limits | None = None,
        clock: Clock | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        down_ms: int = DOWN_MS,
    ) -> None:
        if (access_key is None) != (secret_key is None):
            raise ValueError("access_key and secret_key go together")
        self.credentials = None if access_key is None or secret_key is None else (access_key, secret_key)
        self.clock: Clock = clock or SystemClock()
        # rmqlog.values: host:port;host:port, no empty item (its error is a ValueError)
        self.namesrv_addrs = list(parse_addresses("namesrv", namesrv))
        self.timeout_s = timeout_s
        self.limits = limits
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopConnections] = (
            weakref.WeakKeyDictionary()
        )
        self._last: tuple[weakref.ref[asyncio.AbstractEventLoop], _LoopConnections] | None = None
        self._routes: dict[str, tuple[TopicRouteData, float]] = {}  # topic -> (route, when it expires)
        #: addresses avoided by reads for a while (:mod:`rmqnet.client.failover`)
        self.down = DownMarks(self.clock, down_ms)
        #: what answers a broker's own requests on this client's connections (a transactional
        #: producer's CHECK_TRANSACTION_STATE); None: REQUEST_CODE_NOT_SUPPORTED
        self.request_handler: Any = None

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
        host, port = split_address(addr)
        fut: asyncio.Future[ClientConnection] = loop.create_future()
        mine.connecting[addr] = fut
        try:
            conn = await ClientConnection.connect(
                host, port, limits=self.limits, timeout_s=self.timeout_s, request_handler=self.request_handler
            )
            mine.conns[addr] = conn
            fut.set_result(conn)
            return conn
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: the waiters (if any) re-raise it
            raise
        finally:
            del mine.connecting[addr]

    async def invoke(
        self,
        addr: str,
        cmd: RemotingCommand,
        timeout_s: float | None = None,
        ok: Iterable[int] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        """``cmd`` sent to ``addr``; its answer if its code is in ``ok``, else :class:`BrokerError`."""
        conn = await self.connection(addr)
        if self.credentials is not None:
            sign_bound(cmd, *self.credentials)
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
            cmd = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields=TopicHeader(topic=topic).to_ext())
            try:
                res = await self.invoke(addr, cmd, ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
            except (OSError, BrokerError) as exc:
                last = exc
                continue
            if res.code == ResponseCode.TOPIC_NOT_EXIST:
                raise TopicNotFoundError(topic, res.remark, addr)
            route = TopicRouteData.decode(res.body_bytes())
            self._learn(topic, route)
            return route
        assert last is not None
        raise last

    def _learn(self, topic: str, route: TopicRouteData) -> None:
        """Cache ``route``, for :attr:`ROUTE_TTL_S`, or ``down_ms`` when a group in it has no
        master; addresses it shows that the last one lacked are up again (registered again)."""
        old = self._routes.get(topic)
        before = {a for b in old[0].broker_datas for a in b.broker_addrs.values()} if old is not None else None
        for b in route.broker_datas:
            for addr in b.broker_addrs.values():
                if before is not None and addr not in before:
                    self.down.clear(addr)
        ttl = self.ROUTE_TTL_S
        if any(MASTER_ID not in b.broker_addrs for b in route.broker_datas):
            ttl = min(ttl, self.down.down_ms / 1000)
        self._routes[topic] = (route, self.clock.monotonic() + ttl)

    def _stale(self, topic: str) -> None:
        """The cached route of ``topic`` is asked again at its next use (kept meanwhile)."""
        cached = self._routes.get(topic)
        if cached is not None:
            self._routes[topic] = (cached[0], float("-inf"))

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
        if cached is not None and self.clock.monotonic() < cached[1]:
            return cached[0]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.route_wait_s
        while True:
            try:
                return await self._route(topic)
            except TopicNotFoundError:
                if loop.time() + self.ROUTE_RETRY_S > deadline:
                    raise
            except (OSError, BrokerError):
                if cached is None:
                    raise
                return cached[0]  # no name server answers now: the route known, however old
            await asyncio.sleep(self.ROUTE_RETRY_S)  # the name server is asked again: its state is remote

    def route(self, topic: str) -> TopicRouteData:
        """The route of ``topic`` (code 105); :class:`TopicNotFoundError` if unknown."""
        return call(self._route(topic))

    async def aroute(self, topic: str) -> TopicRouteData:
        return await self._route(topic)

    # ---- reads of a broker group, with failover ------------------------------------------

    async def on_broker(self, topic: str, broker: str, rule: Rule, send: Callable[[str], Awaitable[T]]) -> T:
        """``send(addr)`` to an address of broker group ``broker`` (its broker name in
        ``topic``'s route): the addresses of :func:`~rmqnet.client.failover.candidates` for
        ``rule`` in turn, until one answers. One that fails at the link (an ``OSError``:
        refused, reset, timed out) is marked down and the next is asked at once; when every
        address of the cached route failed, or it has none, the route is asked afresh and its
        addresses not yet tried are asked. ``broker`` an address (``host:port``): that broker
        alone, as given (a failure still marks it down). Raises the last link error,
        :class:`NoRouteError` when the route has no such group, :class:`TopicNotFoundError`;
        whatever ``send`` raises otherwise (a broker's refusal: no failover)."""
        if is_address(broker):
            return await self._attempt(topic, broker, send)
        tried: set[str] = set()
        last: OSError | None = None
        for fresh in (False, True):
            if fresh:
                self._stale(topic)
            try:
                route = await self._cached_route(topic)
            except (OSError, BrokerError):  # (TopicNotFoundError included) no route at all
                if last is None:
                    raise
                break
            group = group_of(route, broker)
            ids = rule(group.broker_addrs) if group is not None else []
            for addr in candidates(group, ids, self.down):
                if addr in tried:
                    continue
                tried.add(addr)
                try:
                    return await self._attempt(topic, addr, send)
                except OSError as exc:  # the transport's errors are OSErrors
                    last = exc
        if last is not None:
            raise last
        raise NoRouteError(f"topic {topic!r}: broker {broker!r} has no address in the route")

    async def _attempt(self, topic: str, addr: str, send: Callable[[str], Awaitable[T]]) -> T:
        """``send(addr)``: a link failure marks ``addr`` down (the route of ``topic`` is asked
        again at its next use), an answer marks it up."""
        try:
            result = await send(addr)
        except OSError:
            self.down.mark(addr)
            self._stale(topic)
            raise
        self.down.clear(addr)
        return result


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
