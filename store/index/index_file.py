"""One RocketMQ index file (``<root>/index/<yyyyMMddHHmmssSSS>``): a hash table of message keys.

Layout, big-endian, byte-exact with RocketMQ 4.9.8's ``IndexFile``/``IndexHeader``::

    offset                       size   field
    0                            8      beginTimestamp   long: store time (ms) of the first entry
    8                            8      endTimestamp     long: store time of the last entry
    16                           8      beginPhyOffset   long: commitlog offset of the first entry
    24                           8      endPhyOffset     long: commitlog offset of the last entry
    32                           4      hashSlotCount    int: slots that got a first entry
    36                           4      indexCount       int: next entry to write (starts at 1)
    40                           4*S    hash slots       int each: newest entry of the slot, 0 = empty
    40 + 4*S + 20*i              20     entry i          int keyHash, long phyOffset,
                                                         int timeDiff, int prevIndex

``S`` is ``hashSlotNum`` (5,000,000 by default) and entries run ``0 <= i < indexNum``
(20,000,000): a full-size file is 420,000,040 bytes, created sparse. Entry 0 is never used,
so a file takes ``indexNum - 1`` keys and is full when ``indexCount >= indexNum``.

An entry is a key ``topic#key``: ``keyHash = abs(String.hashCode(key))`` (0 for
``Integer.MIN_VALUE``), slot ``keyHash % S``; ``prevIndex`` is the slot's previous newest entry
(0 ends the chain), ``timeDiff = (storeTimestamp - beginTimestamp) / 1000`` in seconds (0
when the file's beginTimestamp is not positive or the difference is negative, capped at
``Integer.MAX_VALUE``). RocketMQ computes the first entry's ``timeDiff`` against the
beginTimestamp the file was created with (the previous file's endTimestamp, or 0) and only
then sets beginTimestamp to that entry's store time; this module does the same.

Nothing is checksummed (as in RocketMQ). What a reader can check, :meth:`IndexFile.open`
checks: the file's size, ``0 <= indexCount <= indexNum`` (0 reads as 1, as RocketMQ's
``IndexHeader.load``), ``0 <= hashSlotCount <= hashSlotNum``, ``0 <= beginPhyOffset <=
endPhyOffset``; queries stop at a slot or link that points outside ``[1, indexCount]`` or
does not go back (a damaged chain can neither loop nor read past the written entries).

Writing, and what a crash leaves. Bytes reach the file by ``pwrite`` (entries, header), except
the slots, which are stored through the mapping; the header and slot region is allocated
(``posix_fallocate``) when the file is created, so those stores never fault on a full disk.
A batch (:meth:`IndexFile.add_batch`) writes, in this order: a write intent in entry 0, the
new entries (past ``indexCount``: invisible), the slots, the header (one 40-byte ``pwrite``:
this publishes the batch), and clears the intent. A process killed half way leaves slots
that point past ``indexCount`` at entries that are already written; whoever writes next
sees the intent and follows those slots back along their chains to the newest published
entry (:meth:`IndexFile.repair`), so nothing published is lost and nothing half written is
visible. Readers in the meantime do the same walk. RocketMQ itself never reads entry 0.
After a power loss only flushed bytes are trusted: see the checkpoint rule in
:mod:`rmqlog.index.index_service`.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from pathlib import Path

import numpy as np

from .. import crash_points, safe_open
from ..errors import (
    CorruptStoreError,
    InvalidArgumentError,
    raise_if_disk_full,
    raise_if_out_of_files,
)
from .index_append import IndexAppends
from .layout import (
    ENTRY,
    ENTRY_DTYPE,
    ENTRY_SIZE,
    HEADER,
    HEADER_SIZE,
    INTENT_MAGIC,
    INVALID_INDEX,
    SLOT_SIZE,
    ZERO_ENTRY,
    IndexHeader,
    file_size,
)

log = logging.getLogger(__name__)
assert HEADER.size == HEADER_SIZE and ENTRY.size == ENTRY_SIZE and ENTRY_DTYPE.itemsize == ENTRY_SIZE


class CorruptIndexError(CorruptStoreError):
    """An index file is not what it must be: wrong size for the configured slot and entry
    counts, or a header field out of range. ``path`` names the file, ``offset`` the byte of
    the bad field (``None`` for the size). Nothing was changed; open the store with
    ``repair=True`` to set the file aside (renamed ``<name>.damaged``) and rebuild its keys."""


#: Suffix of a file being created (ignored by readers: not an index file's name).
CREATING_SUFFIX = ".creating"


class IndexFile(IndexAppends):
    """One index file, mapped. Create with :meth:`create`, open with :meth:`open`.

    A writable file is written by one process at a time (the caller holds the store's
    dispatch lock); any number of processes read it, each through its own mapping. Every
    method reads the header from the file itself, never from a copy, so a file another
    process appended to is read right.
    """

    def __init__(self, path: Path, fd: int, mm: mmap.mmap, hash_slot_num: int, index_num: int, writable: bool) -> None:
        self.path = path
        self.name = path.name
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.writable = writable
        self._fd = fd
        self._mm: mmap.mmap | None = mm
        self._entries_at = HEADER_SIZE + SLOT_SIZE * hash_slot_num
        self._dirty = False

    # ------------------------------------------------------------------ open/create
    @classmethod
    def create(
        cls,
        path: Path,
        hash_slot_num: int,
        index_num: int,
        *,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
    ) -> IndexFile:
        """Create a new, empty, writable file (RocketMQ's ``new IndexFile(...)`` for the next file).

        Its begin and end offset/timestamp are the previous file's end ones when positive
        (RocketMQ's rule), ``hashSlotCount`` 0, ``indexCount`` 1. The file is sparse but its
        header and slots are allocated. Raises :class:`FileExistsError` when ``path`` exists,
        :class:`DiskFullError` (the file removed again) when the disk is full.
        """
        size = file_size(hash_slot_num, index_num)
        # made whole under a temporary name, then linked into place: a process killed at any
        # moment never leaves a file of the index's names that is short or has no header
        tmp = path.with_name(path.name + CREATING_SUFFIX)
        safe_open.unlink(tmp)  # a killed creator's (the caller holds the writers' lock)
        fd = safe_open.open_file(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        try:
            os.ftruncate(fd, size)
            _allocate(fd, path, hash_slot_num)
            phy = end_phy_offset if end_phy_offset > 0 else 0
            ts = end_timestamp if end_timestamp > 0 else 0
            os.pwrite(fd, IndexHeader(ts, ts, phy, phy, 0, 1).pack(), 0)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            if crash_points.reached is not None:
                crash_points.reached("index.created")
            try:
                safe_open.link(tmp, path)  # FileExistsError when the name is taken
            except BaseException:
                mm.close()
                raise
        except BaseException as exc:
            os.close(fd)
            safe_open.unlink(tmp)
            raise_if_disk_full(exc, path, "creating an index file")
            raise_if_out_of_files(exc, path, "creating an index file")
            raise
        safe_open.unlink(tmp)
        return cls(path, fd, mm, hash_slot_num, index_num, True)

    @classmethod
    def open(cls, path: Path, hash_slot_num: int, index_num: int, *, writable: bool = False) -> IndexFile:
        """Open an existing file and check its size and header.

        Raises :class:`CorruptIndexError` naming the file (and the field's offset) when the
        size is not ``file_size(hash_slot_num, index_num)`` or a header field is out of range;
        ``FileNotFoundError`` when it is gone.
        """
        size = file_size(hash_slot_num, index_num)
        try:
            fd = safe_open.open_file(path, os.O_RDWR if writable else os.O_RDONLY)
        except OSError as exc:
            raise_if_out_of_files(exc, path, "opening an index file")
            raise
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise CorruptIndexError(
                    f"index file is {actual} bytes, expected {size} for {hash_slot_num} hash slots and {index_num} "
                    "entries",
                    path=str(path),
                )
            raw = os.pread(fd, HEADER_SIZE, 0)
            _check_header(HEADER.unpack(raw), path, hash_slot_num, index_num)
            if writable:
                # a file another writer created (RocketMQ's are wholly sparse): allocate the
                # header and slots before any store into them (a no-op when they are)
                _allocate(fd, path, hash_slot_num)
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, prot)
        except BaseException as exc:
            os.close(fd)
            raise_if_out_of_files(exc, path, "mapping an index file")
            raise
        return cls(path, fd, mm, hash_slot_num, index_num, writable)

    def close(self) -> None:
        """Unmap and close (idempotent). Arrays returned by :meth:`entries` stay valid copies."""
        if self._mm is None:
            return
        try:
            self._mm.close()
        except BufferError:  # a view still exported: the mapping goes with its last user
            log.debug("index file %s: mapping still in use at close", self.path)
        self._mm = None
        os.close(self._fd)

    # ------------------------------------------------------------------ reading
    @property
    def closed(self) -> bool:
        return self._mm is None

    def _map(self) -> mmap.mmap:
        if self._mm is None:
            raise InvalidArgumentError(f"index file {self.path} is closed")
        return self._mm

    def header(self) -> IndexHeader:
        """The header as the file holds it now (``indexCount`` 0 reads as 1)."""
        f = HEADER.unpack_from(self._map(), 0)
        return IndexHeader(f[0], f[1], f[2], f[3], f[4], f[5] if f[5] > 0 else 1)

    def stat(self) -> os.stat_result:
        """The open file's ``fstat``."""
        return os.fstat(self._fd)

    def is_full(self) -> bool:
        """RocketMQ's ``isWriteFull``: ``indexCount >= indexNum``."""
        return self.header().index_count >= self.index_num

    def entries(self, lo: int = 1, hi: int | None = None) -> np.ndarray:
        """Entries ``[lo, hi)`` of the published ones (default: all) as :data:`ENTRY_DTYPE`.

        Read with ``pread``, not through the mapping: a fault on a page the kernel is writing
        back waited up to 45 ms here, a ``pread`` of a cached page never does."""
        count = self.header().index_count
        hi = count if hi is None else hi
        lo, hi = max(0, lo), min(hi, count)
        if hi <= lo:
            return np.zeros(0, ENTRY_DTYPE)
        return self._pread_entries(lo, hi)

    def slots(self) -> np.ndarray:
        """A copy of the hash slots (int32)."""
        return np.frombuffer(self._map(), ">i4", self.hash_slot_num, HEADER_SIZE).astype(np.int32)

    def _pread_entries(self, lo: int, hi: int) -> np.ndarray:
        """Entries ``[lo, hi)`` read with ``pread``, past the published ones included (a read
        of a hole through a mapping would allocate it on tmpfs)."""
        raw = os.pread(self._fd, (hi - lo) * ENTRY_SIZE, self._entries_at + lo * ENTRY_SIZE)
        return np.frombuffer(raw, ENTRY_DTYPE, len(raw) // ENTRY_SIZE)

    def _published_head(self, value: int, count: int) -> int:
        """The newest entry at or below ``count`` on the chain that starts at ``value`` (a slot
        that points past the published entries: a batch being written, or a writer killed
        before publishing it); 0 if none."""
        while value >= count:
            if value >= self.index_num:
                return INVALID_INDEX
            prev = int(self._pread_entries(value, value + 1)["prevIndex"][0])
            if prev >= value:
                return INVALID_INDEX
            value = prev
        return value if value > 0 else INVALID_INDEX

    def select_phy_offsets(self, out: list[int], key_hash: int, max_num: int, begin: int, end: int) -> None:
        """RocketMQ's ``selectPhyOffset``: append to ``out`` the commitlog offsets of the entries
        of ``key_hash`` stored in ``[begin, end]`` (ms), newest first, until ``out`` holds
        ``max_num``. The walk stops at the first entry older than ``begin``, and at a link
        that does not point at an older published entry."""
        mm = self._map()
        hdr = self.header()
        count = hdr.index_count
        if count <= 1:
            return
        slot_at = HEADER_SIZE + (key_hash % self.hash_slot_num) * SLOT_SIZE
        cur = struct.unpack_from(">i", mm, slot_at)[0]
        if cur >= count:
            cur = self._published_head(cur, count)
        if cur <= INVALID_INDEX:
            return
        base, begin_ts = self._entries_at, hdr.begin_timestamp
        unpack = ENTRY.unpack_from
        while len(out) < max_num:
            h, phy, diff, prev = unpack(mm, base + cur * ENTRY_SIZE)
            if diff < 0:
                break
            t = begin_ts + diff * 1000
            if h == key_hash and begin <= t <= end:
                out.append(phy)
            # RocketMQ stops at prev <= 0, prev > indexCount, prev == current; a link that
            # does not go back (only in a damaged file) would loop: stop there too
            if prev <= INVALID_INDEX or prev >= cur or t < begin:
                break
            cur = prev

    # ------------------------------------------------------------------ writing
    def _require_writable(self) -> mmap.mmap:
        if not self.writable:
            raise InvalidArgumentError(f"index file {self.path} is open read-only")
        return self._map()

    def intent(self) -> tuple[int, int] | None:
        """(old, new indexCount) of a batch whose writer has not finished it, or ``None``."""
        magic, old, new, _ = ENTRY.unpack_from(self._map(), self._entries_at)
        return (old, new) if magic == INTENT_MAGIC else None

    def cut(self, new_count: int) -> None:
        """Remove the entries from ``new_count`` on (``2 <= new_count < indexCount``): publish the
        lower ``indexCount`` with ``endPhyOffset`` and ``endTimestamp`` of the last remaining
        entry (its time to the second: ``beginTimestamp + timeDiff*1000``), then walk the
        slots back (:meth:`repair`, under a write intent) and store the exact ``hashSlotCount``."""
        mm = self._require_writable()
        hdr = self.header()
        if not 2 <= new_count < hdr.index_count:
            raise InvalidArgumentError(
                f"cannot cut index file {self.path} at {new_count} (indexCount {hdr.index_count})"
            )
        _, phy, diff, _ = ENTRY.unpack_from(mm, self._entries_at + (new_count - 1) * ENTRY_SIZE)
        end_ts = max(hdr.begin_timestamp, hdr.begin_timestamp + max(diff, 0) * 1000)
        self._pwrite(ENTRY.pack(INTENT_MAGIC, hdr.index_count, new_count, 0), self._entries_at)
        self._pwrite(
            IndexHeader(
                hdr.begin_timestamp,
                end_ts,
                hdr.begin_phy_offset,
                phy,
                hdr.hash_slot_count,
                new_count,
            ).pack(),
            0,
        )
        self.repair(recount=True)

    def repair(self, *, recount: bool = False) -> int:
        """Undo what a writer killed during a batch left: slots that point past ``indexCount``
        (or below 0) are walked back to the newest published entry of their chain; an
        ``endPhyOffset`` behind the last published entry (RocketMQ writes the header field by
        field) is moved up to it; the write intent is cleared. ``recount`` also stores the
        exact ``hashSlotCount`` (the slots in use). An ``endPhyOffset`` past the last published
        entry (a damaged header: no writer leaves one) is moved back to it. Returns how many
        slots changed.

        Cost: one pass over the slots (20 MB for 5,000,000 slots).
        """
        mm = self._require_writable()
        hdr = self.header()
        count = hdr.index_count
        slots = np.frombuffer(mm, ">i4", self.hash_slot_num, HEADER_SIZE)
        bad = np.flatnonzero((slots >= count) | (slots < 0))
        fixed = 0
        if len(bad):
            values = slots[bad].astype(np.int64)
            values[values < 0] = INVALID_INDEX
            top = int(values.max())
            if top >= count:
                hi = min(top, self.index_num - 1) + 1
                prevs = self._pread_entries(count, hi)["prevIndex"].astype(np.int64)
                # follow the links past the published entries; each step must go back
                for _ in range(hi - count + 1):
                    past = values >= count
                    if not past.any():
                        break
                    cur = values[past]
                    ok = cur < hi
                    nxt = np.zeros(len(cur), np.int64)
                    nxt[ok] = prevs[cur[ok] - count]
                    nxt[(nxt >= cur) | (nxt < 0)] = INVALID_INDEX
                    values[past] = nxt
            slots[bad] = values.astype(np.int32)
            fixed = len(bad)
            self._dirty = True
        if count > 1:
            last_phy = int(ENTRY.unpack_from(mm, self._entries_at + (count - 1) * ENTRY_SIZE)[1])
            if hdr.begin_phy_offset <= last_phy < hdr.end_phy_offset:
                # ahead of the newest entry: no writer leaves that (the field is the newest
                # entry's offset), a damaged header does; followed, every key of a record
                # below it would be skipped as already indexed
                log.warning(
                    "index file %s: endPhyOffset %d is past its newest entry's offset %d; corrected",
                    self.path,
                    hdr.end_phy_offset,
                    last_phy,
                )
            if hdr.begin_phy_offset <= last_phy != hdr.end_phy_offset:
                self._pwrite(
                    IndexHeader(
                        hdr.begin_timestamp,
                        hdr.end_timestamp,
                        hdr.begin_phy_offset,
                        last_phy,
                        hdr.hash_slot_count,
                        count,
                    ).pack(),
                    0,
                )
        if recount:
            used = int(np.count_nonzero(slots))
            hdr = self.header()
            self._pwrite(
                IndexHeader(
                    hdr.begin_timestamp,
                    hdr.end_timestamp,
                    hdr.begin_phy_offset,
                    hdr.end_phy_offset,
                    used,
                    hdr.index_count,
                ).pack(),
                0,
            )
        if self.intent() is not None:
            self._pwrite(ZERO_ENTRY, self._entries_at)
        if fixed:
            log.warning(
                "index file %s: %d hash slot(s) pointed past the published entries; walked back", self.path, fixed
            )
        return fixed

    def _pwrite(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        try:
            os.pwrite(self._fd, data, offset)
        except OSError as exc:
            raise_if_disk_full(exc, self.path, "writing an index file")
            raise
        self._dirty = True

    def flush(self) -> bool:
        """Make everything written so far durable (``fdatasync``: the slot stores through the
        mapping are dirty pages of the file like the ``pwrite``s, and a file written by
        another process is synced the same way). Returns whether this process wrote to it
        since its last flush."""
        self._map()
        dirty, self._dirty = self._dirty, False
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            self._dirty = dirty
            raise_if_disk_full(exc, self.path, "flushing an index file")
            raise
        return dirty


def _allocate(fd: int, path: Path, hash_slot_num: int) -> None:
    """Allocate the header, the slots and entry 0 (the write intent): stores into the slots
    then never need a block (a full disk would be SIGBUS), and no read of them meets a hole.
    Raises :class:`DiskFullError` naming the file."""
    try:
        os.posix_fallocate(fd, 0, HEADER_SIZE + SLOT_SIZE * hash_slot_num + ENTRY_SIZE)
    except OSError as exc:
        raise_if_disk_full(exc, path, "allocating an index file's slots")
        raise


def _check_header(fields: tuple[int, ...], path: Path, hash_slot_num: int, index_num: int) -> None:
    begin_ts, end_ts, begin_phy, end_phy, slot_count, count = fields
    if not 0 <= count <= index_num:
        raise CorruptIndexError(f"indexCount {count} is outside [0, {index_num}]", path=str(path), offset=36)
    if not 0 <= slot_count <= hash_slot_num:
        raise CorruptIndexError(
            f"hashSlotCount {slot_count} is outside [0, {hash_slot_num}]", path=str(path), offset=32
        )
    if begin_phy < 0:
        raise CorruptIndexError(f"beginPhyOffset {begin_phy} is negative", path=str(path), offset=16)
    if end_phy < begin_phy:
        raise CorruptIndexError(
            f"endPhyOffset {end_phy} is below beginPhyOffset {begin_phy}", path=str(path), offset=24
        )
