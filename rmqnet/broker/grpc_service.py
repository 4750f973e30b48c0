"""RocketMQ 5's ``apache.rocketmq.v2.MessagingService`` over one :class:`Broker`: what RocketMQ 5's
proxy in local mode serves, for its producers (``grpcListenPort``; the server is
:mod:`rmqnet.broker.grpc_server`).

- ``QueryRoute``: the topic's queues, ids as the broker's (``0..max(read, write)-1``), each
  ``READ_WRITE``, ``READ`` or ``WRITE`` as the topic's and the broker's perm allow; broker =
  this broker's name and id, endpoints = this gRPC endpoint; ``accept_message_types`` NORMAL,
  FIFO, DELAY and TRANSACTION (our topics carry no message type: a topic accepts every type
  its messages carry); a SLAVE's queues are ``READ`` (it refuses sends). Then every other
  broker group holding the topic, from the name servers' cached route
  (:mod:`rmqnet.broker.grpc_routes`): its queues, broker = its master (id 0), endpoints = the
  master's host with this endpoint's port (the proxy's ``ProxyTopicRouteData``: every broker's
  gRPC port is the same). Unknown topic (here and there): ``TOPIC_NOT_FOUND``.
- ``Heartbeat`` renews a producer's registration; ``NotifyClientTermination``: ``OK``.
- ``Telemetry``: every ``Settings`` the client writes is answered with status ``OK`` and the
  server's settings (:func:`rmqnet.grpc.settings.server_settings`); a producer's stream is its
  connection for the transactions' check-back, which arrives on it as
  ``RecoverOrphanedTransactionCommand`` (:mod:`rmqnet.broker.grpc_producers`); the stream stays open
  until the client closes it or the broker begins to stop (:meth:`MessagingService.close`:
  the stream completes then, rather than being cut after the server's grace period).
- ``SendMessage``: each message checked and converted (:func:`rmqnet.grpc.convert.outgoing`),
  then served as a remoting ``SEND_MESSAGE_V2`` through the broker's processor table (the ACL
  hook, then :mod:`rmqnet.broker.send`: the same checks and the store's one write path, a
  half message through :mod:`rmqnet.broker.transactions`). The queue: for a one-message
  request with a message group, Guava's consistent hash of the group over the write queues
  (the proxy's rule: a group stays on one queue); else round robin. Each entry answers
  ``message_id`` = the client's id (``UNIQ_KEY``), ``offset`` = the queue offset, and for a
  half message ``transaction_id`` = its offsets (:func:`rmqnet.grpc.convert.transaction_id`);
  the request's status is the entries' one code or ``MULTIPLE_RESULTS``.
- ``EndTransaction``: served as a remoting ``END_TRANSACTION`` (producer group = the topic,
  as the half's ``PGROUP``); an unknown resolution is left to the check-back, answered ``OK``.
- ``QueryAssignment``: one assignment per broker group with readable queues (queue id -1), each
  at its own endpoint, as the proxy answers a push consumer.
- ``ReceiveMessage``, ``AckMessage``, ``ChangeInvisibleDuration``, ``ForwardMessageToDeadLetterQueue``:
  POP consumption (:mod:`rmqnet.broker.grpc_consumers`).
- Every other call (``PullMessage``, offsets, ``RecallMessage``...): status ``UNSUPPORTED`` at
  once (:meth:`MessagingService.unsupported`).
- A request whose bytes are not its message is answered ``BAD_REQUEST`` (a Telemetry stream
  ends there), never with a traceback in the broker's log (:class:`CorruptRequest`).
- With ``aclEnable=true`` the endpoint authenticates and authorizes each call before it comes
  here (:mod:`rmqnet.broker.acl_grpc`); a Telemetry ``Settings`` command is authorized here
  (``FORBIDDEN`` ends the stream, nothing registered), and the remoting requests a send or an
  end makes carry the call's caller to the ACL hook (a refusal there: ``FORBIDDEN``).

Handlers are coroutines on the broker's event loop (grpc.aio): a send's future is the send
path's, resolved in the loop turn of its put.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..client.admin import parse_offset_msg_id
from ..grpc.convert import (
    Code,
    GrpcStatusError,
    check_topic,
    consistent_hash,
    outgoing,
    overall_code,
    parse_transaction_id,
    status,
    status_of_reply,
    transaction_id,
)
from ..grpc.settings import CONSUMER_MAX_ATTEMPTS, server_settings
from ..grpc.v2 import definition_pb2 as pb
from ..grpc.v2 import service_pb2 as svc
from ..remoting import RemotingCommand, RequestCode, ResponseCode, SendMessageHeader
from ..remoting.address import grpc_peer_address, peer_ip
from ..remoting.headers import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    EndTransactionHeader,
)
from ..remoting.names import AUTO_CREATE_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, PERM_READ, PERM_WRITE
from ..remoting.route import MASTER_ID, QueueData, TopicRouteData
from .acl_grpc import caller_attrs, refused, settings_needs
from .grpc_consumers import GrpcConsumers
from .grpc_producers import GrpcProducers, TelemetryPeer
from .grpc_routes import ClusterRoutes

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

#: every queue accepts every type (our topics carry no message type)
_TYPES = [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
_RESOLUTIONS = {pb.COMMIT: TRANSACTION_COMMIT_TYPE, pb.ROLLBACK: TRANSACTION_ROLLBACK_TYPE}


@dataclass(frozen=True)
class CorruptRequest:
    """A request whose bytes are not the call's message (what the server's deserializer hands
    the handlers in its place, :func:`rmqnet.broker.grpc_server.handlers`): answered
    ``BAD_REQUEST`` with ``reason``, never a traceback."""

    message: str
    reason: str

    def status(self) -> pb.Status:
        return status(Code.BAD_REQUEST, f"the request is not a valid {self.message}: {self.reason}"[:500])


@dataclass
class GrpcPeer:
    """A gRPC call as the processors' :class:`~rmqnet.broker.peer.Peer`: ``remote`` is the
    client's ``ip:port`` (BORNHOST of what it sends); nothing is ever sent to it oneway."""

    remote: str
    attrs: dict[str, Any] = field(default_factory=dict)
    closed: bool = False

    def send_oneway(self, cmd: RemotingCommand) -> None:
        log.debug("no oneway request over gRPC (code %s dropped)", cmd.code)


