"""Delay messages (RocketMQ 4.x delay levels): routing on put, the units' delivery
time, the scheduler's passes (driven by ``now_ms``: nothing here sleeps for a delay), the
delivered copy, ``delayOffset.json``, exactly once across crashes and processes."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import (
    FIXTURE_CONFIG_DIR,
    REPO_ROOT,
    copy_file,
    kill_at_crash_point,
    small_store_config,
    walk,
)

import rmqlog
import rmqlog.schedule.scheduler as scheduler_module
import rmqlog.schedule.timeup as timeup_module
from rmqlog.admin.cli import main as cli
from rmqlog.config import delay_levels_ms
from rmqlog.errors import CorruptRecordError
from rmqlog.hashing import java_string_hash
from rmqlog.schedule.delay_offsets import encode_delay_offsets, load_delay_offsets
from rmqlog.schedule.timeup import StoredMessages, delivered_copies

S = "SCHEDULE_TOPIC_XXXX"
LEVELS = delay_levels_ms(rmqlog.config.DEFAULT_DELAY_LEVELS)
FAR = 1 << 50  # a clock past every delivery time


@pytest.fixture
def ms(root: Path):
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        yield s


def real(ms: rmqlog.MessageStore, topic: str = "T") -> list[dict]:
    ms.dispatch()
    return (
        [m for q in range(ms.topics()[topic].write_queue_nums) for m in ms.read_queue(topic, q, 0, 1 << 40).to_pylist()]
        if topic in ms.topics()
        else []
    )


def stored_at(ms: rmqlog.MessageStore, level: int) -> int:
    ms.dispatch()
    row = ms.read_queue(S, level - 1, 0, 1).to_pylist()[0]
    return int(row["storeTimestamp"].timestamp() * 1000)


def test_absent_until_due_then_present_once(ms: rmqlog.MessageStore) -> None:
    """RocketMQ's ScheduleMessageServiceTest: not in the real queue before its time, then once."""
    res = ms.put("T", b"later", tags="A", queue_id=1, delay_level=3)  # 10 s
    assert (res.queue_id, res.queue_offset) == (2, 0)  # where it waits: level 3 -> queue 2
    t0 = stored_at(ms, 3)
    assert ms.deliver_due(t0) == 0 and ms.deliver_due(t0 + 9_999) == 0
    assert real(ms) == []
    assert ms.deliver_due(t0 + 10_000) == 1
    got = real(ms)
    assert [(m["body"], m["queueId"]) for m in got] == [(b"later", 1)]
    assert ms.deliver_due(t0 + 60_000) == 0 and ms.deliver_due(FAR) == 0
    assert len(real(ms)) == 1


def test_unit_tagscode_is_the_delivery_time(ms: rmqlog.MessageStore) -> None:
    ms.put_batch(pa.table({"topic": ["T"] * 3, "body": [b"a", b"b", b"c"], "delayLevel": [1, 5, 18]}))
    ms.dispatch()
    for level in (1, 5, 18):
        unit = ms.consume_queue(S, level - 1).read(0, 1)[0]
        assert int(unit["tagsCode"]) == stored_at(ms, level) + LEVELS[level - 1]


def test_levels_clamping_and_no_delay(ms: rmqlog.MessageStore) -> None:
    res = ms.put_batch(
        pa.table(
            {
                "topic": ["T"] * 4,
                "body": [b"a", b"b", b"c", b"d"],
                "delayLevel": [99, 0, -3, None],
                "queueId": [0, 0, 0, 0],
            }
        )
    )
    assert ms.topics()[S].write_queue_nums == 18  # one queue per level
    ms.dispatch()
    assert ms.max_offset(S, 17) == 1  # 99 -> the highest level, 18
    assert sorted(m["body"] for m in real(ms)) == [b"b", b"c", b"d"]  # 0, negative, null: at once
    assert res.num_rows == 4
    assert ms.deliver_due(stored_at(ms, 18) + LEVELS[-1]) == 1
    assert sorted(m["body"] for m in real(ms)) == [b"a", b"b", b"c", b"d"]


