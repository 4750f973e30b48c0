"""The timer's index damaged: ``timer/log``, ``timer/wheel`` and
``timer/state`` deleted, truncated, zeroed, with a bad link, a bad slot, a state that does not
match them or the timer queue, after a clean close or met by a pass of an open store. The
timer queue is the truth: every pending timed message is delivered exactly once, never
before its time, at a normal open as with ``repair=True``. See tests/timed_store.py for the
store and the passes (driven by the scheduler's clock, never by waiting)."""

from __future__ import annotations

import os
import shutil
import struct
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from timed_store import (
    CFG,
    LAST,
    SECOND,
    N,
    deliver_after,
    delivered,
    make_timed_store,
    run_pass,
    timer_wheel,
)

import rmqlog
from rmqlog.schedule import timer as timer_module
from rmqlog.schedule import timer_wheel as timer_wheel_module
from rmqlog.schedule.timer_wheel import ENTRY, SLOT, TimerWheel

# --------------------------------------------------------------------------- the files


def _file(root: Path, name: str) -> Path:
    return root / "timer" / name


def _slots(root: Path) -> np.ndarray:
    return np.fromfile(_file(root, "wheel"), SLOT)


def _entries(root: Path) -> np.ndarray:
    return np.fromfile(_file(root, "log"), ENTRY)


