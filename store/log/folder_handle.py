"""A segments' folder kept open: listed, and its names' identities checked, without walking
its path (:class:`FolderHandle`).

A listing reached by the folder's path (:func:`rmqlog.safe_open.listdir`: an ``openat2`` of
the path below the store's root, then ``getdents``) costs ~30-40 us, and a read of a queue's
bounds took two of them (the queue's folder and the commitlog's). Here the folder is reached
by its path once per listing (no link followed, as everywhere: :mod:`rmqlog.safe_open`) and
its descriptor kept, so that between two listings "is ``name`` still the file the listing
saw?" is one ``fstatat`` through it (:func:`rmqlog.safe_open.inode_at`). The descriptor is
the folder *as of the last listing*: every listing walks the path again and replaces it (a
folder removed and made again is met at the next listing; a name checked in a removed folder
is gone, which makes its owner list again).

Descriptors are bounded with the store's mapped files (:mod:`rmqlog.log.open_files`): a handle
is one more file there, closed when idle and least recently used, and reopened (by a listing)
when next needed; its owner then lists again. Thread-safe: each use holds the handle's lock
for one system call, and an idle close never waits for it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from .. import safe_open
from .open_files import OpenFiles


class FolderHandle:
    """The folder ``path``'s kept descriptor (see the module docstring)."""

    def __init__(self, path: Path, open_files: OpenFiles | None = None) -> None:
        self.path = path
        self._open_files = open_files
        self._fd: int | None = None
        self._lock = threading.Lock()

    def entries(self) -> list[tuple[str, int]]:
        """``(name, inode)`` of everything in the folder now (unsorted; ``[]`` when there is no
        folder): its path walked again, the new descriptor kept for :meth:`inode`. Raises
        :class:`rmqlog.errors.WrongFileTypeError` when something else than a folder is there."""
        try:
            fd = safe_open.open_folder(self.path)
        except FileNotFoundError:
            self.close()
            return []
        with self._lock:
            old, self._fd = self._fd, fd
            if old is not None:
                os.close(old)
            found = safe_open.names_at(fd)
        self._used()
        return found

    def inode(self, name: str) -> int | None:
        """The inode ``name`` names in the folder as of the last :meth:`entries` (``None``: no such
        name there, or the descriptor was closed since: the caller lists again)."""
        with self._lock:
            fd = self._fd
            if fd is None:
                return None
            found = safe_open.inode_at(fd, name)
        self._used()
        return found

    def _used(self) -> None:
        if self._open_files is not None and self._fd is not None:
            self._open_files.used(self)

    def close_if_idle(self) -> bool:
        """Close the descriptor unless a call is using it (:class:`rmqlog.log.open_files.Closable`)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)
            return True
        finally:
            self._lock.release()

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)
        if self._open_files is not None:
            self._open_files.forget(self)


__all__ = ["FolderHandle"]
