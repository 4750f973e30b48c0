"""A producer: single sends (SEND_MESSAGE_V2, 310), asynchronous sends and batches
(SEND_BATCH_MESSAGE, 320), as RocketMQ 4.9.8's ``DefaultMQProducerImpl.sendKernelImpl``
sends them.

Queue choice (``sendDefaultImpl``): round robin over the writable queues of the topic's route
across its brokers (:func:`~rmqnet.client.latency.publish_queues`: brokers by name, queues
0..writeQueueNums-1 each), by :class:`~rmqnet.client.latency.FaultStrategy`; a send that
fails (no answer in time, a lost or refused connection, or a broker code among
``RETRY_CODES``) is tried again, up to ``retry_times_when_send_failed`` (2) more times, on
another queue chosen the same way (without ``send_latency_fault_enable``: the next queue of
another broker), all attempts within ``timeout_s`` together as in Java; then the last
attempt's error is raised as it came (Java wraps it in ``MQClientException``). With
``send_latency_fault_enable`` every attempt's latency or failure is recorded against its
broker, and a failed or slow broker is skipped for a while (``MQFaultStrategy``'s tables).
A stored-but status (10, 11, 12) is the send's result, unless
``retry_another_broker_when_not_store_ok`` (Java's ``retryAnotherBrokerWhenNotStoreOK``).
Given ``queue_id`` or ``broker_name``, the send goes once to that queue (``send(msg, mq)``:
no retry, nothing recorded): the first matching queue of the topic's route in round robin.
A topic the name server does not know is sent through the route of ``TBW102`` with
``defaultTopic=TBW102``, ``defaultTopicQueueNums=4``: a broker with
``autoCreateTopicEnable`` creates it (RocketMQ's ``createTopicKey``).

Results: SUCCESS is ``SEND_OK``; FLUSH_DISK_TIMEOUT (10), FLUSH_SLAVE_TIMEOUT (12) and
SLAVE_NOT_AVAILABLE (11) are stored-but statuses (the message is in the store), as the Java
client reports them; any other code raises :class:`~rmqnet.client.errors.BrokerError`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqlog import Clock, encode_message_batch

from ..remoting import RemotingCommand, RequestCode, ResponseCode, SendMessageHeader
from ..remoting.headers import DUPLICATE_FIELD, IdempotenceMarker
from ..remoting.names import AUTO_CREATE_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS, PERM_WRITE
from ..remoting.route import TopicRouteData
from ..transport import ConnectionLostError, Limits, RemotingTimeoutError
from .errors import BrokerError, NoRouteError, TopicNotFoundError
from .latency import LATENCY_MAX_MS, NOT_AVAILABLE_MS, FaultStrategy, QueueRef, publish_queues
from .loop import call, submit
from .message import NAME_VALUE_SEP, PROPERTY_SEP, UniqKeys, message_properties, properties_string
from .remote import RemoteClient, master_addr

#: ``DefaultMQProducer.retryResponseCodes``: broker answers after which a send is tried again
RETRY_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.NO_PERMISSION,
        204,
        205,
    }
)  # NO_BUYER_ID, NOT_IN_CURRENT_UNIT
#: failures of the connection itself (Java's ``RemotingException`` / ``MQClientException``): always tried again
_LINK_ERRORS = (RemotingTimeoutError, ConnectionLostError, OSError, NoRouteError)
#: :meth:`Producer.send_encoded_batch`: the pause between two looks at the route while a group
#: has no master in reach, and the first pause after a SYSTEM_BUSY (doubled up to the former)
MASTER_WAIT_PAUSE_S = 0.5
BUSY_PAUSE_S = 0.02
log = logging.getLogger(__name__)
_STATUS = {
    ResponseCode.SUCCESS: "SEND_OK",
    ResponseCode.FLUSH_DISK_TIMEOUT: "FLUSH_DISK_TIMEOUT",
    ResponseCode.FLUSH_SLAVE_TIMEOUT: "FLUSH_SLAVE_TIMEOUT",
    ResponseCode.SLAVE_NOT_AVAILABLE: "SLAVE_NOT_AVAILABLE",
}


@dataclass(frozen=True, slots=True)
class SendResult:
    """``status``: SEND_OK / FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE;
    ``msg_id``: the client's UNIQ_KEY; ``offset_msg_id``: the broker's (store host, port,
    commitlog offset); for a batch both are comma-joined, one per message, and
    ``queue_offset`` is the first message's."""

    status: str
    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    #: the broker group that stored it (a transaction ends there)
    broker_name: str = ""
    #: the address of that group's master the message was sent to (where a transaction ends)
    broker_addr: str = ""
    #: the broker already had the send's idempotence marker (:meth:`Producer.send_encoded_batch`):
    #: nothing was stored again
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class _Target:
    broker_name: str
    addr: str
    queue_id: int
    default_topic: bool  # sent through TBW102's route


