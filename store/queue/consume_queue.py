"""Consume queues: per (topic, queueId), the commitlog position of each message, in order.

``<root>/consumequeue/<topic>/<queueId>/<20-digit>`` segments of
``mapped_file_size_consume_queue`` bytes (300000 units by default), named by logical byte
offset (``queueOffset * 20``). A unit is 20 bytes, big-endian:

| field           | bytes | meaning                                                    |
|-----------------|-------|------------------------------------------------------------|
| commitLogOffset | 8     | where the record starts in the commitlog                   |
| size            | 4     | its TOTALSIZE                                              |
| tagsCode        | 8     | Java ``String.hashCode`` of its TAGS (0 without tags)      |

Unit ``i`` is at byte ``i*20``. A queue is dense. Slots before the first message of a queue
whose first segment starts past 0 hold the filler ``(0, 0x7FFFFFFF, 0)``. Nothing is
checksummed; the dispatcher can rebuild every unit from the commitlog.

Only the dispatcher writes units, holding ``dispatch.lock``; readers that need the queue's
end take that lock shared for the moment they look (so they never see a half-written unit).
Units below the end never change (until retention deletes whole segments).

Units are written with ``pwrite`` and removed by punching holes (:meth:`MappedFile.clear`),
never stored into the mapping, so a full disk raises :class:`~rmqlog.errors.DiskFullError`
instead of killing the process; a write that fails part-way is undone whole, so a torn unit
never counts as written. On tmpfs the search for the end reads no hole (see
:mod:`rmqlog.log.mapped_file`).

Bounds without a listing (:meth:`ConsumeQueue.bounds` given ``published``: every read's
bounds). A queue keeps the listing of its folder
(:meth:`rmqlog.log.mapped_file_queue.MappedFileQueue.listed_starts`) and lists it again only
when the listing cannot be right, which is when one of these holds:

- its first segment is no longer the file listed (one ``fstatat`` through the folder's kept
  descriptor, :mod:`rmqlog.log.folder_handle`): retention (in any process) deletes a
  queue's segments from the front, never its last; a topic's delete (in any process)
  deletes its queues' segments below the one holding the end. Nothing else deletes a
  segment but recovery (alone with the store) and a dispatch undoing its own failed write
  (the segments it made);
- the end its last known segment shows (its units read through the mapping, where a
  dispatch in any process writes them: more units there are seen at once) is below the
  next queue offset the published append state gives the queue (``published()``, read
  after that end: a unit is written only for a record published before it, so an end at
  that offset is the end), and the segment of that offset lies past the last known one (the
  queue rolled into a new file, or a dispatch wrote past a gap of lost records), or the
  last known segment is no longer the file listed (cut and made again); or there is no
  published state to ask (a queue the state does not name ends at 0 there: its entries are
  never removed, so no record of the queue was ever published);
- this process changed the folder through the queue (a segment made, forgotten, dropped,
  the queue closed).

An end below that offset otherwise means units not dispatched yet: the answer is the end
seen. So a read of a queue whose units are all dispatched costs one ``fstatat`` and a few
unit reads (two 4-byte reads when the end has not moved), whatever the size of the queue
or of the store.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .. import safe_open
from ..log.mapped_file import MappedFile
from ..log.mapped_file_queue import MappedFileQueue
from ..log.open_files import OpenFiles
from ..log.pins import hold_exclusive, pin, pinned, unpin

CQ_UNIT_SIZE = 20
CQ_UNIT = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tagsCode", ">i8")])
assert CQ_UNIT.itemsize == CQ_UNIT_SIZE
FILLER_SIZE = 0x7FFFFFFF
log = logging.getLogger(__name__)


class ConsumeQueue:
    def __init__(
        self,
        directory: Path,
        segment_size: int,
        *,
        read_only: bool = False,
        open_files: OpenFiles | None = None,
        bounded_reads: bool | None = None,
        settle: Callable[[], int | None] | None = None,
    ) -> None:
        self.directory = directory
        #: the queue's name in the append state's ``queues`` (``"<topic>/<queueId>"``: its folders)
        self.state_key = f"{directory.parent.name}/{directory.name}"
        self.segments = MappedFileQueue(  # one size for every queue
            directory,
            segment_size,
            infer=False,
            read_only=read_only,
            open_files=open_files,
            bounded_reads=bounded_reads,
            settle=settle,
        )
        #: (first segment, commitlog min offset, answer) of the last min_offset that searched
        #: inside its first segment: units below the end never change, so it stays true
        self._min_found: tuple[int, int, int] | None = None
        #: (segment start, its file's inode, units it held) as :meth:`_written` last counted them
        self._written_hint: tuple[int, int | None, int] | None = None

    @property
    def units_per_segment(self) -> int:
        return self.segments.size // CQ_UNIT_SIZE

    def _units(self, seg: MappedFile) -> np.ndarray:
        return seg.array().view(CQ_UNIT)

    def _readable_units(self, seg: MappedFile) -> np.ndarray:
        """The units of ``seg`` that may be read through the mapping: all, except on tmpfs,
        where only those before its first hole (past them every unit is zero)."""
        units = self._units(seg)
        return units[: seg.readable_end() // CQ_UNIT_SIZE] if seg.bounded_reads else units

    # ---------------------------------------------------------------- bounds
    def max_offset(self) -> int:
        """Logical offset after the last unit written (0 for an empty queue), from a listing
        of the folder now."""
        return self._end(self.segments.segment_starts())

    def bounds(self, commitlog_min: int = 0, published: Callable[[], int | None] | None = None) -> tuple[int, int]:
        """(:meth:`min_offset`, :meth:`max_offset`). With ``published`` (the queue's next queue
        offset in the published append state, ``None`` when there is none; called after the end
        is taken, and again after any later look, so a caller may take the published tail
        from the state its last call read): from the kept listing, listed again only when
        it cannot be right (the module docstring). Without it: from one listing of the
        folder now."""
        segs = self.segments
        if published is None:
            starts = segs.segment_starts()
            if starts:
                segs.drop_below(starts[0], changed=False)
            end = self._end(starts)
            return self._min_offset(starts, commitlog_min, end), end
        seen = segs.relists
        starts = segs.listed_starts()
        if starts and segs.relists == seen and not segs.still_listed(starts[0]):
            starts = segs.relist()  # its first segment went (retention, a topic's delete) or was replaced
        end = self._end(starts)
        expected = published()
        if (expected is None or end < expected) and segs.relists == seen:  # (a listing made now stands)
            last = starts[-1] if starts else -1
            if (
                expected is None
                or not starts
                or (expected - 1) * CQ_UNIT_SIZE >= last + segs.size
                or (last != starts[0] and not segs.still_listed(last))
            ):
                starts = segs.relist()
                end = self._end(starts)
                published()
        return self._min_offset(starts, commitlog_min, end), end

    def _end(self, starts: list[int]) -> int:
        """The offset after the last unit of the last segment of ``starts`` holding any (units
        are written densely, so a queue's first segment may be empty only when it is its
        only one); segments deleted since the listing are skipped."""
        for start in reversed(starts):
            seg = self.segments.get(start)
            if seg is None:  # deleted by retention since the listing
                continue
            written = self._written(seg)
            if written or start == starts[0]:
                return (start // CQ_UNIT_SIZE) + written
        return 0

    def _written(self, seg: MappedFile) -> int:
        """How many units ``seg`` holds (written densely from its start: the first unit of size
        0 ends them). The segment whose count was found last costs one or two 4-byte reads
        while the count stands (it only grows, unless a dispatch undid its own write: then
        the reads disagree and it is searched again), a full one a read of its last unit,
        any other a binary search (O(log n) such reads)."""
        if seg.bounded_reads:  # tmpfs: no read past the written data (the module docstring)
            return int(_first_zero(self._readable_units(seg)["size"]))
        data = seg.view()
        per = self.units_per_segment
        hint = self._written_hint
        lo = 0
        if hint is not None and hint[0] == seg.start and hint[1] == seg.ino:
            n = hint[2]
            if n == 0 or _size_at(data, n - 1):
                if not _size_at(data, n):
                    return n
                lo = n + 1
        if _size_at(data, per - 1):
            return per  # (no hint: a queue's full segments come before the one it is kept for)
        hi = per - 1
        while lo < hi:  # written units have size > 0, the rest are zero
            mid = (lo + hi) // 2
            if _size_at(data, mid):
                lo = mid + 1
            else:
                hi = mid
        self._written_hint = (seg.start, seg.ino, lo)
        return lo

    def min_offset(self, commitlog_min: int = 0) -> int:
        """First logical offset whose unit is real and whose record is still in the commitlog
        (RocketMQ's ``correctMinOffset``, answered when asked), from a listing of the folder
        now. This process lets go of the segments below the first one (deleted by retention)."""
        starts = self.segments.segment_starts()
        if starts:
            self.segments.drop_below(starts[0], changed=False)
        return self._min_offset(starts, commitlog_min)

    def _min_offset(self, starts: list[int], commitlog_min: int, end: int | None = None) -> int:
        for start in starts:
            seg = self.segments.get(start)
            if seg is None:  # deleted by retention since the listing
                continue
            written = self._written(seg)
            if written == 0:
                continue
            first_offset, first_size = _HEAD.unpack_from(seg.view(), 0)
            if first_size != FILLER_SIZE and first_offset >= commitlog_min:
                return start // CQ_UNIT_SIZE  # the usual case, without a pass over the segment
            units = self._readable_units(seg)
            found = self._min_found
            if found is not None and found[:2] == (start, commitlog_min):
                # after retention: the pass below once per new commitlog start, then a check
                # that its answer still stands (a live unit with none before it)
                k = found[2] - start // CQ_UNIT_SIZE
                head = units[max(0, k - 1) : k + 1]
                alive = (head["size"] != FILLER_SIZE) & (head["offset"] >= commitlog_min) & (head["size"] != 0)
                if k < written and alive[-1] and (k == 0 or not alive[0]):
                    return found[2]
            live = (units["size"][:written] != FILLER_SIZE) & (units["offset"][:written] >= commitlog_min)
            hit = np.flatnonzero(live)
            if len(hit):
                self._min_found = (start, commitlog_min, start // CQ_UNIT_SIZE + int(hit[0]))
                return self._min_found[2]
            if written < self.units_per_segment:
                return start // CQ_UNIT_SIZE + written
        return self._end(starts) if end is None else end

    def first_at_or_past(self, commit_log_offset: int) -> int:
        """The first logical offset whose unit points at or past ``commit_log_offset``.

        Units of a queue point at increasing commitlog offsets (fillers point at 0), so this
        is a binary search: O(log n) one-unit reads. Returns :meth:`max_offset` if none does.
        """
        lo, hi = 0, self.max_offset()
        first_seg = self.segments.segment_starts()
        if first_seg:
            lo = first_seg[0] // CQ_UNIT_SIZE
        while lo < hi:
            mid = (lo + hi) // 2
            u = self.read(mid, 1)
            if len(u) and int(u["offset"][0]) < commit_log_offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # ------------------------------------------------------------------ read
    def read(self, start: int, count: int) -> np.ndarray:
        """Copy units ``[start, start+count)`` (the caller keeps it below the end); fewer, up
        to the first segment that is not there (deleted by retention), when one is missing."""
        out = np.empty(count, CQ_UNIT)
        per = self.units_per_segment
        done = 0
        while done < count:
            logical = start + done
            seg = self.segments.get((logical // per) * per * CQ_UNIT_SIZE)
            if seg is None:
                return out[:done]
            i = logical % per
            take = min(count - done, per - i)
            with pinned(seg) as held:  # a read in progress: retention leaves the file alone
                if not held:  # deleted by retention
                    return out[:done]
                out[done : done + take] = self._units(seg)[i : i + take]
            done += take
        return out

    def read_stored(self, start: int, count: int) -> bytes | None:
        """Units ``[start, start+count)`` as stored (``count * 20`` bytes), all inside the file
        holding ``start`` and below the end (the caller's to keep); ``None`` when that file is
        not there (deleted by retention). A few units without a numpy call (a small window)."""
        per = self.units_per_segment
        seg = self.segments.get((start // per) * per * CQ_UNIT_SIZE)
        if seg is None or not pin(seg):  # a read in progress: retention leaves the file alone
            return None
        try:
            i = (start % per) * CQ_UNIT_SIZE
            return bytes(seg.view()[i : i + count * CQ_UNIT_SIZE])
        finally:
            unpin(seg)

    # ----------------------------------------------------------------- write
    def write(self, first: int, units: np.ndarray, current_max: int) -> int:
        """Write ``units`` at logical offsets ``first, first+1, ...``; returns units written.

        Units below ``current_max`` are already there (re-dispatch is idempotent) and are
        skipped. A gap between ``current_max`` and ``first`` is filled with filler units so the
        queue stays dense (it happens when a queue's first message is past offset 0).
        """
        skip = max(0, current_max - first)
        if skip >= len(units):
            return 0
        units = units[skip:]
        first += skip
        if first > current_max:
            # fillers only from the start of the file holding ``first`` (RocketMQ's
            # fillPreBlank): a queue offset far past the queue's end (a damaged field) must not
            # cost a filler per missing unit; files wholly inside the gap stay absent
            per = self.units_per_segment
            current_max = max(current_max, first - first % per)
            gap = np.zeros(first - current_max, CQ_UNIT)
            gap["size"] = FILLER_SIZE
            self._write_at(current_max, gap)
        self._write_at(first, units)
        return len(units)

    def write_packed(self, first: int, units: bytes) -> None:
        """Write packed units (``CQ_UNIT``'s bytes) at ``first``, the queue's end or below it
        (a dispatch from a put's own fields: no filler, nothing skipped; a unit already there
        is written again with its same bytes). Raises what :meth:`_write_at` raises."""
        per = self.units_per_segment
        n = len(units) // CQ_UNIT_SIZE
        if first % per + n <= per:  # (the usual case: one segment, one pwrite)
            seg = self.segments.get(first // per * per * CQ_UNIT_SIZE, create=True)
            assert seg is not None
            lo = first % per * CQ_UNIT_SIZE
            try:
                seg.write(lo, units)
            except BaseException:
                try:
                    seg.clear(lo, lo + len(units))
                except OSError:
                    log.warning("could not undo a failed write of units %d.. in %s", first, seg.path, exc_info=True)
                raise
            return
        self._write_at(first, np.frombuffer(units, CQ_UNIT))

    def _write_at(self, first: int, units: np.ndarray) -> None:
        per = self.units_per_segment
        done = 0
        while done < len(units):
            logical = first + done
            seg = self.segments.get((logical // per) * per * CQ_UNIT_SIZE, create=True)
            assert seg is not None
            i = logical % per
            take = min(len(units) - done, per - i)
            # pwrite, not a store into the mapping (which shares the same page cache): a store
            # takes a page fault per page first touched; a million units (20 MB) took ~32 ms
            # as stores against ~15 ms as a pwrite, on new pages. And on a full disk a store
            # into a sparse page is a SIGBUS, a pwrite an error.
            lo, hi = i * CQ_UNIT_SIZE, (i + take) * CQ_UNIT_SIZE
            try:
                seg.write(lo, np.ascontiguousarray(units[done : done + take]).view(np.uint8).data)
            except BaseException:
                # a short write (ENOSPC part-way) may end inside a unit, which would then count
                # as written with a wrong field: the units of this write go, whole (re-dispatch
                # writes them again); clearing needs no space
                try:
                    seg.clear(lo, hi)
                except OSError:
                    log.warning("could not undo a failed write of units %d.. in %s", logical, seg.path, exc_info=True)
                raise
            done += take

    def truncate(self, logical: int) -> None:
        """Drop units at and past ``logical`` (clear them; delete whole segments past it)."""
        per = self.units_per_segment
        for start in self.segments.segment_starts():
            first = start // CQ_UNIT_SIZE
            if first >= logical and first > 0:
                self.segments.forget(start)
                safe_open.unlink(self.directory / f"{start:020d}")
            elif first + per > logical:
                seg = self.segments.get(start)
                assert seg is not None
                seg.clear((logical - first) * CQ_UNIT_SIZE, seg.size)

    def remove_below(self, logical: int) -> None:
        """Remove every unit below ``logical`` (a topic deleted, :mod:`rmqlog.deleted_topics`):
        segments wholly below the one holding unit ``logical - 1`` are deleted, unless a reader
        holds one (retention's rule, :func:`rmqlog.log.pins.hold_exclusive`), and the rest of
        those units become fillers, so the queue keeps its end and readers skip them.
        The caller holds ``dispatch.lock``."""
        if logical <= 0:
            return
        per = self.units_per_segment
        last = (logical - 1) // per * per  # the first unit of the segment that keeps the end
        fill = [(last, logical)]
        for start in self.segments.segment_starts():
            first = start // CQ_UNIT_SIZE
            if first >= last:
                break
            path = self.directory / f"{start:020d}"
            try:
                fd = hold_exclusive(path)
            except FileNotFoundError:
                continue
            if fd is None:  # a reader holds it: filled instead, and retention deletes it later
                fill.append((first, first + per))
                continue
            try:
                self.segments.forget(start)
                safe_open.unlink(path)
            finally:
                os.close(fd)
        for lo, hi in fill:
            gap = np.zeros(hi - lo, CQ_UNIT)
            gap["size"] = FILLER_SIZE
            self._write_at(lo, gap)
        self._min_found = None

    def close(self) -> None:
        self.segments.close()


#: a unit's commitLogOffset and size, big-endian (its first 12 bytes)
_HEAD = struct.Struct(">qi")
_SIZE = struct.Struct(">i")


def _size_at(data: memoryview, unit: int) -> int:
    """The size field of unit ``unit`` of a segment's bytes (0: not written)."""
    return int(_SIZE.unpack_from(data, unit * CQ_UNIT_SIZE + 8)[0])


def _first_zero(sizes: np.ndarray) -> int:
    """Index of the first unit with size 0 (units are written densely from the start)."""
    lo, hi = 0, len(sizes)
    while lo < hi:  # binary search: written units have size > 0, the rest are zero
        mid = (lo + hi) // 2
        if sizes[mid] != 0:
            lo = mid + 1
        else:
            hi = mid
    return lo
