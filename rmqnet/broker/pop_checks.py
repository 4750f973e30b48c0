"""What a POP request must pass before anything is read (RocketMQ 5's ``PopMessageProcessor``
checks, in its order and with its remarks), and the refusal carrying its response code."""

from __future__ import annotations

from typing import TYPE_CHECKING

import rmqlog

from ..remoting import ResponseCode
from ..remoting.names import PERM_READ
from .pull import SQL92, Filter, compiled

if TYPE_CHECKING:
    from .broker import Broker

#: ``PopMessageProcessor``: at most 32 messages a pop
MAX_POP_NUMS = 32


class PopRefused(Exception):
    """A pop, ack or change refused: ``code`` is RocketMQ's response code
    (:class:`rmqnet.remoting.ResponseCode`), the message its remark naming what was wrong."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class FilterUnsupported(PopRefused):
    """A SQL92 pop on a broker with ``enablePropertyFilter=false`` (SYSTEM_ERROR, the pull's
    remark; the gRPC endpoint answers it ``UNSUPPORTED``)."""


def check_slave(broker: Broker) -> None:
    """A SLAVE serves no POP: its store takes only its master's bytes, so it could neither
    revive nor keep positions (clients and RocketMQ's proxy pop masters, broker id 0)."""
    if broker.replication.slave:
        raise PopRefused(
            ResponseCode.SERVICE_NOT_AVAILABLE, "the broker is a slave: POP consumption is served by its master"
        )


def check_pop(
    broker: Broker,
    group: str,
    topic: str,
    queue_id: int,
    max_count: int,
    invisible_ms: int,
    exp: str | None,
    exp_type: str | None,
) -> tuple[rmqlog.TopicConfig, int, Filter]:
    check_slave(broker)
    cfg = broker.config
    if not cfg.broker_permission & PERM_READ:
        raise PopRefused(ResponseCode.NO_PERMISSION, f"the broker[{cfg.broker_ip1}] pop message is forbidden")
    if max_count > MAX_POP_NUMS or max_count < 1:
        raise PopRefused(
            ResponseCode.SYSTEM_ERROR,
            f"the broker[{cfg.broker_ip1}] pop message's num is greater than 32 (maxMsgNums {max_count})"
            if max_count > MAX_POP_NUMS
            else f"maxMsgNums {max_count} is below 1",
        )
    if invisible_ms <= 0:
        raise PopRefused(ResponseCode.SYSTEM_ERROR, f"invisibleTime {invisible_ms} is not positive")
    tc = broker.topics.get(topic)
    if tc is None:
        raise PopRefused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
    if not tc.perm & PERM_READ:
        raise PopRefused(ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden")
    if queue_id >= tc.read_queue_nums or queue_id < -1:
        raise PopRefused(
            ResponseCode.SYSTEM_ERROR,
            f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read_queue_nums}]",
        )
    sub = _group(broker, group)
    if not sub.consume_enable:
        raise PopRefused(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
    return tc, sub.retry_max_times, pop_filter(broker, exp, exp_type)


def pop_filter(broker: Broker, exp: str | None, exp_type: str | None) -> Filter:
    """``PopMessageProcessor``'s filter of ``exp`` (none when it is empty, whatever its type):
    a tag expression, or a SQL92 one compiled (the pull's cache); another type or an
    expression that does not parse: SUBSCRIPTION_PARSE_FAILED. SQL92 on a broker with
    ``enablePropertyFilter=false``: refused as a pull is (Java's POP does not check; see
    docs/decisions.md)."""
    if not exp:
        return None, None
    try:
        if exp_type in (None, "", "TAG"):
            if exp != "*":
                rmqlog.parse_tag_filter(exp)
            return exp, None
        if exp_type != SQL92:
            raise rmqlog.FilterParseError(f"no filter of type {exp_type}")
        sql = compiled(exp)
    except rmqlog.StoreError:
        raise PopRefused(ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed") from None
    if not broker.config.enable_property_filter:
        raise FilterUnsupported(
            ResponseCode.SYSTEM_ERROR, f"The broker does not support consumer to filter message by {SQL92}"
        )
    return None, sql


def _group(broker: Broker, group: str) -> rmqlog.SubscriptionGroupConfig:
    cfg = broker.config
    try:
        rmqlog.paths.validate_group(group)
        sub = broker.subscription_groups.find_or_create(
            group, auto_create=cfg.auto_create_subscription_group, cap=cfg.auto_create_subscription_group_max_nums
        )
    except Exception as exc:  # noqa: BLE001 - a bad name or a full table: the group does not exist
        raise PopRefused(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist, {exc}"
        ) from None
    if sub is None:
        raise PopRefused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist")
    return sub
