"""Timed messages (RocketMQ 5's timer): routing on put (``deliverTime``,
``deliver_time_ms=``, ``TIMER_*`` properties), the time wheel, delivery exactly once across
passes, rebuilds, crashes and processes. Passes are driven by the scheduler's clock
(``scheduler.wall_ms``): only the crash and process tests wait for real time."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import kill_at_crash_point, small_store_config, subprocess_env

import rmqlog
from rmqlog.hashing import java_string_hash
from rmqlog.schedule import timer_wheel
from rmqlog.schedule.timer_routing import out_ms
from rmqlog.schedule.timer_wheel import ENTRY, TimerWheel

TIMER = "rmq_sys_wheel_timer"
MAP = pa.map_(pa.string(), pa.string())


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def ms(root: Path):
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.create_topic("T", 2)
        yield s


def run_pass(ms: rmqlog.MessageStore, at: int) -> int:
    """A scheduler pass as if the wall clock read ``at``."""
    ms.scheduler.wall_ms = lambda: at
    return ms.deliver_due(at)


def real(ms: rmqlog.MessageStore, topic: str = "T") -> list[dict]:
    ms.dispatch()
    return [
        m for q in range(ms.topics()[topic].write_queue_nums) for m in ms.read_queue(topic, q, 0, 1 << 40).to_pylist()
    ]


def test_absent_until_due_then_present_once(ms: rmqlog.MessageStore) -> None:
    t0 = now_ms()
    res = ms.put("T", b"later", tags="A", queue_id=1, deliver_time_ms=t0 + 10_000)
    assert (res.queue_id, res.queue_offset) == (0, 0)  # where it waits: the timer topic's queue 0
    ms.dispatch()
    assert ms.max_offset(TIMER, 0) == 1
    assert run_pass(ms, t0 + 5_000) == 0 and real(ms) == []
    due = t0 + 10_000  # to the millisecond: never early
    assert run_pass(ms, due - 1) == 0 and real(ms) == []
    assert run_pass(ms, due + 1) == 1  # (a pass covers up to 1 ms before its clock: see rmqlog.schedule.timer)
    got = real(ms)
    assert [(m["body"], m["queueId"], m["tags"]) for m in got] == [(b"later", 1, "A")]
    props = dict(got[0]["properties"])
    assert props["TIMER_DELIVER_MS"] == str(due)
    assert props["TIMER_OUT_MS"] == str(int(out_ms(np.array([due]), 1000)[0]))  # RocketMQ's rounding, for its tools
    assert "REAL_TOPIC" not in props and "REAL_QID" not in props  # RocketMQ 5's convertMessage clears them
    assert int(props["TIMER_DEQUEUE_MS"]) == due + 1 and int(props["TIMER_ENQUEUE_MS"]) <= now_ms()
    assert run_pass(ms, due + 60_000) == 0 and len(real(ms)) == 1  # once
    assert ms.get_messages("g", "T", 1, 0, tags="A").messages.num_rows == 1  # the tags hash is the real one again
    ms.dispatch()
    unit = ms.consume_queue("T", 1).read(0, 1)
    assert int(unit["tagsCode"][0]) == java_string_hash("A")


def test_every_way_to_give_a_time(ms: rmqlog.MessageStore) -> None:
    t0 = now_ms()
    table = pa.table(
        {
            "topic": ["T"] * 6,
            "body": [b"col-ts", b"col-int", b"sec", b"ms", b"deliver", b"none"],
            "deliverTime": pa.array([t0 + 3000, t0 + 4000, None, None, None, None], pa.int64()),
            "properties": pa.array(
                [
                    None,
                    None,
                    [("TIMER_DELAY_SEC", "5")],
                    [("TIMER_DELAY_MS", "6000")],
                    [("TIMER_DELIVER_MS", str(t0 + 7000)), ("x", "y")],
                    [("x", "y")],
                ],
                MAP,
            ),
        }
    )
    ms.put_batch(table)
    ms.put_batch(
        pa.table(
            {"topic": ["T"], "body": [b"col-ts2"], "deliverTime": pa.array([t0 + 3000], pa.timestamp("ms", tz="UTC"))}
        )
    )
    ms.dispatch()
    assert ms.max_offset(TIMER, 0) == 6 and len(real(ms)) == 1  # "none" went straight to its topic
    assert sorted(m["body"] for m in real(ms)) == [b"none"]
    assert run_pass(ms, t0 + 8_500) == 6
    bodies = {m["body"]: dict(m["properties"]) for m in real(ms)}
    assert set(bodies) == {b"col-ts", b"col-ts2", b"col-int", b"sec", b"ms", b"deliver", b"none"}
    assert bodies[b"sec"]["TIMER_DELAY_SEC"] == "5" and bodies[b"ms"]["TIMER_DELAY_MS"] == "6000"
    assert bodies[b"deliver"]["x"] == "y" and bodies[b"col-int"]["TIMER_DELIVER_MS"] == str(t0 + 4000)


def test_a_past_time_is_no_delay(ms: rmqlog.MessageStore) -> None:
    res = ms.put("T", b"past", queue_id=0, deliver_time_ms=now_ms() - 1000)
    assert res.queue_id == 0
    got = real(ms)
    assert [m["body"] for m in got] == [b"past"] and "TIMER_DELIVER_MS" in dict(got[0]["properties"])


@pytest.mark.parametrize(
    ("table", "row", "field", "reason"),
    [
        (
            pa.table({"topic": ["T", "T"], "body": [b"a", b"b"], "deliverTime": pa.array([None, 1 << 50], pa.int64())}),
            1,
            "deliverTime",
            "timer_max_delay_sec",
        ),
        (
            pa.table({"topic": ["T"], "body": [b"a"], "deliverTime": ["soon"]}),
            None,
            "deliverTime",
            "timestamp or int64",
        ),
        (
            pa.table(
                {
                    "topic": ["T", "T"],
                    "body": [b"a", b"b"],
                    "properties": pa.array([None, [("TIMER_DELAY_SEC", "ten")]], MAP),
                }
            ),
            1,
            "properties",
            "not a number",
        ),
        (
            pa.table(
                {
                    "topic": ["T"],
                    "body": [b"a"],
                    "deliverTime": pa.array([1], pa.int64()),
                    "properties": pa.array([[("TIMER_DELAY_MS", "5")]], MAP),
                }
            ),
            0,
            "properties",
            "twice",
        ),
        (
            pa.table(
                {"topic": ["T"], "body": [b"a"], "deliverTime": pa.array([1 << 41], pa.int64()), "delayLevel": [2]}
            ),
            0,
            "delayLevel",
            "both a delay level and a delivery time",
        ),
        (
            pa.table({"topic": ["T"], "body": [b"a"], "properties": pa.array([[("TIMER_OUT_MS", "5")]], MAP)}),
            0,
            "properties",
            "set by the store's timer",
        ),
        (pa.table({"topic": ["T", TIMER], "body": [b"a", b"b"]}), 1, "topic", "store's topic for timed messages"),
        (
            pa.table({"topic": ["T", TIMER], "body": [b"a", b"b"], "properties": pa.array([None, [("k", "v")]], MAP)}),
            1,
            "topic",
            "store's topic for timed messages",
        ),
    ],
)
def test_bad_times_are_refused_naming_row_and_field(
    ms: rmqlog.MessageStore,
    table: pa.Table,
    row: int | None,
    field: str,
    reason: str,
) -> None:
    with pytest.raises(rmqlog.InvalidMessageError, match=reason) as err:
        ms.put_batch(table)
    assert (err.value.row, err.value.field) == (row, field)
    assert ms.published_tail() == 0


def test_max_delay_is_configurable(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config(timer_max_delay_sec=60)) as s:
        s.put("T", b"ok", deliver_time_ms=now_ms() + 50_000)
        with pytest.raises(rmqlog.InvalidMessageError, match="60 s"):
            s.put("T", b"far", deliver_time_ms=now_ms() + 70_000)
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(timer_max_delay_sec=0)


def test_many_pending_delivered_as_they_fall_due(ms: rmqlog.MessageStore) -> None:
    """5,000 messages due over ten minutes, passes every 7 s of clock: each delivered once,
    never before its time, never more than a pass interval after."""
    t0 = now_ms()
    rng = np.random.default_rng(4)
    deliver = t0 + 2000 + rng.integers(0, 600_000, 5000)
    for lo in range(0, 5000, 1000):
        ms.put_batch(
            pa.table(
                {
                    "topic": ["T"] * 1000,
                    "body": [b"%d" % i for i in range(lo, lo + 1000)],
                    "deliverTime": pa.array(deliver[lo : lo + 1000], pa.int64()),
                }
            )
        )
    seen: dict[bytes, int] = {}
    read_to = [0, 0]  # per queue of T: what the passes before delivered (read once, not per pass)
    for at in range(t0, t0 + 620_000, 7000):
        run_pass(ms, at)
        ms.dispatch()
        for q, start in enumerate(read_to):
            new = ms.read_queue("T", q, start, 1 << 40)
            for body in new["body"].to_pylist():
                seen.setdefault(body, at)
            read_to[q] = start + new.num_rows
    assert len(seen) == 5000 and len(real(ms)) == 5000
    late = np.array([seen[b"%d" % i] - deliver[i] for i in range(5000)])
    assert late.min() >= 0 and late.max() < 7000  # never early; at most one pass interval late
    state = ms.scheduler.timer.wheel.load()
    assert state is not None and state.pending == 0 and state.log_end == 0  # drained: the log is empty again


def test_a_lost_or_dirty_index_is_rebuilt(ms: rmqlog.MessageStore, root: Path) -> None:
    t0 = now_ms()
    ms.put_batch(
        pa.table(
            {
                "topic": ["T"] * 300,
                "body": [b"%d" % i for i in range(300)],
                "deliverTime": pa.array(t0 + 5000 + np.arange(300) * 1000, pa.int64()),
            }
        )
    )
    due = t0 + 5000 + np.arange(300) * 1000
    assert run_pass(ms, t0 + 100_000) == int((due <= t0 + 99_999).sum())  # about 95: 5 s .. 100 s
    wheel: TimerWheel = ms.scheduler.timer.wheel
    (root / "timer" / "state").unlink()  # lost: rebuilt from the timer queue
    assert run_pass(ms, t0 + 200_000) == int(((due > t0 + 99_999) & (due <= t0 + 199_999)).sum())
    state = wheel.load()
    assert state is not None
    state.dirty = True  # an enqueue killed half-way
    wheel.save(state)
    assert wheel.load() is None
    assert run_pass(ms, t0 + 400_000) == int((due > t0 + 199_999).sum())
    got = Counter(m["body"] for m in real(ms))
    assert len(got) == 300 and set(got.values()) == {1}


def test_abnormal_exit_invalidates_the_index(root: Path) -> None:
    code = f"""
