"""A slave's copy of its master's topic configs, consumer offsets and delay offsets (RocketMQ
4.9.8's ``SlaveSynchronize``), and the master's answer to ``GET_ALL_CONSUMER_OFFSET`` (43).

:class:`SlaveSynchronize` is a broker service of a ``SLAVE`` (``run_once(now_ms)``): 3 s after
start and then every 10 s (Java's schedule), when its master's address is known (the
``masterAddr`` the name server answered its registration with), it asks the master for
``GET_ALL_TOPIC_CONFIG`` (21), ``GET_ALL_CONSUMER_OFFSET`` (43) and ``GET_ALL_DELAY_OFFSET``
(45) and applies what differs: topics created or changed with the master's queue counts and
perms, topics the master does not list dropped from the slave's config table only (Java
replaces the whole table and touches no queue: a topic made on the master just after the
snapshot may already have replicated, dispatched records on the slave, which must stay
readable; its queues and offsets are kept, the next snapshot lists it again; the slave's own
system topics and groups' retry and dead-letter topics are kept), offsets committed in the
slave's offset table (written to its ``consumerOffset.json`` on its own schedule,
:mod:`rmqnet.broker.state`), the scheduler's progress per
delay level written as the slave's ``delayOffset.json`` (Java writes the body as the file;
here it is parsed, checked and written by the store: ``MessageStore.replica.set_delay_offsets``), so
that consumers reading from the slave (its master gone) see the master's topics, and a slave
promoted to master continues the groups' progress and the delay levels where the master was
(its scheduler, which does not run on a slave, checks the file against the log's delivery
markers, which came with the replicated records). A master that does not answer is tried again
next round; one bad entry is skipped alone; a master that answers 45 with an error (RocketMQ's
"No delay offset in this broker") leaves the slave's file as it is.

With cluster credentials (``innerClientAuthenticationCredentials``) each request is signed in
the bound form (:func:`rmqnet.remoting.acl_sign.sign_bound`): a master with ``aclEnable``
checks them like any client's (an ``admin`` account of its ACL files).

I/O is injected: ``invoke(addr, request, timeout_s)`` returns the response; the default dials
with the transport.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rmqlog import StoreError, TopicConfig

from ..remoting import RemotingCommand, RequestCode, ResponseCode
from ..remoting.acl_sign import sign_bound
from ..remoting.address import split_address
from ..remoting.names import DLQ_PREFIX, RETRY_PREFIX
from ..remoting.route import loads_fastjson
from ..transport import ClientConnection
from .peer import Peer

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

Invoke = Callable[[str, RemotingCommand, float], Awaitable[RemotingCommand]]
#: SlaveSynchronize's schedule in BrokerController.handleSlaveSynchronize (ms)
FIRST_DELAY_MS, PERIOD_MS = 3000, 10_000


def get_all_consumer_offset(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    """43: body ``ConsumerOffsetSerializeWrapper`` JSON ``{"offsetTable": {"topic@group":
    {"queueId": offset}}}`` (standard JSON; Java's fastjson writes the queue ids bare): the
    broker's offset table (:mod:`rmqnet.broker.consumer_offsets`), every entry."""
    table = broker.consumer_offsets.table()
    body = {"offsetTable": {k: {str(q): o for q, o in sorted(v.items())} for k, v in sorted(table.items())}}
    return req.reply(ResponseCode.SUCCESS, None, None, json.dumps(body, separators=(",", ":")).encode())


class SlaveSynchronize:
    """See the module docstring; ``master_addr`` may be set directly (tests, tools)."""

    def __init__(self, broker: Broker, *, invoke: Invoke | None = None, timeout_s: float = 3.0) -> None:
        self.broker = broker
        self.timeout_s = timeout_s
        self.master_addr: str | None = None
        self.next_due_ms = broker.clock.wall_ms() + FIRST_DELAY_MS
        self.rounds = 0  # completed syncs
        self.last_error: str | None = None
        self._conns: dict[str, ClientConnection] = {}
        self.invoke: Invoke = invoke or self._invoke
        self._task: asyncio.Task[None] | None = None
        self._opaque = 0

    def run_once(self, now_ms: int) -> asyncio.Task[None] | None:
        learned = self._registered_master()
        if learned:
            self.master_addr = learned
        if self.master_addr is None or now_ms < self.next_due_ms or (self._task is not None and not self._task.done()):
            return None
        self.next_due_ms = now_ms + PERIOD_MS
        self._task = asyncio.get_running_loop().create_task(self.sync_all(self.master_addr))
        return self._task

    def _registered_master(self) -> str | None:
        """The master's address the name servers answered the last registration with."""
        registrar = self.broker.registrar
        if registrar is not None:
            for res in registrar.results.values():
                if res.master_addr:
                    return res.master_addr
        return None

    async def sync_all(self, master: str) -> None:
        """One round: topic configs, then consumer offsets, from ``master``."""
        try:
            await self._sync_topics(master)
            await self._sync_offsets(master)
            await self._sync_delay_offsets(master)
            self.rounds += 1
            self.last_error = None
        except Exception as exc:  # noqa: BLE001 - a master down or refusing: next round
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("slave sync from %s failed: %s", master, self.last_error)

    async def _ask(self, master: str, code: int) -> Any:
        self._opaque += 1
        res = await self.invoke(
            master, self._signed(RemotingCommand(code, self._opaque, language="JAVA")), self.timeout_s
        )
        if res.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"code {code} answered {res.code}: {res.remark}")
        return loads_fastjson(res.body_bytes())

    async def _sync_topics(self, master: str) -> None:
        body = await self._ask(master, RequestCode.GET_ALL_TOPIC_CONFIG)
        topics = self.broker.topics
        table = body.get("topicConfigTable") or {}
        if table:  # (an empty answer deletes nothing: a master always lists its system topics)
            for name in sorted(set(topics.all()) - set(table)):
                # a group's retry and dead-letter topics are made by heartbeats on the slave too
                # (consumers heartbeat every address): left alone, so none comes and goes
                if topics.is_system(name) or name.startswith((RETRY_PREFIX, DLQ_PREFIX)):
                    continue
                try:  # the config only: its queues and offsets stay (Java's table replace)
                    topics.drop_config(name)
                    log.info("slave sync: topic %s left the table (the master does not list it); its queues kept", name)
                except StoreError as exc:
                    log.warning("slave sync: topic %r not dropped: %s", name, exc)
        for name, raw in table.items():
            try:
                tc = TopicConfig.from_json(raw)
                if tc.topic_name != name:
                    continue
                if topics.get(name) != tc:
                    topics.update(tc)
            except (StoreError, ValueError, TypeError, KeyError) as exc:  # one bad entry alone
                log.warning("slave sync: topic %r skipped: %s", name, exc)

    async def _sync_offsets(self, master: str) -> None:
        body = await self._ask(master, RequestCode.GET_ALL_CONSUMER_OFFSET)
        offsets = self.broker.consumer_offsets  # persisted on the slave's own schedule
        for key, per_queue in (body.get("offsetTable") or {}).items():
            topic, _, group = str(key).partition("@")
            for q, offset in (per_queue or {}).items():
                try:
                    qid, off = int(q), int(offset)
                    if offsets.query(group, topic, qid) != off:
                        offsets.commit(group, topic, qid, off)
                except (StoreError, ValueError, TypeError) as exc:
                    log.warning("slave sync: offset %r queue %r skipped: %s", key, q, exc)

    async def _sync_delay_offsets(self, master: str) -> None:
        self._opaque += 1
        req = self._signed(RemotingCommand(RequestCode.GET_ALL_DELAY_OFFSET, self._opaque, language="JAVA"))
        res = await self.invoke(master, req, self.timeout_s)
        if res.code != ResponseCode.SUCCESS:
            log.info("slave sync: the master has no delay offsets (code %d: %s)", res.code, res.remark)
            return
        table = loads_fastjson(res.body_bytes()).get("offsetTable") or {}
        offsets = {int(level): int(offset) for level, offset in table.items()}
        store = self.broker.store
        if store.replica.delay_offsets() != offsets:
            store.replica.set_delay_offsets(offsets)

    def _signed(self, req: RemotingCommand) -> RemotingCommand:
        creds = getattr(self.broker.config, "inner_credentials", None)
        return sign_bound(req, *creds) if creds is not None else req

    async def _invoke(self, addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            host, port = split_address(addr)
            conn = await ClientConnection.connect(host, port, timeout_s=timeout_s)
            self._conns[addr] = conn
        return await conn.invoke(req, timeout_s)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        conns, self._conns = list(self._conns.values()), {}
        for c in conns:
            c.close()
        for c in conns:
            await c.wait_closed()
