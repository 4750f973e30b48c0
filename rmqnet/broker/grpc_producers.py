"""gRPC producers as the broker's clients: a producer's Telemetry stream is its connection for
the transactions' check-back (RocketMQ 5's orphaned-transaction recovery).

A RocketMQ 5 producer writes its ``Settings`` (client type ``PRODUCER``, its topics) on its
Telemetry stream. Each of its topics is a producer group here, because a gRPC send's half
message carries ``PGROUP`` = its topic (the proxy's rule, :mod:`rmqnet.grpc.convert`), and the
client is registered in the broker's client registry (:class:`~rmqnet.broker.consumers.ClientRegistry`,
``register_producer``) with a :class:`TelemetryPeer` as its connection, its client id from the
call's ``x-mq-client-id`` metadata. The transactions' check service
(:mod:`rmqnet.broker.transaction_check`) then finds it as it finds a remoting producer and
sends it CHECK_TRANSACTION_STATE (39); the peer turns that into a
``RecoverOrphanedTransactionCommand`` on the stream: the half message as a gRPC ``Message``
(``rmqnet.grpc.convert.message_of``) and a ``transaction_id`` naming the renewed half's
offsets, which the client's checker answers with ``EndTransaction`` (source
``SOURCE_SERVER_CHECK``).

The client's ``Heartbeat`` refreshes its registration (the registry drops a producer silent
for 120 s, as for remoting producers); the stream's end removes it at once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rmqlog import StoreError, decode_record_rows

from ..grpc.convert import message_of, transaction_id
from ..grpc.v2 import definition_pb2 as pb
from ..grpc.v2 import service_pb2 as svc
from ..remoting import FieldError, RemotingCommand, RequestCode
from ..remoting.headers import CheckTransactionStateHeader
from .consumers import ClientInfo

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

#: commands waiting to be written on one stream at most (a check-back round sends one per open
#: transaction of the client's groups; past this they are dropped and asked again next round)
OUTBOX_MAX = 10_000


@dataclass(eq=False)
class TelemetryPeer:
    """One client's Telemetry stream as a :class:`~rmqnet.broker.peer.Peer`: what the broker
    sends it oneway waits in :attr:`outbox` for the stream's handler to write (on the broker's
    event loop: the check service runs there)."""

    remote: str
    attrs: dict[str, Any] = field(default_factory=dict)
    closed: bool = False
    outbox: asyncio.Queue[svc.TelemetryCommand] = field(default_factory=lambda: asyncio.Queue(OUTBOX_MAX))
    #: CHECK_TRANSACTION_STATE turned into recovery commands / dropped (a full outbox, a bad record)
    sent: int = 0
    dropped: int = 0

    def send_oneway(self, cmd: RemotingCommand) -> None:
        if self.closed or cmd.code != RequestCode.CHECK_TRANSACTION_STATE:
            return  # (no other oneway request means anything to a gRPC client)
        command = recover_command(cmd)
        if command is None:
            self.dropped += 1
            return
        try:
            self.outbox.put_nowait(command)
            self.sent += 1
        except asyncio.QueueFull:
            self.dropped += 1


def recover_command(cmd: RemotingCommand) -> svc.TelemetryCommand | None:
    """CHECK_TRANSACTION_STATE (header: the renewed half's offsets; body: the half's record
    with its real topic and queue) as a ``RecoverOrphanedTransactionCommand``; None (logged)
    when the request does not hold one record."""
    try:
        header = CheckTransactionStateHeader.read(cmd.ext_fields)
        rows = decode_record_rows(cmd.body_bytes(), max_rows=1)
    except (FieldError, StoreError) as exc:
        log.warning("a check-back could not be turned into a recovery command: %s", exc)
        return None
    if not rows:
        log.warning("a check-back without its half message (%s records)", "several" if rows is None else 0)
        return None
    message = message_of(rows[0], message_type=pb.TRANSACTION)
    recover = svc.RecoverOrphanedTransactionCommand(
        message=message, transaction_id=transaction_id(header.commit_log_offset, header.tran_state_table_offset)
    )
    return svc.TelemetryCommand(recover_orphaned_transaction_command=recover)


class GrpcProducers:
    """The producers on Telemetry streams of one broker (module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        #: client id -> (its stream's peer, its groups, its language)
        self._clients: dict[str, tuple[TelemetryPeer, tuple[str, ...], str]] = {}

    def register(self, client_id: str, language: str, peer: TelemetryPeer, settings: pb.Settings) -> None:
        """A ``PRODUCER``'s settings on ``peer``: it joins the group of each of its topics that
        exists here (only those can hold its half messages), at most ``heartbeatMaxGroupNums``
        of them, and no group that would take the registry's producer groups past
        ``clientGroupMaxNums`` (the caps a remoting heartbeat has; the rest are left out, logged)."""
        cfg = self.broker.config
        wanted = [n for n in dict.fromkeys(t.name for t in settings.publishing.topics) if self.broker.topics.get(n)]
        known = self.broker.consumers.producer_groups
        room = max(0, cfg.client_group_max_nums - len(known))
        groups_: list[str] = []
        for name in wanted[: cfg.heartbeat_max_group_nums]:
            if name not in known:
                if room == 0:
                    continue
                room -= 1
            groups_.append(name)
        if len(groups_) < len(wanted):
            log.warning(
                "gRPC producer %s: %d of its %d topics left out of the check-back (unknown here or past "
                "heartbeatMaxGroupNums/clientGroupMaxNums)",
                client_id,
                len(wanted) - len(groups_),
                len(wanted),
            )
        groups = tuple(groups_)
        old = self._clients.get(client_id)
        if old is not None and old[0] is not peer:  # (a new stream of the same client)
            self.broker.consumers.on_close(old[0])
        self._clients[client_id] = (peer, groups, language)
        self._touch(client_id)

    def refresh(self, client_id: str) -> None:
        """The client's Heartbeat: its registration is renewed."""
        if client_id in self._clients:
            self._touch(client_id)

    def _touch(self, client_id: str) -> None:
        peer, groups, language = self._clients[client_id]
        now = self.broker.clock.wall_ms()
        for group in groups:
            self.broker.consumers.register_producer(group, ClientInfo(client_id, peer, language, 0, now))

    def closed(self, peer: TelemetryPeer) -> None:
        """The stream ended: its client leaves every group."""
        peer.closed = True
        self.broker.consumers.on_close(peer)
        for client_id, (p, _, _) in list(self._clients.items()):
            if p is peer:
                del self._clients[client_id]

    def __len__(self) -> int:
        return len(self._clients)
