"""The timer's index of pending timed messages: a time wheel over a timer log (RocketMQ 5's
``TimerWheel`` + ``TimerLog``), so that a pass finds what is due in proportion to what is due,
whatever number is pending.

On disk, under ``<root>/timer/`` (our layout; the timer topic's messages themselves are
RocketMQ's, and this index is rebuilt from them whenever it cannot be trusted):

- ``log``: 40-byte entries appended in the order messages are enqueued, little-endian:
  ``prev`` (int64: the entry index of the previous entry of the same bucket, always below the
  entry's own, -1 none), ``due`` (int64 ms: when the message is due), ``offset`` (int64: its
  commitlog offset), ``queueOffset`` (int64: its offset in ``rmq_sys_wheel_timer`` queue 0),
  ``size`` (int32: its record size), 4 bytes reserved (0);
- ``wheel``: ``slots`` 24-byte slots (sparse file, mapped), little-endian: ``time`` (int64 ms:
  the start of the bucket the slot holds now), ``last`` (int64: its newest entry, the head of
  the bucket's chain), ``count`` (int64: the entries of the chain). Bucket ``b`` (the messages
  due in ``[b * precision, (b + 1) * precision)``) lives in slot ``b % slots``. ``slots`` is
  twice the longest delay in buckets plus an hour, so two buckets pending at once never share
  a slot (every pending message is due within ``timer_max_delay_sec`` of the last pass);
- ``state``: :mod:`rmqlog.schedule.timer_state` (where the index stands; the log's CRC and the
  wheel's sum; a dirty flag).

Guarantees. Nothing in these files is trusted over the timer queue (the truth: its units
carry each message's due time). An enqueue sets ``dirty``, appends its entries, links them
into their buckets and clears ``dirty`` with the new ``enqueued``/``log_end``, CRC and sum: a
state that is dirty, torn, missing, of another format or geometry, or out of range means the
index is rebuilt from the timer queue (the messages with ``due`` past ``delivered``), as is
one left by a store that did not close cleanly (its files are not synced: see
:meth:`TimerWheel.invalidate`) or opened with ``repair=True``. The first pass of each open
store also checks the files against the state (:meth:`TimerWheel.check`: the log's size and
CRC, the wheel's size and sum); a mismatch is a rebuild too. A pass reads the buckets from the
last delivered time to now (the wheel's slots for them, vectorized, each checked: its time,
its place, its head and count within the log) and walks their chains (the C helper's
``walk_chains``: one C step per entry; a numpy walk of all the chains in step otherwise),
each link checked: it goes back, the chain ends after exactly its count, every entry is of
the slot's bucket. A link or slot that fails raises :class:`TimerIndexDamaged` before
anything is delivered, and the pass rebuilds the index: a damaged index can neither loop nor
deliver a message twice. The log is emptied when nothing is pending, and rewritten by a
rebuild when it holds four times more entries than are pending.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path

import numpy as np

from .. import safe_open
from ..errors import CorruptStoreError
from ..fileio import raise_if_disk_full
from ..log.record import crc32
from ..native import (
    walk_chains as _native_walk_chains,  # the C helper's (None without it: the numpy walk below)
)
from .timer_state import STATE_SIZE, TimerState, new_generation, slot_sums

__all__ = ["ENTRY", "SLOT", "STATE_SIZE", "TimerIndexDamaged", "TimerState", "TimerWheel", "wheel_slots"]

ENTRY = np.dtype(
    [("prev", "<i8"), ("due", "<i8"), ("offset", "<i8"), ("queueOffset", "<i8"), ("size", "<i4"), ("reserved", "<i4")]
)
SLOT = np.dtype([("time", "<i8"), ("last", "<i8"), ("count", "<i8")])
assert ENTRY.itemsize == 40 and SLOT.itemsize == 24
#: buckets of slack in the wheel beyond twice the longest delay
WHEEL_SLACK_BUCKETS = 3600
#: bytes of the log, slots of the wheel, read per step of a check (bounds its memory)
CHECK_BYTES = 8 << 20
CHECK_SLOTS = 1 << 18


class TimerIndexDamaged(CorruptStoreError):
    """The timer's index does not hold together (a file missing or of the wrong size, a link,
    a slot, a count): the pass rebuilds it from the timer queue. Raised before anything is
    delivered from it; it leaves a pass only from a rebuild (a wheel too small for the delays
    pending in the queue)."""


def wheel_slots(max_delay_ms: int, precision_ms: int) -> int:
    """Slots of a wheel for delays up to ``max_delay_ms`` (see the module docstring)."""
    return 2 * -(-max_delay_ms // precision_ms) + WHEEL_SLACK_BUCKETS


def _size(path: Path) -> int | None:
    try:
        return safe_open.lstat(path).st_size
    except FileNotFoundError:
        return None


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
        self._generation: int | None = None  # of the files mapped

    # ----------------------------------------------------------- state
    def load(self) -> TimerState | None:
        """The state, or ``None`` when the index must be rebuilt (see the module docstring)."""
        try:
            raw = safe_open.read_bytes(self.state_path)
        except FileNotFoundError:
            return None
        state = TimerState.unpack(raw)
        if (
            state is None
            or state.dirty
            or state.slots != self.slots
            or state.precision != self.precision_ms
            or state.out_of_range() is not None
        ):
            return None
        return state

    def new_state(self, enqueued: int, delivered: int) -> TimerState:
        """A dirty state of this wheel's geometry, nothing indexed (a rebuild's start)."""
        return TimerState(
            enqueued=enqueued, delivered=delivered, slots=self.slots, precision=self.precision_ms, dirty=True
        )

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
        index's files were not synced; or repaired: the timer queue is the truth)."""
        safe_open.unlink(self.state_path)

    def reset(self, state: TimerState) -> None:
        """Empty the log and the wheel (a rebuild, or nothing pending any more): a new
        generation."""
        self.close()
        safe_open.make_folder(self.directory)
        for path in (self.log_path, self.wheel_path):
            safe_open.unlink(path)
        state.log_end = state.pending = state.wheel_sum = state.log_crc = 0
        state.slots, state.precision, state.generation = self.slots, self.precision_ms, new_generation()

    # ----------------------------------------------------------- check
    def check(self, state: TimerState) -> str | None:
        """Why the log and the wheel cannot be trusted with ``state``, or ``None``: the log's
        size and CRC, the wheel's size and sum (each file read whole, in steps: once per open
        store)."""
        log_size = _size(self.log_path)
        if (log_size or 0) != state.log_end * ENTRY.itemsize:
            held = "is missing" if log_size is None else f"holds {log_size} bytes"
            return f"{self.log_path} {held}, its state says {state.log_end} entries"
        if state.log_end:
            crc = 0
            fd = safe_open.open_file(self.log_path, os.O_RDONLY)
            try:
                while chunk := os.read(fd, CHECK_BYTES):
                    crc = crc32(chunk, crc)
            finally:
                os.close(fd)
            if crc != state.log_crc:
                return f"{self.log_path} fails its CRC"
        wheel_size = _size(self.wheel_path)
        if wheel_size is None:
            return f"{self.wheel_path} is missing" if state.log_end or state.wheel_sum else None
        if wheel_size != self.slots * SLOT.itemsize:
            return f"{self.wheel_path} holds {wheel_size} bytes, {self.slots} slots need {self.slots * SLOT.itemsize}"
        fd = safe_open.open_file(self.wheel_path, os.O_RDONLY)
        try:
            mm = mmap.mmap(fd, wheel_size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        try:
            total = 0
            for at in range(0, self.slots, CHECK_SLOTS):
                part = np.frombuffer(mm, SLOT, min(CHECK_SLOTS, self.slots - at), at * SLOT.itemsize)
                total += slot_sums(np.arange(at, at + len(part)), part)
                del part
        finally:
            mm.close()
        if total % (1 << 64) != state.wheel_sum:
            return f"{self.wheel_path} does not hold the slots its state says"
        return None

    # ------------------------------------------------------------ maps
    def _same_generation(self, state: TimerState) -> None:
        """Drop mappings of files another pass (maybe another process's) has replaced since."""
        if self._generation != state.generation:
            self.close()
            self._generation = state.generation

    def _slots(self, state: TimerState) -> np.ndarray:
        self._same_generation(state)
        if self._wheel is None:
            safe_open.make_folder(self.directory)
            size = self.slots * SLOT.itemsize
            fresh = state.log_end == 0 and state.wheel_sum == 0  # nothing indexed: an empty wheel
            try:
                fd = safe_open.open_file(self.wheel_path, os.O_RDWR | (os.O_CREAT | os.O_TRUNC if fresh else 0))
            except FileNotFoundError:
                raise TimerIndexDamaged("the timer wheel is missing", path=str(self.wheel_path)) from None
            try:
                if fresh:
                    os.ftruncate(fd, size)  # sparse: a slot never written reads as empty
                elif os.fstat(fd).st_size != size:
                    raise TimerIndexDamaged(
                        f"the timer wheel holds {os.fstat(fd).st_size} bytes, not {size}", path=str(self.wheel_path)
                    )
                self._wheel_mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            except OSError as exc:
                raise_if_disk_full(exc, self.wheel_path, "sizing the timer wheel")
                raise
            finally:
                os.close(fd)
            self._wheel = np.frombuffer(self._wheel_mm, SLOT)
        return self._wheel

    def _log(self, state: TimerState) -> np.ndarray:
        """The log's ``state.log_end`` entries, mapped read-only (remapped when it grew)."""
        self._same_generation(state)
        entries = state.log_end
        if entries == 0:
            return np.zeros(0, ENTRY)
        if self._log_mm is None or self._log_entries < entries:
            if self._log_mm is not None:
                self._log_mm.close()
                self._log_mm, self._log_entries = None, 0
            try:
                fd = safe_open.open_file(self.log_path, os.O_RDONLY)
            except FileNotFoundError:
                raise TimerIndexDamaged("the timer log is missing", path=str(self.log_path)) from None
            try:
                size = os.fstat(fd).st_size
                if size < entries * ENTRY.itemsize:
                    raise TimerIndexDamaged(
                        f"the timer log holds {size // ENTRY.itemsize} entries, its state says {entries}",
                        path=str(self.log_path),
                    )
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
        self._generation = None

    # ------------------------------------------------------------ add
    def add(
        self, state: TimerState, due: np.ndarray, offset: np.ndarray, queue_offset: np.ndarray, size: np.ndarray
    ) -> None:
        """Append entries (one per message, any order of ``due``) and link each into its bucket,
        as one vectorized step; ``state`` gets the new ``log_end``, ``pending``, CRC and sum.
        Every ``due`` must be past ``state.delivered`` and within the wheel's span of it."""
        n = len(due)
        if not n:
            return
        wheel = self._slots(state)
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
            raise CorruptStoreError(
                "two buckets of one enqueue share a timer wheel slot (a delay longer than the wheel was made for)",
                path=str(self.wheel_path),
            )
        current = wheel[heads_slot]
        live = (current["count"] > 0) & (current["time"] == heads_time)
        taken = (current["count"] > 0) & (current["time"] != heads_time) & (current["time"] > state.delivered)
        if taken.any():  # a slot damaged, or a delay longer than the wheel was made for
            raise TimerIndexDamaged(
                f"timer wheel slot {int(heads_slot[taken][0])} still holds bucket {int(current['time'][taken][0])} ms "
                f"(a delay longer than the wheel was made for)",
                path=str(self.wheel_path),
            )
        if (live & ((current["last"] < 0) | (current["last"] >= first_index) | (current["count"] > first_index))).any():
            raise TimerIndexDamaged("a timer wheel slot points past the timer log", path=str(self.wheel_path))
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
        state.log_crc = crc32(entries.tobytes(), state.log_crc)
        last_sorted = np.ones(n, bool)
        last_sorted[:-1] = first[1:]
        counts = np.diff(np.r_[np.flatnonzero(first), n])
        new = np.zeros(len(heads_slot), SLOT)
        new["time"] = heads_time
        new["last"] = order[last_sorted] + first_index
        new["count"] = np.where(live, current["count"], 0) + counts
        wheel[heads_slot] = new
        state.wheel_sum = (state.wheel_sum - slot_sums(heads_slot, current) + slot_sums(heads_slot, new)) % (1 << 64)
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
        """The entries due in ``(lo, hi]`` (ms), in no particular order. Raises
        :class:`TimerIndexDamaged` when a slot or a chain read for them does not hold together."""
        if hi <= lo or state.pending <= 0 or state.log_end == 0:
            return np.zeros(0, ENTRY)
        wheel = self._slots(state)
        p = self.precision_ms
        b0, b1 = (lo + 1) // p, hi // p
        idx = np.arange(self.slots) if b1 - b0 + 1 >= self.slots else np.arange(b0, b1 + 1) % self.slots
        slots = wheel[idx]
        live = (slots["count"] > 0) & (slots["time"] >= b0 * p) & (slots["time"] <= b1 * p)
        if not live.any():
            return np.zeros(0, ENTRY)
        idx, slots = idx[live], slots[live]
        times, heads, counts = slots["time"], slots["last"], slots["count"]
        n = state.log_end
        # every number checked before anything is sized from it
        if (
            (times % p != 0) | ((times // p) % self.slots != idx) | (heads < 0) | (heads >= n) | (counts > n)
        ).any() or float(counts.sum(dtype=np.float64)) > n:
            raise TimerIndexDamaged(
                f"a timer wheel slot of buckets {b0 * p}..{b1 * p} ms does not fit its log of {n} entries",
                path=str(self.wheel_path),
            )
        log = self._log(state)
        entries = log[self._walk(log, heads, counts)]
        bucket_of = np.repeat(times, counts)  # the walk lays each chain out whole, in slot order
        if ((entries["due"] // p) * p != bucket_of).any():
            raise TimerIndexDamaged("a timer log chain holds an entry of another bucket", path=str(self.log_path))
        return entries[(entries["due"] > lo) & (entries["due"] <= hi)]

    def _walk(self, log: np.ndarray, heads: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Entry indices of the chains starting at ``heads``, each followed through ``prev``
        for exactly its count, chain after chain; raises :class:`TimerIndexDamaged` at the
        first link that does not go back, or a chain that ends early or late (the C helper
        and the numpy walk check the same)."""
        heads, counts = np.ascontiguousarray(heads, np.int64), np.ascontiguousarray(counts, np.int64)
        out = np.empty(int(counts.sum()), np.int64)
        if _native_walk_chains is not None:
            n = _native_walk_chains(log.view(np.uint8), ENTRY.itemsize, heads, counts, out)
            bad = -1 - n if n < 0 else None
        else:
            bad = _walk_in_step(log["prev"], heads, counts, out)
        if bad is not None:
            raise TimerIndexDamaged(
                f"the timer log chain from entry {int(heads[bad])} ({int(counts[bad])} entries) is "
                f"broken: a link out of the log or not going back, or a chain of another length",
                path=str(self.log_path),
            )
        return out


def _walk_in_step(prev: np.ndarray, heads: np.ndarray, counts: np.ndarray, out: np.ndarray) -> int | None:
    """The numpy walk: every chain in step, one numpy step per link of the longest chain,
    each chain's entries written at its place in ``out``; returns the place in ``heads`` of a
    broken chain (see :meth:`TimerWheel._walk`), or ``None``."""
    at = np.cumsum(counts) - counts
    chain = np.arange(len(heads))
    cur = heads.copy()
    step = 0
    while len(chain):
        outside = (cur < 0) | (cur >= len(prev))
        if outside.any():
            return int(chain[np.argmax(outside)])
        out[at[chain] + step] = cur
        nxt = prev[cur]
        step += 1
        end = counts[chain] == step
        bad = np.where(end, nxt != -1, (nxt < 0) | (nxt >= cur))
        if bad.any():
            return int(chain[np.argmax(bad)])
        chain, cur = chain[~end], nxt[~end]
    return None
