"""RocketMQ's vocabulary as the network side speaks it, declared once: permission bits
(``PermName``), the retry and dead-letter topics of a consumer group (``MixAll``), the system
topics (``TopicValidator``), the properties string's separators and the property names the
broker, the clients and the gRPC conversion set or read (``MessageConst``).

Here, not imported from the store, because ``remoting`` (and the name server standing on it)
imports no store: ``import rmqlog`` loads pyarrow and numpy. Where the store declares the same
name (the perm bits of ``topics.json``, the separators and property names of its properties
codec, the dead-letter prefix of ``rmqlog dlq``), ``tests/wire/test_names.py`` holds the two
equal. ``tests/wire/test_rmqnet_layout.py`` keeps the literals out of every other module.
"""

from __future__ import annotations

from collections.abc import Mapping

# ------------------------------------------------------------------- permission bits (PermName)
PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
#: a topic both readable and writable (RocketMQ's default for a topic)
PERM_RW = PERM_READ | PERM_WRITE

# -------------------------------------------------------- a consumer group's topics (MixAll)
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
#: ``MixAll.LMQ_PREFIX``: a light message queue's name (``enableLmq``)
LMQ_PREFIX = "%LMQ%"


def retry_topic(group: str) -> str:
    """``MixAll.getRetryTopic``: ``%RETRY%<group>``."""
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    """``MixAll.getDLQTopic``: ``%DLQ%<group>``."""
    return DLQ_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_PREFIX)


# ------------------------------------------------------------ system topics (TopicValidator)
AUTO_CREATE_TOPIC = "TBW102"
#: ``DefaultMQProducer.defaultTopicQueueNums``: the queues a topic made from AUTO_CREATE_TOPIC gets
DEFAULT_TOPIC_QUEUE_NUMS = 4
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
BENCHMARK_TOPIC = "BenchmarkTest"
#: RocketMQ 5's topic of broker-to-broker heartbeat sync (listed as system by its console)
HEARTBEAT_SYNCER_TOPIC = "DefaultHeartBeatSyncerTopic"
#: ``TopicValidator.SYSTEM_TOPIC_PREFIX``: every topic named so is a system topic
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
#: RocketMQ 4.9.8's ``TopicValidator.SYSTEM_TOPIC_SET``
SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
#: ``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)


def is_system_topic(topic: str) -> bool:
    """``TopicValidator.isSystemTopic``: in the set, or named with the system prefix."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


# ------------------------------------------------------------------ the properties string
#: ``MessageDecoder.NAME_VALUE_SEPARATOR`` and ``PROPERTY_SEPARATOR``: ``name\x01value\x02``...
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
#: what no property name or value may hold
SEPARATORS = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)


def property_item(name: str, value: str) -> str:
    """One ``name\\x01value\\x02`` item (the caller checked both)."""
    return f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"


def properties_text(props: Mapping[str, str]) -> str:
    """``MessageDecoder.messageProperties2String``: every item ends with ``\\x02`` (unchecked:
    callers refuse separators in names and values first)."""
    return "".join(property_item(k, v) for k, v in props.items())


def property_mark(name: str) -> str:
    """``name\\x01``: what a properties string holds where ``name`` is set (a substring test
    that needs no parse, exact when no other name ends with ``name``)."""
    return name + NAME_VALUE_SEPARATOR


# ------------------------------------------------------------- property names (MessageConst)
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_PGROUP = "PGROUP"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_TRAN_END = "TRAN_END"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_START_DELIVER_TIME = "__STARTDELIVERTIME"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