class MessagingService:
    """The calls above for ``broker``, whose gRPC endpoint is ``host:port``."""

    def __init__(self, broker: Broker, host: str, port: int, routes: ClusterRoutes | None = None) -> None:
        self.broker = broker
        self.port = port
        #: the cluster's routes (None: no name server, this broker's own topics only)
        self.routes = routes
        self.endpoints = pb.Endpoints(
            scheme=pb.IPv6 if ":" in host else pb.IPv4, addresses=[pb.Address(host=host, port=port)]
        )
        self._round_robin = itertools.count()
        #: set by :meth:`close` (the broker's stop): open Telemetry streams end at once
        self._closed = asyncio.Event()
        #: producers on Telemetry streams, registered for the transactions' check-back
        self.producers = GrpcProducers(broker)
        #: ReceiveMessage, AckMessage, ChangeInvisibleDuration over the broker's POP
        self.consumers = GrpcConsumers(broker)

    def close(self) -> None:
        """The broker stops: every open Telemetry stream ends now (its client sees the stream
        complete, not cut after the server's grace period)."""
        self._closed.set()

    # ------------------------------------------------------------------ routes
    def _queues(self, topic: str) -> list[pb.MessageQueue] | None:
        """This broker's own queues of ``topic`` (None: it has no such topic)."""
        tc = self.broker.topics.get(topic)
        if tc is None:
            return None
        perm = tc.perm & self.broker.config.broker_permission
        if self.broker.config.slave:  # (a slave refuses sends: its queues are offered for reading only)
            perm &= ~PERM_WRITE
        broker = pb.Broker(
            name=self.broker.config.broker_name, id=self.broker.config.broker_id, endpoints=self.endpoints
        )
        return _queue_list(topic, perm, tc.read_queue_nums, tc.write_queue_nums, broker)

    def _peers(self, route: TopicRouteData | None) -> list[tuple[QueueData, pb.Broker]]:
        """The other broker groups of ``route`` that have a master, each with its queue data and
        that master as a gRPC broker: its host with this endpoint's port (the proxy's rule,
        ``ProxyTopicRouteData``: every broker's gRPC port is the same), by group name."""
        if route is None:
            return []
        masters = {b.broker_name: b.master_addr() for b in route.broker_datas}
        out = []
        for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
            addr = masters.get(qd.broker_name)
            if qd.broker_name == self.broker.config.broker_name or addr is None:
                continue  # (this group is answered from this broker; a group without a master takes no client)
            host = peer_ip(addr)
            endpoints = pb.Endpoints(
                scheme=pb.IPv6 if ":" in host else pb.IPv4, addresses=[pb.Address(host=host, port=self.port)]
            )
            out.append((qd, pb.Broker(name=qd.broker_name, id=MASTER_ID, endpoints=endpoints)))
        return out

    async def _route(self, topic: str) -> tuple[list[pb.MessageQueue] | None, list[tuple[QueueData, pb.Broker]]]:
        """This broker's queues of ``topic`` and the other groups holding it (cached name server
        routes, :mod:`rmqnet.broker.grpc_routes`; none without a name server)."""
        own = self._queues(topic)
        route = await self.routes.route(topic) if self.routes is not None else None
        return own, self._peers(route)

    async def query_route(self, req: svc.QueryRouteRequest, ctx: Any) -> svc.QueryRouteResponse:
        topic = req.topic.name
        try:
            check_topic(topic)
        except GrpcStatusError as exc:
            return svc.QueryRouteResponse(status=status(exc.code, exc.message))
        own, peers = await self._route(topic)
        if own is None and not peers:
            return svc.QueryRouteResponse(status=status(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist"))
        queues = list(own or [])
        for qd, broker in peers:
            queues += _queue_list(topic, qd.perm, qd.read_queue_nums, qd.write_queue_nums, broker)
        return svc.QueryRouteResponse(status=status(Code.OK), message_queues=queues)

    async def query_assignment(self, req: svc.QueryAssignmentRequest, ctx: Any) -> svc.QueryAssignmentResponse:
        topic = req.topic.name
        try:  # (before the name servers are asked for it, as the proxy validates first)
            check_topic(topic)
        except GrpcStatusError as exc:
            return svc.QueryAssignmentResponse(status=status(exc.code, exc.message))
        own, peers = await self._route(topic)
        if own is None and not peers:
            return svc.QueryAssignmentResponse(status=status(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist"))
        assignments = []
        readable = [q for q in own or () if q.permission in (pb.READ, pb.READ_WRITE)]
        if readable:
            q = pb.MessageQueue()
            q.CopyFrom(readable[0])
            q.id = -1
            q.permission = pb.READ_WRITE if any(x.permission == pb.READ_WRITE for x in own or ()) else pb.READ
            assignments.append(pb.Assignment(message_queue=q))
        for qd, broker in peers:  # (one per group, as the proxy assigns a push consumer its queues)
            if qd.perm & PERM_READ and qd.read_queue_nums > 0:
                permission = pb.READ_WRITE if qd.perm & PERM_WRITE else pb.READ
                assignments.append(
                    pb.Assignment(
                        message_queue=pb.MessageQueue(
                            topic=pb.Resource(name=topic), id=-1, permission=permission, broker=broker
                        )
                    )
                )
        return svc.QueryAssignmentResponse(status=status(Code.OK), assignments=assignments)

    # -------------------------------------------------------------- clients
    async def heartbeat(self, req: svc.HeartbeatRequest, ctx: Any) -> svc.HeartbeatResponse:
        client_id = _metadata(ctx, "x-mq-client-id")
        if client_id:
            self.producers.refresh(client_id)
        return svc.HeartbeatResponse(status=status(Code.OK))

    async def notify_client_termination(
        self, req: svc.NotifyClientTerminationRequest, ctx: Any
    ) -> svc.NotifyClientTerminationResponse:
        return svc.NotifyClientTerminationResponse(status=status(Code.OK))

    async def telemetry(
        self, requests: AsyncIterator[svc.TelemetryCommand], ctx: Any
    ) -> AsyncIterator[svc.TelemetryCommand]:
        peer = TelemetryPeer(grpc_peer_address(ctx.peer()) if ctx is not None else "")
        try:
            async for out in self._telemetry(peer, aiter(requests), ctx):
                yield out
        finally:
            self.producers.closed(peer)

    async def _telemetry(
        self, peer: TelemetryPeer, commands: AsyncIterator[svc.TelemetryCommand], ctx: Any
    ) -> AsyncIterator[svc.TelemetryCommand]:
        """The stream's loop: the client's commands answered, the broker's (``peer.outbox``:
        orphaned-transaction recovery) written, until either side ends or the broker stops."""
        nxt: asyncio.Future[svc.TelemetryCommand] | None = None
        while not self._closed.is_set():
            if nxt is None:
                nxt = asyncio.ensure_future(anext(commands))
                # the read may end after this handler is gone (grpc cancels it when its client
                # goes away): its outcome is taken, never left as "Task exception was never retrieved"
                nxt.add_done_callback(_taken)
            outgoing_ = asyncio.ensure_future(peer.outbox.get())
            closed = asyncio.ensure_future(self._closed.wait())
            try:
                await asyncio.wait((nxt, outgoing_, closed), return_when=asyncio.FIRST_COMPLETED)
            finally:
                closed.cancel()
                if not outgoing_.done():
                    outgoing_.cancel()
                if not nxt.done() and (self._closed.is_set() or not outgoing_.done()):
                    nxt.cancel()  # the broker stops, or grpc cancelled this handler
            if outgoing_.done() and not outgoing_.cancelled():
                yield outgoing_.result()
            if not nxt.done() or nxt.cancelled():
                if nxt.cancelled() or self._closed.is_set():
                    return
                continue  # (a command of the broker's was written: the read goes on)
            try:
                cmd = nxt.result()
            except StopAsyncIteration:  # the client closed its side
                return
            nxt = None
            if isinstance(cmd, CorruptRequest):  # (the stream cannot be trusted past it)
                yield svc.TelemetryCommand(status=cmd.status())
                return
            if cmd.HasField("settings"):
                why = refused(self.broker.acl, functools.partial(settings_needs, cmd.settings))
                if why is not None:  # (nothing registered; the stream ends, as the proxy's interceptor ends it)
                    yield svc.TelemetryCommand(status=status(Code.FORBIDDEN, why[:500]))
                    return
                if cmd.settings.client_type == pb.PRODUCER:
                    self.producers.register(
                        _metadata(ctx, "x-mq-client-id") or peer.remote,
                        _metadata(ctx, "x-mq-language") or "OTHER",
                        peer,
                        cmd.settings,
                    )
                group = (
                    self.broker.subscription_groups.find(cmd.settings.subscription.group.name)
                    if cmd.settings.WhichOneof("pub_sub") == "subscription"
                    else None
                )
                settings = server_settings(
                    cmd.settings,
                    max_body_size=self.broker.config.max_message_size,
                    fifo=bool(group is not None and group.consume_message_orderly),
                    consumer_attempts=group.retry_max_times + 1 if group is not None else CONSUMER_MAX_ATTEMPTS,
                )
                yield svc.TelemetryCommand(status=status(Code.OK), settings=settings)
            # (thread stack traces and verify results answer commands this server never sends)

    # ------------------------------------------------------------------ sends
    async def send_message(self, req: svc.SendMessageRequest, ctx: Any) -> svc.SendMessageResponse:
        if not req.messages:
            return svc.SendMessageResponse(status=status(Code.MESSAGE_CORRUPTED, "no message to send"))
        topic = req.messages[0].topic.name
        try:
            check_topic(topic)
        except GrpcStatusError as exc:
            return svc.SendMessageResponse(status=status(exc.code, exc.message))
        tc = self.broker.topics.get(topic)
        if tc is None:
            return svc.SendMessageResponse(status=status(Code.TOPIC_NOT_FOUND, f"topic {topic} does not exist"))
        peer = GrpcPeer(grpc_peer_address(ctx.peer()), caller_attrs())
        now = self.broker.clock.wall_ms()
        single = len(req.messages) == 1
        # one request per message (the Python and Node.js clients send one message a call);
        # the send path puts every send of this loop turn with one store call
        pending: list[tuple[Any, Any]] = []
        for msg in req.messages:
            try:
                out = outgoing(msg, topic=topic, max_body_size=self.broker.config.max_message_size)
            except GrpcStatusError as exc:
                pending.append((None, pb.Status(code=exc.code, message=exc.message)))  # type: ignore[arg-type]
                continue
            queues = max(1, tc.write_queue_nums)
            queue_id = (
                consistent_hash(out.message_group, queues)
                if single and out.message_group
                else next(self._round_robin) % queues
            )
            header = SendMessageHeader(
                producer_group=topic,
                topic=topic,
                default_topic=AUTO_CREATE_TOPIC,
                default_topic_queue_nums=DEFAULT_TOPIC_QUEUE_NUMS,
                queue_id=queue_id,
                sys_flag=out.sys_flag,
                born_timestamp=now,
                flag=0,
                properties=out.properties,
                reconsume_times=out.reconsume_times,
                unit_mode=False,
                batch=False,
                max_reconsume_times=None,
                broker_name=None,
            )
            cmd = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext_fields=header.to_ext(v2=True), body=out.body)
            pending.append((out, self.broker.table.process(self.broker, peer, cmd)))
        entries = []
        for out, res in pending:
            if out is None:
                entries.append(svc.SendResultEntry(status=res))
                continue
            reply = await res if isinstance(res, Awaitable) else res
            entries.append(_send_entry(out, reply))
        code = overall_code([e.status.code for e in entries])
        message = entries[0].status.message if code != Code.MULTIPLE_RESULTS else None
        return svc.SendMessageResponse(status=status(code, message), entries=entries)

    async def end_transaction(self, req: svc.EndTransactionRequest, ctx: Any) -> svc.EndTransactionResponse:
        try:
            commit_log_offset, queue_offset = parse_transaction_id(req.transaction_id)
        except GrpcStatusError as exc:
            return svc.EndTransactionResponse(status=status(exc.code, exc.message))
        header = EndTransactionHeader(
            producer_group=req.topic.name,
            tran_state_table_offset=queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=_RESOLUTIONS.get(req.resolution, TRANSACTION_NOT_TYPE),
            from_transaction_check=req.source == pb.SOURCE_SERVER_CHECK,
            msg_id=req.message_id,
            transaction_id=req.message_id,
        )
        cmd = RemotingCommand(RequestCode.END_TRANSACTION, ext_fields=header.to_ext())
        res = self.broker.table.process(self.broker, GrpcPeer(grpc_peer_address(ctx.peer()), caller_attrs()), cmd)
        reply = await res if isinstance(res, Awaitable) else res
        if reply is None:  # an unknown resolution: left to the check-back (Java answers nothing)
            return svc.EndTransactionResponse(status=status(Code.OK))
        return svc.EndTransactionResponse(status=status(status_of_reply(reply.code), reply.remark or None))

    # ------------------------------------------------------------- consumers
    def receive_message(self, req: svc.ReceiveMessageRequest, ctx: Any) -> AsyncIterator[svc.ReceiveMessageResponse]:
        return self.consumers.receive(req, ctx)

    async def ack_message(self, req: svc.AckMessageRequest, ctx: Any) -> svc.AckMessageResponse:
        return await self.consumers.ack(req, ctx)

    async def change_invisible_duration(
        self,
        req: svc.ChangeInvisibleDurationRequest,
        ctx: Any,
    ) -> svc.ChangeInvisibleDurationResponse:
        return await self.consumers.change_invisible(req, ctx)

    async def forward_message_to_dead_letter_queue(
        self,
        req: svc.ForwardMessageToDeadLetterQueueRequest,
        ctx: Any,
    ) -> svc.ForwardMessageToDeadLetterQueueResponse:
        return await self.consumers.forward_to_dlq(req, GrpcPeer(grpc_peer_address(ctx.peer()), caller_attrs()))

    # ---------------------------------------------------------- the others
    @staticmethod
    def unsupported(method: str, response: Any) -> Any:
        """The answer of a call this broker does not serve: ``response`` (the call's response
        class) with status ``UNSUPPORTED`` naming the call."""
        return response(status=status(Code.UNSUPPORTED, f"{method} is not supported by this broker"))


def _queue_list(topic: str, perm: int, reads: int, writes: int, where: pb.Broker) -> list[pb.MessageQueue]:
    """A group's queues of ``topic``: ids as the broker's (``0..max(reads, writes)-1``), each
    ``READ_WRITE``, ``READ``, ``WRITE`` or ``NONE`` as ``perm`` and the counts allow."""
    out = []
    for qid in range(max(reads, writes)):
        read = perm & PERM_READ and qid < reads
        write = perm & PERM_WRITE and qid < writes
        permission = pb.READ_WRITE if read and write else pb.READ if read else pb.WRITE if write else pb.NONE
        out.append(
            pb.MessageQueue(
                topic=pb.Resource(name=topic), id=qid, permission=permission, broker=where, accept_message_types=_TYPES
            )
        )
    return out


def _metadata(ctx: Any, key: str) -> str | None:
    """The call's metadata value of ``key`` (None without one, or without a context)."""
    if ctx is None:
        return None
    for k, v in ctx.invocation_metadata() or ():
        if k == key:
            return v if isinstance(v, str) else None
    return None


def _taken(fut: asyncio.Future[Any]) -> None:
    """Take a finished read's outcome (see :meth:`MessagingService.telemetry`)."""
    if not fut.cancelled():
        fut.exception()


def _send_entry(out: Any, reply: RemotingCommand | None) -> svc.SendResultEntry:
    """The entry of one message from its remoting reply."""
    if reply is None:  # (a send always answers; a oneway one would not)
        return svc.SendResultEntry(status=status(Code.INTERNAL_SERVER_ERROR, "the send was not answered"))
    if reply.code != ResponseCode.SUCCESS:
        remark = reply.remark or f"send refused, code {reply.code}"
        return svc.SendResultEntry(status=status(status_of_reply(reply.code), remark))
    offset = int(reply.ext_fields.get("queueOffset", -1))
    entry = svc.SendResultEntry(status=status(Code.OK), message_id=out.message_id, offset=offset)
    if out.transactional:
        _, commit_log_offset = parse_offset_msg_id(str(reply.ext_fields.get("msgId", "")))
        entry.transaction_id = transaction_id(commit_log_offset, offset)
    return entry
