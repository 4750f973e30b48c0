"""POP consumption, as RocketMQ 5's broker does it (``PopMessageProcessor``,
``AckMessageProcessor``, ``ChangeInvisibleTimeProcessor``, ``PopReviveService``): the service
the remoting codes (:mod:`rmqnet.broker.pop_remoting`) and the gRPC endpoint call.

- :meth:`PopService.pop` reads a topic's queues (one, or all from a rotating start) at the
  group's position, and the group's POP retry topic ``%RETRY%<group>_<topic>`` (after the
  topic; first on every fifth pop, RocketMQ's ``popFromRetryProbability`` 20 made
  deterministic), records one checkpoint per queue read (:mod:`rmqnet.broker.pop_state`), moves
  the position past what it read, and hands the messages out with their receipt handles
  (:mod:`rmqnet.broker.pop_handle`). The checkpoints reach the log before the answer.
- :meth:`PopService.ack` marks one message of a checkpoint; :meth:`PopService.change_invisible`
  gives a message a checkpoint of its own with a new popTime and invisible time (a new
  handle) and acks it in the old one, so the old handle no longer acks. An orderly handle
  only moves its batch's invisible time (RocketMQ's ``processChangeInvisibleTimeForOrder``).
- :meth:`PopService.run_once` (the revive) stores again every unacked message of a
  checkpoint whose invisible time has passed: to the POP retry topic with ``reconsumeTimes +
  1``, or to ``%DLQ%<group>`` once ``reconsumeTimes`` reached the group's ``retryMaxTimes``
  (16 by default; RocketMQ 5's proxy sends such a message to the dead letters when it is
  popped again, ``PopMessageResultFilterImpl``: the same count of deliveries). One
  ``wire_records`` read and one ``put_wire`` for all of a round's messages.
- Orderly (FIFO) pops read no retry topic: a queue whose batch is in flight and not acked is
  not read again before its invisible time ends; then its unacked messages are handed out
  again from the queue itself, in order, with their attempt count raised (RocketMQ's
  ``ConsumerOrderInfoManager.checkBlock``), to the dead letters past ``retryMaxTimes``.

The calls of the gRPC endpoint (ReceiveMessage, AckMessage, ChangeInvisibleDuration), all on
the event loop's thread with ``now_ms`` from ``broker.clock``: ``broker.pop.pop(...)`` ->
:class:`~rmqnet.broker.pop_result.PopResult` (``rows()`` or ``messages()``: the decoded
messages with ``receiptHandle``; :class:`PopRefused` carries RocketMQ's remoting code to map);
``broker.pop_holds.wait_arrival(group, topic, queue_id, deadline_ms)`` to long-poll, then pop
again; ``broker.pop.ack_many(group, topic, [ExtraInfo.parse(handle), ...], now_ms)`` and
``broker.pop.change_invisible(group, topic, ExtraInfo.parse(handle), invisible_ms, now_ms)`` ->
:class:`AckStatus` (``EXPIRED``: RocketMQ's proxy answers INVALID_RECEIPT_HANDLE "receipt
handle is expired"); a malformed handle raises :class:`~rmqnet.broker.pop_handle.HandleError`.
Under SYNC_FLUSH each of them is answered after ``await broker.pop.synced()`` when that is not
``None`` (the log on disk: :mod:`rmqnet.broker.pop_sync`).

Guarantee (at-least-once): a message handed out and not acked is handed out again (or
dead-lettered) after its invisible time, across a ``kill -9`` of the broker (the log is written
before each answer; see :class:`rmqlog.PopLog`); an ack answered is never undone; a revive
stores each message once (idempotent across a crash: :meth:`PopService.run_once`). A message
comes again only when it was not acked within its invisible time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import itertools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

import rmqlog
from rmqlog import GetMessageStatus, PopLog, StoredRecords, send_back_table

from ..remoting import ResponseCode
from ..remoting.names import DLQ_PREFIX, PERM_READ, RETRY_PREFIX, dlq_topic
from .consumer_offsets import commit_offset
from .pop_handle import (
    ORDER_REVIVE_QID,
    ExtraInfo,
    handle_texts,
    normal_topic,
    pop_retry_topic,
    real_topic,
)
from .pop_result import PoppedQueue, PopResult, take
from .pop_state import Checkpoint, PopState
from .pop_sync import PopLogSync
from .pull import SQL92, Filter, compiled

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

#: ``PopMessageProcessor``: at most 32 messages a pop
MAX_POP_NUMS = 32
#: ``ConsumeInitMode``: where a group without a position starts
INIT_MIN, INIT_MAX = 0, 1
#: every this many pops the retry topic is read first (``popFromRetryProbability`` = 20 %)
RETRY_FIRST_EVERY = 5
#: the messages one revive round stores again at most (the rest: next round)
REVIVE_BATCH = 4096
#: the store's idempotence writer of the revive's puts (their sequence: the revive's)
REVIVE_WRITER = "rmqnet.pop.revive"
#: a group's ``retryMaxTimes`` when it has no config
DEFAULT_RETRY_MAX = 16

_S = GetMessageStatus
_MOVED = (_S.OFFSET_TOO_SMALL, _S.OFFSET_OVERFLOW_BADLY, _S.OFFSET_FOUND_NULL)


class PopRefused(Exception):
    """A pop, ack or change refused: ``code`` is RocketMQ's response code
    (:class:`rmqnet.remoting.ResponseCode`), the message its remark naming what was wrong."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class FilterUnsupported(PopRefused):
    """A SQL92 pop on a broker with ``enablePropertyFilter=false`` (SYSTEM_ERROR, the pull's
    remark; the gRPC endpoint answers it ``UNSUPPORTED``)."""


