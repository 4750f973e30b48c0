"""The folder of a structure's segments (RocketMQ's MappedFileQueue): the commitlog's, each
consume queue's.

Segments are :class:`~rmqlog.log.mapped_file.MappedFile` s of one size, named by the 20-digit
offset of their first byte, found by listing the folder (links never followed: see
:mod:`rmqlog.safe_open`). The queue maps them on demand, creates the next one (sparse, or
allocated where reads of holes would allocate), checks their sizes for recovery, and drops
those below an offset (retention).

Two ways to know the segments: :meth:`MappedFileQueue.segment_starts` lists the folder by its
path each call (what is on disk now: recovery, retention, the dispatcher); the reads' bounds
use the listing *kept* since the last :meth:`MappedFileQueue.relist` (:meth:`listed_starts`),
whose names they check one at a time through the folder's kept descriptor
(:meth:`MappedFileQueue.still_listed`: one ``fstatat``, :mod:`rmqlog.log.folder_handle`) and
list again only when a check fails; when that is needed is the owner's rule
(:meth:`rmqlog.log.commitlog.CommitLog.min_offset`, :meth:`rmqlog.queue.consume_queue.ConsumeQueue.bounds`).
Every change this process makes to the folder through this object (a segment created,
forgotten, dropped below an offset, the queue closed) forgets the kept listing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable
from pathlib import Path

from .. import safe_open
from ..errors import (
    CorruptStoreError,
    WrongFileTypeError,
    disk_full_from_errno,
    raise_if_disk_full,
)
from ..paths import parse_segment_name, segment_name
from . import mapped_file
from .folder_handle import FolderHandle
from .mapped_file import (
    _NO_PUNCH,
    FALLOC_FL_KEEP_SIZE,
    PAGE,
    MappedFile,
    _fallocate,
)
from .open_files import OpenFiles


class MappedFileQueue:
    """The segments of one directory, by start offset.

    ``size`` is taken from the existing files when there are any and ``infer`` is set (the
    commitlog: a store written with another segment size, like RocketMQ's, opens as it is),
    else it is ``default_size``. Files of another size (a segment truncated by a crash of the
    filesystem, or by hand) are listed in :attr:`odd` (start -> bytes) instead of failing
    here: recovery decides (see :mod:`rmqlog.recovery.recovery`), and mapping one raises
    :class:`CorruptStoreError`. With ``infer``, the size is the most common one (the largest
    among equally common ones). Something with a segment's name that is not a file (a folder,
    a link: never followed) is listed in :attr:`wrong` and refused by :meth:`check_sizes`. Segment creation must be
    serialized by the caller (the append
    lock); lookups are safe from any thread or process.
    """

    def __init__(
        self,
        directory: Path,
        default_size: int,
        *,
        infer: bool = True,
        read_only: bool = False,
        open_files: OpenFiles | None = None,
        bounded_reads: bool | None = None,
        settle: Callable[[], int | None] | None = None,
    ) -> None:
        self.directory = directory
        #: the store's bound on open files its segments register with (``None``: unbounded)
        self.open_files = open_files
        #: segments are opened read-only and never created (a read-only store)
        self.read_only = read_only
        self._segments: dict[int, MappedFile] = {}
        self._lock = threading.Lock()
        self._size = default_size
        #: a provisional size's settler (:mod:`rmqlog.segment_sizes`: a reader that found
        #: neither record nor file): asked at each use of the size until a segment exists
        self._settle = settle
        # (a store's consume queues pass it, found once: not a statfs per queue)
        # (through the module: the tmpfs tests patch it)
        self.bounded_reads = mapped_file.hole_reads_allocate(directory) if bounded_reads is None else bounded_reads
        #: segment names that are not files (start -> what is there; see :mod:`rmqlog.safe_open`)
        self.wrong: dict[int, str] = {}
        sizes: dict[int, int] = {}
        for start, found in self._files():
            if found == safe_open.FILE:
                with contextlib.suppress(FileNotFoundError):  # (removed meanwhile)
                    sizes[start] = safe_open.lstat(self.directory / segment_name(start)).st_size
            else:
                self.wrong[start] = found
        if infer and any(sizes.values()):
            counts: dict[int, int] = {}
            for n in sizes.values():
                if n > 0:
                    counts[n] = counts.get(n, 0) + 1
            self.size = max(counts, key=lambda n: (counts[n], n))
        if infer and any(sizes.values()):
            self._settle = None  # (the files told)
        self.odd: dict[int, int] = {start: n for start, n in sizes.items() if n != self.size}
        #: the folder's kept descriptor (:meth:`relist`, :meth:`still_listed`)
        self.folder = FolderHandle(directory, open_files)
        #: the last :meth:`relist`: the starts ascending and each one's (name, inode) (``None``: none kept)
        self._listing: tuple[list[int], dict[int, tuple[str, int]]] | None = None
        #: listings made by :meth:`relist` (for tests and benchmarks)
        self.relists = 0
        #: changes this process made to the folder through this object (:meth:`_changed`)
        self._changes = 0

    @property
    def size(self) -> int:
        """The segments' size (settled first if provisional: see ``settle``)."""
        if self._settle is not None:
            self._try_settle()
        return self._size

    @size.setter
    def size(self, value: int) -> None:
        self._size = value

    def _try_settle(self) -> None:
        """A provisional size settled once the store says it (its record) or a segment exists
        (its size); kept provisional (the guess) while neither."""
        settle = self._settle
        if settle is None:
            return
        size = settle()
        if size is None:
            found = [
                n for start, found in self._files() if found == safe_open.FILE and (n := self._file_size(start)) > 0
            ]
            size = max(set(found), key=found.count) if found else None
        if size is not None:
            self._size, self._settle = size, None

    def _file_size(self, start: int) -> int:
        try:
            return safe_open.lstat(self.directory / segment_name(start)).st_size
        except FileNotFoundError:
            return 0

    def check_sizes(self) -> None:
        """Raise :class:`CorruptStoreError` naming the first segment of the wrong size, if any
        (:class:`~rmqlog.errors.WrongFileTypeError` for one that is not a file)."""
        if self.wrong:
            start, found = min(self.wrong.items())
            raise WrongFileTypeError(str(self.directory / segment_name(start)), found, safe_open.FILE)
        if self.odd:
            start, n = min(self.odd.items())
            raise CorruptStoreError(
                f"segment is {n} bytes, expected {self.size} (truncated or extended outside the store); "
                "open the store with repair=True to recover what it holds",
                path=str(self.directory / segment_name(start)),
            )

    def _files(self) -> list[tuple[int, str]]:
        """(start, what it is) of every segment name in the folder, ascending."""
        return [
            (start, found)
            for name, found in safe_open.entries(self.directory)
            if (start := parse_segment_name(name)) is not None
        ]

    def segment_starts(self) -> list[int]:
        """Start offsets of the segments on disk now, ascending."""
        # names, not Paths: every dispatch asks this of each queue it writes (~15 us a call,
        # where building and sorting Path objects cost ~70 us)
        names = safe_open.listdir_or_empty(self.directory)
        return sorted(start for start in map(parse_segment_name, names) if start is not None)

    def listed_starts(self) -> list[int]:
        """The segment starts of the kept listing (:meth:`relist` now when none is kept); the
        caller checks what it relies on with :meth:`still_listed`. Never changed in place."""
        got = self._listing
        return got[0] if got is not None else self.relist()

    def relist(self) -> list[int]:
        """List the folder now (its path walked, its descriptor kept: :class:`FolderHandle`) and
        keep the listing; this process lets go of its segments below the first one (deleted
        by retention, as :meth:`drop_below`) and of a mapped file whose name now names another
        file (replaced: its next :meth:`get` maps the new one). Returns the starts, ascending."""
        changes = self._changes
        names = {
            start: (name, ino) for name, ino in self.folder.entries() if (start := parse_segment_name(name)) is not None
        }
        starts = sorted(names)
        with self._lock:
            drop = [
                k
                for k, seg in self._segments.items()
                if (starts and k < starts[0]) or (seg.ino is not None and k in names and names[k][1] != seg.ino)
            ]
            dropped = [self._segments.pop(k) for k in drop]
            if changes == self._changes:  # (else this process changed the folder meanwhile: kept none)
                self._listing = (starts, names)
        self._let_go(dropped)
        self.relists += 1
        return starts

    def still_listed(self, start: int) -> bool:
        """Whether the segment at ``start`` of the kept listing is still the file listed: its
        name names the same inode in the folder (one ``fstatat`` through the kept descriptor).
        False when it was removed or replaced since, when no listing is kept or does not hold
        it, or when the descriptor was closed meanwhile (the caller lists again)."""
        got = self._listing
        known = got[1].get(start) if got is not None else None
        return known is not None and self.folder.inode(known[0]) == known[1]

    def segment_start_for(self, offset: int) -> int:
        return offset - offset % self.size

    def get(self, start: int, *, create: bool = False) -> MappedFile | None:
        """The segment starting at ``start``; ``None`` if absent and not ``create`` (also one
        closed for the limit on open files whose file was deleted since: it cannot reopen)."""
        seg = self._segments.get(start)
        if seg is not None and (seg.is_open or safe_open.kind(seg.path) is not None):
            return seg
        path = self.directory / segment_name(start)
        with self._lock:
            seg = self._segments.get(start)
            if seg is not None:
                if seg.is_open or safe_open.kind(path) is not None:
                    return seg
                del self._segments[start]
            if safe_open.kind(path) is None:
                if not create or self.read_only:
                    return None
                try:
                    self._create(path, start)
                except OSError as exc:
                    raise_if_disk_full(exc, path, "creating a segment")
                    raise
                finally:
                    self._changed()  # a new name in the folder (after it: a listing under way keeps none)
            seg = MappedFile(
                path,
                start,
                self.size,
                bounded_reads=self.bounded_reads,
                read_only=self.read_only,
                open_files=self.open_files,
            )
            self._segments[start] = seg
            return seg

    @property
    def prepared_dir(self) -> Path:
        """Where segments prepared ahead of the writer wait (:mod:`rmqlog.log.allocate`):
        ``<directory>.prealloc/`` beside the segments' folder, so that nothing that lists
        the segments (RocketMQ's tooling included) ever meets one."""
        return self.directory.with_name(self.directory.name + ".prealloc")

    def prepared_path(self, start: int) -> Path:
        """The prepared segment at ``start`` (see :attr:`prepared_dir`)."""
        return self.prepared_dir / segment_name(start)

    def _create(self, path: Path, start: int) -> None:
        """Create the segment ``path``: the one prepared ahead (:meth:`prepared_path`, linked into
        place, then its hidden name removed) when there is one of the right size, else a new
        file; either way complete before it gets its name (another process listing the
        directory never sees a segment of the wrong size).
        """
        prepared = self.prepared_path(start)
        safe_open.make_folder(self.directory, parents=True)
        try:
            if safe_open.lstat(prepared).st_size == self.size:
                with contextlib.suppress(FileExistsError):  # another process created it first: keep theirs
                    safe_open.link(prepared, path)
            with contextlib.suppress(FileNotFoundError):
                safe_open.unlink(prepared)
            if safe_open.kind(path) is not None:
                return
        except FileNotFoundError:  # none prepared (or taken by another process meanwhile)
            pass
        self.create_file(path, start)

    def create_file(self, path: Path, start: int) -> None:
        """Create the full-size file ``path`` for the segment at ``start`` under a temporary name,
        then link it into place (an existing file is kept: another process's).

        Sparse (``ftruncate``), except that with :attr:`bounded_reads` (tmpfs) its first page
        is allocated: a reader looking for a segment's first record (recovery) then never
        reads a hole, and a disk with no room fails here, typed, before any write.
        """
        safe_open.make_folder(path.parent, parents=True)
        tmp = path.parent / f".{segment_name(start)}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = safe_open.open_file(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        try:
            try:
                os.ftruncate(fd, self.size)
                if self.bounded_reads and _fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, min(PAGE, self.size)) != 0:
                    err = ctypes.get_errno()
                    if err not in _NO_PUNCH:
                        disk_full_from_errno(err, path, "allocating the first page of a segment")
            finally:
                os.close(fd)
            with contextlib.suppress(FileExistsError):  # another process created it first: keep theirs
                safe_open.link(tmp, path)
        finally:
            safe_open.unlink(tmp)

    def for_offset(self, offset: int, *, create: bool = False) -> MappedFile | None:
        return self.get(self.segment_start_for(offset), create=create)

    def drop_below(self, start: int, *, changed: bool = True) -> None:
        """Let go of this process's segments below ``start`` (deleted by retention) without
        closing them: a read still using one keeps it mapped and valid; each is closed when
        its last user lets go of it (mapping and descriptor), which frees its disk space.
        ``changed``: this process deleted them (the kept listing is forgotten); ``False``:
        a listing found them gone."""
        with self._lock:  # (iterating the dict outside the lock could race a get())
            dropped = [self._segments.pop(k) for k in [k for k in self._segments if k < start]]
            if changed:
                self._changed()
        self._let_go(dropped)

    def _changed(self) -> None:
        """The kept listing is forgotten (caller holds ``_lock``)."""
        self._changes += 1
        self._listing = None

    def _let_go(self, dropped: list[MappedFile]) -> None:
        if self.open_files is not None:
            for seg in dropped:  # not counted any more: closed with its last user
                self.open_files.forget(seg)

    def forget(self, start: int) -> None:
        with self._lock:
            seg = self._segments.pop(start, None)
            self._changed()
        if seg is not None:
            seg.close()

    def close(self) -> None:
        with self._lock:
            segs = list(self._segments.values())
            self._segments.clear()
            self._changed()
        for seg in segs:
            seg.close()
        self.folder.close()
