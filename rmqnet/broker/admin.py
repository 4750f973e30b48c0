"""Admin requests on topics and the broker (RocketMQ 4.9.8's ``AdminBrokerProcessor``):
UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG (21), GET_BROKER_RUNTIME_INFO (28),
GET_ALL_DELAY_OFFSET (45), DELETE_TOPIC_IN_BROKER (215). Stats and connections (202, 203, 208)
are :mod:`rmqnet.broker.admin_stats`, the broker's config (25, 26) :mod:`rmqnet.broker.admin_config`.

- 17: extFields ``topic, defaultTopic, readQueueNums, writeQueueNums, perm, topicFilterType``
  (required, ``CreateTopicRequestHeader``), ``topicSysFlag``, ``order``. A bad name is
  SYSTEM_ERROR with ``validateTopic``'s remark, a system topic SYSTEM_ERROR "The topic[T] is
  conflict with system topic.", queue counts outside 1..65535 SYSTEM_ERROR naming the field.
- 215: extField ``topic``. A slave refuses (SYSTEM_ERROR, RocketMQ's remark), a bad name or a
  system topic is refused as 17 refuses them; otherwise the topic's config and every group's
  offsets of it are removed (:meth:`rmqnet.broker.topics.TopicManager.delete`) and SUCCESS,
  also for a topic the broker does not know (Java's ``deleteTopicConfig`` only logs that).
  The next registration drops the topic from this broker's part of the route.
- 21: body ``TopicConfigSerializeWrapper`` JSON: ``{"topicConfigTable": {name: TopicConfig},
  "dataVersion": {"timestamp", "counter"}}``.
- 28: body ``KVTable`` JSON ``{"table": {key: string}}`` with the keys RocketMQ reports that this
  broker can fill (see :func:`runtime_info`).
- 45: body the scheduler's progress as ``ScheduleMessageService.encode()`` writes it,
  ``DelayOffsetSerializeWrapper`` in fastjson's compact form, level keys bare:
  ``{"offsetTable":{1:5,2:0}}`` (the store's ``config/delayOffset.json``; ``{}`` without one);
  a slave copies it (:mod:`rmqnet.broker.slave_sync`). An unreadable file is SYSTEM_ERROR
  naming it (RocketMQ answers SYSTEM_ERROR "No delay offset in this broker" when it has none).
"""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING, Any

from rmqlog import InvalidArgumentError, InvalidTopicError, StoreError, TopicConfig

from ..remoting import RemotingCommand, ResponseCode, names
from ..remoting.request_headers import CreateTopicHeader, TopicHeader
from .peer import Peer

if TYPE_CHECKING:
    from .broker import Broker

#: ``MQVersion.Version.V4_9_8.ordinal()``: the version this broker reports
BROKER_VERSION = 435
BROKER_VERSION_DESC = "V4_9_8"


def is_system_topic(broker: Broker, topic: str) -> bool:
    c = broker.config
    return names.is_system_topic(topic) or topic in (
        c.broker_cluster_name,
        c.broker_name,
        f"{c.broker_cluster_name}_REPLY_TOPIC",
    )


