"""The request headers of POP consumption, RocketMQ 5's ``PopMessageRequestHeader`` (200050),
``AckMessageRequestHeader`` (200051) and ``ChangeInvisibleTimeRequestHeader`` (200053), read
from extFields by their Java field names. Fields Java marks ``@CFNotNull`` raise
:class:`~rmqnet.remoting.errors.FieldError` when missing; the rest take Java's defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .fields import ext_bool, ext_int, ext_long, ext_str


@dataclass(slots=True)
class PopMessageHeader:
    consumer_group: str
    topic: str
    queue_id: int  # -1: any queue
    max_msg_nums: int
    invisible_time: int  # ms
    poll_time: int  # ms a pop that finds nothing is held (long polling)
    born_time: int  # the client's wall ms at sending (0: none)
    init_mode: int  # ConsumeInitMode: 0 MIN, 1 MAX
    exp_type: str | None
    exp: str | None
    order: bool
    attempt_id: str | None

    @staticmethod
    def read(ext: dict[str, Any]) -> PopMessageHeader:
        return PopMessageHeader(
            consumer_group=ext_str(ext, "consumerGroup"),
            topic=ext_str(ext, "topic"),
            queue_id=ext_int(ext, "queueId"),
            max_msg_nums=ext_int(ext, "maxMsgNums"),
            invisible_time=ext_long(ext, "invisibleTime"),
            poll_time=ext_long(ext, "pollTime"),
            born_time=ext_long(ext, "bornTime", 0),  # absent or 0: the broker's now (Java adds it)
            init_mode=ext_int(ext, "initMode"),
            exp_type=ext_str(ext, "expType", None),
            exp=ext_str(ext, "exp", None),
            order=ext_bool(ext, "order", False),
            attempt_id=ext_str(ext, "attemptId", None),
        )

    def to_ext(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "consumerGroup": self.consumer_group,
            "topic": self.topic,
            "queueId": self.queue_id,
            "maxMsgNums": self.max_msg_nums,
            "invisibleTime": self.invisible_time,
            "pollTime": self.poll_time,
            "bornTime": self.born_time,
            "initMode": self.init_mode,
            "order": self.order,
        }
        for name, value in (("expType", self.exp_type), ("exp", self.exp), ("attemptId", self.attempt_id)):
            if value is not None:
                out[name] = value
        return out


@dataclass(slots=True)
class AckMessageHeader:
    consumer_group: str
    topic: str  # the topic the message was read from (its POP retry topic for a retried one)
    queue_id: int
    extra_info: str  # the receipt handle
    offset: int  # the message's queue offset

    @staticmethod
    def read(ext: dict[str, Any]) -> AckMessageHeader:
        return AckMessageHeader(
            consumer_group=ext_str(ext, "consumerGroup"),
            topic=ext_str(ext, "topic"),
            queue_id=ext_int(ext, "queueId"),
            extra_info=ext_str(ext, "extraInfo"),
            offset=ext_long(ext, "offset"),
        )

    def to_ext(self) -> dict[str, Any]:
        return {
            "consumerGroup": self.consumer_group,
            "topic": self.topic,
            "queueId": self.queue_id,
            "extraInfo": self.extra_info,
            "offset": self.offset,
        }


@dataclass(slots=True)
class ChangeInvisibleTimeHeader:
    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: int
    invisible_time: int  # ms, from now

    @staticmethod
    def read(ext: dict[str, Any]) -> ChangeInvisibleTimeHeader:
        return ChangeInvisibleTimeHeader(
            consumer_group=ext_str(ext, "consumerGroup"),
            topic=ext_str(ext, "topic"),
            queue_id=ext_int(ext, "queueId"),
            extra_info=ext_str(ext, "extraInfo"),
            offset=ext_long(ext, "offset"),
            invisible_time=ext_long(ext, "invisibleTime"),
        )

    def to_ext(self) -> dict[str, Any]:
        return {
            "consumerGroup": self.consumer_group,
            "topic": self.topic,
            "queueId": self.queue_id,
            "extraInfo": self.extra_info,
            "offset": self.offset,
            "invisibleTime": self.invisible_time,
        }


__all__ = ["PopMessageHeader", "AckMessageHeader", "ChangeInvisibleTimeHeader"]
