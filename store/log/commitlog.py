"""The commitlog: every message of every topic, appended in one sequence of segments.

Segments are ``<root>/commitlog/<20-digit start offset>`` of ``mapped_file_size_commit_log``
bytes; records are laid out as :mod:`rmqlog.log.record` says; each full segment ends with a blank
record. Appends happen under the store's append lock (see :mod:`rmqlog.log.append_state`);
reads are lock-free and never go past the published tail the caller passes in.

A record's STORETIMESTAMP is the store's clock (:mod:`rmqlog.clock`) read under the append
lock, raised to the append state's ``storeTimestamp`` when the clock is behind it: store
times never go back within a store, whatever the clock does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import CorruptStoreError, StoreError
from .append_state import AppendState
from .decode import (
    BadRecordError,
    RecordCheck,
    RecordColumns,
    concat_tables,
    message_table,
    read_columns,
)
from .encode.batch import EncodedBatch
from .gather import gather_slices
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue
from .open_files import OpenFiles
from .pins import pinned
from .queue_offsets import assign_queue_offsets
from .record import BLANK_MAGIC, END_FILE_MIN_BLANK_LENGTH, ScanKind, ScanResult, decode_at
from .scan import SegmentScan, StopReason, scan_segment
from .write_pipeline import WritePipeline, chunk_buffer

_T = TypeVar("_T")


@dataclass
class AppendResult:
    physical_offsets: np.ndarray
    queue_offsets: np.ndarray
    store_timestamp: int
    start: int  # tail before the append
    end: int  # tail after it
    overlapped: object = None  # what ``append``'s ``while_writing`` returned


def plan_positions(
    tail: int,
    lengths: np.ndarray,
    segment_size: int,
    rel_starts: np.ndarray | None = None,
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Commitlog offset of each record and the blank records that end full segments.

    A record goes into the current segment only if ``length + 8 <= bytes left``
    (RocketMQ's END_FILE_MIN_BLANK_LENGTH); otherwise a blank fills the segment and the
    record starts the next one. One numpy pass per segment roll, none per record.
    ``rel_starts``: where each record starts relative to the first, when already known (a
    batch packed before the lock, whose records lie back to back in its buffer).
    """
    n = len(lengths)
    if n == 0:
        return np.empty(0, np.int64), []
    if rel_starts is not None:
        starts = rel_starts + tail  # a new array: the rolls below shift it in place
    else:
        starts = np.empty(n, np.int64)
        starts[0] = 0
        lengths[:-1].cumsum(out=starts[1:])
        starts += tail
    blanks: list[tuple[int, int]] = []
    # the usual case, checked first: the whole batch fits the current segment (each
    # record's need below is the next one's start + 8, so the last record's decides)
    if int(starts[-1]) + int(lengths[-1]) + END_FILE_MIN_BLANK_LENGTH <= (tail // segment_size + 1) * segment_size:
        return starts, blanks
    i = 0
    while i < n:
        seg_end = (int(starts[i]) // segment_size + 1) * segment_size
        need = starts[i:] + lengths[i:] + END_FILE_MIN_BLANK_LENGTH
        k = i + int(np.searchsorted(need, seg_end, side="right"))
        if k >= n:
            break
        blank = seg_end - int(starts[k])
        blanks.append((int(starts[k]), blank))
        starts[k:] += blank
        i = k
    return starts, blanks


def _first_undecodable(seg: MappedFile, positions: np.ndarray, check: RecordCheck) -> tuple[int, str]:
    """(row, reason) of the first record of ``positions`` the scalar decoder rejects, else (0, "")."""
    limit = check.limit if check.limit is not None else seg.size
    view = memoryview(seg.array())[: max(0, limit)]  # type: ignore[arg-type]
    for i, pos in enumerate(positions.tolist()):
        found = decode_at(view, pos, check_crc=check.crc) if 0 <= pos < len(view) else None
        if found is None or found.kind is not ScanKind.RECORD:
            return i, (found.reason if found is not None and found.reason else "no record there")
    return 0, ""


class CommitLog:
    def __init__(
        self,
        directory: Path,
        segment_size: int,
        *,
        read_only: bool = False,
        open_files: OpenFiles | None = None,
        clock: Clock = SYSTEM_CLOCK,
        settle: Callable[[], int | None] | None = None,
    ) -> None:
        #: the store's clock: store times are its wall time, never below the last one published
        self.clock = clock
        # (``settle``: a provisional size's, :mod:`rmqlog.segment_sizes`)
        self.segments = MappedFileQueue(
            directory, segment_size, read_only=read_only, open_files=open_files, settle=settle
        )
        #: bytes of data (not holes) :meth:`scrub` cleared in this process (what it cost)
        self.scrubbed_bytes = 0

    @property
    def segment_size(self) -> int:
        return self.segments.size

    def min_offset(self) -> int:
        """Offset of the first byte still stored (the start of the oldest segment).

        Without a listing while the oldest segment of the kept listing is still the file
        listed (one ``fstatat``: :meth:`MappedFileQueue.still_listed`): segments go only from
        the front (retention, in any process, renames or unlinks the oldest ones; a cut keeps
        the oldest) and none is ever made below the oldest, so that one name decides the
        answer. Listed again when it is gone (an empty log: each call). At each listing this
        process lets go of the segments below it that it still had mapped (see
        :meth:`MappedFileQueue.relist`)."""
        segs = self.segments
        seen = segs.relists
        starts = segs.listed_starts()
        if starts and (segs.relists != seen or segs.still_listed(starts[0])):
            return starts[0]
        if segs.relists == seen:  # (a kept listing: list now)
            starts = segs.relist()
        return starts[0] if starts else 0

    # ----------------------------------------------------------------- append
    def scrub(self, tail: int, *, force: bool = False) -> int:
        """Clear the bytes past ``tail`` that a killed or failed append left (they are not
        records); returns how many bytes of data (not holes) it cleared. Caller holds the
        append lock and ``tail`` is the published tail.

        Without this, a later scan that had lost the published state could mistake them for
        records. An append writes in log order from the tail (:class:`WritePipeline`), so it
        leaves nothing past the tail unless the tail's first bytes were written (a record's
        TOTALSIZE, or the blank of a segment the batch rolled out of): the check is one 8-byte
        ``pread`` at the tail when there is nothing to scrub. ``force`` skips it (an append
        that failed knows it wrote).

        What it clears: the data regions past the tail in its segment and the whole of every
        later segment (a batch that rolled over wrote into new segments), found with
        ``SEEK_DATA``/``SEEK_HOLE`` and cleared by :meth:`MappedFile.clear` (holes punched: no
        block needed, so it works on a full disk). The cost follows what was left, not the
        segment size. Later segments are kept (emptied), never deleted: another process may
        have one open. The tail's own first bytes are cleared last, so a scrub cut short is
        done again by the next append.
        """
        seg = self.segments.for_offset(tail)
        if seg is None:
            return 0
        rel = tail - seg.start
        if not force and not any(seg.read(rel, 8)):
            return 0
        done = 0
        for start in reversed(self.segments.segment_starts()):
            if start <= seg.start:
                break
            later = self.segments.get(start)
            if later is not None:
                done += later.clear(0, later.size)
        done += seg.clear(rel + 8, seg.size)
        done += seg.clear(rel, rel + 8)
        self.scrubbed_bytes += done
        return done

    def append_all(
        self,
        batches: list[EncodedBatch],
        state: AppendState,
        while_writing: Callable[[np.ndarray, np.ndarray, int], object] | None = None,
    ) -> list[AppendResult]:
        """Write the batches in turn at ``state.tail``; every write has finished on return.

        The caller holds the append lock and publishes ``state``. One pipeline for all: the
        next batch's first chunk is encoded while the previous batch's last one is written (a
        sink task appends many small tables at once, each of them one chunk, which would
        otherwise be written inline one after another). ``while_writing(physical_offsets,
        queue_offsets, store_timestamp)`` runs per batch while its last chunks are being
        written (the caller's per-row results, which would otherwise wait for the writes);
        its return value is the result's ``overlapped``. It is not run for a batch packed before the lock
        (:meth:`EncodedBatch.prepack`): its one write has nothing to overlap with, so
        ``overlapped`` stays ``None`` and the caller makes its results after the lock.
        """
        self.scrub(state.tail)
        with WritePipeline(sum(b.chunks for b in batches)) as pipe:
            return [self._append(b, state, while_writing, pipe) for b in batches]

    def _append(
        self,
        batch: EncodedBatch,
        state: AppendState,
        while_writing: Callable[[np.ndarray, np.ndarray, int], object] | None,
        pipe: WritePipeline,
    ) -> AppendResult:
        """Submit ``batch``'s writes to ``pipe`` (they may still run on return) and advance ``state``."""
        tail = state.tail
        queue_offsets = assign_queue_offsets(batch, state.queues)
        packed = batch.packed
        starts, blanks = plan_positions(tail, batch.lengths, self.segment_size, batch.packed_starts)
        store_ts = max(self.clock.wall_ms(), state.store_timestamp)
        if packed is not None:
            batch.patch(queue_offsets, starts, store_ts)
        else:
            batch.fill(queue_offsets, starts, store_ts)
        large = batch.large_bodies
        cut_rows = [0] + [int(np.searchsorted(starts, pos)) for pos, _ in blanks] + [batch.n]
        overlapped = None
        # in log order (see WritePipeline): each segment's rows, then the blank that ends it
        for run, (a, b) in enumerate(zip(cut_rows[:-1], cut_rows[1:], strict=True)):
            if b > a:  # rows a..b-1 are contiguous in one segment
                pos = int(starts[a])
                seg = self.segments.for_offset(pos, create=True)
                assert seg is not None
                if pos != tail:  # rolled over into a new segment: one check of its start
                    self.scrub(pos)
                if packed is not None:  # packed before the lock: rows a..b-1 are one slice of it
                    assert batch.packed_starts is not None
                    lo = int(batch.packed_starts[a])
                    size = int(starts[b - 1] + batch.lengths[b - 1]) - pos
                    pipe.write(seg, pos - seg.start, packed[lo : lo + size])
                    spans = []
                else:
                    spans = batch.spans(a, b)
                for c, d in spans:  # chunk by chunk, as body CRCs become ready
                    rel = int(starts[c]) - seg.start
                    if batch.packable:
                        buf = chunk_buffer(int(starts[d - 1] + batch.lengths[d - 1] - starts[c]))
                        batch.pack(c, d, buf)
                        pipe.write(seg, rel, buf)
                    elif large:
                        iov, keep = batch.iovecs(c, d)
                        pipe.submit(seg.writev, rel, iov, keep=keep)
                    else:
                        pipe.submit(seg.write, rel, memoryview(batch.joined(c, d)))
                if b == batch.n and while_writing is not None and packed is None:
                    overlapped = while_writing(starts, queue_offsets, store_ts)
            if run < len(blanks) and blanks[run][1] >= 8:  # under 8 bytes: no room for a blank (scan.py)
                pos, size = blanks[run]
                seg = self.segments.for_offset(pos, create=True)
                assert seg is not None
                pipe.write_small(seg, pos - seg.start, np.array([size, BLANK_MAGIC], ">i4").tobytes())
        end = int(starts[-1] + batch.lengths[-1]) if batch.n else tail
        result = AppendResult(starts, queue_offsets, store_ts, tail, end, overlapped)
        state.tail = end
        state.store_timestamp = store_ts
        return result

    # ------------------------------------------------------------------- read
    def record_at(self, offset: int, tail: int) -> ScanResult | None:
        """The record starting at ``offset`` (scalar decode), ``None`` if out of range.

        Only bytes below ``tail`` are read: a record that would cross it is ``CORRUPT``.
        """
        if not 0 <= offset < tail:
            return None
        seg = self.segments.for_offset(offset)
        if seg is None:
            return None
        with pinned(seg) as held:  # a read in progress: retention leaves the file alone
            if not held:  # deleted by retention
                return None
            view = memoryview(seg.array())[: min(seg.size, tail - seg.start)]  # type: ignore[arg-type]
            return decode_at(view, offset - seg.start, base=seg.start)

    def read_messages(
        self,
        offsets: np.ndarray,
        *,
        topic: str | None = None,
        check: RecordCheck | None = None,
        tail: int | None = None,
    ) -> pa.Table:
        """Decode the records at these commitlog offsets into the message table, in their order.

        ``topic``: the topic the records are expected to have (a consume queue's), a fast path.
        ``check`` (with ``tail``, the published tail): check every record as
        :class:`rmqlog.log.decode.RecordCheck` says, reading nothing at or past ``tail``. Raises
        :class:`rmqlog.log.decode.BadRecordError` naming the segment file, the commitlog offset
        and the row of the first bad record found; a gather or decode failing on a damaged
        record any other way is reported the same way (the scalar decoder locates it).
        Without ``check`` the offsets must be those of whole records (found by a scan or
        dispatched), or :class:`CorruptStoreError` is raised for a missing segment.
        """
        offsets = np.asarray(offsets, np.int64)
        if len(offsets) == 0:
            return concat_tables([])
        return concat_tables(
            self._read_parts(offsets, topic, check, tail, lambda cols, _source, _at: message_table(cols))
        )

    def read_record_columns(
        self,
        offsets: np.ndarray,
        *,
        topic: str | None = None,
        check: RecordCheck | None = None,
        tail: int | None = None,
    ) -> list[RecordColumns]:
        """The raw columns of the records at these offsets, one :class:`RecordColumns` per
        segment they lie in, in their order; checked and failing as :meth:`read_messages`
        (which decodes them further into the message table)."""
        return self._read_parts(np.asarray(offsets, np.int64), topic, check, tail, lambda cols, _source, _at: cols)

    def read_stored_records(
        self,
        offsets: np.ndarray,
        *,
        topic: str | None = None,
        check: RecordCheck | None = None,
        tail: int | None = None,
    ) -> list[tuple[RecordColumns, pa.LargeBinaryArray]]:
        """The records at these offsets as stored (each record's TOTALSIZE bytes, copied with
        one gather per segment while it is pinned), beside their raw columns, one pair per
        segment they lie in; checked and failing as :meth:`read_messages` (the checks run
        before the gather, so only records that passed them are copied)."""

        def stored(cols: RecordColumns, source: pa.Buffer, at: np.ndarray) -> tuple[RecordColumns, pa.LargeBinaryArray]:
            return cols, gather_slices(source, at, cols.header["totalSize"].astype(np.int64))

        return self._read_parts(np.asarray(offsets, np.int64), topic, check, tail, stored)

    def _read_parts(
        self,
        offsets: np.ndarray,
        topic: str | None,
        check: RecordCheck | None,
        tail: int | None,
        decode: Callable[[RecordColumns, pa.Buffer, np.ndarray], _T],
    ) -> list[_T]:
        """``decode`` of the columns of each segment's part of ``offsets`` (see :meth:`read_messages`)."""
        seg_of = offsets // self.segment_size
        cuts = np.flatnonzero(np.diff(seg_of)) + 1
        out: list[_T] = []
        first = 0
        for part in np.split(offsets, cuts) if len(offsets) else []:
            rows = slice(first, first + len(part))
            first += len(part)
            seg = self.segments.for_offset(int(part[0]))
            if seg is None:
                if check is None:
                    raise CorruptStoreError("no commitlog segment holds the record", offset=int(part[0]))
                raise BadRecordError(
                    "no commitlog segment holds its record",
                    row=rows.start,
                    offset=int(part[0]),
                    against_unit=check.size is not None,
                    path=str(self.segments.directory),
                )
            with pinned(seg) as held:  # a read in progress: retention leaves the file alone
                if not held:  # deleted by retention before this read reached it
                    if check is None:
                        raise CorruptStoreError(
                            "the commitlog segment holding the record was deleted", offset=int(part[0])
                        )
                    raise BadRecordError(
                        "its commitlog segment was deleted",
                        row=rows.start,
                        offset=int(part[0]),
                        against_unit=check.size is not None,
                        path=str(seg.path),
                    )
                if check is None:
                    at = part - seg.start
                    source = seg.buffer()
                    out.append(decode(read_columns(source, seg.start, at, topic=topic), source, at))
                else:
                    limit = seg.size if tail is None else min(seg.size, tail - seg.start)
                    out.append(
                        self._read_checked(seg, part - seg.start, topic, check.rows(rows, limit), rows.start, decode)
                    )
        return out

    def _read_checked(
        self,
        seg: MappedFile,
        positions: np.ndarray,
        topic: str | None,
        check: RecordCheck,
        first_row: int,
        decode: Callable[[RecordColumns, pa.Buffer, np.ndarray], _T],
    ) -> _T:
        """``decode`` of a checked read over one segment; errors name the segment and the row of the read."""
        try:
            source = seg.buffer()
            return decode(read_columns(source, seg.start, positions, topic=topic, check=check), source, positions)
        except BadRecordError as e:
            raise BadRecordError(
                e.reason,
                row=first_row + e.row,
                offset=int(e.offset or 0),
                against_unit=e.against_unit,
                path=str(seg.path),
            ) from None
        except StoreError:
            raise
        except (ValueError, IndexError, OverflowError, pa.ArrowException) as exc:
            # every check runs before the gather it guards, so this is a damage they missed:
            # find the first record the scalar decoder rejects (error path only)
            i, reason = _first_undecodable(seg, positions, check)
            reason = reason or f"undecodable record ({type(exc).__name__}: {exc})"
            raise BadRecordError(
                reason, row=first_row + i, offset=seg.start + int(positions[i]), against_unit=False, path=str(seg.path)
            ) from exc

    def scan(self, start: int, limit: int, *, check_crc: bool = False) -> Iterator[tuple[MappedFile, SegmentScan]]:
        """Walk segments from ``start`` up to ``limit`` (exclusive), following blanks."""
        pos = start
        while pos < limit:
            seg = self.segments.for_offset(pos)
            if seg is None:
                return
            stop = min(limit, seg.end) - seg.start
            if seg.bounded_reads:  # tmpfs: not into the holes past the data (see rmqlog.log.mapped_file)
                stop = min(stop, seg.readable_end(pos - seg.start))
            result = scan_segment(seg.array(), pos - seg.start, stop, check_crc=check_crc, base=seg.start)
            yield seg, result
            if result.reason is not StopReason.BLANK:
                return
            pos = seg.end

    def close(self) -> None:
        self.segments.close()
