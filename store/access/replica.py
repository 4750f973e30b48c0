"""Replication of the commitlog byte for byte, the store's side of RocketMQ 4.x's HA service.

A master hands out its published commitlog as it lies on disk (:func:`replica_read`); a
slave writes those bytes at exactly its own end (:class:`ReplicaWriter`) and publishes them
record by record, so that its commitlog is byte-identical to the master's up to its end and
its own dispatcher builds its consume queues and index from them.

- **Read** (master): ``replica_read(offset, n)`` = the published bytes ``[offset, offset + m)``,
  ``m <= n``, never past the segment holding ``offset`` nor past the published tail (RocketMQ's
  ``getCommitLogData`` never crosses a mapped file either). A segment's end-of-file blank comes
  through as the bytes it is (its 8-byte header, then what the file holds: zeros).
- **Append** (slave): ``append(offset, data)``: ``offset`` must be this store's end (an empty
  store also takes a segment's start: a master whose retention deleted its first segments), the
  published tail plus the bytes received past it (RocketMQ's slave compares the header's offset
  with its max physical offset the same way); ``data`` must not cross a segment. The bytes are
  written at once (``pwrite``, past the published tail: no reader looks there), then everything
  received past the tail is walked with the recovery walk's checks (magic, lengths, body CRC,
  header fields, PHYSICALOFFSET = where the record lands) plus the ones only a continuation
  can have: each queue's QUEUEOFFSET continues its queue (the append state's next offset, then
  dense), topic names the store accepts, a blank that ends its segment exactly. The whole
  records that pass are published with the append state taken from them: next queue offsets,
  the store time, the idempotence markers (``RMQLOG_WRITER``): a promoted slave continues
  the master's queues and the Spark sink's exactly-once markers. A partial record at the end
  waits, written and unpublished, for the next transfer; a blank is published (the tail moves
  to the next segment) once the segment's last byte has arrived.
- **Refusals**: an offset that is not the end is :class:`~rmqlog.errors.ReplicaOffsetError`
  (nothing written); a bad record is :class:`~rmqlog.errors.ReplicaStreamError` naming its
  offset: the good records before it are published, the bytes from it on are cleared, and the
  end goes back to the published tail (the slave reports that, and the master resends).

Crash safety is the put path's: bytes past the published tail are never part of the log, a
restart continues from the published tail (recovery keeps exactly that), and the next
append's scrub clears what was left. One writer per store: a slave's store takes no puts (a
put publishing meanwhile makes the next append's offset not the end: refused).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from ..config import SYNC_FLUSH
from ..errors import (
    DISK_FULL_ERRNOS,
    DiskFullError,
    InvalidTopicError,
    ReplicaOffsetError,
    ReplicaStreamError,
)
from ..log.append_state import AppendState
from ..log.decode import MIN_RECORD_SIZE, read_columns
from ..log.lmq import LMQ_NEEDLE, note_lmq_offsets
from ..log.mapped_file import MappedFile
from ..log.pins import pinned
from ..log.record import BLANK_MAGIC, END_FILE_MIN_BLANK_LENGTH, MAGIC_V1, MAGIC_V2, is_consumable
from ..log.scan import QueueDensity, SegmentScan, StopReason
from ..log.writer_marker import writer_markers
from ..paths import validate_topic
from .replica_check import MARKER_NEEDLE, first_crc_mismatch, take_fast

if TYPE_CHECKING:
    from ..parts import StoreParts
    from ..service import ServiceLoop

_HEAD = struct.Struct(">ii")


def replica_read(parts: StoreParts, offset: int, max_bytes: int) -> bytes:
    """The published commitlog bytes from ``offset``: at most ``max_bytes``, never past the
    end of the segment holding ``offset`` nor past the published tail; ``b""`` at the tail.
    Raises :class:`ReplicaOffsetError` for an offset below the commitlog's first offset, past
    the published tail, or in a segment deleted meanwhile."""
    tail = parts.published_tail()
    if offset > tail:
        raise ReplicaOffsetError(f"offset {offset} is past the published tail {tail}", offset=offset, end=tail)
    if offset == tail:
        return b""
    commitlog = parts.commitlog
    first = commitlog.min_offset()
    if offset < first:
        raise ReplicaOffsetError(
            f"offset {offset} is below the commitlog's first offset {first}", offset=offset, end=tail
        )
    seg = commitlog.segments.for_offset(offset)
    if seg is None:
        raise ReplicaOffsetError(f"no commitlog segment holds offset {offset}", offset=offset, end=tail)
    n = min(max_bytes, seg.end - offset, tail - offset)
    with pinned(seg) as held:  # retention leaves a file being read alone
        if not held:
            raise ReplicaOffsetError(f"the segment holding offset {offset} was deleted", offset=offset, end=tail)
        return seg.read(offset - seg.start, n)


class ReplicaWriter:
    """A slave's appends of replicated bytes (see the module docstring). One per open store."""

    def __init__(self, parts: StoreParts, services: ServiceLoop, disk_check: object = None) -> None:
        self.parts = parts
        self.services = services
        self._disk_check = disk_check
        self._lock = threading.Lock()
        #: (published tail, bytes received up to) as this writer left them; None: start from the tail
        self._mark: tuple[int, int] | None = None
        #: the fast form of the continuation checks (off: always the general one; tests compare them)
        self.fast = True

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No append of this writer runs while held (a replica truncation cuts the log under
        it); on exit the writer forgets what it received past the published tail (the next
        append starts from the tail, scrubbing what is there)."""
        with self._lock:
            try:
                yield
            finally:
                self._mark = None

    def end(self) -> int:
        """Where the next replicated bytes must start: the published tail plus what was
        received past it (a partial record, part of a segment's blank)."""
        with self._lock:
            tail = self.parts.published_tail()
            mark = self._mark
            return mark[1] if mark is not None and mark[0] == tail else tail

    def append(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at ``offset`` (this store's end) and publish the whole records that
        pass the checks; returns the new end. Raises :class:`ReplicaOffsetError` (nothing
        written), :class:`ReplicaStreamError` (good records before the bad one published),
        :class:`~rmqlog.errors.DiskFullError` (nothing published)."""
        parts = self.parts
        commitlog = parts.commitlog
        size = commitlog.segment_size
        with self._lock, parts.append_lock.held():
            state = parts.state_file.load() or parts.rebuild_state()
            tail = state.tail
            mark = self._mark
            if mark is None or mark[0] != tail:
                # first append of this process, or another writer published meanwhile (its
                # append scrubbed what was received past the old tail): go on from the tail
                commitlog.scrub(tail)
                mark = (tail, tail)
            end = mark[1]
            if (
                offset != end
                and end == tail == 0
                and offset > 0
                and offset % size == 0
                and not commitlog.segments.segment_starts()
            ):
                # an empty store taking a master's log from a later segment (the master's
                # retention deleted the first ones): its log starts there
                state.tail = offset
                parts.state_file.publish(state)
                self._mark = mark = (offset, offset)
                tail = end = offset
            if offset != end:
                raise ReplicaOffsetError(
                    f"replicated bytes at offset {offset}, but this store ends at {end}", offset=offset, end=end
                )
            if not len(data):
                return end
            seg_end = (offset // size + 1) * size
            if offset + len(data) > seg_end:
                raise ReplicaStreamError(
                    f"{len(data)} bytes at {offset} cross the segment end {seg_end}", offset=offset
                )
            if callable(self._disk_check):
                self._disk_check()
            seg = commitlog.segments.for_offset(offset, create=True)
            assert seg is not None
            try:
                seg.write(offset - seg.start, memoryview(data))
            except OSError as exc:
                self._mark = None
                commitlog.scrub(tail, force=True)
                if exc.errno in DISK_FULL_ERRNOS:
                    raise DiskFullError(
                        exc.errno,
                        f"disk full while replicating at offset {offset}: nothing published",
                        exc.filename or str(seg.path),
                    ) from exc
                raise
            end = offset + len(data)
            new_tail, problem = self._walk(state, seg, tail, end)
            if new_tail != tail:
                parts.state_file.publish(state)
            self._mark = (new_tail, end)
            if problem is not None:
                self._mark = None
                commitlog.scrub(new_tail, force=True)
                raise ReplicaStreamError(problem[1], offset=problem[0], path=str(seg.path))
        if new_tail != tail:
            self.services.wake(parts.dispatcher)  # the slave's dispatcher takes them now
            if parts.config.flush_disk_type == SYNC_FLUSH:
                parts.flush_service.flush_to(new_tail)
        return end

    # ----------------------------------------------------------------- checks
    def _walk(self, state: AppendState, seg: MappedFile, tail: int, end: int) -> tuple[int, tuple[int, str] | None]:
        """Check the bytes ``[tail, end)`` (all in ``seg``) and take the whole records that
        pass into ``state``; returns the new published tail and the first problem ``(offset,
        what)`` or ``None``."""
        if tail < seg.start:  # (the tail ends the previous segment only once its blank is whole)
            return tail, (tail, f"the published tail {tail} is not in the segment at {seg.start}")
        scan: SegmentScan | None = None
        # the fast form checks the body CRCs itself, in one batch (the walk's: a call per body)
        for s, found in self.parts.commitlog.scan(tail, end, check_crc=not self.fast):
            if s is seg:
                scan = found
            break
        if scan is None:
            return tail, (tail, "the replicated bytes are not readable in their segment")
        if self.fast and len(scan.positions):
            bad = first_crc_mismatch(seg.array(), scan.positions.astype(np.int64))
            if bad < len(scan.positions):
                scan = SegmentScan(
                    scan.positions[:bad],
                    scan.sizes[:bad],
                    int(scan.positions[bad]),
                    StopReason.CORRUPT,
                    "body CRC mismatch",
                )
        problem: tuple[int, str] | None = None
        if len(scan.positions):
            cut, why = self._take(state, seg, scan)
            if cut < len(scan.positions):
                at = seg.start + int(scan.positions[cut])
                state.tail = at
                return at, (at, why)
        at = seg.start + scan.end  # where the good records end
        state.tail = at
        received = end - at
        if scan.reason is StopReason.BLANK:
            if end == seg.end:
                state.tail = seg.end  # the blank is whole: the log goes on in the next segment
            return state.tail, None
        if scan.reason is StopReason.LIMIT and received == 0:
            return at, None
        # LIMIT with a partial record, END, CORRUPT: what is at ``at`` decides
        if received < 8:
            return at, None  # not even its length yet
        total, magic = _HEAD.unpack(seg.read(at - seg.start, 8))
        room = seg.end - at
        if magic == BLANK_MAGIC:
            problem = (at, f"blank record of {total} bytes but {room} left in its segment")
        elif magic not in (MAGIC_V1, MAGIC_V2):
            problem = (at, f"bad magic 0x{magic & 0xFFFFFFFF:08X}")
        elif not MIN_RECORD_SIZE <= total <= room - END_FILE_MIN_BLANK_LENGTH:
            problem = (at, f"TOTALSIZE {total} out of range")
        elif total > received:
            return at, None  # a record still arriving
        else:
            problem = (at, scan.detail or "record outside the chain")
        return at, problem

    def _take(self, state: AppendState, seg: MappedFile, scan: SegmentScan) -> tuple[int, str]:
        """:meth:`_take_general`'s answer and effect on ``state``, by the fast form
        (:func:`rmqlog.access.replica_check.take_fast`) when it can judge the run."""
        if not self.fast:
            return self._take_general(state, seg, scan)
        arr = seg.array()
        pos = scan.positions.astype(np.int64)
        end = int(pos[-1] + scan.sizes[-1])
        run = arr[int(pos[0]) : end].tobytes()
        marked = run.find(MARKER_NEEDLE) >= 0
        trial = state.copy()  # (its changes only: the base is shared)
        got = take_fast(trial, arr, pos, self.parts.commitlog.min_offset() == 0, marked)
        if got is None:
            return self._take_general(state, seg, scan)
        cut, why, markers = got
        lmq = self.parts.lmq and cut and run.find(LMQ_NEEDLE) >= 0  # (light message queues: their offsets)
        if (markers or lmq) and cut:
            cols = read_columns(seg.buffer(), seg.start, pos[:cut], with_body=False)
            for writer, seq in writer_markers(cols.properties) if markers else ():  # in log order: the last wins
                trial.writers[writer] = seq
            if lmq:
                note_lmq_offsets(trial.queues, cols.properties, np.flatnonzero(is_consumable(cols.header["sysFlag"])))
        state.queues, state.store_timestamp, state.writers = trial.queues, trial.store_timestamp, trial.writers
        return cut, why

    def _take_general(self, state: AppendState, seg: MappedFile, scan: SegmentScan) -> tuple[int, str]:
        """Add the scanned records to ``state`` up to the first one a continuation cannot
        have (a refused topic name, a QUEUEOFFSET that does not continue its queue); returns
        (its index or the count, why)."""
        cols = read_columns(seg.buffer(), seg.start, scan.positions, with_body=False)
        h = cols.header
        n = len(scan.positions)
        enc = cols.topic.dictionary_encode()
        names = enc.dictionary.to_pylist()
        tidx = np.asarray(enc.indices, np.int64)
        cut, why = n, ""
        for i, name in enumerate(names):  # one step per distinct topic
            try:
                validate_topic(name)
            except InvalidTopicError as exc:
                row = int(np.flatnonzero(tidx == i)[0])
                if row < cut:
                    cut, why = row, f"topic refused: {exc}"
        keep = np.asarray(is_consumable(h["sysFlag"]), bool)
        qid = h["queueId"].astype(np.int64)
        density = QueueDensity(from_log_start=self.parts.commitlog.min_offset() == 0)
        for k in np.unique((tidx[keep] << 32) | qid[keep]).tolist():  # one step per queue
            name = f"{names[k >> 32]}/{k & 0xFFFFFFFF}"
            if name in state.queues:
                density.last[(names[k >> 32], k & 0xFFFFFFFF)] = state.queues[name] - 1
        dcut, dwhy = density.first_break(names, tidx, h["queueId"], h["queueOffset"], keep)
        if dcut < cut:
            cut, why = dcut, dwhy
        if cut == 0:
            return 0, why
        rows = slice(0, cut)
        k2 = keep[rows]
        key = (tidx[rows][k2] << 32) | qid[rows][k2]
        qoff = h["queueOffset"][rows][k2].astype(np.int64)
        uniq, inverse = np.unique(key, return_inverse=True)
        best = np.full(len(uniq), -1, np.int64)
        np.maximum.at(best, inverse, qoff)
        for k, o in zip(uniq.tolist(), best.tolist(), strict=True):  # one step per queue
            name = f"{names[k >> 32]}/{k & 0xFFFFFFFF}"
            state.queues[name] = max(state.queues.get(name, 0), o + 1)
        state.store_timestamp = max(state.store_timestamp, int(h["storeTimestamp"][rows].max()))
        for writer, seq in writer_markers(cols.properties.slice(0, cut)):  # in log order: the last wins
            state.writers[writer] = seq
        if self.parts.lmq:
            note_lmq_offsets(state.queues, cols.properties.slice(0, cut), np.flatnonzero(keep[:cut]))
        return cut, why
