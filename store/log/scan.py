"""Walking a commitlog segment: where its records are, how far it is valid, and why it stops.

Records are variable-length, so finding them is a chain (each TOTALSIZE says where the next
one starts). The walk is vectorized without a per-record Python loop:

1. candidates: every position whose bytes 4..8 hold a record magic (one numpy pass for the
   first magic byte, then a check of the other three at the hits);
2. the chain: for the candidates, ``next = position + TOTALSIZE``; where ``next`` is the next
   candidate the chain goes on. A candidate that is not on the chain (magic bytes inside a
   body) is skipped by jumping through the breaks, a Python step per *break*, not per record;
3. the records on the chain are checked together (lengths add up, optional body CRC); the
   walk stops at the first bad one.

The result says how many bytes are valid and why the walk stopped (end of data, blank
end-of-segment record, corrupt record, limit), instead of raising: recovery decides.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ..native import (
    walk_records as _native_walk,  # the C helper's (None without it: the numpy walk below)
)
from .record import (
    HEADER_V4,
    MAGIC_V1,
    MAGIC_V2,
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    TRAILER_LENGTH_FIELDS,
    ScanKind,
    crc32,
    decode_at,
    field_problems,
)

#: Why the C walk stopped (store/_native.c ``walk_records``): code -> the detail's format.
_NATIVE_PROBLEMS = {
    1: "TOTALSIZE {} out of range",
    2: "lengths do not add up to TOTALSIZE",
    3: "PHYSICALOFFSET {} is not the record's position",
    4: "QUEUEID {} is negative",
    5: "QUEUEOFFSET {} is negative",
    6: "STORETIMESTAMP {} is out of range",
    7: "BORNTIMESTAMP {} is out of range",
}

_MAGIC_BYTES = [np.frombuffer(int(m & 0xFFFFFFFF).to_bytes(4, "big"), np.uint8) for m in (MAGIC_V1, MAGIC_V2)]


class StopReason(enum.Enum):
    LIMIT = "limit"  # reached the caller's limit (e.g. the published tail)
    END = "end"  # zero bytes: no more data in this segment
    BLANK = "blank"  # end-of-segment blank record: data goes on in the next segment
    CORRUPT = "corrupt"  # a bad record at ``end``


@dataclass
class SegmentScan:
    positions: np.ndarray  # record starts, relative to the segment
    sizes: np.ndarray  # TOTALSIZE of each
    end: int  # first byte after the last valid record (relative)
    reason: StopReason
    detail: str = ""


def _be(seg: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed ints of ``width`` bytes at ``at``, as int64. Positions are clamped into
    the segment (a damaged length may point anywhere): callers mask what they clamped."""
    at = np.clip(at, 0, len(seg) - width)
    b = np.ascontiguousarray(seg[at[:, None] + np.arange(width)])
    return b.view(f">i{width}").ravel().astype(np.int64)


