"""The index files of a store (RocketMQ's ``IndexService``): build from dispatched batches, query by key.

``<root>/index/`` holds index files (:mod:`rmqlog.index.index_file`) named by their creation
time, ``yyyyMMddHHmmssSSS`` in local time; names sort in creation order and keys in commitlog
order: every file but the last is full. Other names in the folder are ignored (a file set
aside by a repair is renamed ``<name>.damaged``).

Writing. One process at a time builds the index: the caller holds the store's dispatch lock
around :meth:`IndexService.build` (and around :meth:`truncate`, :meth:`drop_after`,
:meth:`delete_below`). Before each build the service re-reads the folder and the last file's
header, so a writer that changes between processes (any process may dispatch) continues
where the previous one stopped, and repairs the last file first when its previous writer was
killed in the middle of a batch (see :meth:`IndexFile.repair`).

Idempotence (re-dispatch). The keys of a message are numbered in RocketMQ's order (UNIQ_KEY,
then the KEYS tokens). With ``E`` the last file's ``endPhyOffset`` (the newest message
indexed) and ``j`` the number of newest entries at ``E``, a key of a message at commitlog
offset ``o`` is skipped when ``o < E``, or ``o == E`` and its number is below ``j``.
RocketMQ skips ``o < E`` only, so a message at ``E`` dispatched again is indexed twice there;
here it never is, and a message whose keys were cut by a full file (some in the full file,
the rest not yet written when a writer was killed) gets exactly its missing ones.

Durability and recovery.

- A writer killed (the machine up): the next writer repairs the last file (write intent in
  entry 0); records not published to the index yet are indexed when dispatched again.
- The commitlog cut at ``E`` by recovery: :meth:`truncate` removes every entry at or past ``E``
  (RocketMQ does not: its index keeps pointing at offsets that new records then reuse, and
  skips those new records as already indexed).
- A power loss: only flushed bytes are trusted. :meth:`flush` syncs the files and returns
  RocketMQ's checkpoint value ``indexMsgTimestamp``, the ``endTimestamp`` of the newest full
  file that is flushed (a full file is never written again, so a flushed one is whole; the
  last file is still being written, so no flushed state of it is trusted). After an abnormal
  exit, :meth:`drop_after` with the checkpoint's value removes the files it does not cover
  (RocketMQ's ``IndexService.load(lastExitOK=false)``), and :meth:`resume_offset` says from
  which commitlog offset the records must be fed to :meth:`build` again.

Queries (:meth:`query`) walk the files newest to oldest, RocketMQ's ``queryOffset``, with no
lock: a batch becomes visible whole when its file's header is written.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from .. import safe_open
from ..clock import SYSTEM_CLOCK
from ..errors import InvalidArgumentError
from .index_file import CREATING_SUFFIX, CorruptIndexError, IndexFile
from .index_keys import KeyBatch, key_hash, message_keys
from .layout import INT_MAX, IndexHeader, file_size

log = logging.getLogger(__name__)

INDEX_DIR = "index"
_NAME_RE = re.compile(r"[0-9]{17}")
_NAME_FORMAT = "%Y%m%d%H%M%S"
#: Suffix of a file a repair set aside.
DAMAGED_SUFFIX = ".damaged"
LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class IndexConfig:
    """The index's settings, RocketMQ's ``MessageStoreConfig`` names in snake_case.

    - ``max_hash_slot_num``: hash slots per file (5,000,000);
    - ``max_index_num``: entries per file (20,000,000; a file takes one less key);
    - ``max_msgs_num_batch``: most offsets one query returns (64).

    A full-size file is ``40 + 4*slots + 20*entries`` = 420,000,040 bytes, created sparse.
    Raises :class:`rmqlog.errors.ConfigError` for a value out of range.
    """

    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    max_msgs_num_batch: int = 64

    def __post_init__(self) -> None:
        from ..errors import ConfigError

        for name in ("max_hash_slot_num", "max_index_num", "max_msgs_num_batch"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= INT_MAX:
                raise ConfigError(f"{name} must be an int in [1, {INT_MAX}], not {v!r}")
        if self.max_index_num < 2:
            raise ConfigError("max_index_num must be at least 2 (entry 0 is never used)")
        if file_size(self.max_hash_slot_num, self.max_index_num) > INT_MAX:
            # RocketMQ computes the size as a Java int
            raise ConfigError("40 + 4*max_hash_slot_num + 20*max_index_num must fit in a Java int")


def file_name(ms: int) -> str:
    """RocketMQ's ``UtilAll.timeMillisToHumanString``: ``yyyyMMddHHmmssSSS``, local time."""
    t = dt.datetime.fromtimestamp(ms / 1000.0)
    return t.strftime(_NAME_FORMAT) + f"{ms % 1000:03d}"


