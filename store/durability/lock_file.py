"""The ``lock`` and ``abort`` files: who has the store open, and whether the last owner exited cleanly.

RocketMQ's layout, kept byte for byte:

- ``<root>/lock``: the 4 bytes ``lock``. RocketMQ's broker holds an exclusive
  ``FileChannel.tryLock(0, 1)`` (a POSIX record lock on byte 0) while it runs.
- ``<root>/abort``: an empty file that exists while a store is open for writing. Deleted by a
  clean shutdown; found at start-up it means the last owner did not shut down cleanly, and
  recovery takes the abnormal path (see :mod:`rmqlog.recovery.recovery`).

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

``<root>/owners/<pid>-<random>`` (ours, not RocketMQ's): an empty file per process that has
the store open, created when the process opens it and deleted when it closes it. Without
it a killed process would go unnoticed whenever another process outlived it: the lock
says nobody else has the store open *now*, not that everybody who had it closed it. So:

- the last closer deletes ``abort`` only if no other owner file is left; one left behind
  belongs to a process that died with the store open (its lock is gone, its file is not),
  and ``abort`` stays for the next first opener;
- the first opener takes the abnormal path if ``abort`` exists *or* an owner file does
  (every owner is gone when it gets the lock exclusively), and deletes those files once
  recovery is done.

``<root>/recovering`` (ours): exists while a first opener recovers. Openers that waited for
it get the lock shared when it finishes, or when it dies; in the second case the file is
still there, the store half recovered, and they let the lock go and try again to be the
first opener themselves, so a store is never used without its recovery having completed.

An open store can take the same position again for an operation that changes files others
would be reading (:meth:`StoreLockFile.alone`: a replication slave cutting its log back): the
lock upgraded to exclusive without waiting (refused, :class:`rmqlog.errors.StoreBusyError`
naming the holders, while another process or another store of this process has it open) and
``recovering`` made for its duration. A process opening the store meanwhile waits; if the
operation's process dies before the end, that opener finds ``recovering`` (and ``abort``)
and recovers the store, as after a first opener that died.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import safe_open
from ..errors import StoreBusyError, raise_if_disk_full
from ..fileio import lockf_blocking

log = logging.getLogger(__name__)

LOCK_CONTENT = b"lock"
#: The folder of owner files, next to ``abort``.
OWNERS_DIR = "owners"
#: Exists while a first opener recovers (left behind if it dies doing so).
RECOVERING = "recovering"


class StoreLockFile:
    """The per-process owner of ``<root>/lock`` (get it with :meth:`for_root`)."""

    _by_root: dict[tuple[int, str], StoreLockFile] = {}
    _registry_lock = threading.Lock()

    def __init__(self, lock_path: Path, abort_path: Path) -> None:
        self.lock_path = lock_path
        self.abort_path = abort_path
        self.owners_dir = abort_path.parent / OWNERS_DIR
        self.recovering_path = abort_path.parent / RECOVERING
        self._fd: int | None = None
        self._count = 0  # stores open in this process
        self._first = False  # this process was the first opener (it recovered the store)
        self._owner_file: Path | None = None
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
            fd = safe_open.open_file(self.lock_path, os.O_RDWR | os.O_CREAT)
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
        fd = self._open_fd()
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            return True
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):  # held by another opener
                return False
            raise  # (ENOLCK, EBADF...: a failure, not a holder)

    def open(self, first_checks: Callable[[], object] | None = None) -> bool:
        """Register an open store; returns True when this is the first opener of the root.

        The first opener holds the lock exclusively until :meth:`opened`; the caller must
        call :meth:`opened` (after recovery) in either case, or :meth:`abandon`.
        ``first_checks`` runs in the first opener as soon as it holds the lock exclusively
        (no other process has the store open), before anything here reads the other files
        (the survey of :mod:`rmqlog.recovery.survey`); if it raises, the lock is let go and
        the error propagates.
        """
        self.mutex.acquire()
        try:
            self._count += 1
            if self._count > 1:
                return False  # this process already has the root open (and holds the lock)
            delay = 0.001
            while True:
                self._first = self._try_exclusive()
                if self._first:
                    if first_checks is not None:
                        first_checks()
                    self._touch(self.recovering_path)  # until opened(): recovery under way
                    return True
                # others have it open; wait for a first opener that may be recovering
                lockf_blocking(self._open_fd(), fcntl.LOCK_SH, 1, 0)
                if safe_open.kind(self.recovering_path) is None:
                    return False
                # the first opener died (or failed) in the middle of its recovery: the store is
                # half recovered. Let go and try again to be the one who recovers it.
                fcntl.lockf(self._open_fd(), fcntl.LOCK_UN, 1, 0)
                time.sleep(delay * (1 + random.random()))  # the waiters let go at once: spread them
                delay = min(delay * 2, 0.05)
        except BaseException:
            self._count -= 1
            if self._count == 0 and self._fd is not None:
                os.close(self._fd)  # (drops the lock)
                self._fd = None
            self.mutex.release()
            raise

    def abort_exists(self) -> bool:
        """Whether the last owners did not all close cleanly: ``abort`` exists, or an owner file
        does. Meaningful for the first opener (it holds the lock exclusively, so every owner
        file it sees is a dead process's)."""
        return safe_open.kind(self.abort_path) is not None or bool(self.other_owners())

    def other_owners(self) -> list[Path]:
        """The owner files of other processes (sorted; what was set aside is no owner's)."""
        return [
            p
            for name, _ in safe_open.entries(self.owners_dir)
            if not safe_open.is_set_aside(name) and (p := self.owners_dir / name) != self._owner_file
        ]

    def holders(self) -> list[int]:
        """The pids that have the store open, as far as this process can tell (for errors):
        the owners of the lock's POSIX locks (``/proc/locks``, Linux) and of the live
        processes' owner files; this process's own pid when it has the store open too."""
        pids: set[int] = {os.getpid()} if self._count > 1 else set()
        for p in self.other_owners():
            head = p.name.split("-", 1)[0]
            if head.isdigit() and _alive(int(head)):
                pids.add(int(head))
        try:
            ino = os.stat(self.lock_path).st_ino
            with open("/proc/locks", encoding="ascii", errors="replace") as f:
                for line in f:  # "1: POSIX  ADVISORY  READ 1234 08:01:5678 0 0"
                    fields = line.split()
                    ours = len(fields) > 5 and fields[1] == "POSIX" and fields[5].rsplit(":", 1)[-1] == str(ino)
                    if ours and fields[4].isdigit() and int(fields[4]) != os.getpid():
                        pids.add(int(fields[4]))
        except OSError:
            pass  # not Linux, or no lock file: the owner files are all there is
        return sorted(pids)

    def opened(self) -> None:
        """After recovery: mark the store as open (``abort``, this process's owner file) and share the lock."""
        try:
            if self._count == 1:  # this process's first open store on the root
                if self._first:  # recovery is done: the dead owners' files have served
                    for p in self.other_owners():
                        safe_open.unlink(p)
                    safe_open.unlink(self.recovering_path)
                self._touch(self.abort_path)
                safe_open.make_folder(self.owners_dir)
                self._owner_file = self.owners_dir / f"{os.getpid()}-{secrets.token_hex(4)}"
                self._touch(self._owner_file)
            elif safe_open.kind(self.abort_path) is None:
                self._touch(self.abort_path)
            lockf_blocking(self._open_fd(), fcntl.LOCK_SH, 1, 0)  # a downgrade, atomic for POSIX locks
        finally:
            self.mutex.release()

    @contextmanager
    def alone(self, doing: str) -> Iterator[None]:
        """Hold the open store alone while ``doing`` runs (see the module docstring): the lock
        exclusive and ``recovering`` made, both undone at the end (the lock shared again).
        :class:`StoreBusyError` naming the holders, nothing changed, when another process (or
        another open store of this process) has the store open; needs this process to have it
        open (the store's owner)."""
        with self.mutex:
            if self._fd is None or self._count != 1 or not self._try_exclusive():
                raise StoreBusyError(
                    f"{doing} needs the store to itself", path=str(self.lock_path.parent), holders=self.holders()
                )
            try:
                self._touch(self.recovering_path)
                try:
                    yield
                finally:
                    safe_open.unlink(self.recovering_path)
            finally:
                lockf_blocking(self._open_fd(), fcntl.LOCK_SH, 1, 0)  # a downgrade, atomic for POSIX locks

    @staticmethod
    def _touch(path: Path) -> None:
        if safe_open.kind(path) is None:
            try:
                os.close(safe_open.open_file(path, os.O_WRONLY | os.O_CREAT))
            except OSError as exc:  # an empty file needs no block, but a full directory may need one
                raise_if_disk_full(exc, path, f"creating {path.name}")
                raise

    def _drop_owner_file(self) -> None:
        if self._owner_file is not None:
            safe_open.unlink(self._owner_file)
            self._owner_file = None

    def abandon(self) -> None:
        """Undo :meth:`open` when opening failed (recovery raised)."""
        try:
            self._count -= 1
            if self._count == 0 and self._fd is not None:
                os.close(self._fd)
                self._fd = None
        finally:
            self.mutex.release()

    def close(self, on_last: Callable[[], object], *, clean: bool = True) -> None:
        """Unregister an open store (the caller has flushed what this process wrote).

        The process's last store on the root deletes its owner file. If nobody else has the
        store open, ``on_last()`` runs first and ``abort`` is deleted, unless another
        process's owner file is left (that process died with the store open: ``abort`` stays).
        ``clean=False`` (the caller's final flush failed): the lock is released but the owner
        file and ``abort`` stay, so the next first opener recovers as after a crash.
        """
        with self.mutex:
            self._count -= 1
            if self._count > 0 or self._fd is None:
                return
            try:
                if not clean:
                    log.warning(
                        "store %s closed without its final flush; keeping %s so the next open recovers",
                        self.abort_path.parent,
                        self.abort_path.name,
                    )
                elif self._try_exclusive():
                    on_last()
                    self._drop_owner_file()
                    dead = self.other_owners()
                    if dead:
                        log.warning(
                            "store %s: %d process(es) exited without closing it (%s); keeping %s so the next "
                            "open recovers",
                            self.abort_path.parent,
                            len(dead),
                            ", ".join(p.name for p in dead),
                            self.abort_path.name,
                        )
                    else:
                        safe_open.unlink(self.abort_path)
                else:
                    self._drop_owner_file()
            finally:
                os.close(self._fd)  # drops this process's lock
                self._fd = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
