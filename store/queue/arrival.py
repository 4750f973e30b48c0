"""The arrival signal: which queues got new consume-queue units, told to listeners in this
process (RocketMQ's ``MessageArrivingListener``, which wakes the broker's held pulls).

One call per dispatched run, vectorized: ``callback(topics, queue_ids, max_offsets)``, where
entry ``i`` says queue ``(topics[i], queue_ids[i])`` now ends at ``max_offsets[i]`` (the
offset after its last unit: what a pull compares with its requested offset). Each queue is
named once per call.

**When**: after the units are written *and* the dispatch position is saved, after the
dispatch lock is released: a listener that reads the queue in its callback finds the new
units. Every dispatch of this process signals (the background dispatcher of
``start_services()``, ``dispatch()``, a put with ``dispatch=True``), and so do the units other
processes dispatched (a Spark sink's ``dispatch=True``, another process's dispatcher): the
next dispatch in this process finds its position moved past what it last signalled and reads
the record headers of that stretch of the log (no bodies) for the queues and offsets. A
listener therefore hears of another process's appends within the dispatcher's interval once
the services run.

**Failures**: an exception in a listener is logged and dropped; the dispatch and the other
listeners go on. Listeners run on the thread that dispatched (keep them short: wake a waiter,
do not read there for long).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import numpy as np

from ..log.commitlog import CommitLog
from ..log.decode import read_columns
from ..log.record import is_consumable

log = logging.getLogger(__name__)

#: ``callback(topics, queue_ids, max_offsets)``: see the module docstring
ArrivalListener = Callable[[list[str], np.ndarray, np.ndarray], object]
#: (topic, queue id) -> the offset after its last unit, of one dispatch
Maxes = dict[tuple[str, int], int]


class ArrivalSignal:
    """The listeners of one open store and how far the log has been signalled to them."""

    def __init__(self) -> None:
        self._listeners: list[ArrivalListener] = []
        self._lock = threading.Lock()
        #: commitlog position up to which arrivals were signalled (``None``: no listener yet)
        self.signalled: int | None = None

    def subscribe(self, callback: ArrivalListener, position: Callable[[], int]) -> Callable[[], None]:
        """Add ``callback``; returns the function that removes it (idempotent). ``position``:
        the dispatch position now (the first listener starts the signalled range there)."""
        with self._lock:
            if self.signalled is None:
                self.signalled = position()
            self._listeners.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._listeners:
                    self._listeners.remove(callback)

        return unsubscribe

    @property
    def active(self) -> bool:
        return bool(self._listeners)

    def foreign(self, commitlog: CommitLog, start: int, pos: int, maxes: Maxes) -> None:
        """Add to ``maxes`` the queues of the records in ``[signalled, start)``: dispatched by
        another process since this one last signalled (caller holds the dispatch lock);
        then mark everything up to ``pos`` as signalled (``pos``: where this dispatch ends)."""
        since = self.signalled
        if since is not None and since < start and self._listeners:
            for topics, qid, qoff in _runs(commitlog, since, start):
                for t, q, o in zip(topics, qid.tolist(), qoff.tolist(), strict=True):
                    key = (t, q)
                    if maxes.get(key, -1) < o + 1:
                        maxes[key] = o + 1
        if self.signalled is not None:
            self.signalled = max(self.signalled, pos)

    def notify(self, maxes: Maxes) -> None:
        """Tell every listener (outside any lock); a listener's exception is logged."""
        if not maxes or not self._listeners:
            return
        topics = [t for t, _ in maxes]
        qids = np.fromiter((q for _, q in maxes), np.int32, len(maxes))
        offsets = np.fromiter(maxes.values(), np.int64, len(maxes))
        with self._lock:
            listeners = list(self._listeners)
        for callback in listeners:
            try:
                callback(topics, qids, offsets)
            except Exception:  # noqa: BLE001 - a listener never breaks a dispatch
                log.exception("an arrival listener failed (%r); dispatching goes on", callback)


def _runs(commitlog: CommitLog, start: int, end: int) -> Iterator[tuple[list[str], np.ndarray, np.ndarray]]:
    """Per run of records in ``[start, end)``: the distinct (topic, queue) pairs with units and
    the largest queue offset of each (headers and topics read, no body)."""
    for seg, scan in commitlog.scan(max(start, commitlog.min_offset()), end):
        if not len(scan.positions):
            continue
        cols = read_columns(seg.buffer(), seg.start, scan.positions, with_body=False)
        keep = np.asarray(is_consumable(cols.header["sysFlag"]))
        if not keep.any():
            continue
        codes = cols.topic.filter(keep).dictionary_encode()
        names = codes.dictionary.to_pylist()
        key = np.asarray(codes.indices, np.int64) << 32 | cols.header["queueId"][keep].astype(np.int64)
        qoff = cols.header["queueOffset"][keep].astype(np.int64)
        order = np.lexsort((qoff, key))
        key, qoff = key[order], qoff[order]
        last = np.flatnonzero(np.append(key[1:] != key[:-1], True))
        yield [names[int(k >> 32)] for k in key[last]], (key[last] & 0xFFFFFFFF), qoff[last]