def test_the_delay_property_is_a_level_too(ms: rmqlog.MessageStore) -> None:
    ms.put("T", b"p", properties={"DELAY": "2", "color": "red"}, queue_id=0)
    ms.put_batch(
        pa.table(
            {
                "topic": ["T"],
                "body": [b"both"],
                "delayLevel": [2],
                "properties": pa.array([[("DELAY", "2")]], pa.map_(pa.string(), pa.string())),
            }
        )
    )
    ms.dispatch()
    assert ms.max_offset(S, 1) == 2 and real(ms) == []
    with pytest.raises(rmqlog.InvalidMessageError, match="disagree") as err:
        ms.put_batch(
            pa.table(
                {
                    "topic": ["T", "T"],
                    "body": [b"x", b"y"],
                    "delayLevel": [1, 2],
                    "properties": pa.array([[], [("DELAY", "3")]], pa.map_(pa.string(), pa.string())),
                }
            )
        )
    assert (err.value.row, err.value.field) == (1, "delayLevel")
    with pytest.raises(rmqlog.InvalidMessageError, match="not a delay level") as err:
        ms.put("T", b"x", properties={"DELAY": "soon"})
    assert (err.value.row, err.value.field) == (0, "properties")


@pytest.mark.parametrize(
    ("cols", "field", "row", "error"),
    [
        ({"topic": ["T", S], "body": [b"a", b"b"]}, "topic", 1, rmqlog.InvalidMessageError),
        (
            {"topic": ["T", "bad/topic"], "body": [b"a", b"b"], "delayLevel": [1, 1]},
            "topic",
            1,
            rmqlog.InvalidTopicError,
        ),
        (
            {"topic": ["T", "T"], "body": [b"a", b"b"], "delayLevel": [1, 1], "queueId": [0, 4]},
            "queueId",
            1,
            rmqlog.QueueIdError,
        ),
        # the column's type is wrong, not a row: no row to name
        (
            {"topic": ["T", "T"], "body": [b"a", b"b"], "delayLevel": [1.0, 2.0]},
            "delayLevel",
            None,
            rmqlog.InvalidMessageError,
        ),
    ],
)
def test_bad_delayed_rows_are_typed_and_write_nothing(
    ms: rmqlog.MessageStore, cols: dict, field: str, row: int | None, error: type
) -> None:
    ms.create_topic("T", 4)
    before = ms.published_tail()
    with pytest.raises(error) as err:
        ms.put_batch(pa.table(cols))
    assert (err.value.field, err.value.row) == (field, row)
    assert ms.published_tail() == before


def test_the_delivered_copy(ms: rmqlog.MessageStore) -> None:
    born = 1_700_000_000_123
    ms.put_batch(
        pa.table(
            {
                "topic": ["T"],
                "body": [b"copy"],
                "tags": ["TagA"],
                "keys": [["k1", "k2"]],
                "queueId": [3],
                "flag": [7],
                "bornTimestamp": pa.array([born], pa.int64()),
                "delayLevel": [1],
                "properties": pa.array([[("color", "red")]], pa.map_(pa.string(), pa.string())),
            }
        )
    )
    ms.dispatch()
    waiting = ms.read_queue(S, 0, 0, 1).to_pylist()[0]
    wp = dict(waiting["properties"])
    assert (wp["REAL_TOPIC"], wp["REAL_QID"], wp["DELAY"]) == ("T", "3", "1")
    assert ms.deliver_due(FAR) == 1
    [copy] = real(ms)
    props = dict(copy["properties"])
    assert "DELAY" not in props  # not delayed again
    assert (props["REAL_TOPIC"], props["REAL_QID"]) == ("T", "3")  # kept, as RocketMQ keeps them
    assert props["UNIQ_KEY"] == wp["UNIQ_KEY"]  # the client msgId of the message sent
    assert props["color"] == "red" and copy["tags"] == "TagA" and copy["keys"] == ["k1", "k2"]
    assert (copy["topic"], copy["queueId"], copy["flag"]) == ("T", 3, 7)
    assert int(copy["bornTimestamp"].timestamp() * 1000) == born
    unit = ms.consume_queue("T", 3).read(0, 1)[0]
    assert int(unit["tagsCode"]) == java_string_hash("TagA")  # the tags hash again
    assert ms.get_messages("g", "T", 3, 0, tags="TagA").messages.num_rows == 1
    assert ms.query_by_key("T", "k2").num_rows == 1 and ms.message_by_id(wp["UNIQ_KEY"]) is not None


