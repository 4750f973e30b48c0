"""Transactional messages: half messages, END_TRANSACTION (37), the check-back service
(RocketMQ 4.9.8's ``TransactionalMessageServiceImpl``, ``TransactionalMessageBridge``,
``EndTransactionProcessor``; the check service is :mod:`rmqnet.broker.transaction_check`).

**Half message.** A send whose properties hold ``TRAN_MSG=true`` (:meth:`TransactionService.half`,
called by the send path) is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with its real topic
and queue in ``REAL_TOPIC``/``REAL_QID`` and the transaction bits of its sysFlag cleared
(``parseHalfMessageInner``); no consumer reads that topic. The reply is a send's (offset msgId,
the half's queue offset): what the producer hands back in END_TRANSACTION. It must carry
``PGROUP`` (the producer group checked back); it may not be delayed or timed (the Java client
drops a delay level from a transactional message; here it is refused, MESSAGE_ILLEGAL); one
without ``UNIQ_KEY`` gets one here, because ``UNIQ_KEY`` is the transaction's identity below.

**END_TRANSACTION.** Requests arriving together (one turn of the event loop) are ended with one
store read and one store put, whatever their number (as sends are, :mod:`rmqnet.broker.send`):
the half messages are read at their ``commitLogOffset`` and checked to be queue 0 of the half
topic at ``tranStateTableOffset`` (:meth:`rmqlog.access.wire.WireCalls.stored_rows`, whole columns);
then, per request, ``PGROUP`` must be the request's ``producerGroup`` (Java's
``checkPrepareMessage`` remarks), and the transaction (its ``UNIQ_KEY``) must not be ended
already. A commit writes the message to its real topic and queue (body, flag, born time and
host, reconsume times as the half; properties as stored without ``REAL_TOPIC``/``REAL_QID``;
sysFlag ``TRANSACTION_COMMIT``) and an *op* record; a rollback writes only the op record.
The answer is SUCCESS once the put is done, under ``SYNC_FLUSH`` flushed, and under
``SYNC_MASTER`` once a slave holds it (``slaveTimeout`` at most; with no slave in reach at
once), as Java's ``putMessage`` of the op message waits (:meth:`TransactionService._settle`).

**Exactly once, across kill -9.** The op record (``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tag
``d``, body the half's queue offset as RocketMQ writes it, plus ``__transactionId__`` = the
half's ``UNIQ_KEY`` and ``TRAN_END`` = ``COMMIT``/``ROLLBACK``/``DISCARD``) is appended in the
*same* store put as the committed message: the store's put is all or nothing across a crash
(its published tail moves once per put), so after any kill either both are in the log or
neither. At start the broker reads the op queue and knows every ended transaction
(:meth:`TransactionService.load`); the event loop ends transactions one batch at a time,
checking that map before the put and updating it after, so an END_TRANSACTION retried by a
client, replayed after a crash, or answering a check-back for a half already ended, stores
nothing: the same outcome again is answered SUCCESS (remark "already committed"), the other
outcome SYSTEM_ERROR. The identity is the ``UNIQ_KEY`` rather than the half's offset because a
check-back renews the half (a copy at a new offset, :mod:`rmqnet.broker.transaction_check`),
and a half sent twice by a producer's retry carries the same key: either way one commit.
Memory: one entry per ended transaction whose op record the store still holds.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqlog import InvalidMessageError, MessageStore, StoreError

from ..client.message import UniqKeys
from ..remoting import RemotingCommand, ResponseCode
from ..remoting.headers import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    EndTransactionHeader,
)
from ..remoting.names import (
    PROPERTY_CHECK_IMMUNITY,
    PROPERTY_CHECK_TIMES,
    PROPERTY_DELAY,
    PROPERTY_PGROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRAN_END,
    PROPERTY_TRAN_MSG,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_UNIQ_KEY,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    property_item,
    property_mark,
)
from .codes import STOPPING_REMARK, store_error_code
from .peer import Peer

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

HALF_TOPIC, OP_TOPIC, CHECK_MAX_TOPIC = TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC
#: the group whose committed offset of the half queue is the check service's progress (Java's)
CHECK_GROUP = "CID_RMQ_SYS_TRANS"
REMOVE_TAG = "d"
REAL_TOPIC, REAL_QID, PGROUP, UNIQ_KEY, TRAN_MSG = (
    PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QID,
    PROPERTY_PGROUP,
    PROPERTY_UNIQ_KEY,
    PROPERTY_TRAN_MSG,
)
CHECK_TIMES, CHECK_IMMUNITY = PROPERTY_CHECK_TIMES, PROPERTY_CHECK_IMMUNITY
#: the op record's names: the transaction (Java's PROPERTY_TRANSACTION_ID) and how it ended (ours)
TRANSACTION_ID, TRAN_END = PROPERTY_TRANSACTION_ID, PROPERTY_TRAN_END
COMMIT, ROLLBACK, DISCARD = "COMMIT", "ROLLBACK", "DISCARD"
_PAST = {COMMIT: "committed", ROLLBACK: "rolled back", DISCARD: "discarded after too many checks"}
#: properties that would make the store delay the message (refused on a half message)
_DELAY_NAMES = (PROPERTY_DELAY, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)
_LOAD_WINDOW = 8192
SYSFLAG_TRANSACTION_MASK = 0xC

#: a put's columns here (the send's, with bornHost as the record's bytes)
PUT_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("queueId", pa.int32()),
        ("body", pa.binary()),
        ("flag", pa.int32()),
        ("sysFlag", pa.int32()),
        ("bornTimestamp", pa.int64()),
        ("bornHost", pa.binary()),
        ("properties", pa.string()),
        ("reconsumeTimes", pa.int32()),
    ]
)


@dataclass(slots=True)
class _End:
    request: RemotingCommand
    header: EndTransactionHeader
    future: asyncio.Future[RemotingCommand | None]


class TransactionService:
    """The transactions of one broker (``broker.transactions``; module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.store = broker.store
        #: transaction (UNIQ_KEY) -> COMMIT / ROLLBACK / DISCARD, from the op records
        self.resolved: dict[str, str] = {}
        self._pending: list[_End] = []
        self._scheduled = False
        self._ids = UniqKeys()
        self._half_topic_made = False
        #: ends answered, by outcome (statistics; tests read them)
        self.committed = 0
        self.rolled_back = 0
        self.load()

    # ------------------------------------------------------------------ state
    def load(self) -> int:
        """Read every op record still stored into :attr:`resolved` (a broker's start); returns
        how many. Whole columns per window of the op queue."""
        store = self.store
        if OP_TOPIC not in store.topics():
            return 0
        lo, hi = store.min_offset(OP_TOPIC, 0), store.max_offset(OP_TOPIC, 0)
        n = 0
        for start in range(lo, hi, _LOAD_WINDOW):
            table = store.read_queue(OP_TOPIC, 0, start, min(hi, start + _LOAD_WINDOW))
            props = table.column("properties")
            ids = pc.map_lookup(props, TRANSACTION_ID, "last")
            ends = pc.map_lookup(props, TRAN_END, "last")
            ok = pc.and_(pc.is_valid(ids), pc.is_valid(ends))
            ids, ends = pc.filter(ids, ok), pc.filter(ends, ok)
            self.resolved.update(zip(ids.to_pylist(), ends.to_pylist(), strict=True))
            n += len(ids)
        return n

    # -------------------------------------------------------------- half sends
    def half(self, props: dict[str, str], topic: str, queue_id: int) -> str | None:
        """Make ``props`` (a half message's, changed in place) those of its record in the half
        topic; the refusal's detail (MESSAGE_ILLEGAL) or ``None``."""
        if not props.get(PGROUP):
            return "a transactional message needs its producer group (property PGROUP)"
        for name in _DELAY_NAMES:
            if name in props:
                return f"a transactional message cannot be delayed or timed (property {name})"
        if not props.get(UNIQ_KEY):
            props[UNIQ_KEY] = self._ids.next(self.broker.clock.wall_ms())
        props.pop(REAL_TOPIC, None)
        props.pop(REAL_QID, None)
        props[REAL_TOPIC] = topic
        props[REAL_QID] = str(queue_id)
        if not self._half_topic_made:  # (once: a lookup under the topics' lock per message costs ~10 us)
            self.broker.topics.create_system(HALF_TOPIC)
            self._half_topic_made = True
        return None

    # --------------------------------------------------------- END_TRANSACTION
    def handle(
        self, broker: Broker, peer: Peer, req: RemotingCommand
    ) -> RemotingCommand | asyncio.Future[RemotingCommand | None] | None:
        """END_TRANSACTION: refused at once, no answer (outcome unknown), or a future."""
        if broker.config.slave:
            return req.reply(
                ResponseCode.SLAVE_NOT_AVAILABLE, "Message store is slave mode, so end transaction is forbidden. "
            )
        header = EndTransactionHeader.read(req.ext_fields)  # a FieldError: SYSTEM_ERROR (dispatch)
        if header.commit_or_rollback == TRANSACTION_NOT_TYPE:
            log.warning(
                "producer %s ends transaction %s as unknown: left to the check-back", peer.remote, header.msg_id
            )
            return None  # Java answers nothing
        if broker.stopping:
            return req.reply(ResponseCode.SERVICE_NOT_AVAILABLE, STOPPING_REMARK)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand | None] = loop.create_future()
        self._pending.append(_End(req, header, fut))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._end_pending)
        return fut

    def _end_pending(self) -> None:
        self._scheduled = False
        ends, self._pending = self._pending, []
        try:
            self.end(ends)
        except Exception as exc:  # a bug of ours: every waiting request learns of it
            log.exception("END_TRANSACTION failed")
            for e in ends:
                if not e.future.done():
                    e.future.set_exception(exc)

    def end(self, ends: list[_End]) -> None:
        """End these requests' transactions with one read and one put (module docstring)."""
        offsets = np.fromiter((e.header.commit_log_offset for e in ends), np.int64, len(ends))
        queue_offsets = np.fromiter((e.header.tran_state_table_offset for e in ends), np.int64, len(ends))
        try:
            rows, found = self.store.wire.stored_rows(
                offsets,
                queue_offsets,
                topic=HALF_TOPIC,
                queue_id=0,
                drop=(REAL_TOPIC, REAL_QID),
                find=(PGROUP, UNIQ_KEY, REAL_TOPIC, REAL_QID),
            )
        except (StoreError, OSError) as exc:
            self._fail(ends, exc)
            return
        row_of = np.cumsum(found) - 1
        groups = rows.column(PGROUP).to_pylist()
        keys = rows.column(UNIQ_KEY).to_pylist()
        offsets_found = rows.column("commitLogOffset").to_pylist()
        decided: dict[str, str] = {}
        commit_rows: list[int] = []
        op_rows: list[int] = []
        op_keys: list[str] = []
        op_ends: list[str] = []
        accepted: list[_End] = []
        for i, e in enumerate(ends):  # per request: its checks and its transaction's state
            h = e.header
            want = COMMIT if h.commit_or_rollback == TRANSACTION_COMMIT_TYPE else ROLLBACK
            if not found[i]:
                _answer(e, e.request.reply(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed"))
                continue
            r = int(row_of[i])
            if groups[r] != h.producer_group:
                _answer(e, e.request.reply(ResponseCode.SYSTEM_ERROR, "The producer group wrong"))
                continue
            key = keys[r] or f"@{offsets_found[r]}"
            prior = decided.get(key) or self.resolved.get(key)
            if prior is not None:
                if prior == want:
                    _answer(e, e.request.reply(ResponseCode.SUCCESS, f"transaction already {_PAST[prior]}"))
                else:
                    _answer(
                        e,
                        e.request.reply(
                            ResponseCode.SYSTEM_ERROR,
                            f"transaction {key} was already {_PAST[prior]}: it cannot be {_PAST[want]} now",
                        ),
                    )
                continue
            decided[key] = want
            op_rows.append(r)
            op_keys.append(key)
            op_ends.append(want)
            if want == COMMIT:
                commit_rows.append(r)
            accepted.append(e)
        if not accepted:
            return
        try:
            table = pa.concat_tables(
                [
                    committed_rows(rows.take(pa.array(commit_rows, pa.int64()))),
                    op_records(
                        rows.column("queueOffset").take(pa.array(op_rows, pa.int64())),
                        op_keys,
                        op_ends,
                        self.broker.clock.wall_ms(),
                    ),
                ]
            ).combine_chunks()  # one chunk: the put's fast path keeps a one-chunk properties column as sent
            self.broker.topics.create_system(OP_TOPIC)
            self.store.wire.put_wire(table, system=True, wait_flush=False)  # (the flush: _settle, off the loop)
        except InvalidMessageError as exc:
            if len(accepted) > 1:  # one bad half must not fail the others ended with it
                for e in accepted:
                    self.end([e])
                return
            self._fail(accepted, exc)
            return
        except (StoreError, OSError, pa.ArrowInvalid) as exc:
            self._fail(
                accepted,
                exc
                if not isinstance(exc, pa.ArrowInvalid)
                else InvalidMessageError(f"a half message's REAL_QID: {exc}", row=None, field="properties"),
            )
            return
        self.resolved.update(decided)
        self.committed += len(commit_rows)
        self.rolled_back += len(op_rows) - len(commit_rows)
        replication = self.broker.replication
        replication.appended()
        # what a slave must hold under SYNC_MASTER: the put's end (every row of it is below)
        self._settle(accepted, self.store.published_tail() if replication.sync_master else 0)

    def _settle(self, ends: list[_End], end: int) -> None:
        """Answer SUCCESS: now; under SYNC_FLUSH once a flush after the put returned; and under
        SYNC_MASTER (``end`` > 0) once a slave holds ``end``, ``slaveTimeout`` at most. Java's
        ``EndTransactionProcessor`` stores the op message (and a commit's message) with
        ``putMessage``, which waits for the slave as a send does (``submitReplicaRequest``; the
        op message has no ``WAIT=false``), and answers SUCCESS whatever that wait gave
        (``sendFinalMessage``: FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE are successes)."""

        def answer() -> None:
            for e in ends:
                _answer(e, e.request.reply(ResponseCode.SUCCESS, None))

        def replicated(f: asyncio.Future[int] | None = None) -> None:
            if f is not None and f.exception() is not None:  # stored; its flush failed: Java answers
                log.error("flush after END_TRANSACTION failed: %s", f.exception())  # SUCCESS too
            if not end:
                answer()
                return
            gated = self.broker.replication.gate(ends[0].request.reply(ResponseCode.SUCCESS, None), end)
            if isinstance(gated, RemotingCommand):
                _slave_outcome(gated)
                answer()
                return

            def waited(g: asyncio.Future[RemotingCommand]) -> None:
                _slave_outcome(g.result() if not g.cancelled() and g.exception() is None else None)
                answer()

            gated.add_done_callback(waited)

        if not self.broker.config.sync_flush:
            replicated()
            return
        task = asyncio.get_running_loop().run_in_executor(None, group_commit, self.store)
        task.add_done_callback(replicated)

    def _fail(self, ends: list[_End], exc: BaseException) -> None:
        code, remark = store_error_code(exc, self.broker.config.max_message_size)
        for e in ends:
            _answer(e, e.request.reply(code, remark))


def committed_rows(half: pa.Table) -> pa.Table:
    """The messages of committed half messages (:meth:`rmqlog.access.wire.WireCalls.stored_rows`' rows,
    with ``REAL_TOPIC``/``REAL_QID`` found and dropped) in their real topic and queue, sysFlag
    ``TRANSACTION_COMMIT`` (``endMessageTransaction``). Raises ``pa.ArrowInvalid`` for a
    ``REAL_QID`` that is no number (a damaged half)."""
    sys_flag = (np.asarray(half.column("sysFlag")) & ~SYSFLAG_TRANSACTION_MASK) | TRANSACTION_COMMIT_TYPE
    return pa.Table.from_arrays(
        [
            half.column(REAL_TOPIC),
            half.column(REAL_QID).cast(pa.int32()),
            half.column("body"),
            half.column("flag"),
            pa.array(sys_flag.astype(np.int32)),
            half.column("bornTimestamp"),
            half.column("bornHost"),
            half.column("properties"),
            half.column("reconsumeTimes"),
        ],
        schema=PUT_SCHEMA,
    )


def op_records(queue_offsets: pa.Array | pa.ChunkedArray, keys: list[str], ends: list[str], now_ms: int) -> pa.Table:
    """The op records of ended transactions (module docstring), one per half: body its queue
    offset as text, tag ``d``, the transaction's key and how it ended."""
    n = len(keys)
    head = property_item(PROPERTY_TAGS, REMOVE_TAG) + property_mark(TRANSACTION_ID)
    props = pc.binary_join_element_wise(
        head,
        pa.array(keys, pa.string()),
        PROPERTY_SEPARATOR + property_mark(TRAN_END),
        pa.array(ends, pa.string()),
        PROPERTY_SEPARATOR,
        "",
    )
    zeros = np.zeros(n, np.int32)
    return pa.Table.from_arrays(
        [
            pa.repeat(pa.scalar(OP_TOPIC), n),
            pa.array(zeros),
            pc.cast(queue_offsets, pa.string()).cast(pa.binary()),
            pa.array(zeros),
            pa.array(zeros),
            pa.array(np.full(n, now_ms, np.int64)),
            pa.nulls(n, pa.binary()),
            props,
            pa.array(zeros),
        ],
        schema=PUT_SCHEMA,
    )


def group_commit(store: MessageStore) -> int:
    """One sync covering every put so far (``MessageStore.wire.flush_to`` of the published tail: the
    commitlog range and the flushed position): run in a worker thread, never on the loop."""
    return int(store.wire.flush_to(store.published_tail()))


def _slave_outcome(gated: RemotingCommand | None) -> None:
    """Log an END_TRANSACTION's records no slave acknowledged (answered SUCCESS all the same)."""
    if gated is None or gated.code != ResponseCode.SUCCESS:
        what = (
            "no slave in reach"
            if gated is not None and gated.code == ResponseCode.SLAVE_NOT_AVAILABLE
            else "slaveTimeout"
        )
        log.warning("END_TRANSACTION under SYNC_MASTER: stored, not acknowledged by a slave (%s)", what)


def _answer(e: _End, reply: RemotingCommand | None) -> None:
    if not e.future.done():
        e.future.set_result(reply)
