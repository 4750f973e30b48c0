"""The store's clock (:mod:`rmqlog.clock`): given at open, read by every part that needs the
time, and how a test drives time with a :class:`rmqlog.ManualClock` instead of sleeping.

- store and born times are the clock's, and a store time never goes back within a store,
  not even when the clock does (or a store is reopened with a clock behind it);
- delayed and timed messages are delivered when the clock reaches their time, never before
  (a timed message: a pass covers up to the clock's time minus 1 ms);
- index files are named by the clock, the services' loop runs on its monotonic time;
- anything but a clock is refused, and a manual clock never advances backwards.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from conftest import small_store_config

import rmqlog
from rmqlog.index.index_service import file_name, index_file_names

T0 = 2_000_000_000_000  # 2033-05-18: far from the machine's clock, so only the store's clock can give it


def _stored(table: pa.Table, column: str = "storeTimestamp") -> list[int]:
    return [v.value // 1000 for v in table.column(column)]


def test_store_and_born_times_are_the_clocks_and_store_times_never_go_back(tmp_path: Path) -> None:
    clock = rmqlog.ManualClock(T0)
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, small_store_config(), clock=clock) as s:
        first = s.put_batch(pa.table({"topic": ["T"], "body": [b"a"]}))
        assert _stored(first) == [T0]
        clock.set(T0 - 10_000)  # the clock goes back ten seconds
        back = s.put("T", b"b", queue_id=0)
        assert int(back.store_timestamp.timestamp() * 1000) == T0  # not T0 - 10 s
        clock.advance(5)
        assert _stored(s.put_batch(pa.table({"topic": ["T"], "body": [b"c"]}))) == [T0]  # still behind T0
        clock.set(T0 + 7)
        assert _stored(s.put_batch(pa.table({"topic": ["T"], "body": [b"d"]}))) == [T0 + 7]
        s.dispatch()
        got = [m for q in range(4) for m in s.read_queue("T", q, 0, 10).to_pylist()]
        born = {m["body"]: int(m["bornTimestamp"].timestamp() * 1000) for m in got}
        # the born time is the producer's (the clock's, as it was): it may go back
        assert born == {b"a": T0, b"b": T0 - 10_000, b"c": T0 - 9_995, b"d": T0 + 7}
    # reopened with a clock a minute behind: the store's times still never go back
    with rmqlog.MessageStore.open(root, small_store_config(), clock=rmqlog.ManualClock(T0 - 60_000)) as s:
        assert int(s.put("T", b"e").store_timestamp.timestamp() * 1000) == T0 + 7


def test_a_delay_level_is_delivered_when_the_clock_reaches_it_never_before(tmp_path: Path) -> None:
    clock = rmqlog.ManualClock(T0)
    with rmqlog.MessageStore.open(tmp_path / "s", small_store_config(), clock=clock) as s:
        s.create_topic("T", 1)
        s.put("T", b"in-a-second", delay_level=1)  # level 1: 1 s
        assert s.deliver_due() == 0
        clock.advance(999)
        assert s.deliver_due() == 0 and s.max_offset("T", 0) == 0
        clock.advance(1)  # stored at T0, due at T0 + 1000
        assert s.deliver_due() == 1
        s.dispatch()
        [copy] = s.read_queue("T", 0, 0, 10).to_pylist()
        assert copy["body"] == b"in-a-second" and int(copy["storeTimestamp"].timestamp() * 1000) == T0 + 1000


def test_a_timed_message_is_delivered_when_the_clock_passes_its_time_never_before(tmp_path: Path) -> None:
    clock = rmqlog.ManualClock(T0)
    with rmqlog.MessageStore.open(tmp_path / "s", small_store_config(), clock=clock) as s:
        s.create_topic("T", 1)
        s.put("T", b"timed", deliver_time_ms=T0 + 5000)
        s.dispatch()
        assert (s.max_offset("rmq_sys_wheel_timer", 0), s.max_offset("T", 0)) == (1, 0)  # it waits: ahead by the clock
        clock.set(T0 + 5000)
        # a pass covers the time up to the clock minus 1 ms, even when asked for more
        assert s.deliver_due() == 0 and s.deliver_due(T0 + 60_000) == 0
        clock.advance(1)
        assert s.deliver_due() == 1
        s.dispatch()
        [copy] = s.read_queue("T", 0, 0, 10).to_pylist()
        props = dict(copy["properties"])
        assert copy["body"] == b"timed" and props["TIMER_DEQUEUE_MS"] == str(T0 + 5001)
        assert props["TIMER_ENQUEUE_MS"] == str(T0)
        clock.advance(60_000)
        assert s.deliver_due() == 0  # once


def test_a_time_the_clock_has_passed_is_no_delay(tmp_path: Path) -> None:
    clock = rmqlog.ManualClock(T0)
    with rmqlog.MessageStore.open(tmp_path / "s", small_store_config(), clock=clock) as s:
        s.create_topic("T", 1)
        s.put("T", b"past", deliver_time_ms=T0 - 1)  # past by the store's clock, whatever the machine's
        s.dispatch()
        assert s.read_queue("T", 0, 0, 10).column("body").to_pylist() == [b"past"]


def test_index_files_are_named_by_the_clock(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, small_store_config(), clock=rmqlog.ManualClock(T0)) as s:
        s.put("T", b"x", keys=["k"])
        s.dispatch()
        assert index_file_names(root / "index") == [file_name(T0)]


def test_the_services_run_on_the_clocks_monotonic_time(tmp_path: Path) -> None:
    clock = rmqlog.ManualClock(T0)
    with rmqlog.MessageStore.open(tmp_path / "s", small_store_config(), clock=clock) as s:
        clock.advance(2500)
        assert s.services.clock() == 2.5
        assert s.flusher is not None and s.flusher.clock() == 2.5


@pytest.mark.parametrize("clock", ["now", 5, object(), SimpleNamespace(wall_ms=1, monotonic=2.0)])
def test_anything_but_a_clock_is_refused(tmp_path: Path, clock: object) -> None:
    with pytest.raises(rmqlog.InvalidArgumentError, match="clock"):
        rmqlog.MessageStore.open(tmp_path / "s", clock=clock)  # type: ignore[arg-type]
    assert not (tmp_path / "s").exists()  # refused before anything is made


def test_a_manual_clock_moves_only_when_told() -> None:
    clock = rmqlog.ManualClock(T0)
    assert (clock.wall_ms(), clock.monotonic()) == (T0, 0.0)
    assert clock.advance(1500) == T0 + 1500 and clock.monotonic() == 1.5
    clock.set(T0 - 1)  # the wall clock may go back; the monotonic one stays
    assert (clock.wall_ms(), clock.monotonic()) == (T0 - 1, 1.5)
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(rmqlog.InvalidArgumentError):
            clock.advance(bad)  # type: ignore[arg-type]
    with pytest.raises(rmqlog.InvalidArgumentError):
        clock.set(1.0)  # type: ignore[arg-type]
    with pytest.raises(rmqlog.InvalidArgumentError):
        rmqlog.ManualClock("now")  # type: ignore[arg-type]
    assert (clock.wall_ms(), clock.monotonic()) == (T0 - 1, 1.5)  # refused calls changed nothing
    system = rmqlog.SystemClock()
    assert isinstance(system, rmqlog.Clock) and isinstance(clock, rmqlog.Clock)
    before = system.wall_ms()
    assert before <= rmqlog.ManualClock().wall_ms() <= system.wall_ms()  # by default it starts at the system's time
