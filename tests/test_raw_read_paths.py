"""The fast raw read (``read_window(raw=True)`` without a tag filter: records copied whole and
checked on their own bytes, rmqlog.log.raw_check) against the general checked read it stands
in for (rmqlog.queue.checked_read.read_unit_records): the same bytes, statuses and next
offsets on random intact stores, and on every kind of damage the same typed error (class,
message, file, offsets), the fast path declining the read rather than judging it. Run with
the C helper's check and with its numpy twin, and for both fast paths: the general read's
fast form (small windows' direct path off) and a small window's direct path
(rmqlog.access.small_window, which needs the C helper)."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from conftest import SMALL_COMMITLOG, SMALL_CQ, small_store_config, unit, write_unit

import rmqlog
import rmqlog.access.small_window as small_window
import rmqlog.access.window as window
import rmqlog.log.raw_check as raw_check
from rmqlog.log.record import MAGIC_V2
from rmqlog.queue.consume_queue import CQ_UNIT_SIZE

PER_CQ_FILE = SMALL_CQ // CQ_UNIT_SIZE


#: (fast path, C helper) pairs: the direct path exists only with the C helper (without it
#: every small window is read the general way), so it has no numpy pair
MODES = [("stored", True), ("stored", False), ("direct", True)]


@pytest.fixture(params=MODES, ids=[f"{p}-{'native' if n else 'numpy'}" for p, n in MODES])
def mode(request: pytest.FixtureRequest) -> tuple[str, bool]:
    return tuple(request.param)  # type: ignore[return-value]


@pytest.fixture
def native(mode: tuple[str, bool], monkeypatch: pytest.MonkeyPatch) -> bool:
    if not mode[1]:
        monkeypatch.setattr(raw_check, "_native_check", None)
        monkeypatch.setattr(small_window, "_native_copy", None)
    elif raw_check._native_check is None:
        pytest.fail("the C helper is not built (make .venv/.installed builds it)")
    return mode[1]


class Paths:
    """Which path each read took: the fast one (accepted) or the general one (declined).
    ``fast``: the fast path watched, ``stored`` (the general read's fast form,
    ``read_unit_stored``; small windows' direct path off) or ``direct`` (a small window's
    direct path; a window it declines is read the general way). With ``fast_on`` false
    neither runs: the general read alone."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fast: str = "stored") -> None:
        self.fast = fast
        self.fast_on = True
        self.accepted = 0
        self.declined = 0
        stored, small = window.read_unit_stored, window.read_small

        def counted(real: Any, watched: bool) -> Any:
            def spy(*a: Any, **k: Any) -> Any:
                if not self.fast_on:
                    return None
                got = real(*a, **k)
                if watched:
                    self.accepted += got is not None
                    self.declined += got is None
                return got

            return spy

        monkeypatch.setattr(window, "read_unit_stored", counted(stored, fast == "stored"))
        monkeypatch.setattr(window, "read_small", counted(small, fast == "direct"))
        if fast == "stored":
            monkeypatch.setattr(window, "SMALL_WINDOW", 0)


@pytest.fixture
def paths(mode: tuple[str, bool], native: bool, monkeypatch: pytest.MonkeyPatch) -> Paths:
    return Paths(monkeypatch, mode[0])


def outcome(s: rmqlog.MessageStore, topic: str, qid: int, offset: int, **kw: Any) -> tuple[Any, ...]:
    """A read's whole visible result, or its error's."""
    try:
        r = s.read_window(topic, qid, offset, raw=True, **kw)
    except rmqlog.StoreError as e:
        return (
            "error",
            type(e).__name__,
            str(e),
            getattr(e, "path", None),
            getattr(e, "offset", None),
            getattr(e, "queue_offset", None),
            getattr(e, "commit_log_offset", None),
        )
    rec = r.records
    assert rec is not None
    return (
        "ok",
        r.status,
        r.next_begin_offset,
        r.min_offset,
        r.max_offset,
        r.removed,
        rec.data.to_pybytes(),
        rec.commit_log_offsets.tolist(),
        rec.sizes.tolist(),
        rec.queue_offsets.tolist(),
        len(rec.array),
    )


def both(s: rmqlog.MessageStore, paths: Paths, topic: str, qid: int, offset: int, **kw: Any) -> tuple[Any, Any]:
    paths.fast_on = True
    fast = outcome(s, topic, qid, offset, **kw)
    paths.fast_on = False
    general = outcome(s, topic, qid, offset, **kw)
    paths.fast_on = True
    return fast, general


