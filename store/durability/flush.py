"""Flushing: when appended bytes reach the disk (RocketMQ's GroupCommitService / FlushRealTimeService).

The flushed position is ``<root>/flush.state`` (ours; RocketMQ tooling ignores it), 20 bytes,
big-endian, rewritten in place and ``fdatasync``'d:

| offset | field          | meaning                                                         |
|--------|----------------|-----------------------------------------------------------------|
| 0      | offset         | long: every commitlog byte below it is on disk, and it is a published tail |
| 8      | storeTimestamp | long: STORETIMESTAMP (ms) of the last record below ``offset``   |
| 16     | crc            | int: zlib CRC-32 of bytes 0..16 (a torn write reads as "unknown") |

It only moves forward, and only to a *published* tail (see :mod:`rmqlog.log.append_state`), so it
always sits on a batch boundary: recovery keeps everything below it (it was acknowledged) and
never keeps half a batch. Data is made durable before the position that covers it.

Flush modes (``flush_disk_type``):

- ``SYNC_FLUSH``: a put returns after :meth:`FlushService.flush_to` its end. Group commit:
  whoever holds ``flush.lock`` syncs everything published so far (not only its own batch) and
  records the new position; writers queued behind it find their batch already covered and
  return without a sync of their own. This works across threads and processes because the
  lock and the position are files.
- ``ASYNC_FLUSH`` (default): :class:`AsyncFlusher`, a service of the store's background loop
  (:mod:`rmqlog.service`), runs every ``flush_interval_commit_log`` ms. It syncs when at least
  ``flush_commit_log_least_pages`` pages (4 KiB) are unflushed, and anything unflushed once
  ``flush_commit_log_thorough_interval`` ms have passed since the last thorough round (which
  also syncs the consume queues and writes the checkpoint). ``close()`` flushes everything.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import safe_open
from ..clock import SYSTEM_CLOCK
from ..errors import raise_if_disk_full
from ..fileio import InterProcessLock, fsync_dir
from ..log.append_state import AppendState
from ..log.commitlog import CommitLog
from ..paths import parse_segment_name
from .checkpoint import Checkpoint, CheckpointFile

log = logging.getLogger(__name__)

OS_PAGE_SIZE = 4096
_FLUSH = struct.Struct(">qqI")


@dataclass(frozen=True)
class FlushPosition:
    offset: int = 0
    store_timestamp: int = 0


class FlushStateFile:
    """``<root>/flush.state``: the durable flushed position (see the module docstring).

    The file is only ever rewritten in place, so one descriptor, opened on first use, serves
    every read and write (a SYNC_FLUSH put reads it at least once: ``pread`` on a kept
    descriptor costs ~1 us, an open/read/close ~10 us).
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self._flags = os.O_RDONLY if read_only else os.O_RDWR  # read_only: a read-only store's
        self._fd: int | None = None
        self._lock = threading.Lock()

    def _open(self, create: bool) -> int | None:
        with self._lock:
            if self._fd is None:
                try:
                    self._fd = safe_open.open_file(self.path, self._flags | (os.O_CREAT if create else 0))
                except FileNotFoundError:
                    return None
            return self._fd

    def read(self) -> FlushPosition | None:
        """The flushed position, or ``None`` when the file is absent, short or torn."""
        fd = self._open(create=False)
        if fd is None:
            return None
        raw = os.pread(fd, _FLUSH.size, 0)
        if len(raw) < _FLUSH.size:
            return None
        offset, ts, crc = _FLUSH.unpack_from(raw, 0)
        if zlib.crc32(raw[:16]) != crc:
            log.warning("%s is torn; the flushed position is unknown", self.path)
            return None
        return FlushPosition(offset, ts)

    def write(self, pos: FlushPosition) -> None:
        """Store ``pos`` durably: the file's data, and its name when this write creates it (a
        flushed position that a power loss could make vanish would let recovery believe
        nothing was ever flushed; see :func:`rmqlog.recovery.recovery.recover`)."""
        head = struct.pack(">qq", pos.offset, pos.store_timestamp)
        created = safe_open.kind(self.path) is None if self._fd is None else False
        try:
            fd = self._open(create=True)
            assert fd is not None
            os.pwrite(fd, head + struct.pack(">I", zlib.crc32(head)), 0)  # in place: a block only the first time
            os.fdatasync(fd)
            if created:
                fsync_dir(self.path.parent)
        except OSError as exc:
            raise_if_disk_full(exc, self.path, "writing the flushed position")
            raise

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class FlushService:
    """Moves the flushed position forward (group commit); used by both flush modes."""

    def __init__(
        self,
        commitlog: CommitLog,
        published: Callable[[], AppendState],
        lock: InterProcessLock,
        state_file: FlushStateFile,
        checkpoint_file: CheckpointFile,
        consumequeue_dir: Path,
        dispatched: Callable[[], tuple[int, int]],
        dispatch_lock: InterProcessLock,
    ) -> None:
        self.commitlog = commitlog
        self.published = published
        self.lock = lock
        self.state_file = state_file
        self.checkpoint_file = checkpoint_file
        self.consumequeue_dir = consumequeue_dir
        self.dispatched = dispatched
        self.dispatch_lock = dispatch_lock
        #: syncs the index files and returns the checkpoint's ``indexMsgTimestamp`` (set by
        #: the store's parts when it has an index; ``None``: the field stays 0)
        self.index_flush: Callable[[], int] | None = None
        self.syncs = 0  # how many data syncs this process did (group commit shows as syncs < puts)

    def flushed(self) -> FlushPosition:
        return self.state_file.read() or FlushPosition()

    def flush_to(self, target: int) -> int:
        """Make every published byte below ``target`` durable; returns the flushed offset.

        If another thread or process has already flushed past ``target`` this costs one
        lock and one 20-byte read: that is the group commit.
        """
        with self.lock.held():
            done = self.flushed()
            if done.offset >= target:
                return done.offset
            state = self.published()
            end = state.tail
            if end <= done.offset:
                return done.offset
            self._sync_commitlog(done.offset, end)
            self.state_file.write(FlushPosition(end, state.store_timestamp))
            return end

    def _sync_commitlog(self, lo: int, hi: int) -> None:
        segs = self.commitlog.segments
        first = segs.segment_start_for(lo)
        last = segs.segment_start_for(hi - 1)
        for start in range(first, last + 1, segs.size):
            seg = segs.get(start)
            if seg is not None:
                seg.sync(max(0, lo - start), min(segs.size, hi - start))
        self.syncs += 1
        if last > first or lo == 0:
            fsync_dir(segs.directory)  # a segment created since the last flush: its name too

    def unflushed_bytes(self) -> int:
        return max(0, self.published().tail - self.flushed().offset)

    def checkpoint(self) -> Checkpoint:
        """Flush the commitlog and the consume queues, then write the checkpoint.

        ``logicsMsgTimestamp`` is the store time of the last dispatched record, read before
        the consume queues are synced, so it never claims units that were not synced.
        """
        self.flush_to(self.published().tail)
        with self.dispatch_lock.held(shared=True):
            _, logics_ts = self.dispatched()
        self._sync_consume_queues()
        index_ts = self.index_flush() if self.index_flush is not None else 0
        with self.lock.held():
            physic = self.flushed().store_timestamp
            return self.checkpoint_file.write(Checkpoint(physic, logics_ts, index_ts))

    def _sync_consume_queues(self) -> None:
        root = self.consumequeue_dir
        if not safe_open.is_folder(root):
            return
        for topic, found in safe_open.entries(root):
            for qdir, qfound in safe_open.entries(root / topic) if found == safe_open.FOLDER else ():
                for name, ffound in safe_open.entries(root / topic / qdir) if qfound == safe_open.FOLDER else ():
                    if parse_segment_name(name) is None or ffound != safe_open.FILE:
                        continue
                    f = root / topic / qdir / name
                    try:
                        fd = safe_open.open_file(f, os.O_RDONLY)
                    except FileNotFoundError:
                        continue  # deleted meanwhile (truncation)
                    try:
                        os.fdatasync(fd)
                    except OSError as exc:  # space allocated at writeback (NFS): typed
                        raise_if_disk_full(exc, f, "syncing a consume queue")
                        raise
                    finally:
                        os.close(fd)


