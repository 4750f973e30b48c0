"""The check-back of open transactions (RocketMQ 4.9.8's ``TransactionalMessageCheckService``,
``TransactionalMessageServiceImpl.check``, ``AbstractTransactionalMessageCheckListener``): a
broker service, ``run_once(now_ms)`` on the broker's clock, a round every
``transactionCheckInterval`` ms.

A round walks the half queue (``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0) from its progress (the
committed offset of group ``CID_RMQ_SYS_TRANS``, as Java keeps it) in windows, each decided in
whole columns:

- a half whose transaction was ended (:attr:`TransactionService.resolved`) is passed over;
- one already checked ``transactionCheckMax`` times (its ``TRANSACTION_CHECK_TIMES``; Java's
  ``needDiscard``) is discarded: a copy goes to ``TRANS_CHECK_MAX_TIME_TOPIC`` (Java's
  ``resolveDiscardMsg``) and, with it in the same put, an op record ``TRAN_END=DISCARD``, so a
  late commit of it is refused and a restart does not check it again;
- the walk stops at the first open half stored during this round or younger than
  ``transactionTimeOut`` (its ``CHECK_IMMUNITY_TIME_IN_SECONDS`` when it has one), Java's
  ``break``: every half after it is younger;
- every other open half is *renewed* (``putBackHalfMsgQueue``: a copy appended to the half
  queue with ``TRANSACTION_CHECK_TIMES`` one more) and checked back: CHECK_TRANSACTION_STATE
  (39, oneway) to a connection of a producer of its ``PGROUP`` (registered by heartbeats),
  header with the *renewed* half's offsets, body the renewed record with its real topic and
  queue (Java's ``sendCheckMessage``). A group with no connection: nothing is sent (Java logs
  "channel is null"), the half is renewed all the same and counted in :attr:`no_channel`; it
  is checked again next round, until discarded.

The renewals and discards of a window are one store put; the progress is committed after
it. A crash between the two re-walks the window after the restart: a half renewed twice has
two copies with one ``UNIQ_KEY``, and the transaction's identity is that key, so it is still
committed at most once (:mod:`rmqnet.broker.transactions`).
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqlog import StoreError

from ..remoting import RemotingCommand, RequestCode
from ..remoting.headers import CheckTransactionStateHeader
from ..remoting.names import PROPERTY_SEPARATOR, property_mark
from .transactions import (
    CHECK_GROUP,
    CHECK_IMMUNITY,
    CHECK_MAX_TOPIC,
    CHECK_TIMES,
    DISCARD,
    HALF_TOPIC,
    PGROUP,
    PUT_SCHEMA,
    REAL_QID,
    REAL_TOPIC,
    UNIQ_KEY,
    TransactionService,
    op_records,
)

if TYPE_CHECKING:
    from .broker import Broker
    from .peer import Peer

log = logging.getLogger(__name__)

#: half messages decided per store read and put
WINDOW = 1024
_MAGIC_V2 = 0xDAA320AB
_BORN_V6, _STORE_V6 = 0x10, 0x20


class TransactionCheckService:
    """``broker.transaction_check`` (module docstring), over ``transactions`` (the broker's
    :class:`TransactionService`, whose ended transactions it passes over). Counters: :attr:`rounds`,
    :attr:`checked` (check-backs sent), :attr:`no_channel` (renewed, no producer to ask),
    :attr:`discarded`."""

    def __init__(self, broker: Broker, transactions: TransactionService) -> None:
        self.broker = broker
        self.transactions = transactions
        self.next_ms: int | None = None
        self.rounds = self.checked = self.no_channel = self.discarded = 0
        self._rr = 0

    def run_once(self, now_ms: int) -> int:
        """A round when ``transactionCheckInterval`` passed since the last (the first call
        runs one); returns the half messages renewed or discarded."""
        config = self.broker.config
        if config.slave or self.broker.stopping:
            return 0
        if self.next_ms is not None and now_ms < self.next_ms:
            return 0
        self.next_ms = now_ms + config.transaction_check_interval
        return self.check(now_ms)

    def check(self, now_ms: int) -> int:
        """One round now (module docstring)."""
        store, offsets = self.broker.store, self.broker.consumer_offsets
        if self.broker.topics.get(HALF_TOPIC) is None:
            return 0
        self.rounds += 1
        lo, hi = store.min_offset(HALF_TOPIC, 0), store.max_offset(HALF_TOPIC, 0)
        start = max(lo, offsets.query(CHECK_GROUP, HALF_TOPIC, 0))
        done = 0
        while start < hi:
            table = store.read_queue(HALF_TOPIC, 0, start, min(hi, start + WINDOW))
            if not table.num_rows:
                break
            passed, n, stopped = self._window(table, now_ms)
            done += n
            start = int(table.column("queueOffset")[passed - 1].as_py()) + 1 if passed else start
            if passed:
                offsets.commit(CHECK_GROUP, HALF_TOPIC, 0, start)
            if stopped:
                break
        return done

    def _window(self, table: pa.Table, now_ms: int) -> tuple[int, int, bool]:
        """(rows passed, halves renewed or discarded, whether the walk stops here)."""
        config = self.broker.config
        props = table.column("properties")
        keys = pc.map_lookup(props, UNIQ_KEY, "last").to_pylist()
        resolved_map = self.transactions.resolved
        offsets = np.asarray(table.column("commitLogOffset"), np.int64)
        resolved = np.fromiter(
            ((k if k else f"@{o}") in resolved_map for k, o in zip(keys, offsets, strict=True)), bool, len(keys)
        )
        times_col = pc.map_lookup(props, CHECK_TIMES, "last")
        has_times = np.asarray(pc.is_valid(times_col))
        times = _ints(times_col, 0)
        discard = ~resolved & has_times & (times >= config.transaction_check_max)
        born = _ms(table.column("bornTimestamp"))
        stored = _ms(table.column("storeTimestamp"))
        immunity = _ints(pc.map_lookup(props, CHECK_IMMUNITY, "last"), -1)
        immune_ms = np.where(immunity == -1, config.transaction_time_out, immunity * 1000)
        age = now_ms - born
        young = ~resolved & ~discard & ((stored >= now_ms) | ((age >= 0) & (age < immune_ms)))
        stop = int(np.argmax(young)) if young.any() else len(young)
        check = ~resolved[:stop] & ~discard[:stop]
        todo = np.flatnonzero(check | discard[:stop])
        if len(todo):
            self._renew_and_discard(
                offsets[todo], np.asarray(table.column("queueOffset"), np.int64)[todo], discard[todo], times[todo]
            )
        return stop, len(todo), stop < len(young)

    def _renew_and_discard(
        self, offsets: np.ndarray, queue_offsets: np.ndarray, discard: np.ndarray, times: np.ndarray
    ) -> None:
        store, txn = self.broker.store, self.transactions
        rows, found = store.wire.stored_rows(
            offsets,
            queue_offsets,
            topic=HALF_TOPIC,
            queue_id=0,
            drop=(CHECK_TIMES,),
            find=(UNIQ_KEY, PGROUP, REAL_TOPIC, REAL_QID),
        )
        discard, times = discard[found], times[found]
        if not rows.num_rows:
            return
        renew = np.flatnonzero(~discard)
        gone = np.flatnonzero(discard)
        # times: the count this copy carries (Java: absent -> 1, else one more)
        next_times = pa.array((times + 1).astype(np.int64)).cast(pa.string())
        props = pc.binary_join_element_wise(
            rows.column("properties"), property_mark(CHECK_TIMES), next_times, PROPERTY_SEPARATOR, ""
        )
        stored_times = pa.array(times.astype(np.int64)).cast(pa.string())
        gone_props = pc.binary_join_element_wise(
            rows.column("properties"), property_mark(CHECK_TIMES), stored_times, PROPERTY_SEPARATOR, ""
        )
        base = [rows.column(f.name) for f in PUT_SCHEMA]
        renewed = pa.Table.from_arrays(base[:7] + [props] + base[8:], schema=PUT_SCHEMA).take(
            pa.array(renew, pa.int64())
        )
        parts = [renewed]
        keys = rows.column(UNIQ_KEY).to_pylist()
        gone_keys = [keys[i] or f"@{int(rows.column('commitLogOffset')[i].as_py())}" for i in gone]
        if len(gone):
            self.broker.topics.create_system(CHECK_MAX_TOPIC)
            copies = pa.Table.from_arrays(
                [pa.repeat(pa.scalar(CHECK_MAX_TOPIC), len(rows)), *base[1:7], gone_props, base[8]],
                schema=PUT_SCHEMA,
            ).take(pa.array(gone, pa.int64()))
            parts += [
                copies,
                op_records(
                    rows.column("queueOffset").take(pa.array(gone, pa.int64())),
                    gone_keys,
                    [DISCARD] * len(gone),
                    self.broker.clock.wall_ms(),
                ),
            ]
            self.broker.topics.create_system("RMQ_SYS_TRANS_OP_HALF_TOPIC")
        # no wait for a flush on the loop (the broker's own records: the next group commit, or
        # the flusher, covers them; Java's check service does not wait either)
        result = store.wire.put_wire(pa.concat_tables(parts).combine_chunks(), system=True, wait_flush=False)
        txn.resolved.update(dict.fromkeys(gone_keys, DISCARD))
        self.discarded += len(gone)
        self.broker.replication.appended()
        self._check_back(rows.take(pa.array(renew, pa.int64())), result.slice(0, len(renew)))

    def _check_back(self, halves: pa.Table, renewed: pa.Table) -> None:
        """CHECK_TRANSACTION_STATE for each renewed half (one request per transaction: the
        producer answers each with its own END_TRANSACTION)."""
        groups = halves.column(PGROUP).to_pylist()
        keys = halves.column(UNIQ_KEY).to_pylist()
        topics = halves.column(REAL_TOPIC).to_pylist()
        qids = halves.column(REAL_QID).to_pylist()
        new_offsets = renewed.column("commitLogOffset").to_pylist()
        new_queue_offsets = renewed.column("queueOffset").to_pylist()
        msg_ids = renewed.column("msgId").to_pylist()
        for group, key, topic, qid, offset, qoff, msg_id in zip(
            groups, keys, topics, qids, new_offsets, new_queue_offsets, msg_ids, strict=True
        ):
            peer = self._channel(group)
            if peer is None:
                self.no_channel += 1
                log.warning("Check transaction failed, channel is null. groupId=%s", group)
                continue
            try:
                record = self.broker.store.wire.record_at(offset)
            except StoreError:
                record = None
            if record is None:
                continue
            body = relabel(bytes(record.data), topic or "", int(qid or 0))
            header = CheckTransactionStateHeader(
                tran_state_table_offset=qoff,
                commit_log_offset=offset,
                msg_id=key,
                transaction_id=key,
                offset_msg_id=msg_id,
            )
            peer.send_oneway(
                RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, ext_fields=header.to_ext(), body=body)
            )
            self.checked += 1

    def _channel(self, group: str | None) -> Peer | None:
        """A live connection of a producer of ``group`` (Java's ``getAvailableChannel``), in turn."""
        clients = self.broker.consumers.producer_groups.get(group) if group else None
        live = [c.peer for c in (clients or {}).values() if not c.peer.closed]
        if not live:
            return None
        self._rr += 1
        return live[self._rr % len(live)]


def relabel(record: bytes, topic: str, queue_id: int) -> bytes:
    """A stored record with another topic and QUEUEID (TOTALSIZE fixed; body and its CRC as
    they are): the half message as its producer sent it, for the check-back's body."""
    (magic,) = struct.unpack_from(">I", record, 4)
    (sys_flag,) = struct.unpack_from(">i", record, 36)
    born = 20 if sys_flag & _BORN_V6 else 8
    store_host = 20 if sys_flag & _STORE_V6 else 8
    body_len_at = 48 + born + 8 + store_host + 4 + 8
    (body_len,) = struct.unpack_from(">i", record, body_len_at)
    topic_at = body_len_at + 4 + body_len
    width = 2 if magic == _MAGIC_V2 else 1
    old_len = int.from_bytes(record[topic_at : topic_at + width], "big")
    name = topic.encode()
    out = bytearray(record[:topic_at]) + len(name).to_bytes(width, "big") + name + record[topic_at + width + old_len :]
    struct.pack_into(">i", out, 0, len(out))
    struct.pack_into(">i", out, 12, queue_id)
    return bytes(out)


def _ints(col: pa.Array | pa.ChunkedArray, default: int) -> np.ndarray:
    """A string column as int64, ``default`` where null or no integer."""
    text = pc.fill_null(col, str(default))
    ok = pc.match_substring_regex(text, r"^-?[0-9]{1,18}$")
    return np.asarray(pc.if_else(ok, text, str(default)).cast(pa.int64()), np.int64)


def _ms(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A timestamp column (the message table's, microseconds) as int64 ms."""
    return np.asarray(col.cast(pa.int64()), np.int64) // 1000
