"""The broker's figures (RocketMQ 5's ``BrokerMetricsManager``), kept in place for a scrape of
``/metrics`` and for any other reader (the console, ``rmqlog broker-status`` through
GET_BROKER_RUNTIME_INFO's ``putTps``/``getTransferedTps``).

:class:`BrokerMetrics` (``broker.metrics``) holds two kinds of figures:

- **counted on the request path**, on the event loop, a few integer adds per request and no
  lock: messages and body bytes stored per (topic, message type) with the message size
  histogram (:meth:`BrokerMetrics.on_send`, one call per send request: a batch's average size
  is recorded once, as RocketMQ records it), messages and bytes pulled per (topic, group) and
  the last pulled offset per queue (:meth:`BrokerMetrics.on_pull`), the answers' latency by
  request and response code (:attr:`BrokerMetrics.rpc`, fed by the transport);
- **computed when read** (:meth:`BrokerMetrics.store_figures`, :meth:`BrokerMetrics.lag`),
  cached for :data:`CACHE_MS` on the broker's clock: the storage figures (the store volume's
  used bytes, flush and dispatch behind bytes) and every group's lag, in-flight and ready
  messages and lag latency per topic. Their cost is bounded: the lag reads each topic's queue
  ends once (one ``max_offset`` per queue) and walks the offset table's entries, at most
  :data:`LAG_MAX_SERIES` (topic, group) pairs (the rest left out, counted in
  :attr:`Lag.dropped`); the lag latency reads one unit and record per queue with a lag, at
  most :data:`LATENCY_MAX_READS` per computation (past that the latency of the remaining
  pairs is left out).

A reader on another thread (the exporter's HTTP thread) gets copies: a ``dict.copy()`` is one
C call under the GIL, so it never sees an entry half made; counters read a moment apart may
differ by the sends in between, as any scrape's do.

:class:`RateSampler` (a broker service, ``run_once(now_ms)``) samples the stored and pulled
totals every second for ten minutes: RocketMQ's ``putTps`` and ``getTransferedTps`` over 10 s,
1 min and 10 min.
"""

from __future__ import annotations

import shutil
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import rmqlog

from ..metrics import RpcLatency
from ..remoting.names import (
    DLQ_PREFIX,
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_SHARDING_KEY,
    PROPERTY_START_DELIVER_TIME,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    RETRY_PREFIX,
    property_mark,
)
from .admin import is_system_topic

if TYPE_CHECKING:
    from .broker import Broker

#: RocketMQ 5's buckets of ``rocketmq_message_size`` (bytes): 1 KiB, 4 KiB, 512 KiB, 1, 2, 4 MiB
MESSAGE_SIZE_BUCKETS = (1024.0, 4096.0, 512 * 1024.0, 1024 * 1024.0, 2 * 1024 * 1024.0, 4 * 1024 * 1024.0)
#: how long figures computed at read time are kept (ms, the broker's clock)
CACHE_MS = 5000
#: (topic, group) pairs whose lag one computation reports at most
LAG_MAX_SERIES = 10_000
#: queue reads (one unit and its record each, ~0.1 ms) one lag computation makes at most for lag latency
LATENCY_MAX_READS = 256
#: message types (RocketMQ 5's ``TopicMessageType.getMetricsValue``)
NORMAL, FIFO, DELAY, TRANSACTION = "normal", "fifo", "delay", "transaction"
_DELAY_MARKS = tuple(
    property_mark(n)
    for n in (
        PROPERTY_DELAY,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_TIMER_DELAY_SEC,
        PROPERTY_TIMER_DELAY_MS,
        PROPERTY_START_DELIVER_TIME,
    )
)
_SHARDING_MARK = property_mark(PROPERTY_SHARDING_KEY)


def message_type(properties: str, half: bool) -> str:
    """RocketMQ 5's message type of a send from its properties string (a few substring
    searches, no parse): a half message ``transaction``, a delay level or timer ``delay``, a
    sharding key ``fifo``, else ``normal``."""
    if half:
        return TRANSACTION
    if NAME_VALUE_SEPARATOR not in properties:
        return NORMAL
    for mark in _DELAY_MARKS:
        if mark in properties:
            return DELAY
    return FIFO if _SHARDING_MARK in properties else NORMAL


@dataclass
class Lag:
    """A lag computation: per (topic, group), ``[lag messages, in-flight, ready, lag latency ms
    (-1: not computed)]``, whether the topic or group is a system one, and the pairs left out."""

    rows: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    system: dict[tuple[str, str], bool] = field(default_factory=dict)
    dropped: int = 0
    latency_skipped: int = 0


