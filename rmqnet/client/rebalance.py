"""A member of a consumer group across brokers: heartbeats, the group's members and this
member's share of a topic's queues (RocketMQ 4.9.8's ``MQClientInstance.sendHeartbeatToAllBroker``
and ``RebalanceImpl.rebalanceByTopic`` for the clustering model).

:meth:`GroupMember.heartbeat` sends HEART_BEAT (34) with this member's subscriptions to every
address, masters and slaves, of the broker groups in the subscribed topics' routes (a
consumer's ``sendHeartbeatToAllBroker``), at the same time; each broker then lists it among
the group's consumers for as long as the connection is open and heartbeats keep coming (the
broker drops it 120 s after the last, at once when the connection closes, or at
:meth:`GroupMember.unregister`: UNREGISTER_CLIENT, 35, to every address too). An address that
fails at the link is marked down (:mod:`rmqnet.client.failover`) and skipped while it is, as
Java logs it and goes on. :meth:`GroupMember.assignment` asks one broker of the topic for the
group's members (GET_CONSUMER_LIST_BY_GROUP, 38: the groups by broker name, the master
first, the next address at once when one fails at the link, where Java picks a group at
random) and returns this member's share of the topic's readable queues on every broker
group (a group without its master included: its slave serves the reads), by
:func:`~rmqnet.client.allocate.allocate_averagely` over both lists sorted as Java sorts them.
Pulling the assigned queues is :class:`~rmqnet.client.consumer.PullConsumer`'s job
(``broker_name=`` names a queue's broker).

For orderly consumption :meth:`GroupMember.lock` sends LOCK_BATCH_MQ (41) for queues to the
master of each queue's broker group (Java's ``RebalanceImpl.lockAll``: ``findBrokerAddressInSubscribe(
brokerName, MASTER_ID, true)``) and returns the queues this member holds; a member consumes
only those, and locks them again well within the broker's 60 s expiry (Java: every 20 s).
:meth:`GroupMember.unlock` sends UNLOCK_BATCH_MQ (42) for queues it gives up.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable

from rmqlog import Clock

from ..remoting import FieldError, RemotingCommand, RequestCode, ResponseCode
from ..remoting.admin_bodies import QueueKey
from ..remoting.group_bodies import LockBatchBody, decode_consumer_ids, decode_lock_ok
from ..remoting.heartbeat import ConsumerData, HeartbeatData, Subscription
from ..remoting.request_headers import ConsumerGroupHeader, UnregisterClientHeader
from ..remoting.route import TopicRouteData
from ..transport import Limits
from .allocate import allocate_averagely, read_queues
from .errors import ClientError, NoRouteError
from .failover import DOWN_MS, consumer_list_addrs, heartbeat_addrs
from .latency import QueueRef
from .loop import call
from .remote import RemoteClient


def default_client_id() -> str:
    """``ClientConfig.buildMQClientId``'s shape: ``ip@instanceName`` (the pid, as Java's
    default instance name is)."""
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    return f"{ip}@{os.getpid()}"


class GroupMember(RemoteClient):
    """``GroupMember(group, namesrv, client_id=...)`` (module docstring); ``subscriptions``:
    topic -> tag expression, set by :meth:`subscribe`."""

    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        client_id: str | None = None,
        timeout_s: float = 3.0,
        limits: Limits | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        clock: Clock | None = None,
        down_ms: int = DOWN_MS,
    ) -> None:
        super().__init__(
            namesrv,
            timeout_s=timeout_s,
            limits=limits,
            clock=clock,
            access_key=access_key,
            secret_key=secret_key,
            down_ms=down_ms,
        )
        self.group = group
        self.client_id = client_id or default_client_id()
        self.subscriptions: dict[str, str] = {}

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Add (or change) a subscription; sent with the next :meth:`heartbeat`."""
        self.subscriptions[topic] = expression

    def _heartbeat_body(self) -> bytes:
        subs = tuple(
            Subscription(
                t, e, "TAG", 0, () if e.strip() in ("", "*") else tuple(x.strip() for x in e.split("||") if x.strip())
            )
            for t, e in sorted(self.subscriptions.items())
        )
        consumer = ConsumerData(self.group, "CONSUME_ACTIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", False, subs)
        return HeartbeatData(self.client_id, (), (consumer,)).encode()

    async def _addresses(self) -> list[str]:
        """Every address of the subscribed topics' broker groups (masters and slaves)."""
        groups = []
        for topic in self.subscriptions:
            groups.extend((await self._cached_route(topic)).broker_datas)
        return heartbeat_addrs(groups, consumer=True)

    async def _to_all(self, make: Callable[[], RemotingCommand]) -> list[str]:
        """``make()`` sent to every address not down, at the same time; those that answered.
        A link failure marks its address down; a refusal (:class:`BrokerError`) is raised, and
        so is the last link failure when no address answered."""
        every = await self._addresses()
        addrs = [a for a in every if not self.down.is_down(a)] or every  # all down: all tried
        outcomes = await asyncio.gather(*(self.invoke(a, make()) for a in addrs), return_exceptions=True)
        answered, lost = [], None
        for addr, out in zip(addrs, outcomes, strict=True):
            if isinstance(out, OSError):  # the transport's errors: Java logs them and goes on
                self.down.mark(addr)
                lost = out
            elif isinstance(out, BaseException):
                raise out
            else:
                self.down.clear(addr)
                answered.append(addr)
        if not answered and lost is not None:
            raise lost
        return answered

    async def _heartbeat(self) -> list[str]:
        if not self.subscriptions:
            raise ClientError(f"group {self.group!r}: no subscription to heartbeat (subscribe first)")
        body = self._heartbeat_body()
        return await self._to_all(lambda: RemotingCommand(RequestCode.HEART_BEAT, body=body))

    def heartbeat(self) -> list[str]:
        """HEART_BEAT to every address (masters and slaves) of the subscribed topics' brokers
        that is not marked down; the addresses that answered. Raises :class:`BrokerError`, the
        transport's error when none answered, :class:`ClientError` without a subscription."""
        return call(self._heartbeat())

    async def aheartbeat(self) -> list[str]:
        return await self._heartbeat()

    async def _members(self, route: TopicRouteData, topic: str) -> list[str]:
        addrs = consumer_list_addrs(route.broker_datas, self.down)
        if not addrs:
            raise NoRouteError(f"topic {topic!r}: no broker address in its route")
        lost: OSError | None = None
        for addr in addrs:
            cmd = RemotingCommand(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                ext_fields=ConsumerGroupHeader(consumer_group=self.group).to_ext(),
            )
            try:
                res = await self.invoke(addr, cmd, ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
            except OSError as exc:
                self.down.mark(addr)
                lost = exc
                continue
            self.down.clear(addr)
            break
        else:
            assert lost is not None
            raise lost
        if res.code == ResponseCode.SYSTEM_ERROR:  # "no consumer for this group": nobody to share with
            return []
        try:
            ids = decode_consumer_ids(res.body_bytes())
        except (FieldError, KeyError, TypeError) as exc:
            raise ClientError(f"group {self.group!r}: a consumer list that is not one ({exc})") from None
        return sorted(str(i) for i in ids)

    async def _assignment(self, topic: str) -> list[QueueRef]:
        route = await self._route(topic)  # a rebalance reads the route fresh (brokers come and go)
        mq_all = read_queues(topic, route)
        if not mq_all:
            return []
        cid_all = await self._members(route, topic)
        if not cid_all:
            return []
        return allocate_averagely(self.group, self.client_id, mq_all, cid_all)

    def assignment(self, topic: str) -> list[QueueRef]:
        """This member's queues of ``topic`` now (sorted); empty when the broker does not
        list this member (heartbeat first). Raises as :meth:`heartbeat`, and
        :class:`TopicNotFoundError`."""
        return call(self._assignment(topic))

    async def aassignment(self, topic: str) -> list[QueueRef]:
        return await self._assignment(topic)

    async def _lock_batch(self, code: int, queues: list[QueueRef]) -> list[QueueRef]:
        by_broker: dict[str, list[QueueRef]] = {}
        for q in queues:
            by_broker.setdefault(q.broker_name, []).append(q)
        held: list[QueueRef] = []
        for name, mqs in sorted(by_broker.items()):
            route = await self._cached_route(mqs[0].topic)
            addr = next((b.master_addr() for b in route.broker_datas if b.broker_name == name), None)
            if not addr:
                raise NoRouteError(f"broker {name!r} has no master in the route of {mqs[0].topic!r}")
            body = LockBatchBody(
                self.group, self.client_id, tuple(QueueKey(q.topic, q.broker_name, q.queue_id) for q in mqs)
            ).encode()
            res = await self.invoke(addr, RemotingCommand(code, body=body))
            if code != RequestCode.LOCK_BATCH_MQ:
                continue
            try:
                held += [QueueRef(q.topic, q.broker_name, q.queue_id) for q in decode_lock_ok(res.body_bytes())]
            except (FieldError, ValueError, KeyError, TypeError) as exc:
                raise ClientError(f"{addr}: a LOCK_BATCH_MQ answer that is not LockBatchResponseBody ({exc})") from None
        return sorted(held)

    def lock(self, queues: list[QueueRef]) -> list[QueueRef]:
        """LOCK_BATCH_MQ (41) for ``queues`` at each one's broker group master: the queues this
        member holds now (sorted); the others are held by another live member of the group.
        Raises :class:`BrokerError`, :class:`NoRouteError`, the transport's errors."""
        return call(self._lock_batch(RequestCode.LOCK_BATCH_MQ, list(queues)))

    async def alock(self, queues: list[QueueRef]) -> list[QueueRef]:
        return await self._lock_batch(RequestCode.LOCK_BATCH_MQ, list(queues))

    def unlock(self, queues: list[QueueRef]) -> None:
        """UNLOCK_BATCH_MQ (42) for ``queues``: those this member holds are freed at once."""
        call(self._lock_batch(RequestCode.UNLOCK_BATCH_MQ, list(queues)))

    async def _unregister(self) -> list[str]:
        return await self._to_all(
            lambda: RemotingCommand(
                RequestCode.UNREGISTER_CLIENT,
                ext_fields=UnregisterClientHeader(
                    client_id=self.client_id, consumer_group=self.group, producer_group=""
                ).to_ext(),
            )
        )

    def unregister(self) -> list[str]:
        """UNREGISTER_CLIENT (35) to every address heartbeated (Java's ``unregisterClient``):
        the group rebalances without it; the addresses that answered."""
        return call(self._unregister())
