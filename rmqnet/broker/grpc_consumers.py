"""RocketMQ 5's ``ReceiveMessage``, ``AckMessage`` and ``ChangeInvisibleDuration`` over the
broker's POP machinery (:mod:`rmqnet.broker.pop`), as the proxy's ``ReceiveMessageActivity``,
``AckMessageActivity`` and ``ChangeInvisibleDurationActivity`` serve them in local mode.

**Receive** (server-streaming; every stream ends with ``delivery_timestamp``, the broker's now,
as ``ReceiveMessageResponseStreamWriter.onComplete`` writes it). Checked first, each answered
by one ``status`` response:
the topic's name ``ILLEGAL_TOPIC``; ``batch_size`` below 1 ``BAD_REQUEST`` (above 32: 32, the
pop's most); ``invisible_duration`` below ``minInvisibleTimeMillsForRecv`` (10 s) or above
``maxInvisibleTimeMills`` (12 h) ``ILLEGAL_INVISIBLE_TIME`` (without one and ``auto_renew``:
the proxy's default 60 s); a filter of type ``SQL`` with an empty expression
``ILLEGAL_FILTER_EXPRESSION`` (the proxy's ``FilterAPI.build``); the pop's refusals mapped
(:data:`_BY_POP`: an unknown topic ``TOPIC_NOT_FOUND``, group ``CONSUMER_GROUP_NOT_FOUND``, an
expression that does not parse ``ILLEGAL_FILTER_EXPRESSION``..., SQL on a broker with
``enablePropertyFilter=false`` ``UNSUPPORTED``). A ``SQL`` filter is the pop's SQL92 filter.
The request's queue only names the broker (the proxy's selector): the pop reads every readable queue of the topic and
the group's POP retry topic.
A group whose subscription config says ``consumeMessageOrderly`` (RocketMQ 5's FIFO group,
the ``fifo`` of its Settings) pops orderly: a message group's next message waits while an
earlier one is invisible.

Found: ``status OK``, one ``message`` response per message, then ``delivery_timestamp``; a
stream that breaks before its messages are written (the client went away) makes the unwritten
ones, and the one being written, visible again in 1 s (the proxy's nack). Each message is
:func:`rmqnet.grpc.convert.message_of` with ``receipt_handle`` (the POP handle, RocketMQ's
extraInfo text), ``invisible_duration``, ``delivery_attempt`` = reconsume times + 1, the
topic the client subscribed (a redelivered one is read from ``%RETRY%<group>_<topic>``; its
handle says so) and ``message_type`` from its properties (TRANSACTION, DELAY, FIFO, NORMAL).
Nothing: the receive long-polls (``broker.pop_holds.wait_arrival``, woken by arrivals in the
topic or its retry topic) for ``long_polling_timeout`` clamped to
``[grpcClientConsumerMinLongPollingTimeoutMillis, ...Max...]`` (5 s, 20 s) and to the call's
deadline less :data:`DEADLINE_RESERVE_MS`, popping again at each wake-up; then ``status
MESSAGE_NOT_FOUND`` "no new message" and ``delivery_timestamp``. A full polling key: ``TOO_MANY_REQUESTS``.

**Ack**: each entry's handle parsed and acked with one write (``PopService.ack_many``); an
entry answers ``OK`` when the message was in flight or no longer is (acked before: an ack is
idempotent, as the broker's), ``INVALID_RECEIPT_HANDLE`` when the handle is not one of ours
(malformed, another broker's name) or its invisible time passed (it was, or will be,
redelivered: "receipt handle is expired"). The request's status: the entries' one code, or
``MULTIPLE_RESULTS`` (the clients read only the top level).

**ChangeInvisibleDuration**: a new handle for the message (``receipt_handle`` in the
answer); ``INVALID_RECEIPT_HANDLE`` when the handle is malformed, expired, or its message no
longer in flight under it (acked, or changed already); ``ILLEGAL_INVISIBLE_TIME`` for a
duration that is not positive or above ``maxInvisibleTimeMills``.

**ForwardMessageToDeadLetterQueue** (a push consumer gives up on a message; the proxy's
``ForwardMessageToDLQActivity``): the handle's message, in flight under it, is sent back as the
proxy sends it, a CONSUMER_SEND_MSG_BACK with ``delayLevel`` -1 through the broker's send-back
path (:mod:`rmqnet.broker.send_back`: to ``%DLQ%<group>``, its refusals mapped as a send's),
then acked. ``INVALID_RECEIPT_HANDLE`` (nothing stored) for a handle that is malformed, another
broker's, expired ("receipt handle is expired": it is, or will be, redelivered) or whose message
is no longer in flight under it (acked, changed); a bad topic ``ILLEGAL_TOPIC``, no group
``ILLEGAL_CONSUMER_GROUP``, an unknown topic ``TOPIC_NOT_FOUND``. The send-back is called
directly, not through the processor table: the endpoint authorized the call (the group and the
topic SUB), and the record is the one the group's checkpoint handed out.

Under SYNC_FLUSH each answer waits for the POP log's sync (a failed sync:
``INTERNAL_SERVER_ERROR``; what was handed out is then redelivered after its invisible time).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import rmqlog

from ..grpc.convert import (
    SHARDING_KEY,
    GrpcStatusError,
    check_topic,
    message_of,
    overall_code,
    status,
    status_of_reply,
)
from ..grpc.v2 import definition_pb2 as pb
from ..grpc.v2 import service_pb2 as svc
from ..remoting import ConsumerSendMsgBackHeader, RemotingCommand, RequestCode, ResponseCode
from .peer import Peer
from .pop import MAX_POP_NUMS, AckStatus, FilterUnsupported, PopRefused
from .pop_handle import ExtraInfo, HandleError, normal_topic, real_topic
from .pull import SQL92

if TYPE_CHECKING:
    from .broker import Broker

Code = pb.Code

#: ms of the call's deadline kept for the answer to reach the client (the proxy's
#: ``longPollingReserveTimeInMillis``)
DEADLINE_RESERVE_MS = 100
#: ``ReceiveMessageResponseStreamWriter.NACK_INVISIBLE_TIME``: a message whose write failed is
#: visible again this soon
NACK_INVISIBLE_MS = 1000
#: the proxy's ``defaultInvisibleTimeMills``: an ``auto_renew`` receive without a duration
DEFAULT_INVISIBLE_MS = 60_000
#: remoting code of a pop's refusal -> gRPC code (anything else: INTERNAL_SERVER_ERROR)
_BY_POP: dict[int, int] = {
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: Code.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.SERVICE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    ResponseCode.POLLING_FULL: Code.TOO_MANY_REQUESTS,
    ResponseCode.SYSTEM_ERROR: Code.BAD_REQUEST,  # (the pop's SYSTEM_ERRORs are its argument checks)
}


def _refused(exc: PopRefused) -> pb.Status:
    if isinstance(exc, FilterUnsupported):
        return status(Code.UNSUPPORTED, exc.remark)
    return status(_BY_POP.get(exc.code, Code.INTERNAL_SERVER_ERROR), exc.remark)


def _millis(duration: Any) -> int:
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


def _message_type(props: dict[str, str]) -> int:
    """``GrpcConverter.buildMessageType``'s order: transactional, timed, FIFO, normal."""
    if props.get("TRAN_MSG") == "true":
        return pb.TRANSACTION
    if props.get("TIMER_DELIVER_MS") or props.get("DELAY") or props.get("TIMER_DELAY_SEC"):
        return pb.DELAY
    if props.get(SHARDING_KEY):
        return pb.FIFO
    return pb.NORMAL


