"""POP_MESSAGE (200050), ACK_MESSAGE (200051), CHANGE_MESSAGE_INVISIBLETIME (200053): RocketMQ
5's ``PopMessageProcessor``, ``AckMessageProcessor`` and ``ChangeInvisibleTimeProcessor`` on the
wire, over the broker's :class:`~rmqnet.broker.pop.PopService` (so that RocketMQ's own proxy in
cluster mode, or a 5.x remoting client, can consume from this broker by POP).

**Pop** (:class:`rmqnet.remoting.PopMessageHeader`: ``consumerGroup, topic, queueId, maxMsgNums,
invisibleTime, pollTime, bornTime, initMode, expType, exp, order, attemptId``). Refused first,
in Java's order: ``now - bornTime - pollTime > 500`` (``bornTime`` 0: now) POLLING_TIMEOUT 210
"pop message is timeout too much"; then :meth:`PopService.pop`'s refusals with their codes (``expType`` SQL92: a
property filter, with ``enablePropertyFilter=true``, else SYSTEM_ERROR; an ``exp`` that does not
parse, or of another type, SUBSCRIPTION_PARSE_FAILED). Found: SUCCESS, remark
``FOUND``, the records byte-exact as a pull's body (a retried message as stored in
``%RETRY%<group>_<topic>``: Java's ``popResponseReturnActualRetryTopic=true``, which RocketMQ's
clients and proxy take as they take Java's default), and the header ``popTime, invisibleTime,
reviveQid, restNum, startOffsetInfo, msgOffsetInfo`` (``orderCountInfo`` for an orderly pop), from
which a client builds each message's receipt handle (``MQClientAPIImpl.processPopResponse``).
Nothing: held for ``pollTime`` ms (long polling, :class:`PopHoldService`: woken by messages
arriving in the topic or its POP retry topic; re-run then, and answered when it finds
something; at most :data:`POP_POLLING_SIZE` held per queue key, past it POLLING_FULL 209), at
the deadline or with ``pollTime`` 0 POLLING_TIMEOUT 210, remark ``NO_MESSAGE_IN_QUEUE``, the
same header.

**Ack** (``consumerGroup, topic`` (the topic read: the POP retry topic for a retried message),
``queueId, extraInfo, offset``) and **change** (the same and ``invisibleTime``): TOPIC_NOT_EXIST
17; a queue id outside the topic's read queues MESSAGE_ILLEGAL 13; an ``offset`` outside the
queue's ``[min, max]`` NO_MESSAGE 208; an ``extraInfo`` not in RocketMQ's format SYSTEM_ERROR 1
naming it (Java's parse throws: its generic SYSTEM_ERROR). An ack answers SUCCESS whether or not
the message was still in flight (Java's: an ack that comes after the redelivery changes
nothing). A change answers SUCCESS with ``popTime, invisibleTime, reviveQid`` (the new handle's),
or NO_MESSAGE when the message is no longer in flight under that handle (acked, changed, or
redelivered: Java would store a new checkpoint for it and deliver it twice).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import rmqlog

from ..remoting import (
    AckMessageHeader,
    ChangeInvisibleTimeHeader,
    PopMessageHeader,
    RemotingCommand,
    ResponseCode,
)
from ..transport import complete
from .holds import HeldPull, PullHoldService, Rerun, watch_close
from .peer import Peer
from .pop import AckStatus, PopRefused, PopResult
from .pop_handle import ExtraInfo, HandleError, pop_retry_topic
from .pull import store_failure

if TYPE_CHECKING:
    from .broker import Broker

#: ``PopMessageRequestHeader.isTimeoutTooMuch``: ms a pop may have spent on its way
TIMEOUT_TOO_MUCH_MS = 500
#: ``BrokerConfig.popPollingSize``: pops held per queue key at most
POP_POLLING_SIZE = 1024
#: POP retry topics remembered for wake-ups at most (then forgotten and learnt again)
MAX_ALIASES = 100_000


class PopHoldService(PullHoldService):
    """Held pops (``PopLongPollingService``): a :class:`PullHoldService` keyed by ``(topic,
    queueId)`` (``-1``: a pop of any queue) whose arrivals also wake the pops of any queue of
    the topic, and pops of the topic when its POP retry topic grows."""

    def __init__(self, rerun: Rerun, durable: Callable[[], asyncio.Future[None] | None] = lambda: None) -> None:
        super().__init__(rerun)
        self._aliases: dict[str, str] = {}
        #: under SYNC_FLUSH, what a held pop's answer waits for (the broker's ``pop.synced``)
        self._durable = durable

    def hold_pop(
        self,
        peer: Peer,
        request: RemotingCommand,
        group: str,
        topic: str,
        queue_id: int,
        deadline_ms: int,
        state: dict[str, Any],
    ) -> asyncio.Future[RemotingCommand | None] | None:
        """Hold a pop that found nothing; ``None`` when its key already holds
        :data:`POP_POLLING_SIZE` (POLLING_FULL)."""
        bucket = self._by_queue.get((topic, queue_id))
        if bucket is not None and len(bucket) >= POP_POLLING_SIZE:
            return None
        if len(self._aliases) >= MAX_ALIASES:
            self._aliases.clear()
        self._aliases[pop_retry_topic(group, topic)] = topic
        return self.hold(peer, request, topic, queue_id, -1, deadline_ms, state)

    def wait_arrival(
        self,
        group: str,
        topic: str,
        queue_id: int,
        deadline_ms: int,
    ) -> asyncio.Future[RemotingCommand | None] | None:
        """A future done when messages may have arrived for a pop of ``group`` on ``topic``
        (``queue_id``, -1: any; its POP retry topic included), or at ``deadline_ms``: the gRPC
        receive's long polling (it pops again then). ``None`` when the key is full
        (POLLING_FULL). Call on the event loop's thread; cancel the future to stop waiting."""
        waiter = _Waiter()
        request = RemotingCommand(0, 0, 0, None, {}, b"", "PYTHON")
        return self.hold_pop(waiter, request, group, topic, queue_id, deadline_ms, {"wake_only": True})

    def _finish(self, held: HeldPull, res: RemotingCommand | None) -> None:
        """A held pop's answer, after the POP log's sync under SYNC_FLUSH (its checkpoint)."""
        fut = None if res is None or held.state.get("wake_only") else self._durable()
        if fut is None:
            super()._finish(held, res)
            return
        self._remove(held)
        assert res is not None
        fut.add_done_callback(lambda f: complete(held.future, _after_sync(held.request, res, f)))

    def _arrived(self, entries: tuple[tuple[str, int, int], ...]) -> None:
        more = []
        for topic, queue_id, max_offset in entries:
            base = self._aliases.get(topic)
            if base is not None:  # the retry topic grew: pops of its topic, on any queue
                more.append((base, -1, max_offset))
                more.append((base, queue_id, max_offset))
            else:
                more.append((topic, -1, max_offset))
        super()._arrived(entries + tuple(more))


