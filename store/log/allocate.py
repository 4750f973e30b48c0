"""Segments prepared ahead of the writer (RocketMQ's ``AllocateMappedFileService`` and
``MappedFile.warmMappedFile``).

A writer process appending into a fresh segment pays for creating it and, page by page,
for the first touch of every page-cache page it writes into (on this VM a page the host
took back costs ~10x a warm one: a sink into a new store ran at half the speed of one into
warm pages). A :class:`SegmentPreparer` moves both off the writer:

- **Preallocation.** Once the published tail passes half of its segment, or the bytes a
  writer announced reach into the next one, the next segment is created ahead, in a folder
  beside the segments' (:attr:`MappedFileQueue.prepared_dir`, ``commitlog.prealloc/``):
  full size, sparse, complete before it gets its name there (a temporary file linked into
  place), so any process may prepare it (one link wins). Nothing that lists the segments
  (scans, verify, recovery, RocketMQ's tooling) meets it. The writer that rolls into it
  (any process, under the append lock) links it into ``commitlog/`` under the segment's
  name and removes the prepared name (:meth:`MappedFileQueue.get`): the segment appears
  whole, in one atomic step; without one it creates the segment as before. A new store's first segment is prepared the
  same way when its first writer
  announces its first batch. Prepared files are only zeros (nothing writes into them);
  one left behind (a killed process) is removed by the next first opener's recovery.
- **Warm-up** (``warm_mapped_file_enable``). The pages a writer of this process is about to
  write (from the published tail, as far as twice the bytes its appends under way and
  being encoded will take, within the current and the next segment) are faulted into the
  page cache first: ``MADV_POPULATE_READ`` over a shared, read-only mapping of each step of
  ``flush_least_pages_when_warm_mapped_file`` pages (a ``pread`` of them where the kernel
  lacks it). Reading allocates zero-filled pages for the holes and writes nothing: it cannot
  change a byte, so it needs no lock, is safe under writers of any process (even one that
  overtakes it), on a prepared file and on a live segment alike, and leaves no dirty page
  (RocketMQ writes zeros instead, which then have to be flushed). The pages belong to the
  file, so they stay when a prepared file is linked into place; the writer's ``pwrite``
  then copies into pages that exist. Not on tmpfs, where the segment is memory already and
  a read of a hole allocates it for good.

Driven by the writer: :meth:`expect` announces bytes about to be appended (as a batch is
encoded, before the append lock), :meth:`settle` when they are written. A service of the
store's loop (:mod:`rmqlog.service`), woken by :meth:`expect` when the warm-up has fallen
behind; one step per round, so the flusher's rounds go in between. A process that only
reads never prepares anything.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import mmap
import os
import threading
from collections.abc import Callable
from pathlib import Path

from .. import safe_open
from ..errors import WrongFileTypeError
from ..paths import segment_name
from .mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

MADV_POPULATE_READ = 22  # Linux 5.14+ <asm-generic/mman-common.h>
MADV_RANDOM = 1  # <asm-generic/mman-common.h>
PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
_munmap = _libc.munmap
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_madvise = _libc.madvise
_madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MAP_FAILED = ctypes.c_void_p(-1).value
_populate_ok = True  # MADV_POPULATE_READ known to work here (cleared at its first EINVAL)
#: Bytes announced (and not yet written) past which the preparer is woken at once.
WAKE_BYTES = 1 << 20


def populate(path: Path, lo: int, hi: int) -> None:
    """Fault the page-cache pages of bytes ``[lo, hi)`` of the file ``path`` in, reading only
    (see the module docstring). The kernel's work runs without the GIL (ctypes releases it).
    A file that is gone (deleted, or taken into place under another name) is skipped."""
    global _populate_ok
    lo -= lo % PAGE
    try:
        fd = safe_open.open_file(path, os.O_RDONLY)
    except (FileNotFoundError, WrongFileTypeError):  # (not the preparer's to report: the writer meets it)
        return
    try:
        hi = min(os.fstat(fd).st_size, -(-hi // PAGE) * PAGE)
        if hi <= lo:
            return
        if _populate_ok:
            addr = _mmap(None, hi - lo, mmap.PROT_READ, mmap.MAP_SHARED, fd, lo)
            if addr not in (None, _MAP_FAILED):
                try:
                    # no readahead while populating: it would mark pages for the next async
                    # readahead window (read_ahead_kb, 8 MiB here), and the reader that later
                    # faults on such a page (the dispatcher's walk of just-appended records)
                    # would then populate that whole window itself (20-35 ms on this VM)
                    _madvise(addr, hi - lo, MADV_RANDOM)
                    if _madvise(addr, hi - lo, MADV_POPULATE_READ) == 0:
                        return
                    err = ctypes.get_errno()
                finally:
                    _munmap(addr, hi - lo)
                if err != errno.EINVAL:  # (EINVAL: a kernel without it) anything else: skip the step
                    return
                _populate_ok = False
        for at in range(lo, hi, 1 << 20):  # the fallback: read them (allocates the pages the same way)
            os.pread(fd, min(1 << 20, hi - at), at)
    finally:
        os.close(fd)


class SegmentPreparer:
    """Preallocation and warm-up for the writers of one process (see the module docstring)."""

    name = "rmq-segment-preparer"
    repeat_when_busy = True  # behind: one step after another, the other services in between
    wait_first = False

    def __init__(
        self,
        segments: MappedFileQueue,
        published_tail: Callable[[], int],
        *,
        warm: bool,
        step_pages: int,
        wake: Callable[[SegmentPreparer], None],
    ) -> None:
        self.segments = segments
        self.published_tail = published_tail
        self.warm = warm and not segments.bounded_reads  # (tmpfs: see the module docstring)
        self.step = max(1, step_pages) * PAGE
        self.interval_s = 1.0  # idle rounds; appends wake it (expect)
        self.last_error: BaseException | None = None
        self._wake = wake
        self._lock = threading.Lock()
        self._pending = 0  # bytes this process's writers announced and have not written yet
        self._warmed = 0  # every page below this (from the tail it last saw) is warm
        self._target = 0  # how far the warm-up should reach
        self._prepared: set[int] = set()  # segments this process prepared (in the prepared folder)
        self.warmed_bytes = 0  # what it faulted in (for tests and benchmarks)
        self.prepared_segments = 0

    # ---------------------------------------------------- the writer's side
    def expect(self, nbytes: int) -> None:
        """A writer of this process will append about ``nbytes`` more (cheap: a comparison,
        and a wake-up of the loop only when the warm-up is behind)."""
        with self._lock:
            self._pending += nbytes
            large = self._pending >= WAKE_BYTES  # (small puts: the idle rounds preallocate)
        if large:
            self._wake(self)

    def settle(self, nbytes: int) -> None:
        """Those bytes were appended (or the append failed)."""
        with self._lock:
            self._pending = max(0, self._pending - nbytes)

    # ------------------------------------------------------- the service
    def run_once(self, now: float) -> bool:
        """One step: prepare the segment the tail is in (a new store: its first) or the next
        one, if due; else warm one step ahead of the tail. Returns whether there is more to do."""
        segs = self.segments
        size = segs.size
        tail = self.published_tail()
        start = tail - tail % size
        with self._lock:
            pending = self._pending
            self._target = tail + 2 * pending if pending else tail
            target = min(self._target, start + 2 * size)
            if self._warmed < tail:
                self._warmed = tail
            at = self._warmed
        for old in [s for s in self._prepared if s < start]:  # taken into place, or passed: not needed
            self._prepared.discard(old)
            with contextlib.suppress(FileNotFoundError, WrongFileTypeError):
                safe_open.unlink(segs.prepared_path(old))
        if pending and self._prepare(start):
            return True
        if (tail - start >= size // 2 or target > start + size) and self._prepare(start + size):
            return True
        if not self.warm or at >= target:
            return False
        seg_start = at - at % size
        path = segs.directory / segment_name(seg_start)
        if safe_open.kind(path) is None:
            path = segs.prepared_path(seg_start)
        hi = min(target, seg_start + size, at + self.step)
        populate(path, at - seg_start, hi - seg_start)
        with self._lock:
            self._warmed = max(self._warmed, hi)
            self.warmed_bytes += hi - at
            return self._warmed < self._target

    def _prepare(self, start: int) -> bool:
        """Create the segment at ``start`` under its prepared name unless it (or its prepared
        file) exists; returns whether it did."""
        segs = self.segments
        try:
            if safe_open.kind(segs.directory / segment_name(start)) or safe_open.kind(segs.prepared_path(start)):
                return False
            segs.create_file(segs.prepared_path(start), start)
        except (
            OSError,
            WrongFileTypeError,
        ) as exc:  # a full disk: the writer creates it when it rolls (and reports that)
            log.warning("could not prepare commitlog segment %d ahead: %s", start, exc)
            return False
        self._prepared.add(start)
        self.prepared_segments += 1
        return True
