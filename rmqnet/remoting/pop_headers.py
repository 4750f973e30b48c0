"""The request headers of POP consumption, RocketMQ 5's ``PopMessageRequestHeader`` (200050),
``AckMessageRequestHeader`` (200051) and ``ChangeInvisibleTimeRequestHeader`` (200053), read
from extFields by their Java field names. Fields Java marks ``@CFNotNull`` raise
:class:`~rmqnet.remoting.errors.FieldError` when missing; the rest take Java's defaults."""

from __future__ import annotations

from dataclasses import dataclass

from .header_table import BOOL, INT, LONG, STR, Header, header, java


@header
@dataclass(slots=True, kw_only=True)
class PopMessageHeader(Header):
    consumer_group: str = java("consumerGroup", STR)
    topic: str = java("topic", STR)
    queue_id: int = java("queueId", INT)  # -1: any queue
    max_msg_nums: int = java("maxMsgNums", INT)
    invisible_time: int = java("invisibleTime", LONG)  # ms
    poll_time: int = java("pollTime", LONG)  # ms a pop that finds nothing is held (long polling)
    # the client's wall ms at sending; absent or 0: the broker's now (Java adds it)
    born_time: int = java("bornTime", LONG, 0)
    init_mode: int = java("initMode", INT)  # ConsumeInitMode: 0 MIN, 1 MAX
    exp_type: str | None = java("expType", STR, None)
    exp: str | None = java("exp", STR, None)
    order: bool = java("order", BOOL, False)
    attempt_id: str | None = java("attemptId", STR, None)


@header
@dataclass(slots=True, kw_only=True)
class AckMessageHeader(Header):
    consumer_group: str = java("consumerGroup", STR)
    # the topic the message was read from (its POP retry topic for a retried one)
    topic: str = java("topic", STR)
    queue_id: int = java("queueId", INT)
    extra_info: str = java("extraInfo", STR)  # the receipt handle
    offset: int = java("offset", LONG)  # the message's queue offset


@header
@dataclass(slots=True, kw_only=True)
class ChangeInvisibleTimeHeader(Header):
    consumer_group: str = java("consumerGroup", STR)
    topic: str = java("topic", STR)
    queue_id: int = java("queueId", INT)
    extra_info: str = java("extraInfo", STR)
    offset: int = java("offset", LONG)
    invisible_time: int = java("invisibleTime", LONG)  # ms, from now


__all__ = ["PopMessageHeader", "AckMessageHeader", "ChangeInvisibleTimeHeader"]