class AckStatus(enum.Enum):
    """What an ack or change of a handle found."""

    OK = "OK"  # the message was in flight under this handle
    GONE = "GONE"  # not in flight under this handle: acked already, changed, or never handed out
    EXPIRED = "EXPIRED"  # its invisible time passed and it was redelivered


_NONE = np.zeros(0, np.int64)


@dataclass(slots=True)
class _Taken:
    """What a pop took from one queue: its checkpoint as logged, the records handed out,
    their indexes in the checkpoint, and the indexes dead-lettered by this pop."""

    ck: Checkpoint
    records: StoredRecords
    handed: np.ndarray
    dead: np.ndarray


class PopService:
    """POP consumption of one broker (see the module docstring); ``broker.pop``. Loads its
    log at construction (raises :class:`rmqlog.CorruptStoreError` when it cannot be read)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.store = broker.store
        self.state = PopState(PopLog(self.store.paths.pop_log))
        self.state.load()
        #: under SYNC_FLUSH, the log synced before each answer (:meth:`synced`)
        self.sync = PopLogSync(self.state.log, lambda: self.broker.config.sync_flush)
        self._turns = itertools.count()
        #: counters since start: messages handed out, acked, revived to retry, dead-lettered
        self.popped = self.acked = self.revived = self.dead = 0

    def synced(self) -> asyncio.Future[None] | None:
        """Under ``SYNC_FLUSH``: a future done once every change so far is on disk (answer
        after it; its exception an ``OSError``), else ``None`` (:mod:`rmqnet.broker.pop_sync`)."""
        return self.sync.wait()

    def close(self) -> None:
        """Sync and close the log (a clean stop)."""
        self.state.log.sync()
        self.state.log.close()

    # ------------------------------------------------------------------ pop
    def pop(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_count: int,
        invisible_ms: int,
        now_ms: int,
        *,
        order: bool = False,
        tags: str | None = None,
        exp_type: str | None = None,
        init_mode: int = INIT_MAX,
    ) -> PopResult:
        """Hand out up to ``max_count`` messages of ``topic`` (queue ``queue_id``, or -1: any)
        to ``group`` for ``invisible_ms``; ``tags`` the subscription's expression (``None``/``*``:
        all), of ``exp_type`` (``None``/``TAG``: tags; ``SQL92``: a SQL92 property filter, empty:
        all, as Java's; its messages that do not match skipped and the position moved past them,
        in the topic and in its POP retry topic alike, as Java's one ``ExpressionMessageFilter``).
        Raises :class:`PopRefused` with RocketMQ's code (the broker or topic not readable:
        NO_PERMISSION; more than 32: SYSTEM_ERROR; unknown topic: TOPIC_NOT_EXIST; a queue
        it has not: SYSTEM_ERROR; unknown group with ``autoCreateSubscriptionGroup=false``:
        SUBSCRIPTION_GROUP_NOT_EXIST; an expression that does not parse, or of another type:
        SUBSCRIPTION_PARSE_FAILED; SQL92 with ``enablePropertyFilter=false``:
        :class:`FilterUnsupported`); the store's errors (a full disk for the log)."""
        tc, retry_max, flt = self._check_pop(group, topic, queue_id, max_count, invisible_ms, tags, exp_type)
        turn = next(self._turns)
        queues = list(range(tc.read_queue_nums)) if queue_id < 0 else [queue_id]
        shift = turn % len(queues)
        queues = queues[shift:] + queues[:shift]
        sources: list[tuple[str, list[int], Filter]] = [(topic, queues, flt)]
        if not order:
            rt = pop_retry_topic(group, topic)
            rtc = self.broker.topics.get(rt)
            if rtc is not None:
                # a SQL92 filter reads the retry topic too (a retried record keeps its properties);
                # a tag filter not: the retry topic holds only what the tag matched
                retry = (rt, list(range(rtc.read_queue_nums)), (None, flt[1]))
                sources = [retry, *sources] if turn % RETRY_FIRST_EVERY == 0 else [*sources, retry]
        result = PopResult(now_ms, invisible_ms, ORDER_REVIVE_QID if order else 0)
        records: list[dict[str, Any]] = []
        taken: list[_Taken] = []
        left = max_count
        for t, qids, flt in sources:
            for qid in qids:
                if left <= 0:
                    break  # (restNum counts the queues read: a bound of each other queue costs a read)
                read = self._read_order if order else self._read
                one = read(group, t, qid, left, invisible_ms, now_ms, flt, init_mode, retry_max, records, result)
                if one is not None:
                    taken.append(one)
                    left -= len(one.handed)
        dead = [got for got in taken if len(got.dead)]
        if dead:  # orderly messages past retryMaxTimes: stored to the dead letters before the log says so
            self._store_again(
                np.concatenate([got.ck.commit_offsets[got.dead] for got in dead]),
                [dlq_topic(got.ck.group) for got in dead for _ in range(len(got.dead))],
            )
        # the checkpoints are in the log before anything is answered
        self.state.write(records, [got.ck for got in taken])
        name = self.broker.config.broker_name
        for got in taken:
            ck = got.ck
            if not len(got.handed):
                continue
            handles = handle_texts(
                ck.start,
                ck.pop_time,
                ck.invisible,
                result.revive_qid,
                ck.topic,
                name,
                ck.queue_id,
                ck.offsets[got.handed].tolist(),
            )
            attempts = ck.attempts[got.handed] if ck.attempts is not None else None
            result.queues.append(PoppedQueue(ck.topic, ck.queue_id, ck.start, got.records, handles, attempts))
            if not order:
                self._commit(ck.group, ck.topic, ck.queue_id, ck.next_offset)
        self.popped += len(result)
        return result

    def _check_slave(self) -> None:
        """A SLAVE serves no POP: its store takes only its master's bytes, so it could neither
        revive nor keep positions (clients and RocketMQ's proxy pop masters, broker id 0)."""
        if self.broker.replication.slave:
            raise PopRefused(
                ResponseCode.SERVICE_NOT_AVAILABLE, "the broker is a slave: POP consumption is served by its master"
            )

    def _check_pop(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_count: int,
        invisible_ms: int,
        exp: str | None,
        exp_type: str | None,
    ) -> tuple[rmqlog.TopicConfig, int, Filter]:
        self._check_slave()
        cfg = self.broker.config
        if not cfg.broker_permission & PERM_READ:
            raise PopRefused(ResponseCode.NO_PERMISSION, f"the broker[{cfg.broker_ip1}] pop message is forbidden")
        if max_count > MAX_POP_NUMS or max_count < 1:
            raise PopRefused(
                ResponseCode.SYSTEM_ERROR,
                f"the broker[{cfg.broker_ip1}] pop message's num is greater than 32 (maxMsgNums {max_count})"
                if max_count > MAX_POP_NUMS
                else f"maxMsgNums {max_count} is below 1",
            )
        if invisible_ms <= 0:
            raise PopRefused(ResponseCode.SYSTEM_ERROR, f"invisibleTime {invisible_ms} is not positive")
        tc = self.broker.topics.get(topic)
        if tc is None:
            raise PopRefused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not tc.perm & PERM_READ:
            raise PopRefused(ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden")
        if queue_id >= tc.read_queue_nums or queue_id < -1:
            raise PopRefused(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read_queue_nums}]",
            )
        sub = self._group(group)
        if not sub.consume_enable:
            raise PopRefused(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        return tc, sub.retry_max_times, self._filter(exp, exp_type)

    def _filter(self, exp: str | None, exp_type: str | None) -> Filter:
        """``PopMessageProcessor``'s filter of ``exp`` (none when it is empty, whatever its type):
        a tag expression, or a SQL92 one compiled (the pull's cache); another type or an
        expression that does not parse: SUBSCRIPTION_PARSE_FAILED. SQL92 on a broker with
        ``enablePropertyFilter=false``: refused as a pull is (Java's POP does not check; see
        docs/decisions.md)."""
        if not exp:
            return None, None
        try:
            if exp_type in (None, "", "TAG"):
                if exp != "*":
                    rmqlog.parse_tag_filter(exp)
                return exp, None
            if exp_type != SQL92:
                raise rmqlog.FilterParseError(f"no filter of type {exp_type}")
            sql = compiled(exp)
        except rmqlog.StoreError:
            raise PopRefused(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"
            ) from None
        if not self.broker.config.enable_property_filter:
            raise FilterUnsupported(
                ResponseCode.SYSTEM_ERROR, f"The broker does not support consumer to filter message by {SQL92}"
            )
        return None, sql

    def _group(self, group: str) -> rmqlog.SubscriptionGroupConfig:
        cfg = self.broker.config
        try:
            rmqlog.paths.validate_group(group)
            sub = self.broker.subscription_groups.find_or_create(
                group, auto_create=cfg.auto_create_subscription_group, cap=cfg.auto_create_subscription_group_max_nums
            )
        except Exception as exc:  # noqa: BLE001 - a bad name or a full table: the group does not exist
            raise PopRefused(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist, {exc}"
            ) from None
        if sub is None:
            raise PopRefused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist")
        return sub

    def _position(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        """The group's position in the queue: the log's, else the committed offset, else
        RocketMQ's ``getInitOffset`` (MIN, or a retry topic: the queue's first offset; MAX: 0
        while the queue still starts at 0 (its messages in memory, ``initPopOffsetByCheckMsgInMem``),
        else its last message)."""
        key = (group, topic, queue_id)
        pos = self.state.positions.get(key)
        if pos is not None:
            return pos
        committed = self.broker.consumer_offsets.query(group, topic, queue_id)
        if committed >= 0:
            return committed
        lo = self.store.min_offset(topic, queue_id)
        if init_mode == INIT_MIN or topic.startswith(RETRY_PREFIX) or lo == 0:
            return lo
        return max(self.store.max_offset(topic, queue_id) - 1, 0)

    def _window(
        self, topic: str, qid: int, pos: int, left: int, flt: Filter, result: PopResult
    ) -> tuple[rmqlog.GetMessageResult, int]:
        """The window read at ``pos`` (a position out of the queue corrected once, as RocketMQ
        does), and the position it was read at; the backlog added to ``result.rest``."""
        tags, sql = flt[0] or "*", flt[1]
        res = self.store.read_window(topic, qid, pos, max_count=left, tags=tags, raw=True, sql92=sql)
        if res.status in _MOVED and res.next_begin_offset != pos:
            pos = res.next_begin_offset  # the position was out of the queue (retention): corrected
            res = self.store.read_window(topic, qid, pos, max_count=left, tags=tags, raw=True, sql92=sql)
        result.rest += max(res.max_offset - res.next_begin_offset, 0)
        return res, pos

    def _read(
        self,
        group: str,
        topic: str,
        qid: int,
        left: int,
        invisible: int,
        now: int,
        flt: Filter,
        init_mode: int,
        retry_max: int,
        records: list[dict[str, Any]],
        result: PopResult,
    ) -> _Taken | None:
        """One queue of a pop that is not orderly: the checkpoint of what it read (its record
        added to ``records``), or ``None`` (a position moved by a filter is recorded)."""
        pos = self._position(group, topic, qid, init_mode)
        res, pos = self._window(topic, qid, pos, left, flt, result)
        recs = res.records
        if res.status != _S.FOUND or recs is None or not len(recs):
            if res.next_begin_offset > pos:
                records.append({"k": "pos", "g": group, "t": topic, "q": qid, "n": res.next_begin_offset})
                self._commit(group, topic, qid, res.next_begin_offset)
            return None
        ck = Checkpoint(
            self.state.new_id(),
            group,
            topic,
            qid,
            pos,
            now,
            invisible,
            recs.queue_offsets.astype(np.int64),
            recs.commit_log_offsets.astype(np.int64),
            res.next_begin_offset,
        )
        records.append(ck.record())
        return _Taken(ck, recs, np.arange(len(recs)), _NONE)

    def _read_order(
        self,
        group: str,
        topic: str,
        qid: int,
        left: int,
        invisible: int,
        now: int,
        flt: Filter,
        init_mode: int,
        retry_max: int,
        records: list[dict[str, Any]],
        result: PopResult,
    ) -> _Taken | None:
        """One queue of an orderly pop: nothing while its batch in flight blocks it; else
        from its first message not acked (an earlier batch's first, or the position), the
        earlier batch's acked ones left out, its unacked ones again with their attempt count
        raised; what the earlier batch holds past this window stays in the new checkpoint,
        not handed out, so that nothing is skipped (its record replaces the earlier one's)."""
        cid = self.state.order_inflight.get((group, topic, qid))
        prev = self.state.cks.get(cid) if cid is not None else None
        if prev is not None and prev.blocks(now):
            return None
        pos = (
            int(prev.offsets[np.flatnonzero(~prev.acked)[0]])
            if prev is not None
            else self._position(group, topic, qid, init_mode)
        )
        res, pos = self._window(topic, qid, pos, left, flt, result)
        recs = res.records
        if res.status != _S.FOUND or recs is None or not len(recs):
            if prev is None and res.next_begin_offset > pos:
                records.append({"k": "pos", "g": group, "t": topic, "q": qid, "n": res.next_begin_offset})
                self._commit(group, topic, qid, res.next_begin_offset)
            return None
        offsets, commits = recs.queue_offsets.astype(np.int64), recs.commit_log_offsets.astype(np.int64)
        attempts = np.zeros(len(offsets), np.int64)
        next_offset = res.next_begin_offset
        rest_o = rest_c = rest_a = np.zeros(0, np.int64)
        if prev is not None:
            assert prev.attempts is not None
            idx = np.minimum(np.searchsorted(prev.offsets, offsets), len(prev.offsets) - 1)
            known = prev.offsets[idx] == offsets
            was_handed = prev.handed[idx] if prev.handed is not None else np.ones(len(idx), bool)
            attempts = np.where(known, prev.attempts[idx] + was_handed.astype(np.int64), 0)
            keep = ~(known & prev.acked[idx])
            if not keep.all():
                recs = take(recs, np.flatnonzero(keep))
                offsets, commits, attempts = offsets[keep], commits[keep], attempts[keep]
            # the earlier batch's unacked messages past this window: kept, not handed out
            beyond = ~prev.acked & (prev.offsets >= res.next_begin_offset)
            rest_o, rest_c, rest_a = prev.offsets[beyond], prev.commit_offsets[beyond], prev.attempts[beyond]
            next_offset = max(next_offset, prev.next_offset)
        n = len(offsets)
        dead = np.flatnonzero(attempts > retry_max)
        handed = np.ones(n + len(rest_o), bool)
        handed[n:] = False
        ck = Checkpoint(
            self.state.new_id(),
            group,
            topic,
            qid,
            pos,
            now,
            invisible,
            np.concatenate([offsets, rest_o]),
            np.concatenate([commits, rest_c]),
            next_offset,
            True,
            np.concatenate([attempts, rest_a]),
            handed=handed,
        )
        if len(dead):
            ck.acked[dead] = True  # to the dead letters in this pop, before the log says so
            ck.left -= len(dead)
        records.append(ck.record(replaces=prev.id if prev is not None else None))
        give = np.flatnonzero(~ck.acked[:n])
        return _Taken(ck, recs if len(give) == n else take(recs, give), give, dead)

    def _commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """The group's position into the broker's offset table too (GET_CONSUME_STATS shows it)."""
        with contextlib.suppress(rmqlog.StoreError):
            commit_offset(self.broker, group, topic, queue_id, offset)

    # ------------------------------------------------------------------ ack
    def ack(self, group: str, topic: str, handle: ExtraInfo, now_ms: int) -> AckStatus:
        """Ack the message of ``handle`` (``topic``: the topic the group subscribed, or the
        retry topic the message was read from; the handle says which). GONE or EXPIRED
        change nothing. Raises the log's errors (nothing acked then)."""
        return self.ack_many(group, topic, [handle], now_ms)[0]

    def ack_many(self, group: str, topic: str, handles: list[ExtraInfo], now_ms: int) -> list[AckStatus]:
        """:meth:`ack` of several handles with one write to the log (a gRPC AckMessage's
        entries); one status per handle, in order (a handle given twice: OK, then GONE).
        Raises :class:`PopRefused` (SERVICE_NOT_AVAILABLE) on a slave; the log's errors."""
        self._check_slave()
        statuses: list[AckStatus] = []
        per_ck: dict[int, list[int]] = {}
        done: list[Checkpoint] = []
        for handle in handles:
            found = self.state.find(
                group, real_topic(topic, group, handle.topic_type), handle.queue_id, handle.pop_time, handle.offset
            )
            if found is None or found[0].acked[found[1]] or found[1] in per_ck.get(found[0].id, ()):
                statuses.append(self._missed(handle, now_ms))
                continue
            ck, i = found
            per_ck.setdefault(ck.id, []).append(i)
            statuses.append(AckStatus.OK)
            if ck.order:
                done.append(ck)
        # one record per checkpoint, all in one write
        self.state.write([{"k": "ack", "id": cid, "x": idx} for cid, idx in per_ck.items()])
        self.acked += sum(len(idx) for idx in per_ck.values())
        for ck in done:
            if not ck.left or not ck.blocks(now_ms):
                # an orderly batch fully acked: the group's offset moves past it, and pops held
                # on its queue are woken (AckMessageProcessor.ackOrderly's notifyMessageArriving)
                if not ck.left:
                    self._commit(group, ck.topic, ck.queue_id, ck.next_offset)
                self.broker.pop_holds.notify_arrival(ck.topic, ck.queue_id, 1 << 62)
        return statuses

    def change_invisible(
        self, group: str, topic: str, handle: ExtraInfo, invisible_ms: int, now_ms: int
    ) -> tuple[AckStatus, ExtraInfo | None]:
        """A new invisible time for the message of ``handle``, from ``now_ms``: ``(OK, the new
        handle)``, or ``(GONE | EXPIRED, None)`` changing nothing. Raises :class:`PopRefused`
        (SYSTEM_ERROR) for a time that is not positive; the log's errors."""
        self._check_slave()
        if invisible_ms <= 0:
            raise PopRefused(ResponseCode.SYSTEM_ERROR, f"invisibleTime {invisible_ms} is not positive")
        found = self.state.find(
            group, real_topic(topic, group, handle.topic_type), handle.queue_id, handle.pop_time, handle.offset
        )
        if found is None or found[0].acked[found[1]]:
            return self._missed(handle, now_ms), None
        ck, i = found
        if ck.order:
            # RocketMQ's processChangeInvisibleTimeForOrder: the batch's visibility moves, popTime stays
            invisible = now_ms + invisible_ms - ck.pop_time
            self.state.write([{"k": "inv", "id": ck.id, "i": invisible}])
            return AckStatus.OK, _replace(handle, invisible_time=invisible)
        # a popTime past the old checkpoint's, even within its millisecond: the old handle (which
        # names a checkpoint by its popTime) then never matches the new one; the deadline is
        # still now + invisible_ms
        pop_time = max(now_ms, ck.pop_time + 1)
        invisible = now_ms + invisible_ms - pop_time
        new = Checkpoint(
            self.state.new_id(),
            group,
            ck.topic,
            ck.queue_id,
            handle.offset,
            pop_time,
            invisible,
            ck.offsets[i : i + 1].copy(),
            ck.commit_offsets[i : i + 1].copy(),
            ck.next_offset,
        )
        # the new checkpoint first, then the old one's ack (appendCheckPointThenAckOrigin), one write
        self.state.write([new.record(), {"k": "ack", "id": ck.id, "x": [i]}])
        return AckStatus.OK, _replace(handle, start_offset=handle.offset, pop_time=pop_time, invisible_time=invisible)

    def in_flight(self, group: str, topic: str, handle: ExtraInfo, now_ms: int) -> tuple[AckStatus, int | None]:
        """Whether the message of ``handle`` is in flight under it and within its invisible
        time: ``(OK, its commitlog offset)``, else ``(GONE | EXPIRED, None)``; changes nothing
        (a ForwardMessageToDeadLetterQueue looks before it stores the message)."""
        found = self.state.find(
            group, real_topic(topic, group, handle.topic_type), handle.queue_id, handle.pop_time, handle.offset
        )
        if found is None or found[0].acked[found[1]] or handle.deadline <= now_ms:
            return self._missed(handle, now_ms), None
        return AckStatus.OK, int(found[0].commit_offsets[found[1]])

    def _missed(self, handle: ExtraInfo, now_ms: int) -> AckStatus:
        return AckStatus.EXPIRED if handle.deadline <= now_ms else AckStatus.GONE

    # --------------------------------------------------------------- revive
    def run_once(self, now_ms: int) -> int:
        """One revive round (``PopReviveService``): every checkpoint whose invisible time has
        passed, its unacked messages stored again (see the module docstring); then a
        compaction of the log when due. Returns the messages stored again. A revive is
        idempotent: its intent (``rv``: a sequence and the checkpoints) is logged first, its
        put carries the store's idempotence marker (writer :data:`REVIVE_WRITER`, that
        sequence), and ``done`` follows; a revive a crash interrupted is done again, the same
        checkpoints with the same sequence, before anything else (the store skips the put if
        it was made). A failed put leaves its intent for the next round (raised)."""
        n = 0
        for seq, ids in sorted(self.state.pending.items()):  # interrupted by a crash: again, the same
            n += self._revive([self.state.cks[i] for i in ids if i in self.state.cks], seq)
        due = self.state.due(now_ms, REVIVE_BATCH)
        if due:
            seq = self.state.revive_seq
            self.state.write([{"k": "rv", "seq": seq, "ids": [ck.id for ck in due]}])
            n += self._revive(due, seq)
        if not self.sync.busy:  # (never rewritten under a sync in flight)
            self.state.compact()
        return n

    def _revive(self, due: list[Checkpoint], seq: int) -> int:
        parts = [ck.commit_offsets[~ck.acked] for ck in due]
        offsets = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        groups = [ck.group for ck, p in zip(due, parts, strict=True) for _ in range(len(p))]
        retry = [
            pop_retry_topic(ck.group, _normal(ck)) for ck, p in zip(due, parts, strict=True) for _ in range(len(p))
        ]
        n = self._store_again(offsets, retry, groups, sequence=seq) if len(offsets) else 0
        self.state.write([{"k": "done", "seq": seq, "ids": [ck.id for ck in due]}])
        return n

    def _store_again(
        self, offsets: np.ndarray, topics_to: list[str], groups: list[str] | None = None, *, sequence: int | None = None
    ) -> int:
        """The records at ``offsets`` stored again, each to its topic in ``topics_to`` (a POP
        retry topic, or ``%DLQ%<group>``) or, with its ``group`` given and past that group's
        ``retryMaxTimes`` (or when its retry topic makes no topic name), to ``%DLQ%<group>``:
        one read, one put (``reconsumeTimes + 1``, ``RETRY_TOPIC`` the first topic:
        :func:`rmqlog.send_back_table`). Records no longer in the log (retention) are logged
        and skipped. ``sequence``: the put is idempotent under :data:`REVIVE_WRITER` (a
        sequence the store already has: nothing stored). Raises the store's errors (nothing is
        stored then)."""
        records, found = self.store.wire.wire_records(offsets)
        if len(found) < len(offsets):
            log.warning(
                "POP revive: %d of %d messages are no longer in the commitlog", len(offsets) - len(found), len(offsets)
            )
        if not len(found):
            return 0
        topics = [topics_to[i] for i in found.tolist()]
        dead = np.array([t.startswith(DLQ_PREFIX) for t in topics], bool)
        if groups is not None:
            by = [groups[i] for i in found.tolist()]
            limits = {g: self._retry_max(g) for g in set(by)}
            reconsume = records.column("reconsumeTimes").to_numpy().astype(np.int64)
            dead |= reconsume >= np.array([limits[g] for g in by], np.int64)
            for name, group in {t: g for t, g in zip(topics, by, strict=True) if not t.startswith(DLQ_PREFIX)}.items():
                try:
                    self.broker.topics.create_retry(name[len(RETRY_PREFIX) :])
                except rmqlog.InvalidTopicError as exc:
                    # group + "_" + topic makes no topic name (over 127 bytes): the dead letters,
                    # never a revive that fails every round
                    log.warning("POP revive: no retry topic %s (%s): to %s%s", name, exc, DLQ_PREFIX, group)
                    dead |= np.array([t == name for t in topics], bool)
            topics = [dlq_topic(g) if d else t for g, t, d in zip(by, topics, dead.tolist(), strict=True)]
        for name in {t for t in topics if t.startswith(DLQ_PREFIX)}:
            self.broker.topics.create_dlq(name[len(DLQ_PREFIX) :])
        n = len(topics)
        table = send_back_table(records, pa.array(topics, pa.string()), np.zeros(n, np.int32), np.zeros(n, np.int64))
        if sequence is None:
            self.store.wire.put_wire(table, wait_flush=False)
        else:
            self.store.wire.put_wire(table, wait_flush=False, writer=REVIVE_WRITER, sequence=sequence)
        self.broker.replication.appended()
        deaths = int(dead.sum())
        self.dead += deaths
        self.revived += n - deaths
        return n

    def _retry_max(self, group: str) -> int:
        sub = self.broker.subscription_groups.find(group)
        return sub.retry_max_times if sub is not None else DEFAULT_RETRY_MAX

    def inflight(self, group: str | None = None) -> int:
        """Messages handed out and not acked (of ``group``, or all)."""
        return self.state.inflight(group)


def _normal(ck: Checkpoint) -> str:
    return normal_topic(ck.topic, ck.group)


def _replace(handle: ExtraInfo, **changes: Any) -> ExtraInfo:
    return dataclasses.replace(handle, **changes)


__all__ = [
    "PopService",
    "PopResult",
    "PoppedQueue",
    "PopRefused",
    "FilterUnsupported",
    "AckStatus",
    "INIT_MIN",
    "INIT_MAX",
    "MAX_POP_NUMS",
]
