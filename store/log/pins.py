"""Read pins: a file being read is never deleted by retention (readers of the same host).

Retention (:mod:`rmqlog.retention`) deletes whole segment files (commitlog and consume queue)
while other processes may be reading them. A reader *pins* each segment for the duration
of a read: a shared ``flock`` on the segment's descriptor. The cleaner takes ``LOCK_EX |
LOCK_NB`` on a descriptor of its own before it removes a file and skips the file (and every
later one: deletion stays a prefix) while any reader holds it.

Why ``flock``: it belongs to the open file description, so the cleaner's exclusive lock
conflicts with every reader's shared one, threads of its own process included, and the
kernel drops a killed reader's lock. Readers of one process share one descriptor per
segment, so the lock is taken on the first pin and released on the last (a count per
segment). A pin costs two ``flock`` calls per segment per read (see
``jobs/bench_retention.py`` for the measured cost).

What a pin does not need to do: keep the bytes valid. A segment is never truncated or
rewritten below the tail, and on a local filesystem a mapping (or descriptor) of a file
that was unlinked keeps its data: a read that had the segment mapped before it was deleted
still returns the right bytes. A reader that looks for a segment *after* it was deleted finds
no file, and the caller reports the loss (:class:`rmqlog.errors.MessagesDeletedError`).

Limits: ``flock`` is per host. On NFS, Linux emulates ``flock`` with POSIX record locks,
which do not conflict within one process and do not reach other hosts: there a cleaner may
delete a file a reader on another host is reading, which then fails with a typed error
(or ``ESTALE`` from the filesystem), never with another record's data (names are never
reused: segment names are offsets, and offsets only grow).
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from .. import safe_open


class PinCount:
    """How many reads of this process hold a segment (its shared ``flock`` is held while > 0)."""

    __slots__ = ("count", "lock")

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()


class Pinnable(Protocol):
    """What pins need of a segment (:class:`rmqlog.log.mapped_file.MappedFile` has it): its
    pin count, its one descriptor (``_fd``, ``None`` once closed), and a way to open it and
    hold it (a held descriptor is not closed for the limit on open files, so a pinned
    segment keeps its lock: see :mod:`rmqlog.log.open_files`)."""

    pins: PinCount
    _fd: int | None

    def acquire_fd(self) -> int: ...

    def release_fd(self) -> None: ...


def pin(seg: Pinnable) -> bool:
    """Hold ``seg`` for a read; False (nothing held) if its file is gone and this process had
    no descriptor of it. Blocks only while a cleaner holds the file (a few system calls)."""
    st = seg.pins
    with st.lock:
        if st.count == 0:
            try:
                fd = seg.acquire_fd()  # the segment's one descriptor (opened on first use), held
            except FileNotFoundError:
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
            except BaseException:
                seg.release_fd()
                raise
        st.count += 1
    return True


def unpin(seg: Pinnable) -> None:
    """Release one :func:`pin` of ``seg``."""
    st = seg.pins
    with st.lock:
        st.count -= 1
        if st.count == 0:
            fd = seg._fd
            try:
                if fd is not None:  # None: the store was closed meanwhile (closing dropped the lock)
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                seg.release_fd()


@contextmanager
def pinned(seg: Pinnable) -> Iterator[bool]:
    """``with pinned(seg) as held:`` -- ``held`` is False when the segment's file is gone."""
    held = pin(seg)
    try:
        yield held
    finally:
        if held:
            unpin(seg)


def hold_exclusive(path: Path) -> int | None:
    """For the cleaner: a new descriptor of ``path`` holding ``LOCK_EX``, or ``None`` when a
    reader holds the file now (busy). Raises ``FileNotFoundError`` when the file is gone.
    The caller closes the descriptor (which releases the lock) after removing the file."""
    fd = safe_open.open_file(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


__all__ = ["PinCount", "pin", "unpin", "pinned", "hold_exclusive"]
