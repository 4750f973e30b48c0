"""``config/deletedTopics.json``: the topics deleted from this store, and where each delete stood.

::

    {"deletedTopics": {"T": {"commitLogOffset": D, "queueOffsets": {"0": N0, "1": N1}, "pending": true}}}

A delete (:meth:`rmqlog.MessageStore.delete_topic`, RocketMQ's ``deleteTopic``) removes the
topic's consume-queue units, as RocketMQ's ``cleanUnusedTopic`` destroys its queues; its records
stay in the commitlog, which every topic shares (readable by offset and msgId, as in RocketMQ).
Everything else about consume queues is rebuilt from the log (crash recovery walks it again,
lost queue files are re-dispatched from it), so this file is what keeps the units from coming
back: at every open the first opener removes any unit of queue ``q`` of ``T`` below ``Nq`` (its
next queue offset when deleted), and counts the queue complete up to ``Nq`` (recovery does not
look for units below it). ``D`` is the dispatch position of the delete: every record of ``T``
below it was deleted.

Sends after the delete create the topic again. Their queue offsets go on from ``Nq`` (RocketMQ
starts again at 0, which would break the density of queue offsets along the log that recovery
checks), so the topic's queues start at ``Nq``. Deleting it again moves ``D`` and the ``Nq``
forward. A topic whose queues hold nothing past their ``Nq`` is not listed by
:meth:`rmqlog.MessageStore.topics`.

A delete is a change of several files (this one, ``topics.json``, ``consumerOffset.json``, the
queues' files), so it is recorded here first, with ``"pending": true``, then done step by step
(the config entry, the offsets, the units), then marked done (``pending`` dropped; an entry
with no queue floor, a topic that had no units, removed). A delete killed at any step leaves
a pending entry, and the next owner's open finishes it (the first owner's recovery,
:func:`rmqlog.recovery.queue_repair.finish_deletions`, or any later owner's open while others
hold the store):
a kill leaves the topic as it was (killed before the record) or deleted, never in between
(crash points ``delete.*``, :mod:`rmqlog.crash_points`). A read-only opener does not list a
topic whose delete is pending. Files without ``pending`` (older versions) are done deletes.

Written as ``topics.json`` is (``.tmp`` then rename, the previous file kept as ``.bak``, under
``config.lock``), durably, before any unit is removed: a delete killed part-way is finished by
the next open. Read again whenever the file changes (one ``stat`` per look). A name that is
not a valid topic is logged and ignored; an unreadable file (and ``.bak``) is logged and read
as empty: deleted topics may then be listed again with their old messages, but nothing stored
is lost.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import safe_open
from .arguments import JAVA_INT_MAX, JAVA_LONG_MAX
from .config_files import dump_fastjson, load_fastjson
from .errors import CorruptStoreError
from .fileio import InterProcessLock, replace_file
from .paths import topic_problem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Deletion:
    """One topic's last delete: records below ``commit_log_offset`` have no units; queue ``q``'s
    units below ``queue_offsets[q]`` were removed. ``pending``: recorded, not yet finished (its
    config entry, offsets or units may still be there: the next owner's open finishes it)."""

    commit_log_offset: int
    queue_offsets: dict[int, int]
    pending: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "commitLogOffset": self.commit_log_offset,
            "queueOffsets": {str(q): n for q, n in sorted(self.queue_offsets.items())},
        }
        if self.pending:
            out["pending"] = True
        return out