import os, signal, time, pyarrow as pa, rmqlog
s = rmqlog.MessageStore.open({str(root)!r})
t0 = time.time_ns() // 1_000_000
s.put_batch(pa.table({{"topic": ["T"] * 50, "body": [b"%d" % i for i in range(50)],
                       "deliverTime": pa.array([t0 + 60_000] * 50, pa.int64())}}))
s.scheduler.wall_ms = lambda: t0
s.deliver_due(t0)
assert s.scheduler.timer.wheel.load() is not None
os.kill(os.getpid(), signal.SIGKILL)
"""
    env = subprocess_env()
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == -signal.SIGKILL
    with rmqlog.MessageStore.open(root) as s:
        assert s.recovery is not None and s.recovery.abnormal
        assert s.scheduler.timer.wheel.load() is None  # rebuilt by the next pass
        assert run_pass(s, now_ms() + 120_000) == 50
        assert len(real(s)) == 50


def test_chain_walk_without_the_c_helper(ms: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = now_ms()
    ms.put_batch(
        pa.table(
            {
                "topic": ["T"] * 500,
                "body": [b"%d" % i for i in range(500)],
                "deliverTime": pa.array(t0 + 3000 + (np.arange(500) % 7) * 1000, pa.int64()),
            }
        )
    )
    run_pass(ms, t0)
    wheel = ms.scheduler.timer.wheel
    state = wheel.load()
    fast = np.sort(wheel.due_between(state, t0, t0 + 20_000)["queueOffset"])
    monkeypatch.setattr(timer_wheel, "_native_walk_chains", None)
    slow = np.sort(wheel.due_between(state, t0, t0 + 20_000)["queueOffset"])
    assert fast.tolist() == slow.tolist() == list(range(500))
    assert run_pass(ms, t0 + 20_000) == 500


def test_the_wheel_refuses_a_bucket_it_cannot_hold(tmp_path: Path) -> None:
    wheel = TimerWheel(tmp_path / "timer", slots=10, precision_ms=1000)
    state = timer_wheel.TimerState(slots=10)
    wheel.add(state, np.array([5_000]), np.array([0]), np.array([0]), np.array([100]))
    with pytest.raises(rmqlog.CorruptStoreError, match="still holds bucket"):
        wheel.add(state, np.array([15_000]), np.array([100]), np.array([1]), np.array([100]))
    assert len(wheel.due_between(state, 0, 6_000)) == 1 and ENTRY.itemsize == 40


def test_a_pass_stopped_between_batches_of_one_due_time(
    ms: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000 messages due at the same millisecond, batches of 64: a pass that dies after its
    third append resumes inside that millisecond (the sequence says how many of it are done)."""
    from rmqlog.schedule import timer as timer_module

    t0 = now_ms()
    ms.put_batch(
        pa.table(
            {
                "topic": ["T"] * 1000,
                "body": [b"%d" % i for i in range(1000)],
                "deliverTime": pa.array([t0 + 5000] * 1000, pa.int64()),
            }
        )
    )
    monkeypatch.setattr(timer_module, "STEP", 64)
    real_append = timer_module.TimerDelivery._append
    calls = []

    def dying(self, *args):  # noqa: ANN001, ANN202
        if len(calls) == 3:
            raise KeyboardInterrupt("killed")
        calls.append(args[-1])
        return real_append(self, *args)

    monkeypatch.setattr(timer_module.TimerDelivery, "_append", dying)
    with pytest.raises(KeyboardInterrupt):
        run_pass(ms, t0 + 6000)
    assert calls == [(t0 + 5000) << 20 | 64, (t0 + 5000) << 20 | 128, (t0 + 5000) << 20 | 192]
    assert len(real(ms)) == 192
    monkeypatch.setattr(timer_module.TimerDelivery, "_append", real_append)
    assert run_pass(ms, t0 + 7000) == 808
    got = Counter(m["body"] for m in real(ms))
    assert len(got) == 1000 and set(got.values()) == {1}


