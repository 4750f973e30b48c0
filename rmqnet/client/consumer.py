"""A pull consumer (``DefaultMQPullConsumer`` as RocketMQ 4.9.8's ``PullAPIWrapper`` pulls):
PULL_MESSAGE (11) on the master of the queue's broker, the body (the stored records,
byte-exact) decoded into the message table (:mod:`rmqnet.client.records`); offsets committed
with UPDATE_CONSUMER_OFFSET (15).

Statuses (``PullStatus``, from the answer's code): SUCCESS ``FOUND``, PULL_NOT_FOUND (19)
``NO_NEW_MSG``, PULL_RETRY_IMMEDIATELY (20) ``NO_MATCHED_MSG``, PULL_OFFSET_MOVED (21)
``OFFSET_ILLEGAL``; any other code raises :class:`~rmqnet.client.errors.BrokerError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from rmqlog import MESSAGE_SCHEMA

from ..remoting import PullMessageHeader, RemotingCommand, RequestCode, ResponseCode
from ..remoting.headers import PULL_SUBSCRIPTION, PULL_SUSPEND
from ..remoting.route import PERM_READ
from ..transport import Limits
from .errors import NoRouteError
from .loop import call
from .records import decode_records
from .remote import RemoteClient, master_addr

_STATUS = {ResponseCode.SUCCESS: "FOUND", ResponseCode.PULL_NOT_FOUND: "NO_NEW_MSG",
           ResponseCode.PULL_RETRY_IMMEDIATELY: "NO_MATCHED_MSG", ResponseCode.PULL_OFFSET_MOVED: "OFFSET_ILLEGAL"}


@dataclass(frozen=True, slots=True)
class PullResult:
    """``status`` (module docstring), the offsets the broker reported, and the messages
    (``rmqlog.MESSAGE_SCHEMA``; empty unless FOUND)."""

    status: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: pa.Table


class PullConsumer(RemoteClient):
    """``PullConsumer(group, namesrv)``: :meth:`pull` and :meth:`commit` (blocking) and their
    ``a``-prefixed coroutines."""

    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *, timeout_s: float = 3.0,
                 limits: Limits | None = None, access_key: str | None = None, secret_key: str | None = None) -> None:
        super().__init__(namesrv, timeout_s=timeout_s, limits=limits, access_key=access_key, secret_key=secret_key)
        self.group = group

    #: a topic a send has just created may be routed a registration round later (RemoteClient)
    route_wait_s = 3.0

    async def _broker(self, topic: str, queue_id: int, broker_name: str | None, perm: int) -> str:
        route = await self._cached_route(topic)
        for q in route.queue_datas:
            nums = q.read_queue_nums if perm == PERM_READ else q.write_queue_nums
            if (broker_name is None or q.broker_name == broker_name) and q.perm & perm and queue_id < nums:
                return master_addr(route, q.broker_name, topic)
        raise NoRouteError(f"topic {topic!r}: no readable queue {queue_id}"
                           f"{'' if broker_name is None else f' on broker {broker_name!r}'} in its route")

    async def _pull(self, topic: str, queue_id: int, offset: int, max_nums: int, suspend_ms: int,
                    subscription: str, broker_name: str | None) -> PullResult:
        addr = await self._broker(topic, queue_id, broker_name, PERM_READ)
        header = PullMessageHeader(
            consumer_group=self.group, topic=topic, queue_id=queue_id, queue_offset=offset, max_msg_nums=max_nums,
            sys_flag=PULL_SUBSCRIPTION | (PULL_SUSPEND if suspend_ms > 0 else 0), commit_offset=0,
            suspend_timeout_millis=suspend_ms, subscription=subscription, sub_version=0, expression_type="TAG",
        )
        cmd = RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=header.to_ext())
        res = await self.invoke(addr, cmd, timeout_s=self.timeout_s + suspend_ms / 1000, ok=_STATUS.keys())
        ext: dict[str, Any] = res.ext_fields
        messages = decode_records(res.body_bytes()) if res.code == ResponseCode.SUCCESS else MESSAGE_SCHEMA.empty_table()
        return PullResult(_STATUS[ResponseCode(res.code)], int(ext.get("nextBeginOffset", offset)),
                          int(ext.get("minOffset", -1)), int(ext.get("maxOffset", -1)), messages)

    def pull(self, topic: str, queue_id: int, offset: int, max_nums: int = 32, *, suspend_ms: int = 0,
             subscription: str = "*", broker_name: str | None = None) -> PullResult:
        """Pull up to ``max_nums`` messages of ``topic``/``queue_id`` from ``offset``;
        ``suspend_ms`` > 0 lets the broker hold the pull that long waiting for a message
        (long polling). ``subscription``: a tag expression (``"*"``, ``"a || b"``).

        Raises :class:`BrokerError`, :class:`NoRouteError` / :class:`TopicNotFoundError`, the
        transport's errors, ``rmqlog.CorruptRecordError`` (a body that is not whole records)."""
        return call(self._pull(topic, queue_id, offset, max_nums, suspend_ms, subscription, broker_name))

    async def apull(self, topic: str, queue_id: int, offset: int, max_nums: int = 32, *, suspend_ms: int = 0,
                    subscription: str = "*", broker_name: str | None = None) -> PullResult:
        return await self._pull(topic, queue_id, offset, max_nums, suspend_ms, subscription, broker_name)

    async def _commit(self, topic: str, queue_id: int, offset: int, broker_name: str | None) -> None:
        addr = await self._broker(topic, queue_id, broker_name, PERM_READ)
        cmd = RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields={
            "consumerGroup": self.group, "topic": topic, "queueId": queue_id, "commitOffset": offset})
        await self.invoke(addr, cmd)

    def commit(self, topic: str, queue_id: int, offset: int, *, broker_name: str | None = None) -> None:
        """Store the group's offset of the queue on its broker (code 15, answered)."""
        call(self._commit(topic, queue_id, offset, broker_name))

    async def acommit(self, topic: str, queue_id: int, offset: int, *, broker_name: str | None = None) -> None:
        await self._commit(topic, queue_id, offset, broker_name)