def test_many_due_together_go_in_one_batch_per_level(ms: rmqlog.MessageStore) -> None:
    n = 5000
    ms.put_batch(
        pa.table(
            {"topic": ["T"] * n, "body": [b"%d" % i for i in range(n)], "delayLevel": [1 + i % 3 for i in range(n)]}
        )
    )
    ms.dispatch()
    report = ms.scheduler.deliver_due(FAR)
    assert report.delivered == {1: 1667, 2: 1667, 3: 1666} and report.total == n
    assert Counter(m["body"] for m in real(ms)) == Counter(b"%d" % i for i in range(n))


def test_delay_offset_file_format(ms: rmqlog.MessageStore, root: Path) -> None:
    ms.put("T", b"a", delay_level=1)
    ms.put("T", b"b", delay_level=2)
    ms.dispatch()
    ms.deliver_due(FAR)
    text = (root / "config" / "delayOffset.json").read_text()
    assert '"offsetTable"' in text and "\t\t1: 1" in text and '"1"' not in text  # fastjson: integer keys unquoted
    assert load_delay_offsets(root / "config" / "delayOffset.json") == {1: 1, 2: 1}
    assert (
        encode_delay_offsets({2: 0, 1: 5}).decode().replace("\t", "").replace("\n", "").replace(" ", "")
        == '{"offsetTable":{1:5,2:0}}'
    )


def test_rocketmqs_delay_offset_files_are_read(tmp_path: Path) -> None:
    copy_file(FIXTURE_CONFIG_DIR / "delayOffset.json", tmp_path / "a.json")
    assert load_delay_offsets(tmp_path / "a.json") == {}
    (tmp_path / "b.json").write_text('{\n\t"offsetTable":{1:5,2:0,18:12}\n}')
    assert load_delay_offsets(tmp_path / "b.json") == {1: 5, 2: 0, 18: 12}
    (tmp_path / "c.json").write_text('{"offsetTable":{1:-5}}')
    with pytest.raises(rmqlog.CorruptStoreError, match="c.json"):
        load_delay_offsets(tmp_path / "c.json")


def test_progress_resumes_from_the_file_and_from_the_log(
    ms: rmqlog.MessageStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass killed after its append and before the progress file: the writer's sequence in
    the log says the batch is delivered; nothing is delivered twice."""
    for i in range(3):
        ms.put("T", b"m%d" % i, delay_level=1)
    ms.dispatch()

    def crash(*a: object, **k: object) -> None:
        raise OSError("killed before the progress file")

    monkeypatch.setattr(scheduler_module, "save_delay_offsets", crash)
    with pytest.raises(OSError, match="killed"):
        ms.deliver_due(FAR)
    assert not (root / "config" / "delayOffset.json").exists() and len(real(ms)) == 3
    monkeypatch.undo()
    assert ms.deliver_due(FAR) == 0 and len(real(ms)) == 3
    ms.put("T", b"m3", delay_level=1)
    assert ms.deliver_due(FAR) == 1 and sorted(m["body"] for m in real(ms)) == [b"m0", b"m1", b"m2", b"m3"]


def test_the_cli_runs_a_pass(root: Path, small_config: rmqlog.StoreConfig, capsys: pytest.CaptureFixture[str]) -> None:
    # stored two seconds ago by the putting store's clock: due (level 1 is one second) by the
    # CLI's, the system clock, without waiting for it
    two_seconds_ago = rmqlog.ManualClock(rmqlog.SystemClock().wall_ms() - 2000)
    with rmqlog.MessageStore.open(root, small_config, clock=two_seconds_ago) as ms:
        ms.put("T", b"x", delay_level=1)
    assert cli(["schedule", str(root), "--once", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "delivered": 1,
        "delayed": 1,
        "levels": {"1": 1},
        "timed": 0,
        "lost": 0,
    }
    assert cli(["schedule", str(root), "--once"]) == 0
    assert capsys.readouterr().out == "delivered nothing: no delayed or timed message due\n"


def test_bad_delay_level_config() -> None:
    with pytest.raises(rmqlog.ConfigError, match="level 2"):
        rmqlog.StoreConfig(message_delay_level="1s 5x")
    assert delay_levels_ms("1s 2m 3h 1d") == (1000, 120_000, 10_800_000, 86_400_000)


PASS_CHILD = r"""
import sys, rmqlog, rmqlog.schedule.scheduler as scheduler
root = sys.argv[1]
if len(sys.argv) > 3:
    scheduler.DELIVER_BATCH = int(sys.argv[3])  # small batches: several appends per level and pass
cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=6000)
with rmqlog.MessageStore.open(root, cfg) as s:
    print("open", flush=True)
    for _ in range(int(sys.argv[2])):
        s.deliver_due(1 << 50)
        s.dispatch()