def _write_at(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _pending_slot(root: Path) -> int:
    """The slot of the first bucket pending (a chain of two): the first a pass walks."""
    state = timer_wheel(root).load()
    assert state is not None
    slots = _slots(root)
    live = np.flatnonzero((slots["count"] == 2) & (slots["time"] > state.delivered))
    return int(live[np.argmin(slots["time"][live])])


def _chain(root: Path) -> tuple[int, int]:
    """(head, the older entry) of a pending bucket's chain of two."""
    head = int(_slots(root)["last"][_pending_slot(root)])
    return head, int(_entries(root)["prev"][head])


def _set_prev(root: Path, entry: int, value: int) -> None:
    _write_at(_file(root, "log"), entry * ENTRY.itemsize, struct.pack("<q", value))


def _other_bucket_entry(root: Path, head: int) -> int:
    """The older entry of another pending bucket (its ``prev`` is -1)."""
    entries = _entries(root)
    bucket = entries["due"] // CFG.timer_precision_ms
    older = np.flatnonzero((entries["prev"] == -1) & (bucket != bucket[head]))
    return int(older[-1])


def _craft(root: Path, **changes: int) -> None:
    """Change numbers of the state, with a valid CRC (what no damage can do: a state from
    another store or another time)."""
    wheel = timer_wheel(root)
    state = wheel.load()
    assert state is not None
    for name, value in changes.items():
        setattr(state, name, getattr(state, name) + value)
    wheel.save(state)


def _first_format_state(root: Path) -> None:
    """The first format's state (``RMQTIMR1``: no CRC of the files, no geometry beyond the
    slot count), made from the present one: never read, the index is rebuilt."""
    state = timer_wheel(root).load()
    assert state is not None
    body = struct.pack(
        "<8sqqqqqi", b"RMQTIMR1", state.enqueued, state.log_end, state.delivered, state.pending, state.slots, 0
    )
    _file(root, "state").write_bytes((body + struct.pack("<I", zlib.crc32(body))).ljust(64, b"\0"))


def _flip(path: Path, at: int, bit: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 1 << bit
    path.write_bytes(bytes(data))


#: each way the files can be damaged after a clean close, applied to the store's root
DAMAGE: dict[str, Callable[[Path], object]] = {
    "wheel deleted": lambda r: _file(r, "wheel").unlink(),
    "wheel truncated": lambda r: os.truncate(_file(r, "wheel"), _pending_slot(r) * SLOT.itemsize + 5),
    "wheel emptied": lambda r: os.truncate(_file(r, "wheel"), 0),
    "wheel zeroed": lambda r: _file(r, "wheel").write_bytes(bytes(_file(r, "wheel").stat().st_size)),
    "a pending slot zeroed": lambda r: _write_at(_file(r, "wheel"), _pending_slot(r) * SLOT.itemsize, bytes(24)),
    "a pending slot's count huge": lambda r: _write_at(
        _file(r, "wheel"), _pending_slot(r) * SLOT.itemsize + 16, struct.pack("<q", 2**62)
    ),
    "log deleted": lambda r: _file(r, "log").unlink(),
    "log truncated mid-entry": lambda r: os.truncate(_file(r, "log"), 50),
    "log emptied": lambda r: os.truncate(_file(r, "log"), 0),
    "log zeroed": lambda r: _write_at(_file(r, "log"), 40, bytes(_file(r, "log").stat().st_size - 40)),
    "a link made a cycle": lambda r: _set_prev(r, _chain(r)[1], _chain(r)[0]),
    "a link to itself": lambda r: _set_prev(r, _chain(r)[0], _chain(r)[0]),
    "a link out of the log": lambda r: _set_prev(r, _chain(r)[0], 10**6),
    "a link into another bucket": lambda r: _set_prev(r, _chain(r)[0], _other_bucket_entry(r, _chain(r)[0])),
    "a due time moved earlier": lambda r: _write_at(
        _file(r, "log"), _chain(r)[0] * ENTRY.itemsize + 8, struct.pack("<q", int(_entries(r)["due"].min()) - 3000)
    ),
    "a commitlog offset flipped": lambda r: _flip(_file(r, "log"), _chain(r)[0] * ENTRY.itemsize + 16, 3),
    "state deleted": lambda r: _file(r, "state").unlink(),
    "state zeroed": lambda r: _file(r, "state").write_bytes(bytes(_file(r, "state").stat().st_size)),
    "state flipped": lambda r: _flip(_file(r, "state"), 9),
    "state of the first format": _first_format_state,
    "state counting more entries than the log": lambda r: _craft(r, log_end=1000, pending=1000),
    "state enqueued past the queue's end": lambda r: _craft(r, enqueued=40),
    "state enqueued past units it never indexed": lambda r: _craft(r, enqueued=3),
    "timer folder deleted": lambda r: shutil.rmtree(r / "timer"),
}


@pytest.mark.parametrize("repair", [False, True], ids=["open", "repair"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_index_after_a_clean_close_delivers_each_once(tmp_path: Path, damage: str, repair: bool) -> None:
    root = tmp_path / "s"
    timed = make_timed_store(root)
    DAMAGE[damage](root)
    out = deliver_after(root, timed, repair=repair)
    assert out.ok, out


def test_an_index_of_another_store_is_not_trusted(tmp_path: Path) -> None:
    """The three files of another store (its entries point at other commitlog offsets): the
    state's last enqueued unit is not this queue's, the index is rebuilt."""
    timed = make_timed_store(tmp_path / "s")
    make_timed_store(tmp_path / "other", prefix=b"o", extra_first=3)
    shutil.rmtree(tmp_path / "s" / "timer")
    shutil.copytree(tmp_path / "other" / "timer", tmp_path / "s" / "timer")
    out = deliver_after(tmp_path / "s", timed)
    assert out.ok, out


def test_a_state_older_than_its_files_is_not_trusted(tmp_path: Path) -> None:
    """``timer/state`` put back from before a pass that indexed more (a restored copy): its
    log and wheel hold entries it does not count, which linked again would loop."""
    root = tmp_path / "s"
    timed = make_timed_store(root)
    old = _file(root, "state").read_bytes()
    with rmqlog.MessageStore.open(root, CFG) as s:
        assert run_pass(s, timed.t0 + 12_000) == 4  # and indexes the later ones
    _file(root, "state").write_bytes(old)
    out = deliver_after(root, timed)
    assert out.ok, out


# --------------------------------------------------------------------------- met by a pass


LINKS: dict[str, Callable[[Path], object]] = {
    k: DAMAGE[k]
    for k in (
        "a link made a cycle",
        "a link to itself",
        "a link out of the log",
        "a link into another bucket",
        "a pending slot's count huge",
    )
}


@pytest.mark.parametrize("walk", ["c", "numpy"])
@pytest.mark.parametrize("damage", list(LINKS))
def test_a_bad_link_met_by_a_pass_rebuilds_the_index(
    tmp_path: Path,
    damage: str,
    walk: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Damage made while the store is open, after its first pass checked the files: the chain
    walk itself (the C helper's and the numpy one) finds it, and the pass rebuilds the index
    before delivering anything: no message twice, no loop, none lost."""
    if walk == "numpy":
        monkeypatch.setattr(timer_wheel_module, "_native_walk_chains", None)
    elif timer_wheel_module._native_walk_chains is None:
        pytest.skip("the C helper is not built")
    root = tmp_path / "s"
    timed = make_timed_store(root)
    with rmqlog.MessageStore.open(root, CFG) as s:
        assert run_pass(s, timed.t0 + 12_000) == 4  # checked the files; indexed the later ones
        LINKS[damage](root)
        run_pass(s, timed.t0 + SECOND)
        assert set(delivered(s)) == timed.due_by(timed.t0 + SECOND)
        run_pass(s, timed.t0 + LAST)
        got = delivered(s)
    assert got == Counter(dict.fromkeys(timed.due, 1))


def _wheel_with_chains(directory: Path) -> tuple[TimerWheel, timer_wheel_module.TimerState]:
    """A wheel of 10 slots (1 s buckets) with 200 entries over 7 buckets, added in 3 steps."""
    wheel = TimerWheel(directory, slots=10, precision_ms=1000)
    state = timer_wheel_module.TimerState(slots=10)
    rng = np.random.default_rng(7)
    for step in range(3):
        due = 1000 + rng.integers(0, 7000, 200 // 3 + (step == 0) * 2)
        n = len(due)
        wheel.add(state, due, np.arange(n) * 100, np.arange(state.log_end, state.log_end + n), np.full(n, 100))
    return wheel, state


@pytest.mark.parametrize(
    "damage",
    ["none", "cycle", "self", "forward", "past the log", "below -1", "early end", "late end", "another bucket"],
)
def test_the_c_walk_and_the_numpy_walk_check_the_same(
    tmp_path: Path, damage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if timer_wheel_module._native_walk_chains is None:
        pytest.skip("the C helper is not built")
    wheel, state = _wheel_with_chains(tmp_path / "timer")
    log = _file(tmp_path, "log")
    entries = np.fromfile(log, ENTRY)
    head = int(_slots(tmp_path)["last"][3])  # bucket 3 s: a chain of about 30
    second = int(entries["prev"][head])
    tail = second
    while entries["prev"][tail] != -1:
        tail = int(entries["prev"][tail])
    other = int(_slots(tmp_path)["last"][5])
    new_prev = {
        "cycle": (tail, head),
        "self": (head, head),
        "forward": (second, state.log_end - 1),
        "past the log": (head, state.log_end + 5),
        "below -1": (head, -7),
        "early end": (second, -1),
        "late end": (tail, other),
        "another bucket": (head, other),
    }.get(damage)
    if new_prev is not None:
        _set_prev(tmp_path, *new_prev)
    answers = []
    for native in (True, False):
        if not native:
            monkeypatch.setattr(timer_wheel_module, "_native_walk_chains", None)
        try:
            answers.append(np.sort(wheel.due_between(state, 0, 9000)["queueOffset"]).tolist())
        except timer_wheel_module.TimerIndexDamaged:
            answers.append("damaged")
    assert answers[0] == answers[1]
    assert answers[0] == (list(range(state.log_end)) if damage == "none" else "damaged")


# --------------------------------------------------------------------------- processes, kills, repair


def test_a_pass_of_another_open_store_does_not_strand_what_this_one_indexed(tmp_path: Path) -> None:
    """Two opens of one store take turns: one drains the index (its files start again empty,
    a new generation), the other, with the old files still mapped, indexes a new message;
    the first must find it (the mappings follow the files, not the ones of its last pass)."""
    root = tmp_path / "s"
    timed = make_timed_store(root)
    t0 = timed.t0
    with rmqlog.MessageStore.open(root, CFG) as a, rmqlog.MessageStore.open(root, CFG) as b:
        run_pass(a, t0 + 12_000)  # a maps the files
        assert run_pass(b, t0 + LAST) == len(timed.due) - 14  # b drains them: the log and wheel start again
        assert timer_wheel(root).load().log_end == 0
        late = t0 + LAST + 30_000
        b.put_batch(pa.table({"topic": ["T"], "body": [b"new"], "deliverTime": pa.array([late], pa.int64())}))
        run_pass(a, late - 20_000)  # a indexes it
        assert run_pass(b, late + 1) == 1
        assert delivered(b)[b"new"] == 1


def test_a_pass_killed_inside_one_due_time_then_the_index_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass dies after its second batch inside one due time, then the wheel is deleted:
    the rebuild resumes inside that millisecond (the writer ``timer``'s sequence)."""
    root = tmp_path / "s"
    timed = make_timed_store(root)
    t0 = timed.t0
    same = {b"same%02d" % i: t0 + 40_000 for i in range(20)}
    with rmqlog.MessageStore.open(root, CFG) as s:
        s.put_batch(pa.table({"topic": ["T"] * 20, "body": list(same), "deliverTime": pa.array([t0 + 40_000] * 20)}))
        assert run_pass(s, t0 + 30_000) == len(timed.due) - 10  # every other one; the 20 indexed
        monkeypatch.setattr(timer_module, "STEP", 8)
        real_append = timer_module.TimerDelivery._append
        calls: list[int] = []

        def dying(self, *args):  # noqa: ANN001, ANN202
            if len(calls) == 2:
                raise KeyboardInterrupt("killed")
            calls.append(args[-1])
            return real_append(self, *args)

        monkeypatch.setattr(timer_module.TimerDelivery, "_append", dying)
        with pytest.raises(KeyboardInterrupt):
            run_pass(s, t0 + 41_000)
        assert calls == [(t0 + 40_000) << 20 | 8, (t0 + 40_000) << 20 | 16]
        monkeypatch.setattr(timer_module.TimerDelivery, "_append", real_append)
    _file(root, "wheel").unlink()
    with rmqlog.MessageStore.open(root, CFG) as s:
        assert run_pass(s, t0 + 41_000) == 4
        got = delivered(s)
        state = timer_wheel(root).load()
    assert got == Counter(dict.fromkeys([*timed.due, *same], 1))
    assert state is not None and state.pending == 0 and state.log_end == 0  # drained: the log is empty again


def test_repair_rebuilds_the_index_even_when_it_looks_sound(tmp_path: Path) -> None:
    root = tmp_path / "s"
    timed = make_timed_store(root)
    assert timer_wheel(root).load() is not None
    with rmqlog.MessageStore.open(root, CFG, repair=True) as s:
        assert timer_wheel(root).load() is None  # the next pass rebuilds it from the timer queue
        run_pass(s, timed.t0 + LAST)
        assert delivered(s) == Counter(dict.fromkeys(timed.due, 1))
        state = timer_wheel(root).load()
    assert state is not None and state.enqueued == N + 6


def test_a_state_of_another_precision_is_not_read(tmp_path: Path) -> None:
    """Wheels of two geometries can have as many slots (120 s at 1 s, 240 s at 2 s): the
    bucket size is part of the state, and a state of another one is rebuilt, never misread."""
    wheel = TimerWheel(tmp_path / "timer", slots=3840, precision_ms=1000)
    state = wheel.new_state(0, 0)
    state.dirty = False
    wheel.save(state)
    assert wheel.load() is not None
    assert TimerWheel(tmp_path / "timer", slots=3840, precision_ms=2000).load() is None
