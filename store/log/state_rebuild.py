"""The append state rebuilt from the commitlog itself (``append.state`` missing or unreadable:
a store RocketMQ wrote, an empty file left by a power loss, or recovery's end moved).

A walk from the commitlog's first record up to an end (default: its end) gives:

- ``tail``: where whole, valid records end (a record past a blank goes on in the next
  segment); the walk stops at the first invalid record, or one whose QUEUEOFFSET breaks its
  queue's density (:class:`rmqlog.log.scan.QueueDensity`): damage, and the log ends there;
- next queue offsets: the largest QUEUEOFFSET seen per queue, plus one (transaction
  prepared/rolled-back records excluded, as they get no unit); with light message queues on
  (``lmq``), each LMQ's largest ``INNER_MULTI_QUEUE_OFFSET`` plus one (:mod:`rmqlog.log.lmq`);
- ``store_timestamp``: the largest STORETIMESTAMP;
- the idempotence markers (:mod:`rmqlog.log.writer_marker`), in log order: the last wins.

The walk goes in windows of :data:`REBUILD_CHUNK` bytes (memory stays bounded) and is
vectorized per window; its only per-item steps are per queue and per marker.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np

from .append_state import AppendState
from .commitlog import CommitLog
from .decode import read_columns
from .lmq import note_lmq_offsets
from .mapped_file import MappedFile
from .record import is_consumable
from .scan import QueueDensity, SegmentScan, StopReason
from .writer_marker import writer_markers

log = logging.getLogger(__name__)

#: Bytes of commitlog walked per step when rebuilding the append state (bounds memory).
REBUILD_CHUNK = 64 << 20


def rebuild_state(commitlog: CommitLog, end: int | None = None, *, check_crc: bool, lmq: bool = False) -> AppendState:
    """The append state recovered from ``commitlog`` up to ``end`` (default: its end); see the
    module docstring. ``check_crc``: check body CRCs on the way (recovery turns it off when
    its own walk already checked every record below ``end``). ``lmq``: light message queues
    are on (their next offsets are rebuilt too)."""
    state = AppendState()
    start = commitlog.min_offset()
    state.tail = start
    starts = commitlog.segments.segment_starts()
    if not starts:
        return state
    limit = starts[-1] + commitlog.segment_size if end is None else end
    density = QueueDensity(from_log_start=start == 0)
    for seg, scan in _walk(commitlog, start, limit, check_crc):
        if len(scan.positions):
            scan = _note_records(state, seg, scan, density, lmq)
        state.tail = seg.start + scan.end
        if scan.reason is StopReason.BLANK:
            state.tail = seg.end
        elif scan.reason is StopReason.CORRUPT:
            log.warning("commitlog: %s at offset %d of %s; the log ends there", scan.detail, state.tail, seg.path)
            break
    return state


def _note_records(
    state: AppendState, seg: MappedFile, scan: SegmentScan, density: QueueDensity, lmq: bool = False
) -> SegmentScan:
    """Add a run of records to ``state``; returns ``scan`` cut at the first record that breaks
    its queue's density (damage: the log ends there)."""
    cols = read_columns(seg.buffer(), seg.start, scan.positions, with_body=False)
    h = cols.header
    keep = np.asarray(is_consumable(h["sysFlag"]), bool)
    enc = cols.topic.dictionary_encode()
    names = enc.dictionary.to_pylist()
    tidx = np.asarray(enc.indices, np.int64)
    cut, why = density.first_break(names, tidx, h["queueId"], h["queueOffset"], keep)
    if cut < len(scan.positions):
        scan = SegmentScan(scan.positions[:cut], scan.sizes[:cut], int(scan.positions[cut]), StopReason.CORRUPT, why)
        h = {k: v[:cut] for k, v in h.items()}
        keep, tidx = keep[:cut], tidx[:cut]
        cols.properties = cols.properties.slice(0, cut)
    key = (tidx[keep] << 32) | h["queueId"][keep].astype(np.int64)
    qoff = h["queueOffset"][keep].astype(np.int64)
    uniq, inverse = np.unique(key, return_inverse=True)
    best = np.full(len(uniq), -1, np.int64)
    np.maximum.at(best, inverse, qoff)  # per queue: the largest offset seen
    for k, o in zip(uniq.tolist(), best.tolist(), strict=True):  # one step per queue
        name = f"{names[k >> 32]}/{k & 0xFFFFFFFF}"
        state.queues[name] = max(state.queues.get(name, 0), o + 1)
    if lmq:
        note_lmq_offsets(state.queues, cols.properties, np.flatnonzero(keep))
    if len(h["storeTimestamp"]):
        state.store_timestamp = max(state.store_timestamp, int(h["storeTimestamp"].max()))
    for name, seq in writer_markers(cols.properties):  # in log order: the last wins
        state.writers[name] = seq
    return scan


def _walk(commitlog: CommitLog, start: int, limit: int, check_crc: bool) -> Iterator[tuple[MappedFile, SegmentScan]]:
    """``commitlog.scan`` in windows of ``REBUILD_CHUNK`` bytes, so memory stays bounded."""
    pos = start
    while pos < limit:
        stop = min(limit, pos + REBUILD_CHUNK)
        last = None
        for seg, scan in commitlog.scan(pos, stop, check_crc=check_crc):
            yield seg, scan
            last = (seg, scan)
        if last is None:
            return
        seg, scan = last
        new = seg.end if scan.reason is StopReason.BLANK else seg.start + scan.end
        if scan.reason not in (StopReason.LIMIT, StopReason.BLANK) or new <= pos or stop >= limit:
            return  # end of data, a bad record, or the caller's limit
        pos = new
