"""Appending keys to an index file (RocketMQ's ``IndexFile.putKey``), the writing half of
:class:`rmqlog.index.index_file.IndexFile`: a batch as one vectorized step
(:meth:`IndexAppends.add_batch`), or a few keys one at a time in plain Python
(:meth:`IndexAppends.add_few`: a direct put's dispatch, where numpy's per-call cost exceeds
the work). Both write in the order the module docstring of :mod:`rmqlog.index.index_file`
gives (intent, entries, slots, header, intent cleared), and a test pins them to the same bytes.
"""

from __future__ import annotations

import logging
import mmap
import struct
from typing import TYPE_CHECKING

import numpy as np

from .. import crash_points
from ..errors import DiskFullError, InvalidArgumentError
from .layout import (
    ENTRY,
    ENTRY_DTYPE,
    ENTRY_SIZE,
    HEADER_SIZE,
    INT_MAX,
    INTENT_MAGIC,
    INVALID_INDEX,
    SLOT_SIZE,
    ZERO_ENTRY,
    IndexHeader,
)

if TYPE_CHECKING:
    from pathlib import Path

log = logging.getLogger(__name__)
_SLOT = struct.Struct(">i")


def time_diffs(store_timestamps: np.ndarray, begin_timestamps: np.ndarray | int) -> np.ndarray:
    """RocketMQ's ``timeDiff`` (int32 seconds) of each store time against a begin time.

    ``(ts - begin) / 1000`` truncated; 0 when ``begin <= 0`` or the difference is negative;
    ``Integer.MAX_VALUE`` when it is larger.
    """
    ts = np.asarray(store_timestamps, np.int64)
    begin = np.asarray(begin_timestamps, np.int64)
    with np.errstate(over="ignore"):
        d = ts - begin  # Java long arithmetic wraps the same way
    q = np.where(d > 0, d // 1000, 0)
    q = np.where(begin <= 0, 0, np.minimum(q, INT_MAX))
    return q.astype(np.int32)


def _time_diff(store_timestamp: int, begin: int) -> int:
    """:func:`time_diffs` of one store time."""
    if begin <= 0:
        return 0
    d = store_timestamp - begin
    return min(d // 1000, INT_MAX) if d > 0 else 0


def _radix_order(slots: np.ndarray) -> np.ndarray:
    """A stable order of ``slots`` (non-negative ints below 2^32): two 16-bit radix passes.

    numpy's stable argsort is a radix sort for 16-bit keys; two passes cost ~0.7 ms for 64k
    keys where a comparison sort of 64-bit keys costs ~2.5 ms.
    """
    s = slots.astype(np.uint32, copy=False)
    o1 = np.argsort((s & 0xFFFF).astype(np.uint16), kind="stable")
    o2 = np.argsort((s[o1] >> 16).astype(np.uint16), kind="stable")
    return o1[o2].astype(np.int32)


class IndexAppends:
    """The appends of :class:`rmqlog.index.index_file.IndexFile` (its base)."""

    if TYPE_CHECKING:
        path: Path
        hash_slot_num: int
        index_num: int
        _entries_at: int

        def _require_writable(self) -> mmap.mmap: ...
        def header(self) -> IndexHeader: ...
        def _published_head(self, value: int, count: int) -> int: ...
        def _pwrite(self, data: bytes | bytearray | memoryview, offset: int) -> None: ...

    def add_batch(self, key_hashes: np.ndarray, phy_offsets: np.ndarray, store_timestamps: np.ndarray) -> int:
        """Append keys, RocketMQ's ``putKey`` for each in order, as one vectorized step.

        ``key_hashes`` are RocketMQ key hashes (``abs(hashCode)``, int32, non-negative; see
        :func:`rmqlog.index.java_hash.index_key_hash`), ``phy_offsets``/``store_timestamps``
        the message's commitlog offset and store time (ms) per key. Takes as many keys as
        the file has room for (``indexNum - indexCount``) from the front and returns how
        many: the caller puts the rest into the next file. Each key's entry links to the
        previous key of its slot (earlier in the batch, else the slot's newest entry).

        Raises :class:`DiskFullError` when the entries cannot be written (nothing published,
        the file as before), :class:`InvalidArgumentError` for a negative hash or arrays of
        different lengths.
        """
        mm = self._require_writable()
        hashes = np.asarray(key_hashes)
        n = len(hashes)
        if len(phy_offsets) != n or len(store_timestamps) != n:
            raise InvalidArgumentError("key_hashes, phy_offsets and store_timestamps must have the same length")
        hdr = self.header()
        count = hdr.index_count
        k = min(n, self.index_num - count)
        if k <= 0:
            return 0
        hashes = hashes[:k]
        if int(hashes.min()) < 0 or int(hashes.max()) > INT_MAX:
            raise InvalidArgumentError("key hashes must be in [0, 2**31)")
        hashes = hashes.astype(np.int32, copy=False)
        phy = np.asarray(phy_offsets[:k], np.int64)
        ts = np.asarray(store_timestamps[:k], np.int64)

        # timeDiff against the file's begin time; a file without entries takes its first
        # key's store time as begin time, after that key's diff (RocketMQ's order)
        if count <= 1:
            begins = np.full(k, int(ts[0]), np.int64)
            begins[0] = hdr.begin_timestamp
            begin_ts, begin_phy = int(ts[0]), int(phy[0])
        else:
            begins = np.full(1, hdr.begin_timestamp, np.int64)
            begin_ts, begin_phy = hdr.begin_timestamp, hdr.begin_phy_offset
        diffs = time_diffs(ts, begins)

        # chain links: group the keys by slot (stable: batch order within a slot)
        # int32 throughout (indices < 2^31): half the memory traffic of int64
        slot = hashes % np.int32(self.hash_slot_num)
        order = _radix_order(slot)
        s_sorted = slot[order]
        first = np.ones(k, bool)
        first[1:] = s_sorted[1:] != s_sorted[:-1]
        last = np.ones(k, bool)
        last[:-1] = first[1:]
        slots_view = np.frombuffer(mm, ">i4", self.hash_slot_num, HEADER_SIZE)
        heads = slots_view[s_sorted[first]].astype(np.int32)
        heads[heads < 0] = INVALID_INDEX
        for i in np.flatnonzero(heads >= count).tolist():
            # left by a writer killed mid-batch (a file repair() has not seen): walk back
            # rather than drop the slot's older entries, as RocketMQ would
            heads[i] = self._published_head(int(heads[i]), count)
        empty = heads == INVALID_INDEX
        # entry i of the batch is entry count + i of the file
        prev_sorted = np.empty(k, np.int32)
        prev_sorted[first] = heads
        rest = np.flatnonzero(~first)
        prev_sorted[rest] = order[rest - 1] + count
        prev = np.empty(k, np.int32)
        prev[order] = prev_sorted

        entries = np.empty(k, ENTRY_DTYPE)
        entries["keyHash"] = hashes
        entries["phyOffset"] = phy
        entries["timeDiff"] = diffs
        entries["prevIndex"] = prev
        new_header = IndexHeader(
            begin_ts,
            int(ts[-1]),
            begin_phy,
            int(phy[-1]),
            hdr.hash_slot_count + int(empty.sum()),
            count + k,
        )
        # intent, entries, slots, header (publishes), intent cleared: see the module docstring
        self._pwrite(ENTRY.pack(INTENT_MAGIC, count, count + k, 0), self._entries_at)
        try:
            self._pwrite(entries.view(np.uint8).data, self._entries_at + count * ENTRY_SIZE)
        except DiskFullError:
            self._clear_intent()
            raise
        if crash_points.reached is not None:
            crash_points.reached("index.entries")
        slots_view[s_sorted[last]] = (order[last] + count).astype(np.int32)
        if crash_points.reached is not None:
            crash_points.reached("index.slots")
        self._pwrite(new_header.pack(), 0)
        self._clear_intent()
        return k

    def add_few(self, key_hashes: list[int], phy_offsets: list[int], store_timestamps: list[int]) -> int:
        """:meth:`add_batch` of a few keys as Python ints, one at a time (a direct put's
        dispatch: no numpy call, which costs more than the work for a handful of keys); the
        same entries, slots, header and write order (a test pins the two together)."""
        mm = self._require_writable()
        n = len(key_hashes)
        if len(phy_offsets) != n or len(store_timestamps) != n:
            raise InvalidArgumentError("key_hashes, phy_offsets and store_timestamps must have the same length")
        hdr = self.header()
        count = hdr.index_count
        k = min(n, self.index_num - count)
        if k <= 0:
            return 0
        if any(not 0 <= h <= INT_MAX for h in key_hashes[:k]):
            raise InvalidArgumentError("key hashes must be in [0, 2**31)")
        if count <= 1:
            begin_ts, begin_phy = store_timestamps[0], phy_offsets[0]
            first_begin = hdr.begin_timestamp
        else:
            begin_ts, begin_phy = hdr.begin_timestamp, hdr.begin_phy_offset
            first_begin = begin_ts
        heads: dict[int, int] = {}  # slot -> its newest entry once the batch is in
        empty = 0
        entries = bytearray()
        for i in range(k):
            h = key_hashes[i]
            slot = h % self.hash_slot_num
            prev = heads.get(slot)
            if prev is None:
                prev = _SLOT.unpack_from(mm, HEADER_SIZE + slot * SLOT_SIZE)[0]
                if prev < 0:
                    prev = INVALID_INDEX
                elif prev >= count:  # a writer killed mid-batch: walk back (see add_batch)
                    prev = self._published_head(prev, count)
                empty += prev == INVALID_INDEX
            entries += ENTRY.pack(
                h, phy_offsets[i], _time_diff(store_timestamps[i], first_begin if i == 0 else begin_ts), prev
            )
            heads[slot] = count + i
        new_header = IndexHeader(
            begin_ts, store_timestamps[k - 1], begin_phy, phy_offsets[k - 1], hdr.hash_slot_count + empty, count + k
        )
        self._pwrite(ENTRY.pack(INTENT_MAGIC, count, count + k, 0), self._entries_at)
        try:
            self._pwrite(entries, self._entries_at + count * ENTRY_SIZE)
        except DiskFullError:
            self._clear_intent()
            raise
        if crash_points.reached is not None:
            crash_points.reached("index.entries")
        for slot, newest in heads.items():
            _SLOT.pack_into(mm, HEADER_SIZE + slot * SLOT_SIZE, newest)
        if crash_points.reached is not None:
            crash_points.reached("index.slots")
        self._pwrite(new_header.pack(), 0)
        self._clear_intent()
        return k

    def _clear_intent(self) -> None:
        try:
            self._pwrite(ZERO_ENTRY, self._entries_at)
        except OSError:  # the page was just written: only a failing device gets here
            log.warning("index file %s: could not clear the write intent", self.path, exc_info=True)
