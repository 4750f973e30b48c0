"""A transactional producer (RocketMQ's ``TransactionMQProducer``): a half message, the local
transaction, END_TRANSACTION (37), and the answers to the broker's check-backs.

``send_in_transaction(topic, body, execute)`` sends the message with ``TRAN_MSG=true`` and
``PGROUP`` (the broker keeps it in its half topic, invisible), calls ``execute(send_result)``
(the local transaction) in the calling thread, and ends the transaction with what it returned:
``COMMIT_MESSAGE``, ``ROLLBACK_MESSAGE`` or ``UNKNOW`` (nothing is decided: the broker will ask
later). An exception in ``execute`` is ``UNKNOW``, as in Java. END_TRANSACTION here waits for
the broker's answer (Java's is oneway): a refusal raises :class:`BrokerError`.

Check-backs: the broker sends CHECK_TRANSACTION_STATE (39) on a connection of a producer of the
group, which it learns from this producer's heartbeats (HEART_BEAT with ``producerDataSet``;
sent to a topic's brokers before a half message goes there, again when 30 s passed, and at
once on a new connection: a restarted broker knows no producer). The
request is answered by ``check_listener(message)`` (``message``: the half message as a dict of
the store's message table, its real topic and queue), run in a worker thread, with a oneway
END_TRANSACTION carrying ``fromTransactionCheck=true`` and the offsets the broker gave.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..remoting import RemotingCommand, RequestCode, ResponseCode
from ..remoting.acl_sign import sign_bound
from ..remoting.headers import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    CheckTransactionStateHeader,
    EndTransactionHeader,
)
from ..remoting.heartbeat import HeartbeatData
from .admin import parse_offset_msg_id
from .loop import call
from .producer import Producer, SendResult
from .records import decode_record_rows
from .remote import master_addr

log = logging.getLogger(__name__)

#: how often a producer's heartbeat is sent again to a broker (RocketMQ's heartbeatBrokerInterval)
HEARTBEAT_S = 30.0


class LocalTransactionState(enum.Enum):
    """RocketMQ's ``LocalTransactionState`` (its spelling of UNKNOW kept)."""

    COMMIT_MESSAGE = TRANSACTION_COMMIT_TYPE
    ROLLBACK_MESSAGE = TRANSACTION_ROLLBACK_TYPE
    UNKNOW = TRANSACTION_NOT_TYPE


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """The half message's send result and how its transaction was ended."""

    send: SendResult
    state: LocalTransactionState


CheckListener = Callable[[dict[str, Any]], LocalTransactionState]