def _be32(seg: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return _be(seg, pos, 4)


def scan_segment(
    seg: np.ndarray,
    start: int = 0,
    limit: int | None = None,
    *,
    check_crc: bool = False,
    base: int | None = None,
    native: bool = True,
) -> SegmentScan:
    """Walk the records of ``seg`` (uint8 array of one whole segment) from ``start`` to ``limit``.

    ``base`` is the segment's commitlog offset: with it, a record whose PHYSICALOFFSET is not
    its position is damage too. Never raises on any content: damage ends the walk with
    :attr:`StopReason.CORRUPT` at the first bad record.

    With the C helper built (and ``native``), one C pass walks and checks the chain
    (``walk_records`` in ``store/_native.c``, ~3x the numpy walk); otherwise the vectorized
    steps of the module docstring. Both give the same answer on any content (tested).
    """
    size = len(seg)
    limit = size if limit is None else min(limit, size)
    if start >= limit:
        return SegmentScan(np.zeros(0, np.int64), np.zeros(0, np.int64), start, StopReason.LIMIT)
    if _native_walk is not None and native:
        return _scan_native(seg, start, limit, check_crc, base)
    rec_pos, rec_size = _chain(seg, start, limit)
    # 3. check the chain's records together
    bad, detail = _first_bad(seg, rec_pos, rec_size, check_crc, base)
    return _finish(seg, start, limit, rec_pos, rec_size, bad, detail, base)


def _scan_native(seg: np.ndarray, start: int, limit: int, check_crc: bool, base: int | None) -> SegmentScan:
    """:func:`scan_segment` through the C helper: the chain walked and its lengths and header
    fields checked in one pass (the same answers as the numpy walk; the CRCs, when asked,
    are checked here on what it found)."""
    room = (limit - start) // 8 + 1
    pos_out, size_out = np.empty(room, np.int64), np.empty(room, np.int64)
    n, end, code, value = _native_walk(
        seg,
        start,
        limit,
        -1 if base is None else base,
        HEADER_V4.itemsize,
        TRAILER_LENGTH_FIELDS,
        MIN_TIMESTAMP_MS,
        MAX_TIMESTAMP_MS,
        pos_out,
        size_out,
    )
    rec_pos, rec_size = pos_out[:n], size_out[:n]
    bad, detail = (n, "") if code == 0 else (n, _NATIVE_PROBLEMS[code].format(value))
    if check_crc and n:
        crc_bad = _first_crc_mismatch(seg, rec_pos)
        if crc_bad < n:
            bad, detail = crc_bad, "body CRC mismatch"
    if bad < n or code:
        return SegmentScan(
            rec_pos[:bad], rec_size[:bad], int(rec_pos[bad]) if bad < n else end, StopReason.CORRUPT, detail
        )
    return _finish(seg, start, limit, rec_pos, rec_size, n, "", base)


def _chain(seg: np.ndarray, start: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Steps 1 and 2 of the module docstring: (positions, TOTALSIZEs) of the records on the
    chain from ``start`` (a record whose TOTALSIZE no record can have is kept, for
    :func:`_first_bad` to name)."""
    size = len(seg)
    region = seg[start:limit]
    # 1. candidates: magic at p+4..p+8
    if len(region) >= 8:
        hits = np.flatnonzero(region[4 : len(region) - 3] == 0xDA)
        ok = np.zeros(len(hits), bool)
        for mb in _MAGIC_BYTES:
            ok |= (region[hits + 5] == mb[1]) & (region[hits + 6] == mb[2]) & (region[hits + 7] == mb[3])
        cand = hits[ok].astype(np.int64) + start
    else:
        cand = np.zeros(0, np.int64)
    positions: list[np.ndarray] = []
    pos = start
    if len(cand):
        sizes_all = _be32(seg, cand)
        nxt = cand + sizes_all
        link = np.zeros(len(cand), bool)
        link[:-1] = nxt[:-1] == cand[1:]
        breaks = np.flatnonzero(~link)
        i = int(np.searchsorted(cand, pos))
        # 2. follow the chain, a step per break
        while i < len(cand) and cand[i] == pos:
            j = int(breaks[np.searchsorted(breaks, i)])  # last index of this linked run
            positions.append(np.arange(i, j + 1))
            pos = int(nxt[j])
            if pos <= cand[j] or pos > size:
                break  # a TOTALSIZE no record can have: kept, for _first_bad to name
            if pos > limit:  # a record running past the limit is not (yet) there
                positions[-1] = positions[-1][:-1]
                pos = int(cand[j])
                break
            i = int(np.searchsorted(cand, pos))
    idx = np.concatenate(positions) if positions else np.zeros(0, np.int64)
    rec_pos = cand[idx] if len(idx) else np.zeros(0, np.int64)
    rec_size = sizes_all[idx] if len(idx) else np.zeros(0, np.int64)
    return rec_pos, rec_size


def _finish(
    seg: np.ndarray,
    start: int,
    limit: int,
    rec_pos: np.ndarray,
    rec_size: np.ndarray,
    bad: int,
    detail: str,
    base: int | None,
) -> SegmentScan:
    """The scan's answer once the chain's records are checked: cut at the first bad one, or
    else why the chain ended (the scalar decoder looks at where it stopped)."""
    size = len(seg)
    if bad < len(rec_pos):
        return SegmentScan(rec_pos[:bad], rec_size[:bad], int(rec_pos[bad]), StopReason.CORRUPT, detail)
    end = int(rec_pos[-1] + rec_size[-1]) if len(rec_pos) else start
    if end >= limit:
        return SegmentScan(rec_pos, rec_size, end, StopReason.LIMIT)
    if size - end < 8:
        # no room left for a record or an end blank (a segment whose size was inferred from a
        # truncated file): the segment is over and the log goes on in the next one
        return SegmentScan(rec_pos, rec_size, end, StopReason.BLANK)
    # what stopped the chain: the scalar decoder looks at that one position
    tail = decode_at(memoryview(seg), end, base=base)  # type: ignore[arg-type]
    if tail.kind is ScanKind.END:
        return SegmentScan(rec_pos, rec_size, end, StopReason.END)
    if tail.kind is ScanKind.BLANK:
        return SegmentScan(rec_pos, rec_size, end, StopReason.BLANK)
    if tail.kind is ScanKind.RECORD and end + tail.size > limit:
        return SegmentScan(rec_pos, rec_size, end, StopReason.LIMIT)  # not published yet
    reason = tail.reason or "record outside the chain"
    return SegmentScan(rec_pos, rec_size, end, StopReason.CORRUPT, reason)


def _first_bad(
    seg: np.ndarray,
    pos: np.ndarray,
    size: np.ndarray,
    check_crc: bool,
    base: int | None = None,
) -> tuple[int, str]:
    """Index of the first record whose lengths do not add up, whose header holds a value no
    store writes (:func:`rmqlog.log.record.field_problems`), or whose body CRC is wrong.

    Every length is checked before it is used as an offset, so a damaged one cannot make a
    read leave the record (or the segment).
    """
    n = len(pos)
    if n == 0:
        return 0, ""
    ok = (size >= HEADER_V4.itemsize + TRAILER_LENGTH_FIELDS) & (pos + size <= len(seg))
    why = np.where(ok, 0, 1)  # 1: TOTALSIZE, 2: lengths
    sys_flag = _be32(seg, pos + 36)
    born_v6 = (sys_flag & SYSFLAG_BORNHOST_V6) != 0
    hsize = HEADER_V4.itemsize + np.where(born_v6, 12, 0) + np.where(sys_flag & SYSFLAG_STOREHOST_V6, 12, 0)
    fits = ok & (size >= hsize + TRAILER_LENGTH_FIELDS)
    body_len = np.where(fits, _be32(seg, pos + hsize - 4), -1)
    fits &= (body_len >= 0) & (hsize + body_len + TRAILER_LENGTH_FIELDS <= size)
    v2 = _be32(seg, pos + 4) == MAGIC_V2
    tl_at = np.where(fits, pos + hsize + body_len, pos)
    topic_len = np.where(v2, _be(seg, tl_at, 2) & 0xFFFF, _be(seg, tl_at, 1) & 0xFF)
    pl_at = tl_at + np.where(v2, 2, 1) + topic_len
    fits &= pl_at + 2 <= pos + size
    props_len = _be(seg, np.where(fits, pl_at, pos), 2) & 0xFFFF
    fits &= pl_at + 2 + props_len == pos + size
    why[ok & ~fits] = 2
    first = int(np.argmax(why > 0)) if (why > 0).any() else n
    detail = ""
    if first < n:
        detail = (
            f"TOTALSIZE {int(size[first])} out of range" if why[first] == 1 else "lengths do not add up to TOTALSIZE"
        )
    # header fields nothing checksums, of the records whose lengths are sound
    h = pos[:first]
    store_at = h + np.where(born_v6[:first], 68, 56)
    bad, problem = field_problems(
        _be32(seg, h + 12),
        _be(seg, h + 20, 8),
        _be(seg, h + 28, 8),
        _be(seg, h + 40, 8),
        _be(seg, store_at, 8),
        None if base is None else h + base,
    )
    if bad < first:
        first, detail = bad, problem
    if check_crc:
        mismatch = _first_crc_mismatch(seg, pos[:first], hsize[:first], body_len[:first])
        if mismatch < first:
            return mismatch, "body CRC mismatch"
    return first, detail


def _first_crc_mismatch(
    seg: np.ndarray,
    pos: np.ndarray,
    hsize: np.ndarray | None = None,
    body_len: np.ndarray | None = None,
) -> int:
    """Index of the first of these records (lengths already checked) whose body CRC is wrong;
    ``len(pos)`` if none."""
    n = len(pos)
    if hsize is None or body_len is None:
        sys_flag = _be32(seg, pos + 36)
        hsize = (
            HEADER_V4.itemsize
            + np.where(sys_flag & SYSFLAG_BORNHOST_V6, 12, 0)
            + np.where(sys_flag & SYSFLAG_STOREHOST_V6, 12, 0)
        )
        body_len = _be32(seg, pos + hsize - 4)
    crc = _be32(seg, pos + 8)
    starts = (pos + hsize).tolist()
    ends = (pos + hsize + body_len).tolist()
    mv = memoryview(seg)  # type: ignore[arg-type]
    got = np.fromiter((crc32(mv[a:b]) & 0x7FFFFFFF for a, b in zip(starts, ends, strict=True)), np.int64, n)
    mismatch = np.flatnonzero(got != crc)
    return int(mismatch[0]) if len(mismatch) else n


class QueueDensity:
    """Checks that queue offsets stay dense along a walk of the log, window after window.

    A store gives each queue's records consecutive QUEUEOFFSETs in log order (assigned under
    the append lock), so a record whose QUEUEOFFSET is not its queue's previous one plus one is
    damage (nothing checksums the field, and the append state rebuilt from the log would
    otherwise continue from it). Records that never enter a consume queue (prepared or
    rolled-back transactions, QUEUEOFFSET 0) are not checked. A walk from the log's very first
    byte (``from_log_start``: nothing deleted yet) knows every queue starts at 0; otherwise the
    first record of each queue seen sets where that queue starts.

    A queue that starts again at 0 is damage too (a zeroed field reads that way). RocketMQ
    does restart a topic's queues at 0 when the topic is deleted and created again while its
    old messages are still in the commitlog: such a RocketMQ store reads as damaged there (a
    limitation, see docs/reliability.md).
    """

    def __init__(self, *, from_log_start: bool = False) -> None:
        self.last: dict[tuple[str, int], int] = {}
        self.from_log_start = from_log_start

    def first_break(
        self,
        topics: list[str],
        topic_index: np.ndarray,
        queue_id: np.ndarray,
        queue_offset: np.ndarray,
        consumable: np.ndarray,
    ) -> tuple[int, str]:
        """(index of the first record that breaks density, why), (n, "") if none; then
        remembers every queue's last offset before that record. Vectorized: a stable sort by
        queue, a diff, and a step per distinct queue (few), none per record."""
        n = len(queue_offset)
        rows = np.flatnonzero(consumable)
        key = (topic_index[rows].astype(np.int64) << 32) | queue_id[rows].astype(np.int64)
        qoff = queue_offset[rows].astype(np.int64)
        order = np.argsort(key, kind="stable")
        sk, so = key[order], qoff[order]
        same = sk[1:] == sk[:-1]
        bad_sorted = np.flatnonzero(same & (so[1:] != so[:-1] + 1)) + 1
        first_of = np.flatnonzero(np.r_[True, ~same]) if len(sk) else np.zeros(0, np.int64)
        unknown = -1 if self.from_log_start else -2  # a queue first seen starts at 0, or anywhere
        expect = np.array(
            [self.last.get((topics[int(k) >> 32], int(k) & 0xFFFFFFFF), unknown) + 1 for k in sk[first_of]], np.int64
        )
        bad_first = first_of[(expect >= 0) & (so[first_of] != expect)] if len(first_of) else first_of
        bad = np.concatenate([bad_sorted, bad_first])
        cut = int(rows[order[bad]].min()) if len(bad) else n
        why = ""
        if cut < n:
            r = int(np.flatnonzero(rows == cut)[0])
            name = (topics[int(topic_index[cut])], int(queue_id[cut]))
            prev = qoff[:r][key[:r] == key[r]]
            expected = int(prev[-1]) + 1 if len(prev) else self.last.get(name, -1) + 1
            found = int(queue_offset[cut])
            why = f"QUEUEOFFSET {found} of queue {name[0]}/{name[1]} breaks its density (expected {expected})"
        keep = rows < cut
        if keep.any():
            k2, o2 = key[keep], qoff[keep]
            uniq, last_idx = np.unique(k2[::-1], return_index=True)  # each queue's last record
            for k, o in zip(uniq.tolist(), o2[::-1][last_idx].tolist(), strict=True):
                self.last[(topics[k >> 32], k & 0xFFFFFFFF)] = o
        return cut, why
