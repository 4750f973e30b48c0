"""The direct path of a small window (rmqlog.access.small_window) pinned to the general read
(rmqlog.access.window with the direct path off): on random stores and windows (counts, byte
budgets, RocketMQ's on-disk limits, CRC checks on and off, windows cut by ``until``, by a
consume-queue file's end and by the queue's end, records over several commitlog segments,
IPv6 hosts the C check leaves to the general read, fillers), the same records byte for byte,
the same status, next offset, bounds and ``removed``; on damage to units and records, the
same answer or the same typed error. And it is the path an intact pull of 32 takes."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import SMALL_CQ, small_store_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmqlog
import rmqlog.access.small_window as small_window
import rmqlog.access.window as window
from rmqlog import GetMessageStatus as S
from rmqlog import WireMessage
from rmqlog.queue.consume_queue import CQ_UNIT_SIZE, FILLER_SIZE
from rmqlog.results import DiskLimits

PER_FILE = SMALL_CQ // CQ_UNIT_SIZE  # units in one consume-queue file of the small config (50)
QUEUES = 3


@contextlib.contextmanager
def general() -> Iterator[None]:
    """The general read only (no window is small enough for the direct path)."""
    saved = window.SMALL_WINDOW
    window.SMALL_WINDOW = 0
    try:
        yield
    finally:
        window.SMALL_WINDOW = saved


class Spy:
    """Counts the windows the direct path answered."""

    def __init__(self) -> None:
        self.answered = 0
        self.real = small_window.read_small

    def __call__(self, *args: Any, **kw: Any) -> Any:
        got = self.real(*args, **kw)
        self.answered += got is not None
        return got


@pytest.fixture(scope="module")
def spy() -> Iterator[Spy]:
    s = Spy()
    saved = window.read_small
    window.read_small = s  # type: ignore[assignment]
    try:
        yield s
    finally:
        window.read_small = saved  # type: ignore[assignment]


def fill(s: rmqlog.MessageStore, seed: int) -> None:
    """Three queues of topic T (and some of topic U between them): bodies of 0-1,500 bytes (so
    the byte budgets bite, and records fill 4 KiB commitlog segments unevenly), a few IPv6
    born hosts (which the C check leaves to the general read); everything dispatched."""
    rng = random.Random(seed)
    s.create_topic("T", QUEUES)
    s.create_topic("U", 1)
    for _ in range(12):
        n = rng.randint(1, 30)
        sizes = [rng.choice([0, 10, 100, 400, 1500]) for _ in range(n)]
        topics = [rng.choice("TTTU") for _ in range(n)]
        s.put_batch(
            pa.table(
                {
                    "topic": pa.array(topics),
                    "body": pa.array([os.urandom(k) for k in sizes], pa.binary()),
                    "queueId": pa.array([rng.randrange(QUEUES) if t == "T" else 0 for t in topics], pa.int32()),
                }
            ),
            dispatch=True,
        )
        if rng.random() < 0.3:
            host = rng.choice(["[::1]:9", "10.1.2.3:4000"])
            s.wire.put_messages(
                [
                    WireMessage("T", rng.randrange(QUEUES), os.urandom(rng.randint(0, 300)), born_host=host)
                    for _ in range(rng.randint(1, 4))
                ],
                dispatch=True,
            )


@contextlib.contextmanager
def store(tmp: Path, seed: int) -> Iterator[rmqlog.MessageStore]:
    with rmqlog.MessageStore.open(tmp, small_store_config()) as s:
        fill(s, seed)
        yield s


WINDOWS = st.fixed_dictionaries(
    {
        "queue_id": st.integers(0, QUEUES - 1),
        "at": st.floats(-0.05, 1.05),  # where in the queue (its bounds and a little past them)
        "max_count": st.sampled_from([1, 2, 8, 31, 32, 33, 64]),
        "max_bytes": st.one_of(st.none(), st.integers(1, 20_000)),
        "disk": st.one_of(st.none(), st.tuples(st.floats(0, 1), st.integers(1, 16), st.integers(1, 20_000))),
        "until": st.one_of(st.none(), st.integers(1, 70)),
        "check_crc": st.booleans(),
    }
)


def window_args(s: rmqlog.MessageStore, w: dict[str, Any], near: int | None = None) -> tuple[int, int, dict[str, Any]]:
    """(queue id, offset, read_window's keywords) of window ``w``; ``near``: the window starts a
    little before this offset instead (so that it covers it)."""
    lo, hi = s.min_offset("T", w["queue_id"]), s.max_offset("T", w["queue_id"])
    offset = max(0, lo + int(w["at"] * (hi - lo + 2)) - 1)
    if near is not None:
        offset = max(0, near - int(w["at"] * w["max_count"]))
    kw: dict[str, Any] = {
        "max_count": w["max_count"],
        "max_bytes": w["max_bytes"],
        "raw": True,
        "tags": None,
        "check_crc": w["check_crc"],
        "until": offset + w["until"] if w["until"] else None,
    }
    if w["disk"] is not None:
        share, count, nbytes = w["disk"]
        kw["disk"] = DiskLimits(int(share * s.published_tail()), count, nbytes)
    return w["queue_id"], offset, kw


def answer(s: rmqlog.MessageStore, queue_id: int, offset: int, kw: dict[str, Any]) -> tuple[Any, ...]:
    """A read's whole answer, or the error it raised (type and message)."""
    try:
        r = s.read_window("T", queue_id, offset, **kw)
    except rmqlog.StoreError as e:
        return ("error", type(e).__name__, str(e))
    rec = r.records
    assert rec is not None and r.messages.num_rows == 0
    assert rec.array.offset == 0  # (StoredRecords.data: the records from the data buffer's start)
    return (
        r.status,
        r.next_begin_offset,
        r.min_offset,
        r.max_offset,
        r.removed,
        rec.data.to_pybytes(),
        rec.commit_log_offsets.tolist(),
        rec.sizes.tolist(),
        rec.queue_offsets.tolist(),
        [v.as_py() for v in rec.array],
        r.messages.schema,
    )


def same(s: rmqlog.MessageStore, queue_id: int, offset: int, kw: dict[str, Any]) -> tuple[Any, ...]:
    direct = answer(s, queue_id, offset, kw)
    with general():
        assert answer(s, queue_id, offset, kw) == direct, (queue_id, offset, kw)
    return direct


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), windows=st.lists(WINDOWS, min_size=8, max_size=8))
def test_the_direct_path_answers_what_the_general_read_answers(
    tmp_path_factory: pytest.TempPathFactory, spy: Spy, seed: int, windows: list[dict[str, Any]]
) -> None:
    with store(tmp_path_factory.mktemp("w"), seed) as s:
        for w in windows:
            same(s, *window_args(s, w))


