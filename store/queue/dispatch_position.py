"""``dispatch.state``: where dispatching resumes, ``{"version": 1, "offset": N,
"storeTimestamp": ms, "crc": C}`` (``C`` the CRC-32 of ``"N ms"``; the store time of the last
record dispatched, which the checkpoint's ``logicsMsgTimestamp`` comes from).

Rewritten in place under ``dispatch.lock`` (every reader holds it shared), padded with spaces
to the file's length, never replaced through a new file and a rename: ext4 syncs a file
renamed over another before the rename, which made each dispatch wait ~0.4 ms, and 5-10 ms
while the flusher's sync ran. A write torn by a power loss, or a file of other bytes, fails
its CRC and reads as absent (a file without ``crc``, written before it existed, is read as
it is). The file is a hint, never a source of truth (see :mod:`rmqlog.queue.dispatcher`).

One descriptor is kept open (read-write where the store may be written) while the name still
names its inode (:func:`rmqlog.safe_open.still_named`: the file is removed only by recovery or
a full disk, under ``dispatch.lock``): a read costs an ``fstat``, an ``fstatat`` and one
``pread`` (~40 us for a walk of the path), and a write after a read under the same exclusive
hold of the lock one ``pwrite`` (nobody can have removed it in between).
"""

from __future__ import annotations

import errno
import io
import json
import os
import zlib
from pathlib import Path

from .. import safe_open
from ..fileio import InterProcessLock, rewrite_in_place


def position_crc(offset: int, store_timestamp: int) -> int:
    """The ``crc`` of ``dispatch.state``: CRC-32 of ``"<offset> <storeTimestamp>"``."""
    return zlib.crc32(f"{offset} {store_timestamp}".encode())


class DispatchPositionFile:
    """``dispatch.state`` of one store (see the module docstring); the caller holds ``dispatch.lock``."""

    def __init__(self, path: Path, lock: InterProcessLock | None = None) -> None:
        self.path = path
        self.lock = lock  # dispatch.lock: a read's identity check under an exclusive hold stands for its write
        self._file: io.FileIO | None = None
        self._writable = False
        self._dir: int | None = None  # its folder (the identity check of the kept descriptor)
        self._checked = 0  # the exclusive hold under which the kept descriptor was last found named
        self._size = 0  # the file's length then
        self._parsed: tuple[bytes, tuple[int, int]] | None = None

    def read(self) -> tuple[int, int]:
        """(offset, store time). Raises ``FileNotFoundError`` when absent, ``ValueError`` (or
        ``KeyError``, ``TypeError``, ``AttributeError``) when unreadable."""
        raw = self._read()
        known = self._parsed  # (the bytes last read or written here, parsed: no JSON again)
        if known is not None and known[0] == raw:
            return known[1]
        d = json.loads(raw)
        offset, ts = int(d["offset"]), int(d.get("storeTimestamp", 0))
        if "crc" in d and int(d["crc"]) != position_crc(offset, ts):
            raise ValueError("its CRC does not match")
        self._parsed = (raw, (offset, ts))
        return offset, ts

    def write(self, offset: int, store_timestamp: int) -> None:
        """Write the position in place. Raises :class:`rmqlog.errors.DiskFullError` when the
        file must grow and there is no room (it keeps what it had)."""
        # (formatted directly: json.dumps of the dict costs ~4 us of every dispatch; the same JSON)
        data = (
            f'{{"version": 1, "offset": {int(offset)}, "storeTimestamp": {int(store_timestamp)}, '
            f'"crc": {position_crc(offset, store_timestamp)}}}'
        ).encode()
        f = self._file
        if f is not None and self._writable and self._dir is not None:
            hold = self.lock.exclusive_hold if self.lock is not None else 0
            if hold and hold == self._checked and self._size >= len(data):  # read and checked under this hold
                padded = data.ljust(self._size)
                os.pwrite(f.fileno(), padded, 0)
                self._parsed = (padded, (offset, store_timestamp))
                return
            st = os.fstat(f.fileno())
            if st.st_size >= len(data) and safe_open.still_named(self._dir, self.path.name, st):
                padded = data.ljust(st.st_size)
                os.pwrite(f.fileno(), padded, 0)  # (its own blocks: no room needed)
                self._parsed = (padded, (offset, store_timestamp))
                return
        self._checked = 0
        rewrite_in_place(self.path, data)

    def _read(self) -> bytes:
        f = self._file
        self._checked = 0
        if f is not None:
            st = os.fstat(f.fileno())
            if self._dir is not None and safe_open.still_named(self._dir, self.path.name, st):
                self._size = st.st_size
                self._checked = self.lock.exclusive_hold if self.lock is not None else 0
                return os.pread(f.fileno(), st.st_size, 0)
            self._file = None
            f.close()
        if self._dir is None:
            self._dir = safe_open.open_folder(self.path.parent)
        try:  # read-write where it may be (write() goes through it), else read-only
            fd, self._writable = safe_open.open_file(self.path, os.O_RDWR), True
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            fd, self._writable = safe_open.open_file(self.path, os.O_RDONLY), False
        f = io.FileIO(fd, "rb")  # (closed when dropped too)
        self._file = f
        data = f.readall()
        self._size = len(data)
        return data

    def close(self) -> None:
        """Close the kept descriptors (opened again if the file is used)."""
        f, self._file = self._file, None
        if f is not None:
            f.close()
        d, self._dir = self._dir, None
        if d is not None:
            os.close(d)