@dataclass
class StoreFigures:
    """The storage figures (bytes): the store volume's used bytes (RocketMQ 5's
    ``rocketmq_storage_size``: total minus free of the store root's file system), the
    commitlog's published tail, what is published but not flushed, and not dispatched."""

    storage_size: int
    commitlog_max_offset: int
    flush_behind: int
    dispatch_behind: int


class BrokerMetrics:
    """The figures of ``broker`` (see the module docstring); ``broker.metrics``."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        #: answers by request and response code (fed by the transport: rmqnet.transport.connection)
        self.rpc = RpcLatency()
        #: (topic, message type) -> [messages, body bytes, size bucket counts (7), sum of sizes]
        self.sends: dict[tuple[str, str], list[int]] = {}
        #: (topic, group) -> [messages, bytes]
        self.pulls: dict[tuple[str, str], list[int]] = {}
        #: (group, topic, queue id) -> the next offset after the last pull's messages
        self.pulled: dict[tuple[str, str, int], int] = {}
        #: messages pulled since start (``getTransferedTps``)
        self.get_total = 0
        self._system: dict[str, bool] = {}
        self._store: tuple[int, StoreFigures] | None = None
        self._lag: tuple[int, Lag] | None = None

    # ------------------------------------------------------- the request path
    def on_send(self, topic: str, kind: str, count: int, nbytes: int) -> None:
        """``count`` messages of ``body`` bytes in all stored by one send request to ``topic``
        (``%RETRY%`` and ``%DLQ%`` topics are not counted, as RocketMQ 5 counts them not)."""
        key = (topic, kind)
        cell = self.sends.get(key)
        if cell is None:
            if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
                return
            cell = self.sends[key] = [0] * (3 + len(MESSAGE_SIZE_BUCKETS) + 1)
        cell[0] += count
        cell[1] += nbytes
        size = nbytes // count if count else 0
        cell[2 + bisect_left(MESSAGE_SIZE_BUCKETS, size)] += 1
        cell[-1] += size

    def on_pull(self, topic: str, group: str, queue_id: int, count: int, nbytes: int, next_offset: int) -> None:
        """One pull that found ``count`` messages (``nbytes`` of records) of ``topic``'s queue
        for ``group``, the next offset to pull ``next_offset``."""
        key = (topic, group)
        cell = self.pulls.get(key)
        if cell is None:
            cell = self.pulls[key] = [0, 0]
        cell[0] += count
        cell[1] += nbytes
        self.get_total += count
        self.pulled[(group, topic, queue_id)] = next_offset

    def is_system(self, topic: str) -> bool:
        """RocketMQ's ``TopicValidator.isSystemTopic`` (remembered per topic)."""
        known = self._system.get(topic)
        if known is None:
            known = self._system[topic] = is_system_topic(self.broker, topic)
        return known

    # -------------------------------------------------------- read-time figures
    def store_figures(self) -> StoreFigures:
        """The storage figures, computed at most every :data:`CACHE_MS` (a ``statvfs``, two
        offsets and the dispatch position's 20-byte read)."""
        now = self.broker.clock.wall_ms()
        if self._store is not None and now - self._store[0] < CACHE_MS:
            return self._store[1]
        store = self.broker.store
        usage = shutil.disk_usage(store.paths.root)
        tail = store.published_tail()
        figures = StoreFigures(
            usage.total - usage.free,
            tail,
            max(0, tail - store.flushed_offset()),
            max(0, tail - store.wire.dispatched_offset()),
        )
        self._store = (now, figures)
        return figures

    def lag(self) -> Lag:
        """Every group's figures per topic, computed at most every :data:`CACHE_MS` (see the
        module docstring for what bounds the cost). Lag: the queues' max offsets minus the
        committed offsets; in-flight: the last pulled offsets minus the committed (RocketMQ
        5's ``rocketmq_consumer_inflight_messages``); ready: the max offsets minus the last
        pulled; lag latency: now minus the store time of the oldest message not committed,
        over the topic's queues."""
        now = self.broker.clock.wall_ms()
        if self._lag is not None and now - self._lag[0] < CACHE_MS:
            return self._lag[1]
        out = Lag()
        store, topics = self.broker.store, self.broker.topics
        ends: dict[str, dict[int, int]] = {}
        pulled = self.pulled.copy()
        reads = 0
        stamps: dict[tuple[str, int, int], int] = {}  # groups at the same offset share a read
        for key, per_queue in sorted(self.broker.consumer_offsets.table().items()):
            topic, _, group = key.partition("@")
            if len(out.rows) >= LAG_MAX_SERIES:
                out.dropped += 1
                continue
            if topic not in ends:
                tc = topics.get(topic)
                if tc is None:
                    continue
                try:
                    ends[topic] = {q: max(0, store.max_offset(topic, q)) for q in range(tc.read_queue_nums)}
                except rmqlog.StoreError:
                    continue
            queue_ends = ends[topic]
            lag = inflight = ready = 0
            oldest = -1
            for qid, end in queue_ends.items():
                committed = max(0, per_queue.get(qid, 0))
                behind = max(0, end - committed)
                lag += behind
                last = pulled.get((group, topic, qid), committed)
                inflight += max(0, last - committed)
                ready += max(0, end - max(last, committed))
                if behind:
                    at = (topic, qid, committed)
                    stamp = stamps.get(at)
                    if stamp is None and reads < LATENCY_MAX_READS:
                        reads += 1
                        stamp = stamps[at] = _store_time(store, topic, qid, committed)
                    if stamp is None:
                        out.latency_skipped += 1
                    elif stamp > 0 and (oldest < 0 or stamp < oldest):
                        oldest = stamp
            out.rows[(topic, group)] = [lag, inflight, ready, max(0, now - oldest) if oldest > 0 else 0]
            out.system[(topic, group)] = self.is_system(topic) or group.startswith("CID_RMQ_SYS_")
        self._lag = (now, out)
        return out


