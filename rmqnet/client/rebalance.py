"""A member of a consumer group across brokers: heartbeats, the group's members and this
member's share of a topic's queues (RocketMQ 4.9.8's ``MQClientInstance.sendHeartbeatToAllBroker``
and ``RebalanceImpl.rebalanceByTopic`` for the clustering model).

:meth:`GroupMember.heartbeat` sends HEART_BEAT (34) with this member's subscriptions to the
master of every broker in the subscribed topics' routes (Java heartbeats every broker it
knows); each broker then lists it among the group's consumers for as long as the connection
is open and heartbeats keep coming (the broker drops it 120 s after the last, at once when
the connection closes, or at :meth:`GroupMember.unregister`: UNREGISTER_CLIENT, 35).
:meth:`GroupMember.assignment` asks one broker of the topic for the group's members
(GET_CONSUMER_LIST_BY_GROUP, 38: the first master by broker name, where Java picks one at
random) and returns this member's share of the topic's readable queues on every broker,
by :func:`~rmqnet.client.allocate.allocate_averagely` over both lists sorted as Java sorts
them. Pulling the assigned queues is :class:`~rmqnet.client.consumer.PullConsumer`'s job
(``broker_name=`` names a queue's broker).
"""

from __future__ import annotations

import json
import os
import socket

from ..remoting import RemotingCommand, RequestCode, ResponseCode
from ..remoting.route import TopicRouteData
from ..transport import Limits
from .allocate import allocate_averagely, read_queues
from .errors import ClientError, NoRouteError
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

    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *, client_id: str | None = None,
                 timeout_s: float = 3.0, limits: Limits | None = None, access_key: str | None = None,
                 secret_key: str | None = None) -> None:
        super().__init__(namesrv, timeout_s=timeout_s, limits=limits, access_key=access_key, secret_key=secret_key)
        self.group = group
        self.client_id = client_id or default_client_id()
        self.subscriptions: dict[str, str] = {}

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Add (or change) a subscription; sent with the next :meth:`heartbeat`."""
        self.subscriptions[topic] = expression

    def _heartbeat_body(self) -> bytes:
        subs = [{"topic": t, "subString": e, "tagsSet": [] if e.strip() in ("", "*") else
                 [x.strip() for x in e.split("||") if x.strip()], "codeSet": [], "subVersion": 0,
                 "classFilterMode": False, "expressionType": "TAG"} for t, e in sorted(self.subscriptions.items())]
        data = {"clientID": self.client_id, "producerDataSet": [], "consumerDataSet": [{
            "groupName": self.group, "consumeType": "CONSUME_ACTIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False, "subscriptionDataSet": subs}]}
        return json.dumps(data, separators=(",", ":")).encode()

    async def _masters(self) -> list[str]:
        addrs: set[str] = set()
        for topic in self.subscriptions:
            route = await self._cached_route(topic)
            addrs.update(a for b in route.broker_datas if (a := b.master_addr()))
        return sorted(addrs)

    async def _heartbeat(self) -> list[str]:
        if not self.subscriptions:
            raise ClientError(f"group {self.group!r}: no subscription to heartbeat (subscribe first)")
        body = self._heartbeat_body()
        addrs = await self._masters()
        for addr in addrs:
            await self.invoke(addr, RemotingCommand(RequestCode.HEART_BEAT, body=body))
        return addrs

    def heartbeat(self) -> list[str]:
        """HEART_BEAT to the master of every broker of the subscribed topics; their addresses.
        Raises :class:`BrokerError`, the transport's errors, :class:`ClientError` without a
        subscription."""
        return call(self._heartbeat())

    async def aheartbeat(self) -> list[str]:
        return await self._heartbeat()

    async def _members(self, route: TopicRouteData, topic: str) -> list[str]:
        masters = sorted((b.broker_name, a) for b in route.broker_datas if (a := b.master_addr()))
        if not masters:
            raise NoRouteError(f"topic {topic!r}: no broker with a master in its route")
        res = await self.invoke(masters[0][1], RemotingCommand(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                               ext_fields={"consumerGroup": self.group}),
                                ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        if res.code == ResponseCode.SYSTEM_ERROR:  # "no consumer for this group": nobody to share with
            return []
        try:
            ids = json.loads(res.body_bytes())["consumerIdList"]
        except (ValueError, KeyError, TypeError) as exc:
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

    async def _unregister(self) -> None:
        for addr in await self._masters():
            await self.invoke(addr, RemotingCommand(RequestCode.UNREGISTER_CLIENT, ext_fields={
                "clientID": self.client_id, "consumerGroup": self.group, "producerGroup": ""}))

    def unregister(self) -> None:
        """UNREGISTER_CLIENT (35) to every broker heartbeated: the group rebalances without it."""
        call(self._unregister())
