"""What ``mqadmin topicStatus``, ``consumerProgress`` and ``consumerConnection`` ask a broker
(RocketMQ 4.9.8's ``AdminBrokerProcessor``): GET_TOPIC_STATS_INFO (202), GET_CONSUME_STATS
(208), GET_CONSUMER_CONNECTION_LIST (203). Bodies in fastjson's form
(:mod:`rmqnet.remoting.admin_bodies`).

- 202: extField ``topic``. An unknown topic is TOPIC_NOT_EXIST "topic[T] not exist"; else per
  write queue ``minOffset``, ``maxOffset`` (negatives as 0) and ``lastUpdateTimestamp``, the
  store time (ms) of the message at ``maxOffset - 1`` (0 for an empty queue), keyed by
  ``MessageQueue`` (this broker's name).
- 208: extFields ``consumerGroup`` (required) and ``topic`` (blank: every topic the group has
  committed offsets of). Per read queue of each topic: ``brokerOffset`` (the queue's max
  offset), ``consumerOffset`` (the group's committed offset in the broker's table, 0 when none) and
  ``lastTimestamp`` (the store time of the message at ``consumerOffset - 1``, 0 when none);
  a topic the broker does not know is left out, and so is a topic the group's live consumers
  do not subscribe to while they subscribe to some (Java's rules). ``consumeTps``: the
  messages the group pulled of those topics in the last minute, per second (Java's
  ``GROUP_GET_NUMS`` statistic; :class:`GetNums`).
- 203: extField ``consumerGroup``. A group with no live consumer is CONSUMER_NOT_ONLINE (206)
  "the consumer group[G] not online"; else ``connectionSet`` (each consumer's ``clientId``,
  ``clientAddr``, ``language``, ``version``), ``consumeType``, ``messageModel``,
  ``consumeFromWhere`` and ``subscriptionTable`` (topic -> ``SubscriptionData``).

A group or topic name the store would refuse is SYSTEM_ERROR with the store's message (names
from the wire are never used as paths unchecked).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING

import pyarrow as pa

import rmqlog
from rmqlog import MessageStore
from rmqlog.paths import validate_group, validate_topic

from ..remoting import RemotingCommand, ResponseCode
from ..remoting.admin_bodies import (
    ConsumeStats,
    OffsetWrapper,
    QueueKey,
    TopicOffset,
    encode_consume_stats,
    encode_consumer_connection,
    encode_topic_stats,
)
from ..remoting.request_headers import ConsumeStatsHeader, TopicHeader
from .peer import Peer

if TYPE_CHECKING:
    from .broker import Broker

#: the window of :class:`GetNums` (ms): Java's per-minute statistic
TPS_WINDOW_MS = 60_000
_BUCKET_MS = 1000


class GetNums:
    """Messages pulled per (group, topic), in 1 s buckets over the last minute (thread-safe:
    pulls run on the loop, admin requests may not). A broker service: :meth:`run_once` drops,
    once a window, the pairs with nothing pulled in the last one (their rate is 0), so the
    table holds only the pairs pulled in the last two minutes, however many come and go."""

    def __init__(self, window_ms: int = TPS_WINDOW_MS) -> None:
        self.window_ms = window_ms
        self._buckets: dict[tuple[str, str], deque[list[int]]] = {}
        self._lock = threading.Lock()
        self._next_sweep_ms: int | None = None

    def __len__(self) -> int:
        """How many (group, topic) pairs are kept."""
        return len(self._buckets)

    def run_once(self, now_ms: int) -> bool:
        """Once a window: forget the pairs whose newest bucket left the window (a walk of the
        pairs, once a minute); returns whether it swept."""
        if self._next_sweep_ms is not None and now_ms < self._next_sweep_ms:
            return False
        self._next_sweep_ms = now_ms + self.window_ms
        oldest = (now_ms - self.window_ms) // _BUCKET_MS
        with self._lock:
            for key in [k for k, q in self._buckets.items() if not q or q[-1][0] <= oldest]:
                del self._buckets[key]
        return True

    def record(self, group: str, topic: str, n: int, now_ms: int) -> None:
        second = now_ms // _BUCKET_MS
        with self._lock:
            q = self._buckets.setdefault((group, topic), deque())
            if q and q[-1][0] == second:
                q[-1][1] += n
            else:
                q.append([second, n])
            self._trim(q, now_ms)

    def _trim(self, q: deque[list[int]], now_ms: int) -> None:
        oldest = (now_ms - self.window_ms) // _BUCKET_MS
        while q and q[0][0] <= oldest:
            q.popleft()

    def tps(self, group: str, topic: str, now_ms: int) -> float:
        """Messages per second over the last window."""
        with self._lock:
            q = self._buckets.get((group, topic))
            if not q:
                return 0.0
            self._trim(q, now_ms)
            if not q:
                del self._buckets[(group, topic)]
                return 0.0
            return sum(n for _, n in q) * 1000 / self.window_ms


def _store_time(store: MessageStore, topic: str, queue_id: int, offset: int) -> int:
    """``getMessageStoreTimeStamp``: the store time (ms) of the message at ``offset``, 0 if none."""
    table = store.read_queue(topic, queue_id, offset, offset + 1)
    if not table.num_rows:
        return 0
    return int(table.column("storeTimestamp").cast(pa.int64())[0].as_py()) // 1000


def _names(req: RemotingCommand, *, group: bool = False, topic: bool = False) -> tuple[str, str] | RemotingCommand:
    if group:
        h = ConsumeStatsHeader.read(req.ext_fields)
        g, t = h.consumer_group, h.topic or ""
    else:
        g, t = "", TopicHeader.read(req.ext_fields).topic
    try:
        if group:
            validate_group(g)
        if t.strip():
            validate_topic(t)
    except rmqlog.StoreError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    return g, t


def get_topic_stats_info(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    names = _names(req, topic=True)
    if isinstance(names, RemotingCommand):
        return names
    topic = names[1]
    tc = broker.topics.get(topic)
    if tc is None:
        return req.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
    store, name = broker.store, broker.config.broker_name
    table = {}
    try:
        for qid in range(tc.write_queue_nums):
            lo, hi = max(0, store.min_offset(topic, qid)), max(0, store.max_offset(topic, qid))
            table[QueueKey(topic, name, qid)] = TopicOffset(
                lo, hi, _store_time(store, topic, qid, hi - 1) if hi > 0 else 0
            )
    except rmqlog.StoreError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
    return req.reply(ResponseCode.SUCCESS, None, None, encode_topic_stats(table))


def _group_topics(broker: Broker, group: str) -> list[str]:
    """``whichTopicByConsumer``: the topics of ``group``'s committed offsets (the broker's
    offset table's index by group: no walk of the table)."""
    return broker.consumer_offsets.topics_of(group)


