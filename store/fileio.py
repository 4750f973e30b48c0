"""Small filesystem primitives: inter-process locks and crash-safe file replacement."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from . import safe_open
from .errors import ReadOnlyStoreError, WrongFileTypeError, raise_if_disk_full


def lockf_blocking(fd: int, how: int, length: int = 0, start: int = 0) -> None:
    """``fcntl.lockf`` that waits, retrying the kernel's false deadlock reports.

    Linux detects deadlocks between POSIX locks per *process*: a process whose flusher
    thread holds one lock while its writer thread waits for another looks deadlocked with a
    process doing the reverse, although each thread would finish and release. The kernel
    then fails the wait with EDEADLK instead of blocking; waiting a moment and asking again
    is the usual answer (the thread holding the other lock is making progress).
    """
    delay = 0.0005
    while True:
        try:
            fcntl.lockf(fd, how, length, start)
            return
        except OSError as exc:
            if exc.errno != errno.EDEADLK:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.01)


class InterProcessLock:
    """An exclusive lock shared by the threads of this process and by other processes.

    POSIX record locks (``fcntl.lockf``) belong to a process, not a thread, so a
    ``threading.RLock`` orders the threads first. ``lockf`` rather than ``flock`` because
    record locks also work on NFS, where executors on several hosts may share a store.
    The lock is released by the kernel if the process dies, so a killed writer never
    leaves the store locked.
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        #: a read-only store's lock: the file is opened read-only and never created (a lock
        #: file that does not exist means no process of ours ever wrote here: nothing to wait
        #: for), and only shared locks are taken (a read lock needs no write access)
        self.read_only = read_only
        self._thread_lock = threading.RLock()
        self._fd: int | None = None
        self._depth = 0
        #: changes with every exclusive hold (0: not held exclusively): a check made under one
        #: hold stands for the rest of it (nobody else can change what the lock guards)
        self.exclusive_hold = 0
        self._holds = 0

    def _open(self) -> int | None:
        if self._fd is None:
            if self.read_only:
                try:
                    self._fd = safe_open.open_file(self.path, os.O_RDONLY)
                except FileNotFoundError:
                    return None
            else:
                self._fd = safe_open.open_file(self.path, os.O_RDWR | os.O_CREAT)
        return self._fd

    def make_writable(self) -> None:
        """Turn a read-only lock into a normal one (a normal open of the same store in this
        process); waits until no thread holds it, then reopens its file on next use."""
        with self._thread_lock:
            if self.read_only:
                if self._fd is not None and self._depth == 0:
                    os.close(self._fd)
                    self._fd = None
                self.read_only = False

    def acquire(self, shared: bool = False) -> None:
        self._thread_lock.acquire()
        try:
            if self._depth == 0:
                if self.read_only and not shared:
                    raise ReadOnlyStoreError(f"an exclusive lock ({self.path.name}) in a read-only store")
                fd = self._open()
                if fd is not None:
                    lockf_blocking(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
                self._holds += 1
                self.exclusive_hold = 0 if shared else self._holds
            self._depth += 1
        except BaseException:
            self._thread_lock.release()
            raise

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.exclusive_hold = 0
            if self._fd is not None:
                fcntl.lockf(self._fd, fcntl.LOCK_UN)
        self._thread_lock.release()

    @contextmanager
    def held(self, shared: bool = False) -> Iterator[None]:
        self.acquire(shared)
        try:
            yield
        finally:
            self.release()

    def close(self) -> None:
        with self._thread_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename or a new file in it survives power loss."""
    safe_open.fsync_folder(path)


def replace_file(path: Path, data: bytes, *, keep_backup: bool = False, durable: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically: write ``<path>.tmp``, then rename over it.

    With ``keep_backup`` the previous content is first copied to ``<path>.bak`` (RocketMQ's
    ``MixAll.string2File``), so a reader can fall back to it. With ``durable`` the data and
    the directory are fsynced before returning. A crash at any instant leaves either the
    old or the new content under ``path``, never a mix. On a full disk it raises
    :class:`~rmqlog.errors.DiskFullError` naming ``path``, and ``path`` keeps its old content.
    Something at ``path`` (or ``.tmp``, ``.bak``) that is not a file (a folder, a link) raises
    :class:`~rmqlog.errors.WrongFileTypeError` and is left as it is.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        if (found := safe_open.kind(path)) not in (safe_open.FILE, None):
            raise WrongFileTypeError(str(path), found, safe_open.FILE)
        fd = safe_open.open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if keep_backup and found is not None:
            bak = path.with_name(path.name + ".bak")
            safe_open.rename(path, bak)  # the old file becomes the backup ...
        safe_open.rename(tmp, path)  # ... and the new one takes its name atomically
        if durable:
            fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError, WrongFileTypeError):
            safe_open.unlink(tmp)  # a partial new file (a full disk) would only hold space
        raise_if_disk_full(exc, path, "replacing the file")
        raise


def rewrite_in_place(path: Path, data: bytes) -> None:
    """Overwrite ``path`` from its start with ``data``, padded with spaces to the file's length.

    For a small JSON file (which allows trailing spaces) on a full disk: the blocks it
    already has are reused, where :func:`replace_file` needs new ones. Not atomic: a crash
    mid-write can leave a mix, which a reader must treat as unreadable. Raises
    :class:`DiskFullError` naming ``path`` if the file must grow and there is no room.
    """
    try:
        fd = safe_open.open_file(path, os.O_WRONLY | os.O_CREAT)
        try:
            view = memoryview(data + b" " * max(0, os.fstat(fd).st_size - len(data)))
            at = 0
            while view:
                n = os.pwrite(fd, view, at)
                view, at = view[n:], at + n
        finally:
            os.close(fd)
    except OSError as exc:
        raise_if_disk_full(exc, path, "rewriting the file in place")
        raise


def read_with_backup(path: Path) -> bytes | None:
    """Read ``path``, falling back to ``<path>.bak`` when it is missing; ``None`` if neither exists.
    Raises :class:`~rmqlog.errors.WrongFileTypeError` for a folder or a link there."""
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            return safe_open.read_bytes(candidate)
        except FileNotFoundError:
            continue
    return None


class ProcessLocalPool:
    """A one-thread executor, made anew in a forked child.

    A ``ThreadPoolExecutor`` carried over a ``fork`` still counts its parent's thread, which
    does not exist in the child: work submitted there would wait forever. (Spark forks its
    Python workers; a user's ``multiprocessing`` may fork after a put.)
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._pid = -1
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def get(self) -> ThreadPoolExecutor:
        pool = self._pool
        if pool is None or self._pid != os.getpid():
            with self._lock:
                if self._pool is None or self._pid != os.getpid():
                    self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
                    self._pid = os.getpid()
                pool = self._pool
        return pool


class LockRegistry:
    """One :class:`InterProcessLock` per lock file per process.

    POSIX record locks are per process: two lock objects on one file in the same process
    would not exclude each other (and closing either fd drops both), so stores opened twice
    in one process share their lock objects.
    """

    _locks: dict[str, InterProcessLock] = {}
    _refs: dict[str, int] = {}
    _pids: dict[str, int] = {}
    _mutex = threading.Lock()

    @classmethod
    def get(cls, path: Path, *, read_only: bool = False) -> InterProcessLock:
        """The lock of ``path``, counted: every ``get`` is paired with a :meth:`release`.
        ``read_only``: for a read-only store (see :class:`InterProcessLock`); a normal ``get``
        of a lock a read-only store made first turns it into a normal one."""
        key = os.path.realpath(path)
        with cls._mutex:
            lock = cls._locks.get(key)
            if lock is None or cls._pids.get(key) != os.getpid():  # (a forked child: its own)
                lock = InterProcessLock(path, read_only=read_only)
                cls._locks[key], cls._refs[key], cls._pids[key] = lock, 0, os.getpid()
            elif lock.read_only and not read_only:
                lock.make_writable()
            cls._refs[key] += 1
            return lock

    @classmethod
    def release(cls, path: Path) -> None:
        """Drop one use of ``path``'s lock; the last closes its descriptor (a process that opens
        many stores one after another keeps no descriptor of those it closed)."""
        key = os.path.realpath(path)
        with cls._mutex:
            lock = cls._locks.get(key)
            if lock is None or cls._pids.get(key) != os.getpid():
                return
            cls._refs[key] -= 1
            if cls._refs[key] <= 0:
                del cls._locks[key], cls._refs[key], cls._pids[key]
                lock.close()


def disk_used_percent(path: Path) -> float:
    """How full the volume holding ``path`` is, in percent (what ``df`` shows); 0 if ``path``
    is missing."""
    try:
        st = os.statvfs(path)
    except FileNotFoundError:
        return 0.0
    if st.f_blocks == 0:
        return 0.0
    return 100.0 * (st.f_blocks - st.f_bavail) / st.f_blocks
