"""The client registry: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
and NOTIFY_CONSUMER_IDS_CHANGED (40) sent to a group when it changes. RocketMQ 4.9.8's
``ClientManageProcessor``, ``ConsumerManageProcessor.getConsumerListByGroup``,
``ConsumerManager``/``ConsumerGroupInfo`` and ``ProducerManager``.

HEART_BEAT's body is ``HeartbeatData`` JSON, read by :mod:`rmqnet.remoting.heartbeat` (its shape),
its groups' names checked here.

A consumer is one connection in one group (Java keys ``ConsumerGroupInfo`` by channel): its
client id, language, version and last heartbeat (wall ms, the broker's clock). A group's
subscriptions are the last heartbeat's set (a topic's entry replaced only by a higher
``subVersion``; topics it no longer names are dropped), which the pull path uses when a pull
carries no subscription of its own. For each consumer group a heartbeat also finds or creates
its subscription group (:mod:`rmqnet.broker.subscription_groups`, when
``autoCreateSubscriptionGroup``) and then ``%RETRY%<group>`` (its ``retryQueueNums`` queues,
read-write), as Java does there, both in memory (persisted on the broker's schedule,
:mod:`rmqnet.broker.state`): a heartbeat's cost is its groups and subscriptions, no file I/O.

Caps (ours, broker.conf keys), checked before anything registers (a refused heartbeat changes
nothing): more consumer and producer groups than ``heartbeatMaxGroupNums`` in one heartbeat,
or new groups past ``clientGroupMaxNums`` in the registry, are ``SYSTEM_ERROR`` naming the key;
a subscription group past ``autoCreateSubscriptionGroupMaxNums`` is
``SUBSCRIPTION_GROUP_NOT_EXIST``.

Guarantees: the group's members get NOTIFY_CONSUMER_IDS_CHANGED (oneway, extField
``consumerGroup``) whenever a member joins or leaves (heartbeat from a new connection,
UNREGISTER_CLIENT, a closed connection, expiry) or its subscriptions change; a consumer or
producer whose last heartbeat is more than 120 s old (``CHANNEL_EXPIRED_TIMEOUT``) is
dropped by :meth:`ClientRegistry.run_once`; a closed connection drops its clients at once
(:meth:`ClientRegistry.on_close`, run from the connection's ``on_close`` callbacks).
A SQL92 subscription's expression is compiled when the heartbeat registers it (Java's
``ConsumerFilterManager``): the pull without a subscription of its own reads with it; one
that does not compile is not kept (the heartbeat still succeeds, as in Java).
GET_CONSUMER_LIST_BY_GROUP answers ``{"consumerIdList": [...]}`` in joining order, or ``SYSTEM_ERROR`` "no consumer for
this
group" as Java does. A body that is not HeartbeatData is ``SYSTEM_ERROR`` naming what is
wrong, and nothing of it is registered.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import rmqlog
from rmqlog import FilterParseError, Sql92Filter
from rmqlog.paths import topic_problem, validate_group

from ..remoting import FLAG_ONEWAY, RemotingCommand, RequestCode, ResponseCode, ext_str
from ..remoting.heartbeat import ConsumerData, HeartbeatData, HeartbeatError, Subscription
from ..remoting.names import RETRY_PREFIX, retry_topic
from .holds import connection_closed, watch_close
from .peer import Peer
from .pull import compiled
from .subscription_groups import GroupTableFull

if TYPE_CHECKING:
    from .broker import Broker

#: ``ConsumerManager.CHANNEL_EXPIRED_TIMEOUT`` / ``ProducerManager.CHANNEL_EXPIRED_TIMEOUT`` (ms)
CHANNEL_EXPIRED_TIMEOUT_MS = 120_000
#: how often Java's ``ClientHousekeepingService`` scans for silent clients (ms)
SCAN_INTERVAL_MS = 10_000


@dataclass(slots=True)
class ClientInfo:
    """``ClientChannelInfo``: one client on one connection."""

    client_id: str
    peer: Peer
    language: str
    version: int
    last_update_ms: int


@dataclass(slots=True)
class ConsumerGroupInfo:
    name: str
    consume_type: str
    message_model: str
    consume_from_where: str
    clients: dict[int, ClientInfo] = field(default_factory=dict)  # by id(peer), in joining order
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    #: by topic: (subVersion, compiled expression) of its SQL92 subscription (``ConsumerFilterData``)
    filters: dict[str, tuple[int, Sql92Filter]] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return [c.client_id for c in self.clients.values()]


def _checked(data: HeartbeatData) -> HeartbeatData:
    """``data`` with every group's name checked by the store's rule (the broker's, not the
    body's shape: :meth:`HeartbeatData.decode`); :class:`HeartbeatError` naming the first bad."""
    for group in (*data.producer_groups, *(c.group for c in data.consumers)):
        try:
            validate_group(group)
        except rmqlog.StoreError as exc:
            raise HeartbeatError(str(exc)) from None
    return data


class ClientRegistry:
    """Consumers and producers by group (``ConsumerManager`` + ``ProducerManager``); a service
    on the broker's clock (:meth:`run_once` expires the silent)."""

    def __init__(self, *, notify: bool = True) -> None:
        self.notify = notify
        self.consumer_groups: dict[str, ConsumerGroupInfo] = {}
        self.producer_groups: dict[str, dict[int, ClientInfo]] = {}
        #: by ``id(peer)``: the consumer and producer groups a connection is in (its close
        #: leaves them without a walk of every group)
        self._peer_consumers: dict[int, set[str]] = {}
        self._peer_producers: dict[int, set[str]] = {}
        self._opaque = itertools.count(1)
        self._next_scan_ms: int | None = None

    def room_for(self, data: HeartbeatData, cap: int) -> str | None:
        """Why registering ``data`` would take the consumer or the producer groups past
        ``cap`` (``clientGroupMaxNums``), or ``None``; nothing changes either way."""
        for kind, groups, known in (
            ("consumer", [c.group for c in data.consumers], self.consumer_groups),
            ("producer", list(data.producer_groups), self.producer_groups),
        ):
            new = sum(1 for g in dict.fromkeys(groups) if g not in known)
            if new and len(known) + new > cap:
                return f"the broker holds {len(known)} {kind} groups: {new} more would pass clientGroupMaxNums {cap}"
        return None

    # ------------------------------------------------------------ consumers
    def register_consumer(self, data: ConsumerData, client: ClientInfo, *, notify: bool = True) -> bool:
        """A consumer's heartbeat; True when the group changed (and was notified, unless
        ``notify`` is off: the group's ``notifyConsumerIdsChangedEnable``)."""
        info = self.consumer_groups.get(data.group)
        if info is None:
            info = self.consumer_groups[data.group] = ConsumerGroupInfo(
                data.group, data.consume_type, data.message_model, data.consume_from_where
            )
        info.consume_type, info.message_model, info.consume_from_where = (
            data.consume_type,
            data.message_model,
            data.consume_from_where,
        )
        old = info.clients.get(id(client.peer))
        joined = old is None
        if old is None or old.client_id != client.client_id:
            info.clients[id(client.peer)] = client
            self._peer_consumers.setdefault(id(client.peer), set()).add(data.group)
        else:
            old.last_update_ms = client.last_update_ms
        changed = _update_subscriptions(info, data.subscriptions) or joined
        _update_filters(info, data.subscriptions)
        if changed and notify:
            self._notify(info)
        return changed

    def unregister_consumer(self, group: str, peer: Peer) -> bool:
        info = self.consumer_groups.get(group)
        if info is None or info.clients.pop(id(peer), None) is None:
            return False
        _unindex(self._peer_consumers, id(peer), group)
        if not info.clients:
            del self.consumer_groups[group]
        self._notify(info)
        return True

    def find_subscription(self, group: str, topic: str) -> Subscription | None:
        info = self.consumer_groups.get(group)
        return None if info is None else info.subscriptions.get(topic)

    def find_filter(self, group: str, topic: str) -> tuple[int, Sql92Filter] | None:
        """The group's compiled SQL92 expression for ``topic`` and its subVersion, if any."""
        info = self.consumer_groups.get(group)
        return None if info is None else info.filters.get(topic)

    def consumer_ids(self, group: str) -> list[str]:
        info = self.consumer_groups.get(group)
        return [] if info is None else info.client_ids()

    # ------------------------------------------------------------ producers
    def register_producer(self, group: str, client: ClientInfo) -> None:
        clients = self.producer_groups.setdefault(group, {})
        old = clients.get(id(client.peer))
        if old is None or old.client_id != client.client_id:
            clients[id(client.peer)] = client
            self._peer_producers.setdefault(id(client.peer), set()).add(group)
        else:
            old.last_update_ms = client.last_update_ms

    def unregister_producer(self, group: str, peer: Peer) -> None:
        clients = self.producer_groups.get(group)
        if clients is not None and clients.pop(id(peer), None) is not None:
            _unindex(self._peer_producers, id(peer), group)
            if not clients:
                del self.producer_groups[group]

    # ---------------------------------------------------- closes and expiry
    def on_close(self, peer: Peer) -> list[str]:
        """The connection closed: its consumers and producers leave every group (each
        consumer group left is notified). Returns the consumer groups it left. Costs the
        groups the connection was in (an index by connection), not every group."""
        left = sorted(self._peer_consumers.get(id(peer), ()))
        for group in left:
            self.unregister_consumer(group, peer)
        for group in sorted(self._peer_producers.get(id(peer), ())):
            self.unregister_producer(group, peer)
        return left

    def run_once(self, now_ms: int) -> int:
        """Drop clients whose last heartbeat is more than 120 s before ``now_ms`` (Java's
        ``scanNotActiveChannel``), at most once per 10 s as Java's housekeeping; the groups
        they leave are notified. Returns how many."""
        if self._next_scan_ms is not None and now_ms < self._next_scan_ms:
            return 0
        self._next_scan_ms = now_ms + SCAN_INTERVAL_MS
        dropped = 0
        for group, info in list(self.consumer_groups.items()):
            stale = [k for k, c in info.clients.items() if now_ms - c.last_update_ms > CHANNEL_EXPIRED_TIMEOUT_MS]
            for k in stale:
                del info.clients[k]
                _unindex(self._peer_consumers, k, group)
            if stale:
                dropped += len(stale)
                if not info.clients:
                    del self.consumer_groups[group]
                self._notify(info)
        for group, clients in list(self.producer_groups.items()):
            stale = [k for k, c in clients.items() if now_ms - c.last_update_ms > CHANNEL_EXPIRED_TIMEOUT_MS]
            for k in stale:
                del clients[k]
                _unindex(self._peer_producers, k, group)
            dropped += len(stale)
            if not clients:
                del self.producer_groups[group]
        return dropped

    def _notify(self, info: ConsumerGroupInfo) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED, oneway, to every consumer left in the group."""
        if not self.notify:
            return
        for client in info.clients.values():
            if client.peer.closed:
                continue
            cmd = RemotingCommand(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                next(self._opaque),
                FLAG_ONEWAY,
                None,
                {"consumerGroup": info.name},
                b"",
                "JAVA",
            )
            try:
                client.peer.send_oneway(cmd)
            except (OSError, RuntimeError):  # the connection went meanwhile: its close drops it
                continue


def _unindex(index: dict[int, set[str]], peer_id: int, group: str) -> None:
    groups = index.get(peer_id)
    if groups is not None:
        groups.discard(group)
        if not groups:
            del index[peer_id]


def _update_subscriptions(info: ConsumerGroupInfo, subs: tuple[Subscription, ...]) -> bool:
    """``ConsumerGroupInfo.updateSubscription``: new topics added, a higher subVersion replaces,
    topics no longer named removed; True when a topic was added or removed."""
    changed = False
    for sub in subs:
        old = info.subscriptions.get(sub.topic)
        if old is None:
            info.subscriptions[sub.topic] = sub
            changed = True
        elif sub.sub_version > old.sub_version:
            info.subscriptions[sub.topic] = sub
    named = {s.topic for s in subs}
    for topic in [t for t in info.subscriptions if t not in named]:
        del info.subscriptions[topic]
        changed = True
    return changed


def _update_filters(info: ConsumerGroupInfo, subs: tuple[Subscription, ...]) -> None:
    """``ConsumerFilterManager.register`` (``FilterDataMapByTopic.register``) for each SQL92
    subscription of a heartbeat: compiled when the group has none for the topic or the
    subVersion is newer; an expression that does not compile is not kept, and a newer one
    that does not compile drops the older (the pull then answers ``FILTER_DATA_NOT_EXIST``,
    the client's cue that its expression is wrong). A topic no longer subscribed by SQL92
    loses its filter (it is used only by SQL92 pulls)."""
    named = set()
    for sub in subs:
        if sub.expression_type != "SQL92":
            continue
        named.add(sub.topic)
        old = info.filters.get(sub.topic)
        if old is not None and sub.sub_version <= old[0]:
            continue
        try:
            info.filters[sub.topic] = (sub.sub_version, compiled(sub.sub_string))
        except FilterParseError:
            info.filters.pop(sub.topic, None)
    for topic in [t for t in info.filters if t not in named]:
        del info.filters[topic]


# ---------------------------------------------------------------------------- handlers
def heart_beat(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    """34 (the module docstring): every check first, then the registration, all or nothing;
    the work is proportional to the heartbeat's groups and subscriptions (tables in memory,
    no file written)."""
    try:
        data = _checked(HeartbeatData.decode(req.body_bytes()))
    except HeartbeatError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    registry = broker.consumers
    config = broker.config
    named = len(data.consumers) + len(data.producer_groups)
    cap = config.heartbeat_max_group_nums
    if named > cap:
        return req.reply(
            ResponseCode.SYSTEM_ERROR,
            f"the heartbeat names {named} consumer and producer groups, more than heartbeatMaxGroupNums {cap}",
        )
    full = registry.room_for(data, config.client_group_max_nums)
    if full is not None:
        return req.reply(ResponseCode.SYSTEM_ERROR, full)
    groups = broker.subscription_groups
    auto, group_cap = config.auto_create_subscription_group, config.auto_create_subscription_group_max_nums
    names = [c.group for c in data.consumers]
    try:
        groups.check_room(names, auto_create=auto, cap=group_cap)
    except GroupTableFull as exc:
        return req.reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, str(exc))
    for group in names:
        problem = topic_problem(retry_topic(group))
        if problem is not None:
            return req.reply(ResponseCode.SYSTEM_ERROR, f"cannot create {RETRY_PREFIX}{group}: {problem}")
    watch_close(broker, peer)
    now = broker.clock.wall_ms()
    for c in data.consumers:
        notify = True
        sub_group = groups.find_or_create(c.group, auto_create=auto, cap=group_cap)
        try:
            if sub_group is not None:  # Java: the retry topic only for a group it knows
                notify = sub_group.notify_consumer_ids_changed_enable
                broker.topics.create_retry(c.group, sub_group.retry_queue_nums)  # in memory
        except rmqlog.StoreError as exc:
            return req.reply(ResponseCode.SYSTEM_ERROR, f"cannot create {RETRY_PREFIX}{c.group}: {exc}")
        registry.register_consumer(c, ClientInfo(data.client_id, peer, req.language, req.version, now), notify=notify)
    for group in data.producer_groups:
        registry.register_producer(group, ClientInfo(data.client_id, peer, req.language, req.version, now))
    return req.reply(ResponseCode.SUCCESS)


def unregister_client(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    ext_str(req.ext_fields, "clientID")  # required (Java's @CFNotNull); the connection says who
    registry = broker.consumers
    producer_group = ext_str(req.ext_fields, "producerGroup", None)
    if producer_group:
        registry.unregister_producer(producer_group, peer)
    consumer_group = ext_str(req.ext_fields, "consumerGroup", None)
    if consumer_group:
        registry.unregister_consumer(consumer_group, peer)
    return req.reply(ResponseCode.SUCCESS)


def get_consumer_list_by_group(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    group = ext_str(req.ext_fields, "consumerGroup")
    ids = broker.consumers.consumer_ids(group)
    if not ids:
        return req.reply(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
    return req.reply(
        ResponseCode.SUCCESS, None, None, json.dumps({"consumerIdList": ids}, separators=(",", ":")).encode()
    )


def on_close(broker: Broker, peer: Peer) -> None:
    """A connection closed: its clients leave their groups, its held pulls are dropped. Run
    by the connection itself (its ``on_close`` list, registered by the first heartbeat or held
    pull on it: :func:`rmqnet.broker.holds.watch_close`); callable directly too."""
    connection_closed(broker, peer)