def test_read_only_store_refuses_a_pass(ms: rmqlog.MessageStore, root: Path) -> None:
    ms.put("T", b"x", deliver_time_ms=now_ms() + 5000)
    with rmqlog.MessageStore.open(root, read_only=True) as r, pytest.raises(rmqlog.ReadOnlyStoreError):
        r.deliver_due()


PASS_CHILD = r"""
import sys, rmqlog, rmqlog.schedule.timer as timer
timer.STEP = int(sys.argv[3])  # small batches: passes cut inside one due time
now = int(sys.argv[4])  # the clock of the passes: every message is due by then
with rmqlog.MessageStore.open(sys.argv[1]) as s:
    s.scheduler.wall_ms = lambda: now + 1  # (timed delivery goes by the wall clock: driven here)
    print("open", flush=True)
    for _ in range(int(sys.argv[2])):
        s.deliver_due(now)
"""


def _fill_timed(root: Path, n: int, times: int = 1000) -> int:
    """``n`` timed messages due at ``times`` distinct times a minute from now (ahead even when
    a loaded machine takes seconds to put them: a time already past is no delay); returns a
    time by which all are due (the passes are given it as their clock)."""
    with rmqlog.MessageStore.open(root) as s:
        t0 = now_ms()
        for lo in range(0, n, 1000):
            k = min(1000, n - lo)
            s.put_batch(
                pa.table(
                    {
                        "topic": ["T"] * k,
                        "body": [b"%d" % i for i in range(lo, lo + k)],
                        "deliverTime": pa.array(t0 + 60_000 + (lo + np.arange(k)) % times, pa.int64()),
                    }
                )
            )
        s.dispatch()
        assert s.max_offset("rmq_sys_wheel_timer", 0) == n  # every one waits
    return t0 + 62_000


