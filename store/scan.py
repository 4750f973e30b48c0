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

from .record import (
    HEADER_V4,
    MAGIC_V1,
    MAGIC_V2,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    ScanKind,
    crc32,
    decode_at,
)

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


def _be32(seg: np.ndarray, pos: np.ndarray) -> np.ndarray:
    b = seg[pos[:, None] + np.arange(4)]
    return np.ascontiguousarray(b).view(">i4").ravel().astype(np.int64)


def scan_segment(seg: np.ndarray, start: int = 0, limit: int | None = None, *, check_crc: bool = False) -> SegmentScan:
    """Walk the records of ``seg`` (uint8 array of one whole segment) from ``start`` to ``limit``."""
    size = len(seg)
    limit = size if limit is None else min(limit, size)
    if start >= limit:
        return SegmentScan(np.zeros(0, np.int64), np.zeros(0, np.int64), start, StopReason.LIMIT)
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
            if pos > limit:  # a record running past the limit is not (yet) there
                positions[-1] = positions[-1][:-1]
                pos = int(cand[j])
                break
            i = int(np.searchsorted(cand, pos))
    idx = np.concatenate(positions) if positions else np.zeros(0, np.int64)
    rec_pos = cand[idx] if len(idx) else np.zeros(0, np.int64)
    rec_size = sizes_all[idx] if len(idx) else np.zeros(0, np.int64)
    # 3. check the chain's records together
    bad, detail = _first_bad(seg, rec_pos, rec_size, check_crc)
    if bad < len(rec_pos):
        return SegmentScan(rec_pos[:bad], rec_size[:bad], int(rec_pos[bad]), StopReason.CORRUPT, detail)
    end = int(rec_pos[-1] + rec_size[-1]) if len(rec_pos) else start
    if end >= limit:
        return SegmentScan(rec_pos, rec_size, end, StopReason.LIMIT)
    # what stopped the chain: the scalar decoder looks at that one position
    tail = decode_at(memoryview(seg), end)  # type: ignore[arg-type]
    if tail.kind is ScanKind.END:
        return SegmentScan(rec_pos, rec_size, end, StopReason.END)
    if tail.kind is ScanKind.BLANK:
        return SegmentScan(rec_pos, rec_size, end, StopReason.BLANK)
    if tail.kind is ScanKind.RECORD and end + tail.size > limit:
        return SegmentScan(rec_pos, rec_size, end, StopReason.LIMIT)  # not published yet
    reason = tail.reason or "record outside the chain"
    return SegmentScan(rec_pos, rec_size, end, StopReason.CORRUPT, reason)


def _first_bad(seg: np.ndarray, pos: np.ndarray, size: np.ndarray, check_crc: bool) -> tuple[int, str]:
    """Index of the first record whose lengths do not add up (or whose CRC is wrong)."""
    n = len(pos)
    if n == 0:
        return 0, ""
    sys_flag = _be32(seg, pos + 36)
    hsize = HEADER_V4.itemsize + np.where(sys_flag & SYSFLAG_BORNHOST_V6, 12, 0) + np.where(sys_flag & SYSFLAG_STOREHOST_V6, 12, 0)
    ok = size >= hsize + 3
    safe_h = np.where(ok, hsize, HEADER_V4.itemsize)
    body_len = np.where(ok, _be32(seg, pos + np.minimum(safe_h, size) - 4), -1)
    ok &= (body_len >= 0) & (hsize + body_len + 3 <= size)
    v2 = _be32(seg, pos + 4) == MAGIC_V2
    tl_at = np.where(ok, pos + hsize + body_len, pos)
    t0 = seg[tl_at].astype(np.int64)
    t1 = seg[np.minimum(tl_at + 1, len(seg) - 1)].astype(np.int64)
    topic_len = np.where(v2, (t0 << 8) | t1, t0)
    pl_at = tl_at + np.where(v2, 2, 1) + topic_len
    ok &= pl_at + 2 <= pos + size
    pl_at = np.where(ok, pl_at, pos)
    props_len = (seg[pl_at].astype(np.int64) << 8) | seg[pl_at + 1].astype(np.int64)
    ok &= pl_at + 2 + props_len == pos + size
    bad = np.flatnonzero(~ok)
    first = int(bad[0]) if len(bad) else n
    detail = "lengths do not add up to TOTALSIZE" if len(bad) else ""
    if check_crc:
        crc = _be32(seg, pos[:first] + 8)
        starts = (pos[:first] + hsize[:first]).tolist()
        ends = (pos[:first] + hsize[:first] + body_len[:first]).tolist()
        mv = memoryview(seg)  # type: ignore[arg-type]
        got = np.fromiter(
            (crc32(mv[a:b]) & 0x7FFFFFFF for a, b in zip(starts, ends, strict=True)), np.int64, first
        )
        mismatch = np.flatnonzero(got != crc)
        if len(mismatch) and int(mismatch[0]) < first:
            return int(mismatch[0]), "body CRC mismatch"
    return first, detail
