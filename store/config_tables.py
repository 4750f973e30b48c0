"""RocketMQ's table files under ``config/`` (``consumerOffset.json``'s ``offsetTable``,
``topics.json``'s ``topicConfigTable``, ``subscriptionGroup.json``'s ``subscriptionGroupTable``)
as tables merged under the store's ``config.lock``: the one rule by which a process holding
a table in memory (a broker: RocketMQ's ``ConfigManager``s, persisted on a schedule) and the
other processes writing the same file (the ``rmqlog`` command, a Spark query committing a
group's offsets) meet.

The rule (:meth:`TableFile.merge`): a merge brings the caller's *changes* (entries it set or
removed since its last merge) and, optionally, its whole table as of its last merge (``base``)
with the :class:`FileStamp` that merge returned (``since``). Under ``config.lock``:

1. the file is read again only if it is not the file ``since`` names (another process wrote
   it meanwhile, or there is no ``base``); reading it is what costs: parsing and checking every
   entry;
2. the answer's table is the file's (when read again) or ``base``, with the changes applied
   over it: the caller's changes win, every other entry is the file's (another process's
   commit, a topic another process deleted: taken in);
3. the file is written (atomically: ``.tmp``, rename, the previous kept as ``.bak``; synced
   for a table's persist) only when there are changes; nothing is written otherwise.

The answer (:class:`TableMerge`) is the table the file now holds, its stamp and whether it
was read again; the caller keeps both for its next merge. A process that writes one entry at
a time (``commit_offset``) merges its one change with the table of its previous call.

A stamp identifies a file by device, inode, size and modification and change times; the
file last read or written is held open by its :class:`TableFile` (closed by :meth:`close`),
so its inode cannot be reused by a later file while its stamp may still be compared: the
same stamp is the same file, unless a program rewrote it in place within one tick of the
file system's clock keeping its size (the store never does: every write is a new file).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from . import safe_open
from .config_json import dump_table, load_held, warn_once
from .fileio import InterProcessLock, replace_file

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class FileStamp:
    """Which file a path named when it was read or written: device, inode, size, and
    modification and change times in ns."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStamp:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True, slots=True)
class TableMerge(Generic[V]):
    """What a merge left: ``table``, the entries the file holds now (the caller's ``base``
    itself when the file was not read again, else a new dict: keep it as your table and do
    not share it); ``stamp``, the file's (``None``: there is no file); ``reread``, whether the
    file was read (other processes' entries are in ``table``); ``written``, whether it was
    written."""

    table: dict[str, V]
    stamp: FileStamp | None
    reread: bool
    written: bool


@dataclass(frozen=True)
class TableCodec(Generic[V]):
    """How one file's table is read and written.

    ``key``: the table's key in the file (``offsetTable``); ``versioned``: the file carries
    RocketMQ's ``dataVersion`` (``{"counter", "timestamp"}``, moved by every write);
    ``problem(name, raw)``: why an entry's *name* is unusable (the entry is then logged once,
    never listed nor used, and written back as it was), or ``None``; ``decode(name, raw)``: the
    entry's value, raising ``ValueError``/``TypeError`` when it is not one (the file is then
    unreadable); ``encode(value)``: the JSON value written (``None``: the value as it is);
    ``apply(table, name, change)``: a change applied to a table (``None``: the entry
    replaced by ``change``, or removed when ``change`` is ``None``).
    """

    key: str
    versioned: bool
    problem: Callable[[str, Any], str | None]
    decode: Callable[[str, Any], V]
    encode: Callable[[V], Any] | None = None
    apply: Callable[[dict[str, V], str, Any], None] | None = None


def replace_entry(table: dict[str, Any], name: str, change: Any) -> None:
    """The default change: the entry replaced, or removed when ``change`` is ``None``."""
    if change is None:
        table.pop(name, None)
    else:
        table[name] = change


