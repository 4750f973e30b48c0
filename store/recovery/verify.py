"""``verify``: walk every record and every consume-queue unit of a store and report what is wrong.

Read-only (it never repairs; recovery with ``repair=True`` does). Checked:

- every commitlog segment from the oldest to the published tail: each record's lengths add up
  and its body CRC matches (the only checksummed part of a record), each full segment ends
  with a blank record, nothing but zeros follows the last record of the last segment up to
  the published tail;
- every record's header fields hold values a store writes (PHYSICALOFFSET its position,
  timestamps in range, queue offsets dense per queue along the log);
- every consume queue: units are written densely, point below the published tail, at
  increasing commitlog offsets, and each points at a record of its own topic and queue with
  the right queue offset and size;
- no unit is missing: every record below the dispatch position has its queue's unit (a
  queue whose files were deleted or lost is reported, with where its units end).

Problems are returned, each naming the file and the offset (a commitlog offset, or a queue's
logical offset), never raised: the caller decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import safe_open
from ..log.decode import read_columns
from ..log.lmq import LMQ_PREFIX, in_lmq
from ..log.record import is_consumable
from ..log.scan import QueueDensity, SegmentScan, StopReason
from ..paths import topic_problem
from ..queue.consume_queue import CQ_UNIT_SIZE, FILLER_SIZE, ConsumeQueue

if TYPE_CHECKING:
    from ..log.mapped_file import MappedFile
    from ..parts import StoreParts


@dataclass(frozen=True)
class Problem:
    path: str
    offset: int
    detail: str

    def __str__(self) -> str:
        return f"{self.path} at offset {self.offset}: {self.detail}"


@dataclass
class VerifyReport:
    records: int = 0
    units: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(parts: StoreParts, progress: Callable[[int, int], object] | None = None) -> VerifyReport:
    """Check the whole store ``parts`` (see the module docstring); returns every problem found.
    ``progress(done, total)``: called with commitlog bytes walked, after each segment (a
    progress bar; the consume queues are checked after the walk)."""
    report = VerifyReport()
    cl = parts.commitlog
    tail = parts.published_tail()
    dispatched = min(tail, parts.dispatcher.position())
    starts = [s for s in cl.segments.segment_starts() if s < max(tail, cl.min_offset() + 1)]
    density = QueueDensity(from_log_start=cl.min_offset() == 0)
    expected: dict[tuple[str, int], int] = {}  # per queue: units the dispatched records need
    least: dict[tuple[str, int], int] = {}  # per queue: the lowest queue offset of its records in the log
    for prev, start in zip(starts, starts[1:], strict=False):
        if start != prev + cl.segment_size:  # a segment between them is missing
            gap = prev + cl.segment_size
            report.problems.append(
                Problem(str(cl.segments.directory / f"{gap:020d}"), gap, "commitlog segment missing")
            )
    walk_total = max(0, tail - (starts[0] if starts else tail))
    for start in starts:
        seg = cl.segments.get(start)
        if seg is None:  # deleted while we looked
            continue
        limit = min(seg.size, tail - start)
        if progress is not None:
            progress(start - starts[0], walk_total)
        scan = next(iter(cl.scan(start, start + limit, check_crc=True)), None)
        if scan is None:
            continue
        _, result = scan
        at = start + result.end
        if len(result.positions):
            cut, why = _count_queues(seg, result.positions, dispatched, density, expected, least)
            if cut < len(result.positions):
                result = SegmentScan(
                    result.positions[:cut], result.sizes[:cut], int(result.positions[cut]), StopReason.CORRUPT, why
                )
                at = start + result.end
        report.records += len(result.positions)
        if result.reason is StopReason.CORRUPT:
            report.problems.append(Problem(str(seg.path), at, f"damaged record: {result.detail}"))
        elif result.reason is StopReason.END and start + seg.size < tail:
            report.problems.append(Problem(str(seg.path), at, "zero bytes before the segment's end (no blank record)"))
    if progress is not None:
        progress(walk_total, walk_total)
    for cq in parts.queues.all():
        _verify_queue(parts, cq, tail, report)
    deleted = parts.deleted_topics.table()
    for (topic, qid), n in sorted(expected.items()):
        cq = parts.consume_queue(topic, qid)
        # a deleted topic's units below where its delete left them are gone on purpose
        floor = deleted[topic].queue_offsets.get(qid, 0) if topic in deleted else 0
        have = cq.max_offset() if safe_open.is_folder(cq.directory) else 0
        if have < n:
            report.problems.append(
                Problem(
                    str(cq.directory),
                    have,
                    f"units missing: dispatched records of this queue reach queue offset {n - 1}, its units end at "
                    f"{have}",
                )
            )
        elif (first := max(floor, least.get((topic, qid), n))) < n:
            # a filler stands for a record the log no longer has: one in place of a record the
            # log holds hides it from every reader (and counts as a unit to recovery)
            fill = np.flatnonzero(cq.read(first, n - first)["size"] == FILLER_SIZE)
            if len(fill):
                report.problems.append(
                    Problem(
                        str(cq.directory),
                        first + int(fill[0]),
                        f"filler units in place of records the commitlog holds ({len(fill)} from queue offset "
                        f"{first + int(fill[0])}): those messages cannot be read",
                    )
                )
    return report


def _count_queues(
    seg: MappedFile,
    positions: np.ndarray,
    dispatched: int,
    density: QueueDensity,
    expected: dict[tuple[str, int], int],
    least: dict[tuple[str, int], int],
) -> tuple[int, str]:
    """Check queue-offset density of a run of records and note, per queue, how many units the
    records below the dispatch position need and the lowest of their queue offsets. Returns
    (first record breaking density, why)."""
    cols = read_columns(seg.buffer(), seg.start, positions, with_body=False)
    h = cols.header
    enc = cols.topic.dictionary_encode()
    topics = enc.dictionary.to_pylist()
    tidx = np.asarray(enc.indices, np.int64)
    consumable = np.asarray(is_consumable(h["sysFlag"]), bool)
    cut, why = density.first_break(topics, tidx, h["queueId"], h["queueOffset"], consumable)
    usable = np.array([topic_problem(t) is None for t in topics], bool)  # one step per topic
    mine = consumable[:cut] & (cols.offsets[:cut] < dispatched) & usable[tidx[:cut]]
    if mine.any():
        key = (tidx[:cut][mine] << 32) | h["queueId"][:cut][mine].astype(np.int64)
        uniq, inverse = np.unique(key, return_inverse=True)
        qoff = h["queueOffset"][:cut][mine].astype(np.int64)
        best = np.full(len(uniq), -1, np.int64)
        np.maximum.at(best, inverse, qoff)
        low = np.full(len(uniq), np.iinfo(np.int64).max, np.int64)
        np.minimum.at(low, inverse, qoff)
        for k, o, lo in zip(uniq.tolist(), best.tolist(), low.tolist(), strict=True):  # one step per queue
            name = (topics[k >> 32], k & 0xFFFFFFFF)
            expected[name] = max(expected.get(name, 0), o + 1)
            least[name] = min(least.get(name, lo), lo)
    return cut, why


def _verify_queue(parts: StoreParts, cq: ConsumeQueue, tail: int, report: VerifyReport) -> None:
    topic, qid = cq.directory.parent.name, int(cq.directory.name)
    lo = cq.min_offset(0)
    hi = cq.max_offset()
    if hi <= lo:
        return
    per = cq.units_per_segment
    have = np.array(sorted(cq.segments.segment_starts()), np.int64) // CQ_UNIT_SIZE // per
    have = have[(have >= lo // per) & (have <= (hi - 1) // per)]
    gaps = np.flatnonzero(have != np.arange(lo // per, lo // per + len(have)))
    if len(have) != (hi - 1) // per - lo // per + 1:
        # a file missing inside the queue (its units far past the rest: a damaged QUEUEOFFSET
        # dispatched): reported without reading the span, which may be billions of units
        missing = lo // per + (int(gaps[0]) if len(gaps) else len(have))
        report.problems.append(Problem(str(cq.directory), missing * per, "consume-queue file missing inside the queue"))
        return
    units = cq.read(lo, hi - lo)
    report.units += len(units)
    where = str(cq.directory)
    real = units["size"] != FILLER_SIZE
    offsets = units["offset"].astype(np.int64)[real]
    sizes = units["size"].astype(np.int64)[real]
    logical = np.arange(lo, hi)[real]
    # units past the written end are zero; a zero size inside means a hole
    holes = np.flatnonzero(sizes <= 0)
    if len(holes):
        report.problems.append(Problem(where, int(logical[holes[0]]), "hole (zero unit) inside the queue"))
        return
    past = np.flatnonzero(offsets + sizes > tail)
    if len(past):
        report.problems.append(Problem(where, int(logical[past[0]]), f"unit points past the published tail {tail}"))
        return
    back = np.flatnonzero(np.diff(offsets) <= 0)
    if len(back):
        report.problems.append(Problem(where, int(logical[back[0] + 1]), "unit offsets do not increase"))
        return
    live = offsets >= parts.commitlog.min_offset()
    offsets, sizes, logical = offsets[live], sizes[live], logical[live]
    seg_of = offsets // parts.commitlog.segment_size
    cuts = np.flatnonzero(np.diff(seg_of)) + 1
    for part, psize, plog in zip(np.split(offsets, cuts), np.split(sizes, cuts), np.split(logical, cuts), strict=True):
        if not len(part):
            continue
        seg = parts.commitlog.segments.for_offset(int(part[0]))
        if seg is None:
            report.problems.append(Problem(where, int(plog[0]), "unit points at a missing commitlog segment"))
            return
        try:
            cols = read_columns(seg.buffer(), seg.start, part - seg.start, with_body=False)
        except Exception as exc:  # a unit pointing at garbage: decoding fails
            report.problems.append(Problem(where, int(plog[0]), f"unit does not point at a record ({exc})"))
            return
        h = cols.header
        ok = (
            np.asarray(pc.equal(pc.cast(cols.topic, pa.string()), topic).fill_null(False))
            & (h["queueId"].astype(np.int64) == qid)
            & (h["queueOffset"].astype(np.int64) == plog)
        )
        if topic.startswith(LMQ_PREFIX):  # a light message queue's records are other queues' too
            ok |= in_lmq(cols.properties, topic, plog)
        ok &= h["totalSize"].astype(np.int64) == psize
        bad = np.flatnonzero(~ok)
        if len(bad):
            report.problems.append(
                Problem(
                    where, int(plog[bad[0]]), f"unit does not match the record at commitlog offset {int(part[bad[0]])}"
                )
            )
            return
