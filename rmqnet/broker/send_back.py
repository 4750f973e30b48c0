"""CONSUMER_SEND_MSG_BACK (36): retries and dead letters, RocketMQ 4.9.8's
``SendMessageProcessor.asyncConsumerSendMsgBack``.

A consumer whose handler failed sends the message back (``offset``: its commitlog offset;
``group``, ``delayLevel``, ``maxReconsumeTimes``; ``originMsgId`` and ``originTopic`` are read
and not used, as in Java). Per request, in Java's order (each refusal with Java's code and
remark, nothing stored):

(check: answer)
- a required field (``offset``, ``group``, ``delayLevel``) missing or mistyped: SYSTEM_ERROR naming it (the dispatch)
- the broker is a SLAVE or stopping: SERVICE_NOT_AVAILABLE
- the group is no valid group name; or ``autoCreateSubscriptionGroup=false`` and the group is unknown here (no consumer
  of it registered, no ``%RETRY%<group>`` topic): SUBSCRIPTION_GROUP_NOT_EXIST 26, "subscription group not exist, G ..."
- the broker without write permission: NO_PERMISSION
- ``%RETRY%<group>`` (created with 1 queue, read-write, when missing) not writable: NO_PERMISSION
- no record starts at ``offset`` (negative, deleted, past the end, inside a record): SYSTEM_ERROR "look message by
  offset failed, N"

Then the message is stored again (:mod:`rmqlog.log.send_back`): to ``%RETRY%<group>`` queue 0
with ``reconsumeTimes + 1``, ``RETRY_TOPIC`` (its first topic), ``ORIGIN_MESSAGE_ID`` (the first
copy's offset msgId) and ``DELAY`` = ``delayLevel``, or ``3 + reconsumeTimes`` when 0 (the store
routes it through the schedule topic; its delivery keeps ``reconsumeTimes``); to
``%DLQ%<group>`` (1 queue, read-write, as 4.9.8 creates it) queue 0 without a delay when its
``reconsumeTimes >= maxReconsumeTimes`` or ``delayLevel < 0``. ``maxReconsumeTimes``: the
request's when given and the client's ``version`` is at least V3_4_9 (ordinal 121), else the
group's default, 16 (``SubscriptionGroupConfig.retryMaxTimes``; no group configs are kept here).
Answer: SUCCESS, no fields.

Fast by construction, as the sends: every request accepted while the event loop runs goes in
one list, and one ``loop.call_soon`` callback reads all their records with ONE
``MessageStore.wire_records`` call, rewrites them in whole columns
(``rmqlog.send_back_table``) and stores them with ONE ``put_wire``; no
per-message Python step on the store path. One offset that starts no record is answered alone;
a put the store refuses for one bad message is retried request by request, so only that one is
refused. Store errors are mapped by :mod:`rmqnet.broker.codes`. As in Java the re-stored
message does not wait for a flush or a slave (``WAIT=false``): the answer follows the put.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqlog import InvalidGroupError, InvalidMessageError, send_back_table
from rmqlog.paths import validate_group

from ..remoting import ConsumerSendMsgBackHeader, RemotingCommand, ResponseCode
from ..remoting.names import DLQ_PREFIX, PERM_WRITE, RETRY_PREFIX, retry_topic
from .codes import STOPPING_REMARK, store_error_code
from .peer import Peer
from .transactions import group_commit

if TYPE_CHECKING:
    from .broker import Broker
    from .config import BrokerConfig

log = logging.getLogger(__name__)

#: ``SubscriptionGroupConfig.retryMaxTimes``: a group's most re-deliveries
DEFAULT_MAX_RECONSUME = 16
#: ``MQVersion.Version.V3_4_9.ordinal()``: from this client version on the request's
#: ``maxReconsumeTimes`` counts
V3_4_9 = 121
#: the delay level of a first retry when the request asks 0 (``3 + reconsumeTimes``)
BASE_RETRY_LEVEL = 3
GROUP_NOT_EXIST_FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


@dataclass(slots=True)
class _Back:
    """One accepted request waiting for the store."""

    request: RemotingCommand
    offset: int
    group: str
    delay_level: int
    max_reconsume: int
    future: asyncio.Future[RemotingCommand | None]


class SendBackService:
    """The send-back path of one broker (see the module docstring); ``broker.send_back``."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.store = broker.store
        self._pending: list[_Back] = []
        self._scheduled = False
        #: messages re-stored since start (to the retry topics, to the dead-letter topics)
        self.retried = 0
        self.dead = 0

    @property
    def config(self) -> BrokerConfig:
        """The broker's config now (UPDATE_BROKER_CONFIG may replace it: rmqnet.broker.admin_config)."""
        return self.broker.config

    # ------------------------------------------------------------- handler
    def handle(
        self, broker: Broker, peer: Peer, req: RemotingCommand
    ) -> RemotingCommand | asyncio.Future[RemotingCommand | None]:
        """CONSUMER_SEND_MSG_BACK: an immediate refusal, or a future of the answer."""
        h = ConsumerSendMsgBackHeader.read(req.ext_fields)  # a FieldError: SYSTEM_ERROR (dispatch)
        refused = self._check(req, h)
        if refused is not None:
            return refused
        max_reconsume = DEFAULT_MAX_RECONSUME
        if req.version >= V3_4_9 and h.max_reconsume_times is not None:
            max_reconsume = h.max_reconsume_times
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand | None] = loop.create_future()
        self._pending.append(_Back(req, h.offset, h.group, h.delay_level, max_reconsume, fut))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._put_pending)
        return fut

    def _check(self, req: RemotingCommand, h: ConsumerSendMsgBackHeader) -> RemotingCommand | None:
        broker, cfg = self.broker, self.config
        if broker.stopping:
            return req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, STOPPING_REMARK)
        slave = broker.replication.refuse_send(req, {})
        if slave is not None:
            return slave
        problem = group_problem(h.group)
        if problem is not None or not self._group_known(h.group):
            detail = f" ({problem})" if problem is not None else ""
            return req.reply(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group not exist, {h.group}{detail} {GROUP_NOT_EXIST_FAQ}",
            )
        if not cfg.broker_permission & PERM_WRITE:
            return req.reply(ResponseCode.NO_PERMISSION, f"the broker[{cfg.broker_ip1}] sending message is forbidden")
        try:
            tc = broker.topics.create_retry(h.group)
        except Exception as exc:  # noqa: BLE001 - a store refusal of the topic: Java's "not exist"
            code, remark = _mapped(exc, cfg.max_message_size)
            return req.reply(
                code if code != ResponseCode.MESSAGE_ILLEGAL else ResponseCode.SYSTEM_ERROR,
                f"topic[{RETRY_PREFIX}{h.group}] not exist ({remark})",
            )
        if not tc.perm & PERM_WRITE:
            return req.reply(
                ResponseCode.NO_PERMISSION, f"the topic[{RETRY_PREFIX}{h.group}] sending message is forbidden"
            )
        if h.offset < 0:
            return _not_found(req, h.offset)
        return None

    def _group_known(self, group: str) -> bool:
        """Java's ``findSubscriptionGroupConfig``: any group when ``autoCreateSubscriptionGroup``;
        else one this broker knows (a consumer of it registered, or its retry topic exists)."""
        if self.config.auto_create_subscription_group:
            return True
        if group in self.broker.consumers.consumer_groups:
            return True
        return self.broker.topics.get(retry_topic(group)) is not None

    # -------------------------------------------------------------- batching
    def _put_pending(self) -> None:
        self._scheduled = False
        backs, self._pending = self._pending, []
        self._put(backs)

    def _put(self, backs: list[_Back]) -> None:
        """Read every request's record, rewrite them, store them: one read, one put."""
        try:
            records, found = self.store.wire_records(np.fromiter((b.offset for b in backs), np.int64, len(backs)))
        except Exception as exc:  # noqa: BLE001 - a damaged record: each alone, so only its request fails
            if len(backs) > 1:
                for b in backs:
                    self._put([b])
                return
            self._fail(backs, exc)
            return
        if len(found) < len(backs):
            hit = np.zeros(len(backs), bool)
            hit[found] = True
            for i in np.flatnonzero(~hit):
                _resolve(backs[i], _not_found(backs[i].request, backs[i].offset))
            backs = [backs[i] for i in found]
        if not backs:
            return
        n = len(backs)
        reconsume = records.column("reconsumeTimes").to_numpy().astype(np.int64)
        asked = np.fromiter((b.delay_level for b in backs), np.int64, n)
        limit = np.fromiter((b.max_reconsume for b in backs), np.int64, n)
        dead = (reconsume >= limit) | (asked < 0)
        level = np.where(dead, 0, np.where(asked == 0, BASE_RETRY_LEVEL + reconsume, asked))
        groups = pa.array([b.group for b in backs], pa.string())
        topic = pc.binary_join_element_wise(pc.if_else(pa.array(dead), DLQ_PREFIX, RETRY_PREFIX), groups, "")
        if dead.any():
            try:
                for group in {backs[i].group for i in np.flatnonzero(dead)}:
                    self.broker.topics.create_dlq(group)
            except Exception as exc:  # noqa: BLE001 - the store refused the topic
                self._fail(backs, exc)
                return
        table = send_back_table(records, topic, np.zeros(n, np.int32), level)
        try:
            # WAIT=false, as in Java: answered after the put, not its flush (under SYNC_FLUSH a
            # group commit is started for it, as Java's wakes its GroupCommitService)
            self.store.put_wire(table, wait_flush=False)
        except InvalidMessageError as exc:
            if n > 1:  # one bad message must not fail the others put with it
                for b in backs:
                    self._put([b])
                return
            self._fail(backs, exc)
            return
        except Exception as exc:  # noqa: BLE001 - mapped (store errors, OSError) or re-raised into the futures
            self._fail(backs, exc)
            return
        self.broker.replication.appended()  # the HA writers send it now (no wait: WAIT=false, as in Java)
        if self.broker.config.sync_flush:
            asyncio.get_running_loop().run_in_executor(None, group_commit, self.store).add_done_callback(_flushed)
        deaths = int(dead.sum())
        self.dead += deaths
        self.retried += n - deaths
        for b in backs:
            _resolve(b, b.request.reply(ResponseCode.SUCCESS, None))

    def _fail(self, backs: list[_Back], exc: Exception) -> None:
        try:
            code, remark = store_error_code(exc, self.config.max_message_size)
        except Exception as bug:  # not a store error: every waiting request learns of it
            log.exception("send back failed")
            for b in backs:
                if not b.future.done():
                    b.future.set_exception(bug)
            return
        for b in backs:
            _resolve(b, b.request.reply(code, remark))


def group_problem(group: str) -> str | None:
    """Why ``group`` is no consumer group name (RocketMQ's charset, 255 bytes), or ``None``."""
    try:
        validate_group(group)
    except InvalidGroupError as exc:
        return str(exc)
    return None


def _mapped(exc: Exception, max_message_size: int) -> tuple[int, str]:
    try:
        return store_error_code(exc, max_message_size)
    except Exception:  # noqa: BLE001 - not a store error: say what it is
        return ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"


def _flushed(f: asyncio.Future[int]) -> None:
    if not f.cancelled() and f.exception() is not None:
        log.error("flush after CONSUMER_SEND_MSG_BACK failed: %s", f.exception())


def _not_found(req: RemotingCommand, offset: int) -> RemotingCommand:
    return req.reply(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")


def _resolve(b: _Back, reply: RemotingCommand | None) -> None:
    if not b.future.done():
        b.future.set_result(reply)