class TableFile(Generic[V]):
    """One table file of a store (see the module docstring). Thread-safe."""

    def __init__(self, path: Path, lock: InterProcessLock, codec: TableCodec[V], *, wall_ms: Callable[[], int]) -> None:
        self.path = path
        self.lock = lock
        self.codec = codec
        self.wall_ms = wall_ms  # the store's clock: the dataVersion's timestamp
        self._mutex = threading.RLock()
        self._held: int | None = None  # the descriptor of the file last read or written (keeps its inode)
        self._stamp: FileStamp | None = None  # its stamp (None: none, or read from .bak)
        self._known = False  # whether this process has read or written the file
        self._skipped: dict[str, Any] = {}  # entries with unusable names, written back as they are
        self._version: dict[str, int] = {"counter": 0, "timestamp": 0}
        #: how many times the file was read and written by this object (tests count them)
        self.reads = 0
        self.writes = 0

    # ------------------------------------------------------------------ reads
    def stamp_now(self) -> FileStamp | None:
        """The stamp of the file at the path now (``None``: no file there)."""
        try:
            return FileStamp.of(safe_open.lstat(self.path))
        except FileNotFoundError:
            return None

    def current(self, base: dict[str, V] | None = None, since: FileStamp | None = None) -> TableMerge[V]:
        """The table as the file holds it, without the lock: ``base`` itself when the file is
        the one ``since`` names (one ``lstat``), else the file read again (a reader's view:
        nothing is written). Raises :class:`rmqlog.errors.CorruptStoreError` when neither the
        file nor its ``.bak`` can be read."""
        with self._mutex:
            if base is not None and self._unchanged(since):
                return TableMerge(base, since, False, False)
            return TableMerge(self._read(), self._stamp, True, False)

    def _unchanged(self, since: FileStamp | None) -> bool:
        return self._known and since == self._stamp and self.stamp_now() == since

    def _read(self) -> dict[str, V]:
        value, fd = load_held(self.path, self._decode)
        self.reads += 1
        self._hold(fd)
        if value is not None and fd is None:
            # read from .bak: the file at the path is missing or unreadable, or was being
            # replaced right then (between its two renames): its stamp says nothing of what was
            # read, so the next merge reads again
            self._known = False
        table, self._skipped, self._version = value if value is not None else ({}, {}, {"counter": 0, "timestamp": 0})
        return table

    def _hold(self, fd: int | None) -> None:
        """Hold ``fd`` (the file just read or written) in place of the previous one."""
        if self._held is not None:
            os.close(self._held)
        self._held = fd
        self._stamp = FileStamp.of(os.fstat(fd)) if fd is not None else self.stamp_now()
        self._known = True

    def _decode(self, raw: Any) -> tuple[dict[str, V], dict[str, Any], dict[str, int]]:
        codec = self.codec
        table_raw = raw.get(codec.key) or {}
        if not isinstance(table_raw, dict):
            raise TypeError(f"{codec.key} is not an object")
        table: dict[str, V] = {}
        skipped: dict[str, Any] = {}
        for name, value in table_raw.items():
            problem = codec.problem(name, value)
            if problem is not None:
                warn_once(self.path, f"entry {name!r} skipped: {problem}")
                skipped[name] = value
                continue
            table[name] = codec.decode(name, value)
        version = raw.get("dataVersion") or {}
        if not isinstance(version, dict):
            raise TypeError("dataVersion is not an object")
        return (
            table,
            skipped,
            {"counter": int(version.get("counter", 0)), "timestamp": int(version.get("timestamp", 0))},
        )

    # ----------------------------------------------------------------- merges
    def merge(
        self,
        changes: Mapping[str, Any],
        *,
        base: dict[str, V] | None = None,
        since: FileStamp | None = None,
        durable: bool = True,
        applied: bool = False,
    ) -> TableMerge[V]:
        """The rule of the module docstring, under ``config.lock``. ``changes``: by name, the
        caller's change of each entry (checked by the caller; ``None`` removes it); ``base`` and
        ``since``: the caller's table and the stamp of its last merge (``base`` may already hold
        the changes; they are applied again, unless ``applied``: ``base`` already holds every one, and
        they are applied only to a table read again); ``durable``: the data and the folder synced before
        the answer (a persist of a table kept in memory; one entry written at a time, as the
        ``rmqlog`` command and Spark commit, is not). Raises :class:`rmqlog.errors.CorruptStoreError`
        for an unreadable file, :class:`rmqlog.errors.DiskFullError` when it cannot be written
        (the file keeps its old content; ``base`` may hold the changes, and the next merge reads
        the file again), :class:`rmqlog.errors.ReadOnlyStoreError` in a read-only store."""
        apply = self.codec.apply or replace_entry
        with self.lock.held(), self._mutex:
            reread = base is None or not self._unchanged(since)
            table = self._read() if reread else base
            assert table is not None
            if reread or not applied:
                for name, change in changes.items():
                    apply(table, name, change)
            # (with ``applied``, ``base`` is read only by the write's dict merge and JSON dump,
            # C calls that hold the GIL: its owner may go on changing it from another thread)
            if changes:
                try:
                    self._write(table, durable)
                except BaseException:
                    self._known = False  # the table holds what the file does not: read it next time
                    raise
            return TableMerge(table, self._stamp, reread, bool(changes))

    def _write(self, table: dict[str, V], durable: bool) -> None:
        codec = self.codec
        entries: Any = table
        if codec.encode is not None:
            encode = codec.encode
            entries = {name: encode(value) for name, value in table.items()}
        if self._skipped:
            entries = {**self._skipped, **entries}
        body: dict[str, Any] = {}
        if codec.versioned:
            self._version = {"counter": self._version["counter"] + 1, "timestamp": self.wall_ms()}
            body["dataVersion"] = self._version
        body[codec.key] = entries
        replace_file(self.path, dump_table(body), keep_backup=True, durable=durable)
        self.writes += 1
        self._hold(safe_open.open_file(self.path, os.O_RDONLY))  # (under config.lock: our file)

    @property
    def data_version(self) -> dict[str, int]:
        """The file's ``dataVersion`` as last read or written (``{"counter", "timestamp"}``)."""
        return dict(self._version)

    def close(self) -> None:
        """Let the file held go (the next merge reads the file again)."""
        with self._mutex:
            if self._held is not None:
                os.close(self._held)
            self._held, self._stamp, self._known = None, None, False


__all__ = ["FileStamp", "TableMerge", "TableCodec", "TableFile", "replace_entry"]