def update_and_create_topic(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    h = CreateTopicHeader.read(req.ext_fields)
    topic, read_n, write_n, perm = h.topic, h.read_queue_nums, h.write_queue_nums, h.perm
    filter_type, sys_flag, order = h.topic_filter_type, h.topic_sys_flag, h.order
    if not topic.strip():
        return req.reply(ResponseCode.SYSTEM_ERROR, "The specified topic is blank.")
    if is_system_topic(broker, topic):
        return req.reply(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
    if filter_type not in ("SINGLE_TAG", "MULTI_TAG"):
        return req.reply(ResponseCode.SYSTEM_ERROR, f"topicFilterType {filter_type!r} is not SINGLE_TAG or MULTI_TAG")
    if not 0 <= perm <= 7:
        return req.reply(ResponseCode.SYSTEM_ERROR, f"perm {perm} is not a perm mask 0..7 (4 read, 2 write, 1 inherit)")
    for name, n in (("readQueueNums", read_n), ("writeQueueNums", write_n)):
        if not 1 <= n <= 65535:
            return req.reply(ResponseCode.SYSTEM_ERROR, f"{name} {n} is outside 1..65535")
    try:
        broker.topics.update(TopicConfig(topic, read_n, write_n, perm, filter_type, sys_flag, order))
    except InvalidTopicError as exc:  # validateTopic's cases: characters, length
        return req.reply(ResponseCode.SYSTEM_ERROR, _validate_remark(topic, exc))
    except InvalidArgumentError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    return req.reply(ResponseCode.SUCCESS)


#: ``AdminBrokerProcessor.validateSlave``'s remark
SLAVE_REMARK = "Can't modify topic or subscription group from slave broker, please execute it from master broker."


def delete_topic(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    """215 (see the module docstring)."""
    topic = TopicHeader.read(req.ext_fields).topic
    if broker.config.slave:
        return req.reply(ResponseCode.SYSTEM_ERROR, SLAVE_REMARK)
    if not topic.strip():
        return req.reply(ResponseCode.SYSTEM_ERROR, "The specified topic is blank.")
    if is_system_topic(broker, topic):
        return req.reply(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
    try:
        broker.topics.delete(topic)
    except InvalidTopicError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, _validate_remark(topic, exc))
    except StoreError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
    return req.reply(ResponseCode.SUCCESS)


def _validate_remark(topic: str, exc: Exception) -> str:
    if len(topic.encode()) > 127:
        return "The specified topic is longer than topic max length."
    return f"The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$ ({exc})"


def topic_config_wrapper(broker: Broker) -> dict[str, Any]:
    """``TopicConfigSerializeWrapper`` as JSON (also REGISTER_BROKER's body)."""
    topics = broker.topics.all()
    return {
        "topicConfigTable": {name: tc.to_json() for name, tc in sorted(topics.items())},
        "dataVersion": dict(broker.topics.data_version),
    }


def get_all_topic_config(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    body = json.dumps(topic_config_wrapper(broker), separators=(",", ":")).encode()
    return req.reply(ResponseCode.SUCCESS, None, None, body)


def _runtime(ms: int) -> str:
    """``StoreStatsService.getFormatRuntime``."""
    s = max(0, ms) // 1000
    return f"[ {s // 86400} days, {s % 86400 // 3600} hours, {s % 3600 // 60} minutes, {s % 60} seconds ]"


def runtime_info(broker: Broker) -> dict[str, str]:
    """The runtime keys of RocketMQ's ``prepareRuntimeInfo`` this broker can fill, as strings."""
    store, config = broker.store, broker.config
    sender = broker.sender
    info = {
        "brokerVersionDesc": BROKER_VERSION_DESC,
        "brokerVersion": str(BROKER_VERSION),
        "msgPutTotalTodayNow": str(sender.put_total),
        "msgPutTotalTodayMorning": str(sender.put_total_today_morning),
        "msgPutTotalYesterdayMorning": str(sender.put_total_yesterday_morning),
        "sendThreadPoolQueueSize": str(sender.waiting),
        "sendThreadPoolQueueCapacity": str(config.send_queue_capacity),
        "commitLogMaxOffset": str(store.published_tail()),
        "runtime": _runtime(broker.clock.wall_ms() - broker.started_ms),
        "bootTimestamp": str(broker.started_ms),
    }
    info.update(broker.rates.runtime_keys())
    info["dispatchBehindBytes"] = str(max(0, store.published_tail() - store.wire.dispatched_offset()))
    info["brokerRole"] = config.broker_role
    usage = shutil.disk_usage(store.paths.root)
    ratio = (usage.total - usage.free) / usage.total if usage.total else -1.0
    info["commitLogDiskRatio"] = str(ratio)
    info["consumeQueueDiskRatio"] = str(ratio)
    info["commitLogDirCapacity"] = f"Total : {_human(usage.total)}, Free : {_human(usage.free)}."
    info["remainHowManyDataToFlush"] = _human(max(0, store.published_tail() - store.flushed_offset()))
    return info


def _human(n: int) -> str:
    """``MixAll.humanReadableByteCount(n, false)`` (binary units: ``KiB``...)."""
    if n < 1024:
        return f"{n} B"
    exp, value = 0, float(n)
    while value >= 1024 and exp < 6:
        value /= 1024
        exp += 1
    return f"{value:.1f} {'KMGTPE'[exp - 1]}iB"


def get_broker_runtime_info(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    body = json.dumps({"table": runtime_info(broker)}, separators=(",", ":")).encode()
    return req.reply(ResponseCode.SUCCESS, None, None, body)


def encode_delay_offsets(offsets: dict[int, int]) -> bytes:
    """``DelayOffsetSerializeWrapper.toJson(false)``: compact, level keys bare (fastjson's)."""
    return ('{"offsetTable":{' + ",".join(f"{int(k)}:{int(v)}" for k, v in sorted(offsets.items())) + "}}").encode()


def get_all_delay_offset(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    """45: the scheduler's progress per delay level (see the module docstring)."""
    try:
        offsets = broker.store.replica.delay_offsets()
    except StoreError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
    return req.reply(ResponseCode.SUCCESS, None, None, encode_delay_offsets(offsets))
