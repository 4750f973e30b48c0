"""A POP consumer (RocketMQ 5's ``MQClientAPIImpl.popMessageAsync``, ``ackMessageAsync``,
``changeInvisibleTimeAsync``): POP_MESSAGE (200050), ACK_MESSAGE (200051) and
CHANGE_MESSAGE_INVISIBLETIME (200053) over the remoting protocol, to the masters of the
topic's broker groups (a slave serves no POP).

A pop hands out up to ``max_nums`` messages of the topic (any queue of a broker, and the
group's POP retry topic ``%RETRY%<group>_<topic>``), invisible to the group's other pops for
``invisible_ms``. Each message comes with its receipt handle, RocketMQ's extraInfo built from
the answer as Java's ``processPopResponse`` builds it (``startOffset popTime invisibleTime
reviveQid topicType brokerName queueId offset``); an ack of the handle settles the message, a
change of invisible time gives it a new handle. What is not acked in time is handed out again
by the broker with ``reconsumeTimes + 1`` (at-least-once). The broker answers an ack SUCCESS
whether or not the message was still in flight (RocketMQ's); a change of a handle no longer in
flight is refused (NO_MESSAGE 208: :class:`~rmqnet.client.errors.BrokerError`). BATCH_ACK_MESSAGE
(200151) is not served by our broker: :meth:`PopConsumer.ack_many` sends one ACK_MESSAGE per
handle, all at once.

Across brokers: a pop asks the topic's broker groups in turn (the start rotating), without
waiting, until one hands out messages; when none does and ``poll_ms`` > 0 every group is asked
at once to hold the pop that long (long polling), and their answers are merged (so a long
poll may hand out up to ``max_nums`` per broker group).

An orderly pop (``order=True``) reads no retry topic; its messages' ``reconsumeTimes`` is the
delivery's attempt (``orderCountInfo``), as Java's client sets it.

Statuses (Java's ``PopStatus``): SUCCESS ``FOUND``, POLLING_TIMEOUT (210) ``NO_NEW_MSG``,
POLLING_FULL (209) ``POLLING_FULL``; any other code raises :class:`BrokerError`
(TOPIC_NOT_EXIST 17, SUBSCRIPTION_GROUP_NOT_EXIST 26, NO_PERMISSION 16, an ACL refusal...).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from rmqlog import MESSAGE_SCHEMA

from ..remoting import (
    AckMessageHeader,
    ChangeInvisibleTimeHeader,
    PopMessageHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
)
from ..remoting.names import PERM_READ, RETRY_PREFIX
from ..remoting.route import MASTER_ID
from .errors import ClientError, NoRouteError
from .loop import call
from .records import Reply
from .remote import RemoteClient

_STATUS = {
    ResponseCode.SUCCESS: "FOUND",
    ResponseCode.POLLING_TIMEOUT: "NO_NEW_MSG",
    ResponseCode.POLLING_FULL: "POLLING_FULL",
}
#: ``MixAll.RETRY_GROUP_TOPIC_PREFIX``
#: ``ConsumeInitMode``: where a group without a position starts
INIT_MODES = {"MIN": 0, "MAX": 1}
HANDLE = "receiptHandle"


@dataclass(frozen=True, slots=True)
class Handle:
    """A receipt handle parsed (the fields an ack needs); :meth:`parse` raises ``ValueError``."""

    start_offset: int
    topic_type: str  # "0" the topic, "1" its POP retry topic, "2" the v2 retry topic
    broker_name: str
    queue_id: int
    offset: int

    @staticmethod
    def parse(text: str) -> Handle:
        parts = text.split(" ") if isinstance(text, str) else []
        if len(parts) != 8 or parts[4] not in ("0", "1", "2"):
            raise ValueError(
                f"receipt handle {text!r} is not RocketMQ's extraInfo "
                "(startOffset popTime invisibleTime reviveQid topicType brokerName queueId offset)"
            )
        try:
            return Handle(int(parts[0]), parts[4], parts[5], int(parts[6]), int(parts[7]))
        except ValueError:
            raise ValueError(f"receipt handle {text!r} holds a part that is no number") from None

    def real_topic(self, topic: str, group: str) -> str:
        """``ExtraInfoUtil.getRealTopic``: the topic the message was read from."""
        if self.topic_type == "1":
            return f"{RETRY_PREFIX}{group}_{topic}"
        if self.topic_type == "2":
            return f"{RETRY_PREFIX}{group}+{topic}"
        return topic


@dataclass(frozen=True, slots=True)
class PopResult:
    """``status`` (module docstring), the messages handed out as :attr:`rows` (dicts of
    ``rmqlog.MESSAGE_SCHEMA``'s names, each with ``receiptHandle``; a retried message has the
    POP retry topic as ``topic`` and the topic first sent to as property ``RETRY_TOPIC``) or
    as the Arrow table :attr:`messages` (the same with a ``receiptHandle`` column), and
    ``rest_num``: what the brokers said is left in the queues they read."""

    status: str
    rows: list[dict[str, Any]] = field(repr=False)
    rest_num: int = 0

    @property
    def messages(self) -> pa.Table:
        schema = MESSAGE_SCHEMA.append(pa.field(HANDLE, pa.string()))
        return pa.Table.from_pylist(self.rows, schema=schema) if self.rows else schema.empty_table()

    def __len__(self) -> int:
        return len(self.rows)


class PopConsumer(RemoteClient):
    """``PopConsumer(group, namesrv)``: :meth:`pop`, :meth:`ack`, :meth:`ack_many` and
    :meth:`change_invisible` (blocking) and their ``a``-prefixed coroutines."""

    #: a topic a send has just created may be routed a registration round later (RemoteClient)
    route_wait_s = 3.0

    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", **kwargs: Any) -> None:
        super().__init__(namesrv, **kwargs)
        self.group = group
        self._turns = itertools.count()

    async def _masters(self, topic: str) -> list[str]:
        """The names of the topic's readable broker groups, in the route's order."""
        route = await self._cached_route(topic)
        names = [q.broker_name for q in route.queue_datas if q.perm & PERM_READ and q.read_queue_nums > 0]
        if not names:
            raise NoRouteError(f"topic {topic!r}: no readable queue in its route")
        return names

    async def _pop_one(
        self,
        topic: str,
        name: str,
        max_nums: int,
        invisible_ms: int,
        poll_ms: int,
        tags: str,
        init_mode: int,
        order: bool,
    ) -> PopResult:
        header = PopMessageHeader(
            consumer_group=self.group,
            topic=topic,
            queue_id=-1,
            max_msg_nums=max_nums,
            invisible_time=invisible_ms,
            poll_time=poll_ms,
            born_time=int(self.clock.wall_ms()),
            init_mode=init_mode,
            exp_type="TAG",
            exp=tags,
            order=order,
            attempt_id=None,
        )

        async def send(addr: str) -> PopResult:
            cmd = RemotingCommand(RequestCode.POP_MESSAGE, ext_fields=header.to_ext())
            res = await self.invoke(addr, cmd, timeout_s=self.timeout_s + poll_ms / 1000, ok=_STATUS.keys())
            ext: dict[str, Any] = res.ext_fields
            rows = Reply(res.body_bytes()).rows if res.code == ResponseCode.SUCCESS else []
            if rows:
                _set_handles(rows, ext, name)
                if order:
                    _set_attempts(rows, ext)
            return PopResult(_STATUS[ResponseCode(res.code)], rows, int(ext.get("restNum", 0)))

        return await self.on_broker(topic, name, _master_only, send)

    async def _pop(
        self, topic: str, max_nums: int, invisible_ms: int, poll_ms: int, tags: str, init_mode: str, order: bool
    ) -> PopResult:
        if init_mode not in INIT_MODES:
            raise ValueError(f"init_mode must be 'MIN' or 'MAX', got {init_mode!r}")
        mode = INIT_MODES[init_mode]
        names = await self._masters(topic)
        shift = next(self._turns) % len(names)
        names = names[shift:] + names[:shift]
        statuses = []
        for name in names:
            got = await self._pop_one(topic, name, max_nums, invisible_ms, 0, tags, mode, order)
            if len(got):
                return got
            statuses.append(got.status)
        if poll_ms <= 0:
            return PopResult("POLLING_FULL" if "POLLING_FULL" in statuses else "NO_NEW_MSG", [])
        held = await asyncio.gather(
            *(self._pop_one(topic, n, max_nums, invisible_ms, poll_ms, tags, mode, order) for n in names)
        )
        rows = [r for got in held for r in got.rows]
        status = "FOUND" if rows else "POLLING_FULL" if any(g.status == "POLLING_FULL" for g in held) else "NO_NEW_MSG"
        return PopResult(status, rows, sum(g.rest_num for g in held))

    def pop(
        self,
        topic: str,
        max_nums: int = 32,
        *,
        invisible_ms: int = 60_000,
        poll_ms: int = 0,
        tags: str = "*",
        init_mode: str = "MAX",
        order: bool = False,
    ) -> PopResult:
        """Pop up to ``max_nums`` (1..32) messages of ``topic`` for the group, invisible to its
        other pops for ``invisible_ms``; ``poll_ms`` > 0: held that long when none is there
        (long polling, module docstring); ``tags`` a tag expression; ``init_mode`` where a
        group new to a queue starts (``MAX``: its end, ``MIN``: its first message); ``order``:
        an orderly pop (RocketMQ 5's FIFO: a queue whose batch is in flight hands out nothing
        more until it is acked or its invisible time passed; then the batch's unacked messages
        come again, in order, ``reconsumeTimes`` their attempt count from ``orderCountInfo``).

        Raises :class:`BrokerError` (refusals, module docstring), :class:`NoRouteError` /
        :class:`TopicNotFoundError`, the transport's errors, ``ValueError`` for an init mode
        that is neither."""
        return call(self._pop(topic, max_nums, invisible_ms, poll_ms, tags, init_mode, order))

    async def apop(
        self,
        topic: str,
        max_nums: int = 32,
        *,
        invisible_ms: int = 60_000,
        poll_ms: int = 0,
        tags: str = "*",
        init_mode: str = "MAX",
        order: bool = False,
    ) -> PopResult:
        return await self._pop(topic, max_nums, invisible_ms, poll_ms, tags, init_mode, order)

    async def _on_handle(self, topic: str, handle: str, build: Any) -> RemotingCommand:
        h = Handle.parse(handle)
        real = h.real_topic(topic, self.group)

        async def send(addr: str) -> RemotingCommand:
            return await self.invoke(addr, build(real, h))

        return await self.on_broker(topic, h.broker_name, _master_only, send)

    async def _ack(self, topic: str, handle: str) -> None:
        def build(real: str, h: Handle) -> RemotingCommand:
            header = AckMessageHeader(
                consumer_group=self.group, topic=real, queue_id=h.queue_id, extra_info=handle, offset=h.offset
            )
            return RemotingCommand(RequestCode.ACK_MESSAGE, ext_fields=header.to_ext())

        await self._on_handle(topic, handle, build)

    def ack(self, topic: str, handle: str) -> None:
        """Ack the message of ``handle`` (a row's ``receiptHandle``) popped from ``topic``:
        the broker hands it out no more. Acking a message whose invisible time passed changes
        nothing (it is handed out again). Raises :class:`BrokerError`, ``ValueError`` for a
        handle that is not one, the transport's errors."""
        call(self._ack(topic, handle))

    async def aack(self, topic: str, handle: str) -> None:
        await self._ack(topic, handle)

    async def _ack_many(self, topic: str, handles: list[str]) -> None:
        for h in handles:  # every handle checked before any is sent
            Handle.parse(h)
        await asyncio.gather(*(self._ack(topic, h) for h in handles))

    def ack_many(self, topic: str, handles: list[str]) -> None:
        """:meth:`ack` of every handle, the requests sent together (module docstring)."""
        call(self._ack_many(topic, handles))

    async def aack_many(self, topic: str, handles: list[str]) -> None:
        await self._ack_many(topic, handles)

    async def _change(self, topic: str, handle: str, invisible_ms: int) -> str:
        def build(real: str, h: Handle) -> RemotingCommand:
            header = ChangeInvisibleTimeHeader(
                consumer_group=self.group,
                topic=real,
                queue_id=h.queue_id,
                extra_info=handle,
                offset=h.offset,
                invisible_time=invisible_ms,
            )
            return RemotingCommand(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext_fields=header.to_ext())

        res = await self._on_handle(topic, handle, build)
        h = Handle.parse(handle)
        ext = res.ext_fields
        return (
            f"{h.start_offset} {ext['popTime']} {ext['invisibleTime']} {ext['reviveQid']} {h.topic_type} "
            f"{h.broker_name} {h.queue_id} {h.offset}"
        )

    def change_invisible(self, topic: str, handle: str, invisible_ms: int) -> str:
        """Make the message of ``handle`` invisible for ``invisible_ms`` from now; returns its
        new handle (the old one acks nothing any more). Raises :class:`BrokerError`
        (NO_MESSAGE 208: the message is no longer in flight under that handle), ``ValueError``
        for a handle that is not one, the transport's errors."""
        return call(self._change(topic, handle, invisible_ms))

    async def achange_invisible(self, topic: str, handle: str, invisible_ms: int) -> str:
        return await self._change(topic, handle, invisible_ms)


def _master_only(addrs: Any) -> list[int]:
    """POP goes to a group's master only (a slave refuses it)."""
    return [MASTER_ID] if MASTER_ID in addrs else []


def _offset_info(text: str | None) -> dict[tuple[str, int], str]:
    """``startOffsetInfo``'s entries, ``topicType queueId value`` joined by ``;``."""
    out = {}
    for entry in (text or "").split(";"):
        parts = entry.split(" ")
        if len(parts) == 3:
            out[(parts[0], int(parts[1]))] = parts[2]
    return out


def _set_handles(rows: list[dict[str, Any]], ext: dict[str, Any], broker_name: str) -> None:
    """Each row's receipt handle (``processPopResponse``: the start offset of its queue read)."""
    starts = _offset_info(ext.get("startOffsetInfo"))
    head = f"{ext['popTime']} {ext['invisibleTime']} {ext['reviveQid']}"
    for row in rows:
        topic = str(row["topic"])
        mark = ("2" if "+" in topic else "1") if topic.startswith(RETRY_PREFIX) else "0"
        qid = int(row["queueId"])
        start = starts.get((mark, qid))
        if start is None:
            raise ClientError(f"a pop's answer has no startOffsetInfo for queue {qid} of {topic!r}: {ext!r}")
        row[HANDLE] = f"{start} {head} {mark} {broker_name} {qid} {row['queueOffset']}"


def _set_attempts(rows: list[dict[str, Any]], ext: dict[str, Any]) -> None:
    """An orderly pop's attempt counts (``orderCountInfo``: ``topicType qo<queueId>%<offset>
    count`` per message, ``ExtraInfoUtil.buildQueueOffsetOrderCountInfo``) as the rows'
    ``reconsumeTimes``, as Java's ``processPopResponse`` sets them."""
    counts: dict[tuple[int, int], int] = {}
    for entry in str(ext.get("orderCountInfo") or "").split(";"):
        parts = entry.split(" ")
        if len(parts) == 3 and parts[1].startswith("qo") and "%" in parts[1]:
            qid, offset = parts[1][2:].split("%", 1)
            counts[(int(qid), int(offset))] = int(parts[2])
    for row in rows:
        found = counts.get((int(row["queueId"]), int(row["queueOffset"])))
        if found is not None:
            row["reconsumeTimes"] = found


__all__ = ["PopConsumer", "PopResult", "Handle"]
