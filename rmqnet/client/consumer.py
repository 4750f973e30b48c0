"""A pull consumer (``DefaultMQPullConsumer`` as RocketMQ 4.9.8's ``PullAPIWrapper`` pulls):
PULL_MESSAGE (11) on an address of the queue's broker group, the body (the stored records,
byte-exact) decoded into messages (:mod:`rmqnet.client.records`: a reply of a few messages
record by record into rows, at a cost in proportion to them, a bigger one into the Arrow
table; the other form made when asked); offsets committed
with UPDATE_CONSUMER_OFFSET (15) and asked with QUERY_CONSUMER_OFFSET (14); a message sent
back for a retry with CONSUMER_SEND_MSG_BACK (36, :meth:`PullConsumer.send_back`).

Which address (:mod:`rmqnet.client.failover`): a pull goes to the broker id the last answer of
that queue suggested (``suggestWhichBrokerId``: the master unless the broker has
``slaveReadEnable``), else as Java's ``findBrokerAddressInSubscribe``; offsets to the master,
else a slave. An address that fails at the link is marked down for ``down_ms`` and the
request goes at once to the group's other address (:meth:`RemoteClient.on_broker`): with its
master killed, a group is read from its slave, and offsets are committed there.

Statuses (``PullStatus``, from the answer's code): SUCCESS ``FOUND``, PULL_NOT_FOUND (19)
``NO_NEW_MSG``, PULL_RETRY_IMMEDIATELY (20) ``NO_MATCHED_MSG``, PULL_OFFSET_MOVED (21)
``OFFSET_ILLEGAL``; any other code raises :class:`~rmqnet.client.errors.BrokerError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from rmqlog import Clock

from ..remoting import (
    ConsumerSendMsgBackHeader,
    PullMessageHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
)
from ..remoting.headers import PULL_SUBSCRIPTION, PULL_SUSPEND
from ..remoting.names import PERM_READ
from ..remoting.request_headers import QueryConsumerOffsetHeader, UpdateConsumerOffsetHeader
from ..remoting.route import MASTER_ID, TopicRouteData
from ..transport import Limits
from .errors import NoRouteError
from .failover import DOWN_MS, is_address, offset_ids, pull_ids
from .loop import call
from .records import Reply
from .remote import RemoteClient

_STATUS = {
    ResponseCode.SUCCESS: "FOUND",
    ResponseCode.PULL_NOT_FOUND: "NO_NEW_MSG",
    ResponseCode.PULL_RETRY_IMMEDIATELY: "NO_MATCHED_MSG",
    ResponseCode.PULL_OFFSET_MOVED: "OFFSET_ILLEGAL",
}


@dataclass(frozen=True, slots=True)
class PullResult:
    """``status`` (module docstring), the offsets the broker reported, and the messages (none
    unless FOUND), two ways: :attr:`rows`, a list of dicts (``rmqlog.MESSAGE_SCHEMA``'s names
    and values: ``rows[0]["body"]``), and :attr:`messages`, the Arrow table of the same
    (``messages["body"][0].as_py()``); a small reply is decoded into rows and its table made
    when first asked, a big one the other way round (:mod:`rmqnet.client.records`).
    ``len(result)``: how many messages. ``addr``: the address that answered, ``broker_id`` its
    id in the route (0 the master), ``suggested_broker_id`` the id the broker suggests for the
    queue's next pull."""

    status: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    reply: Reply = field(repr=False)
    addr: str = ""
    broker_id: int = MASTER_ID
    suggested_broker_id: int = MASTER_ID

    @property
    def messages(self) -> pa.Table:
        """The messages as the Arrow table (``rmqlog.MESSAGE_SCHEMA``), made once."""
        return self.reply.messages

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The messages as dicts (the table's rows, ``messages.to_pylist()``), made once."""
        return self.reply.rows

    def __len__(self) -> int:
        return len(self.reply)


class PullConsumer(RemoteClient):
    """``PullConsumer(group, namesrv)``: :meth:`pull`, :meth:`commit` and :meth:`committed`
    (blocking) and their ``a``-prefixed coroutines. ``clock`` drives the down-marks and the
    route cache; ``down_ms`` (module docstring)."""

    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        timeout_s: float = 3.0,
        limits: Limits | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        clock: Clock | None = None,
        down_ms: int = DOWN_MS,
    ) -> None:
        super().__init__(
            namesrv,
            timeout_s=timeout_s,
            limits=limits,
            clock=clock,
            access_key=access_key,
            secret_key=secret_key,
            down_ms=down_ms,
        )
        self.group = group
        #: (topic, broker name, queue id) -> the broker id its last answer suggested
        #: (``PullAPIWrapper.pullFromWhichNodeTable``)
        self.suggested: dict[tuple[str, str, int], int] = {}

    #: a topic a send has just created may be routed a registration round later (RemoteClient)
    route_wait_s = 3.0

    async def _broker(self, topic: str, queue_id: int, broker_name: str | None, perm: int) -> str:
        """The name of the broker group serving queue ``queue_id`` of ``topic`` (``broker_name``
        if given and it does); ``broker_name`` an address (``host:port``): that broker, no route
        asked (a light message queue, ``%LMQ%...``, is in no route)."""
        if broker_name is not None and is_address(broker_name):
            return broker_name
        route = await self._cached_route(topic)
        found = _queue_broker(route, queue_id, broker_name, perm)
        if found is None:  # a route that may be stale: asked again once
            self._stale(topic)
            found = _queue_broker(await self._cached_route(topic), queue_id, broker_name, perm)
        if found is None:
            raise NoRouteError(
                f"topic {topic!r}: no readable queue {queue_id}"
                f"{'' if broker_name is None else f' on broker {broker_name!r}'} in its route"
            )
        return found

    async def _pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int,
        suspend_ms: int,
        subscription: str,
        broker_name: str | None,
        expression_type: str = "TAG",
    ) -> PullResult:
        if expression_type not in ("TAG", "SQL92"):
            raise ValueError(f"expression_type must be 'TAG' or 'SQL92', got {expression_type!r}")
        name = await self._broker(topic, queue_id, broker_name, PERM_READ)
        header = PullMessageHeader(
            consumer_group=self.group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=PULL_SUBSCRIPTION | (PULL_SUSPEND if suspend_ms > 0 else 0),
            commit_offset=0,
            suspend_timeout_millis=suspend_ms,
            subscription=subscription,
            sub_version=0,
            expression_type=expression_type,
        )
        key = (topic, name, queue_id)

        async def send(addr: str) -> PullResult:
            cmd = RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=header.to_ext())
            res = await self.invoke(addr, cmd, timeout_s=self.timeout_s + suspend_ms / 1000, ok=_STATUS.keys())
            ext: dict[str, Any] = res.ext_fields
            suggested = int(ext.get("suggestWhichBrokerId", MASTER_ID))
            self.suggested[key] = suggested  # updatePullFromWhichNode
            reply = Reply(res.body_bytes() if res.code == ResponseCode.SUCCESS else b"")
            return PullResult(
                _STATUS[ResponseCode(res.code)],
                int(ext.get("nextBeginOffset", offset)),
                int(ext.get("minOffset", -1)),
                int(ext.get("maxOffset", -1)),
                reply,
                addr,
                self._broker_id(topic, name, addr),
                suggested,
            )

        suggested = self.suggested.get(key, MASTER_ID)
        return await self.on_broker(topic, name, lambda addrs: pull_ids(addrs, suggested), send)

    def _broker_id(self, topic: str, name: str, addr: str) -> int:
        cached = self._routes.get(topic)
        for b in cached[0].broker_datas if cached is not None else ():
            if b.broker_name == name:
                return next((i for i, a in b.broker_addrs.items() if a == addr), MASTER_ID)
        return MASTER_ID

    def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int = 32,
        *,
        suspend_ms: int = 0,
        subscription: str = "*",
        broker_name: str | None = None,
        expression_type: str = "TAG",
    ) -> PullResult:
        """Pull up to ``max_nums`` messages of ``topic``/``queue_id`` from ``offset``;
        ``suspend_ms`` > 0 lets the broker hold the pull that long waiting for a message
        (long polling). ``subscription``: a tag expression (``"*"``, ``"a || b"``), or with
        ``expression_type="SQL92"`` a SQL92 selector over the messages' properties
        (``"a > 5 AND b IN ('x')"``; the broker needs ``enablePropertyFilter=true``, else
        :class:`BrokerError` with code 1; a malformed one: code 23). A pull whose window
        holds no match is status ``NO_MATCHED_MSG`` with ``next_begin_offset`` past it.

        Raises :class:`BrokerError`, :class:`NoRouteError` / :class:`TopicNotFoundError`, the
        transport's errors, ``rmqlog.CorruptRecordError`` (a body that is not whole records)."""
        return call(
            self._pull(topic, queue_id, offset, max_nums, suspend_ms, subscription, broker_name, expression_type)
        )

    async def apull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int = 32,
        *,
        suspend_ms: int = 0,
        subscription: str = "*",
        broker_name: str | None = None,
        expression_type: str = "TAG",
    ) -> PullResult:
        return await self._pull(
            topic, queue_id, offset, max_nums, suspend_ms, subscription, broker_name, expression_type
        )

    async def _commit(self, topic: str, queue_id: int, offset: int, broker_name: str | None) -> None:
        name = await self._broker(topic, queue_id, broker_name, PERM_READ)

        async def send(addr: str) -> None:
            header = UpdateConsumerOffsetHeader(
                consumer_group=self.group, topic=topic, queue_id=queue_id, commit_offset=offset
            )
            cmd = RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=header.to_ext())
            await self.invoke(addr, cmd)

        await self.on_broker(topic, name, offset_ids, send)

    def commit(self, topic: str, queue_id: int, offset: int, *, broker_name: str | None = None) -> None:
        """Store the group's offset of the queue on its broker group (code 15, answered): on
        the master, else (gone, or out of reach) on a slave."""
        call(self._commit(topic, queue_id, offset, broker_name))

    async def acommit(self, topic: str, queue_id: int, offset: int, *, broker_name: str | None = None) -> None:
        await self._commit(topic, queue_id, offset, broker_name)

    async def _committed(self, topic: str, queue_id: int, broker_name: str | None) -> int | None:
        name = await self._broker(topic, queue_id, broker_name, PERM_READ)

        async def send(addr: str) -> int | None:
            header = QueryConsumerOffsetHeader(consumer_group=self.group, topic=topic, queue_id=queue_id)
            cmd = RemotingCommand(RequestCode.QUERY_CONSUMER_OFFSET, ext_fields=header.to_ext())
            res = await self.invoke(addr, cmd, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
            return None if res.code == ResponseCode.QUERY_NOT_FOUND else int(res.ext_fields["offset"])

        return await self.on_broker(topic, name, offset_ids, send)

    def committed(self, topic: str, queue_id: int, *, broker_name: str | None = None) -> int | None:
        """The group's committed offset of the queue (code 14: the master, else a slave);
        ``None`` when the broker has none (QUERY_NOT_FOUND)."""
        return call(self._committed(topic, queue_id, broker_name))

    async def acommitted(self, topic: str, queue_id: int, *, broker_name: str | None = None) -> int | None:
        return await self._committed(topic, queue_id, broker_name)

    async def _send_back(
        self, message: dict[str, Any], delay_level: int, max_reconsume_times: int | None, broker_name: str | None
    ) -> None:
        for name in ("commitLogOffset", "msgId", "topic", "storeHost"):
            if name not in message:
                raise ValueError(f"message has no {name!r}: give a row of a pull's messages")
        header = ConsumerSendMsgBackHeader(
            offset=int(message["commitLogOffset"]),
            group=self.group,
            delay_level=delay_level,
            origin_msg_id=str(message["msgId"]),
            origin_topic=_origin_topic(message),
            unit_mode=False,
            max_reconsume_times=max_reconsume_times,
        )
        cmd = RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=header.to_ext())
        if broker_name is None:  # the broker that stored it (Java: the message's storeHost)
            await self.invoke(str(message["storeHost"]), cmd)
            return
        route = await self._cached_route(str(message["topic"]))
        for b in route.broker_datas:
            if b.broker_name == broker_name and MASTER_ID in b.broker_addrs:
                await self.invoke(b.broker_addrs[MASTER_ID], cmd)
                return
        raise NoRouteError(f"broker {broker_name!r} has no master in the route of {message['topic']!r}")

    def send_back(
        self,
        message: dict[str, Any],
        delay_level: int = 0,
        *,
        max_reconsume_times: int | None = None,
        broker_name: str | None = None,
    ) -> None:
        """Send a pulled message back for a later retry (CONSUMER_SEND_MSG_BACK, 36), as Java's
        ``sendMessageBack(msg, delayLevel, brokerName)``: ``message`` is a row of a pull's
        messages (``PullResult.rows``; its ``commitLogOffset``, ``msgId``,
        ``topic`` and ``storeHost`` are used). The broker stores it in ``%RETRY%<group>``
        with ``reconsumeTimes + 1``, due after ``delay_level`` (0: ``3 + reconsumeTimes``), or
        in ``%DLQ%<group>`` once ``reconsumeTimes >= max_reconsume_times`` (None: the
        broker's group default, 16) or when ``delay_level < 0``. To ``broker_name``'s master
        when given, else to the message's store host (the broker that stored it).

        Raises :class:`BrokerError` (a refusal: SUBSCRIPTION_GROUP_NOT_EXIST, SYSTEM_ERROR
        "look message by offset failed"...), :class:`NoRouteError`, the transport's errors,
        ``ValueError`` for a message without those fields."""
        call(self._send_back(message, delay_level, max_reconsume_times, broker_name))

    async def asend_back(
        self,
        message: dict[str, Any],
        delay_level: int = 0,
        *,
        max_reconsume_times: int | None = None,
        broker_name: str | None = None,
    ) -> None:
        await self._send_back(message, delay_level, max_reconsume_times, broker_name)


def _origin_topic(message: dict[str, Any]) -> str:
    """The topic the message was first sent to: its ``RETRY_TOPIC`` when it is a retry."""
    props = message.get("properties") or []
    found = dict(props) if isinstance(props, list) else dict(props.items()) if isinstance(props, dict) else {}
    return str(found.get("RETRY_TOPIC", message["topic"]))


def _queue_broker(route: TopicRouteData, queue_id: int, broker_name: str | None, perm: int) -> str | None:
    """The first broker of ``route`` (``broker_name`` if given) with queue ``queue_id`` and ``perm``."""
    for q in route.queue_datas:
        nums = q.read_queue_nums if perm == PERM_READ else q.write_queue_nums
        if (broker_name is None or q.broker_name == broker_name) and q.perm & perm and queue_id < nums:
            return q.broker_name
    return None