"""


def _fill_delayed(root: Path, n: int) -> None:
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=6000)
    with rmqlog.MessageStore.open(root, cfg) as s:
        for b in range(n // 100):
            s.put_batch(
                pa.table(
                    {
                        "topic": ["T"] * 100,
                        "body": [b"%d" % (b * 100 + i) for i in range(100)],
                        "delayLevel": [1 + (b * 100 + i) % 4 for i in range(100)],
                    }
                )
            )
        s.dispatch()


def _delivered(root: Path) -> Counter:
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=6000)
    with rmqlog.MessageStore.open(root, cfg) as s:
        s.deliver_due(1 << 50)
        s.dispatch()
        return Counter(m["body"] for m in real(s))


def test_three_processes_running_passes_deliver_each_message_once(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _fill_delayed(root, 3000)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    children = [
        subprocess.Popen([sys.executable, "-c", PASS_CHILD, str(root), "5"], env=env, stdout=subprocess.PIPE)
        for _ in range(3)
    ]
    for c in children:
        assert c.wait(timeout=120) == 0
    got = _delivered(root)
    assert len(got) == 3000 and set(got.values()) == {1}


#: the passes killed in turn at these crash points (copies appended, delayOffset.json not
#: yet saved; between a batch's records and its publish; between the publish and the pass's
#: next step; the offsets saved, the timer not yet run), then one pass to the end
SCHEDULE_KILLS = [
    ("schedule.delivered", 3),
    ("append.written", 5),
    ("append.published", 4),
    ("schedule.delivered", 6),
    ("schedule.saved", 1),
]


@pytest.mark.slow
def test_a_scheduler_killed_inside_a_pass_loses_and_repeats_nothing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    _fill_delayed(root, 20_000)  # 5,000 a level, delivered in batches of 997: 6 appends a level and pass
    for point, n in SCHEDULE_KILLS:
        assert kill_at_crash_point(["-c", PASS_CHILD, str(root), "1", "997"], point, n, tmp=tmp_path) == ["open"]
    got = _delivered(root)
    assert len(got) == 20_000 and set(got.values()) == {1}, Counter(got.values())


def test_the_copy_keeps_the_stored_properties_in_their_order(ms: rmqlog.MessageStore, root: Path) -> None:
    ms.put_batch(
        pa.table(
            {
                "topic": ["T"],
                "body": [b"x"],
                "tags": ["TagA"],
                "keys": [["k1"]],
                "delayLevel": [1],
                "properties": pa.array([[("b", "2"), ("a", "1")]], pa.map_(pa.string(), pa.string())),
            }
        ),
        writer="w",
        sequence=1,
    )  # the last row carries the writer's RMQLOG marker: not copied
    ms.dispatch()
    stored = [k for k, _ in ms.read_queue(S, 0, 0, 1).to_pylist()[0]["properties"]]
    assert ms.deliver_due(FAR) == 1
    [copy] = real(ms)
    names = [k for k, _ in copy["properties"]]
    assert names == [k for k in stored if k != "DELAY"]  # (the message table shows no RMQLOG_ marker)
    on_disk = [r for r in walk(root) if r.physical_offset == copy["commitLogOffset"]][0]
    assert on_disk.properties["RMQLOG_WRITER"] == "1 schedule/level-1"  # the scheduler's own marker, not the writer's


def _stored(props: list[str]) -> StoredMessages:
    n = len(props)
    return StoredMessages(
        np.arange(n, dtype=np.int64) * 100,
        np.zeros(n, np.int64),
        np.zeros(n, np.int64),
        np.full(n, 5, np.int64),
        pa.array([b"b"] * n, pa.binary()),
        pa.array(props, pa.string()),
    )


def test_copied_properties_the_fast_way_and_the_general_way_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    names = ["DELAY", "TAGS", "KEYS", "UNIQ_KEY", "RMQLOG_WRITER", "a", "REAL_TOPICX", "DELA"]

    def entry() -> str:
        name = rng.choice(names)
        value = "".join(rng.choice("xyz09é") for _ in range(rng.randint(0, 4)))
        return f"{name}\x01{value}" + rng.choice(
            ["\x02", "\x02", "\x01\x02", "\x01x\x02", "\x02\x02"]
        )  # Java drops 3 tokens

    rows = []
    for i in range(400):
        s = "REAL_TOPIC\x01T\x02REAL_QID\x013\x02" + "".join(entry() for _ in range(rng.randint(0, 6)))
        if i % 7 == 0:
            s = s[:-1]  # no \x02 after the last value (Java reads it)
        elif i % 11 == 0:
            s += "junk\x02\x01"  # bytes that are no entry
        rows.append(s)
    for batch in (rows, [r for r in rows if r.endswith("\x02") and "junk" not in r]):
        fast = delivered_copies(_stored(batch), drop=("REAL_QID",))
        monkeypatch.setattr(timeup_module, "_native_copy", None)
        general = delivered_copies(_stored(batch), drop=("REAL_QID",))
        monkeypatch.undo()
        assert fast.properties.to_pylist() == general.properties.to_pylist()
        assert fast.topic.to_pylist() == general.topic.to_pylist() == ["T"] * len(batch)
        assert fast.queue_id.tolist() == [3] * len(batch)
    assert b"REAL_QID" not in b"".join(fast.properties.to_pylist()) and b"DELAY\x01" not in b"".join(
        fast.properties.to_pylist()
    )


@pytest.mark.parametrize(
    "props",
    [
        "TAGS\x01a\x02",
        "REAL_QID\x011\x02",
        "REAL_TOPIC\x01T\x02REAL_QID\x01x\x02",
        "REAL_TOPIC\x01T\x02REAL_QID\x01-1\x02",
        "REAL_TOPIC\x01T\x02REAL_QID\x011234567890\x02",
        "REAL_TOPIC\x01T\x02REAL_QID\x01\x02",
        "REAL_TOPIC\x01T\x02REAL_QID\x011\x02REAL_QID\x012x\x02",
    ],
)
@pytest.mark.parametrize("fast", [True, False])
def test_a_stored_message_that_names_no_real_queue_is_a_typed_error(
    props: str, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not fast:
        monkeypatch.setattr(timeup_module, "_native_copy", None)
    good = _stored(["REAL_TOPIC\x01T\x02REAL_QID\x01123456789\x02REAL_QID\x010042\x02"])
    assert delivered_copies(good).queue_id.tolist() == [42]  # the last one wins, leading zeros read
    with pytest.raises(CorruptRecordError, match="offset 100"):
        delivered_copies(_stored(["REAL_TOPIC\x01T\x02REAL_QID\x011\x02", props]))


def test_the_copies_keep_the_born_host_they_were_sent_with(tmp_path: Path) -> None:
    """RocketMQ's messageTimeup and convertMessage keep BORNHOST: the copy says who sent the
    message, not which store delivered it (a delay level and a timed message alike)."""
    root = tmp_path / "s"
    # every host differs: the sender's born and store hosts, the deliverer's born and store hosts
    sender = rmqlog.StoreConfig(born_host="10.1.2.3:4567", store_host="10.0.0.1:10911")
    deliverer = rmqlog.StoreConfig(born_host="10.7.7.7:7777", store_host="10.0.0.2:10911")
    now = int(time.time() * 1000)
    with rmqlog.MessageStore.open(root, sender) as s:
        s.put_batch(
            pa.table(
                {
                    "topic": ["T", "T"],
                    "body": [b"a", b"b"],
                    "delayLevel": [1, 0],
                    "deliverTime": pa.array([None, now + 60_000], pa.int64()),
                }
            )
        )
        s.dispatch()
        waiting = [*s.read_queue(S, 0, 0, 1).to_pylist(), *s.read_queue("rmq_sys_wheel_timer", 0, 0, 1).to_pylist()]
        assert {(m["bornHost"], m["storeHost"]) for m in waiting} == {("10.1.2.3:4567", "10.0.0.1:10911")}
    with rmqlog.MessageStore.open(root, deliverer) as s:  # delivered by another store (another host)
        s.scheduler.wall_ms = lambda: now + 120_000  # (the timer goes by the wall clock)
        assert s.deliver_due(now + 120_000) == 2
        copies = real(s)
        assert sorted(c["body"] for c in copies) == [b"a", b"b"]
        assert {c["bornHost"] for c in copies} == {"10.1.2.3:4567"}  # who sent it, not the deliverer's born host
        assert {c["storeHost"] for c in copies} == {"10.0.0.2:10911"}  # the store that delivered them, not the sender's