#: where a record's SYSFLAG and STORETIMESTAMP lie (docs/format.md): the born host's address
#: is 12 bytes longer when SYSFLAG's BORNHOST_V6 bit (0x10) is set
_SYSFLAG_AT, _STORE_TIME_AT, _BORN_V6, _BORN_V6_EXTRA = 36, 56, 0x10, 12


def _store_time(store: rmqlog.MessageStore, topic: str, queue_id: int, offset: int) -> int:
    """The store time (ms) of the message at ``offset`` of the queue, 0 when there is none
    (retention took it, or a read failed: the latency is then not known): one unit and its
    record read raw (the store's small-window path), the time taken from the header."""
    try:
        got = store.read_window(topic, queue_id, offset, max_count=1, raw=True)
    except rmqlog.StoreError:
        return 0
    records = got.records
    if records is None or not len(records.sizes) or int(records.queue_offsets[0]) != offset:
        return 0
    head = records.array[0].as_buffer()
    sys_flag = int.from_bytes(head[_SYSFLAG_AT : _SYSFLAG_AT + 4], "big")
    at = _STORE_TIME_AT + (_BORN_V6_EXTRA if sys_flag & _BORN_V6 else 0)
    return int.from_bytes(head[at : at + 8], "big")


class RateSampler:
    """The stored and pulled totals every :attr:`interval_ms` for :attr:`keep` samples
    (``run_once(now_ms)``, a broker service); :meth:`tps` over a window."""

    def __init__(self, broker: Broker, interval_ms: int = 1000, keep: int = 601) -> None:
        self.broker = broker
        self.interval_ms = interval_ms
        self.samples: deque[tuple[int, int, int]] = deque(maxlen=keep)

    def run_once(self, now_ms: int) -> None:
        if self.samples and now_ms - self.samples[-1][0] < self.interval_ms:
            return
        self.samples.append((now_ms, self.broker.sender.put_total, self.broker.metrics.get_total))

    def tps(self, window_ms: int) -> tuple[float, float]:
        """(stored, pulled) messages per second over the last ``window_ms`` (or as much of it
        as was sampled; 0.0 before two samples)."""
        if len(self.samples) < 2:
            return 0.0, 0.0
        last = self.samples[-1]
        first = self.samples[0]
        for sample in reversed(self.samples):
            first = sample
            if last[0] - sample[0] >= window_ms:
                break
        dt = (last[0] - first[0]) / 1000
        if dt <= 0:
            return 0.0, 0.0
        return (last[1] - first[1]) / dt, (last[2] - first[2]) / dt

    def runtime_keys(self) -> dict[str, str]:
        """RocketMQ's ``putTps`` and ``getTransferedTps``: three rates, over 10 s, 1 min and
        10 min, space-separated (``StoreStatsService``'s form)."""
        rates = [self.tps(w) for w in (10_000, 60_000, 600_000)]
        return {
            "putTps": " ".join(f"{p:.2f}" for p, _ in rates),
            "getTransferedTps": " ".join(f"{g:.2f}" for _, g in rates),
        }
