"""Queue locks for orderly consumption: LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42), RocketMQ
4.9.8's ``RebalanceLockManager`` and ``AdminBrokerProcessor.lockBatchMQ``/``unlockBatchMQ``.

An orderly consumer (Java's ``ConsumeMessageOrderlyService``, the C++ client's orderly
``PushConsumer``) locks each queue its rebalance gives it on the queue's broker before it pulls,
renews the lock every 20 s, and unlocks the queues it gives up: within a group, each queue is
consumed by one client at a time.

Bodies (fastjson, keys sorted; a queue is a ``MessageQueue``)::

    41 request   {"clientId": str, "consumerGroup": str,
                  "mqSet": [{"brokerName": str, "queueId": int, "topic": str}, ...]}
    41 answer    {"lockOKMQSet": [MessageQueue, ...]}     the queues the client holds now
    42 request   as 41's; answered SUCCESS, no body

The table: group -> queue (topic, brokerName, queueId) -> (client id, last update, wall ms
on the broker's clock). A lock request for a queue

- nobody holds, or this client holds: granted, its time renewed;
- another client holds, last renewed more than :data:`LOCK_MAX_LIVE_MS` ago (60 s,
  ``rocketmq.broker.rebalance.lockMaxLiveTime``): taken over, granted;
- another client holds, renewed within that time: left out of the answer (refused).

An unlock removes the queues this client holds; those another client holds, or nobody,
are left as they are (Java logs them). Locks live in memory only: a restarted broker has
none, and clients lock again within their 20 s renewal, as with RocketMQ.

Bounds (ours; Java's table keeps every lock it ever granted until the same queue is locked
again): the table is a broker service (:meth:`QueueLocks.run_once`): each round drops the
locks not renewed for 60 s, and a group left without locks, at a cost proportional to what it
drops (the locks are kept in the order of their last renewal); and it holds at most
``queueLockMaxNums`` (200,000) locks: a request for a queue nobody holds, past that, leaves the
queue out of its answer, as a queue another client holds (the client tries again at its next
rebalance).

Names from the wire are checked (the group as :func:`rmqlog.paths.validate_group`, topics as
:func:`rmqlog.paths.validate_topic`, queue ids 0..2^31-1, a non-empty client id): a body that
is not one of these is ``SYSTEM_ERROR`` naming what is wrong, and nothing is locked or
unlocked. Java checks none of them (a null client id fails with a NullPointerException).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import rmqlog
from rmqlog.paths import validate_group, validate_topic

from ..remoting import RemotingCommand, ResponseCode
from ..remoting.admin_bodies import QueueKey
from ..remoting.group_bodies import LockBatchBody, LockBodyError, encode_lock_ok
from .peer import Peer

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

#: ``RebalanceLockManager.REBALANCE_LOCK_MAX_LIVE_TIME`` (ms)
LOCK_MAX_LIVE_MS = 60_000
#: ``queueLockMaxNums``'s default: the most locks the table holds
QUEUE_LOCK_MAX_NUMS = 200_000


#: a ``MessageQueue`` as the lock table keys it (topic, brokerName, queueId)
LockedQueue = QueueKey


@dataclass(frozen=True, slots=True)
class LockBatchRequest:
    """A 41/42 body (:class:`~rmqnet.remoting.group_bodies.LockBatchBody`) with its names
    checked as the store's: the group, each queue's topic."""

    group: str
    client_id: str
    queues: tuple[LockedQueue, ...]

    @staticmethod
    def decode(body: bytes) -> LockBatchRequest:
        """Parse and check a 41/42 body; :class:`LockBodyError` naming what is wrong."""
        b = LockBatchBody.decode(body)
        try:
            group = validate_group(b.consumer_group)
        except rmqlog.StoreError as exc:
            raise LockBodyError(f"consumerGroup: {exc}") from None
        for q in b.mq_set:
            try:
                validate_topic(q.topic)
            except rmqlog.StoreError as exc:
                raise LockBodyError(f"mqSet[].topic: {exc}") from None
        return LockBatchRequest(group, b.client_id, b.mq_set)


@dataclass(slots=True)
class _Entry:
    client_id: str
    last_update_ms: int


class QueueLocks:
    """The lock table of one broker (``RebalanceLockManager``); thread-safe. Times are the
    caller's (the broker's clock), so tests move time without sleeping."""

    def __init__(self, max_live_ms: int = LOCK_MAX_LIVE_MS) -> None:
        self.max_live_ms = max_live_ms
        self._groups: dict[str, dict[LockedQueue, _Entry]] = {}
        #: every lock by (group, queue), least recently renewed first (what a round drops)
        self._order: OrderedDict[tuple[str, LockedQueue], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        #: locks not granted because the table was full (a statistic)
        self.refused = 0

    def __len__(self) -> int:
        """How many locks the table holds (expired ones not dropped yet included)."""
        return len(self._order)

    def _expired(self, entry: _Entry, now_ms: int) -> bool:
        return now_ms - entry.last_update_ms > self.max_live_ms

    def try_lock(
        self, group: str, queues: tuple[LockedQueue, ...], client_id: str, now_ms: int, cap: int = QUEUE_LOCK_MAX_NUMS
    ) -> list[LockedQueue]:
        """``tryLockBatch``: the queues of ``queues`` that ``client_id`` holds once this returns
        (granted, renewed or taken over), in the order given. A queue nobody holds is not
        granted while the table holds ``cap`` locks."""
        granted = []
        with self._lock:
            table = self._groups.setdefault(group, {})
            for mq in queues:
                entry = table.get(mq)
                if entry is None:
                    if len(self._order) >= cap:
                        self.refused += 1
                        continue
                    entry = table[mq] = _Entry(client_id, now_ms)
                    self._order[(group, mq)] = entry
                    log.info(
                        "tryLockBatch, message queue not locked, I got it. Group: %s NewClientId: %s %s",
                        group,
                        client_id,
                        mq,
                    )
                elif entry.client_id == client_id:
                    entry.last_update_ms = now_ms
                    self._order.move_to_end((group, mq))
                elif self._expired(entry, now_ms):
                    log.warning(
                        "tryLockBatch, message queue lock expired, I got it. Group: %s OldClientId: %s "
                        "NewClientId: %s %s",
                        group,
                        entry.client_id,
                        client_id,
                        mq,
                    )
                    entry.client_id, entry.last_update_ms = client_id, now_ms
                    self._order.move_to_end((group, mq))
                else:
                    continue
                granted.append(mq)
            if not table:
                del self._groups[group]
        return granted

    def unlock(self, group: str, queues: tuple[LockedQueue, ...], client_id: str) -> int:
        """``unlockBatch``: the queues ``client_id`` holds are freed; how many."""
        freed = 0
        with self._lock:
            table = self._groups.get(group)
            if table is None:
                return 0
            for mq in queues:
                entry = table.get(mq)
                if entry is not None and entry.client_id == client_id:
                    del table[mq]
                    del self._order[(group, mq)]
                    freed += 1
            if not table:
                del self._groups[group]
        return freed

    def run_once(self, now_ms: int) -> int:
        """Drop the locks not renewed for ``max_live_ms`` before ``now_ms`` (nobody holds
        them: :meth:`holder` says so already), and the groups left without one; returns how
        many. Stops at the first lock still alive: the cost is what it drops."""
        dropped = 0
        with self._lock:
            order = self._order
            while order:
                (group, mq), entry = next(iter(order.items()))
                if not self._expired(entry, now_ms):
                    break
                del order[(group, mq)]
                table = self._groups[group]
                del table[mq]
                if not table:
                    del self._groups[group]
                dropped += 1
        return dropped

    def holder(self, group: str, mq: LockedQueue, now_ms: int) -> str | None:
        """The client holding ``mq`` for ``group`` now (an expired lock: nobody)."""
        with self._lock:
            entry = self._groups.get(group, {}).get(mq)
            return None if entry is None or self._expired(entry, now_ms) else entry.client_id

    def locked(self, group: str, now_ms: int) -> dict[LockedQueue, str]:
        """The group's queues held now, and by whom."""
        with self._lock:
            table = self._groups.get(group, {})
            return {mq: e.client_id for mq, e in table.items() if not self._expired(e, now_ms)}


def lock_batch_mq(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    try:
        body = LockBatchRequest.decode(req.body_bytes())
    except LockBodyError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    granted = broker.queue_locks.try_lock(
        body.group, body.queues, body.client_id, broker.clock.wall_ms(), broker.config.queue_lock_max_nums
    )
    answer = encode_lock_ok(granted)
    return req.reply(ResponseCode.SUCCESS, None, None, answer)


def unlock_batch_mq(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    try:
        body = LockBatchRequest.decode(req.body_bytes())
    except LockBodyError as exc:
        return req.reply(ResponseCode.SYSTEM_ERROR, str(exc))
    broker.queue_locks.unlock(body.group, body.queues, body.client_id)
    return req.reply(ResponseCode.SUCCESS)
