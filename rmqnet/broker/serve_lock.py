"""One broker per store root: ``<root>/broker.lock`` (ours), held with an exclusive ``flock``
while a broker serves the root.

The store itself is opened by many processes at once (Spark executors, the ``rmqlog``
command: its shared ``lock``, :mod:`rmqlog.durability.lock_file`), so it cannot tell a second
broker from a reader. Two brokers over one root would both dispatch, deliver, retain, persist
the state tables and answer sends with their own view of the topics and offsets: the second is
refused at start, before it starts any service, with :class:`RootServedError` naming the root
and the pid the file holds (written by the holder). ``flock`` belongs to the open file, not to
the process, so a second broker in the same process is refused too; the kernel drops the lock
when its holder dies (a killed broker leaves the file, not the lock).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from rmqlog import StoreError
from rmqlog.safe_open import open_file

LOCK_NAME = "broker.lock"


class RootServedError(StoreError):
    """Another broker serves this store root (``path``: the root; ``holder``: its pid, 0 when
    it cannot be told)."""

    def __init__(self, path: str, holder: int) -> None:
        who = f"pid {holder}" if holder else "a process that wrote no pid"
        super().__init__(
            f"the store at {path} is served by another broker ({who} holds {LOCK_NAME}); "
            "one broker per store root: stop it, or give this one another root"
        )
        self.path = path
        self.holder = holder


class ServeLock:
    """``<root>/broker.lock`` taken by :meth:`acquire` and let go by :meth:`release`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.fd: int | None = None

    def acquire(self) -> None:
        """Take the lock without waiting and write this process's pid in the file; raises
        :class:`RootServedError` when another broker holds it."""
        fd = open_file(self.root / LOCK_NAME, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise RootServedError(str(self.root), int(text) if text.isascii() and text.isdigit() else 0) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        """Let the lock go (the file stays: it is never the sign of a broker, the lock is)."""
        if self.fd is not None:
            os.close(self.fd)  # closing the last descriptor of the open file drops its flock
            self.fd = None
