"""The two walks of a commitlog segment (:func:`rmqlog.log.scan.scan_segment`) agree: the C
helper's one pass (``walk_records``) and the numpy walk give the same records, end, stop
reason and detail on intact segments and on thousands of damaged ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import FIXTURE_COMMITLOG

import rmqlog
from rmqlog.log import scan
from rmqlog.log.scan import StopReason, scan_segment

pytestmark = pytest.mark.skipif(scan._native_walk is None, reason="the C helper is not built (setup.py)")

SEG = 1 << 16


@pytest.fixture(scope="module")
def segment(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """A 64 KiB segment: records of several topics, with keys, tags, properties and empty
    bodies, then the rest of the segment zeros."""
    root = tmp_path_factory.mktemp("scan") / "s"
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=SEG, message_index_enable=False)
    rng = np.random.default_rng(3)
    with rmqlog.MessageStore.open(root, cfg) as s:
        n = 150
        s.put_batch(
            pa.table(
                {
                    "topic": [("a", "TopicTest", "x" * 100)[i % 3] for i in range(n)],
                    "body": [bytes(rng.integers(0, 256, int(rng.integers(0, 200)), np.uint8)) for _ in range(n)],
                    "tags": [None if i % 4 else f"t{i}" for i in range(n)],
                    "keys": [[f"k{i}", "dup"] if i % 2 else [] for i in range(n)],
                }
            )
        )
    return np.fromfile(root / "commitlog" / f"{0:020d}", np.uint8)


def both(seg: np.ndarray, start: int = 0, limit: int | None = None, **kw: object) -> scan.SegmentScan:
    fast = scan_segment(seg, start, limit, native=True, **kw)  # type: ignore[arg-type]
    slow = scan_segment(seg, start, limit, native=False, **kw)  # type: ignore[arg-type]
    assert (fast.reason, fast.end, fast.detail) == (slow.reason, slow.end, slow.detail)
    assert fast.positions.tolist() == slow.positions.tolist() and fast.sizes.tolist() == slow.sizes.tolist()
    return fast


def test_intact_segment(segment: np.ndarray) -> None:
    whole = both(segment, base=0, check_crc=True)
    assert len(whole.positions) == 150 and whole.reason is StopReason.END
    mid = int(whole.positions[70])
    assert both(segment, mid, base=0).positions[0] == mid
    for limit in (mid, mid + 1, mid + 8, int(whole.positions[71]) - 1, whole.end):  # published tails anywhere
        got = both(segment, 0, limit, base=0)
        assert got.reason is StopReason.LIMIT and got.end <= limit
    off = both(segment, 3)  # off the chain (inside the first record's header): damage at once, never an end
    assert (off.reason, off.end, len(off.positions)) == (StopReason.CORRUPT, 3, 0)
    assert off.detail.startswith("bad magic"), off.detail  # bytes 7..10 are no magic code


def test_fixture_segment_written_by_rocketmq() -> None:
    seg = np.fromfile(FIXTURE_COMMITLOG, np.uint8)
    got = both(seg, base=0, check_crc=True)
    assert len(got.positions) == 47 and got.reason is StopReason.BLANK
    rng = np.random.default_rng(5)
    for _ in range(300):  # damage inside its records and its end blank
        bad = seg.copy()
        bad[int(rng.integers(0, len(bad)))] ^= np.uint8(1 << int(rng.integers(0, 8)))
        both(bad, base=0, check_crc=True)


@pytest.mark.parametrize(
    ("field_at", "width", "value", "detail"),
    [
        (0, 4, 5, "TOTALSIZE 5 out of range"),
        (0, 4, -1, "TOTALSIZE -1 out of range"),
        (0, 4, 1 << 20, f"TOTALSIZE {1 << 20} out of range"),
        (12, 4, -3, "QUEUEID -3 is negative"),
        (20, 8, -1, "QUEUEOFFSET -1 is negative"),
        (28, 8, 12345, "PHYSICALOFFSET 12345 is not the record's position"),
        (56, 8, -5, "STORETIMESTAMP -5 is out of range"),
        (40, 8, 1 << 62, f"BORNTIMESTAMP {1 << 62} is out of range"),
    ],
)
def test_each_problem_is_named(segment: np.ndarray, field_at: int, width: int, value: int, detail: str) -> None:
    good = both(segment, base=0)
    victim = int(good.positions[40])
    seg = segment.copy()
    seg[victim + field_at : victim + field_at + width] = np.frombuffer(
        value.to_bytes(width, "big", signed=True), np.uint8
    )
    got = both(seg, base=0)
    assert (got.reason, got.end, got.detail) == (StopReason.CORRUPT, victim, detail)
    assert len(got.positions) == 40


def test_damaged_segments_agree(segment: np.ndarray) -> None:
    """Random damage (bytes flipped, runs zeroed, lengths rewritten, magic codes planted)
    at random places, scanned from random starts and limits, with and without base and CRCs."""
    rng = np.random.default_rng(11)
    good = scan_segment(segment, native=False)
    records, end = good.positions, good.end
    reasons: set[StopReason] = set()
    for case in range(2000):
        seg = segment.copy()
        for _ in range(int(rng.integers(1, 4))):
            kind = case % 5
            at = int(rng.integers(0, end + 64))
            if kind == 0:
                seg[at] ^= np.uint8(1 << int(rng.integers(0, 8)))
            elif kind == 1:
                seg[at : at + int(rng.integers(1, 40))] = 0
            elif kind == 2:  # a length field of a record: TOTALSIZE, body, topic or properties
                r = int(records[int(rng.integers(0, len(records)))])
                off = int(rng.choice([0, 84, 85]))
                seg[r + off : r + off + 4] = np.frombuffer(
                    int(rng.integers(-300, 70000)).to_bytes(4, "big", signed=True), np.uint8
                )
            elif kind == 3:  # a record magic where there is none
                seg[at + 4 : at + 8] = np.frombuffer(
                    bytes.fromhex(rng.choice(["DAA320A7", "DAA320AB", "CBD43194"])), np.uint8
                )
            else:
                seg[at : at + 8] = rng.integers(0, 256, 8, np.uint8)
        start = 0 if case % 3 else int(records[int(rng.integers(0, len(records)))])
        limit = None if case % 4 else int(rng.integers(start, end + 100))
        got = both(seg, start, limit, base=0 if case % 2 else None, check_crc=bool(case % 7 == 0))
        reasons.add(got.reason)
    assert reasons == {StopReason.END, StopReason.LIMIT, StopReason.CORRUPT}  # (BLANK: the fixture's test)


def test_read_only_mapping(tmp_path: Path, segment: np.ndarray) -> None:
    """The C walk reads a read-only buffer (a read-only store maps its segments PROT_READ)."""
    seg = segment.copy()
    seg.flags.writeable = False
    assert len(both(seg, base=0).positions) == 150