# ------------------------------------------------------------------ intact stores
@pytest.mark.parametrize("seed", range(4))
def test_random_intact_reads_are_the_general_reads(root: Path, paths: Paths, native: bool, seed: int) -> None:
    """Random bodies, properties and topics over 4 KiB segments: every window read (random
    offsets, counts, byte budgets, CRC on and off) gives the same bytes, offsets, statuses
    both ways, and the fast path took every read that found something."""
    rnd = random.Random(seed)
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        for t in ("T", "TopicLonger"):
            s.create_topic(t, 3)
        n = 400
        topics = [rnd.choice(["T", "TopicLonger"]) for _ in range(n)]
        s.put_batch(
            pa.table(
                {
                    "topic": topics,
                    "queueId": pa.array([rnd.randrange(3) for _ in range(n)], pa.int32()),
                    "body": [bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 900))) for _ in range(n)],
                    "tags": pa.array([rnd.choice(["a", "b", None]) for _ in range(n)], pa.string()),
                    "keys": [[f"k{i}"] * rnd.randint(0, 3) for i in range(n)],
                }
            )
        )
        s.dispatch()
        found = 0
        for _ in range(120):
            t, q = rnd.choice(["T", "TopicLonger"]), rnd.randrange(3)
            hi = s.max_offset(t, q)
            kw: dict[str, Any] = {"max_count": rnd.choice([1, 3, 32, 1000])}
            if rnd.random() < 0.5:
                kw["max_bytes"] = rnd.randint(1, 20_000)
            if rnd.random() < 0.3:
                kw["check_crc"] = False
            fast, general = both(s, paths, t, q, rnd.randint(0, hi + 1), **kw)
            assert fast == general
            found += fast[0] == "ok" and fast[1] is rmqlog.GetMessageStatus.FOUND
        assert found > 50 and paths.declined == 0
        # (the direct path takes only windows of at most 64 units)
        assert paths.accepted == found if paths.fast == "stored" else 0 < paths.accepted <= found


# ------------------------------------------------------------------ damage
BODY = 160  # records of 301 bytes, 13 in a 4 KiB segment


