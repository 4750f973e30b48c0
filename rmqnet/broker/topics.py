"""The broker's topics (RocketMQ 4.9.8's ``TopicConfigManager``): the store's topics
(``config/topics.json``, held in memory by the store: :meth:`rmqlog.MessageStore.topic_table`),
the system topics RocketMQ's broker makes at start, permissions, and the topics created by a
send (``TBW102``) or for a consumer group (``%RETRY%group``, ``%DLQ%group``).

What is kept where:

- a topic's whole config (queue counts, ``perm``, ``order``, ``topicSysFlag``,
  ``topicFilterType``) lives in the store (``topics.json``), so the store API, ``rmqlog topics``
  and the Spark source see it, and a restart keeps it;
- lookups are in memory: a request naming an unknown topic reads no file (another process's
  new topic is taken in by the next persist round, :mod:`rmqnet.broker.state`, or the store's
  own re-read when its put path meets the name);
- a topic auto-created by a send, and a group's retry and dead-letter topics, are created in
  memory (:meth:`rmqlog.MessageStore.put_topic` with ``persist=False``: the cost does not grow
  with the number of topics) and written by the next persist round; a crash before it loses
  the entry (a topic with messages is found again from its consume queues at the next start,
  read-write as it was created); UPDATE_AND_CREATE_TOPIC writes ``topics.json`` at once, as
  RocketMQ does;
- the system topics (``TBW102`` with the inherit bit when ``autoCreateTopicEnable``,
  ``SELF_TEST_TOPIC``, ``OFFSET_MOVED_EVENT``, ``BenchmarkTest``, the cluster's and the broker's
  own topics, ``SCHEDULE_TOPIC_XXXX``, ``<cluster>_REPLY_TOPIC``) exist in memory, as in
  RocketMQ, and are given to the store (in memory) before the first send to one of them;
- a send's auto-creation is refused (the send answers ``TOPIC_NOT_EXIST``) once the broker
  holds ``autoCreateTopicMaxNums`` topics (ours: a client must not grow the table without bound).

Every change bumps :attr:`TopicManager.data_version` (``{"counter", "timestamp"}``, RocketMQ's
``DataVersion``), which registration sends to the name servers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rmqlog import Clock, MessageStore, TopicConfig
from rmqlog.paths import topic_problem

from ..remoting.names import (
    AUTO_CREATE_TOPIC,
    BENCHMARK_TOPIC,
    LMQ_PREFIX,
    OFFSET_MOVED_EVENT,
    PERM_INHERIT,
    PERM_READ,
    PERM_RW,
    PERM_WRITE,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    dlq_topic,
    retry_topic,
)

if TYPE_CHECKING:
    from .config import BrokerConfig
    from .consumer_offsets import ConsumerOffsetTable

log = logging.getLogger(__name__)

#: queues of a group's retry topic (``SubscriptionGroupConfig.retryQueueNums``) and DLQ
RETRY_QUEUE_NUMS = 1
DLQ_QUEUE_NUMS = 1


def perm_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


def perm_writable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def perm_text(perm: int) -> str:
    """``PermName.perm2String``: ``RWX`` with ``-`` for a missing bit."""
    return (
        ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-") + ("X" if perm & PERM_INHERIT else "-")
    )


def topic_text(tc: TopicConfig) -> str:
    """``TopicConfig.toString()`` (named in RocketMQ's remarks)."""
    return (
        f"TopicConfig [topicName={tc.topic_name}, readQueueNums={tc.read_queue_nums}, "
        f"writeQueueNums={tc.write_queue_nums}, perm={perm_text(tc.perm)}, topicFilterType={tc.topic_filter_type}, "
        f"topicSysFlag={tc.topic_sys_flag}, order={'true' if tc.order else 'false'}]"
    )


class TopicManager:
    """Topic configs by name, over ``store``'s (see the module docstring); ``config`` gives the
    broker's config of now.

    Thread-safe: sends run on the event loop, registration and admin may run elsewhere.
    """

    def __init__(self, store: MessageStore, config: Callable[[], BrokerConfig], clock: Clock) -> None:
        self.store = store
        self._lmq = store.config.enable_lmq
        self._config = config
        self.clock = clock
        self._lock = threading.RLock()
        #: topics kept in memory over the store's: the system topics
        self._overlay: dict[str, TopicConfig] = {}
        #: topic -> queue count its arrivals were last found within (cleared at every change)
        self._arrivals_ok: dict[str, int] = {}
        #: the system topics made at start (:meth:`is_system`)
        self._system: set[str] = set()
        #: auto-creations refused at the cap (a statistic; the log says it once per 1,000)
        self.refused = 0
        #: the broker's consumer offsets (set by the broker), told of a topic's delete
        self.offsets: ConsumerOffsetTable | None = None
        self.data_version: dict[str, int] = {"counter": 0, "timestamp": clock.wall_ms()}
        self._system_topics()
        self._adopt_found()
        store.wire.on_arrival(self._arrived)

    def _adopt_found(self) -> None:
        """Topics only the log has (consume-queue folders without a ``topics.json`` entry: a
        store RocketMQ wrote without its config, an entry lost to a crash) are given to the
        store's table in memory (written by the next persist), once, at start."""
        known = self.store.topic_table()
        found = [
            tc
            for name, tc in self.store.topics().items()
            if name not in known and not (self._lmq and name.startswith(LMQ_PREFIX))
        ]  # (LMQs: never stored)
        for tc in found:
            self.store.put_topic(tc, persist=False)
        if found:
            log.info("%d topic(s) found from their consume queues only, kept in topics.json", len(found))

    def _arrived(self, topics: list[str], queue_ids: Any, max_offsets: Any) -> None:
        """The dispatcher's arrival signal (:meth:`rmqlog.access.wire.WireCalls.on_arrival`, on the
        dispatching thread): a topic that got units and that the broker does not know (a
        slave's replicated records, another process's puts before the persist round takes in
        its ``topics.json``) is taken into the table as the store lists such topics (read-write,
        as many queues as its highest queue with units + 1), in memory. Costs a lookup per
        topic of the dispatch while every topic is known."""
        ok = self._arrivals_ok
        if all(int(q) < ok.get(t, 0) for t, q in zip(topics, queue_ids, strict=True)):
            return  # (the usual case: every queue already known to be the topic's)
        queues: dict[str, int] = {}  # topics unknown, or known with fewer queues than got units
        for topic, qid in zip(topics, queue_ids, strict=True):
            tc = self.get(topic)  # (an LMQ's included)
            if tc is None or int(qid) >= max(tc.read_queue_nums, tc.write_queue_nums):
                queues[topic] = max(queues.get(topic, 0), int(qid) + 1)
            else:
                ok[topic] = max(tc.read_queue_nums, tc.write_queue_nums)
        if not queues:
            return
        with self._lock:
            for topic, n in queues.items():
                tc = self.get(topic)
                if tc is None and topic_problem(topic) is None:
                    self.store.put_topic(TopicConfig(topic, n, n), persist=False)
                    log.info("topic %s found from its consume queues (%d queues)", topic, n)
                    self._next_version()
                elif tc is not None and n > max(tc.read_queue_nums, tc.write_queue_nums):
                    # units in a queue past its config (a slave's replicated records of a topic
                    # its master grew, or first seen on a lower queue): readable as the store
                    # lists them (as many queues as its highest one with units + 1)
                    grown = dataclasses.replace(tc, read_queue_nums=n, write_queue_nums=max(tc.write_queue_nums, n))
                    self.store.put_topic(grown, persist=False)
                    log.info("topic %s grown to %d queues, as found from its consume queues", topic, n)
                    self._next_version()

    @property
    def config(self) -> BrokerConfig:
        """The broker's config now (``config()``: UPDATE_BROKER_CONFIG may replace it, and
        ``autoCreateTopicMaxNums`` is read at each auto-creation)."""
        return self._config()

    # ----------------------------------------------------------------- reads
    def get(self, topic: str) -> TopicConfig | None:
        """The config of ``topic``, or ``None`` if the broker and the store know no such topic
        (in memory: no file is read). With ``enable_lmq``, an LMQ (``%LMQ%...``) is
        one queue, readable and writable, never stored (RocketMQ's ``LmqTopicConfigManager``)."""
        found = self._overlay.get(topic) or self.store.topic_table().get(topic)
        if found is None and self._lmq and topic.startswith(LMQ_PREFIX):
            return TopicConfig(topic, 1, 1, PERM_READ | PERM_WRITE)
        return found

    def all(self) -> dict[str, TopicConfig]:
        """Every topic (store's and system), by name, the overlay winning."""
        with self._lock:
            return {**self.store.topic_table(), **self._overlay}

    def count(self) -> int:
        """How many topics the broker holds (the store's and the system ones not stored yet)."""
        table = self.store.topic_table()
        return len(table) + sum(1 for name in self._overlay if name not in table)

    def is_order_topic(self, topic: str) -> bool:
        tc = self.get(topic)
        return tc is not None and tc.order

    # --------------------------------------------------------------- changes
    def update(self, tc: TopicConfig, *, persist: bool = True) -> TopicConfig:
        """Create or change a topic (UPDATE_AND_CREATE_TOPIC): its whole config in the store,
        written at once (``persist=False``: in memory until the next persist round). Raises
        the store's typed errors (a bad name, a queue count outside 1..65535, a perm outside 0..7)."""
        with self._lock:
            self.store.put_topic(tc, persist=persist)
            if tc.topic_name in self._overlay:  # a system topic: what get() answers
                self._overlay[tc.topic_name] = tc
            self._next_version()
        return tc

    def delete(self, topic: str) -> tuple[bool, int]:
        """DELETE_TOPIC_IN_BROKER: the topic's config (the store's ``topics.json`` entry) and
        every group's offsets of it removed (:meth:`rmqlog.MessageStore.delete_topic`; the
        broker's offset table forgets them, ``offsets``); the topic is unknown to this broker
        (sends, pulls, registration) until created again. Returns what the store removed.
        Raises the store's typed errors (a bad name)."""
        # (between two persists of the offsets: one in flight would write back what the delete removes)
        with self._lock, self.offsets.persist_held() if self.offsets is not None else contextlib.nullcontext():
            removed = self.store.delete_topic(topic)
            self._overlay.pop(topic, None)
            if self.offsets is not None:
                self.offsets.remove_topic(topic)
            self._next_version()
        log.info(
            "delete topic %s: config %s, offsets of %d group(s) removed",
            topic,
            "removed" if removed[0] else "absent",
            removed[1],
        )
        return removed

    def drop_config(self, topic: str) -> bool:
        """A replication slave's sync (RocketMQ's ``SlaveSynchronize``, which replaces the config
        table): ``topic``'s config only leaves the table (and ``topics.json``); its queues' units
        and every group's offsets stay (:meth:`rmqlog.MessageStore.remove_topic_config`), so
        records replicated before the master's next table lists the topic are never lost. Its
        next units, or the next start, take it in again from its consume queues. Returns
        whether there was an entry; raises the store's typed errors (a bad name)."""
        with self._lock:
            had = self.store.remove_topic_config(topic)
            self._overlay.pop(topic, None)
            self._next_version()
        return had

    def create_in_send(
        self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int = 0
    ) -> TopicConfig | None:
        """RocketMQ's ``createTopicInSendMessageMethod``: ``topic`` made from ``default_topic``'s
        config when that one exists and has the inherit bit (``TBW102`` when
        ``autoCreateTopicEnable``): ``min(client_queue_nums, its write queues)`` queues, its perm
        without the inherit bit; in memory (written by the next persist round). ``None`` when
        it cannot be made, or when the broker holds ``autoCreateTopicMaxNums`` topics (the
        caller answers TOPIC_NOT_EXIST)."""
        with self._lock:
            existing = self.get(topic)
            if existing is not None:
                return existing
            default = self.get(default_topic)
            if default is None:
                log.warning("create topic %s failed: the default topic %s does not exist", topic, default_topic)
                return None
            if not default.perm & PERM_INHERIT:
                log.warning(
                    "create topic %s failed: the default topic %s has no inherit perm (%d)",
                    topic,
                    default_topic,
                    default.perm,
                )
                return None
            cap = self.config.auto_create_topic_max_nums
            if self.count() >= cap:
                if self.refused % 1000 == 0:
                    log.warning(
                        "create topic %s refused: the broker holds %d topics, autoCreateTopicMaxNums is %d "
                        "(%d refused so far)",
                        topic,
                        self.count(),
                        cap,
                        self.refused + 1,
                    )
                self.refused += 1
                return None
            n = max(1, min(client_queue_nums, default.write_queue_nums))  # the store takes 1..65535
            tc = TopicConfig(topic, n, n, default.perm & ~PERM_INHERIT, default.topic_filter_type, topic_sys_flag)
            log.info("create topic %s from default topic %s: %s", topic, default_topic, topic_text(tc))
            return self.update(tc, persist=False)

    def create_retry(self, group: str, queues: int = RETRY_QUEUE_NUMS) -> TopicConfig:
        """``%RETRY%<group>`` as RocketMQ's heartbeat creates it (``createTopicInSendMessageBackMethod``:
        the group's ``retryQueueNums`` queues, read and write), in memory; the existing config
        when there is one. Raises the store's :class:`rmqlog.InvalidTopicError` for a group
        that makes no valid topic name."""
        return self._create_back(retry_topic(group), queues)

    def create_dlq(self, group: str) -> TopicConfig:
        """``%DLQ%<group>`` (1 queue, read and write), as the retry path creates it."""
        return self._create_back(dlq_topic(group), DLQ_QUEUE_NUMS)

    def create_system(self, topic: str) -> TopicConfig:
        """One of RocketMQ's transaction topics (``RMQ_SYS_TRANS_HALF_TOPIC``,
        ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, ``TRANS_CHECK_MAX_TIME_TOPIC``) as its
        ``TransactionalMessageBridge.selectTopicConfig`` makes it: 1 queue, read and write; in
        the store before its first message."""
        tc = self._create_back(topic, 1)
        self.ensure_stored(tc)
        return tc

    def _create_back(self, topic: str, queues: int) -> TopicConfig:
        with self._lock:
            tc = self.get(topic)
            if tc is not None:
                return tc
            return self.update(TopicConfig(topic, queues, queues, PERM_RW), persist=False)

    def ensure_stored(self, tc: TopicConfig) -> None:
        """Make a system topic known to the store before its first message (the store checks
        queue ids against its own topics): in memory, written by the next persist round."""
        if tc.topic_name in self.store.topic_table():
            return
        with self._lock:
            if tc.topic_name not in self.store.topic_table():
                self.store.put_topic(tc, persist=False)
                self._next_version()

    def persist(self) -> bool:
        """The topics created in memory merged with ``topics.json`` (the persist round,
        :meth:`rmqlog.MessageStore.persist_topics`); other processes' topics taken in.
        Returns whether the file was written."""
        with self._lock:
            return self.store.persist_topics()

    def touch(self) -> None:
        """Move the data version (the broker registers again at its next round)."""
        with self._lock:
            self._next_version()

    # -------------------------------------------------------------- helpers
    def _next_version(self) -> None:
        self._arrivals_ok = {}  # (a topic changed: its queues are looked up again at its next units)
        self.data_version = {"counter": self.data_version["counter"] + 1, "timestamp": self.clock.wall_ms()}

    def _system_topics(self) -> None:
        """The topics RocketMQ's ``TopicConfigManager`` constructor makes (in memory)."""
        c = self.config
        tables: list[TopicConfig] = [TopicConfig(SELF_TEST_TOPIC, 1, 1)]
        if c.auto_create_topic_enable:
            n = c.default_topic_queue_nums
            tables.append(TopicConfig(AUTO_CREATE_TOPIC, n, n, PERM_RW | PERM_INHERIT))
        tables.append(TopicConfig(BENCHMARK_TOPIC, 1024, 1024))
        tables.append(
            TopicConfig(c.broker_cluster_name, 16, 16, PERM_INHERIT | (PERM_RW if c.cluster_topic_enable else 0))
        )
        tables.append(TopicConfig(c.broker_name, 1, 1, PERM_INHERIT | (PERM_RW if c.broker_topic_enable else 0)))
        tables.append(TopicConfig(OFFSET_MOVED_EVENT, 1, 1))
        tables.append(TopicConfig(SCHEDULE_TOPIC, 18, 18))
        tables.append(TopicConfig(f"{c.broker_cluster_name}_REPLY_TOPIC", 1, 1))
        for tc in tables:
            if topic_problem(tc.topic_name) is None:  # a host name with '.' makes no topic
                self._overlay[tc.topic_name] = tc
                self._system.add(tc.topic_name)

    def is_system(self, topic: str) -> bool:
        """One of the topics this broker makes at start (TBW102, the cluster's and broker's own...)."""
        return topic in self._system
