"""The background services and the one loop that runs them (rmqlog.service), with a fake clock.

Services are driven by calling ``run_once(now)`` or ``ServiceLoop.run_due(now)``: no sleeps.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import small_store_config

import rmqlog
import rmqlog.queue.dispatcher as dispatcher_module
from rmqlog.durability.flush import AsyncFlusher
from rmqlog.service import ServiceLoop


@dataclass(eq=False)
class FakeService:
    name: str
    interval_s: float
    repeat_when_busy: bool = False
    wait_first: bool = False
    busy: list[bool] = field(default_factory=list)  # what successive rounds return (then False)
    fail: bool = False
    calls: list[float] = field(default_factory=list)
    last_error: BaseException | None = None

    def run_once(self, now: float) -> bool:
        self.calls.append(now)
        if self.fail:
            raise OSError(28, "No space left on device")
        return self.busy.pop(0) if self.busy else False


def test_services_run_when_due() -> None:
    now = [100.0]
    loop = ServiceLoop(clock=lambda: now[0], threaded=False)
    dispatcher = FakeService("d", 0.001, repeat_when_busy=True, busy=[True, True])
    flusher = FakeService("f", 0.5, wait_first=True, busy=[True])
    loop.add(dispatcher)
    loop.add(flusher)
    loop.add(dispatcher)  # a second add changes nothing
    assert loop.services == [dispatcher, flusher]
    # the dispatcher is due at once, the flusher one interval after it was added
    assert loop.run_due(100.0) == 100.0  # busy: due again at once
    assert dispatcher.calls == [100.0] and flusher.calls == []
    assert loop.run_due(100.0) == 100.0
    assert loop.run_due(100.0) == pytest.approx(100.001)  # idle now: after its interval
    assert dispatcher.calls == [100.0] * 3
    assert loop.run_due(100.0005) == pytest.approx(100.001)  # nothing due: nothing run
    assert len(dispatcher.calls) == 3
    assert loop.run_due(100.5) == pytest.approx(100.501)
    assert flusher.calls == [100.5]  # busy, but it does not repeat at once: every interval
    assert loop.run_due(100.9) == pytest.approx(100.901)
    assert flusher.calls == [100.5]
    loop.run_due(101.0)
    assert flusher.calls == [100.5, 101.0]


def test_a_failing_round_is_kept_and_the_service_keeps_running() -> None:
    loop = ServiceLoop(clock=lambda: 0.0, threaded=False)
    bad, good = FakeService("bad", 1.0, fail=True), FakeService("good", 1.0)
    loop.add(bad)
    loop.add(good)
    assert loop.run_due(0.0) == 1.0  # a failed round counts as idle
    assert isinstance(bad.last_error, OSError) and good.last_error is None
    assert good.calls == [0.0]  # the others still ran
    bad.fail = False
    loop.run_due(1.0)
    assert bad.calls == [0.0, 1.0]


def test_a_removed_service_does_not_run() -> None:
    loop = ServiceLoop(clock=lambda: 0.0, threaded=False)
    a, b = FakeService("a", 1.0), FakeService("b", 1.0)
    loop.add(a)
    loop.add(b)
    loop.remove(a)
    loop.remove(a)  # idempotent
    assert loop.run_due(5.0) == 6.0
    assert a.calls == [] and b.calls == [5.0]
    loop.stop()
    assert loop.services == [] and loop.run_due(10.0) == float("inf")


def _wait_for(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)  # (waits for the loop's thread)
    return True


def test_remove_returns_only_after_the_round_in_progress() -> None:
    """``stop_services()`` and ``close()`` rely on it: after them the service does not run."""
    loop = ServiceLoop()
    seen: dict[str, bool] = {}

    class Blocking(FakeService):
        def run_once(self, now: float) -> bool:
            remover = threading.Thread(target=loop.remove, args=(self,))
            remover.start()
            assert _wait_for(lambda: self not in loop.services)  # remove() has begun ...
            seen["remover_waited"] = remover.is_alive()  # ... and waits for this round
            seen["remover"] = remover  # type: ignore[assignment]
            return False

    service = Blocking("blocking", 0.001)
    loop.add(service)
    assert _wait_for(lambda: "remover" in seen)
    remover: threading.Thread = seen["remover"]  # type: ignore[assignment]
    remover.join(10)
    assert seen["remover_waited"] is True and not remover.is_alive()
    assert loop._thread is None  # the last service gone: the thread ended


def test_one_thread_per_store_ended_by_close(tmp_path: Path) -> None:
    def loops() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "rmq-services")

    before = loops()
    sync = small_store_config(flush_disk_type=rmqlog.SYNC_FLUSH)
    with rmqlog.MessageStore.open(tmp_path / "sync", sync) as s:
        assert loops() == before and s.flusher is None  # SYNC_FLUSH, no dispatcher: no thread
        s.start_services()
        s.start_services()
        assert loops() == before + 1 and s.services.services == [s.dispatcher, s.retention, s.scheduler]
        s.stop_services()
        assert loops() == before and s.services.services == []
    with rmqlog.MessageStore.open(tmp_path / "async", small_store_config()) as s:
        s.start_services()
        assert loops() == before + 1 and s.services.services == [
            s.flusher,
            s.dispatcher,
            s.retention,
            s.scheduler,
        ]  # one thread for all
        s.stop_services()
        assert s.services.services == [s.flusher]  # the flusher goes on
    assert loops() == before


def test_the_dispatcher_works_off_a_backlog_in_bounded_rounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatcher_module, "DISPATCH_CHUNK", 4096)
    with rmqlog.MessageStore.open(tmp_path, small_store_config()) as s:
        s.put_batch(pa.table({"topic": ["B"] * 100, "body": [b"x" * 200] * 100}))
        tail = s.published_tail()
        rounds = []
        while s.dispatcher.run_once(0.0):
            rounds.append(s.dispatcher.position())
        assert 5 <= len(rounds) < 100  # each round ~4 KiB of records, not all of them
        assert all(b - a <= 4096 for a, b in zip([0, *rounds], rounds, strict=False))
        assert rounds[-1] == tail and sum(s.max_offset("B", q) for q in range(4)) == 100
        assert s.dispatcher.run_once(1.0) is False  # up to date


def test_the_flusher_in_the_loop(tmp_path: Path) -> None:
    """The flusher's first round comes one interval after it is added; then every interval."""
    cfg = small_store_config(flush_interval_commit_log=3_600_000)
    with rmqlog.MessageStore.open(tmp_path, cfg) as s:
        now = [50.0]
        fl = AsyncFlusher(
            s.flush_service, interval_ms=500, least_pages=1, thorough_interval_ms=10_000, clock=lambda: now[0]
        )
        loop = ServiceLoop(clock=lambda: now[0], threaded=False)
        loop.add(fl)
        s.put_batch(pa.table({"topic": ["F"] * 100, "body": [b"y" * 100] * 100}))
        before = s.flushed_offset()
        assert loop.run_due(50.0) == 50.5 and s.flushed_offset() == before
        assert loop.run_due(50.5) == 51.0 and s.flushed_offset() == s.published_tail()
        assert fl.last_error is None
