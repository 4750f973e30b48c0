"""The POP revive (RocketMQ 5's ``PopReviveService``): unacked messages of checkpoints past
their invisible time stored again, to the group's POP retry topic with ``reconsumeTimes + 1`` or
to ``%DLQ%<group>`` past ``retryMaxTimes``; one read and one put a round, idempotent across a
crash (its intent logged first, its put under the store's idempotence marker). The same store
of records again takes an orderly pop's dead letters (:class:`rmqnet.broker.pop.PopService`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

import rmqlog
from rmqlog import send_back_table

from ..remoting.names import DLQ_PREFIX, RETRY_PREFIX, dlq_topic
from .pop_handle import normal_topic, pop_retry_topic
from .pop_state import Checkpoint, PopState
from .pop_sync import PopLogSync

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

#: the messages one revive round stores again at most (the rest: next round)
REVIVE_BATCH = 4096
#: the store's idempotence writer of the revive's puts (their sequence: the revive's)
REVIVE_WRITER = "rmqnet.pop.revive"
#: a group's ``retryMaxTimes`` when it has no config
DEFAULT_RETRY_MAX = 16


class PopRevive:
    """The revive of one broker's POP state; ``broker.pop.revive``."""

    def __init__(self, broker: Broker, state: PopState, sync: PopLogSync) -> None:
        self.broker = broker
        self.store = broker.store
        self.state = state
        self.sync = sync
        #: counters since start: messages revived to retry, dead-lettered
        self.revived = self.dead = 0

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
        n = self.store_again(offsets, retry, groups, sequence=seq) if len(offsets) else 0
        self.state.write([{"k": "done", "seq": seq, "ids": [ck.id for ck in due]}])
        return n

    def store_again(
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


def _normal(ck: Checkpoint) -> str:
    return normal_topic(ck.topic, ck.group)
