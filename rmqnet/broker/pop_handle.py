"""POP receipt handles and names: RocketMQ 5's ``ExtraInfoUtil`` and ``KeyBuilder``.

A message handed out by a pop carries a receipt handle, RocketMQ's *extraInfo* (the
``POP_CK`` property a client sets; the gRPC proxy's ``ReceiptHandle`` is the same text)::

    startOffset popTime invisibleTime reviveQid topicType brokerName queueId offset

space-separated: ``startOffset`` the queue offset the pop read from (the checkpoint's),
``popTime`` the broker's wall ms at the pop, ``invisibleTime`` ms, ``reviveQid`` (0 here;
:data:`ORDER_REVIVE_QID` 999 for an orderly pop), ``topicType`` ``0`` the topic itself, ``1``
its POP retry topic ``%RETRY%<group>_<topic>``, ``2`` the v2 name ``%RETRY%<group>+<topic>``,
then the broker's name, the queue and the message's queue offset. The pop response's
``startOffsetInfo``/``msgOffsetInfo``/``orderCountInfo`` are ``;``-separated entries of
``topicType queueId value`` (``msgOffsetInfo``'s value: the offsets joined by ``,``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..remoting.names import RETRY_PREFIX

#: ``KeyBuilder.POP_ORDER_REVIVE_QUEUE``: the reviveQid of an orderly pop's handles
ORDER_REVIVE_QID = 999
#: ``ExtraInfoUtil``'s topic types
NORMAL_TOPIC, RETRY_TOPIC, RETRY_TOPIC_V2 = "0", "1", "2"
_FIELDS = 8


class HandleError(ValueError):
    """A receipt handle (extraInfo) that is not RocketMQ's format; the message names the part."""


def pop_retry_topic(group: str, topic: str) -> str:
    """``KeyBuilder.buildPopRetryTopicV1``: ``%RETRY%<group>_<topic>`` (RocketMQ 5's default,
    ``enableRetryTopicV2=false``), the topic a POP group's unacked messages are revived to."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def topic_type(topic: str) -> str:
    """``ExtraInfoUtil.getRetry``: the type mark of the topic a message was read from."""
    if topic.startswith(RETRY_PREFIX):
        return RETRY_TOPIC_V2 if "+" in topic else RETRY_TOPIC
    return NORMAL_TOPIC


def real_topic(topic: str, group: str, mark: str) -> str:
    """``ExtraInfoUtil.getRealTopic``: the topic a handle's message was read from, given the
    topic the consumer subscribed (``topic``; a retry topic already, as an ack on the wire
    names it: itself); raises :class:`HandleError` for another mark."""
    if mark == NORMAL_TOPIC or topic.startswith(RETRY_PREFIX):
        return topic
    if mark == RETRY_TOPIC:
        return pop_retry_topic(group, topic)
    if mark == RETRY_TOPIC_V2:
        return f"{RETRY_PREFIX}{group}+{topic}"
    raise HandleError(f"extraInfo's topic type {mark!r} is none of 0, 1, 2")


def normal_topic(topic: str, group: str) -> str:
    """``KeyBuilder.parseNormalTopic``: the subscribed topic of a POP retry topic of ``group``
    (any other topic: itself)."""
    for sep in ("_", "+"):
        prefix = f"{RETRY_PREFIX}{group}{sep}"
        if topic.startswith(prefix):
            return topic[len(prefix) :]
    return topic


@dataclass(frozen=True, slots=True)
class ExtraInfo:
    """One receipt handle, parsed (see the module docstring)."""

    start_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    topic_type: str
    broker_name: str
    queue_id: int
    offset: int

    @property
    def deadline(self) -> int:
        """When the message becomes visible again (wall ms), unless acked."""
        return self.pop_time + self.invisible_time

    @property
    def order(self) -> bool:
        """The handle of an orderly pop (``ExtraInfoUtil.isOrder``)."""
        return self.revive_qid == ORDER_REVIVE_QID

    def text(self) -> str:
        """The handle as RocketMQ writes it (``ExtraInfoUtil.buildExtraInfo``)."""
        return (
            f"{self.start_offset} {self.pop_time} {self.invisible_time} {self.revive_qid} {self.topic_type} "
            f"{self.broker_name} {self.queue_id} {self.offset}"
        )

    @staticmethod
    def parse(text: object) -> ExtraInfo:
        """A handle from its text; :class:`HandleError` naming what is wrong (not a string,
        too few parts, a number that is none)."""
        if not isinstance(text, str) or not text:
            raise HandleError("extraInfo is missing")
        parts = text.split(" ")
        if len(parts) < _FIELDS:
            raise HandleError(f"extraInfo has {len(parts)} parts, RocketMQ's has {_FIELDS}: {text!r}")
        try:
            start, pop_time, invisible, rqid = int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])
            queue_id, offset = int(parts[6]), int(parts[7])
        except ValueError:
            raise HandleError(f"extraInfo holds a part that is no number: {text!r}") from None
        if parts[4] not in (NORMAL_TOPIC, RETRY_TOPIC, RETRY_TOPIC_V2):
            raise HandleError(f"extraInfo's topic type {parts[4]!r} is none of 0, 1, 2")
        return ExtraInfo(start, pop_time, invisible, rqid, parts[4], parts[5], queue_id, offset)


def handle_texts(
    start: int,
    pop_time: int,
    invisible: int,
    revive_qid: int,
    topic: str,
    broker_name: str,
    queue_id: int,
    offsets: Iterable[int],
) -> list[str]:
    """The handles of the messages at ``offsets`` of one checkpoint: its prefix built once,
    one string per message (what a pop of n messages costs: n of them)."""
    prefix = f"{start} {pop_time} {invisible} {revive_qid} {topic_type(topic)} {broker_name} {queue_id} "
    return [prefix + str(o) for o in offsets]


def offset_info_entry(topic: str, queue_id: int, value: str | int) -> str:
    """One entry of ``startOffsetInfo``/``msgOffsetInfo``/``orderCountInfo``."""
    return f"{topic_type(topic)} {queue_id} {value}"


__all__ = [
    "ExtraInfo",
    "HandleError",
    "ORDER_REVIVE_QID",
    "pop_retry_topic",
    "topic_type",
    "real_topic",
    "normal_topic",
    "handle_texts",
    "offset_info_entry",
]