class GrpcConsumers:
    """The three calls for ``broker`` (see the module docstring); handlers of
    :class:`~rmqnet.broker.grpc_service.MessagingService`."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def fifo(self, group: str) -> bool:
        """The group's ``consumeMessageOrderly`` (False for a group the broker does not know)."""
        sub = self.broker.subscription_groups.find(group)
        return bool(getattr(sub, "consume_message_orderly", False))

    async def _synced(self) -> pb.Status | None:
        """Under SYNC_FLUSH, after the POP log's sync: None, or the failed sync's status."""
        fut = self.broker.pop.synced()
        if fut is None:
            return None
        try:
            await fut
        except (OSError, asyncio.CancelledError) as exc:
            return status(Code.INTERNAL_SERVER_ERROR, f"the POP log could not be synced: {type(exc).__name__}: {exc}")
        return None

    # ---------------------------------------------------------------- receive
    async def receive(self, req: svc.ReceiveMessageRequest, ctx: Any) -> AsyncIterator[svc.ReceiveMessageResponse]:
        """The receive's responses (module docstring)."""
        checked = self._check_receive(req)
        if isinstance(checked, pb.Status):
            yield svc.ReceiveMessageResponse(status=checked)
            yield self._now()
            return
        group, topic, batch, invisible, (exp, exp_type) = checked
        cfg = self.broker.config
        polling = min(
            max(_millis(req.long_polling_timeout), cfg.grpc_client_consumer_min_long_polling_timeout_millis),
            cfg.grpc_client_consumer_max_long_polling_timeout_millis,
        )
        remaining = ctx.time_remaining() if ctx is not None else None
        if remaining is not None:
            polling = min(polling, int(remaining * 1000) - DEADLINE_RESERVE_MS)
        loop = asyncio.get_running_loop()
        until = loop.time() + max(polling, 0) / 1000
        order = self.fifo(group)
        while True:
            now = self.broker.clock.wall_ms()
            try:
                result = self.broker.pop.pop(
                    group, topic, -1, batch, invisible, now, order=order, tags=exp, exp_type=exp_type
                )
            except PopRefused as exc:
                yield svc.ReceiveMessageResponse(status=_refused(exc))
                yield self._now()
                return
            except rmqlog.StoreError as exc:
                yield svc.ReceiveMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, f"the store failed: {exc}"))
                yield self._now()
                return
            if len(result):
                break
            left = until - loop.time()
            if left <= 0 or self.broker.stopping:
                yield svc.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
                yield self._now()
                return
            waiter = self.broker.pop_holds.wait_arrival(group, topic, -1, now + int(left * 1000))
            if waiter is None:
                yield svc.ReceiveMessageResponse(status=status(Code.TOO_MANY_REQUESTS, "polling full"))
                yield self._now()
                return
            try:  # (the broker's clock ends the hold too; the loop's bounds a broker whose clock is held)
                await asyncio.wait_for(asyncio.shield(waiter), left)
            except TimeoutError:
                pass
            finally:
                if not waiter.done():
                    waiter.cancel()
        failed = await self._synced()
        if failed is not None:
            yield svc.ReceiveMessageResponse(status=failed)
            yield self._now()
            return
        yield svc.ReceiveMessageResponse(status=status(Code.OK))
        rows = result.rows()
        sent = 0
        try:
            for row in rows:
                yield svc.ReceiveMessageResponse(message=self._message(row, group, invisible))
                sent += 1
        finally:
            if sent < len(rows):  # the stream broke (the client went away): what it may not have got
                self._nack(group, topic, [r["receiptHandle"] for r in rows[sent:]])
        yield self._now()

    def _nack(self, group: str, topic: str, handles: list[str]) -> None:
        """The messages of ``handles`` visible again in :data:`NACK_INVISIBLE_MS` (the proxy's
        ``processThrowableWhenWriteMessage``), each as a change of its invisible time; one that
        cannot be changed keeps its time (redelivered then)."""
        now = self.broker.clock.wall_ms()
        for handle in handles:
            with contextlib.suppress(PopRefused, HandleError, rmqlog.StoreError):
                self.broker.pop.change_invisible(group, topic, ExtraInfo.parse(handle), NACK_INVISIBLE_MS, now)

    def _now(self) -> svc.ReceiveMessageResponse:
        out = svc.ReceiveMessageResponse()
        out.delivery_timestamp.FromMilliseconds(self.broker.clock.wall_ms())
        return out

    def _check_receive(
        self,
        req: svc.ReceiveMessageRequest,
    ) -> pb.Status | tuple[str, str, int, int, tuple[str | None, str | None]]:
        """``(group, topic, batch, invisible ms, (expression, its type))`` or the refusal's status."""
        group, topic = req.group.name, req.message_queue.topic.name
        try:
            check_topic(topic)
        except GrpcStatusError as exc:
            return status(exc.code, exc.message)
        if not group:
            return status(Code.ILLEGAL_CONSUMER_GROUP, "group is empty")
        if req.batch_size < 1:
            return status(Code.BAD_REQUEST, f"batch_size {req.batch_size} is below 1")
        cfg = self.broker.config
        if req.HasField("invisible_duration"):
            invisible = _millis(req.invisible_duration)
        elif req.auto_renew:
            invisible = DEFAULT_INVISIBLE_MS
        else:
            return status(Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required")
        if not cfg.min_invisible_time_mills_for_recv <= invisible <= cfg.max_invisible_time_mills:
            return status(
                Code.ILLEGAL_INVISIBLE_TIME,
                f"invisible_duration {invisible} ms is outside [{cfg.min_invisible_time_mills_for_recv}, "
                f"{cfg.max_invisible_time_mills}] (minInvisibleTimeMillsForRecv, maxInvisibleTimeMills)",
            )
        f = req.filter_expression
        if f.type == pb.SQL:
            if not f.expression:
                return status(Code.ILLEGAL_FILTER_EXPRESSION, "Expression can't be null! SQL92")
            return group, topic, min(req.batch_size, MAX_POP_NUMS), invisible, (f.expression, SQL92)
        tags = f.expression.strip() or None
        return group, topic, min(req.batch_size, MAX_POP_NUMS), invisible, (tags, None)

    def _message(self, row: dict[str, Any], group: str, invisible: int) -> pb.Message:
        props = dict(row.get("properties") or ())
        msg = message_of(row, message_type=_message_type(props))
        msg.topic.name = normal_topic(msg.topic.name, group)
        sp = msg.system_properties
        sp.receipt_handle = row["receiptHandle"]
        sp.invisible_duration.FromMilliseconds(invisible)
        return msg

    # -------------------------------------------------------------------- ack
    def _handle(self, text: str) -> ExtraInfo | str:
        """The handle parsed, or why it is not one of this broker's."""
        try:
            info = ExtraInfo.parse(text)
        except HandleError as exc:
            return f"receipt handle is malformed: {exc}"
        if info.broker_name != self.broker.config.broker_name:
            return f"receipt handle names broker {info.broker_name!r}, not this one"
        return info

    async def ack(self, req: svc.AckMessageRequest, ctx: Any) -> svc.AckMessageResponse:
        """The AckMessage answer (module docstring)."""
        group, topic = req.group.name, req.topic.name
        try:
            check_topic(topic)
        except GrpcStatusError as exc:
            return svc.AckMessageResponse(status=status(exc.code, exc.message))
        if not req.entries:
            return svc.AckMessageResponse(status=status(Code.BAD_REQUEST, "no entry to ack"))
        if self.broker.topics.get(topic) is None:
            return svc.AckMessageResponse(status=status(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist"))
        parsed = [self._handle(e.receipt_handle) for e in req.entries]
        valid = [p for p in parsed if isinstance(p, ExtraInfo)]
        now = self.broker.clock.wall_ms()
        try:
            found = iter(self.broker.pop.ack_many(group, topic, valid, now) if valid else [])
        except PopRefused as exc:
            return svc.AckMessageResponse(status=_refused(exc))
        except rmqlog.StoreError as exc:
            return svc.AckMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, f"the store failed: {exc}"))
        entries = []
        for e, p in zip(req.entries, parsed, strict=True):
            if isinstance(p, str):
                st = status(Code.INVALID_RECEIPT_HANDLE, p)
            elif next(found) is AckStatus.EXPIRED:
                st = status(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
            else:
                st = status(Code.OK)
            entries.append(
                svc.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=st)
            )
        failed = await self._synced() if valid else None
        if failed is not None:
            return svc.AckMessageResponse(status=failed)
        code = overall_code([e.status.code for e in entries])
        message = entries[0].status.message if code != Code.MULTIPLE_RESULTS else None
        return svc.AckMessageResponse(status=status(code, message), entries=entries)

    # ------------------------------------------------------------ change
    async def change_invisible(
        self,
        req: svc.ChangeInvisibleDurationRequest,
        ctx: Any,
    ) -> svc.ChangeInvisibleDurationResponse:
        """The ChangeInvisibleDuration answer (module docstring)."""
        out = svc.ChangeInvisibleDurationResponse
        group, topic = req.group.name, req.topic.name
        try:
            check_topic(topic)
        except GrpcStatusError as exc:
            return out(status=status(exc.code, exc.message))
        invisible = _millis(req.invisible_duration)
        if not 0 < invisible <= self.broker.config.max_invisible_time_mills:
            return out(
                status=status(
                    Code.ILLEGAL_INVISIBLE_TIME,
                    f"invisible_duration {invisible} ms is outside "
                    f"(0, {self.broker.config.max_invisible_time_mills}] (maxInvisibleTimeMills)",
                )
            )
        if self.broker.topics.get(topic) is None:
            return out(status=status(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist"))
        handle = self._handle(req.receipt_handle)
        if isinstance(handle, str):
            return out(status=status(Code.INVALID_RECEIPT_HANDLE, handle))
        try:
            found, new = self.broker.pop.change_invisible(group, topic, handle, invisible, self.broker.clock.wall_ms())
        except PopRefused as exc:
            return out(status=_refused(exc))
        except rmqlog.StoreError as exc:
            return out(status=status(Code.INTERNAL_SERVER_ERROR, f"the store failed: {exc}"))
        if found is not AckStatus.OK or new is None:
            why = (
                "receipt handle is expired"
                if found is AckStatus.EXPIRED
                else "the message is not in flight under this receipt handle (acked or changed already)"
            )
            return out(status=status(Code.INVALID_RECEIPT_HANDLE, why))
        failed = await self._synced()
        if failed is not None:
            return out(status=failed)
        return out(status=status(Code.OK), receipt_handle=new.text())

    # ---------------------------------------------------------- dead letters
    async def forward_to_dlq(
        self,
        req: svc.ForwardMessageToDeadLetterQueueRequest,
        peer: Peer,
    ) -> svc.ForwardMessageToDeadLetterQueueResponse:
        """The ForwardMessageToDeadLetterQueue answer (module docstring); ``peer`` the caller's."""
        out = svc.ForwardMessageToDeadLetterQueueResponse
        group, topic = req.group.name, req.topic.name
        try:
            check_topic(topic)
        except GrpcStatusError as exc:
            return out(status=status(exc.code, exc.message))
        if not group:
            return out(status=status(Code.ILLEGAL_CONSUMER_GROUP, "group is empty"))
        if self.broker.topics.get(topic) is None:
            return out(status=status(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist"))
        handle = self._handle(req.receipt_handle)
        if isinstance(handle, str):
            return out(status=status(Code.INVALID_RECEIPT_HANDLE, handle))
        try:
            found, offset = self.broker.pop.in_flight(group, topic, handle, self.broker.clock.wall_ms())
        except HandleError as exc:
            return out(status=status(Code.INVALID_RECEIPT_HANDLE, f"receipt handle is malformed: {exc}"))
        if found is not AckStatus.OK or offset is None:
            why = (
                "receipt handle is expired"
                if found is AckStatus.EXPIRED
                else "the message is not in flight under this receipt handle (acked or changed already)"
            )
            return out(status=status(Code.INVALID_RECEIPT_HANDLE, why))
        header = ConsumerSendMsgBackHeader(
            offset=offset,
            group=group,
            delay_level=-1,
            origin_msg_id=req.message_id or None,
            origin_topic=real_topic(topic, group, handle.topic_type),
            max_reconsume_times=0,
        )
        res = self.broker.send_back.handle(
            self.broker, peer, RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=header.to_ext())
        )
        reply = await res if isinstance(res, asyncio.Future) else res
        if reply is None or reply.code != ResponseCode.SUCCESS:
            code = ResponseCode.SYSTEM_ERROR if reply is None else reply.code
            return out(
                status=status(
                    status_of_reply(code),
                    (reply.remark if reply is not None else None) or f"the dead-letter send was refused, code {code}",
                )
            )
        try:  # (then acked, as the proxy acks after a successful send-back)
            self.broker.pop.ack(group, topic, handle, self.broker.clock.wall_ms())
        except PopRefused as exc:
            return out(status=_refused(exc))
        except rmqlog.StoreError as exc:
            return out(status=status(Code.INTERNAL_SERVER_ERROR, f"the store failed: {exc}"))
        failed = await self._synced()
        return out(status=failed or status(Code.OK))


__all__ = ["GrpcConsumers", "DEADLINE_RESERVE_MS"]