def test_an_intact_pull_of_32_takes_the_direct_path(tmp_path: Path, spy: Spy) -> None:
    with rmqlog.MessageStore.open(tmp_path, small_store_config()) as s:
        s.create_topic("T", 1)
        s.put_batch(pa.table({"topic": ["T"] * 200, "body": [b"x" * 40] * 200}), dispatch=True)
        before = spy.answered
        offset = 0
        disk = DiskLimits(1 << 40, 8, 64 * 1024)
        while offset < 200:
            got = same(
                s, 0, offset, {"max_count": 32, "max_bytes": 256 * 1024, "raw": True, "tags": None, "disk": disk}
            )
            assert got[0] is S.FOUND
            offset = got[1]
        # windows of 32 cut at each consume-queue file's end (RocketMQ's): 32, 18, 32, 18...
        assert spy.answered - before == 8


DAMAGE = st.fixed_dictionaries(
    {
        "where": st.sampled_from(["unit", "record"]),
        "pick": st.floats(0, 1),
        "byte": st.floats(0, 1),
        "value": st.integers(0, 255),
        "filler": st.booleans(),
    }
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=DAMAGE, windows=st.lists(WINDOWS, min_size=3, max_size=3))
def test_damage_is_answered_alike(
    damaged_store: rmqlog.MessageStore, damage: dict[str, Any], windows: list[dict[str, Any]]
) -> None:
    """One byte of a unit or of a record (header, body, topic, properties) changed, or a unit
    made a filler: whatever each path then answers or raises, the other does too."""
    s = damaged_store
    cq = s.consume_queue("T", 0)
    hi = s.max_offset("T", 0)
    logical = int(damage["pick"] * (hi - 1))
    if damage["where"] == "unit" or damage["filler"]:
        path = cq.directory / f"{logical // PER_FILE * SMALL_CQ:020d}"
        at = logical % PER_FILE * CQ_UNIT_SIZE
        if damage["filler"]:
            at, new = at + 8, FILLER_SIZE.to_bytes(4, "big")
        else:
            at, new = at + int(damage["byte"] * (CQ_UNIT_SIZE - 1)), bytes([damage["value"]])
    else:
        unit = s.consume_queue("T", 0).read(logical, 1)
        off, size = int(unit["offset"][0]), int(unit["size"][0])
        seg = off - off % s.config.mapped_file_size_commit_log
        path = s.parts.paths.commitlog_dir / f"{seg:020d}"
        at, new = off - seg + int(damage["byte"] * (size - 1)), bytes([damage["value"]])
    fd = os.open(path, os.O_RDWR)
    try:
        old = os.pread(fd, len(new), at)
        os.pwrite(fd, new, at)
        try:
            for w in windows:
                same(s, *window_args(s, {**w, "queue_id": 0}, near=logical))
        finally:
            os.pwrite(fd, old, at)
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def damaged_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rmqlog.MessageStore]:
    """A store whose queue T/0 the damage test changes a byte of, then restores."""
    with store(tmp_path_factory.mktemp("d"), 7) as s:
        s.put_batch(
            pa.table(
                {
                    "topic": ["T"] * 120,
                    "queueId": pa.array([0] * 120, pa.int32()),
                    "body": [os.urandom(100) for _ in range(120)],
                }
            ),
            dispatch=True,
        )
        yield s


def test_without_the_c_helper_the_general_read_answers(
    tmp_path: Path, spy: Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(small_window, "_native_copy", None)
    with rmqlog.MessageStore.open(tmp_path, small_store_config()) as s:
        s.create_topic("T", 1)
        s.put_batch(pa.table({"topic": ["T"] * 40, "body": [b"x" * 40] * 40}), dispatch=True)
        before = spy.answered
        got = same(s, 0, 0, {"max_count": 32, "raw": True, "tags": None})
        assert (got[0], got[1], spy.answered) == (S.FOUND, 32, before)