def _next_name(after: str) -> str:
    """The name one millisecond after ``after`` (two files created in the same millisecond)."""
    t = dt.datetime.strptime(after[:14], _NAME_FORMAT) + dt.timedelta(milliseconds=int(after[14:]) + 1)
    return t.strftime(_NAME_FORMAT) + f"{t.microsecond // 1000:03d}"


def index_file_names(directory: Path) -> list[str]:
    """The index files' names in ``directory``, oldest first (none when it is absent)."""
    return sorted(n for n in safe_open.listdir_or_empty(directory) if _NAME_RE.fullmatch(n))


class IndexService:
    """The index files under one folder. See the module docstring.

    ``writable=False`` (readers: any number of processes) opens files read-only and never
    creates, repairs or deletes anything; ``writable=True`` is for the one process that
    holds the store's dispatch lock. ``now_ms`` gives the wall clock (file names; a store's: its clock's,
    :mod:`rmqlog.clock`).
    """

    def __init__(
        self,
        directory: Path,
        config: IndexConfig | None = None,
        *,
        writable: bool = False,
        now_ms: Callable[[], int] = SYSTEM_CLOCK.wall_ms,
    ) -> None:
        self.directory = Path(directory)
        self.config = config or IndexConfig()
        self.writable = writable
        self.now_ms = now_ms
        self._files: list[IndexFile] = []
        self._lock = threading.RLock()
        self._durable_full: str = ""  # newest full file this process has synced
        # (last file, its indexCount, E, j) after this process's last build: saves reading
        # the tail again while no other process wrote
        self._tail: tuple[str, int, int, int] | None = None
        self._checked: set[str] = set()  # files this process has checked for a killed writer's slots
        self._index_msg_timestamp = 0
        self._dir_fd: int | None = None  # the folder, for the still-named check of the last file

    # ------------------------------------------------------------------ open/close
    @classmethod
    def open(
        cls,
        root: Path,
        config: IndexConfig | None = None,
        *,
        writable: bool = False,
        repair: bool = False,
        now_ms: Callable[[], int] = SYSTEM_CLOCK.wall_ms,
    ) -> IndexService:
        """Open ``<root>/index`` (created when ``writable``), checking every file's size and header.

        A damaged file raises :class:`CorruptIndexError` naming it; with ``repair`` (writable
        only) it is renamed ``<name>.damaged`` and the files after it are removed (their keys
        follow the damaged ones: all are rebuilt from :meth:`resume_offset`).
        """
        svc = cls(Path(root) / INDEX_DIR, config, writable=writable, now_ms=now_ms)
        if writable:
            safe_open.make_folder(svc.directory, parents=True)
        try:
            svc._refresh(repair=repair and writable)
        except BaseException:
            svc.close()
            raise
        return svc

    def close(self) -> None:
        with self._lock:
            for f in self._files:
                f.close()
            self._files = []
            if self._dir_fd is not None:
                os.close(self._dir_fd)
                self._dir_fd = None

    def _still_named(self, f: IndexFile) -> bool:
        """Whether ``f`` is still the file of its name in the folder (one ``fstatat``)."""
        try:
            if self._dir_fd is None:
                self._dir_fd = safe_open.open_folder(self.directory)
            return not f.closed and safe_open.still_named(self._dir_fd, f.name, f.stat())
        except OSError:
            return False

    def __enter__(self) -> IndexService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def files(self) -> list[IndexFile]:
        """The open files, oldest first (a snapshot)."""
        with self._lock:
            return list(self._files)

    def _names(self) -> list[str]:
        return index_file_names(self.directory)

    def _refresh(self, *, repair: bool = False) -> None:
        """Bring the open files in line with the folder: open new ones, drop removed ones.

        In a writable service only the last file is opened writable (a file that stops being
        the last is full and never written again). On an error the open files stay as they were.
        """
        cfg = self.config
        names = self._names()
        current = {f.name: f for f in self._files}
        files: list[IndexFile] = []
        opened: list[IndexFile] = []
        try:
            for i, name in enumerate(names):
                want_writable = self.writable and i == len(names) - 1
                f = current.get(name)
                if f is not None and (f.writable or not want_writable):
                    files.append(f)
                    continue
                path = self.directory / name
                try:
                    f = IndexFile.open(path, cfg.max_hash_slot_num, cfg.max_index_num, writable=want_writable)
                except FileNotFoundError:  # removed by retention meanwhile
                    continue
                except CorruptIndexError:
                    if not repair:
                        raise
                    self._set_aside(path, names[i + 1 :])
                    break
                opened.append(f)
                files.append(f)
        except BaseException:
            for f in opened:
                f.close()
            raise
        still = {id(f) for f in files}
        for f in current.values():
            if id(f) not in still:
                f.close()
        self._files = files

    def _set_aside(self, path: Path, later: list[str]) -> None:
        log.error(
            "index file %s is damaged: renamed %s%s; the %d file(s) after it removed, to be rebuilt",
            path,
            path.name,
            DAMAGED_SUFFIX,
            len(later),
        )
        safe_open.rename(path, path.with_name(path.name + DAMAGED_SUFFIX))
        for name in later:
            safe_open.unlink(self.directory / name)

    def _sync_for_write(self) -> None:
        """A writer's start: current files, and the last one repaired if its writer was killed.

        The folder is listed only when the last file this process holds is full or no longer
        there: a new file is made only when the last one is full (by whoever dispatches:
        under the dispatch lock, which the caller holds), and only recovery removes the last
        one. One ``stat`` in place of a listing per dispatch."""
        if not self.writable:
            raise InvalidArgumentError("this IndexService was opened read-only")
        last = self._files[-1] if self._files else None
        if last is None or not last.writable or last.is_full() or not self._still_named(last):
            self._refresh()
        if not self._files:
            return
        last = self._files[-1]
        if last.intent() is not None:
            last.repair()
        elif last.name not in self._checked:
            # once per process and file: a writer without our write intent (RocketMQ, killed
            # between a key's slot and its header update) can leave a slot past indexCount
            last.repair()
        self._checked.add(last.name)

    # ------------------------------------------------------------------ build
    def build(
        self,
        topics: pa.Array | pa.ChunkedArray,
        phy_offsets: np.ndarray,
        store_timestamps: np.ndarray,
        uniq_keys: pa.Array | pa.ChunkedArray | None,
        keys: pa.Array | pa.ChunkedArray | None,
        sys_flags: np.ndarray | None = None,
    ) -> int:
        """Index a dispatched batch of messages (RocketMQ's ``buildIndex`` for each, vectorized).

        Columns, one row per message, in commitlog order (``phy_offsets`` strictly
        increasing): ``topics`` (string or dictionary column), ``phy_offsets`` (int64),
        ``store_timestamps`` (ms, int64), ``uniq_keys`` / ``keys`` (the ``UNIQ_KEY`` and
        ``KEYS`` properties, null where absent; ``None`` when no row has one), ``sys_flags``
        (rolled-back transaction records are skipped; ``None``: none is). Returns the number of
        entries added (keys already indexed are skipped: see the module docstring).

        Raises :class:`InvalidArgumentError` for columns of different lengths, wrong types or
        offsets not increasing; :class:`DiskFullError` when a file cannot be written or
        created (the keys written before stay; dispatching the batch again completes it).
        """
        phy = np.asarray(phy_offsets, np.int64)
        ts = np.asarray(store_timestamps, np.int64)
        n = len(phy)
        if len(ts) != n:
            raise InvalidArgumentError(f"store_timestamps has {len(ts)} rows, expected {n}")
        if n and (int(phy[0]) < 0 or (n > 1 and not bool((phy[1:] > phy[:-1]).all()))):
            raise InvalidArgumentError("phy_offsets must be non-negative and strictly increasing (commitlog order)")
        batch = message_keys(topics, uniq_keys, keys, sys_flags)
        return self.add_keys(batch, phy, ts)

    def add_keys(self, batch: KeyBatch, phy_offsets: np.ndarray, store_timestamps: np.ndarray) -> int:
        """:meth:`build` from keys already made by :func:`rmqlog.index.index_keys.message_keys`."""
        if not len(batch):
            return 0
        phy = np.asarray(phy_offsets, np.int64)[batch.message]
        ts = np.asarray(store_timestamps, np.int64)[batch.message]
        hashes = batch.key_hash
        with self._lock:
            self._sync_for_write()
            end, done = self._indexed_end()
            if end is not None:
                keep = (phy > end) | ((phy == end) & (batch.ordinal >= done))
                if not keep.all():
                    phy, ts, hashes = phy[keep], ts[keep], hashes[keep]
            added = 0
            while added < len(hashes):
                f = self._writable_last()
                added += f.add_batch(hashes[added:], phy[added:], ts[added:])
            if added:
                new_end = int(phy[-1])
                other = np.flatnonzero(phy != new_end)
                run = added - 1 - int(other[-1]) if len(other) else added + (done if end == new_end else 0)
                last = self._files[-1]
                self._tail = (last.name, last.header().index_count, new_end, run)
            return added

    def add_direct(self, keys: list[tuple[int, int, int, int]]) -> int:
        """:meth:`add_keys` of a few keys given as ``(key hash, ordinal within its message,
        commitlog offset, store time)`` in commitlog order (a direct put's dispatch,
        :func:`rmqlog.index.index_keys.direct_keys`), one at a time with no numpy step
        (:meth:`IndexFile.add_few`): the same entries (a test pins the two together)."""
        if not keys:
            return 0
        with self._lock:
            self._sync_for_write()
            end, done = self._indexed_end()
            if end is not None:
                keys = [k for k in keys if k[2] > end or (k[2] == end and k[1] >= done)]
            hashes, phy, ts = [k[0] for k in keys], [k[2] for k in keys], [k[3] for k in keys]
            added = 0
            while added < len(hashes):
                added += self._writable_last().add_few(hashes[added:], phy[added:], ts[added:])
            if added:
                new_end = phy[added - 1]
                run = 0
                while run < added and phy[added - 1 - run] == new_end:
                    run += 1
                if run == added and end == new_end:
                    run += done
                last = self._files[-1]
                self._tail = (last.name, last.header().index_count, new_end, run)
            return added

    def _indexed_end(self) -> tuple[int | None, int]:
        """(``E``, ``j``): the last file's ``endPhyOffset`` and how many of the newest entries
        (across files) are at ``E``; ``(None, 0)`` when nothing was ever indexed."""
        if not self._files:
            return None, 0
        hdr = self._files[-1].header()
        end = hdr.end_phy_offset
        if self._tail is not None and self._tail[:3] == (self._files[-1].name, hdr.index_count, end):
            return end, self._tail[3]
        done = 0
        for f in reversed(self._files):
            hi = f.header().index_count
            while hi > 1:
                lo = max(1, hi - 64)  # a message has a few keys: one read nearly always ends the run
                tail = f.entries(lo, hi)["phyOffset"]
                other = np.flatnonzero(tail != end)
                if len(other):
                    return end, done + len(tail) - 1 - int(other[-1])
                done += len(tail)
                hi = lo
        if done == 0 and end <= 0:
            return None, 0
        return end, done

    def _writable_last(self) -> IndexFile:
        """The last file when it has room, else a new one (RocketMQ's ``getAndCreateLastIndexFile``)."""
        if self._files and not self._files[-1].is_full():
            return self._files[-1]
        cfg = self.config
        for leftover in safe_open.listdir(self.directory):  # files a killed creator left half made
            if leftover.endswith(CREATING_SUFFIX):
                safe_open.unlink(self.directory / leftover)
        prev_hdr: IndexHeader | None = self._files[-1].header() if self._files else None
        name = file_name(self.now_ms())
        if self._files and name <= self._files[-1].name:
            name = _next_name(self._files[-1].name)
        while True:
            try:
                f = IndexFile.create(
                    self.directory / name,
                    cfg.max_hash_slot_num,
                    cfg.max_index_num,
                    end_phy_offset=prev_hdr.end_phy_offset if prev_hdr else 0,
                    end_timestamp=prev_hdr.end_timestamp if prev_hdr else 0,
                )
                break
            except FileExistsError:
                name = _next_name(name)
        self._files.append(f)
        return f

    # ------------------------------------------------------------------ query
    def query(
        self, topic: str, key: str, max_count: int = 64, begin_ms: int = 0, end_ms: int | None = None
    ) -> list[int]:
        """Commitlog offsets of the messages indexed under ``topic#key`` stored in
        ``[begin_ms, end_ms]`` (RocketMQ's ``queryOffset``): newest file first, newest entry
        first within a file; at most ``min(max_count, max_msgs_num_batch)``.

        Entries are matched by hash: the caller reads the messages and removes those whose
        real keys differ (:func:`rmqlog.index.index_keys.key_matches`). A file is searched
        when its time span meets the range; the walk ends at the first file that begins
        before ``begin_ms``. Raises :class:`InvalidArgumentError` for a bad argument,
        :class:`CorruptIndexError` for a damaged file met on the way.
        """
        # any topic string: records written by other tools may carry topics this store would
        # refuse, and the index never makes a path of one
        if not isinstance(topic, str):
            raise InvalidArgumentError(f"topic must be a string, not {type(topic).__name__}")
        if not isinstance(key, str):
            raise InvalidArgumentError(f"key must be a string, not {type(key).__name__}")
        max_count = _int_arg("max_count", max_count, 1, INT_MAX)
        begin = _int_arg("begin_ms", begin_ms, -LONG_MAX - 1, LONG_MAX)
        end = LONG_MAX if end_ms is None else _int_arg("end_ms", end_ms, -LONG_MAX - 1, LONG_MAX)
        max_num = min(max_count, self.config.max_msgs_num_batch)
        h = key_hash(topic, key)
        out: list[int] = []
        with self._lock:
            self._refresh()
            files = list(self._files)
        for f in reversed(files):
            try:
                hdr = f.header()
                if hdr.time_matched(begin, end):
                    f.select_phy_offsets(out, h, max_num, begin, end)
            except (InvalidArgumentError, ValueError):
                if f.closed:  # removed (retention) by another thread meanwhile
                    continue
                raise
            if hdr.begin_timestamp < begin or len(out) >= max_num:
                break
        return out

    def last_update(self) -> tuple[int, int]:
        """(``endTimestamp``, ``endPhyOffset``) of the last file, (0, 0) without files:
        RocketMQ's ``indexLastUpdateTimestamp``/``indexLastUpdatePhyoffset`` of a query."""
        with self._lock:
            self._refresh()
            if not self._files:
                return 0, 0
            hdr = self._files[-1].header()
            return hdr.end_timestamp, hdr.end_phy_offset

    # ------------------------------------------------------------------ durability
    def flush(self) -> int:
        """Sync every file that may hold unsynced writes (``fdatasync``) and return the
        checkpoint's ``indexMsgTimestamp``: the ``endTimestamp`` of the newest full file
        synced (0 when none; never lower than a value returned before). The caller stores it
        in the checkpoint (``long@16``). Raises :class:`DiskFullError` when a sync fails so."""
        with self._lock:
            if not self.writable:
                return self._index_msg_timestamp
            self._refresh()
            for f in self._files:
                if f.name <= self._durable_full:
                    continue
                f.flush()
                if f.is_full():
                    self._durable_full = f.name
                    self._index_msg_timestamp = max(self._index_msg_timestamp, f.header().end_timestamp)
            return self._index_msg_timestamp

    def drop_after(self, index_msg_timestamp: int) -> list[Path]:
        """After an abnormal exit: remove the files the checkpoint's ``indexMsgTimestamp`` does
        not cover, the first file whose ``endTimestamp`` is later and every file after it.
        Returns the removed paths; feed records from :meth:`resume_offset` on to :meth:`build`.

        RocketMQ removes each file with a later ``endTimestamp``; removing the whole tail
        from the first keeps the files a prefix of the index (store clocks can go back)."""
        with self._lock:
            self._sync_for_write()
            cut = next((i for i, f in enumerate(self._files) if f.header().end_timestamp > index_msg_timestamp), None)
            if cut is None:
                return []
            return self._remove_from(cut)

    def _remove_from(self, i: int) -> list[Path]:
        """Remove files ``i..`` newest first (a crash in between leaves a prefix)."""
        self._tail = None
        removed: list[Path] = []
        for f in reversed(self._files[i:]):
            f.close()
            safe_open.unlink(f.path)
            removed.append(f.path)
        del self._files[i:]
        if removed:
            log.info("index: removed %s", ", ".join(p.name for p in reversed(removed)))
        return list(reversed(removed))

    def resume_offset(self) -> int:
        """The commitlog offset from which records must be given to :meth:`build` again for
        the index to be complete after :meth:`drop_after`, :meth:`truncate` or a repair: the
        last file's ``endPhyOffset`` (0 without files; records before it are indexed)."""
        return self.last_update()[1]

    def truncate(self, commit_log_end: int) -> int:
        """Recovery cut the commitlog at ``commit_log_end``: remove every entry at or past it.

        Files whose entries all lie past it are removed; in the file where the cut falls,
        ``indexCount`` is lowered (published first, under a write intent), its slots are
        walked back to the newest remaining entry, and ``endPhyOffset``/``endTimestamp``
        become the last remaining entry's (its time to the second, as the entry stores it).
        Returns the number of entries removed.
        """
        with self._lock:
            self._sync_for_write()
            removed = 0
            while self._files:
                f = self._files[-1]
                hdr = f.header()
                if hdr.index_count <= 1:
                    # an empty file: its offsets are the previous file's end, never past the log's
                    # (a damaged header would make every later key look indexed already)
                    past = hdr.end_phy_offset > commit_log_end or hdr.begin_phy_offset > commit_log_end
                    if past or (hdr.begin_phy_offset >= commit_log_end and len(self._files) > 1):
                        if past:
                            log.warning(
                                "index file %s: empty, with offsets past the log's end %d; removed",
                                f.path,
                                commit_log_end,
                            )
                        self._remove_from(len(self._files) - 1)
                        self._refresh()  # the file before it is the last now: opened writable
                        continue
                    break
                first_phy = int(f.entries(1, 2)["phyOffset"][0])
                if first_phy >= commit_log_end:
                    removed += hdr.index_count - 1
                    self._remove_from(len(self._files) - 1)
                    self._refresh()
                    continue
                # entries are in commitlog order: the first at or past the cut, by bisection
                lo, hi = 1, hdr.index_count
                while lo < hi:
                    mid = (lo + hi) // 2
                    if int(f.entries(mid, mid + 1)["phyOffset"][0]) < commit_log_end:
                        lo = mid + 1
                    else:
                        hi = mid
                cut = lo
                if cut < hdr.index_count:
                    removed += hdr.index_count - cut
                    f.cut(cut)
                break
            self._refresh()  # a removed last file: the one before it becomes the writable one
            return removed

    def delete_below(self, min_commit_log_offset: int) -> list[Path]:
        """Retention: remove the oldest files whose ``endPhyOffset`` is below
        ``min_commit_log_offset`` (every key of theirs points at deleted commitlog), never the
        last file (RocketMQ's ``deleteExpiredFile``). Returns the removed paths."""
        with self._lock:
            self._sync_for_write()
            n = 0
            while n < len(self._files) - 1 and self._files[n].header().end_phy_offset < min_commit_log_offset:
                n += 1
            removed: list[Path] = []
            for f in self._files[:n]:  # oldest first: a crash in between leaves a suffix
                f.close()
                safe_open.unlink(f.path)
                removed.append(f.path)
            del self._files[:n]
            return removed


def _int_arg(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidArgumentError(f"{name} must be an int, not {type(value).__name__}")
    v = int(value)
    if not lo <= v <= hi:
        raise InvalidArgumentError(f"{name} must be in [{lo}, {hi}], not {v}")
    return v


__all__ = ["DAMAGED_SUFFIX", "INDEX_DIR", "IndexConfig", "IndexService", "file_name", "index_file_names"]
