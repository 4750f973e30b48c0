"""The ``lock`` and ``abort`` files: who has the store open, and whether the last owner exited cleanly.

RocketMQ's layout, kept byte for byte:

- ``<root>/lock``: the 4 bytes ``lock``. RocketMQ's broker holds an exclusive
  ``FileChannel.tryLock(0, 1)`` (a POSIX record lock on byte 0) while it runs.
- ``<root>/abort``: an empty file that exists while a store is open for writing. Deleted by a
  clean shutdown; found at start-up it means the last owner did not shut down cleanly, and
  recovery takes the abnormal path (see :mod:`store.recovery`).

This store is opened by many processes at once (Spark executors, the driver), so each open
store holds a *shared* POSIX lock on byte 0 of ``lock``. That still keeps a RocketMQ broker
out (its exclusive ``tryLock`` fails while any of ours is open), and lets us tell:

- the *first opener*: it gets the lock *exclusively* without waiting. Nobody else has the
  store open, so it runs recovery (with the lock held exclusively, so later openers wait
  for it), creates ``abort``, then downgrades to shared;
- the *last closer*: at close it gets the lock exclusively without waiting. It flushes,
  writes the checkpoint and deletes ``abort``.

A process killed at any instant loses its lock (the kernel drops it), so the next first
opener sees ``abort`` and recovers. POSIX locks belong to a process, not a file descriptor,
and closing any descriptor of the file drops them all; so one :class:`StoreLockFile` per
root per process is shared, with a count of the stores open in the process.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable
from pathlib import Path

from .errors import raise_if_disk_full
from .fileio import lockf_blocking

LOCK_CONTENT = b"lock"


class StoreLockFile:
    """The per-process owner of ``<root>/lock`` (get it with :meth:`for_root`)."""

    _by_root: dict[tuple[int, str], StoreLockFile] = {}
    _registry_lock = threading.Lock()

    def __init__(self, lock_path: Path, abort_path: Path) -> None:
        self.lock_path = lock_path
        self.abort_path = abort_path
        self._fd: int | None = None
        self._count = 0  # stores open in this process
        self.mutex = threading.RLock()

    @classmethod
    def for_root(cls, lock_path: Path, abort_path: Path) -> StoreLockFile:
        key = (os.getpid(), os.path.realpath(lock_path))
        with cls._registry_lock:
            obj = cls._by_root.get(key)
            if obj is None:
                obj = cls(lock_path, abort_path)
                cls._by_root[key] = obj
            return obj

    def _open_fd(self) -> int:
        if self._fd is None:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size < len(LOCK_CONTENT):
                    os.pwrite(fd, LOCK_CONTENT, 0)
            except OSError as exc:  # a new store on a full disk
                os.close(fd)
                raise_if_disk_full(exc, self.lock_path, "writing the lock file")
                raise
            self._fd = fd
        return self._fd

    def _try_exclusive(self) -> bool:
        try:
            fcntl.lockf(self._open_fd(), fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            return True
        except OSError:
            return False

    def open(self) -> bool:
        """Register an open store; returns True when this is the first opener of the root.

        The first opener holds the lock exclusively until :meth:`opened`; the caller must
        call :meth:`opened` (after recovery) in either case.
        """
        self.mutex.acquire()
        try:
            self._count += 1
            if self._count > 1:
                return False  # this process already has the root open (and holds the lock)
            if self._try_exclusive():
                return True
            # others have it open; wait for a first opener that may be recovering
            lockf_blocking(self._open_fd(), fcntl.LOCK_SH, 1, 0)
            return False
        except BaseException:
            self._count -= 1
            self.mutex.release()
            raise

    def abort_exists(self) -> bool:
        return self.abort_path.exists()

    def opened(self) -> None:
        """After recovery: mark the store as open (``abort``) and share the lock."""
        try:
            if not self.abort_path.exists():
                try:
                    os.close(os.open(self.abort_path, os.O_WRONLY | os.O_CREAT, 0o644))
                except OSError as exc:  # an empty file needs no block, but a full directory may need one
                    raise_if_disk_full(exc, self.abort_path, "creating the abort file")
                    raise
            lockf_blocking(self._open_fd(), fcntl.LOCK_SH, 1, 0)  # a downgrade, atomic for POSIX locks
        finally:
            self.mutex.release()

    def abandon(self) -> None:
        """Undo :meth:`open` when opening failed (recovery raised)."""
        try:
            self._count -= 1
            if self._count == 0 and self._fd is not None:
                os.close(self._fd)
                self._fd = None
        finally:
            self.mutex.release()

    def close(self, on_last: Callable[[], None]) -> None:
        """Unregister an open store; calls ``on_last()`` and deletes ``abort`` if it was the last one."""
        with self.mutex:
            self._count -= 1
            if self._count > 0 or self._fd is None:
                return
            try:
                if self._try_exclusive():
                    on_last()
                    self.abort_path.unlink(missing_ok=True)
            finally:
                os.close(self._fd)  # drops this process's lock
                self._fd = None
