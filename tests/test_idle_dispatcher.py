"""The store's idle dispatcher: an idle round of the background
dispatcher costs one look at the append state's token (no lock, no file opened, no JSON, no
listing), whatever changes the published tail (this process's puts, another writer's, a
rewrite of ``append.state``) makes the next round a full one, and an in-process put wakes the
dispatcher at once; with services started, a watch of ``append.state`` (inotify) wakes it for
another writer's publish, and idle rounds come once a second. Rounds are driven by
``run_once(now)``; the threaded tests wait for an event, never for time to pass."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import rmqlog
import rmqlog.queue.append_watch as append_watch
import rmqlog.queue.dispatcher as dispatcher_module
import rmqlog.safe_open as safe_open
from rmqlog.fileio import InterProcessLock
from rmqlog.log.append_state import AppendState, AppendStateFile
from rmqlog.queue.append_watch import AppendWatch
from rmqlog.service import ServiceLoop

ROW = pa.table({"topic": ["T"], "queueId": [0], "body": [b"x"]})


def rows(topic: str, queue_id: int, n: int = 1) -> pa.Table:
    return pa.table({"topic": [topic] * n, "queueId": [queue_id] * n, "body": [b"m"] * n})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[rmqlog.MessageStore]:
    with rmqlog.MessageStore.open(tmp_path / "s", clock=rmqlog.ManualClock()) as s:
        yield s


class Counts:
    """Counts what a round does that costs: locks, files opened, folders walked or listed, JSON parsed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = {"lock": 0, "open": 0, "walk": 0, "listdir": 0, "json": 0}

        def counting(key: str, fn):  # noqa: ANN001, ANN202 - a pass-through wrapper
            def wrapper(*a, **k):  # noqa: ANN002, ANN003, ANN202
                self.n[key] += 1
                return fn(*a, **k)

            return wrapper

        monkeypatch.setattr(InterProcessLock, "acquire", counting("lock", InterProcessLock.acquire))
        monkeypatch.setattr(safe_open, "open_file", counting("open", safe_open.open_file))
        monkeypatch.setattr(safe_open, "_base_fd", counting("walk", safe_open._base_fd))
        monkeypatch.setattr(os, "listdir", counting("listdir", os.listdir))
        monkeypatch.setattr(json, "loads", counting("json", json.loads))

    def reset(self) -> None:
        for k in self.n:
            self.n[k] = 0

    @property
    def total(self) -> int:
        return sum(self.n.values())