class Producer(RemoteClient):
    """``Producer(group, namesrv)``; blocking methods, ``a``-prefixed coroutines, and
    :meth:`send_async` (a ``concurrent.futures.Future``)."""

    def __init__(
        self,
        group: str,
        namesrv: str = "127.0.0.1:9876",
        *,
        timeout_s: float = 3.0,
        limits: Limits | None = None,
        client_ip: bytes = b"\x7f\x00\x00\x01",
        clock: Clock | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        send_latency_fault_enable: bool = False,
        retry_times_when_send_failed: int = 2,
        latency_max_ms: Sequence[int] = LATENCY_MAX_MS,
        not_available_ms: Sequence[int] = NOT_AVAILABLE_MS,
        retry_another_broker_when_not_store_ok: bool = False,
    ) -> None:
        super().__init__(
            namesrv, timeout_s=timeout_s, limits=limits, clock=clock, access_key=access_key, secret_key=secret_key
        )
        if retry_times_when_send_failed < 0:
            raise ValueError(f"retry_times_when_send_failed must be >= 0, got {retry_times_when_send_failed}")
        self.group = group
        self._ids = UniqKeys(client_ip)
        self._rr = itertools.count()
        self.retry_times_when_send_failed = retry_times_when_send_failed
        #: ``retryAnotherBrokerWhenNotStoreOK``: a stored-but status (10, 11, 12) tries the next
        #: broker too; the last such result is answered if no attempt gets SEND_OK
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        #: the queue choice and the brokers to avoid (``sendLatencyFaultEnable``: ``fault.enabled``)
        self.fault = FaultStrategy(
            self.clock,
            enabled=send_latency_fault_enable,
            latency_max_ms=latency_max_ms,
            not_available_ms=not_available_ms,
        )

    # ---- routing -----------------------------------------------------------------------

    async def _publish_route(self, topic: str) -> tuple[TopicRouteData, bool]:
        """The topic's route, or ``TBW102``'s (then ``True``) when the name servers have none."""
        try:
            return await self._cached_route(topic), False
        except TopicNotFoundError:
            return await self._cached_route(AUTO_CREATE_TOPIC), True

    async def _target(self, topic: str, queue_id: int | None, broker_name: str | None) -> _Target:
        route, via_default = await self._publish_route(topic)
        queues = _write_queues(route, via_default)
        if broker_name is not None:
            queues = [q for q in queues if q[0] == broker_name]
        if queue_id is not None:
            queues = [q for q in queues if q[1] == queue_id]
        if not queues:
            raise NoRouteError(
                f"topic {topic!r}: no writable queue{'' if queue_id is None else f' {queue_id}'}"
                f"{'' if broker_name is None else f' on broker {broker_name!r}'} in its route"
            )
        name, qid = queues[next(self._rr) % len(queues)]
        return _Target(name, master_addr(route, name, topic), qid, via_default)

    def _header(self, topic: str, t: _Target, props: str, flag: int, batch: bool) -> dict[str, Any]:
        return SendMessageHeader(
            producer_group=self.group,
            topic=topic,
            default_topic=AUTO_CREATE_TOPIC,
            default_topic_queue_nums=DEFAULT_TOPIC_QUEUE_NUMS,
            queue_id=t.queue_id,
            sys_flag=0,
            born_timestamp=self.clock.wall_ms(),
            flag=flag,
            properties=props,
            reconsume_times=0,
            unit_mode=False,
            batch=batch,
            max_reconsume_times=None,
            broker_name=t.broker_name,
        ).to_ext(v2=True)

    async def _send_cmd(
        self, t: _Target, topic: str, cmd: RemotingCommand, uniq: str, timeout_s: float | None = None
    ) -> SendResult:
        try:
            res = await self.invoke(t.addr, cmd, timeout_s, ok=_STATUS.keys())
        except BrokerError as exc:
            if exc.code in (
                ResponseCode.TOPIC_NOT_EXIST,
                ResponseCode.NO_PERMISSION,
                ResponseCode.SERVICE_NOT_AVAILABLE,
            ):
                # the route may be stale: SERVICE_NOT_AVAILABLE is also what a slave answers a
                # send, e.g. an old master that came back as one while the cached route still
                # names it the master (a failover): asked again now, not after ROUTE_TTL_S
                self._routes.pop(topic, None)
            raise
        if t.default_topic:
            self._routes.pop(topic, None)  # the topic exists now: read its own route next time
        ext = res.ext_fields
        return SendResult(
            _STATUS[ResponseCode(res.code)],
            uniq,
            str(ext.get("msgId", "")),
            int(ext.get("queueId", t.queue_id)),
            int(ext.get("queueOffset", -1)),
            t.broker_name,
            t.addr,
            str(ext.get(DUPLICATE_FIELD, "")).lower() == "true",
        )

    # ---- single sends ------------------------------------------------------------------

    async def _send(
        self,
        topic: str,
        body: bytes,
        tags: str | None,
        keys: str | Iterable[str] | None,
        properties: Mapping[str, str] | None,
        queue_id: int | None,
        delay_level: int,
        flag: int,
        broker_name: str | None,
    ) -> SendResult:
        uniq = self._ids.next(self.clock.wall_ms())
        props = properties_string(
            message_properties(tags=tags, keys=keys, properties=properties, delay_level=delay_level, uniq_key=uniq)
        )
        data = bytes(body)

        def make(t: _Target) -> RemotingCommand:
            return RemotingCommand(
                RequestCode.SEND_MESSAGE_V2, ext_fields=self._header(topic, t, props, flag, False), body=data
            )

        return await self._dispatch(topic, queue_id, broker_name, make, uniq)

    async def _dispatch(
        self,
        topic: str,
        queue_id: int | None,
        broker_name: str | None,
        make: Callable[[_Target], RemotingCommand],
        uniq: str,
    ) -> SendResult:
        if queue_id is not None or broker_name is not None:  # send(msg, mq): once, to that queue
            t = await self._target(topic, queue_id, broker_name)
            return await self._send_cmd(t, topic, make(t), uniq)
        return await self._send_default(topic, make, uniq)

    async def _send_default(self, topic: str, make: Callable[[_Target], RemotingCommand], uniq: str) -> SendResult:
        """``sendDefaultImpl`` (module docstring): attempts on queues chosen by ``self.fault``."""
        route, via_default = await self._publish_route(topic)
        queues = publish_queues(topic, route, DEFAULT_TOPIC_QUEUE_NUMS if via_default else None)
        if not queues:
            raise NoRouteError(f"topic {topic!r}: no writable queue in its route")
        loop = asyncio.get_running_loop()
        first = loop.time()
        last_broker: str | None = None
        error: BaseException | None = None
        stored: SendResult | None = None  # a stored-but answer, kept while other brokers are tried
        for _ in range(1 + self.retry_times_when_send_failed):
            q = self.fault.select(queues, last_broker)
            last_broker = q.broker_name
            began = loop.time()
            if began - first >= self.timeout_s and error is not None:
                break  # Java: "sendDefaultImpl call timeout"; the attempts' error is the answer
            try:
                t = _Target(q.broker_name, master_addr(route, q.broker_name, topic), q.queue_id, via_default)
                result = await self._send_cmd(t, topic, make(t), uniq, self.timeout_s - (began - first))
            except BrokerError as exc:
                self.fault.update(q.broker_name, _ms(loop.time() - began), True)
                if exc.code not in RETRY_CODES:
                    raise
                error = exc
                route, queues = await self._fresh_queues(topic, route, queues, via_default)
                continue
            except _LINK_ERRORS as exc:
                self.fault.update(q.broker_name, _ms(loop.time() - began), True)
                self._stale(topic)  # the next send asks the route again (a group may have lost its master)
                error = exc
                continue
            self.fault.update(q.broker_name, _ms(loop.time() - began), False)
            if result.status != "SEND_OK" and self.retry_another_broker_when_not_store_ok:
                stored = result
                continue
            return result
        if stored is not None:
            return stored
        assert error is not None
        raise error

    async def _fresh_queues(
        self, topic: str, route: TopicRouteData, queues: list[QueueRef], via_default: bool
    ) -> tuple[TopicRouteData, list[QueueRef]]:
        """After a refusal that dropped the cached route (stale), the route asked again; the
        old one kept if the name servers cannot answer now."""
        if via_default or topic in self._routes:
            return route, queues
        try:
            fresh = await self._cached_route(topic)
        except (BrokerError, *_LINK_ERRORS):
            return route, queues
        return fresh, publish_queues(topic, fresh) or queues

    def send(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        queue_id: int | None = None,
        delay_level: int = 0,
        flag: int = 0,
        broker_name: str | None = None,
    ) -> SendResult:
        """Send one message (code 310) and wait for the broker's answer.

        Raises :class:`BrokerError` (a failure code), :class:`TopicNotFoundError` /
        :class:`NoRouteError` (no route), the transport's ``RemotingTimeoutError`` /
        ``ConnectionLostError``, ``ValueError`` (a property holding \\x01 or \\x02)."""
        return call(self._send(topic, body, tags, keys, properties, queue_id, delay_level, flag, broker_name))

    def send_async(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        queue_id: int | None = None,
        delay_level: int = 0,
        flag: int = 0,
        broker_name: str | None = None,
    ) -> concurrent.futures.Future[SendResult]:
        """:meth:`send` without waiting: a ``concurrent.futures.Future`` of its result (or its
        error). Sends made in a burst are started together on the clients' loop."""
        return submit(self._send(topic, body, tags, keys, properties, queue_id, delay_level, flag, broker_name))

    async def asend(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        queue_id: int | None = None,
        delay_level: int = 0,
        flag: int = 0,
        broker_name: str | None = None,
    ) -> SendResult:
        return await self._send(topic, body, tags, keys, properties, queue_id, delay_level, flag, broker_name)

    # ---- batches -----------------------------------------------------------------------

    async def _send_batch(self, topic: str, messages: Any, queue_id: int | None, broker_name: str | None) -> SendResult:
        table = _batch_table(messages)
        n = table.num_rows
        if n == 0:
            raise ValueError("send_batch: no message")
        uniq = self._ids.many(n, self.clock.wall_ms())
        props = _batch_properties(table, pa.array(uniq, pa.string()))
        flags = table.column("flag").to_numpy() if "flag" in table.column_names else None
        body = encode_message_batch(table.column("body"), props, flags)
        wait = properties_string({"WAIT": "true"})

        def make(t: _Target) -> RemotingCommand:
            return RemotingCommand(
                RequestCode.SEND_BATCH_MESSAGE, ext_fields=self._header(topic, t, wait, 0, True), body=body
            )

        return await self._dispatch(topic, queue_id, broker_name, make, ",".join(uniq))

    def send_batch(
        self, topic: str, messages: Any, queue_id: int | None = None, *, broker_name: str | None = None
    ) -> SendResult:
        """Send messages to one queue in one request (code 320; the body as
        ``MessageDecoder.encodeMessages``: :func:`rmqlog.encode_message_batch`).

        ``messages``: a ``pyarrow.Table`` (or dict of columns) with ``body`` (binary) and
        optional ``tags`` (string), ``keys`` (string, space-separated), ``flag`` (int32); or a
        list of bodies. Raises as :meth:`send`, and ``ValueError`` for an empty batch."""
        return call(self._send_batch(topic, messages, queue_id, broker_name))

    async def asend_batch(
        self, topic: str, messages: Any, queue_id: int | None = None, *, broker_name: str | None = None
    ) -> SendResult:
        return await self._send_batch(topic, messages, queue_id, broker_name)

    # ---- pre-encoded batches to a fixed queue (the Spark sink) ----------------------------

    async def asend_encoded_batch(
        self,
        topic: str,
        body: bytes,
        *,
        broker_name: str,
        queue_id: int,
        addr: str | None = None,
        via_default: bool = False,
        marker: tuple[str, int] | None = None,
        master_wait_s: float = 0.0,
    ) -> SendResult:
        """:meth:`send_encoded_batch` as a coroutine."""
        if addr is None:
            addr = await self._group_master(AUTO_CREATE_TOPIC if via_default else topic, broker_name, cached=True)
        ext = self._header(
            topic, _Target(broker_name, "", queue_id, via_default), properties_string({"WAIT": "true"}), 0, True
        )
        if marker is not None:
            ext.update(IdempotenceMarker(*marker).to_ext())
        cmd = RemotingCommand(RequestCode.SEND_BATCH_MESSAGE, ext_fields=ext, body=body)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + master_wait_s
        told = False
        for attempt in itertools.count():
            if addr:
                try:
                    return await self._send_cmd(_Target(broker_name, addr, queue_id, via_default), topic, cmd, "")
                except BrokerError as exc:
                    if (
                        exc.code not in (ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE)
                        or loop.time() >= deadline
                    ):
                        raise
                    if exc.code == ResponseCode.SYSTEM_BUSY:
                        # back-pressure (the broker's queue of sends is full): asked again a moment later
                        await asyncio.sleep(min(BUSY_PAUSE_S * 2 ** min(attempt, 4), MASTER_WAIT_PAUSE_S))
                        continue
                    # SERVICE_NOT_AVAILABLE stored nothing (a broker stopping, or a slave now: an
                    # old master back as one): the group's master is looked up again, as below
                except OSError:  # the transport's errors (refused, lost, timed out) are OSErrors
                    if loop.time() >= deadline:
                        raise
            elif loop.time() >= deadline:
                raise NoRouteError(
                    f"topic {topic!r}: broker group {broker_name!r} has had no master for {master_wait_s:g} s"
                )
            if not told:
                told = True
                log.warning(
                    "producer %r (writer %r): broker group %r (topic %r) has no master in reach; waiting up "
                    "to %g s for one",
                    self.group,
                    marker[0] if marker else "",
                    broker_name,
                    topic,
                    master_wait_s,
                )
            if attempt:
                await asyncio.sleep(MASTER_WAIT_PAUSE_S)  # waiting for a master to come back, or a new one
            with contextlib.suppress(OSError, TopicNotFoundError, BrokerError):
                addr = await self._group_master(
                    AUTO_CREATE_TOPIC if via_default else topic, broker_name, cached=False, keep=addr
                )
        raise AssertionError("unreachable")  # (itertools.count never ends)

    async def _group_master(self, topic: str, broker_name: str, *, cached: bool, keep: str = "") -> str:
        """The master address of group ``broker_name`` in ``topic``'s route (cached, or asked
        afresh), ``""`` when the group has none; ``keep`` when the route lacks the group
        altogether (no broker of it registered: a slave restarting as master)."""
        route = await (self._cached_route(topic) if cached else self.aroute(topic))
        group = next((b for b in route.broker_datas if b.broker_name == broker_name), None)
        return keep if group is None else group.master_addr() or ""

    def send_encoded_batch(
        self,
        topic: str,
        body: bytes,
        *,
        broker_name: str,
        queue_id: int,
        addr: str | None = None,
        via_default: bool = False,
        marker: tuple[str, int] | None = None,
        master_wait_s: float = 0.0,
    ) -> SendResult:
        """Send a SEND_BATCH_MESSAGE (320) body already encoded (:func:`encode_messages`, each
        message's properties as the caller made them, its ``UNIQ_KEY`` included) to queue
        ``queue_id`` of broker group ``broker_name``, and only there: the caller's routing
        stands (a replayed batch must go where its first attempt went), so no other queue is
        tried. ``addr``: the group's master as the route the caller routed over named it
        (``""``: it had none), else looked up in the cached route; ``via_default``: the topic
        is new, routed over ``TBW102`` (``defaultTopic``).

        ``marker`` ``(writer, sequence)``: our brokers' idempotence marker (request fields
        ``rmqlogWriter``/``rmqlogSequence``, :class:`rmqnet.remoting.headers.IdempotenceMarker`):
        a sequence the broker's store has for the writer stores nothing and is answered as a
        duplicate (``SendResult.duplicate``); Apache RocketMQ's brokers ignore the fields.

        The wait for a master (RocketMQ's ``retryTimesWhenSendFailed``, bounded by time rather
        than a count): a master out of reach (a link error, or SERVICE_NOT_AVAILABLE: stopping,
        or a slave now) or a group without one (a failover) is waited for up to
        ``master_wait_s``: the route asked again every :data:`MASTER_WAIT_PAUSE_S` and the batch
        sent to the master it names (a group missing from the route keeps its last address),
        with a warning when the wait starts; SYSTEM_BUSY is asked again after a short backoff.
        Then :class:`NoRouteError` (no master) or the last link error; any other refusal at
        once as :class:`BrokerError`. A stored-but status (10, 11, 12) is the result."""
        return call(
            self.asend_encoded_batch(
                topic,
                body,
                broker_name=broker_name,
                queue_id=queue_id,
                addr=addr,
                via_default=via_default,
                marker=marker,
                master_wait_s=master_wait_s,
            )
        )


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _write_queues(route: TopicRouteData, via_default: bool) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for q in route.queue_datas:
        if q.perm & PERM_WRITE:
            nums = min(q.write_queue_nums, DEFAULT_TOPIC_QUEUE_NUMS) if via_default else q.write_queue_nums
            out.extend((q.broker_name, i) for i in range(nums))
    return out