# ----------------------------------------------------------------------- pop
def pop_message(broker: Broker, peer: Peer, req: RemotingCommand) -> Any:
    """The POP_MESSAGE handler: the response, or a future of it when the pop is held."""
    return process(broker, peer, req)


def process(
    broker: Broker, peer: Peer, req: RemotingCommand, *, held: HeldPull | None = None, final: bool = False
) -> Any:
    """One pop: the response, a future of it (held), or on a held pop's wake-up ``None``
    (keep holding) unless it found something or ``final``."""
    now = broker.clock.wall_ms()
    if held is not None:
        h: PopMessageHeader = held.state["header"]
    else:
        h = PopMessageHeader.read(req.ext_fields)
        born = h.born_time or now
        if now - born - h.poll_time > TIMEOUT_TOO_MUCH_MS:
            return req.reply(
                ResponseCode.POLLING_TIMEOUT, f"the broker[{broker.config.broker_ip1}] pop message is timeout too much"
            )
    try:
        result = broker.pop.pop(
            h.consumer_group,
            h.topic,
            h.queue_id,
            h.max_msg_nums,
            h.invisible_time,
            now,
            order=h.order,
            tags=h.exp,
            exp_type=h.exp_type,
            init_mode=h.init_mode,
        )
    except PopRefused as exc:
        return req.reply(exc.code, exc.remark)
    except rmqlog.StoreError as exc:
        return store_failure(req, exc)
    ext = _pop_header(result, h.order)
    if len(result):
        res = req.reply(ResponseCode.SUCCESS, "FOUND", ext)
        res.body = result.body()
        return res if held is not None else durable(broker, req, res)  # (a held one: PopHoldService._finish)
    if held is None and h.poll_time > 0 and not broker.stopping and _in_event_loop():
        fut = broker.pop_holds.hold_pop(
            peer, req, h.consumer_group, h.topic, h.queue_id, now + h.poll_time, {"header": h, "broker": broker}
        )
        if fut is None:
            return req.reply(ResponseCode.POLLING_FULL, "NO_MESSAGE_IN_QUEUE", ext)
        watch_close(broker, peer)
        return fut
    if held is not None and not final:
        return None
    return req.reply(ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", ext)


class _Waiter:
    """The peer of a :meth:`PopHoldService.wait_arrival` (no connection: never closed)."""

    remote = "waiter"
    closed = False

    def __init__(self) -> None:
        self.attrs: dict[str, Any] = {}

    def send_oneway(self, cmd: RemotingCommand) -> None:
        return None


def rerun_held(held: HeldPull, final: bool) -> RemotingCommand | None:
    """A held pop re-run (the broker's :class:`PopHoldService` calls it); a waiter of
    :meth:`PopHoldService.wait_arrival` is answered its own request (a wake-up)."""
    if held.state.get("wake_only"):
        return held.request
    broker: Broker = held.state["broker"]
    res: RemotingCommand | None = process(broker, held.peer, held.request, held=held, final=final)
    return res


def _after_sync(req: RemotingCommand, res: RemotingCommand, f: asyncio.Future[None]) -> RemotingCommand:
    """``res``, or SYSTEM_ERROR when the POP log's sync failed."""
    exc = f.exception() if not f.cancelled() else asyncio.CancelledError()
    if exc is None:
        return res
    return req.reply(ResponseCode.SYSTEM_ERROR, f"the POP log could not be synced: {type(exc).__name__}: {exc}")


def durable(broker: Broker, req: RemotingCommand, res: RemotingCommand) -> Any:
    """``res`` now, or under SYNC_FLUSH a future of it once the POP log is synced."""
    fut = broker.pop.synced()
    if fut is None:
        return res
    out: asyncio.Future[RemotingCommand | None] = asyncio.get_running_loop().create_future()
    fut.add_done_callback(lambda f: complete(out, _after_sync(req, res, f)))
    return out


def _pop_header(result: PopResult, order: bool) -> dict[str, Any]:
    ext: dict[str, Any] = {
        "popTime": result.pop_time,
        "invisibleTime": result.invisible,
        "reviveQid": result.revive_qid,
        "restNum": result.rest,
        "startOffsetInfo": result.start_offset_info(),
        "msgOffsetInfo": result.msg_offset_info(),
    }
    if order:
        counts = result.order_count_info()
        if counts is not None:
            ext["orderCountInfo"] = counts
    return ext


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


# ------------------------------------------------------------- ack, change
def _check_handle(
    broker: Broker,
    req: RemotingCommand,
    h: AckMessageHeader | ChangeInvisibleTimeHeader,
) -> RemotingCommand | ExtraInfo:
    """Java's checks of an ack or change, in its order: a refusal, or the handle parsed (the
    queue and offset as the header says, as Java takes them)."""
    tc = broker.topics.get(h.topic)
    if tc is None:
        return req.reply(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
    if not 0 <= h.queue_id < tc.read_queue_nums:
        return req.reply(
            ResponseCode.MESSAGE_ILLEGAL,
            f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:[{tc.read_queue_nums}]",
        )
    try:
        lo, hi = broker.store.min_offset(h.topic, h.queue_id), broker.store.max_offset(h.topic, h.queue_id)
    except rmqlog.StoreError as exc:
        return store_failure(req, exc)
    if not lo <= h.offset <= hi:
        return req.reply(
            ResponseCode.NO_MESSAGE,
            f"offset is illegal, key:{h.topic}@{h.queue_id}, commit:{h.offset}, store:{lo}~{hi}",
        )
    try:
        info = ExtraInfo.parse(h.extra_info)
    except HandleError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, f"extraInfo: {exc}")
    return dataclasses.replace(info, queue_id=h.queue_id, offset=h.offset)


def ack_message(broker: Broker, peer: Peer, req: RemotingCommand) -> Any:
    """The ACK_MESSAGE handler (see the module docstring)."""
    h = AckMessageHeader.read(req.ext_fields)
    info = _check_handle(broker, req, h)
    if isinstance(info, RemotingCommand):
        return info
    try:
        broker.pop.ack(h.consumer_group, h.topic, info, broker.clock.wall_ms())
    except PopRefused as exc:
        return req.reply(exc.code, exc.remark)
    except rmqlog.StoreError as exc:
        return store_failure(req, exc)
    return durable(broker, req, req.reply(ResponseCode.SUCCESS, None))


def change_invisible_time(broker: Broker, peer: Peer, req: RemotingCommand) -> Any:
    """The CHANGE_MESSAGE_INVISIBLETIME handler (see the module docstring)."""
    h = ChangeInvisibleTimeHeader.read(req.ext_fields)
    info = _check_handle(broker, req, h)
    if isinstance(info, RemotingCommand):
        return info
    try:
        status, new = broker.pop.change_invisible(
            h.consumer_group, h.topic, info, h.invisible_time, broker.clock.wall_ms()
        )
    except PopRefused as exc:
        return req.reply(exc.code, exc.remark)
    except rmqlog.StoreError as exc:
        return store_failure(req, exc)
    if status is not AckStatus.OK or new is None:
        return req.reply(
            ResponseCode.NO_MESSAGE,
            f"the message of extraInfo [{h.extra_info}] is not in flight "
            f"({'its invisible time passed' if status is AckStatus.EXPIRED else 'acked or changed'})",
        )
    return durable(
        broker,
        req,
        req.reply(
            ResponseCode.SUCCESS,
            None,
            {"popTime": new.pop_time, "invisibleTime": new.invisible_time, "reviveQid": new.revive_qid},
        ),
    )


__all__ = ["PopHoldService", "pop_message", "ack_message", "change_invisible_time", "rerun_held"]