class TransactionProducer(Producer):
    """``TransactionProducer(group, namesrv, check_listener=...)`` (module docstring); the
    other keywords are :class:`Producer`'s."""

    def __init__(
        self, group: str, namesrv: str = "127.0.0.1:9876", *, check_listener: CheckListener | None = None, **kw: Any
    ) -> None:
        super().__init__(group, namesrv, **kw)
        self.check_listener = check_listener
        self.request_handler = self._on_request
        #: broker address -> (the connection, when) of its last heartbeat: a new connection (the
        #: broker restarted) is a new client to the broker, so it is beaten at once
        self._beats: dict[str, tuple[Any, float]] = {}
        #: check-backs answered (statistics; tests read them)
        self.checks_answered = 0

    # ---- heartbeats -------------------------------------------------------------------
    async def _heartbeat(self, addr: str) -> None:
        body = HeartbeatData(f"{self.group}@{id(self)}", (self.group,), ()).encode()
        conn = await self.connection(addr)
        await self.invoke(addr, RemotingCommand(RequestCode.HEART_BEAT, body=body))
        self._beats[addr] = (conn, self.clock.monotonic())

    async def _beat_brokers(self, topic: str) -> None:
        route, _ = await self._publish_route(topic)
        now = self.clock.monotonic()
        for bd in route.broker_datas:
            addr = master_addr(route, bd.broker_name, topic)
            conn, when = self._beats.get(addr, (None, 0.0))
            if conn is None or conn.closed or now - when >= HEARTBEAT_S:
                await self._heartbeat(addr)

    def heartbeat(self, topic: str) -> None:
        """Heartbeat ``topic``'s brokers now where due (none yet on the current connection, or
        30 s passed): a producer that sends nothing for a while calls it to stay reachable for
        check-backs (Java's client does it on a 30 s timer)."""
        call(self._beat_brokers(topic))

    # ---- the transaction --------------------------------------------------------------
    async def asend_half(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        queue_id: int | None = None,
    ) -> SendResult:
        """The half message (``TRAN_MSG=true``, ``PGROUP``), after a heartbeat to the topic's
        brokers (so that they can check it back here)."""
        await self._beat_brokers(topic)
        props = {**(properties or {}), "TRAN_MSG": "true", "PGROUP": self.group}
        return await self._send(topic, body, tags, keys, props, queue_id, 0, 0, None)

    async def aend_transaction(
        self, topic: str, result: SendResult, state: LocalTransactionState
    ) -> RemotingCommand | None:
        """END_TRANSACTION for the half message of ``result`` (its offset msgId names the
        commitlog offset, its queue offset the half queue's), sent to the broker that stored
        it (``result.broker_addr``, as Java's client ends it at the broker named by the send's
        result): never a route asked again, which a topic just made from ``TBW102`` may not
        have yet. A result without the address (made elsewhere) is ended at the master of
        ``result.broker_name`` in the topic's route. The broker's answer (``None`` for UNKNOW,
        which the broker does not answer). Raises :class:`BrokerError`."""
        addr = result.broker_addr or master_addr(await self._cached_route(topic), result.broker_name, topic)
        _, offset = parse_offset_msg_id(result.offset_msg_id)
        header = EndTransactionHeader(
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=offset,
            commit_or_rollback=state.value,
            msg_id=result.msg_id,
            transaction_id=result.msg_id,
        )
        cmd = RemotingCommand(RequestCode.END_TRANSACTION, ext_fields=header.to_ext())
        if state is LocalTransactionState.UNKNOW:
            conn = await self.connection(addr)
            if self.credentials is not None:
                sign_bound(cmd, *self.credentials)
            conn.invoke_oneway(cmd)
            return None
        return await self.invoke(addr, cmd)

    def send_in_transaction(
        self,
        topic: str,
        body: bytes,
        execute: Callable[[SendResult], LocalTransactionState],
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        queue_id: int | None = None,
    ) -> TransactionSendResult:
        """Send the half message, run ``execute`` (the local transaction) here, end the
        transaction with its state. Raises what :meth:`Producer.send` raises (nothing was
        executed then) and :class:`BrokerError` for a refused END_TRANSACTION."""
        sent = call(self.asend_half(topic, body, tags=tags, keys=keys, properties=properties, queue_id=queue_id))
        try:
            state = execute(sent)
        except Exception:  # Java: the local transaction's exception leaves it UNKNOW
            log.exception("local transaction of %s failed: left to the check-back", sent.msg_id)
            state = LocalTransactionState.UNKNOW
        call(self.aend_transaction(topic, sent, state))
        return TransactionSendResult(sent, state)

    # ---- check-backs ------------------------------------------------------------------
    def _on_request(self, conn: Any, req: RemotingCommand) -> RemotingCommand | None:
        if req.code != RequestCode.CHECK_TRANSACTION_STATE:
            return (
                None
                if req.is_oneway
                else req.reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {req.code} not supported")
            )
        header = CheckTransactionStateHeader.read(req.ext_fields)
        (message,) = decode_record_rows(req.body_bytes())
        asyncio.get_running_loop().create_task(self._answer_check(conn, header, message))
        return None

    async def _answer_check(self, conn: Any, header: CheckTransactionStateHeader, message: dict[str, Any]) -> None:
        listener = self.check_listener
        try:
            state = (
                LocalTransactionState.UNKNOW
                if listener is None
                else await asyncio.get_running_loop().run_in_executor(None, listener, message)
            )
        except Exception:
            log.exception("check listener failed for %s", header.msg_id)
            state = LocalTransactionState.UNKNOW
        props = dict(message.get("properties") or [])
        end = EndTransactionHeader(
            producer_group=props.get("PGROUP", self.group),
            tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset,
            commit_or_rollback=state.value,
            from_transaction_check=True,
            msg_id=header.msg_id or "",
            transaction_id=header.transaction_id,
        )
        cmd = RemotingCommand(RequestCode.END_TRANSACTION, ext_fields=end.to_ext())
        if self.credentials is not None:
            sign_bound(cmd, *self.credentials)
        conn.invoke_oneway(cmd)
        self.checks_answered += 1