@pytest.fixture
def live(root: Path) -> Iterator[rmqlog.MessageStore]:
    """Topics A and B (names of one length), 4 queues of 30 equal-sized messages each,
    interleaved: every kind of wrong unit can point at a whole record."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        for t in ("A", "B"):
            s.create_topic(t, 4)
        rows = [(t, q, k) for k in range(30) for t in ("A", "B") for q in range(4)]
        s.put_batch(
            pa.table(
                {
                    "topic": [t for t, _, _ in rows],
                    "queueId": pa.array([q for _, q, _ in rows], pa.int32()),
                    "body": [f"{t}{q}-{k}".encode().ljust(BODY, b".") for t, q, k in rows],
                    "tags": ["t"] * len(rows),
                }
            )
        )
        s.dispatch()
        yield s


def log_bytes(root: Path, offset: int, size: int) -> bytes:
    with open(root / "commitlog" / f"{offset - offset % SMALL_COMMITLOG:020d}", "rb") as f:
        f.seek(offset % SMALL_COMMITLOG)
        return f.read(size)


def write_log(root: Path, offset: int, data: bytes) -> None:
    with open(root / "commitlog" / f"{offset - offset % SMALL_COMMITLOG:020d}", "r+b") as f:
        f.seek(offset % SMALL_COMMITLOG)
        f.write(data)


K = 10  # the damaged message of A/2


def _unit_damage(s: rmqlog.MessageStore, root: Path, kind: str) -> None:
    off, size, _ = unit(root, "A", 2, K)
    if kind == "another queue's record":
        o, sz, _ = unit(root, "A", 1, K)
        write_unit(root, "A", 2, K, o, sz)
    elif kind == "another topic's record":
        o, sz, _ = unit(root, "B", 2, K)
        write_unit(root, "A", 2, K, o, sz)
    elif kind == "the same queue's next record":
        o, sz, _ = unit(root, "A", 2, K + 1)
        write_unit(root, "A", 2, K, o, sz)
    elif kind == "past the tail":
        write_unit(root, "A", 2, K, s.published_tail(), size)
    elif kind == "the middle of a record":
        write_unit(root, "A", 2, K, off + 8, size)
    elif kind == "size + 1":
        write_unit(root, "A", 2, K, off, size + 1)
    elif kind == "size - 1":
        write_unit(root, "A", 2, K, off, size - 1)
    elif kind == "across a segment end":
        write_unit(root, "A", 2, K, off - off % SMALL_COMMITLOG + SMALL_COMMITLOG - 100, size)
    elif kind == "a blank record":
        end = off - off % SMALL_COMMITLOG + 13 * 301  # 13 records of 301 bytes, then the blank
        write_unit(root, "A", 2, K, end, SMALL_COMMITLOG - end)
    else:  # pragma: no cover
        raise AssertionError(kind)


UNIT_DAMAGE = [
    "another queue's record",
    "another topic's record",
    "the same queue's next record",
    "past the tail",
    "the middle of a record",
    "size + 1",
    "size - 1",
    "across a segment end",
    "a blank record",
]


@pytest.mark.parametrize("kind", UNIT_DAMAGE)
def test_a_wrong_unit_is_refused_as_the_general_read_refuses_it(
    live: rmqlog.MessageStore, root: Path, paths: Paths, native: bool, kind: str
) -> None:
    _unit_damage(live, root, kind)
    for start, count in ((0, 32), (K, 1), (K - 3, 5)):
        fast, general = both(live, paths, "A", 2, start, max_count=count)
        assert fast == general
        assert fast[:2] == ("error", "CorruptQueueError"), fast
    assert paths.accepted == 0
    assert both(live, paths, "A", 2, K + 1, max_count=5)[0][0] == "ok", "the units after it read as before"


def _record_damage(root: Path, off: int, kind: str) -> None:
    if kind == "a body byte":
        write_log(root, off + 88 + 5, b"\xff")
    elif kind == "BODYCRC":
        write_log(root, off + 8, b"\x00\x00\x00\x01")
    elif kind == "BODYLENGTH":
        write_log(root, off + 84, struct.pack(">i", 0x7FFFFFF0))
    elif kind == "BODYLENGTH negative":
        write_log(root, off + 84, struct.pack(">i", -5))
    elif kind == "TOPICLENGTH":
        write_log(root, off + 88 + BODY, b"\xff")
    elif kind == "topic":
        write_log(root, off + 88 + BODY + 1, b"B")
    elif kind == "PROPERTIESLENGTH":
        write_log(root, off + 88 + BODY + 2, b"\x00\x01")
    elif kind == "MAGIC V2":
        write_log(root, off + 4, struct.pack(">i", MAGIC_V2))
    elif kind == "MAGIC":
        write_log(root, off + 4, b"\x12\x34\x56\x78")
    elif kind == "IPv6 born host bit":
        write_log(root, off + 36 + 3, b"\x10")
    elif kind == "PHYSICALOFFSET":
        write_log(root, off + 28, struct.pack(">q", off + 1))
    elif kind == "QUEUEID":
        write_log(root, off + 12, struct.pack(">i", 3))
    elif kind == "QUEUEOFFSET":
        write_log(root, off + 20, struct.pack(">q", K + 1))
    elif kind == "STORETIMESTAMP":
        write_log(root, off + 56, struct.pack(">q", -1))
    elif kind == "BORNTIMESTAMP":
        write_log(root, off + 40, struct.pack(">q", 1 << 62))
    elif kind == "TOTALSIZE":
        write_log(root, off, struct.pack(">i", 300))
    else:  # pragma: no cover
        raise AssertionError(kind)


RECORD_DAMAGE = [
    "a body byte",
    "BODYCRC",
    "BODYLENGTH",
    "BODYLENGTH negative",
    "TOPICLENGTH",
    "topic",
    "PROPERTIESLENGTH",
    "MAGIC V2",
    "MAGIC",
    "IPv6 born host bit",
    "PHYSICALOFFSET",
    "QUEUEID",
    "QUEUEOFFSET",
    "STORETIMESTAMP",
    "BORNTIMESTAMP",
    "TOTALSIZE",
]


@pytest.mark.parametrize("kind", RECORD_DAMAGE)
def test_a_damaged_record_is_refused_as_the_general_read_refuses_it(
    live: rmqlog.MessageStore, root: Path, paths: Paths, native: bool, kind: str
) -> None:
    off = unit(root, "A", 2, K)[0]
    _record_damage(root, off, kind)
    for check_crc in (None, False):
        fast, general = both(live, paths, "A", 2, K - 2, max_count=8, check_crc=check_crc)
        assert fast == general
        crc_only = kind in ("a body byte", "BODYCRC")
        if crc_only and check_crc is False:  # CRC checks off: the record as stored, both ways
            assert fast[0] == "ok" and len(fast[-2]) == 8
        else:
            assert fast[0] == "error" and fast[1] in ("CorruptRecordError", "CorruptQueueError"), fast
    declined_with_crc = 1 if kind in ("a body byte", "BODYCRC") else 2
    assert paths.declined == declined_with_crc and paths.accepted == 2 - declined_with_crc


def test_the_first_bad_unit_in_queue_order_is_named(
    live: rmqlog.MessageStore, root: Path, paths: Paths, native: bool
) -> None:
    off = unit(root, "A", 2, 12)[0]
    _record_damage(root, off, "a body byte")  # a CRC problem (found last by the general decode) first...
    o, sz, _ = unit(root, "A", 1, 14)
    write_unit(root, "A", 2, 14, o, sz)  # ...then a unit problem (found first)
    fast, general = both(live, paths, "A", 2, 0, max_count=32)
    assert fast == general and fast[1] == "CorruptRecordError" and fast[4] == off


def test_the_check_and_its_numpy_twin_agree_on_random_damage(live: rmqlog.MessageStore, root: Path) -> None:
    """records_pass with the C helper and with numpy, on intact records (copied back to back
    from the segment files) and on copies with one byte changed anywhere: the same verdict
    every time."""
    if raw_check._native_check is None:
        pytest.fail("the C helper is not built")
    cq = live.reader.parts.consume_queue("A", 2)
    units = cq.read(0, 20)
    off, size = units["offset"].astype(np.int64), units["size"].astype(np.int64)
    data = np.frombuffer(b"".join(log_bytes(root, int(o), int(sz)) for o, sz in zip(off, size, strict=True)), np.uint8)
    starts = np.cumsum(size) - size
    logical = np.arange(20, dtype=np.int64)

    def verdicts(buf: np.ndarray, crc: bool) -> tuple[bool, bool]:
        args = (buf, starts, size, off)
        kw = {"topic": b"A", "queue_id": 2, "queue_offsets": logical, "crc": crc}
        c = raw_check.records_pass(*args, **kw)  # type: ignore[arg-type]
        saved, raw_check._native_check = raw_check._native_check, None
        try:
            py = raw_check.records_pass(*args, **kw)  # type: ignore[arg-type]
        finally:
            raw_check._native_check = saved
        return c, py

    assert verdicts(data, True) == (True, True)
    rnd = random.Random(3)
    refused = 0
    for _ in range(600):
        bad = data.copy()
        i = rnd.randrange(len(bad))
        bad[i] ^= 1 << rnd.randrange(8)
        for crc in (True, False):
            c, py = verdicts(bad, crc)
            assert c == py, (i, crc)
            refused += not c
    assert refused > 300


# ------------------------------------------------------- the batch and the scan
def test_the_batch_of_a_pull_without_filter_is_the_general_rule() -> None:
    """batch_taken's shortcut (every unit a record, scalar limits) against its general rule
    (reached with a numpy count, which the shortcut does not take), on random sizes."""
    rnd = random.Random(11)
    for _ in range(3000):
        n = rnd.randint(1, 60)
        size = np.array([rnd.randint(1, 500) for _ in range(n)], np.int64)
        every = np.ones(n, bool)
        count = rnd.randint(1, 70)
        nbytes = rnd.choice([None, rnd.randint(1, 8000)])
        fast = window.batch_taken(every, size, every, count, nbytes)
        general = window.batch_taken(every, size, every, np.int64(count), nbytes)
        assert fast[1] == general[1] and fast[0].tolist() == general[0].tolist(), (size.tolist(), count, nbytes)


def reference_window(
    units: list[tuple[int, int]], start: int, max_count: int, max_bytes: int | None
) -> tuple[list[int], int]:
    """The window rule unit by unit (fillers are no record and their size no size): the
    queue offsets taken and the units scanned."""
    taken: list[int] = []
    total = 0
    for i, (_off, size) in enumerate(units):
        real = size != 0x7FFFFFFF
        if taken and (len(taken) >= max_count or (real and max_bytes is not None and total + size > max_bytes)):
            return taken, i
        if real:
            taken.append(start + i)
            total += size
    return taken, len(units)


@pytest.mark.parametrize("seed", range(3))
def test_fillers_among_the_first_units_extend_the_scan(
    live: rmqlog.MessageStore, root: Path, paths: Paths, seed: int
) -> None:
    """Filler units (no record) among the units a pull reads first: the read goes on over
    the whole scan and takes what RocketMQ's loop takes."""
    rnd = random.Random(seed)
    for k in rnd.sample(range(30), 12):
        write_unit(root, "A", 1, k, 0, 0x7FFFFFFF)
    units = [unit(root, "A", 1, k)[:2] for k in range(30)]
    for _ in range(60):
        start, count = rnd.randrange(30), rnd.choice([1, 2, 4, 8, 32])
        nbytes = rnd.choice([None, 700, 5000])
        r = live.read_window("A", 1, start, max_count=count, max_bytes=nbytes, raw=True)
        taken, scanned = reference_window(units[start:], start, count, nbytes)
        assert r.next_begin_offset == start + scanned
        assert r.records is not None and r.records.queue_offsets.tolist() == taken
        if not taken:
            assert r.status is rmqlog.GetMessageStatus.MESSAGE_WAS_REMOVING
