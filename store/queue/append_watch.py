"""Woken by the kernel when ``append.state`` changes: the background dispatcher's way to hear of
another process's appends without looking every millisecond.

Why: the dispatcher (:mod:`rmqlog.queue.dispatcher`) must see records other processes
publish (a Spark sink writing the files directly) within its interval. Polling for them
every ``reput_interval_ms`` (1 ms) costs a thread wake-up a millisecond even when its look is
nearly free (~45 us of CPU each on this VM: ~4 % of a core, and the GIL taken from a
broker's event loop 1,000 times a second). Every publish writes ``append.state`` (in place,
``pwrite``; or a new file renamed over it), so Linux's ``inotify`` can say when: then the
dispatcher sleeps until told, and looks on its own only at the safety-net interval.

:class:`AppendWatch` runs one thread blocked in ``poll`` on an inotify descriptor with two
watches: the file itself (``IN_MODIFY``: a publish) and its folder (``IN_MOVED_TO`` /
``IN_CREATE`` of that name: a rewrite renamed over it, after which the file's watch is moved
to the new file). On any of these, a full event queue (``IN_Q_OVERFLOW``) or a watch the
kernel dropped, it calls ``wake()``, then waits ``debounce_s`` before reading again, so a
stream of publishes wakes it at most once per ``debounce_s`` (events meanwhile are read
together). Idle, it costs nothing. The dispatcher wakes no round for a publish of its own
process's direct puts (they dispatch themselves: :meth:`rmqlog.queue.dispatcher.Dispatcher.attach`).

When it cannot be trusted it is not used (:meth:`AppendWatch.start` returns ``None`` and the
caller polls as before): not Linux, no ``inotify``, or a file system where other hosts may
write (NFS, SMB, FUSE, Ceph...: their changes raise no local event). Only file systems known to
be local are watched (:data:`LOCAL_FILE_SYSTEMS`). A process on this host writing through a
bind mount or another container's view of the same folder changes the same inode: it is seen.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import select
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
#: ``struct inotify_event``: wd, mask, cookie, len (then ``len`` bytes of name, NUL-padded)
_EVENT = struct.Struct("iIII")

#: the least time between two wakes (a stream of publishes is one wake a millisecond)
DEBOUNCE_S = 0.001
#: ``statfs`` ``f_type`` of file systems only this host writes to (linux/magic.h): ext2/3/4,
#: xfs, btrfs, tmpfs, overlayfs, zfs, f2fs, ramfs
LOCAL_FILE_SYSTEMS = frozenset(
    (0xEF53, 0x58465342, 0x9123683E, 0x01021994, 0x794C7630, 0x2FC12FC1, 0xF2F52010, 0x858458F6)
)


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    return libc


def file_system_type(libc: ctypes.CDLL, path: Path) -> int | None:
    """``statfs(path).f_type`` (the first field, a C ``long`` on Linux), ``None`` if it fails."""
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux
    if libc.statfs(os.fsencode(path), buf) != 0:
        return None
    return int(ctypes.c_long.from_buffer(buf).value) & 0xFFFFFFFF


class AppendWatch:
    """Calls ``wake()`` when ``path`` (``append.state``) changes (see the module docstring).

    Built by :meth:`start`; :meth:`close` ends the thread (idempotent).
    """

    def __init__(self, libc: ctypes.CDLL, fd: int, path: Path, wake: Callable[[], object], debounce_s: float) -> None:
        self._libc = libc
        self._fd = fd
        self.path = path
        self._name = os.fsencode(path.name)
        self._wake = wake
        self.debounce_s = debounce_s
        self._file_wd = -1
        self._folder_wd = -1
        self._stop_r, self._stop_w = os.pipe()
        self._closed = threading.Event()
        #: set when the watch stopped on its own (a watch dropped, a read failed): the caller
        #: goes back to polling
        self.failed = False
        self._thread = threading.Thread(target=self._run, name="rmq-append-watch", daemon=True)

    @classmethod
    def start(cls, path: Path, wake: Callable[[], object], *, debounce_s: float = DEBOUNCE_S) -> AppendWatch | None:
        """Watch ``path`` and call ``wake()`` (from the watch's thread) when it changes; ``None``
        when it cannot be watched reliably (then poll)."""
        libc = _libc()
        if libc is None:
            return None
        fs = file_system_type(libc, path.parent)
        if fs not in LOCAL_FILE_SYSTEMS:
            log.debug("%s: file system type %s is not known to be local; the dispatcher polls", path.parent, fs)
            return None
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            log.debug("inotify_init1 failed (%s); the dispatcher polls", os.strerror(ctypes.get_errno()))
            return None
        try:
            watch = cls(libc, fd, path, wake, debounce_s)
        except (OSError, RuntimeError) as exc:  # its pipe or thread (EMFILE...): poll, the descriptor closed
            os.close(fd)
            log.debug("cannot watch %s (%s); the dispatcher polls", path, exc)
            return None
        try:
            watch._folder_wd = watch._add(path.parent, IN_MOVED_TO | IN_CREATE | IN_ONLYDIR)
            watch._file_wd = watch._add_file()
            watch._thread.start()
        except (OSError, RuntimeError) as exc:
            log.debug("cannot watch %s (%s); the dispatcher polls", path, exc)
            watch._close_fds()
            return None
        return watch

    def _add(self, path: Path, mask: int) -> int:
        wd = int(self._libc.inotify_add_watch(self._fd, os.fsencode(path), mask))
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(path))
        return wd

    def _add_file(self) -> int:
        """Watch the file itself; -1 while it does not exist (its creation is a folder event)."""
        try:
            return self._add(self.path, IN_MODIFY)
        except FileNotFoundError:
            return -1

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self._stop_r in ready:
                    return
                if self._handle(self._read()):
                    self._wake()
                    # a stream of publishes (this process's own puts too) wakes the dispatcher
                    # at most once per debounce_s: events meanwhile are read together
                    if self._closed.wait(self.debounce_s):
                        return
        except Exception:  # noqa: BLE001 - the caller polls again; nothing else depends on this thread
            log.warning("the append.state watch stopped; the dispatcher polls", exc_info=True)
            self.failed = True
            self._wake()

    def _read(self) -> bytes:
        chunks = []
        while True:
            try:
                chunk = os.read(self._fd, 64 << 10)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def _handle(self, data: bytes) -> bool:
        """Whether the events in ``data`` say the state may have changed (re-watching the file
        after a rename over it); raises ``OSError`` when the watch cannot go on."""
        changed = False
        pos = 0
        while pos + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
            name = data[pos + _EVENT.size : pos + _EVENT.size + length].rstrip(b"\0")
            pos += _EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                changed = True
            elif wd == self._file_wd:
                changed = True
                if mask & IN_IGNORED:  # the file's watch is gone (its inode freed): re-watch below
                    self._file_wd = -1
            elif wd == self._folder_wd:
                if mask & IN_IGNORED:
                    raise OSError(errno.ENOENT, "the store's folder is no longer watched", str(self.path.parent))
                if name == self._name:  # a new append.state renamed over (or created)
                    changed = True
                    self._file_wd = -1
        if self._file_wd < 0:
            self._file_wd = self._add_file()  # the same wd if the inode is the same
        return changed

    def close(self) -> None:
        """End the thread and close the descriptors (idempotent; not from the watch's thread)."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        self._close_fds()

    def _close_fds(self) -> None:
        for fd in (self._fd, self._stop_r, self._stop_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fd = self._stop_r = self._stop_w = -1
