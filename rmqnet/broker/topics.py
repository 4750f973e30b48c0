"""The broker's topics (RocketMQ 4.9.8's ``TopicConfigManager``): the store's topics
(``config/topics.json`` through :meth:`rmqlog.MessageStore.topics` / ``create_topic``), the
system topics RocketMQ's broker makes at start, permissions, and the topics created by a send
(``TBW102``) or for a consumer group (``%RETRY%group``, ``%DLQ%group``).

What is kept where:

- queue counts live in the store (``topics.json``): a topic created here is created there,
  so the store API, ``rmqlog topics`` and the Spark source see it;
- the system topics (``TBW102`` with the inherit bit when ``autoCreateTopicEnable``,
  ``SELF_TEST_TOPIC``, ``OFFSET_MOVED_EVENT``, ``BenchmarkTest``, the cluster's and the broker's
  own topics, ``SCHEDULE_TOPIC_XXXX``, ``<cluster>_REPLY_TOPIC``) exist in memory, as in
  RocketMQ, and are written to the store on the first send to one of them;
- a ``perm``, ``order`` or ``topicSysFlag`` that UPDATE_AND_CREATE_TOPIC sets is held here in
  memory over the store's entry: the store's ``create_topic`` takes queue counts only (a
  restart forgets them; see docs/broker.md).

Every change bumps :attr:`TopicManager.data_version` (``{"counter", "timestamp"}``, RocketMQ's
``DataVersion``), which registration sends to the name servers.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from rmqlog import Clock, MessageStore, TopicConfig
from rmqlog.paths import topic_problem

if TYPE_CHECKING:
    from .config import BrokerConfig

log = logging.getLogger(__name__)

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
PERM_RW = PERM_READ | PERM_WRITE

AUTO_CREATE_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
#: queues of a group's retry topic (``SubscriptionGroupConfig.retryQueueNums``) and DLQ
RETRY_QUEUE_NUMS = 1
DLQ_QUEUE_NUMS = 1
#: RocketMQ's ``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``
NOT_ALLOWED_SEND = frozenset({SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                              "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"})


def perm_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


def perm_writable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def perm_text(perm: int) -> str:
    """``PermName.perm2String``: ``RWX`` with ``-`` for a missing bit."""
    return ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-") + ("X" if perm & PERM_INHERIT else "-")


def topic_text(tc: TopicConfig) -> str:
    """``TopicConfig.toString()`` (named in RocketMQ's remarks)."""
    return (f"TopicConfig [topicName={tc.topic_name}, readQueueNums={tc.read_queue_nums}, "
            f"writeQueueNums={tc.write_queue_nums}, perm={perm_text(tc.perm)}, topicFilterType={tc.topic_filter_type}, "
            f"topicSysFlag={tc.topic_sys_flag}, order={'true' if tc.order else 'false'}]")


class TopicManager:
    """Topic configs by name, over ``store``'s (see the module docstring).

    Thread-safe: sends run on the event loop, registration and admin may run elsewhere.
    """

    def __init__(self, store: MessageStore, config: BrokerConfig, clock: Clock) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self._lock = threading.RLock()
        #: the store's topics as last read (refreshed when a name is missing: another process may have made it)
        self._stored: dict[str, TopicConfig] = {}
        #: topics kept in memory over the store's: system topics, and perms the store cannot hold
        self._overlay: dict[str, TopicConfig] = {}
        #: the system topics made at start (:meth:`is_system`)
        self._system: set[str] = set()
        self.data_version: dict[str, int] = {"counter": 0, "timestamp": clock.wall_ms()}
        self._system_topics()
        self.refresh()

    # ----------------------------------------------------------------- reads
    def refresh(self) -> None:
        """Re-read the store's topics (``topics.json`` and the topics only the log has)."""
        stored = self.store.topics()
        with self._lock:
            self._stored = stored

    def get(self, topic: str) -> TopicConfig | None:
        """The config of ``topic``, or ``None`` if the broker and the store know no such topic."""
        tc = self._overlay.get(topic) or self._stored.get(topic)
        if tc is None:
            self.refresh()
            tc = self._overlay.get(topic) or self._stored.get(topic)
        return tc

    def all(self) -> dict[str, TopicConfig]:
        """Every topic (store's and system), by name, the overlay winning."""
        self.refresh()
        with self._lock:
            return {**self._stored, **self._overlay}

    def is_order_topic(self, topic: str) -> bool:
        tc = self.get(topic)
        return tc is not None and tc.order

    # --------------------------------------------------------------- changes
    def update(self, tc: TopicConfig) -> TopicConfig:
        """Create or change a topic (UPDATE_AND_CREATE_TOPIC): queue counts in the store, the
        rest (perm, order, sysflag) over it when they differ from the store's defaults.
        Raises the store's typed errors (a bad name, a queue count outside 1..65535)."""
        stored = self.store.create_topic(tc.topic_name, tc.write_queue_nums, read_queues=tc.read_queue_nums)
        with self._lock:
            self._stored[tc.topic_name] = stored
            if (tc.perm, tc.order, tc.topic_sys_flag, tc.topic_filter_type) != (
                    stored.perm, stored.order, stored.topic_sys_flag, stored.topic_filter_type):
                self._overlay[tc.topic_name] = tc
            else:
                self._overlay.pop(tc.topic_name, None)
            self._next_version()
        return tc

    def delete(self, topic: str) -> tuple[bool, int]:
        """DELETE_TOPIC_IN_BROKER: the topic's config (the store's ``topics.json`` entry, a perm
        held here) and every group's offsets of it removed (:meth:`rmqlog.MessageStore.delete_topic`);
        the topic is unknown to this broker (sends, pulls, registration) until created again.
        Returns what the store removed. Raises the store's typed errors (a bad name)."""
        with self._lock:
            removed = self.store.delete_topic(topic)
            self._overlay.pop(topic, None)
            self._stored.pop(topic, None)
            self._next_version()
        log.info("delete topic %s: config %s, offsets of %d group(s) removed", topic,
                 "removed" if removed[0] else "absent", removed[1])
        return removed

    def create_in_send(self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int = 0) -> TopicConfig | None:
        """RocketMQ's ``createTopicInSendMessageMethod``: ``topic`` made from ``default_topic``'s
        config when that one exists and has the inherit bit (``TBW102`` when
        ``autoCreateTopicEnable``): ``min(client_queue_nums, its write queues)`` queues, its perm
        without the inherit bit. ``None`` when it cannot be made (the caller answers
        TOPIC_NOT_EXIST)."""
        with self._lock:
            existing = self.get(topic)
            if existing is not None:
                return existing
            default = self.get(default_topic)
            if default is None:
                log.warning("create topic %s failed: the default topic %s does not exist", topic, default_topic)
                return None
            if not default.perm & PERM_INHERIT:
                log.warning("create topic %s failed: the default topic %s has no inherit perm (%d)", topic,
                            default_topic, default.perm)
                return None
            n = max(1, min(client_queue_nums, default.write_queue_nums))  # the store takes 1..65535
            tc = TopicConfig(topic, n, n, default.perm & ~PERM_INHERIT, default.topic_filter_type, topic_sys_flag)
            log.info("create topic %s from default topic %s: %s", topic, default_topic, topic_text(tc))
            return self.update(tc)

    def create_retry(self, group: str) -> TopicConfig:
        """``%RETRY%<group>`` as RocketMQ's heartbeat creates it (``createTopicInSendMessageBackMethod``:
        1 queue, read and write); the existing config when there is one. Raises the store's
        :class:`rmqlog.InvalidTopicError` for a group that makes no valid topic name."""
        return self._create_back(RETRY_PREFIX + group, RETRY_QUEUE_NUMS)

    def create_dlq(self, group: str) -> TopicConfig:
        """``%DLQ%<group>`` (1 queue, read and write), as the retry path creates it."""
        return self._create_back(DLQ_PREFIX + group, DLQ_QUEUE_NUMS)

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
            return self.update(TopicConfig(topic, queues, queues, PERM_RW))

    def ensure_stored(self, tc: TopicConfig) -> None:
        """Make a system topic known to the store before its first message (the store checks
        queue ids against its own topics)."""
        if tc.topic_name in self._stored:
            return
        self.refresh()
        if tc.topic_name not in self._stored:
            stored = self.store.create_topic(tc.topic_name, tc.write_queue_nums, read_queues=tc.read_queue_nums)
            with self._lock:
                self._stored[tc.topic_name] = stored
                self._next_version()

    def touch(self) -> None:
        """Move the data version (the broker registers again at its next round)."""
        with self._lock:
            self._next_version()

    # -------------------------------------------------------------- helpers
    def _next_version(self) -> None:
        self.data_version = {"counter": self.data_version["counter"] + 1, "timestamp": self.clock.wall_ms()}

    def _system_topics(self) -> None:
        """The topics RocketMQ's ``TopicConfigManager`` constructor makes (in memory)."""
        c = self.config
        tables: list[TopicConfig] = [TopicConfig("SELF_TEST_TOPIC", 1, 1)]
        if c.auto_create_topic_enable:
            n = c.default_topic_queue_nums
            tables.append(TopicConfig(AUTO_CREATE_TOPIC, n, n, PERM_RW | PERM_INHERIT))
        tables.append(TopicConfig("BenchmarkTest", 1024, 1024))
        tables.append(TopicConfig(c.broker_cluster_name, 16, 16, PERM_INHERIT | (PERM_RW if c.cluster_topic_enable else 0)))
        tables.append(TopicConfig(c.broker_name, 1, 1, PERM_INHERIT | (PERM_RW if c.broker_topic_enable else 0)))
        tables.append(TopicConfig("OFFSET_MOVED_EVENT", 1, 1))
        tables.append(TopicConfig(SCHEDULE_TOPIC, 18, 18))
        tables.append(TopicConfig(f"{c.broker_cluster_name}_REPLY_TOPIC", 1, 1))
        for tc in tables:
            if topic_problem(tc.topic_name) is None:  # a host name with '.' makes no topic
                self._overlay[tc.topic_name] = tc
                self._system.add(tc.topic_name)

    def is_system(self, topic: str) -> bool:
        """One of the topics this broker makes at start (TBW102, the cluster's and broker's own...)."""
        return topic in self._system

