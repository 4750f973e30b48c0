"""The broker's registration with its name servers (RocketMQ 4.9.8's ``BrokerController.
registerBrokerAll`` and ``BrokerOuterAPI``).

:class:`Registrar` is one of the broker's services (``broker.services``: the process calls
``run_once(now_ms)`` on its event loop every round). It sends REGISTER_BROKER (103) to every
name server of ``namesrvAddr`` (``;``-separated) at once, at the first round, then every
``registerNameServerPeriod`` (30 s; Java clamps it to 10..60 s), and at the next round after
the broker's topics changed (their data version moved: Java registers at once when a topic is
created, e.g. a consumer's ``%RETRY%`` topic, so that clients find its route without waiting a
period), or after :meth:`Registrar.request_now`. The body carries the broker's topic configs
(``broker.topics.all()``) and their data version (``broker.topics.data_version``); the name
server re-reads the topics only when that version changed. :meth:`Registrar.close` (the
broker is stopping) sends UNREGISTER_BROKER (104) to each. A name server that is down, slow or
refusing is logged and tried again next period: never fatal, and one slow name server does
not hold the others (they are asked at once).

With cluster credentials (``innerClientAuthenticationCredentials``, ``config.inner_credentials``)
every request is signed in the bound form (:func:`rmqnet.remoting.acl_sign.sign_bound`), which a
name server with ``aclEnable`` requires (:mod:`rmqnet.namesrv.admission`).

I/O is injected: ``invoke(namesrv_addr, request, timeout_s)`` returns the response (raising
for a connection that fails); the default, :class:`NameServerLinks`, is the transport.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..remoting import RemotingCommand, RequestCode, ResponseCode
from ..remoting.acl_sign import sign_bound
from ..remoting.address import AddressError, parse_host_port, split_address, with_port
from ..remoting.register import (
    DataVersion,
    RegisterBrokerBody,
    RegisterBrokerHeader,
    RegisterBrokerResult,
    TopicConfigData,
    UnregisterBrokerHeader,
    body_crc32,
)
from ..transport import ClientConnection

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

#: ``invoke(namesrv_addr, request, timeout_s) -> response``
Invoke = Callable[[str, RemotingCommand, float], Awaitable[RemotingCommand]]
#: ``BrokerConfig.registerNameServerPeriod`` (ms), and Java's clamp of it
REGISTER_PERIOD_MS = 30_000
_PERIOD_BOUNDS = (10_000, 60_000)


def parse_namesrv_addr(addrs: str) -> list[str]:
    """``namesrvAddr``: ``host:port`` entries separated by ``;`` (blanks dropped); a
    ``ValueError`` naming an entry without a port."""
    out = []
    for part in addrs.split(";"):
        part = part.strip()
        if not part:
            continue
        try:
            parse_host_port("namesrvAddr", part)
        except AddressError:
            raise ValueError(f"namesrvAddr entry {part!r} is not host:port") from None
        out.append(part)
    return out


def topic_data(topic: Any) -> TopicConfigData:
    """A topic config as registered: a :class:`TopicConfigData`, or any object with the
    attributes of ``rmqlog.TopicConfig`` (``topic_name``, ``read_queue_nums``...)."""
    if isinstance(topic, TopicConfigData):
        return topic
    return TopicConfigData(
        str(topic.topic_name),
        int(topic.read_queue_nums),
        int(topic.write_queue_nums),
        int(topic.perm),
        str(getattr(topic, "topic_filter_type", "SINGLE_TAG")),
        int(getattr(topic, "topic_sys_flag", 0)),
        bool(getattr(topic, "order", False)),
    )


def ha_address(broker_addr: str) -> str:
    """Where a broker's HA service listens: its host, port ``listenPort + 1`` (RocketMQ's
    ``haListenPort`` default, advertised as ``brokerIP2:haListenPort``)."""
    return with_port(broker_addr, split_address(broker_addr)[1] + 1)


class Registrar:
    """Keeps ``broker`` registered with its name servers (see the module docstring).

    ``broker`` provides ``config`` (``broker_cluster_name``, ``broker_name``, ``broker_id``,
    ``namesrv_addr``, ``register_name_server_period``, ``register_broker_timeout_mills``),
    ``address`` (the advertised ``ip:port``) and ``topics`` (``all()`` -> configs by name, and
    ``data_version`` -> ``{"counter", "timestamp"}``): :class:`rmqnet.broker.broker.Broker`.
    """

    def __init__(
        self,
        broker: Broker,
        *,
        invoke: Invoke | None = None,
        ha_server_addr: str | None = None,
        compressed: bool = False,
    ) -> None:
        cfg = broker.config
        self.broker = broker
        self.namesrv_addrs: list[str] = []
        for entry in (cfg.namesrv_addr or "").split(";"):
            try:
                self.namesrv_addrs += parse_namesrv_addr(entry)
            except ValueError as exc:  # as Java, a bad entry fails alone (there: at each connect)
                log.warning("broker %s: %s: not registering there", cfg.broker_name, exc)
        self.header = RegisterBrokerHeader(
            broker_name=cfg.broker_name,
            broker_addr=broker.address,
            cluster_name=cfg.broker_cluster_name,
            ha_server_addr=ha_server_addr or ha_address(broker.address),
            broker_id=cfg.broker_id,
            compressed=compressed,
        )
        #: (accessKey, secretKey) the requests are signed with (None: unsigned)
        self.credentials: tuple[str, str] | None = getattr(cfg, "inner_credentials", None)
        self.period_ms = min(max(int(cfg.register_name_server_period), _PERIOD_BOUNDS[0]), _PERIOD_BOUNDS[1])
        self.timeout_s = int(cfg.register_broker_timeout_mills) / 1000
        self._links: NameServerLinks | None = None
        if invoke is None:
            self._links = NameServerLinks()
            invoke = self._links.invoke
        self.invoke: Invoke = invoke
        #: when :meth:`run_once` registers next (0: at its first call)
        self.next_due_ms = 0
        #: the last answer of each name server that accepted a registration (a slave's master)
        self.results: dict[str, RegisterBrokerResult] = {}
        self._forced = False
        self._sent_version: DataVersion | None = None
        self._task: asyncio.Task[int] | None = None
        self._opaque = 0

    def _version(self) -> DataVersion:
        v = self.broker.topics.data_version
        return DataVersion(int(v["timestamp"]), int(v["counter"]))

    def request_now(self) -> None:
        """Register at the next :meth:`run_once`, due or not."""
        self._forced = True

    def run_once(self, now_ms: int) -> asyncio.Task[int] | None:
        """One round, on the event loop: when due, requested, or the topics' data version moved,
        start a registration with every name server and return its task (its result: how many
        accepted); else ``None``. One registration at a time: a round while one is running
        does nothing."""
        if self._task is not None and not self._task.done():
            return None
        if not (self._forced or now_ms >= self.next_due_ms or self._version() != self._sent_version):
            return None
        self._forced = False
        self.next_due_ms = now_ms + self.period_ms
        self._task = asyncio.get_running_loop().create_task(self.register_all())
        return self._task

    async def register_all(self) -> int:
        """REGISTER_BROKER to every name server at once; the number that accepted."""
        version = self._version()  # before the topics: a change in between registers again next round
        topics = self.broker.topics.all()
        values = topics.values() if isinstance(topics, Mapping) else topics
        table = {t.topic_name: t for t in (topic_data(v) for v in values)}
        self._sent_version = version
        body = RegisterBrokerBody(table, version).encode(self.header.compressed)
        h = self.header
        ext = dataclasses.replace(h, body_crc32=body_crc32(body)).to_ext()
        outcomes = await asyncio.gather(
            *(self._send(addr, RequestCode.REGISTER_BROKER, ext, body) for addr in self.namesrv_addrs)
        )
        ok = 0
        for addr, res in zip(self.namesrv_addrs, outcomes, strict=True):
            if res is not None:
                self.results[addr] = RegisterBrokerResult.read(res.ext_fields)
                ok += 1
        return ok

    async def unregister_all(self) -> int:
        """UNREGISTER_BROKER to every name server; the number that accepted (failures logged)."""
        h = self.header
        ext = UnregisterBrokerHeader(
            broker_name=h.broker_name, broker_addr=h.broker_addr, cluster_name=h.cluster_name, broker_id=h.broker_id
        ).to_ext()
        outcomes = await asyncio.gather(
            *(self._send(addr, RequestCode.UNREGISTER_BROKER, ext, b"") for addr in self.namesrv_addrs)
        )
        return sum(res is not None for res in outcomes)

    async def close(self) -> int:
        """The broker is stopping: let a registration in flight end, unregister from every
        name server, close the connections; the number of name servers that accepted."""
        if self._task is not None and not self._task.done():
            await asyncio.wait([self._task])
        try:
            return await self.unregister_all()
        finally:
            if self._links is not None:
                await self._links.close()

    async def _send(self, addr: str, code: int, ext: dict[str, Any], body: bytes) -> RemotingCommand | None:
        self._opaque += 1
        req = RemotingCommand(code, self._opaque, ext_fields=dict(ext), body=body, language="JAVA")
        if self.credentials is not None:
            sign_bound(req, *self.credentials)
        what = "register with" if code == RequestCode.REGISTER_BROKER else "unregister from"
        try:
            res = await self.invoke(addr, req, self.timeout_s)
        except Exception as exc:  # a name server down is retried next period, never fatal
            log.warning(
                "broker %s: cannot %s name server %s: %s: %s",
                self.header.broker_name,
                what,
                addr,
                type(exc).__name__,
                exc,
            )
            return None
        if res.code != ResponseCode.SUCCESS:
            log.warning(
                "broker %s: name server %s refused to %s it: code %d, %s",
                self.header.broker_name,
                addr,
                what.split()[0],
                res.code,
                res.remark,
            )
            return None
        return res


class NameServerLinks:
    """``invoke`` for a :class:`Registrar` over the transport: one connection per name server,
    dialled on first use and again after it closed (a name server restarted). Connection
    failures and timeouts raise (the registrar logs them and retries next period)."""

    def __init__(self, connect_timeout_s: float = 3.0) -> None:
        self.connect_timeout_s = connect_timeout_s
        self._conns: dict[str, ClientConnection] = {}

    async def invoke(self, addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            host, port = split_address(addr)
            conn = await ClientConnection.connect(host, port, timeout_s=self.connect_timeout_s)
            self._conns[addr] = conn
        return await conn.invoke(req, timeout_s)

    async def close(self) -> None:
        """Close every connection."""
        conns, self._conns = list(self._conns.values()), {}
        for c in conns:
            c.close()
        for c in conns:
            await c.wait_closed()
