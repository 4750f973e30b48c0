"""The POP checkpoint log: a broker's POP consumption state, ``<root>/pop/checkpoints.log``.

RocketMQ 5 keeps what a POP consumer was handed (checkpoints), what it acked and where each
group stands in its revive topic ``rmq_sys_REVIVE_LOG_<cluster>``; this store keeps the same
facts in a log of its own, one JSON object a line (the broker's
:mod:`rmqnet.broker.pop_state` says what the objects hold; this module holds no meaning of
them)::

    <crc32 of the JSON bytes, 8 lower-case hex digits> <space> <JSON object> <\\n>

What is checksummed: the JSON bytes of each line. Guarantees:

- :meth:`PopLog.append` writes all its records with ONE ``write`` to a descriptor opened
  ``O_APPEND`` before it returns: from then on they survive a ``kill -9`` of the process (the
  page cache is the kernel's); a power loss keeps what the last :meth:`PopLog.sync` (or a
  ``durable`` append) made durable, as RocketMQ's revive topic under ASYNC_FLUSH.
- A crash in the middle of an append leaves a torn last line: :meth:`PopLog.load` keeps the
  lines before the first line that is incomplete or fails its checksum, and cuts the file
  back to them (a torn line can only be the last one written, and its records were never
  answered to a client).
- :meth:`PopLog.rewrite` (compaction) writes the new content to ``checkpoints.log.tmp``,
  syncs it and renames it over the log: at any instant the log is the old or the new one.

Raises :class:`~rmqlog.errors.DiskFullError` on a full disk (nothing of the failed append is
counted as written; a partial line is cut at the next load) and
:class:`~rmqlog.errors.WrongFileTypeError` when something that is no file holds the path.
"""

from __future__ import annotations

import os
import weakref
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from . import safe_open
from .errors import CorruptStoreError, raise_if_disk_full
from .fileio import replace_file

#: the separator after the checksum, and the end of a line
_SPACE, _NL = 0x20, b"\n"
_CRC_DIGITS = 8


def encode_lines(records: Iterable[Mapping[str, Any]]) -> bytes:
    """The log's bytes of ``records`` (each a JSON object), one line each."""
    out = bytearray()
    for record in records:
        data = orjson.dumps(record)
        out += b"%08x " % zlib.crc32(data)
        out += data
        out += _NL
    return bytes(out)


def decode_lines(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """(the records of ``data`` up to the first incomplete or damaged line, the bytes they
    take): a scan that says how far the log is valid instead of raising."""
    records: list[dict[str, Any]] = []
    pos, end = 0, len(data)
    while pos < end:
        nl = data.find(_NL, pos)
        if nl < 0 or nl - pos < _CRC_DIGITS + 2 or data[pos + _CRC_DIGITS] != _SPACE:
            break
        body = data[pos + _CRC_DIGITS + 1 : nl]
        try:
            crc = int(data[pos : pos + _CRC_DIGITS], 16)
        except ValueError:
            break
        if zlib.crc32(body) != crc:
            break
        try:
            record = orjson.loads(body)
        except orjson.JSONDecodeError:
            break
        if not isinstance(record, dict):
            break
        records.append(record)
        pos = nl + 1
    return records, pos


class PopLog:
    """The log at ``path`` (:attr:`rmqlog.paths.StorePaths.pop_log`), opened by
    :meth:`load`; see the module docstring for the format and guarantees."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        #: closes the descriptor once (at :meth:`close`, or when the log is garbage: a broker a
        #: test dropped without closing it leaks no descriptor)
        self._closer: weakref.finalize[Any, PopLog] | None = None
        #: the records and bytes in the file now (what compaction is judged by)
        self.records = 0
        self.nbytes = 0
        #: writes made (appends and rewrites), for tests that count I/O; how many of them are
        #: known durable (synced: :meth:`sync`, a durable append, a rewrite)
        self.writes = 0
        self.synced_writes = 0
        #: bytes cut from a torn end at the last load
        self.cut = 0

    def load(self) -> list[dict[str, Any]]:
        """Every record of the log, in order (none when there is no log yet), the folder and
        file created when missing; a torn or damaged end is cut off (see the module
        docstring). Raises :class:`~rmqlog.errors.CorruptStoreError` when the log cannot be
        read, ``OSError`` as the filesystem does."""
        self.close()
        safe_open.make_folder(self.path.parent, parents=True)
        data = safe_open.read_bytes(self.path) if safe_open.kind(self.path) is not None else b""
        records, valid = decode_lines(data)
        self.cut = len(data) - valid
        if self.cut:
            safe_open.truncate(self.path, valid)
        try:
            self._adopt(safe_open.open_file(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT))
        except OSError as exc:
            raise CorruptStoreError(f"cannot open the POP checkpoint log: {exc}", path=str(self.path)) from exc
        self.records, self.nbytes = len(records), valid
        return records

    def append(self, records: Iterable[Mapping[str, Any]], *, durable: bool = False) -> int:
        """Append ``records`` with one ``write`` (``durable``: and ``fsync``); returns the
        bytes written. Raises :class:`~rmqlog.errors.DiskFullError` on a full disk,
        :class:`~rmqlog.errors.CorruptStoreError` when the log is not open."""
        batch = list(records)
        if not batch:
            return 0
        fd = self._open_fd()
        data = encode_lines(batch)
        view = memoryview(data)
        try:
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if durable:
                os.fsync(fd)
        except OSError as exc:
            raise_if_disk_full(exc, self.path, "appending to the POP checkpoint log")
            raise
        self.writes += 1
        if durable:
            self.synced_writes = self.writes
        self.records += len(batch)
        self.nbytes += len(data)
        return len(data)

    def rewrite(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Replace the log by ``records`` atomically and durably (compaction)."""
        batch = list(records)
        data = encode_lines(batch)
        self.close()
        replace_file(self.path, data, durable=True)
        self._adopt(safe_open.open_file(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT))
        self.writes += 1
        self.synced_writes = self.writes  # (replace_file synced it)
        self.records, self.nbytes = len(batch), len(data)

    def sync(self) -> int:
        """Make every append so far durable (``fsync``); returns how many writes that covers
        (safe in a worker thread while the owner appends: the appends after it began are
        not counted). Raises ``OSError`` as ``fsync`` does."""
        fd, writes = self._fd, self.writes
        if fd is not None:
            os.fsync(fd)
        return writes

    def close(self) -> None:
        """Close the descriptor (appends need :meth:`load` again)."""
        if self._closer is not None:
            self._closer()
        self._fd = self._closer = None

    def _adopt(self, fd: int) -> None:
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)

    def _open_fd(self) -> int:
        if self._fd is None:
            raise CorruptStoreError("the POP checkpoint log is not open (load it first)", path=str(self.path))
        return self._fd


__all__ = ["PopLog", "encode_lines", "decode_lines"]
