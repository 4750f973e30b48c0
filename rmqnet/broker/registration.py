"""The broker's registration with its name servers (RocketMQ 4.9.8's ``BrokerController.
registerBrokerAll`` and ``BrokerOuterAPI``).

:class:`Registrar` sends REGISTER_BROKER (103) to every name server of ``namesrvAddr``
(``;``-separated) at once when started, then every ``registerNameServerPeriod`` (30 s; Java
clamps it to 10..60 s), with the broker's topic configs and a data version that changes when
they do (the name server re-reads them only then); on stop it sends UNREGISTER_BROKER (104).
A name server that is down or refuses is logged and tried again next period: never fatal.
:meth:`Registrar.request_now` makes the next :meth:`Registrar.run_once` register whatever
the time (Java registers at once when a topic is created, e.g. a consumer's ``%RETRY%``
topic, so that clients find its route without waiting a period).

I/O is injected: ``invoke(namesrv_addr, request, timeout_s)`` returns the response (raising
for a connection that fails); tests give a :class:`~rmqnet.namesrv.NameServer` called directly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from rmqlog import Clock

from ..remoting import RemotingCommand, RequestCode, ResponseCode
from ..remoting.register import (
    DataVersion,
    RegisterBrokerBody,
    RegisterBrokerHeader,
    RegisterBrokerResult,
    TopicConfigData,
    UnregisterBrokerHeader,
    body_crc32,
)

log = logging.getLogger(__name__)

#: ``invoke(namesrv_addr, request, timeout_s) -> response``
Invoke = Callable[[str, RemotingCommand, float], Awaitable[RemotingCommand]]
#: ``BrokerConfig.registerNameServerPeriod`` (ms), and Java's clamp of it
REGISTER_PERIOD_MS = 30_000
_PERIOD_BOUNDS = (10_000, 60_000)
#: ``BrokerConfig.registerBrokerTimeoutMills``
REGISTER_TIMEOUT_S = 6.0


def parse_namesrv_addr(addrs: str) -> list[str]:
    """``namesrvAddr``: ``host:port`` entries separated by ``;`` (blanks dropped); a
    ``ValueError`` naming an entry without a port."""
    out = []
    for part in addrs.split(";"):
        part = part.strip()
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"namesrvAddr entry {part!r} is not host:port")
        out.append(part)
    return out


def topic_data(topic: Any) -> TopicConfigData:
    """A topic config as registered: a :class:`TopicConfigData`, or any object with the
    attributes of ``rmqlog.TopicConfig`` (``topic_name``, ``read_queue_nums``...)."""
    if isinstance(topic, TopicConfigData):
        return topic
    return TopicConfigData(
        str(topic.topic_name), int(topic.read_queue_nums), int(topic.write_queue_nums), int(topic.perm),
        str(getattr(topic, "topic_filter_type", "SINGLE_TAG")), int(getattr(topic, "topic_sys_flag", 0)),
        bool(getattr(topic, "order", False)),
    )


class Registrar:
    """Keeps one broker registered with its name servers (see the module docstring)."""

    def __init__(self, *, cluster_name: str, broker_name: str, broker_id: int, broker_addr: str,
                 ha_server_addr: str, namesrv_addr: str, topics: Callable[[], Mapping[str, Any] | Iterable[Any]],
                 invoke: Invoke, period_ms: int = REGISTER_PERIOD_MS, timeout_s: float = REGISTER_TIMEOUT_S,
                 compressed: bool = False) -> None:
        self.namesrv_addrs = parse_namesrv_addr(namesrv_addr)
        self.header = RegisterBrokerHeader(broker_name, broker_addr, cluster_name, ha_server_addr, broker_id,
                                           compressed)
        self.topics = topics
        self.invoke = invoke
        self.period_ms = min(max(period_ms, _PERIOD_BOUNDS[0]), _PERIOD_BOUNDS[1])
        self.timeout_s = timeout_s
        #: when :meth:`run_once` registers next (0: at its first call)
        self.next_due_ms = 0
        #: the last answer of each name server that accepted a registration
        self.results: dict[str, RegisterBrokerResult] = {}
        self._forced = False
        self._sent: dict[str, TopicConfigData] | None = None
        self._version = DataVersion()
        self._opaque = 0
        self._wake = asyncio.Event()

    def request_now(self) -> None:
        """Register at the next :meth:`run_once`, due or not (a topic was created); wakes
        :meth:`serve`."""
        self._forced = True
        self._wake.set()

    async def serve(self, clock: Clock, stop: asyncio.Event) -> None:
        """Register at once, then whenever due or requested, until ``stop`` is set; then
        unregister from every name server. The times are ``clock``'s wall time."""
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                self._wake.clear()  # before run_once: a request made during it is not lost
                await self.run_once(clock.wall_ms())
                delay = max(0, self.next_due_ms - clock.wall_ms()) / 1000
                woken = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait([stopping, woken], timeout=delay, return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
        finally:
            stopping.cancel()
        await self.unregister_all()

    def data_version(self, topics: dict[str, TopicConfigData], now_ms: int) -> DataVersion:
        """The data version of ``topics``: a new one (``now_ms``, counter + 1) when they differ
        from those last registered, else the same (``DataVersion.nextVersion``)."""
        if topics != self._sent:
            self._version = DataVersion(now_ms, self._version.counter + (self._sent is not None))
            self._sent = dict(topics)
        return self._version

    async def run_once(self, now_ms: int) -> int | None:
        """Register if due (or requested): the number of name servers that accepted, or
        ``None`` when it was not due."""
        if not self._forced and now_ms < self.next_due_ms:
            return None
        return await self.register_all(now_ms)

    async def register_all(self, now_ms: int) -> int:
        """REGISTER_BROKER to every name server at once; the number that accepted. The next
        registration is due one period after ``now_ms``, whatever the outcome."""
        self._forced = False
        self.next_due_ms = now_ms + self.period_ms
        topics = self.topics()
        values = topics.values() if isinstance(topics, Mapping) else topics
        table = {t.topic_name: t for t in (topic_data(v) for v in values)}
        body = RegisterBrokerBody(table, self.data_version(table, now_ms)).encode(self.header.compressed)
        ext = replace(self.header, body_crc32=body_crc32(body)).to_ext()
        outcomes = await asyncio.gather(*(self._send(addr, RequestCode.REGISTER_BROKER, ext, body)
                                          for addr in self.namesrv_addrs))
        ok = 0
        for addr, res in zip(self.namesrv_addrs, outcomes, strict=True):
            if res is not None:
                self.results[addr] = RegisterBrokerResult.read(res.ext_fields)
                ok += 1
        return ok

    async def unregister_all(self) -> int:
        """UNREGISTER_BROKER to every name server (the broker is stopping); the number that
        accepted. Failures are logged, never raised."""
        h = self.header
        ext = UnregisterBrokerHeader(h.broker_name, h.broker_addr, h.cluster_name, h.broker_id).to_ext()
        outcomes = await asyncio.gather(*(self._send(addr, RequestCode.UNREGISTER_BROKER, ext, b"")
                                          for addr in self.namesrv_addrs))
        return sum(res is not None for res in outcomes)

    async def _send(self, addr: str, code: int, ext: dict[str, Any], body: bytes) -> RemotingCommand | None:
        self._opaque += 1
        req = RemotingCommand(code, self._opaque, ext_fields=ext, body=body, language="JAVA")
        what = "register with" if code == RequestCode.REGISTER_BROKER else "unregister from"
        try:
            res = await self.invoke(addr, req, self.timeout_s)
        except Exception as exc:  # a name server down is retried next period, never fatal
            log.warning("broker %s: cannot %s name server %s: %s: %s", self.header.broker_name, what, addr,
                        type(exc).__name__, exc)
            return None
        if res.code != ResponseCode.SUCCESS:
            log.warning("broker %s: name server %s refused to %s it: code %d, %s", self.header.broker_name, addr,
                        what.split()[0], res.code, res.remark)
            return None
        return res

