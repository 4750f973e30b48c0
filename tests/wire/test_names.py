"""RocketMQ's names on the network side (rmqnet.remoting.names) are the store's where the store
declares the same (the store imports no rmqnet, and the name server no store: two declarations
held equal here), and its helpers spell the topics as RocketMQ's ``MixAll`` does."""

from __future__ import annotations

import pytest

import rmqlog.admin.dead_letters as store_dlq
import rmqlog.config_files as store_topics
import rmqlog.log.lmq as store_lmq
import rmqlog.log.properties as store_properties
import rmqlog.log.record as store_record
import rmqlog.log.send_back as store_send_back
from rmqnet.remoting import names

HELD_EQUAL = [
    (names.PERM_READ, store_topics.PERM_READ),
    (names.PERM_WRITE, store_topics.PERM_WRITE),
    (names.PERM_INHERIT, store_topics.PERM_INHERIT),
    (names.NAME_VALUE_SEPARATOR, store_record.NAME_VALUE_SEPARATOR),
    (names.PROPERTY_SEPARATOR, store_record.PROPERTY_SEPARATOR),
    (names.DLQ_PREFIX, store_dlq.DLQ_PREFIX),
    (names.SCHEDULE_TOPIC, store_properties.SCHEDULE_TOPIC),
    (names.PROPERTY_KEYS, store_properties.PROPERTY_KEYS),
    (names.PROPERTY_TAGS, store_properties.PROPERTY_TAGS),
    (names.PROPERTY_UNIQ_KEY, store_properties.PROPERTY_UNIQ_KEY),
    (names.PROPERTY_DELAY, store_properties.PROPERTY_DELAY),
    (names.PROPERTY_REAL_TOPIC, store_properties.PROPERTY_REAL_TOPIC),
    (names.PROPERTY_REAL_QID, store_properties.PROPERTY_REAL_QID),
    (names.PROPERTY_TIMER_DELIVER_MS, store_properties.PROPERTY_TIMER_DELIVER_MS),
    (names.PROPERTY_TIMER_DELAY_MS, store_properties.PROPERTY_TIMER_DELAY_MS),
    (names.PROPERTY_TIMER_DELAY_SEC, store_properties.PROPERTY_TIMER_DELAY_SEC),
    (names.PROPERTY_INNER_MULTI_DISPATCH, store_lmq.PROPERTY_INNER_MULTI_DISPATCH),
    (names.PROPERTY_WAIT, store_send_back.PROPERTY_WAIT),
]


@pytest.mark.parametrize(("ours", "stores"), HELD_EQUAL)
def test_the_network_sides_names_are_the_stores(ours: object, stores: object) -> None:
    assert ours == stores


def test_a_groups_topics() -> None:
    assert names.retry_topic("G") == "%RETRY%G" and names.dlq_topic("G") == "%DLQ%G"
    assert names.is_retry_topic("%RETRY%G") and not names.is_retry_topic("%DLQ%G")
    assert names.is_dlq_topic("%DLQ%G") and not names.is_dlq_topic("G%DLQ%")


@pytest.mark.parametrize(
    ("topic", "system"),
    [
        ("TBW102", True),
        ("SCHEDULE_TOPIC_XXXX", True),
        ("RMQ_SYS_TRANS_HALF_TOPIC", True),
        ("rmq_sys_anything", True),
        ("OFFSET_MOVED_EVENT", True),
        ("RMQ_SYS_OTHER", False),
        ("%RETRY%G", False),
        ("T", False),
        ("DefaultHeartBeatSyncerTopic", False),
    ],
)
def test_system_topics_are_topic_validators(topic: str, system: bool) -> None:
    assert names.is_system_topic(topic) is system


def test_the_properties_string() -> None:
    assert names.properties_text({"TAGS": "a", "KEYS": "k1 k2"}) == "TAGS\x01a\x02KEYS\x01k1 k2\x02"
    assert names.properties_text({}) == ""
    assert names.property_mark("WAIT") == "WAIT\x01" and names.property_item("A", "b") == "A\x01b\x02"