def _batch_table(messages: Any) -> pa.Table:
    if isinstance(messages, pa.Table):
        table = messages
    elif isinstance(messages, Mapping):
        table = pa.table(dict(messages))
    else:
        table = pa.table({"body": pa.array(list(messages), pa.binary())})
    if "body" not in table.column_names:
        raise ValueError("send_batch: the messages have no 'body' column")
    return table


def _piece(name: str, column: pa.ChunkedArray | None, n: int) -> pa.Array:
    """``name\\x01value\\x02`` per row where the column is set and not empty, else ``""``."""
    if column is None:
        return pa.repeat(pa.scalar("", pa.string()), n)
    col = column.combine_chunks().cast(pa.string())
    col = pc.if_else(pc.equal(col, ""), pa.scalar(None, pa.string()), col)
    joined = pc.binary_join_element_wise(name + NAME_VALUE_SEP, col, PROPERTY_SEP, "")
    return joined.fill_null("")


def _batch_properties(table: pa.Table, uniq: pa.Array) -> pa.Array:
    n = table.num_rows
    cols = table.column_names
    for c in ("tags", "keys"):
        if c in cols:
            text = pc.fill_null(table.column(c).combine_chunks().cast(pa.string()), "")
            bad = pc.or_(pc.match_substring(text, NAME_VALUE_SEP), pc.match_substring(text, PROPERTY_SEP))
            if pc.any(bad).as_py():
                row = int(np.argmax(bad.to_numpy(zero_copy_only=False)))
                raise ValueError(f"send_batch: message {row}: {c} may not hold \\x01 or \\x02")
    parts = [
        _piece("TAGS", table.column("tags") if "tags" in cols else None, n),
        _piece("KEYS", table.column("keys") if "keys" in cols else None, n),
        pa.repeat(pa.scalar("WAIT" + NAME_VALUE_SEP + "true" + PROPERTY_SEP, pa.string()), n),
        pc.binary_join_element_wise("UNIQ_KEY" + NAME_VALUE_SEP, uniq, PROPERTY_SEP, ""),
    ]
    return pc.binary_join_element_wise(*parts, "")
