"""The commitlog's write pipeline: an append's chunks written in log order on another thread
(the C helper's :class:`ChunkWriter` when built, else a process-local pool), at most
:data:`IN_FLIGHT` pending, so packing the next chunk overlaps writing the last."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np

from ..errors import DiskFullError, raise_if_disk_full
from ..fileio import ProcessLocalPool
from ..native import (
    ChunkWriter as _ChunkWriter,  # (None without the C helper: chunks go to _WRITE_POOL)
)
from .mapped_file import MappedFile

_WRITE_POOL = ProcessLocalPool("rmq-write")

#: Chunks encoded ahead of the one being written (each holds ~1 MiB of the batch's memory).
IN_FLIGHT = 2


_buffers = threading.local()


def chunk_buffer(size: int) -> np.ndarray:
    """A buffer of ``size`` bytes from this thread's ring of ``IN_FLIGHT + 1``.

    Chunk ``k`` is packed while chunks ``k-1`` and ``k-2`` may still be being written: with
    one buffer more than writes in flight, the buffer handed out is never one of theirs.
    Reused across appends, so the pages are faulted in once, not per chunk.
    """
    ring: list[np.ndarray] | None = getattr(_buffers, "ring", None)
    if ring is None:
        ring = _buffers.ring = [np.empty(0, np.uint8) for _ in range(IN_FLIGHT + 1)]
        _buffers.next = 0
    i = _buffers.next
    _buffers.next = (i + 1) % len(ring)
    if len(ring[i]) < size:
        ring[i] = np.empty(max(size, 2 * len(ring[i])), np.uint8)
    return ring[i][:size]


class WritePipeline:
    """Runs writes in order on another thread; on exit, every write has finished.

    :meth:`write` (a buffer into a segment) goes to a native :class:`ChunkWriter` when the C
    helper is built, :meth:`submit` (any write call) to :data:`_WRITE_POOL`. At most
    :data:`IN_FLIGHT` writes are pending after either returns. The first failed write is
    raised on exit, after the others finished (so no write still reads a buffer its caller
    is about to free). ``keep`` holds what a write's addresses point into until it is done.

    One ordered stream: a write starts only once every write submitted before it has
    finished (switching between the two writers waits for the other one to drain; rare, a
    mix of batch kinds in one append), and none starts after one failed. So the bytes a
    killed or failed append leaves are a prefix of its writes, which begin at the tail:
    nothing lands past the tail unless the tail's own first bytes did (see
    :meth:`~rmqlog.log.commitlog.CommitLog.scrub`).
    """

    def __init__(self, chunks: int) -> None:
        self._pending: deque[tuple[Future[None], object]] = deque()
        # one chunk: nothing to overlap its write with, and a hand-off to the write thread
        # costs ~50 us (a thread wake-up and the GIL twice), a lot for a 100-message put
        self._inline = chunks <= 1
        self._native: Any = None  # a rmqlog._native.ChunkWriter, made on the first write()
        self._keep: list[tuple[np.ndarray, MappedFile, int]] = []  # (buffer, segment, offset) per native write
        self._error: BaseException | None = None
        self._failed = False  # a write on the pool failed: the ones queued after it are skipped

    def write(self, seg: MappedFile, rel: int, buf: np.ndarray) -> None:
        """``seg.write(rel, buf)`` in the pipeline's order (``buf`` is kept until exit)."""
        if self._inline or _ChunkWriter is None:
            self.submit(seg.write, rel, buf)
            return
        if self._pending:
            self._drain_pool()
        self._check()
        if self._native is None:
            self._native = _ChunkWriter(IN_FLIGHT)
        fd = seg.write_fd(rel, buf.nbytes)  # held until the write is done (_drain_native)
        self._keep.append((buf, seg, rel))
        try:
            self._native.submit(fd, rel, buf.ctypes.data, buf.nbytes)
        except BaseException:
            self._keep.pop()
            seg.release_fd()
            raise

    def write_small(self, seg: MappedFile, rel: int, data: bytes) -> None:
        """A few bytes (a blank record) in the pipeline's order, on whichever writer it is using."""
        if self._native is not None:
            self.write(seg, rel, np.frombuffer(data, np.uint8))
        elif self._pending:
            self.submit(seg.write, rel, data)
        else:  # nothing in flight before it: no hand-off
            self._check()
            seg.write(rel, data)

    def submit(self, fn: Callable[..., None], *args: object, keep: object = None) -> None:
        if self._inline:
            fn(*args)
            return
        if self._native is not None:
            self._drain_native()
        self._check()
        while len(self._pending) >= IN_FLIGHT:
            self._pending[0][0].result()  # wait *before* dropping what the write reads from
            self._pending.popleft()
        self._pending.append((_WRITE_POOL.get().submit(self._guarded, fn, *args), keep))

    def _guarded(self, fn: Callable[..., None], *args: object) -> None:
        """Run a queued write unless one before it failed (as the native writer skips them)."""
        if self._failed:
            return
        try:
            fn(*args)
        except BaseException:
            self._failed = True
            raise

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def _drain_native(self) -> None:
        """Wait for the native writer's writes and stop it (its error is kept for :meth:`_check`)."""
        try:
            self._native.finish()
        except OSError as e:
            self._error = self._error or self._typed(e)
        self._native = None
        for _, seg, _ in self._keep:  # every write is done: the descriptors may be closed again
            seg.release_fd()
        self._keep.clear()

    def _typed(self, e: OSError) -> OSError:
        """The native writer's error, naming the segment file of the failed write."""
        at = getattr(e, "offset", None)
        seg = next((s for _, s, rel in self._keep if rel == at), None)
        if seg is None:
            return e
        try:
            raise_if_disk_full(e, seg.path, f"writing at offset {at}")
        except DiskFullError as typed:
            return typed
        return OSError(e.errno, e.strerror, str(seg.path))

    def _drain_pool(self) -> None:
        while self._pending:
            try:
                self._pending[0][0].result()
            except BaseException as e:  # noqa: BLE001 - raised by _check or on exit
                self._error = self._error or e
            self._pending.popleft()

    def __enter__(self) -> WritePipeline:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self._native is not None:
            self._drain_native()
        self._drain_pool()
        if self._error is not None and exc_type is None:  # an error already on its way wins
            raise self._error
