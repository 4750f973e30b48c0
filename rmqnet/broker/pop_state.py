"""POP consumption's state: checkpoints in flight, acks, each group's position, and their
records in the store's POP checkpoint log (:class:`rmqlog.PopLog`, ``<root>/pop/checkpoints.log``).

A **checkpoint** (RocketMQ 5's ``PopCheckPoint``) is one pop of one queue: the group, the
topic read (the topic or its POP retry topic), the queue, the offset the pop read from
(``start``), ``popTime``, ``invisibleTime``, the queue offsets and commitlog offsets of the
messages handed out, which of them are acked, and for an orderly pop each message's attempt
count. It lives until every message is acked, or (not orderly) until its invisible time has
passed and the revive redelivered what was not acked (:mod:`rmqnet.broker.pop`).

The log's records (JSON objects, one a line; written before the answer that depends on them):

(``k``: fields; meaning)
- ``ck``: ``id g t q s p i o c n``, ``f`` (orderly), ``a`` (attempts), ``d`` (acked indexes), ``h`` (indexes not handed
  out by this pop), ``x`` (replaces); a checkpoint: group, topic, queue, start, popTime, invisibleTime, queue offsets,
  commitlog offsets; ``n`` the queue's position after the pop
- ``ack``: ``id x``; the indexes ``x`` of checkpoint ``id`` acked
- ``inv``: ``id i``; an orderly checkpoint's invisibleTime moved (ChangeInvisibleTime of an orderly handle)
- ``rv``: ``seq ids``; a revive begun: the checkpoints whose unacked messages are being stored again, under the store's
  idempotence marker with sequence ``seq`` (they take no ack from now on)
- ``done``: ``seq ids``; that revive done: the checkpoints forgotten
- ``pos``: ``g t q n``; a position moved without a checkpoint (units scanned past by a filter)

Replaying the log in order gives the state as it was after the last whole record: a
checkpoint whose messages are all acked is dropped, a replaced one (an orderly queue popped
again after its batch expired) too. Compaction (:meth:`PopState.compact`) rewrites the log as
one ``pos`` record per position and one ``ck`` record per live checkpoint once the log holds
more than four times as many records as that (and at least :data:`COMPACT_MIN`): its cost is
paid by the appends since the last one.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rmqlog import PopLog

#: a log shorter than this is never compacted
COMPACT_MIN = 4096
#: heap entries left behind by checkpoints gone early are dropped past this slack
HEAP_SLACK = 1024

#: (group, topic, queue id)
QueueKey = tuple[str, str, int]


@dataclass(slots=True, eq=False)
class Checkpoint:
    """One pop of one queue (see the module docstring)."""

    id: int
    group: str
    topic: str
    queue_id: int
    start: int
    pop_time: int
    invisible: int
    offsets: np.ndarray  # int64 queue offsets, ascending
    commit_offsets: np.ndarray  # int64 commitlog offsets, same order
    next_offset: int  # the queue's position after the pop
    order: bool = False
    attempts: np.ndarray | None = None  # orderly: each message's reconsume count (0: first delivery)
    acked: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    #: orderly: which messages this pop handed out (the others: an earlier batch's, still due)
    handed: np.ndarray | None = None
    left: int = 0

    def __post_init__(self) -> None:
        if len(self.acked) != len(self.offsets):
            self.acked = np.zeros(len(self.offsets), bool)
        self.left = int(len(self.offsets) - self.acked.sum())

    def blocks(self, now_ms: int) -> bool:
        """An orderly batch blocks its queue while a message it handed out is unacked and
        its invisible time has not passed (RocketMQ's ``checkBlock``)."""
        if now_ms >= self.deadline:
            return False
        waiting = ~self.acked if self.handed is None else ~self.acked & self.handed
        return bool(waiting.any())

    @property
    def deadline(self) -> int:
        """When its unacked messages become visible again (wall ms)."""
        return self.pop_time + self.invisible

    @property
    def queue(self) -> QueueKey:
        return (self.group, self.topic, self.queue_id)

    def index_of(self, offset: int) -> int:
        """The index of the message at queue offset ``offset``, or -1."""
        n = len(self.offsets)
        i = offset - self.start
        if 0 <= i < n and self.offsets[i] == offset:  # the usual batch: consecutive offsets from start
            return i
        i = int(np.searchsorted(self.offsets, offset))
        return i if i < n and int(self.offsets[i]) == offset else -1

    def record(self, replaces: int | None = None) -> dict[str, Any]:
        """Its ``ck`` record (acked indexes and attempts included)."""
        rec: dict[str, Any] = {
            "k": "ck",
            "id": self.id,
            "g": self.group,
            "t": self.topic,
            "q": self.queue_id,
            "s": self.start,
            "p": self.pop_time,
            "i": self.invisible,
            "o": self.offsets.tolist(),
            "c": self.commit_offsets.tolist(),
            "n": self.next_offset,
        }
        if self.order:
            rec["f"] = 1
            rec["a"] = (self.attempts if self.attempts is not None else np.zeros(len(self.offsets), np.int64)).tolist()
        if self.left < len(self.offsets):
            rec["d"] = np.flatnonzero(self.acked).tolist()
        if self.handed is not None and not self.handed.all():
            rec["h"] = np.flatnonzero(~self.handed).tolist()
        if replaces is not None:
            rec["x"] = replaces
        return rec

    @staticmethod
    def of_record(rec: dict[str, Any]) -> Checkpoint:
        offsets = np.asarray(rec["o"], np.int64)
        acked = np.zeros(len(offsets), bool)
        if rec.get("d"):
            acked[np.asarray(rec["d"], np.int64)] = True
        attempts = np.asarray(rec["a"], np.int64) if rec.get("f") else None
        handed = None
        if rec.get("h"):
            handed = np.ones(len(offsets), bool)
            handed[np.asarray(rec["h"], np.int64)] = False
        return Checkpoint(
            int(rec["id"]),
            rec["g"],
            rec["t"],
            int(rec["q"]),
            int(rec["s"]),
            int(rec["p"]),
            int(rec["i"]),
            offsets,
            np.asarray(rec["c"], np.int64),
            int(rec["n"]),
            bool(rec.get("f")),
            attempts,
            acked,
            handed,
        )


class PopState:
    """The checkpoints and positions of one broker, over its log (see the module docstring).
    Changes are made in two steps: the caller builds records, :meth:`write` appends them
    (one write; the state changes only once it succeeded) and applies them."""

    def __init__(self, log: PopLog) -> None:
        self.log = log
        self.cks: dict[int, Checkpoint] = {}
        #: (group, topic, queue, popTime) -> the checkpoints of that pop (a handle names these)
        self.by_time: dict[tuple[str, str, int, int], list[int]] = {}
        #: an orderly queue's checkpoint in flight
        self.order_inflight: dict[QueueKey, int] = {}
        self.positions: dict[QueueKey, int] = {}
        self._heap: list[tuple[int, int]] = []
        self.next_id = 1
        #: revives logged (``rv``) and not done: sequence -> checkpoint ids; their checkpoints
        #: take no ack (they are being stored again)
        self.pending: dict[int, list[int]] = {}
        self.reviving: set[int] = set()
        #: the next revive's sequence (the store's idempotence marker of its put)
        self.revive_seq = 1

    def load(self) -> int:
        """Replay the log (see the module docstring); returns the records read. Raises
        what :meth:`rmqlog.PopLog.load` raises."""
        records = self.log.load()
        self._apply(records)
        return len(records)

    def new_id(self) -> int:
        nid = self.next_id
        self.next_id += 1
        return nid

    def write(self, records: list[dict[str, Any]], made: Iterable[Checkpoint] = ()) -> None:
        """Append ``records`` to the log, then apply them (``made``: the checkpoints the
        ``ck`` records were made from, taken as they are). Raises the log's errors (a full
        disk: :class:`rmqlog.DiskFullError`); nothing changes then."""
        if not records:
            return
        self.log.append(records)
        self._apply(records, {ck.id: ck for ck in made})

    def _apply(self, records: Iterable[dict[str, Any]], made: dict[int, Checkpoint] | None = None) -> None:
        for rec in records:
            kind = rec.get("k")
            if kind == "ck":
                ck = made.get(rec["id"]) if made else None
                if ck is None:
                    ck = Checkpoint.of_record(rec)
                self.next_id = max(self.next_id, ck.id + 1)
                replaced = rec.get("x")
                if replaced is not None:
                    self._forget(int(replaced))
                q = ck.queue
                if ck.next_offset > self.positions.get(q, -1):
                    self.positions[q] = ck.next_offset
                if ck.left:
                    self._add(ck)
            elif kind == "ack":
                ck_ = self.cks.get(int(rec["id"]))
                if ck_ is not None:
                    idx = np.asarray(rec["x"], np.int64)
                    ck_.acked[idx] = True
                    ck_.left = int(len(ck_.offsets) - ck_.acked.sum())
                    if not ck_.left:
                        self._forget(ck_.id)
            elif kind == "inv":
                ck_ = self.cks.get(int(rec["id"]))
                if ck_ is not None:
                    ck_.invisible = int(rec["i"])
            elif kind == "rv":
                seq = int(rec["seq"])
                ids = [int(c) for c in rec["ids"]]
                self.pending[seq] = ids
                self.reviving.update(ids)
                self.revive_seq = max(self.revive_seq, seq + 1)
            elif kind == "done":
                ids = [int(c) for c in rec["ids"]]
                for cid in ids:
                    self._forget(cid)
                self.reviving.difference_update(ids)
                if "seq" in rec:
                    self.pending.pop(int(rec["seq"]), None)
                    self.revive_seq = max(self.revive_seq, int(rec["seq"]) + 1)
            elif kind == "pos":
                q = (rec["g"], rec["t"], int(rec["q"]))
                if int(rec["n"]) > self.positions.get(q, -1):
                    self.positions[q] = int(rec["n"])

    def _add(self, ck: Checkpoint) -> None:
        self.cks[ck.id] = ck
        self.by_time.setdefault((ck.group, ck.topic, ck.queue_id, ck.pop_time), []).append(ck.id)
        if ck.order:
            self.order_inflight[ck.queue] = ck.id
        else:
            heapq.heappush(self._heap, (ck.deadline, ck.id))

    def _forget(self, cid: int) -> None:
        ck = self.cks.pop(cid, None)
        if ck is None:
            return
        key = (ck.group, ck.topic, ck.queue_id, ck.pop_time)
        ids = self.by_time.get(key)
        if ids is not None:
            ids.remove(cid)
            if not ids:
                del self.by_time[key]
        if ck.order and self.order_inflight.get(ck.queue) == cid:
            del self.order_inflight[ck.queue]

    def find(self, group: str, topic: str, queue_id: int, pop_time: int, offset: int) -> tuple[Checkpoint, int] | None:
        """The checkpoint in flight that handed out ``offset`` of the queue at ``pop_time``
        and the message's index in it: one where it is not acked if there is one (a message
        whose invisible time changed twice in one millisecond is in two), else an acked one,
        else ``None``."""
        acked: tuple[Checkpoint, int] | None = None
        for cid in self.by_time.get((group, topic, queue_id, pop_time), ()):
            if cid in self.reviving:
                continue
            ck = self.cks[cid]
            i = ck.index_of(offset)
            if i >= 0:
                if not ck.acked[i]:
                    return ck, i
                acked = (ck, i)
        return acked

    def due(self, now_ms: int, limit: int) -> list[Checkpoint]:
        """Checkpoints (not orderly, not being revived) whose invisible time has passed by
        ``now_ms``, at most ``limit`` messages' worth (at least one checkpoint), earliest
        first; taken off the heap (the caller logs their revive)."""
        out: list[Checkpoint] = []
        taken = 0
        while self._heap and self._heap[0][0] <= now_ms and (not out or taken < limit):
            _, cid = heapq.heappop(self._heap)
            ck = self.cks.get(cid)
            if ck is not None and cid not in self.reviving:
                out.append(ck)
                taken += ck.left
        return out

    @property
    def live_records(self) -> int:
        return len(self.cks) + len(self.positions) + len(self.pending)

    def compact(self, *, force: bool = False) -> bool:
        """Rewrite the log as the state now when it holds more than four times the records
        the state needs (see the module docstring); also drop stale heap entries. Returns
        whether it rewrote. Raises the log's errors (the old log stays then)."""
        if len(self._heap) > 2 * len(self.cks) + HEAP_SLACK:
            self._heap = [e for e in self._heap if e[1] in self.cks]
            heapq.heapify(self._heap)
        live = self.live_records
        if not force and (self.log.records < COMPACT_MIN or self.log.records <= 4 * live):
            return False
        records: list[dict[str, Any]] = [
            {"k": "pos", "g": g, "t": t, "q": q, "n": n} for (g, t, q), n in self.positions.items()
        ]
        records += [ck.record() for ck in self.cks.values()]
        records += [{"k": "rv", "seq": seq, "ids": ids} for seq, ids in self.pending.items()]
        if not self.pending and self.revive_seq > 1:  # (the sequence goes on after a compaction)
            records.append({"k": "done", "seq": self.revive_seq - 1, "ids": []})
        self.log.rewrite(records)
        return True

    def inflight(self, group: str | None = None) -> int:
        """Messages handed out and not acked (of ``group``, or of every group)."""
        return sum(ck.left for ck in self.cks.values() if group is None or ck.group == group)

    def inflight_of(self, group: str, topics: Iterable[str]) -> list[tuple[Checkpoint, np.ndarray]]:
        """``group``'s checkpoints of ``topics`` with messages handed out and not acked, each
        with those messages' indexes (an orderly batch's messages of an earlier pop left out),
        by topic, queue and start."""
        wanted = set(topics)
        out = []
        for ck in self.cks.values():
            if ck.group != group or ck.topic not in wanted or not ck.left:
                continue
            waiting = ~ck.acked if ck.handed is None else ~ck.acked & ck.handed
            if waiting.any():
                out.append((ck, np.flatnonzero(waiting)))
        out.sort(key=lambda item: (item[0].topic, item[0].queue_id, item[0].start, item[0].id))
        return out


__all__ = ["Checkpoint", "PopState", "QueueKey", "COMPACT_MIN"]
