"""Sends: SEND_MESSAGE (10, and the C++ client's ``batch=1`` form), SEND_MESSAGE_V2 (310) and
SEND_BATCH_MESSAGE (320), RocketMQ 4.9.8's ``SendMessageProcessor``.

Per request (a Python path, once per request): the header is read
(:class:`rmqnet.remoting.SendMessageHeader`), then RocketMQ's ``msgCheck``: the broker's write
permission for ordered topics, the topic's name (``validateTopic``: SYSTEM_ERROR), topics no one
may send to (NO_PERMISSION), the topic's config (created from ``defaultTopic`` when that allows
it, ``%RETRY%`` topics created; else TOPIC_NOT_EXIST with RocketMQ's remark), the topic's write
permission (NO_PERMISSION), the queue id (below ``max(write, read)`` queues, else SYSTEM_ERROR
with RocketMQ's remark; a negative one picks a random write queue), the body and properties
sizes (MESSAGE_ILLEGAL). A single message's properties lose ``WAIT`` and gain ``CLUSTER`` (as
RocketMQ stores them); a batch's messages keep theirs and get the request's properties
appended (``MessageExtBatchEncoder``). ``%RETRY%`` sends past their ``maxReconsumeTimes`` go to
``%DLQ%group``. A single message with ``TRAN_MSG=true`` is a transaction's half message: its row
goes to ``RMQ_SYS_TRANS_HALF_TOPIC`` (:meth:`rmqnet.broker.transactions.TransactionService.half`)
and is put in a run of half messages of its own (the store's ``system`` put).

Then the store (fast by construction): every send accepted while the event loop runs is put in
a list, and one callback scheduled with ``loop.call_soon`` appends them all with ONE
``put_wire`` call (single sends from many frames and connections, and the decoded rows of
batches, in one table); each request is answered from its rows of the result. A batch body is
decoded by the store's vectorized decoder (``rmqlog.decode_message_batch``), never message by
message. At most ``send_queue_capacity`` messages wait; more are answered SYSTEM_BUSY.

Under ``SYNC_FLUSH`` the reply follows the group commit: after a put, one flush of the store
runs in a worker thread for everything put so far (sends put while it runs wait for the next
one), and a send whose flush has not finished ``sync_flush_timeout`` ms after its put is
answered FLUSH_DISK_TIMEOUT (its msgId and offsets included, as RocketMQ does: the message is
stored, only its flush is late). The event loop never waits for a disk.

Reply extFields: ``msgId`` (RocketMQ's offset msgId; a batch's comma-joined), ``queueId``,
``queueOffset`` (a batch's first), ``MSG_REGION``, ``TRACE_ON``. Store errors are mapped by
:mod:`rmqnet.broker.codes`.

A send with the idempotence marker (``rmqlogWriter``/``rmqlogSequence``,
:class:`rmqnet.remoting.headers.IdempotenceMarker`; our extension, the Spark sink's) is put on
its own (the marker is per put) with the store's idempotent put; a replay stores nothing and
is answered SUCCESS with ``rmqlogDuplicate=true``: with the original answer's fields when it
replays the writer's last send stored since this broker started (the answers of the last
:data:`MARKED_ANSWERS` writers are kept), else ``msgId`` empty and ``queueOffset`` -1.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import rmqlog
from rmqlog import InvalidMessageError, TopicConfig, WireMessage
from rmqlog.paths import TOPIC_MAX_BYTES

from ..remoting import RemotingCommand, RequestCode, ResponseCode, SendMessageHeader
from ..remoting.headers import DUPLICATE_FIELD, IdempotenceMarker
from ..remoting.names import (
    DLQ_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    PERM_WRITE,
    PROPERTY_TRAN_MSG,
    RETRY_PREFIX,
    property_mark,
)
from ..transport import complete, flush_completed
from .codes import STOPPING_REMARK, SYSTEM_BUSY_REMARK, illegal_remark, store_error_code
from .metrics import NORMAL, message_type
from .peer import Peer
from .send_rows import (
    WIRE_SCHEMA,
    concat_rows,
    decode_batch,
    format_properties,
    parse_properties,
    put_wire,
    repeat_value,
    waits_for_store,
)
from .topics import topic_text
from .transactions import HALF_TOPIC

if TYPE_CHECKING:
    from .broker import Broker
    from .config import BrokerConfig

log = logging.getLogger(__name__)

#: writers whose last idempotent send's answer is kept (memory: a few hundred bytes each)
MARKED_ANSWERS = 4096
#: RocketMQ's largest properties string (a Java short)
MAX_PROPERTIES = 32767
#: RocketMQ's ``maxReconsumeTimes`` default (``SubscriptionGroupConfig.retryMaxTimes``)
DEFAULT_MAX_RECONSUME = 16
_TRAN_MARK = property_mark(PROPERTY_TRAN_MSG)
_TOPIC_CHARS = frozenset("%|abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(slots=True)
class _Send:
    """One accepted request waiting for the store: its rows, where its reply goes."""

    request: RemotingCommand
    rows: pa.Table | tuple[Any, ...]  # a batch's table, or one message's column values
    count: int
    queue_id: int
    future: asyncio.Future[RemotingCommand | None]
    extra: dict[str, str]
    marker: IdempotenceMarker | None = None  # put alone, idempotently (rmqlogWriter/rmqlogSequence)
    reply: RemotingCommand | None = None  # the answer once put (SYNC_FLUSH: sent after the flush)
    wait: bool = True  # the message's WAIT property (SYNC_MASTER waits for a slave only then)
    end: int = 0  # the store's published tail right after its put (what a slave must hold)
    half: bool = False  # a transaction's half message: put on its own run (the store's system put)
    counted: tuple[str, str, int] = ("", "", 0)  # for /metrics once stored: topic as sent, message type, body bytes


class SendService:
    """The send path of one broker (see the module docstring); ``broker.sender``."""

    @property
    def config(self) -> BrokerConfig:
        """The broker's config now (UPDATE_BROKER_CONFIG may replace it: rmqnet.broker.admin_config)."""
        return self.broker.config

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.store = broker.store
        self.capacity = broker.config.send_queue_capacity
        self.sync = broker.config.sync_flush
        self._pending: list[_Send] = []
        self._pending_count = 0
        self._scheduled = False
        self._unflushed: list[_Send] = []  # put, answer waits for a flush (SYNC_FLUSH)
        self._undispatched: list[rmqlog.PutRows] = []  # put, dispatched once their answers are out
        self._flushing = False
        self._rng = random.Random()
        #: messages stored since start, and that count at the start of today and of yesterday
        #: (GET_BROKER_RUNTIME_INFO's msgPutTotalTodayNow, ...TodayMorning, ...YesterdayMorning)
        self.put_total = 0
        self.put_total_today_morning = 0
        self.put_total_yesterday_morning = 0
        self._day = self._day_of(broker.clock.wall_ms())
        #: writer -> (sequence, answer fields) of its last idempotent send stored here: a replay
        #: of that send (a reply lost on the way) gets the original answer
        self._last_marked: OrderedDict[str, tuple[int, dict[str, str]]] = OrderedDict()

    # ------------------------------------------------------------ handlers
    def handle(
        self, broker: Broker, peer: Peer, req: RemotingCommand
    ) -> RemotingCommand | asyncio.Future[RemotingCommand | None]:
        """SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE: an immediate refusal, or a
        future of the reply."""
        v2 = req.code != RequestCode.SEND_MESSAGE
        header = SendMessageHeader.read(req.ext_fields, v2=v2)  # a FieldError: SYSTEM_ERROR (dispatch)
        marker = IdempotenceMarker.read(req.ext_fields)
        extra = {"MSG_REGION": self.config.region_id, "TRACE_ON": "true" if self.config.trace_on else "false"}
        batch = req.code == RequestCode.SEND_BATCH_MESSAGE or header.batch
        refusal = self._check(req, header, peer, extra)
        if isinstance(refusal, RemotingCommand):
            return refusal
        tc = refusal
        topic, queue_id = header.topic, header.queue_id
        if queue_id < 0:
            queue_id = self._rng.randrange(max(1, tc.write_queue_nums))
        body = req.body_bytes()
        reconsume = header.reconsume_times
        if batch:
            built = self._batch_rows(req, header, topic, queue_id, body, peer.remote, extra)
        else:
            built = self._single_row(req, header, topic, queue_id, body, peer.remote, reconsume, extra)
        if isinstance(built, RemotingCommand):
            return built
        rows, count, topic, queue_id = built
        half = topic == HALF_TOPIC
        # what /metrics counts once the send is stored (rmqnet.broker.metrics): its topic as sent,
        # RocketMQ 5's message type, the body bytes (a batch's in one Arrow call)
        if isinstance(rows, pa.Table):
            nbytes = int(pc.sum(pc.binary_length(rows.column("body"))).as_py() or 0)
            kind = NORMAL
        else:
            nbytes, kind = len(body), message_type(header.properties, half)
        return self._submit(
            req,
            rows,
            count,
            queue_id,
            extra,
            waits_for_store(header.properties),
            marker,
            half=half,
            counted=(header.topic, kind, nbytes),
        )

    def _check(
        self, req: RemotingCommand, h: SendMessageHeader, peer: Peer, extra: dict[str, str]
    ) -> RemotingCommand | TopicConfig:
        """RocketMQ's ``preSend`` + ``msgCheck``: the topic's config, or the refusal."""
        cfg, topics = self.config, self.broker.topics
        if self.broker.stopping:
            return req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, STOPPING_REMARK, extra)
        refused = self.broker.replication.refuse_send(req, extra)
        if refused is not None:  # a SLAVE (DefaultMessageStore.checkStoreStatus)
            return refused
        if not cfg.broker_permission & PERM_WRITE and topics.is_order_topic(h.topic):
            return req.reply(
                ResponseCode.NO_PERMISSION, f"the broker[{cfg.broker_ip1}] sending message is forbidden", extra
            )
        topic = h.topic
        if not topic.strip():
            return req.reply(ResponseCode.SYSTEM_ERROR, "The specified topic is blank.", extra)
        if not set(topic) <= _TOPIC_CHARS:
            return req.reply(
                ResponseCode.SYSTEM_ERROR,
                "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
                extra,
            )
        if len(topic) > TOPIC_MAX_BYTES:
            return req.reply(ResponseCode.SYSTEM_ERROR, "The specified topic is longer than topic max length.", extra)
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return req.reply(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.", extra)
        tc = topics.get(topic)
        if tc is None:
            sys_flag = 0
            if h.unit_mode:  # TopicSysFlag.buildSysFlag: unit 1, unit-sub 2
                sys_flag = 2 if topic.startswith(RETRY_PREFIX) else 1
            log.warning("the topic %s does not exist, producer %s", topic, peer.remote)
            tc = topics.create_in_send(topic, h.default_topic, h.default_topic_queue_nums, sys_flag)
            if tc is None and topic.startswith(RETRY_PREFIX):
                tc = topics.create_retry(topic[len(RETRY_PREFIX) :])
            if tc is None:
                return req.reply(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{topic}] not exist, apply first please! http://rocketmq.apache.org/docs/faq/",
                    extra,
                )
        if not tc.perm & PERM_WRITE:
            return req.reply(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden", extra)
        if h.queue_id >= max(tc.write_queue_nums, tc.read_queue_nums):
            return req.reply(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{h.queue_id}] is illegal, {topic_text(tc)} Producer: {peer.remote}",
                extra,
            )
        return tc

    def _illegal(self, req: RemotingCommand, detail: str, extra: dict[str, str]) -> RemotingCommand:
        return req.reply(ResponseCode.MESSAGE_ILLEGAL, illegal_remark(self.config.max_message_size, detail), extra)

    def _single_row(
        self,
        req: RemotingCommand,
        h: SendMessageHeader,
        topic: str,
        queue_id: int,
        body: bytes,
        born_host: str,
        reconsume: int,
        extra: dict[str, str],
    ) -> Any:
        if len(body) > self.config.max_message_size:
            return self._illegal(req, f"body of {len(body)} bytes", extra)
        text = h.properties
        half = _TRAN_MARK in text and parse_properties(text).get(PROPERTY_TRAN_MSG, "").lower() == "true"
        sys_flag = h.sys_flag
        if half or topic.startswith(RETRY_PREFIX):
            # the rare sends the broker rewrites (a half message, a retry past its limit): their
            # properties parsed here; every other send's go to the store as sent, which drops
            # WAIT and sets CLUSTER (the put's ``cluster``) in its one parse
            props = parse_properties(text)
            if half:
                if self.config.reject_transaction_message:  # RocketMQ's refusal (rejectTransactionMessage)
                    return req.reply(
                        ResponseCode.NO_PERMISSION,
                        f"the broker[{self.config.broker_ip1}] sending transaction message is forbidden",
                        extra,
                    )
                refused = self.broker.transactions.half(props, topic, queue_id)
                if refused is not None:
                    return self._illegal(req, refused, extra)
                # parseHalfMessageInner: to the half topic's queue 0, the transaction bits cleared
                topic, sys_flag = HALF_TOPIC, sys_flag & ~0xC
            else:
                limit = h.max_reconsume_times if h.max_reconsume_times is not None else DEFAULT_MAX_RECONSUME
                if reconsume >= limit:  # RocketMQ's handleRetryAndDLQ: to the group's dead letters
                    group = topic[len(RETRY_PREFIX) :]
                    tc = self.broker.topics.create_dlq(group)
                    topic, queue_id = tc.topic_name, 0
                    props.pop("DELAY", None)
            text = format_properties(props)
        if len(text) > MAX_PROPERTIES and len(text.encode()) > MAX_PROPERTIES:
            return self._illegal(req, f"properties of {len(text.encode())} bytes", extra)
        if half:  # the reply names the queue the producer chose (Java's responseHeader.setQueueId)
            return (topic, 0, body, h.flag, sys_flag, h.born_timestamp, born_host, text, reconsume), 1, topic, queue_id
        self._ensure_stored(topic)
        row = (topic, queue_id, body, h.flag, sys_flag, h.born_timestamp, born_host, text, reconsume)
        return row, 1, topic, queue_id

    def _batch_rows(
        self,
        req: RemotingCommand,
        h: SendMessageHeader,
        topic: str,
        queue_id: int,
        body: bytes,
        born_host: str,
        extra: dict[str, str],
    ) -> Any:
        if topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX):
            # RocketMQ's checkMessages: "retry group topic is not supported in batch"
            return self._illegal(req, "a batch may not be sent to a retry or dead-letter topic", extra)
        if len(body) > self.config.max_message_size:
            return self._illegal(req, f"batch body of {len(body)} bytes", extra)
        props = parse_properties(h.properties)
        if props.get("TRAN_MSG", "").lower() == "true":
            return self._illegal(req, "a batch may not hold transactional messages", extra)
        props["CLUSTER"] = self.config.broker_cluster_name
        batch_props = format_properties(props)
        try:  # RocketMQ's MessageExtBatchEncoder: the request's properties appended to each message's
            decoded = decode_batch(body, batch_props)
        except InvalidMessageError as exc:
            return self._illegal(req, f"batch body: {exc}", extra)
        n = decoded.num_rows
        merged = decoded.column("properties")
        zeros = np.zeros(n, dtype=np.int32)
        # body and flag are binary and int32 already (decode_message_batch's schema): no cast
        table = pa.Table.from_arrays(
            [
                repeat_value(topic, pa.string(), n),
                pa.array(zeros + queue_id),
                decoded.column("body"),
                decoded.column("flag"),
                pa.array(zeros + h.sys_flag),
                pa.array(np.full(n, h.born_timestamp, dtype=np.int64)),
                repeat_value(born_host, pa.string(), n),
                merged,
                pa.array(zeros + h.reconsume_times),
            ],
            schema=WIRE_SCHEMA,
        )
        self._ensure_stored(topic)
        return table, n, topic, queue_id

    def _ensure_stored(self, topic: str) -> None:
        tc = self.broker.topics.get(topic)
        if tc is not None:
            self.broker.topics.ensure_stored(tc)

    # -------------------------------------------------------------- batching
    def _submit(
        self,
        req: RemotingCommand,
        rows: Any,
        count: int,
        queue_id: int,
        extra: dict[str, str],
        wait: bool = True,
        marker: IdempotenceMarker | None = None,
        half: bool = False,
        counted: tuple[str, str, int] = ("", "", 0),
    ) -> RemotingCommand | asyncio.Future[RemotingCommand | None]:
        if self._pending_count + count > self.capacity and self._pending:
            return req.reply(ResponseCode.SYSTEM_BUSY, SYSTEM_BUSY_REMARK, extra)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand | None] = loop.create_future()
        self._pending.append(
            _Send(req, rows, count, queue_id, fut, extra, marker, wait=wait, half=half, counted=counted)
        )
        self._pending_count += count
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._put_pending)
        return fut

    def _put_pending(self) -> None:
        """Append everything waiting with one store call, answer (or queue for the flush)."""
        self._scheduled = False
        sends, self._pending, self._pending_count = self._pending, [], 0
        run: list[_Send] = []
        for s in sends:  # a send with an idempotence marker is its own put (the marker is per put)
            if s.marker is None and (not run or run[0].half == s.half):  # half messages: runs of their own
                run.append(s)
                continue
            if s.marker is None:
                self._put(run)
                run = [s]
                continue
            if run:
                self._put(run)
                run = []
            self._put([s])
        if run:
            self._put(run)
        flush_completed()  # the answers first, one write per connection ...
        dispatched, self._undispatched = self._undispatched, []
        for rows in dispatched:  # ... then the puts' units and index entries, which wake held pulls
            try:
                self.store.wire.dispatch_put(rows)
            except Exception:  # noqa: BLE001 - the put is stored and answered: the dispatcher takes it
                log.exception("dispatching a put failed; the store's dispatcher takes it")
        if dispatched:
            flush_completed()  # the held pulls' answers

    def _put(self, sends: list[_Send]) -> None:
        marker = sends[0].marker if len(sends) == 1 else None
        cluster = self.config.broker_cluster_name
        try:
            if all(not isinstance(s.rows, pa.Table) for s in sends):
                # single sends (the usual case): the store's put of a few messages, with no
                # table built (:meth:`rmqlog.access.wire.WireCalls.put_messages`)
                rows = self.store.wire.put_messages(
                    [WireMessage(*s.rows) for s in sends],
                    cluster=cluster,
                    system=sends[0].half,
                    writer=None if marker is None else marker.writer,
                    sequence=None if marker is None else marker.sequence,
                    wait_flush=False,
                    defer_dispatch=True,
                )
                self._undispatched.append(rows)
                duplicate, msg_ids, queue_offsets, end = rows.duplicate, rows.msg_ids, rows.queue_offsets, rows.end
            else:
                # a batch's messages keep the request's properties, WAIT included, with CLUSTER
                # set by _batch_rows (Java's MessageExtBatchEncoder): no ``cluster`` for the
                # store to apply; single sends put with them get WAIT dropped and CLUSTER here
                result = put_wire(
                    self.store, concat_rows([s.rows for s in sends], cluster), marker, system=sends[0].half
                )
                duplicate = marker is not None and result.num_rows == 0
                msg_ids = result.column("msgId").to_pylist()
                queue_offsets = result.column("queueOffset").to_pylist()
                end = 0
        except InvalidMessageError as exc:
            if len(sends) > 1:  # one bad message must not fail the others put with it
                for s in sends:
                    self._put([s])
                return
            self._fail(sends, exc)
            return
        except Exception as exc:  # noqa: BLE001 - mapped (store errors, OSError) or re-raised into the futures
            self._fail(sends, exc)
            return
        if duplicate:  # a replay: stored before, nothing now
            s = sends[0]
            assert marker is not None
            last = self._last_marked.get(marker.writer)
            if last is not None and last[0] == marker.sequence:  # the writer's last send: its answer
                fields = {**last[1], DUPLICATE_FIELD: "true"}
            else:
                fields = {
                    "msgId": "",
                    "queueId": str(s.queue_id),
                    "queueOffset": "-1",
                    DUPLICATE_FIELD: "true",
                    **s.extra,
                }
            s.reply = s.request.reply(ResponseCode.SUCCESS, None, fields)
            sends = [s]  # answered as a put is (below): after the flush, once a slave holds the tail
        else:
            self._count(len(msg_ids))
        replication = self.broker.replication
        gate_end = 0
        replication.appended()  # the HA writers send it now
        if replication.sync_master:
            # what a slave must hold: the put's end (a replay: the tail now, as the first
            # send of its rows may have been answered FLUSH_SLAVE_TIMEOUT)
            gate_end = end if end and not duplicate else self.store.published_tail()
        end = gate_end
        if duplicate:
            sends[0].end = end
            self._settle(sends)
            return
        row = 0
        on_send = self.broker.metrics.on_send
        for s in sends:
            on_send(s.counted[0], s.counted[1], s.count, s.counted[2])
            ids = msg_ids[row] if s.count == 1 else ",".join(msg_ids[row : row + s.count])
            fields = {"msgId": ids, "queueId": str(s.queue_id), "queueOffset": str(queue_offsets[row]), **s.extra}
            s.reply = s.request.reply(ResponseCode.SUCCESS, None, fields)
            s.end = end
            if marker is not None:
                self._remember(marker, fields)
            row += s.count
        self._settle(sends)

    def _settle(self, sends: list[_Send]) -> None:
        """Answer stored sends: after the group commit under SYNC_FLUSH, else now (and under
        SYNC_MASTER once a slave holds them: :meth:`_answer`)."""
        if self.sync:
            self._unflushed.extend(sends)
            self._start_flush()
        else:
            for s in sends:
                self._answer(s)

    def _answer(self, s: _Send) -> None:
        """Resolve a stored send with its reply; under SYNC_MASTER once a slave holds it
        (:meth:`rmqnet.broker.replication.Replication.gate`)."""
        replication = self.broker.replication
        if s.reply is None or not s.end or not s.wait or not replication.sync_master:
            _resolve(s, s.reply)
            return
        gated = replication.gate(s.reply, s.end)
        if isinstance(gated, RemotingCommand):
            _resolve(s, gated)
        else:
            gated.add_done_callback(
                lambda f: _resolve(s, f.result() if not f.cancelled() and f.exception() is None else s.reply)
            )

    def _fail(self, sends: list[_Send], exc: Exception) -> None:
        try:
            code, remark = store_error_code(exc, self.config.max_message_size)
        except Exception as bug:  # not a store error: every waiting request learns of it
            log.exception("put failed")
            for s in sends:
                if not s.future.done():
                    s.future.set_exception(bug)
            return
        if code == ResponseCode.SERVICE_NOT_AVAILABLE:
            log.warning("put refused: %s", remark)
        for s in sends:
            _resolve(s, s.request.reply(code, remark, s.extra))

    def _remember(self, marker: IdempotenceMarker, fields: dict[str, str]) -> None:
        self._last_marked[marker.writer] = (marker.sequence, fields)
        self._last_marked.move_to_end(marker.writer)
        while len(self._last_marked) > MARKED_ANSWERS:
            self._last_marked.popitem(last=False)

    # ----------------------------------------------------------- group commit
    def _start_flush(self) -> None:
        if self._flushing or not self._unflushed:
            return
        self._flushing = True
        round_, self._unflushed = self._unflushed, []
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.config.sync_flush_timeout / 1000, self._flush_late, round_)
        task = loop.run_in_executor(None, self._group_commit)
        task.add_done_callback(lambda f: self._flushed(f, round_, timer))

    def _group_commit(self) -> int:
        """One sync covering every put so far (a worker thread: the loop never waits for a disk)."""
        return self.store.wire.flush_to(self.store.published_tail())

    def _flush_late(self, round_: list[_Send]) -> None:
        for s in round_:
            if not s.future.done() and s.reply is not None:
                late = s.request.reply(ResponseCode.FLUSH_DISK_TIMEOUT, None, dict(s.reply.ext_fields))
                _resolve(s, late)

    def _flushed(self, fut: asyncio.Future[Any], round_: list[_Send], timer: asyncio.TimerHandle) -> None:
        timer.cancel()
        self._flushing = False
        exc = fut.exception()
        for s in round_:
            if exc is None:
                self._answer(s)
            elif s.reply is not None:  # stored, but not known to be on disk: never SEND_OK
                _resolve(
                    s,
                    s.request.reply(
                        ResponseCode.FLUSH_DISK_TIMEOUT,
                        f"flush failed: {type(exc).__name__}: {exc}",
                        dict(s.reply.ext_fields),
                    ),
                )
        if exc is not None:
            log.error("group commit failed: %s", exc)
        self._start_flush()

    # ------------------------------------------------------------ statistics
    @staticmethod
    def _day_of(ms: int) -> int:
        return ms // 86_400_000

    def _count(self, n: int) -> None:
        day = self._day_of(self.broker.clock.wall_ms())
        if day != self._day:  # (UTC days: RocketMQ's BrokerStats snapshots at local midnight)
            yesterday = self.put_total_today_morning if day == self._day + 1 else self.put_total
            self.put_total_yesterday_morning, self.put_total_today_morning = yesterday, self.put_total
            self._day = day
        self.put_total += n

    @property
    def waiting(self) -> int:
        """Messages accepted and not yet put."""
        return self._pending_count


def _resolve(s: _Send, reply: RemotingCommand | None) -> None:
    complete(s.future, reply)  # (its answer queued now; written by flush_completed in this turn)