def _delivered(root: Path, now: int) -> Counter:
    with rmqlog.MessageStore.open(root) as s:
        s.scheduler.wall_ms = lambda: now + 1
        s.deliver_due(now)
        return Counter(m["body"] for m in real(s))


def test_three_processes_running_passes_deliver_each_message_once(tmp_path: Path) -> None:
    root = tmp_path / "s"
    due = _fill_timed(root, 3000)
    env = subprocess_env()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", PASS_CHILD, str(root), "3", "500", str(due)], env=env, stdout=subprocess.PIPE
        )
        for _ in range(3)
    ]
    for c in children:
        assert c.wait(timeout=120) == 0
    got = _delivered(root, due)
    assert len(got) == 3000 and set(got.values()) == {1}


#: (distinct due times, timer.STEP, the crash points the passes are killed at, in turn): each
#: pass killed inside the timer's work (linking units into the wheel, between a batch's
#: records and its publish, between a published batch and timer/state), then one to the end;
#: an index step comes first (a pass killed while delivering does not index again)
TIMER_KILLS = [
    (1000, 65_536, [("timer.enqueued", 1), ("append.written", 1), ("append.published", 1)]),
    (
        3,
        997,
        [
            ("timer.enqueued", 5),
            ("append.written", 3),
            ("timer.delivered", 4),
            ("append.published", 2),
            ("append.written", 7),
        ],
    ),
    (7, 101, [("timer.enqueued", 100), ("timer.delivered", 50), ("append.written", 30), ("append.published", 60)]),
]


@pytest.mark.slow
@pytest.mark.parametrize(("times", "step", "kills"), TIMER_KILLS)
def test_a_timer_killed_inside_a_pass_loses_and_repeats_nothing(
    tmp_path: Path, times: int, step: int, kills: list[tuple[str, int]]
) -> None:
    root = tmp_path / "s"
    due = _fill_timed(root, 20_000, times)
    for point, n in kills:
        printed = kill_at_crash_point(["-c", PASS_CHILD, str(root), "1", str(step), str(due)], point, n, tmp=tmp_path)
        assert printed == ["open"]
    got = _delivered(root, due)
    assert len(got) == 20_000 and set(got.values()) == {1}, Counter(got.values())