def _long(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= JAVA_LONG_MAX:
        raise ValueError(f"{what} {value!r} is not a long >= 0")
    return value


def _decode(path: Path, raw: Any) -> dict[str, Deletion]:
    table = raw.get("deletedTopics") or {}
    if not isinstance(table, dict):
        raise TypeError("deletedTopics is not an object")
    out: dict[str, Deletion] = {}
    for topic, entry in table.items():
        if topic_problem(topic) is not None:
            log.warning("%s: entry %r ignored: not a valid topic name", path, topic)
            continue
        queues = entry.get("queueOffsets") or {}
        if not isinstance(queues, dict):
            raise TypeError(f"{topic!r}: queueOffsets is not an object")
        floors: dict[int, int] = {}
        for q, n in queues.items():
            if not (q.isascii() and q.isdigit() and int(q) <= JAVA_INT_MAX):
                raise ValueError(f"{topic!r}: queue id {q!r} is not an int in 0..{JAVA_INT_MAX}")
            floors[int(q)] = _long(n, f"{topic!r}: queue offset")
        pending = entry.get("pending", False)
        if not isinstance(pending, bool):
            raise ValueError(f"{topic!r}: pending {pending!r} is not a boolean")
        out[topic] = Deletion(_long(entry.get("commitLogOffset"), f"{topic!r}: commitLogOffset"), floors, pending)
    return out


class DeletedTopics:
    """The store's ``config/deletedTopics.json`` (see the module docstring)."""

    def __init__(self, path: Path, lock: InterProcessLock) -> None:
        self.path = path
        self.lock = lock
        self._mutex = threading.Lock()
        self._seen: tuple[int, int, int] | None = None  # (inode, mtime ns, size) of the file last read
        self._table: dict[str, Deletion] = {}

    def _identity(self) -> tuple[int, int, int] | None:
        try:
            st = safe_open.lstat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _read(self) -> dict[str, Deletion]:
        try:
            loaded = load_fastjson(self.path, lambda raw: _decode(self.path, raw))
        except CorruptStoreError as exc:
            log.warning("%s; read as if no topic had been deleted", exc)
            return {}
        return loaded if loaded is not None else {}

    def table(self) -> dict[str, Deletion]:
        """Every deleted topic's last delete, re-read when the file changed since the last look."""
        identity = self._identity()
        with self._mutex:
            if identity != self._seen or identity is None and self._table:
                self._table = self._read() if identity is not None else {}
                self._seen = identity
            return self._table

    def record(self, topic: str, commit_log_offset: int, queue_offsets: dict[int, int]) -> None:
        """Record a delete of ``topic`` (a valid name) durably, as pending, before any of it is
        done: its records below ``commit_log_offset`` and its queues' units below
        ``queue_offsets`` (each at least where an earlier delete left it) are gone for good,
        and its config entry and offsets go (:meth:`finish` once they are)."""
        with self.lock.held():
            table = dict(self._read())
            before = table.get(topic)
            floors = dict(before.queue_offsets) if before is not None else {}
            for q, n in queue_offsets.items():
                floors[q] = max(floors.get(q, 0), n)
            position = max(commit_log_offset, before.commit_log_offset if before is not None else 0)
            table[topic] = Deletion(position, floors, pending=True)
            self._write(table)

    def finish(self, topic: str) -> None:
        """Mark ``topic``'s pending delete done, durably (an entry with no queue floor, a topic
        that had no units, is dropped: it has nothing to keep from coming back)."""
        with self.lock.held():
            table = dict(self._read())
            d = table.get(topic)
            if d is None or not d.pending:
                return
            if d.queue_offsets:
                table[topic] = Deletion(d.commit_log_offset, d.queue_offsets)
            else:
                del table[topic]
            self._write(table)

    def pending(self) -> list[str]:
        """The topics whose delete was recorded and not finished (killed part-way)."""
        return sorted(name for name, d in self.table().items() if d.pending)

    def _write(self, table: dict[str, Deletion]) -> None:
        body = {"deletedTopics": {name: d.to_json() for name, d in sorted(table.items())}}
        replace_file(self.path, dump_fastjson(body), keep_backup=True, durable=True)

    def floor(self, topic: str, queue_id: int) -> int:
        """The queue offset below which ``topic``'s queue has no units on purpose (0 if none)."""
        d = self.table().get(topic)
        return d.queue_offsets.get(queue_id, 0) if d is not None else 0