# ------------------------------------------------------------------ the idle round
def test_an_idle_round_takes_no_lock_and_reads_no_file(
    store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = store.dispatcher
    store.put_batch(ROW)
    assert d.run_once(10.0) is True  # the put's record: a full round
    assert d.run_once(10.001) is False  # caught up: this full round remembers the token
    counts = Counts(monkeypatch)
    for i in range(50):
        assert d.run_once(10.002 + i / 1000) is False
    assert counts.n == {"lock": 0, "open": 0, "walk": 0, "listdir": 0, "json": 0}
    # the counters do count: a put makes the next round a full one, under the lock
    store.put_batch(ROW)
    counts.reset()
    assert d.run_once(10.1) is True
    assert counts.n["lock"] >= 1 and counts.n["json"] >= 1
    assert d.position() == store.published_tail() and store.max_offset("T", 0) == 2


def test_an_idle_round_still_does_a_full_look_once_a_second(
    store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The safety net (FULL_ROUND_S): a token that did not change is not trusted for longer."""
    d = store.dispatcher
    store.put_batch(ROW)
    d.run_once(0.0)
    d.run_once(0.0)  # the first round of an open store reads the state: its token is known from the second
    counts = Counts(monkeypatch)
    assert d.run_once(0.5) is False and counts.total == 0
    assert d.run_once(dispatcher_module.FULL_ROUND_S) is False
    assert counts.n["lock"] == 1  # a full round, which found nothing
    counts.reset()
    assert d.run_once(dispatcher_module.FULL_ROUND_S + 0.5) is False and counts.total == 0


def test_a_record_left_behind_is_never_skipped(store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A round bounded by DISPATCH_CHUNK leaves a backlog: no token is remembered, the next
    rounds go on (the fast path applies only once the position reached the published tail)."""
    monkeypatch.setattr(dispatcher_module, "DISPATCH_CHUNK", 512)
    d = store.dispatcher
    d.run_once(0.0)
    store.put_batch(rows("B", 1, 40))
    rounds = 0
    while d.run_once(0.001 * rounds):
        rounds += 1
    assert rounds > 2 and store.max_offset("B", 1) == 40 and d.position() == store.published_tail()


def test_recovery_moving_the_position_forgets_the_token(store: rmqlog.MessageStore) -> None:
    d = store.dispatcher
    store.put_batch(ROW)
    d.run_once(0.0)
    d.run_once(0.0)
    assert d._idle_at is not None
    with d.lock.held():
        d.set_position(d.position())
    assert d._idle_at is None


# ------------------------------------------------------------------ other writers
def _idle_after_one_put(s: rmqlog.MessageStore) -> tuple[list[tuple[str, int, int]], Any]:
    """Listen to arrivals, put one row, dispatch it, and check the next round is an idle one;
    returns what was heard and the dispatcher."""
    heard: list[tuple[str, int, int]] = []
    s.on_arrival(lambda t, q, m: heard.extend(zip(t, q.tolist(), m.tolist(), strict=True)))
    d = s.dispatcher
    s.put_batch(ROW)
    d.run_once(0.0)
    d.run_once(0.0)
    assert d.run_once(0.001) is False
    return heard, d


def test_another_writers_append_is_dispatched_and_signalled_in_the_next_round(tmp_path: Path) -> None:
    """A second open of the root (its own append.state descriptor, as a Spark sink's) appends
    without dispatching: the next idle round of the first sees the token move."""
    with rmqlog.MessageStore.open(tmp_path / "s") as s, rmqlog.MessageStore.open(tmp_path / "s") as other:
        heard, d = _idle_after_one_put(s)
        assert heard == [("T", 0, 1)]
        other.put_batch(rows("T", 2, 3))
        assert d.run_once(0.002) is True
        assert heard[-1] == ("T", 2, 3) and s.max_offset("T", 2) == 3


def test_another_dispatchers_progress_is_still_signalled(tmp_path: Path) -> None:
    """The other writer dispatches its own records (``dispatch=True``): nothing is left to
    dispatch here, but the tail moved, so the round looks and the listener hears of them."""
    with rmqlog.MessageStore.open(tmp_path / "s") as s, rmqlog.MessageStore.open(tmp_path / "s") as other:
        heard: list[tuple[str, int, int]] = []
        s.on_arrival(lambda t, q, m: heard.extend(zip(t, q.tolist(), m.tolist(), strict=True)))
        d = s.dispatcher
        d.run_once(0.0)
        s.put_batch(ROW)
        d.run_once(0.0)
        d.run_once(0.0)
        other.put_batch(rows("U", 1, 2), dispatch=True)
        assert s.dispatcher.position() == s.published_tail()  # already dispatched by the other
        assert d.run_once(0.001) is False  # nothing to dispatch...
        assert ("U", 1, 2) in heard  # ...but the arrival is signalled


def test_a_rewritten_append_state_is_noticed(tmp_path: Path) -> None:
    """A state written to a new file and renamed over (a first-format file converted, slots
    too small): the old descriptor's file has no link left, so the token is unknown and the
    round looks."""
    with rmqlog.MessageStore.open(tmp_path / "s") as s, rmqlog.MessageStore.open(tmp_path / "s") as other:
        d = s.dispatcher
        s.put_batch(ROW)
        d.run_once(0.0)
        d.run_once(0.0)
        assert d._idle_at is not None
        state_file = other.parts.state_file
        with other.parts.append_lock.held():
            state = state_file.load()
            assert state is not None
            before = state.ino
            state.writers.update({f"w{i:06d}": 1 for i in range(6000)})
            state_file._rewrite(state, state.to_bytes(), durable=False)  # noqa: SLF001 - a new file, renamed over
        assert state_file.load().ino != before  # type: ignore[union-attr]
        assert s.parts.state_file.version() is None
        other.put_batch(rows("T", 3))
        assert d.run_once(0.001) is True and s.max_offset("T", 3) == 1
        d.run_once(0.002)
        assert d.run_once(0.003) is False and d._idle_at is not None  # the new file's token from then on


FOREIGN = """
import sys, pyarrow as pa, rmqlog
with rmqlog.MessageStore.open(sys.argv[1]) as s:
    s.put_batch(pa.table({"topic": ["P"], "queueId": [1], "body": [b"from another process"]}))
"""


def test_another_process_append_is_dispatched_in_the_next_round(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        heard, d = _idle_after_one_put(s)
        subprocess.run([sys.executable, "-c", FOREIGN, str(root)], check=True, timeout=120)
        assert d.run_once(0.002) is True
        assert ("P", 1, 1) in heard and s.max_offset("P", 1) == 1


def test_the_fast_path_never_misses_what_a_full_round_would_dispatch(tmp_path: Path) -> None:
    """Random appends by this process and another open (with and without their own dispatch),
    idle rounds between: after each round the position is the published tail and the listener
    has heard every queue's end, as if every round were a full one."""
    rng = random.Random(29)
    with rmqlog.MessageStore.open(tmp_path / "s") as s, rmqlog.MessageStore.open(tmp_path / "s") as other:
        heard: dict[tuple[str, int], int] = {}

        def listener(t: list[str], q: np.ndarray, m: np.ndarray) -> None:
            for key, end in zip(zip(t, q.tolist(), strict=True), m.tolist(), strict=True):
                heard[key] = max(heard.get(key, 0), end)

        s.on_arrival(listener)
        d = s.dispatcher
        now = 0.0
        for _ in range(60):
            op = rng.choice(["mine", "other", "other-dispatch", "idle", "idle"])
            if op != "idle":
                writer = s if op == "mine" else other
                writer.put_batch(
                    rows(rng.choice("XY"), rng.randrange(4), rng.randrange(1, 4)), dispatch=op == "other-dispatch"
                )
            now += 0.001
            while d.run_once(now):
                now += 0.001
            assert d.position() == s.published_tail()
            ends = {(t, q): s.max_offset(t, q) for t in "XY" for q in range(4) if s.max_offset(t, q)}
            assert heard == ends


# ------------------------------------------------------------------ the token
def test_the_append_state_token_changes_with_every_publish(tmp_path: Path) -> None:
    f = AppendStateFile(tmp_path / "append.state")
    try:
        assert f.version() is None  # nothing read yet
        f.publish(AppendState(tail=10))
        assert f.load() is not None
        v1 = f.version()
        assert v1 is not None and f.version() == v1
        state = f.load()
        assert state is not None
        state.tail = 20
        f.publish(state)
        v2 = f.version()
        assert v2 is not None and v2 != v1
        reader = AppendStateFile(tmp_path / "append.state")  # another process's view
        try:
            reader.load()
            seen = reader.version()
            state = f.load()
            assert state is not None
            state.tail = 30
            f.publish(state)
            assert seen is not None and reader.version() is None  # published since it loaded: not a token it saw
            reader.load()
            assert reader.version() not in (None, seen)
        finally:
            reader.close()
    finally:
        f.close()


# ------------------------------------------------------------------ the wake-up
def test_an_in_process_put_wakes_the_dispatcher(store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    woken: list[object] = []
    monkeypatch.setattr(store.services, "wake", woken.append)
    store.put_batch(ROW)
    assert woken == [store.dispatcher]
    store.put_batch(ROW, dispatch=True)  # dispatched by the put itself: no wake
    assert woken == [store.dispatcher]
    store.put_wire(ROW)
    assert woken == [store.dispatcher, store.dispatcher]


def test_a_put_is_dispatched_at_once_by_the_woken_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With an hour between idle rounds (and a clock that never moves) and no watch of
    append.state, only the put's wake can make the started dispatcher take its record."""
    monkeypatch.setattr(append_watch, "LOCAL_FILE_SYSTEMS", frozenset())  # no watch: the put's own wake
    cfg = rmqlog.StoreConfig(reput_interval_ms=3_600_000)
    with rmqlog.MessageStore.open(tmp_path / "s", cfg, clock=rmqlog.ManualClock()) as s:
        arrived = threading.Event()
        s.on_arrival(lambda t, q, m: arrived.set() if "W" in t else None)
        s.start_services()
        assert s.dispatcher._watch is None
        s.put_batch(rows("W", 0))
        assert arrived.wait(60), "the started dispatcher did not take the put's record"
        assert s.max_offset("W", 0) == 1


# ------------------------------------------------------------------ the watch of append.state
def test_the_watch_wakes_on_a_publish_and_on_a_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "append.state"
    woken = threading.Semaphore(0)
    watch = AppendWatch.start(path, woken.release)  # before the file exists: its creation is seen
    assert watch is not None, "this test's folder is on a local file system: it must be watched"
    writer = AppendStateFile(path)
    try:
        writer.publish(AppendState(tail=1))  # created (a new file renamed in)
        assert woken.acquire(timeout=60)
        state = writer.load()
        assert state is not None
        state.tail = 2
        writer.publish(state)  # in place (pwrite)
        assert woken.acquire(timeout=60)
        state = writer.load()
        assert state is not None
        state.writers.update({f"w{i:06d}": 1 for i in range(6000)})  # outgrows the slots: a new file
        writer.publish(state)
        assert woken.acquire(timeout=60)
        state = writer.load()
        assert state is not None
        state.tail = 3
        writer.publish(state)  # in place, in the new file: still watched
        assert woken.acquire(timeout=60)
        assert not watch.failed
    finally:
        watch.close()
        writer.close()
    watch.close()  # idempotent


def test_no_watch_where_other_hosts_may_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(append_watch, "LOCAL_FILE_SYSTEMS", frozenset())  # as on NFS
    assert AppendWatch.start(tmp_path / "append.state", lambda: None) is None
    with rmqlog.MessageStore.open(tmp_path / "s") as s:
        s.start_services()
        assert s.dispatcher.interval_s == 0.001  # polled, as before
        s.stop_services()


def test_with_the_watch_idle_rounds_come_once_a_second_and_a_failed_watch_polls_again(tmp_path: Path) -> None:
    with rmqlog.MessageStore.open(tmp_path / "s") as s:
        d = s.dispatcher
        s.start_services()
        assert d._watch is not None and d.interval_s == dispatcher_module.FULL_ROUND_S
        d._watch.failed = True  # (what the watch's thread sets when it stops on its own)
        d.run_once(0.0)
        assert d._watch is None and d.interval_s == 0.001
        s.stop_services()
        assert d.interval_s == 0.001


def test_another_writers_put_wakes_the_watching_dispatcher(tmp_path: Path) -> None:
    """An hour between rounds: only the watch of append.state can make the started dispatcher
    take what another open of the root (another process, as far as this store knows) appended."""
    cfg = rmqlog.StoreConfig(reput_interval_ms=3_600_000)
    with (
        rmqlog.MessageStore.open(tmp_path / "s", cfg, clock=rmqlog.ManualClock()) as s,
        rmqlog.MessageStore.open(tmp_path / "s", cfg) as other,
    ):
        arrived = threading.Event()
        s.on_arrival(lambda t, q, m: arrived.set() if "F" in t else None)
        s.start_services()
        assert s.dispatcher._watch is not None
        other.put_batch(rows("F", 1))
        assert arrived.wait(60), "the watching dispatcher did not take another writer's record"
        assert s.max_offset("F", 1) == 1
        s.stop_services()
        assert s.dispatcher._watch is None


def test_the_watch_wakes_no_round_for_this_process_s_direct_puts_and_one_for_another_writer(tmp_path: Path) -> None:
    """A direct put dispatches itself: the watch of append.state, which hears every publish,
    wakes no round for it (the newest state is this process's own, and dispatched); another
    open's put, after ours, still wakes one at once, and its record is taken."""
    cfg = rmqlog.StoreConfig(reput_interval_ms=3_600_000)
    with rmqlog.MessageStore.open(tmp_path / "s", cfg) as s, rmqlog.MessageStore.open(tmp_path / "s", cfg) as other:
        s.create_topic("F", 2)
        d = s.dispatcher
        woken = threading.Event()
        wakes: list[int] = []

        def wake() -> None:
            wakes.append(1)
            woken.set()

        detach = d.attach(wake)
        try:
            assert d._watch is not None
            s.put_messages([rmqlog.WireMessage("F", 0, b"first")])  # dispatched at once by itself
            woken.wait(0.5)  # (attach's own first wake; then the watch's, if any, would come)
            for i in range(20):  # apart, so that the watch reads each publish's event on its own
                s.put_messages([rmqlog.WireMessage("F", 0, b"m%d" % i)])
                time.sleep(0.01)
            time.sleep(0.2)  # the watch's events for these publishes, read by now
            before = len(wakes)
            # (attach's own wake; a rare other one. The watch thread, woken by a publish's
            # write while that publish's token is not recorded yet, takes it as this process's
            # own while the publish runs: before that, 3-9 wakes here under load, now 1-2)
            assert before <= 4, f"the watch woke a round {before} times for 20 of this process's own direct puts"
            woken.clear()
            other.put_batch(rows("F", 1))  # another writer's publish, after ours
            assert woken.wait(60), "the watch did not wake a round for another writer's publish"
            assert d.run_once(time.monotonic()) is True and s.max_offset("F", 1) == 1
        finally:
            detach()


@dataclass(eq=False)
class Attachable:
    name: str = "attachable"
    interval_s: float = 1.0
    repeat_when_busy: bool = False
    wait_first: bool = False
    last_error: BaseException | None = None
    wakes: list[Callable[[], object]] = field(default_factory=list)
    detached: int = 0
    runs: list[float] = field(default_factory=list)

    def run_once(self, now: float) -> bool:
        self.runs.append(now)
        return False

    def attach(self, wake: Callable[[], object]) -> Callable[[], None]:
        self.wakes.append(wake)

        def detach() -> None:
            self.detached += 1

        return detach


def test_the_loop_attaches_a_service_and_detaches_it_when_removed() -> None:
    loop = ServiceLoop(clock=lambda: 0.0, threaded=False)
    a, b = Attachable(), Attachable()
    loop.add(a)
    loop.add(a)  # added once: attached once
    loop.add(b)
    assert len(a.wakes) == 1 and len(b.wakes) == 1
    assert loop.run_due(0.0) == 1.0 and a.runs == [0.0] and b.runs == [0.0]
    a.wakes[0]()  # the service's wake: due now
    loop.run_due(0.5)
    assert a.runs == [0.0, 0.5] and b.runs == [0.0]
    loop.remove(a)
    assert a.detached == 1
    loop.stop()
    assert b.detached == 1 and a.detached == 1


def test_a_watch_that_stops_wakes_the_dispatcher_which_polls_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch's thread fails (here: handling its events raises): it says so and wakes the
    dispatcher, which goes back to its polling interval and takes the other writer's record."""

    def broken(self: AppendWatch, data: bytes) -> bool:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(AppendWatch, "_handle", broken)
    # the system clock: once the watch is gone, polling every reput_interval_ms takes the
    # record whatever event the watch failed on (one before the publish, possibly)
    with rmqlog.MessageStore.open(tmp_path / "s") as s, rmqlog.MessageStore.open(tmp_path / "s") as other:
        s.put_batch(rows("G", 0), dispatch=True)  # the topic made now: the other's put only publishes
        arrived, reverted = threading.Event(), threading.Event()
        s.on_arrival(lambda t, q, m: arrived.set() if "G" in t else None)
        d = s.dispatcher
        run_once = d.run_once

        def watched_round(now: float) -> bool:
            before = d._watch  # (the services' first round may come before the watch is attached)
            busy = run_once(now)
            if before is not None and d._watch is None:
                reverted.set()
            return busy

        monkeypatch.setattr(d, "run_once", watched_round)
        s.start_services()
        assert d._watch is not None
        other.put_batch(rows("G", 0))
        # (the services' first round, at start, may take the record before the watch sees it)
        assert reverted.wait(60), "the failing watch did not wake the dispatcher"
        assert arrived.wait(60) and d.interval_s == 0.001 and s.max_offset("G", 0) == 2


def test_a_wake_during_the_round_runs_the_service_again_at_once() -> None:
    """A put's wake that comes while the dispatcher's round is running (which may have read the
    tail before that put published) must not be lost at the end of the round."""
    loop = ServiceLoop(clock=lambda: 5.0, threaded=False)
    svc = Attachable(interval_s=10.0)

    def round_woken(now: float) -> bool:
        svc.runs.append(now)
        if len(svc.runs) == 1:
            loop.wake(svc)  # what a put on another thread does meanwhile
        return False

    svc.run_once = round_woken  # type: ignore[method-assign]
    loop.add(svc)
    assert loop.run_due(5.0) == 5.0  # due again at once, not at 15.0
    assert loop.run_due(5.0) == 15.0 and svc.runs == [5.0, 5.0]


def test_a_publish_caught_mid_write_is_dispatched_in_the_next_round(tmp_path: Path) -> None:
    """A round that runs while another process's publish is half written (the new slot's
    header there, its JSON not yet: ``load()`` gives the previous state) must not record the
    new header as "seen": the next round, once the write is whole, dispatches (found by
    review: the rounds were skipped until the one-second safety net)."""
    with rmqlog.MessageStore.open(tmp_path / "s") as s:
        d, path = s.dispatcher, tmp_path / "s" / "append.state"
        s.put_batch(ROW)
        assert d.run_once(100.0) is True
        before = path.read_bytes()
        s.put_batch(ROW)
        after = path.read_bytes()
        at = next(i for i in range(len(before)) if before[i] != after[i])
        size = int.from_bytes(after[8:12], "big")  # the slots' size (the file's header)
        slot_at = 16 if at < 16 + size else 16 + size  # the slot the publish wrote
        torn = bytearray(before)
        torn[slot_at : slot_at + 16] = after[slot_at : slot_at + 16]
        path.write_bytes(bytes(torn))
        s.parts.state_file._cache = None  # (the writer had not yet remembered what it publishes)
        assert d.run_once(100.1) is False  # the previous state: nothing new to it
        path.write_bytes(after)
        assert d.run_once(100.2) is True  # not skipped as idle
        assert s.max_offset("T", 0) == 2
