"""GET_POP_INFLIGHT (200950, ours: RocketMQ 5 counts a group's POP messages in flight only in
its metrics, ``PopInflightMessageCounter``, and no admin request lists them): the messages of a
topic that a POP group was handed and has not acked, read from the broker's POP state
(:mod:`rmqnet.broker.pop_state`), what ``rmqlog pop-status`` prints.

Request extFields: ``consumerGroup`` and ``topic`` (both required; the topic's POP retry topics
``%RETRY%<group>_<topic>`` and ``%RETRY%<group>+<topic>`` are listed with it), ``maxNum`` (the
most messages listed, 1..10000, default 1000). An unknown topic is TOPIC_NOT_EXIST 17; a name
the store refuses, or a ``maxNum`` out of range, SYSTEM_ERROR 1 naming it. Answer: SUCCESS with
the JSON body ``{"brokerName", "now", "total", "messages": [{"topic", "queueId", "offset",
"popTime", "invisibleTime", "attempt"}]}``: ``now`` the broker's wall ms, ``total`` every such
message (``messages`` the first ``maxNum`` by topic, queue and offset), ``attempt`` the
delivery's count (0 the first) for an orderly pop, else ``null`` (a normal pop's count is in
the record, which this does not read). A message whose ``popTime + invisibleTime`` passed is
being handed out again (the revive runs every broker round).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import rmqlog
from rmqlog.paths import validate_group, validate_topic

from ..remoting import FieldError, RemotingCommand, ResponseCode
from ..remoting.names import RETRY_PREFIX
from ..remoting.request_headers import PopInflightHeader
from .peer import Peer
from .pop_handle import pop_retry_topic

if TYPE_CHECKING:
    from .broker import Broker

DEFAULT_MAX, MOST = 1000, 10_000


def get_pop_inflight(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    """The GET_POP_INFLIGHT handler (see the module docstring)."""
    try:
        h = PopInflightHeader.read(req.ext_fields)
    except FieldError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    group, topic, most = h.consumer_group, h.topic, DEFAULT_MAX if h.max_num is None else h.max_num
    if not 1 <= most <= MOST:
        return req.reply(ResponseCode.SYSTEM_ERROR, f"maxNum {most} is outside 1..{MOST}")
    try:
        validate_group(group)
        validate_topic(topic)
    except rmqlog.StoreError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    if broker.topics.get(topic) is None:
        return req.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
    topics = (topic, pop_retry_topic(group, topic), f"{RETRY_PREFIX}{group}+{topic}")
    messages: list[dict[str, Any]] = []
    total = 0
    for ck, idx in broker.pop.state.inflight_of(group, topics):
        total += len(idx)
        for i in idx[: max(0, most - len(messages))].tolist():
            messages.append(
                {
                    "topic": ck.topic,
                    "queueId": ck.queue_id,
                    "offset": int(ck.offsets[i]),
                    "popTime": ck.pop_time,
                    "invisibleTime": ck.invisible,
                    "attempt": int(ck.attempts[i]) if ck.attempts is not None else None,
                }
            )
    messages.sort(key=lambda m: (m["topic"], m["queueId"], m["offset"]))
    body = {
        "brokerName": broker.config.broker_name,
        "now": broker.clock.wall_ms(),
        "total": total,
        "messages": messages,
    }
    res = req.reply(ResponseCode.SUCCESS, None)
    res.body = json.dumps(body).encode()
    return res


__all__ = ["get_pop_inflight"]