class AsyncFlusher:
    """ASYNC_FLUSH's background flusher (RocketMQ's FlushRealTimeService), a service of the
    store's loop (:mod:`rmqlog.service`): a round every ``interval_ms``, busy or not.

    :meth:`run_once` holds the whole policy and takes the time as an argument, so it is
    tested with a fake clock.
    """

    name = "rmq-flusher"
    repeat_when_busy = False  # a sync every interval at most, however much is pending
    wait_first = True  # nothing to flush right after opening

    def __init__(
        self,
        service: FlushService,
        *,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        clock: Callable[[], float] = SYSTEM_CLOCK.monotonic,
    ) -> None:
        self.service = service
        self.interval_ms = interval_ms
        self.interval_s = interval_ms / 1000.0
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self.clock = clock
        self.last_error: BaseException | None = None
        self._last_thorough = clock()

    def run_once(self, now: float | None = None) -> bool:
        """One round; returns True if it synced anything. ``now``: the clock's time (default: read it)."""
        now = self.clock() if now is None else now
        thorough = (now - self._last_thorough) * 1000 >= self.thorough_interval_ms
        dirty = self.service.unflushed_bytes()
        if thorough:
            self._last_thorough = now
            if dirty == 0:
                return False
            self.service.checkpoint()
            return True
        if dirty == 0 or dirty < self.least_pages * OS_PAGE_SIZE:
            return False
        self.service.flush_to(self.service.published().tail)
        return True
