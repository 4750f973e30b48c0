"""Fixed-size memory-mapped segment files (RocketMQ's MappedFile; the folder of them is
:mod:`rmqlog.log.mapped_file_queue`).

A segment is a file of exactly ``size`` bytes named by the 20-digit offset of its first
byte. New segments are created sparse (``ftruncate``) so a 1 GiB segment costs no disk until
written. Every process maps the same files ``MAP_SHARED``: bytes written by one process are
visible to the others through the page cache at once; what makes them *meaningful* to a
reader is the published tail (see :mod:`rmqlog.log.append_state`), never the bytes themselves.

Full disks. Bytes reach a segment through ``pwrite`` only, never as stores into the mapping:
a store into a page the filesystem cannot allocate (a sparse page on a full disk) kills the
process with SIGBUS, where ``pwrite`` fails with ``ENOSPC`` (raised as
:class:`~rmqlog.errors.DiskFullError` naming the file). On tmpfs even a *read* of a hole
through a shared mapping allocates the page, and SIGBUS is the answer when the tmpfs is
full; there (:attr:`MappedFile.bounded_reads`) readers that may look past the written data
stop at :meth:`MappedFile.readable_end`, and a new segment gets its first page allocated
when it is created (which then fails typed if there is no room). Bytes are cleared
(:meth:`MappedFile.clear`) by punching holes, which frees blocks and needs none.

Open files are bounded (:mod:`rmqlog.log.open_files`): a segment is opened on first use,
closed when idle and least recently used, reopened by its next use; an operation using its
descriptor holds it (:meth:`MappedFile.acquire_fd`). Running out of descriptors or
mappings raises :class:`~rmqlog.errors.TooManyOpenFilesError` naming the file.

Nothing here decides what is valid data: that is the commitlog's and the recovery's job.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from .. import safe_open
from ..errors import (
    CorruptStoreError,
    disk_full_from_errno,
    raise_if_disk_full,
    raise_if_out_of_files,
    too_many_open_files,
)
from .open_files import OpenFiles
from .pins import PinCount

#: Entries per ``pwritev`` call (Linux's IOV_MAX).
IOV_MAX = 1024
_libc = ctypes.CDLL(None, use_errno=True)
_pwritev = _libc.pwritev
_pwritev.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
_pwritev.restype = ctypes.c_ssize_t
# msync through ctypes, not mmap.flush(): CPython's mmap.flush keeps the GIL during the
# msync, which stalled every other thread of the process (the writer) for the whole sync
_msync = _libc.msync
_msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_msync.restype = ctypes.c_int
MS_SYNC = 4  # Linux <sys/mman.h>
_fallocate = getattr(_libc, "fallocate64", None) or _libc.fallocate
_fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_fallocate.restype = ctypes.c_int
FALLOC_FL_KEEP_SIZE = 0x01  # Linux <linux/falloc.h>
FALLOC_FL_PUNCH_HOLE = 0x02
_statfs = _libc.statfs
_statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
_statfs.restype = ctypes.c_int
TMPFS_MAGIC = 0x01021994  # <linux/magic.h>: tmpfs, /dev/shm (shmem)
PAGE = mmap.PAGESIZE
#: Bytes read per step when :meth:`MappedFile.clear` checks pages it cannot punch.
CLEAR_CHUNK = 1 << 20
#: fallocate errnos meaning "not supported here" (the caller falls back to writing zeros).
_NO_PUNCH = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})


def hole_reads_allocate(path: Path) -> bool:
    """Whether reading a hole through a shared mapping of a file under ``path`` allocates it.

    True on tmpfs (shmem: a read fault on a hole allocates a page, and a full tmpfs answers
    with SIGBUS); False elsewhere (ext4, xfs, btrfs, NFS map a zero page, no block). ``path``
    need not exist yet: its nearest existing ancestor decides.
    """
    while not path.exists() and path.parent != path:
        path = path.parent
    buf = ctypes.create_string_buffer(256)  # struct statfs (120 bytes on 64-bit Linux)
    if _statfs(os.fsencode(path), buf) != 0:
        return False
    f_type = ctypes.c_long.from_buffer(buf).value  # the first field, f_type (__fsword_t)
    return f_type & 0xFFFFFFFF == TMPFS_MAGIC


def _round_up(n: int) -> int:
    return -(-n // PAGE) * PAGE


class MappedFile:
    """One segment file, opened and mapped on first use, closed by its store's
    :class:`~rmqlog.log.open_files.OpenFiles` when idle and least recently used (``open_files``;
    ``None``: never, until :meth:`close`), reopened by its next use."""

    def __init__(
        self,
        path: Path,
        start: int,
        size: int,
        *,
        bounded_reads: bool = False,
        read_only: bool = False,
        open_files: OpenFiles | None = None,
    ) -> None:
        self.path = path
        self.start = start
        self.size = size
        #: opened and mapped read-only (a read-only store: its files may be on a read-only
        #: mount); every write then fails with EBADF, which the facade never lets happen
        self.read_only = read_only
        self._flags = os.O_RDONLY if read_only else os.O_RDWR
        #: reads of the mapping must stay below :meth:`readable_end` (see the module docstring)
        self.bounded_reads = bounded_reads
        self._can_punch = True
        self._mm: mmap.mmap | None = None
        self._np: np.ndarray | None = None
        self._mv: memoryview | None = None
        self._fd: int | None = None
        self._lock = threading.Lock()
        #: operations using the descriptor now (:meth:`acquire_fd`): the file is not closed
        #: for the limit on open files while any is (see :mod:`rmqlog.log.open_files`)
        self._users = 0
        self._open_files = open_files
        #: reads of this process holding the file (see :mod:`rmqlog.log.pins`)
        self.pins = PinCount()
        #: the inode of the file mapped last (``None``: never mapped): a listing that finds
        #: another file at this name makes its queue let go of this one
        #: (:meth:`rmqlog.log.mapped_file_queue.MappedFileQueue.listed_starts`)
        self.ino: int | None = None

    def __del__(self) -> None:
        # a segment dropped from its queue (retention: see MappedFileQueue.drop_below) is
        # closed when its last user lets go of it; the mapping closes itself
        fd = getattr(self, "_fd", None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def end(self) -> int:
        return self.start + self.size

    def _open_fd(self) -> int:
        """``os.open`` of the file (out of descriptors: :class:`TooManyOpenFilesError`)."""
        try:
            return safe_open.open_file(self.path, self._flags)
        except OSError as exc:
            raise_if_out_of_files(exc, self.path, "opening a segment")
            raise

    def _used(self) -> None:
        if self._open_files is not None:  # the most recently used now
            self._open_files.used(self)

    def _map(self) -> mmap.mmap:
        mm = self._mm
        if mm is None:
            with self._lock:
                mm = self._mm
                if mm is None:
                    # the descriptor already open, if any: a reader's pin opened it, and the file
                    # may have been deleted since (retention), which the descriptor outlives
                    own = self._fd is None
                    fd = self._open_fd() if own else self._fd
                    assert fd is not None
                    try:
                        st = os.fstat(fd)
                        actual = st.st_size
                        self.ino = st.st_ino
                        if actual != self.size:
                            raise CorruptStoreError(
                                f"segment is {actual} bytes, expected {self.size}", path=str(self.path)
                            )
                        prot = mmap.PROT_READ if self.read_only else mmap.PROT_READ | mmap.PROT_WRITE
                        try:
                            mm = self._mm = mmap.mmap(fd, self.size, mmap.MAP_SHARED, prot)
                        except OSError as exc:  # mmap dups the descriptor (EMFILE), or no mapping is left (ENOMEM)
                            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
                                raise too_many_open_files(exc, self.path, "mapping a segment") from exc
                            raise
                    finally:
                        if own:
                            os.close(fd)
        self._used()
        return mm

    @property
    def mm(self) -> memoryview:  # (a view keeps the mapping while it is held)
        return memoryview(self.array())  # type: ignore[arg-type]

    def array(self) -> np.ndarray:
        """The segment as a writable uint8 numpy array (zero-copy over the mapping).

        Hold the array (not an address taken from it) for as long as it is read: the file
        may be closed meanwhile for the limit on open files, and the mapping stays only while
        a view of it exists."""
        arr = self._np
        if arr is not None:
            self._used()
            return arr
        while True:
            mm = self._map()
            with self._lock:  # (closing takes it too: the view is made before any close)
                if self._mm is mm:
                    if self._np is None:
                        self._np = np.frombuffer(mm, np.uint8)
                        self._mv = memoryview(self._np)  # type: ignore[arg-type]
                    return self._np
            # closed for the limit between the two: map it again

    def view(self) -> memoryview:
        """:meth:`array` as a byte ``memoryview``, made once with it (the same rules): a
        ``struct`` read of a few fields costs ~0.2 us through it, ~0.4 us on the array."""
        mv = self._mv
        if mv is not None:
            self._used()
            return mv
        arr = self.array()
        mv = self._mv
        return mv if mv is not None else memoryview(arr)  # type: ignore[arg-type]

    def buffer(self) -> pa.Buffer:
        """The segment as an Arrow buffer (zero-copy). Do not keep it past a read."""
        return pa.py_buffer(self.array())

    def acquire_fd(self) -> int:
        """The descriptor of ``pwrite``s, ``pread``s and pins (opened on first use), held: it is
        not closed for the limit on open files until :meth:`release_fd` (one per call)."""
        with self._lock:
            fd = self._fd
            if fd is None:
                fd = self._fd = self._open_fd()
            self._users += 1
        self._used()
        return fd

    def release_fd(self) -> None:
        with self._lock:  # (one per acquire_fd)
            self._users -= 1

    @contextlib.contextmanager
    def _fd_held(self) -> Iterator[int]:
        fd = self.acquire_fd()
        try:
            yield fd
        finally:
            self.release_fd()

    def write_fd(self, rel: int, length: int) -> int:
        """:meth:`acquire_fd` to ``pwrite`` ``length`` bytes at ``rel`` (checked to fit)."""
        if rel < 0 or length < 0 or rel + length > self.size:
            raise ValueError(f"write of {length} bytes at {rel} outside segment {self.path}")
        return self.acquire_fd()

    def write(self, rel: int, data: memoryview | bytes | bytearray) -> None:
        """Write ``data`` at ``rel`` through the page cache (``pwrite``), which the mapping shares.

        ``pwrite`` rather than a copy into the mapping: the copy takes a page fault for every
        page first touched and measured ~25% slower (3.5 vs 4.9 GB/s) on this machine.
        """
        view = memoryview(data).cast("B")
        fd = self.write_fd(rel, len(view))
        try:
            while len(view):
                n = os.pwrite(fd, view, rel)
                view = view[n:]
                rel += n
        except OSError as exc:
            raise_if_disk_full(exc, self.path, f"writing {len(view)} bytes at offset {rel}")
            raise
        finally:
            self.release_fd()

    def sync(self, rel_from: int = 0, rel_to: int | None = None) -> None:
        """Make the bytes in ``[rel_from, rel_to)`` durable, whoever wrote them (any process).

        ``msync`` of just that range (Linux runs ``fsync`` over the file range, metadata
        included), not ``fdatasync`` of the file: with a writer appending meanwhile, a
        whole-file sync keeps chasing the pages it dirties and measured 2-3x slower puts.
        Raises ``OSError`` if the sync fails (e.g. EIO), :class:`~rmqlog.errors.DiskFullError`
        if it fails for want of space (a filesystem that allocates at writeback, NFS).
        """
        page = mmap.PAGESIZE
        lo = (rel_from // page) * page
        hi = self.size if rel_to is None else min(self.size, rel_to)
        if hi > lo:
            arr = self.array()  # held: the mapping stays while the sync runs
            if _msync(arr.ctypes.data + lo, hi - lo, MS_SYNC) != 0:  # releases the GIL while it waits
                disk_full_from_errno(ctypes.get_errno(), self.path, f"syncing bytes {lo}..{hi}")

    def writev(self, rel: int, iov: np.ndarray) -> None:
        """Write the buffers of ``iov`` ((address, length) rows, ``struct iovec``) at ``rel``.

        One ``pwritev`` per :data:`IOV_MAX` entries: scatter-gather straight from the
        caller's arrays, with no joined copy. The caller keeps those arrays alive.
        """
        iov = np.ascontiguousarray(iov, np.uint64)
        fd = self.write_fd(rel, int(iov[:, 1].sum()))
        try:
            for k in range(0, len(iov), IOV_MAX):
                part = iov[k : k + IOV_MAX]
                want = int(part[:, 1].sum())
                done = _pwritev(fd, part.ctypes.data, len(part), rel)
                if done < 0:
                    disk_full_from_errno(ctypes.get_errno(), self.path, f"writing {want} bytes at offset {rel}")
                if done < want:  # short write (rare: e.g. a full disk): finish entry by entry
                    self._finish_short_write(part, done, rel)
                rel += want
        finally:
            self.release_fd()

    def _finish_short_write(self, part: np.ndarray, done: int, rel: int) -> None:
        ends = np.cumsum(part[:, 1].astype(np.int64))
        for i in range(int(np.searchsorted(ends, done, side="right")), len(part)):
            addr, length = int(part[i, 0]), int(part[i, 1])
            start = int(ends[i]) - length
            skip = max(0, done - start)
            self.write(rel + start + skip, ctypes.string_at(addr + skip, length - skip))

    def read(self, rel: int, length: int) -> bytes:
        """``length`` bytes at ``rel`` (``pread``: cheaper than the mapping for a few bytes)."""
        with self._fd_held() as fd:
            return os.pread(fd, length, rel)

    # ------------------------------------------------------------ holes
    def readable_end(self, rel: int = 0) -> int:
        """How far from ``rel`` the mapping may be read: the segment size, except with
        :attr:`bounded_reads` (tmpfs), where it is the first hole at or after ``rel`` (``rel``
        itself when that is a hole). Segments are written from the front, so there it is
        where the written data ends: the bytes past it read as zeros.
        """
        if not self.bounded_reads:
            return self.size
        with self._fd_held() as fd:
            return min(self.size, os.lseek(fd, rel, os.SEEK_HOLE))

    def data_regions(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The ``(start, end)`` ranges within ``[lo, hi)`` that are not holes, ascending.

        ``SEEK_DATA``/``SEEK_HOLE``: two ``lseek`` per region. Where the filesystem does not
        support them, the whole range counts as data.
        """
        out: list[tuple[int, int]] = []
        pos = lo
        with self._fd_held() as fd:
            while pos < hi:
                try:
                    start = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:  # no data past pos
                        break
                    out.append((pos, hi))  # no SEEK_DATA here: data as far as we know
                    break
                if start >= hi:
                    break
                end = min(hi, os.lseek(fd, start, os.SEEK_HOLE))
                out.append((max(start, pos), end))
                pos = end
        return out

    def clear(self, lo: int, hi: int) -> int:
        """Make ``[lo, hi)`` read as zeros; returns how many of its bytes were data (not holes).

        Never through the mapping, and never needing a new block (so it works on a full
        disk): in the data regions only, whole pages are punched out (``fallocate``
        ``PUNCH_HOLE``, which frees their blocks) and the partial pages at the edges, and
        every page where punching is not supported, are read and only their non-zero bytes
        overwritten with zeros (``pwrite``). Page 0 is never punched (see
        :meth:`MappedFileQueue.get`). The work goes from the back and ``lo``'s own page comes
        last, so a clear cut short (a kill) leaves the bytes at ``lo`` as they were. Raises
        :class:`~rmqlog.errors.DiskFullError` or ``OSError`` naming the file.
        """
        total = 0
        for a, b in reversed(self.data_regions(lo, hi)):
            total += b - a
            head = min(b, max(PAGE, _round_up(a)))  # [a, head): written over
            tail = max(head, b // PAGE * PAGE)  # [tail, b): written over
            if tail > head and not self._punch(head, tail):
                self._zero_nonzero(head, tail)
            self._zero_nonzero(tail, b)
            self._zero_nonzero(a, head)
        return total

    def _punch(self, lo: int, hi: int) -> bool:
        """Deallocate whole pages ``[lo, hi)``; False where the filesystem cannot."""
        if not self._can_punch:
            return False
        with self._fd_held() as fd:
            if _fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, lo, hi - lo) == 0:
                return True
            err = ctypes.get_errno()
        if err in _NO_PUNCH:
            self._can_punch = False
            return False
        disk_full_from_errno(err, self.path, f"punching bytes {lo}..{hi}")

    def _zero_nonzero(self, lo: int, hi: int) -> None:
        """Overwrite the non-zero bytes of ``[lo, hi)`` with zeros, a chunk at a time from the back."""
        end = hi
        while end > lo:
            start = max(lo, end - CLEAR_CHUNK)
            nz = np.flatnonzero(np.frombuffer(self.read(start, end - start), np.uint8))
            if len(nz):  # bytes that are non-zero are allocated: writing over them needs no block
                self.write(start + int(nz[0]), bytes(int(nz[-1]) - int(nz[0]) + 1))
            end = start

    @property
    def is_open(self) -> bool:
        """Whether this process holds a descriptor or mapping of the file now."""
        return self._fd is not None or self._mm is not None

    def close_if_idle(self) -> bool:
        """Close the descriptor and mapping unless an operation holds them; True if closed.
        Never waits: a file whose lock is taken is being opened or used."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._users:
                return False
            self._close_locked()
            return True
        finally:
            self._lock.release()

    def _close_locked(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._np = self._mv = None
        if self._mm is not None:
            # a caller may still hold a zero-copy view; the mapping goes with it
            with contextlib.suppress(BufferError):
                self._mm.close()
            self._mm = None

    def close(self) -> None:
        with self._lock:
            self._close_locked()
        if self._open_files is not None:
            self._open_files.forget(self)
