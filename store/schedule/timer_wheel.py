"""The timer's index of pending timed messages: a time wheel over a timer log (RocketMQ 5's
``TimerWheel`` + ``TimerLog``), so that a pass finds what is due in proportion to what is due,
whatever number is pending.

On disk, under ``<root>/timer/`` (our layout; the timer topic's messages themselves are
RocketMQ's, and this index is rebuilt from them whenever it cannot be trusted):

- ``log``: 40-byte entries appended in the order messages are enqueued, little-endian:
  ``prev`` (int64: the entry index of the previous entry of the same bucket, -1 none),
  ``due`` (int64 ms: when the message is due), ``offset`` (int64: its commitlog offset),
  ``queueOffset`` (int64: its offset in ``rmq_sys_wheel_timer`` queue 0), ``size`` (int32:
  its record size), 4 bytes reserved;
- ``wheel``: ``slots`` 24-byte slots (sparse file, mapped), little-endian: ``time`` (int64 ms:
  the start of the bucket the slot holds now), ``last`` (int64: its newest entry, the head of
  the bucket's chain), ``count`` (int64). Bucket ``b`` (the messages due in
  ``[b * precision, (b + 1) * precision)``) lives in slot ``b % slots``. ``slots`` is twice the
  longest delay in buckets plus an hour, so two buckets pending at once never share a slot
  (every pending message is due within ``timer_max_delay_sec`` of the last pass);
- ``state``: 64 bytes rewritten in place: magic ``RMQTIMR1``, ``enqueued`` (the next timer-queue
  offset to enqueue), ``log_end`` (entries in the log), ``delivered`` (ms: every message due at
  or before it was delivered), ``pending`` (entries enqueued and not yet delivered, a hint),
  ``slots``, ``dirty`` (an enqueue is under way), CRC-32 of the rest.

Guarantees. An enqueue sets ``dirty``, appends its entries, links them into their buckets and
clears ``dirty`` with the new ``enqueued``/``log_end``: a state that is ``dirty``, torn,
missing, or made for another wheel size means the index is rebuilt from the timer queue (the
messages with ``due`` past ``delivered``), as is one left by a store that did not close
cleanly (its files are not synced: see :meth:`TimerWheel.invalidate`). A pass reads the
buckets from the last delivered time to now (the wheel's slots for them, vectorized), and
walks their chains (the C helper's ``walk_chains``: one C step per entry; a numpy walk of all
the chains in step otherwise). The log is emptied when nothing is pending, and rewritten by a
rebuild when it holds four times more entries than are pending.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import safe_open
from ..errors import CorruptStoreError
from ..fileio import raise_if_disk_full

try:  # the optional C helper (setup.py builds it); without it, the numpy walk below
    from .._native import walk_chains as _native_walk_chains
except ImportError:  # pragma: no cover - depends on the build
    _native_walk_chains = None

ENTRY = np.dtype([("prev", "<i8"), ("due", "<i8"), ("offset", "<i8"), ("queueOffset", "<i8"), ("size", "<i4"),
                  ("reserved", "<i4")])
SLOT = np.dtype([("time", "<i8"), ("last", "<i8"), ("count", "<i8")])
assert ENTRY.itemsize == 40 and SLOT.itemsize == 24
_STATE = struct.Struct("<8sqqqqqi")  # magic, enqueued, log_end, delivered, pending, slots, dirty
STATE_SIZE = 64
MAGIC = b"RMQTIMR1"
#: buckets of slack in the wheel beyond twice the longest delay
WHEEL_SLACK_BUCKETS = 3600


@dataclass
class TimerState:
    """``timer/state`` (see the module docstring)."""

    enqueued: int = 0
    log_end: int = 0
    delivered: int = 0
    pending: int = 0
    slots: int = 0
    dirty: bool = False

    def pack(self) -> bytes:
        body = _STATE.pack(MAGIC, self.enqueued, self.log_end, self.delivered, self.pending, self.slots, int(self.dirty))
        return (body + struct.pack("<I", zlib.crc32(body))).ljust(STATE_SIZE, b"\0")

    @classmethod
    def unpack(cls, raw: bytes) -> TimerState | None:
        if len(raw) < _STATE.size + 4:
            return None
        body = raw[: _STATE.size]
        (crc,) = struct.unpack_from("<I", raw, _STATE.size)
        if zlib.crc32(body) != crc:
            return None
        magic, enqueued, log_end, delivered, pending, slots, dirty = _STATE.unpack(body)
        if magic != MAGIC:
            return None
        return cls(enqueued, log_end, delivered, pending, slots, bool(dirty))


def wheel_slots(max_delay_ms: int, precision_ms: int) -> int:
    """Slots of a wheel for delays up to ``max_delay_ms`` (see the module docstring)."""
    return 2 * -(-max_delay_ms // precision_ms) + WHEEL_SLACK_BUCKETS


class TimerWheel:
    """The files of ``directory`` (created on first use); callers serialize passes (the
    scheduler's lock)."""

    def __init__(self, directory: Path, slots: int, precision_ms: int) -> None:
        self.directory = directory
        self.slots = slots
        self.precision_ms = precision_ms
        self.state_path = directory / "state"
        self.log_path = directory / "log"
        self.wheel_path = directory / "wheel"
        self._wheel: np.ndarray | None = None
        self._wheel_mm: mmap.mmap | None = None
        self._log_mm: mmap.mmap | None = None
        self._log_entries = 0

    # ----------------------------------------------------------- state
    def load(self) -> TimerState | None:
        """The state, or ``None`` when the index must be rebuilt (see the module docstring)."""
        try:
            raw = safe_open.read_bytes(self.state_path)
        except FileNotFoundError:
            return None
        state = TimerState.unpack(raw)
        if state is None or state.dirty or state.slots != self.slots:
            return None
        return state

    def save(self, state: TimerState) -> None:
        """Write ``state`` in place (created the first time)."""
        safe_open.make_folder(self.directory)
        try:
            fd = safe_open.open_file(self.state_path, os.O_WRONLY | os.O_CREAT)
            try:
                os.pwrite(fd, state.pack(), 0)
            finally:
                os.close(fd)
        except OSError as exc:
            raise_if_disk_full(exc, self.state_path, "writing the timer state")
            raise

    def invalidate(self) -> None:
        """Make the next pass rebuild the index (a store recovered after an abnormal exit: the
        index's files were not synced, the timer queue is the truth)."""
        safe_open.unlink(self.state_path)

    def reset(self, state: TimerState) -> None:
        """Empty the log and the wheel (a rebuild, or nothing pending any more)."""
        self.close()
        safe_open.make_folder(self.directory)
        for path in (self.log_path, self.wheel_path):
            safe_open.unlink(path)
        state.log_end = 0
        state.pending = 0
        state.slots = self.slots

    # ------------------------------------------------------------ maps
    def _slots(self) -> np.ndarray:
        if self._wheel is None:
            safe_open.make_folder(self.directory)
            size = self.slots * SLOT.itemsize
            fd = safe_open.open_file(self.wheel_path, os.O_RDWR | os.O_CREAT)
            try:
                if os.fstat(fd).st_size != size:
                    os.ftruncate(fd, size)  # sparse: a slot never written reads as empty
                self._wheel_mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
            self._wheel = np.frombuffer(self._wheel_mm, SLOT)
        return self._wheel

    def _log(self, entries: int) -> np.ndarray:
        """The log's first ``entries`` entries, mapped read-only (remapped when it grew)."""
        if entries == 0:
            return np.zeros(0, ENTRY)
        if self._log_mm is None or self._log_entries < entries:
            if self._log_mm is not None:
                self._log_mm.close()
            fd = safe_open.open_file(self.log_path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                if size < entries * ENTRY.itemsize:
                    raise CorruptStoreError(f"timer log holds {size // ENTRY.itemsize} entries, its state says {entries}",
                                            path=str(self.log_path))
                self._log_mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
            finally:
                os.close(fd)
            self._log_entries = size // ENTRY.itemsize
        return np.frombuffer(self._log_mm, ENTRY, entries)

    def close(self) -> None:
        self._wheel = None
        for mm in (self._wheel_mm, self._log_mm):
            if mm is not None:
                with contextlib.suppress(BufferError):
                    mm.close()
        self._wheel_mm = self._log_mm = None
        self._log_entries = 0

    # ------------------------------------------------------------ add
    def add(self, state: TimerState, due: np.ndarray, offset: np.ndarray, queue_offset: np.ndarray,
            size: np.ndarray) -> None:
        """Append entries (one per message, any order of ``due``) and link each into its bucket,
        as one vectorized step; ``state`` gets the new ``log_end`` and ``pending``. Every
        ``due`` must be past ``state.delivered`` and within the wheel's span of it."""
        n = len(due)
        if not n:
            return
        wheel = self._slots()
        p = self.precision_ms
        bucket = due // p
        slot = bucket % self.slots
        first_index = state.log_end
        order = np.argsort(bucket, kind="stable")
        b_sorted = bucket[order]
        first = np.ones(n, bool)
        first[1:] = b_sorted[1:] != b_sorted[:-1]
        heads_slot = slot[order][first]
        heads_time = b_sorted[first] * p
        if len(np.unique(heads_slot)) != len(heads_slot):
            raise CorruptStoreError("two buckets of one enqueue share a timer wheel slot (a delay longer than the wheel "
                                    "was made for)", path=str(self.wheel_path))
        current = wheel[heads_slot]
        live = (current["count"] > 0) & (current["time"] == heads_time)
        taken = (current["count"] > 0) & (current["time"] != heads_time) & (current["time"] > state.delivered)
        if taken.any():
            raise CorruptStoreError(
                f"timer wheel slot {int(heads_slot[taken][0])} still holds bucket {int(current['time'][taken][0])} ms "
                f"(a delay longer than the wheel was made for)", path=str(self.wheel_path))
        prev_sorted = np.empty(n, np.int64)
        prev_sorted[first] = np.where(live, current["last"], -1)
        rest = np.flatnonzero(~first)
        prev_sorted[rest] = order[rest - 1] + first_index
        entries = np.zeros(n, ENTRY)
        entries["prev"][order] = prev_sorted
        entries["due"] = due
        entries["offset"] = offset
        entries["queueOffset"] = queue_offset
        entries["size"] = size
        self._append(first_index, entries)
        last_sorted = np.ones(n, bool)
        last_sorted[:-1] = first[1:]
        counts = np.diff(np.r_[np.flatnonzero(first), n])
        new = np.zeros(len(heads_slot), SLOT)
        new["time"] = heads_time
        new["last"] = order[last_sorted] + first_index
        new["count"] = np.where(live, current["count"], 0) + counts
        wheel[heads_slot] = new
        state.log_end += n
        state.pending += n

    def _append(self, at: int, entries: np.ndarray) -> None:
        safe_open.make_folder(self.directory)
        fd = safe_open.open_file(self.log_path, os.O_WRONLY | os.O_CREAT)
        try:
            view = memoryview(entries.view(np.uint8).data)
            pos = at * ENTRY.itemsize
            while len(view):
                done = os.pwrite(fd, view, pos)
                view, pos = view[done:], pos + done
        except OSError as exc:
            raise_if_disk_full(exc, self.log_path, "appending to the timer log")
            raise
        finally:
            os.close(fd)

    # ------------------------------------------------------------ due
    def due_between(self, state: TimerState, lo: int, hi: int) -> np.ndarray:
        """The entries due in ``(lo, hi]`` (ms), in no particular order."""
        if hi <= lo or state.pending <= 0 or state.log_end == 0:
            return np.zeros(0, ENTRY)
        wheel = self._slots()
        p = self.precision_ms
        b0, b1 = (lo + 1) // p, hi // p
        if b1 - b0 + 1 >= self.slots:
            idx = np.arange(self.slots)
        else:
            idx = np.arange(b0, b1 + 1) % self.slots
        slots = wheel[idx]
        live = (slots["count"] > 0) & (slots["time"] >= b0 * p) & (slots["time"] <= b1 * p)
        if not live.any():
            return np.zeros(0, ENTRY)
        heads = slots["last"][live].astype(np.int64)
        log = self._log(state.log_end)
        found = self._walk(log, heads, int(slots["count"][live].sum()))
        entries = log[found]
        return entries[(entries["due"] > lo) & (entries["due"] <= hi)]

    @staticmethod
    def _walk(log: np.ndarray, heads: np.ndarray, total: int) -> np.ndarray:
        """Entry indices of the chains starting at ``heads`` (each followed through ``prev``)."""
        if _native_walk_chains is not None:
            out = np.empty(total, np.int64)
            n = _native_walk_chains(log.view(np.uint8), ENTRY.itemsize, np.ascontiguousarray(heads), out)
            return out[:n]
        parts: list[np.ndarray] = []
        cur = heads[heads >= 0]
        found = 0
        while len(cur) and found < total:  # all chains in step: one numpy step per link
            parts.append(cur)
            found += len(cur)
            cur = log["prev"][cur]
            cur = cur[(cur >= 0) & (cur < len(log))]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)
