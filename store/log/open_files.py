"""Open mapped files, bounded: the least recently used idle ones are closed first.

Every commitlog segment and consume-queue file a store uses is a
:class:`~rmqlog.log.mapped_file.MappedFile`. Open, one holds up to two descriptors (its own,
for ``pwrite``/``pread``/``flock``, and the duplicate Python's ``mmap`` keeps) and one
mapping. Kept open for the store's life, they grow with the number of queues and segments
touched: 1,200 queues exhausted ``ulimit -n 1024``, and mappings are bounded too
(``vm.max_map_count``, 65,530 by default). So each store has one :class:`OpenFiles`: the
files it holds open, least recently used first, at most ``limit`` of them
(``StoreConfig.max_open_mapped_files``; :func:`default_limit` when 0). Opening one more
closes the least recently used *idle* files until the store is back under the limit; a
closed file is reopened, lazily, by its next use (a few system calls: a workload whose hot
files fit under the limit never pays it).

Idle means that no operation is using the file's descriptor (a ``pwrite``, a read pin's
``flock``, the write pipeline's queued writes: :meth:`MappedFile.acquire_fd` counts them) and
no thread is opening or closing it. A busy file is never closed: the store may go over its
limit for as long as more files than that are in use at once. Memory handed out from a
mapping (numpy views, Arrow buffers) stays valid after its file is closed here: Python's
``mmap`` refuses to unmap while views exist, and the mapping goes with its last view.

Lock order: this object's lock, then a file's (taken without waiting: a file whose lock is
held is being opened or used, hence not idle). A file never calls in here while holding its
own lock.
"""

from __future__ import annotations

import resource
import threading
from collections import OrderedDict
from itertools import islice
from typing import Protocol

#: The derived limit's bounds (files): a low ``ulimit -n`` still leaves room for a few hot
#: queues; a huge one does not map thousands of files nobody reads again.
MIN_DEFAULT = 16
MAX_DEFAULT = 4096
#: The share of ``RLIMIT_NOFILE`` the derived limit lets a store's mapped files use: two
#: descriptors each, a quarter of the limit in all (the rest for the process's other files,
#: sockets and stores).
NOFILE_SHARE = 8
#: Files past the excess looked at when the oldest are busy (see :meth:`OpenFiles.used`).
SCAN_SLACK = 16


def default_limit() -> int:
    """The limit of a store whose ``max_open_mapped_files`` is 0: the soft ``RLIMIT_NOFILE``
    divided by :data:`NOFILE_SHARE`, within ``[MIN_DEFAULT, MAX_DEFAULT]`` (``ulimit -n`` 1024:
    128 files, 256 descriptors; 20,000: 2,500; unlimited: 4,096)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MAX_DEFAULT
    return max(MIN_DEFAULT, min(MAX_DEFAULT, soft // NOFILE_SHARE))


class Closable(Protocol):
    """What :class:`OpenFiles` needs of a file (:class:`~rmqlog.log.mapped_file.MappedFile`)."""

    def close_if_idle(self) -> bool:
        """Close the descriptors and mapping if no operation uses them; True if closed (or
        already closed), False if busy. Must not wait for the file's lock."""
        ...


class OpenFiles:
    """The open files of one store, least recently used first (see the module docstring)."""

    def __init__(self, limit: int | None = None) -> None:
        #: files kept open at most (busy files aside)
        self.limit = default_limit() if not limit else int(limit)
        self._lru: OrderedDict[Closable, None] = OrderedDict()
        self._lock = threading.Lock()
        #: files closed to stay under the limit, since the store opened (for tests and benchmarks)
        self.closed_count = 0
        #: the file :meth:`used` last (read without the lock: at worst one relink is skipped
        #: or done twice, and the order is only a hint of what to close first)
        self._last: Closable | None = None

    def __len__(self) -> int:
        return len(self._lru)

    def used(self, f: Closable) -> None:
        """``f`` is open and was just used: it becomes the most recent. When that adds a file,
        idle files are closed, least recently used first, until at most :attr:`limit` are open."""
        if self._last is f:  # the same file again (a read's or a write's next step): already the newest
            return
        with self._lock:
            self._last = f
            lru = self._lru
            if f in lru:
                lru.move_to_end(f)  # the hot path: a dict lookup and a relink
                return
            lru[f] = None
            excess = len(lru) - self.limit
            if excess <= 0:
                return
            # oldest first; a busy one stays open (the store goes over the limit meanwhile).
            # Busy files were used last, so they sit at the recent end: looking at a few more
            # than needed finds idle ones, without a pass over every open file
            for g in list(islice(lru, excess + SCAN_SLACK)):
                if g is not f and g.close_if_idle():
                    del lru[g]  # (never _last: that is f)
                    self.closed_count += 1
                    excess -= 1
                    if excess == 0:
                        break

    def forget(self, f: Closable) -> None:
        """``f`` was closed by its owner (or let go: a segment deleted by retention)."""
        with self._lock:
            self._lru.pop(f, None)
            if self._last is f:
                self._last = None


__all__ = ["OpenFiles", "default_limit", "MIN_DEFAULT", "MAX_DEFAULT"]