def get_consume_stats(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    names = _names(req, group=True)
    if isinstance(names, RemotingCommand):
        return names
    group, topic = names
    store, name, now = broker.store, broker.config.broker_name, broker.clock.wall_ms()
    registry = broker.consumers
    info = registry.consumer_groups.get(group)
    subscribed = set(info.subscriptions) if info is not None else set()
    table: dict[QueueKey, OffsetWrapper] = {}
    tps = 0.0
    offsets = broker.consumer_offsets
    try:
        for t in [topic] if topic.strip() else _group_topics(broker, group):
            tc = broker.topics.get(t)
            if tc is None or (subscribed and t not in subscribed):
                continue
            for qid in range(tc.read_queue_nums):
                broker_offset = max(0, store.max_offset(t, qid))
                consumer_offset = max(0, offsets.query(group, t, qid))
                last = _store_time(store, t, qid, consumer_offset - 1) if consumer_offset > 0 else 0
                table[QueueKey(t, name, qid)] = OffsetWrapper(broker_offset, consumer_offset, max(0, last))
            tps += broker.get_nums.tps(group, t, now)
    except rmqlog.StoreError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
    return req.reply(ResponseCode.SUCCESS, None, None, encode_consume_stats(ConsumeStats(table, tps)))


def get_consumer_connection_list(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    names = _names(req, group=True)
    if isinstance(names, RemotingCommand):
        return names
    group = names[0]
    info = broker.consumers.consumer_groups.get(group)
    if info is None or not info.clients:
        return req.reply(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
    body = {
        "connectionSet": [
            {"clientAddr": c.peer.remote, "clientId": c.client_id, "language": c.language, "version": c.version}
            for c in info.clients.values()
        ],
        "consumeFromWhere": info.consume_from_where,
        "consumeType": info.consume_type,
        "messageModel": info.message_model,
        "subscriptionTable": {
            t: {
                "classFilterMode": False,
                "codeSet": [],
                "expressionType": s.expression_type,
                "subString": s.sub_string,
                "subVersion": s.sub_version,
                "tagsSet": list(s.tags),
                "topic": t,
            }
            for t, s in sorted(info.subscriptions.items())
        },
    }
    return req.reply(ResponseCode.SUCCESS, None, None, encode_consumer_connection(body))
