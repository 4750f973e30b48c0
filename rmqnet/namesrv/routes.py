"""The name server's state (RocketMQ 4.9.8's ``RouteInfoManager``), sans-I/O.

Tables, as Java keeps them:

- brokers by name: cluster, and the address of each broker id (0 the master, 1.. slaves);
- clusters: cluster name -> broker names;
- topics: topic -> broker name -> :class:`~rmqnet.remoting.route.QueueData`;
- live brokers: broker address -> last registration time, data version, connection, HA address.

Guarantees: a route is answered only for a topic that some registered broker lists, with the
brokers that serve it; a broker is dropped (with every topic only it served) when it
unregisters, when its connection closes, or :data:`BROKER_CHANNEL_EXPIRED_TIME` ms after its
last registration. A master's topic configs are re-read only when its data version changed
or it registers for the first time; a slave's are never read (Java's rules). A topic a master
stops listing (deleted on it) leaves that broker's part of the route at the registration
that shows it (RocketMQ 5's rule; 4.9.8 kept it until DELETE_TOPIC_IN_NAMESRV or the broker
was dropped).

Single-threaded by design (the asyncio loop of :class:`NameServerProcess` is its only user):
no lock, where Java takes a read-write lock.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from ..remoting.register import ClusterInfo, DataVersion, RegisterBrokerResult, TopicConfigData
from ..remoting.route import MASTER_ID, BrokerData, QueueData, TopicRouteData

#: ``RouteInfoManager.BROKER_CHANNEL_EXPIRED_TIME``: a broker silent this long is dropped
BROKER_CHANNEL_EXPIRED_TIME = 120_000


@dataclass(slots=True)
class BrokerLive:
    """``BrokerLiveInfo``: what the name server knows of a registered broker address."""

    last_update_ms: int
    data_version: DataVersion
    conn: Hashable | None
    ha_server_addr: str


class RouteTable:
    """The tables above and the operations on them (see the module docstring)."""

    def __init__(self) -> None:
        self.topics: dict[str, dict[str, QueueData]] = {}
        self.brokers: dict[str, BrokerData] = {}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, BrokerLive] = {}

    # ------------------------------------------------------------------ registration
    def register(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topics: dict[str, TopicConfigData],
        data_version: DataVersion,
        conn: Hashable | None,
        now_ms: int,
    ) -> RegisterBrokerResult:
        """``registerBroker``: record the broker and, for a master whose topics changed (or
        that is new), their queue datas; a slave learns its master's addresses."""
        self.clusters.setdefault(cluster, set()).add(broker_name)
        data = self.brokers.get(broker_name)
        first = data is None
        if data is None:
            data = self.brokers[broker_name] = BrokerData(cluster, broker_name, {})
        # one address has one id: a slave promoted to master first leaves its old id
        for bid in [b for b, a in data.broker_addrs.items() if a == broker_addr and b != broker_id]:
            del data.broker_addrs[bid]
        old = data.broker_addrs.get(broker_id)
        data.broker_addrs[broker_id] = broker_addr
        first = first or old is None
        if broker_id == MASTER_ID and (first or self._changed(broker_addr, data_version)):
            for t in topics.values():
                self.topics.setdefault(t.topic_name, {})[broker_name] = QueueData(
                    broker_name, t.read_queue_nums, t.write_queue_nums, t.perm, t.topic_sys_flag
                )
            # a topic the master no longer lists (deleted on it: DELETE_TOPIC_IN_BROKER) leaves its
            # route (RocketMQ 5's registerBroker does the same; 4.9.8 waits for DELETE_TOPIC_IN_NAMESRV)
            for name in [n for n, by in self.topics.items() if broker_name in by and n not in topics]:
                del self.topics[name][broker_name]
                if not self.topics[name]:
                    del self.topics[name]
        self.live[broker_addr] = BrokerLive(now_ms, data_version, conn, ha_server_addr)
        if broker_id != MASTER_ID:
            master = data.broker_addrs.get(MASTER_ID)
            master_live = self.live.get(master) if master is not None else None
            if master_live is not None:
                return RegisterBrokerResult(ha_server_addr=master_live.ha_server_addr, master_addr=master)
        return RegisterBrokerResult()

    def holder(self, broker_name: str, broker_id: int) -> str | None:
        """The address a live registration holds ``broker_name``'s ``broker_id`` at, if any."""
        data = self.brokers.get(broker_name)
        addr = data.broker_addrs.get(broker_id) if data is not None else None
        return addr if addr is not None and addr in self.live else None

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """``deleteTopic``: the topic's route gone; with ``cluster``, only the part of that
        cluster's brokers. A master that still lists it brings it back at its next
        registration with a new data version, as in Java."""
        by_broker = self.topics.get(topic)
        if by_broker is None:
            return
        if cluster is None:
            del self.topics[topic]
            return
        for name in self.clusters.get(cluster, set()):
            by_broker.pop(name, None)
        if not by_broker:
            del self.topics[topic]

    def _changed(self, broker_addr: str, version: DataVersion) -> bool:
        prev = self.live.get(broker_addr)
        return prev is None or prev.data_version != version

    def unregister(self, *, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> bool:
        """``unregisterBroker``; whether that broker address was registered. The name's id is
        removed only when that address holds it; else nothing changes (another address's
        registration stays) and the answer is False."""
        data = self.brokers.get(broker_name)
        if data is None or data.broker_addrs.get(broker_id) != broker_addr:
            return False
        was_live = self.live.pop(broker_addr, None) is not None
        data.broker_addrs.pop(broker_id, None)
        if not data.broker_addrs:
            del self.brokers[broker_name]
            names = self.clusters.get(cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.clusters[cluster]
            self._remove_topics_of(broker_name)
        return was_live

    def drop(self, broker_addr: str) -> str | None:
        """``onChannelDestroy``: forget the broker at ``broker_addr`` (its connection closed
        or it expired); the broker name it served, if it was known."""
        self.live.pop(broker_addr, None)
        found = None
        for data in self.brokers.values():
            for bid, addr in list(data.broker_addrs.items()):
                if addr == broker_addr:
                    found = data
                    del data.broker_addrs[bid]
                    break
            if found is not None:
                break
        if found is None:
            return None
        if not found.broker_addrs:
            del self.brokers[found.broker_name]
            for cluster, names in list(self.clusters.items()):
                if found.broker_name in names:
                    names.discard(found.broker_name)
                    if not names:
                        del self.clusters[cluster]
                    break
            self._remove_topics_of(found.broker_name)
        return found.broker_name

    def drop_connection(self, conn: Hashable) -> list[str]:
        """The broker addresses registered over ``conn``, dropped (its connection closed)."""
        addrs = [addr for addr, live in self.live.items() if live.conn is not None and live.conn == conn]
        for addr in addrs:
            self.drop(addr)
        return addrs

    def expire(self, now_ms: int) -> list[tuple[str, Hashable | None]]:
        """``scanNotActiveBroker``: drop every broker whose last registration is more than
        :data:`BROKER_CHANNEL_EXPIRED_TIME` ms before ``now_ms``; (address, connection) of each."""
        gone = [
            (addr, live.conn)
            for addr, live in self.live.items()
            if live.last_update_ms + BROKER_CHANNEL_EXPIRED_TIME < now_ms
        ]
        for addr, _ in gone:
            self.drop(addr)
        return gone

    def _remove_topics_of(self, broker_name: str) -> None:
        for topic in list(self.topics):
            queues = self.topics[topic]
            queues.pop(broker_name, None)
            if not queues:
                del self.topics[topic]

    # ------------------------------------------------------------------ queries
    def route(self, topic: str) -> TopicRouteData | None:
        """``pickupTopicRouteData``: the topic's queue datas and the brokers serving them, or
        ``None`` when no registered broker lists it (brokers and queues sorted by name)."""
        queues = self.topics.get(topic)
        if not queues:
            return None
        brokers = [self.brokers[name] for name in sorted(queues) if name in self.brokers]
        if not brokers:
            return None
        return TopicRouteData(
            [
                QueueData(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
                for _, q in sorted(queues.items())
            ],
            [BrokerData(b.cluster, b.broker_name, dict(b.broker_addrs)) for b in brokers],
        )

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            {
                name: BrokerData(b.cluster, b.broker_name, dict(b.broker_addrs))
                for name, b in sorted(self.brokers.items())
            },
            {c: sorted(names) for c, names in sorted(self.clusters.items())},
        )

    def topic_list(self) -> list[str]:
        return sorted(self.topics)
