"""put / put_batch / dispatch / get_messages and the rest of the public API of ``store``.

Bytes written by the store are checked with the independent reference codec (refcodec).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import (
    SMALL_COMMITLOG,
    batch,
    dt_to_ms,
    ms_to_dt,
    read_queue_all,
    small_store_config,
    snapshot_files,
    units,
    wait_until,
    walk,
)

import refcodec as rc
import rmqlog
from rmqlog import GetMessageStatus as S

HEX32 = re.compile(r"^[0-9A-F]{32}$")
DEFAULT_HOST = "127.0.0.1:10911"


# --------------------------------------------------------------------------- put


def test_put_result_and_record_layout(ms: rmqlog.MessageStore, root: Path) -> None:
    before = time.time()
    res = ms.put("T", b"hello", queue_id=1, tags="A", keys=["k1", "k2"], properties={"p": "v"}, flag=7)
    after = time.time()
    assert res.status is rmqlog.PutMessageStatus.PUT_OK
    assert (res.commit_log_offset, res.queue_offset, res.queue_id) == (0, 0, 1)
    assert res.msg_id == rc.offset_msg_id(DEFAULT_HOST, 0)
    assert isinstance(res.store_timestamp, dt.datetime) and res.store_timestamp.tzinfo is not None
    assert before - 0.002 <= res.store_timestamp.timestamp() <= after + 0.002

    [rec] = walk(root)
    assert rec.magic == rc.MAGIC_V1
    assert (rec.topic, rec.body, rec.queue_id, rec.queue_offset, rec.physical_offset) == ("T", b"hello", 1, 0, 0)
    assert rec.flag == 7 and rec.sys_flag == 0 and rec.reconsume_times == 0
    assert rec.prepared_transaction_offset == 0
    assert rec.body_crc == rc.body_crc(b"hello")
    assert rec.store_host == DEFAULT_HOST and rec.born_host == DEFAULT_HOST
    assert rec.store_timestamp == dt_to_ms(res.store_timestamp)
    assert abs(rec.born_timestamp - rec.store_timestamp) < 5000
    assert set(rec.properties) == {"p", "KEYS", "TAGS", "UNIQ_KEY"}
    assert rec.properties["p"] == "v"
    assert rec.properties["KEYS"] == "k1 k2"
    assert rec.properties["TAGS"] == "A"
    assert HEX32.match(rec.properties["UNIQ_KEY"])
    assert rec.total_size == rc.record_length(5, 1, len(rc.encode_properties(rec.properties)))

    assert ms.dispatch() == 1
    got = ms.get_messages("g", "T", 1, 0)
    assert got.status is S.FOUND and got.next_begin_offset == 1
    [row] = got.messages.to_pylist()
    assert row["body"] == b"hello" and row["tags"] == "A" and row["keys"] == ["k1", "k2"]
    assert row["flag"] == 7 and row["queueId"] == 1 and row["queueOffset"] == 0
    assert dict(row["properties"]) == rec.properties
    assert row["msgId"] == res.msg_id
    assert row["storeTimestamp"] == res.store_timestamp
    assert row["bornTimestamp"] == ms_to_dt(rec.born_timestamp)
    assert row["storeHost"] == DEFAULT_HOST and row["bornHost"] == DEFAULT_HOST
    assert row["bodyCRC"] == rec.body_crc and row["sysFlag"] == 0 and row["reconsumeTimes"] == 0


def test_put_batch_result_in_input_order(ms: rmqlog.MessageStore, root: Path) -> None:
    tbl = batch(topic=["A", "B", "A", "B", "A"], body=[b"a0", b"b0", b"a1", b"b1", b"a2"],
                queueId=pa.array([0, 1, 0, 1, 0], pa.int32()))
    out = ms.put_batch(tbl)
    assert out.schema == rmqlog.PUT_RESULT_SCHEMA
    rows = out.to_pylist()
    assert [r["queueOffset"] for r in rows] == [0, 0, 1, 1, 2]
    recs = walk(root)
    assert [r.physical_offset for r in recs] == [r["commitLogOffset"] for r in rows]
    assert [r.body for r in recs] == [b"a0", b"b0", b"a1", b"b1", b"a2"]
    assert [r["msgId"] for r in rows] == [rc.offset_msg_id(DEFAULT_HOST, r.physical_offset) for r in recs]
    assert len({r["storeTimestamp"] for r in rows}) == 1
    assert rows[0]["storeTimestamp"] == ms_to_dt(recs[0].store_timestamp)
    # one put_batch is contiguous in the log
    for a, b in zip(recs, recs[1:], strict=False):
        assert b.physical_offset == a.physical_offset + a.total_size


def test_put_batch_optional_columns(ms: rmqlog.MessageStore, root: Path) -> None:
    born = [1_600_000_000_123, 1_700_000_000_456, None]
    tbl = pa.table({
        "topic": pa.array(["T", "T", "T"]),
        "body": pa.array(["text body", "", "ü"], pa.string()),  # string bodies are UTF-8 encoded
        "queueId": pa.array([2, None, 3], pa.int64()),
        "tags": pa.array(["x", None, "y"]),
        "keys": pa.array([["a"], None, []], pa.list_(pa.string())),
        "properties": pa.array([[("k", "v")], None, [("k2", "v2"), ("k3", "v3")]],
                               pa.map_(pa.string(), pa.string())),
        "flag": pa.array([1, None, -5], pa.int32()),
        "bornTimestamp": pa.array(born, pa.int64()),
    })
    before_ms = int(time.time() * 1000)
    out = ms.put_batch(tbl).to_pylist()
    recs = walk(root)
    assert [r.body for r in recs] == [b"text body", b"", "ü".encode()]
    assert recs[1].body_crc == 0
    assert recs[0].queue_id == 2 and recs[2].queue_id == 3 and 0 <= recs[1].queue_id < 4
    assert recs[0].born_timestamp == born[0] and recs[1].born_timestamp == born[1]
    assert recs[2].born_timestamp >= before_ms - 1000  # null -> now
    assert [r.flag for r in recs] == [1, 0, -5]
    assert recs[0].properties["TAGS"] == "x" and "TAGS" not in recs[1].properties
    assert recs[0].properties["KEYS"] == "a"
    assert "KEYS" not in recs[1].properties and "KEYS" not in recs[2].properties
    assert recs[0].properties["k"] == "v"
    assert recs[2].properties["k2"] == "v2" and recs[2].properties["k3"] == "v3"
    ms.dispatch()
    for r, o in zip(recs, out, strict=True):
        row = ms.message_by_offset(o["commitLogOffset"])
        assert row is not None
        assert row["body"] == r.body and row["flag"] == r.flag and row["queueId"] == r.queue_id
        assert row["bornTimestamp"] == ms_to_dt(r.born_timestamp)
        assert row["keys"] == ([] if "KEYS" not in r.properties else r.properties["KEYS"].split(" "))
        assert row["tags"] == r.properties.get("TAGS")


def test_born_timestamp_column_as_timestamp(ms: rmqlog.MessageStore, root: Path) -> None:
    when = dt.datetime(2024, 2, 29, 12, 34, 56, 789000, tzinfo=dt.UTC)
    ms.put_batch(pa.table({"topic": ["T"], "body": [b"x"],
                           "bornTimestamp": pa.array([when], pa.timestamp("us", tz="UTC"))}))
    assert walk(root)[0].born_timestamp == dt_to_ms(when)


def test_record_batch_and_empty_batch(ms: rmqlog.MessageStore, root: Path) -> None:
    empty = ms.put_batch(pa.table({"topic": pa.array([], pa.string()), "body": pa.array([], pa.binary())}))
    assert empty.num_rows == 0 and empty.schema == rmqlog.PUT_RESULT_SCHEMA
    assert walk(root) == []
    rb = pa.RecordBatch.from_pydict({"topic": ["T", "T"], "body": [b"1", b"2"]})
    assert ms.put_batch(rb).num_rows == 2
    assert [r.body for r in walk(root)] == [b"1", b"2"]


def test_chunked_input_columns(ms: rmqlog.MessageStore, root: Path) -> None:
    t1 = pa.table({"topic": ["T", "T"], "body": [b"1", b"2"], "tags": ["a", "b"]})
    t2 = pa.table({"topic": ["T"], "body": [b"3"], "tags": ["c"]})
    out = ms.put_batch(pa.concat_tables([t1, t2]))
    assert out.num_rows == 3
    assert [(r.body, r.properties["TAGS"]) for r in walk(root)] == [(b"1", "a"), (b"2", "b"), (b"3", "c")]


# --------------------------------------------------------------------------- msgId, UNIQ_KEY


def test_msg_id_is_store_host_plus_offset(ms: rmqlog.MessageStore, root: Path) -> None:
    out = ms.put_batch(batch(topic="T", body=[b"x" * i for i in range(20)])).to_pylist()
    for r in out:
        assert HEX32.match(r["msgId"])
        assert r["msgId"] == rc.offset_msg_id(DEFAULT_HOST, r["commitLogOffset"])
        assert r["msgId"][:16] == "7F00000100002A9F"
        row = ms.message_by_id(r["msgId"])
        assert row is not None and row["commitLogOffset"] == r["commitLogOffset"]
    assert ms.message_by_id("not-a-msg-id") is None
    assert ms.message_by_id("7F00000100002A9F" + "00000000000FFFFF") is None


def test_uniq_key_present_unique_and_kept(ms: rmqlog.MessageStore, root: Path) -> None:
    for _ in range(3):
        ms.put_batch(batch(topic=["T", "U"] * 100, body=b"x"))
    for _ in range(5):
        ms.put("T", b"y")
    given = "0A0B0C0D1234ABCDEF0123456789ABCD"
    ms.put("T", b"z", properties={"UNIQ_KEY": given, "other": "1"})
    tbl = pa.table({
        "topic": ["T", "T"], "body": [b"m", b"n"],
        "properties": pa.array([[("UNIQ_KEY", "0A0B0C0D1234ABCDEF0123456789ABCE")], None], pa.map_(pa.string(), pa.string())),
    })
    ms.put_batch(tbl)
    recs = walk(root)
    keys = [r.properties["UNIQ_KEY"] for r in recs]
    assert len(keys) == 608
    assert keys[605] == given
    assert keys[606] == "0A0B0C0D1234ABCDEF0123456789ABCE"
    generated = keys[:605] + keys[607:]
    assert all(HEX32.match(k) for k in generated)
    assert len(set(keys)) == len(keys)
    # a given UNIQ_KEY is stored once, not twice
    raw = (root / "commitlog" / f"{(recs[605].physical_offset // SMALL_COMMITLOG) * SMALL_COMMITLOG:020d}").read_bytes()
    start = recs[605].physical_offset % SMALL_COMMITLOG
    assert raw[start : start + recs[605].total_size].count(b"UNIQ_KEY") == 1
    ms.dispatch()
    row = ms.message_by_offset(recs[605].physical_offset)
    assert row is not None and dict(row["properties"])["UNIQ_KEY"] == given


# --------------------------------------------------------------------------- queues, topics


def test_round_robin_queue_assignment(ms: rmqlog.MessageStore) -> None:
    first = ms.put_batch(batch(topic="RR", body=[b"%d" % i for i in range(5)]))
    second = ms.put_batch(batch(topic="RR", body=[b"%d" % i for i in range(3)]))
    ms.dispatch()
    got = {q: [r["body"] for r in read_queue_all(ms, "RR", q)] for q in range(4)}
    assert got == {0: [b"0", b"4"], 1: [b"1", b"0"], 2: [b"2", b"1"], 3: [b"3", b"2"]}
    assert [r["queueOffset"] for r in first.to_pylist()] == [0, 0, 0, 0, 1]
    assert [r["queueOffset"] for r in second.to_pylist()] == [1, 1, 1]
    singles = [ms.put("RR2", b"s").queue_id for _ in range(9)]
    assert singles == [0, 1, 2, 3, 0, 1, 2, 3, 0]


def test_round_robin_is_per_topic_and_skips_given_queue_ids(ms: rmqlog.MessageStore) -> None:
    ms.create_topic("three", 3)
    tbl = pa.table({
        "topic": ["three", "X", "three", "X", "three", "three"],
        "body": [b"0", b"1", b"2", b"3", b"4", b"5"],
        "queueId": pa.array([None, None, 2, None, None, None], pa.int32()),
    })
    ms.put_batch(tbl)
    ms.dispatch()
    three = {q: [r["body"] for r in read_queue_all(ms, "three", q)] for q in range(3)}
    assert sorted(b for v in three.values() for b in v) == [b"0", b"2", b"4", b"5"]
    assert b"2" in three[2]
    # rows without a queue id spread over all queues (3 rows over 3 queues)
    assert sorted(len(v) for v in three.values()) == [1, 1, 2]
    x = {q: [r["body"] for r in read_queue_all(ms, "X", q)] for q in range(4)}
    assert x[0] == [b"1"] and x[1] == [b"3"]


def test_auto_created_topic_in_topics_json(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("NewTopic", b"x")
        assert s.topics()["NewTopic"].write_queue_nums == 4
    data = rc.parse_fastjson((root / "config" / "topics.json").read_text("utf-8"))
    assert isinstance(data, dict)
    assert data["topicConfigTable"]["NewTopic"] == {
        "order": False, "perm": 6, "readQueueNums": 4, "topicFilterType": "SINGLE_TAG",
        "topicName": "NewTopic", "topicSysFlag": 0, "writeQueueNums": 4,
    }
    assert set(data["dataVersion"]) >= {"counter", "timestamp"}
    with rmqlog.MessageStore.open(root / "eight", small_store_config(default_topic_queue_nums=8)) as s:
        assert {s.put("E", b"x").queue_id for _ in range(8)} == set(range(8))
    data = rc.parse_fastjson((root / "eight" / "config" / "topics.json").read_text("utf-8"))
    assert data["topicConfigTable"]["E"]["writeQueueNums"] == 8


def test_a_stale_lock_free_reload_never_drops_a_topic_just_created(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: a put's lock-free reload of ``topics.json`` (``planned_queue_counts``) read
    the file just before another thread auto-created a topic and installed that older table
    afterwards; the creating thread then failed with ``KeyError`` on its own topic."""
    import rmqlog.config_files as cf

    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("Old", b"x")
        stale = cf.load_fastjson(root / "config" / "topics.json")  # what the slow reader saw
        s.put("Fresh", b"x")  # creates the topic: a newer dataVersion
        monkeypatch.setattr(cf, "load_fastjson", lambda path, decode=None: stale if decode is None else decode(stale))
        s.topic_config.reload()  # the reader installs what it read: must be ignored
        assert "Fresh" in s.topics()
        assert s.put("Fresh", b"y", queue_id=s.put("Fresh", b"z").queue_id).queue_offset == 1
        monkeypatch.undo()
        s.topic_config.reload()  # the file itself has both
        assert {"Old", "Fresh"} <= set(s.topics())


def test_create_topic_and_queue_limits(ms: rmqlog.MessageStore, root: Path) -> None:
    tc = ms.create_topic("Two", 2)
    assert (tc.read_queue_nums, tc.write_queue_nums) == (2, 2)
    data = rc.parse_fastjson((root / "config" / "topics.json").read_text("utf-8"))
    assert data["topicConfigTable"]["Two"]["writeQueueNums"] == 2
    assert ms.put("Two", b"x", queue_id=1).queue_id == 1
    with pytest.raises(rmqlog.QueueIdError):
        ms.put("Two", b"x", queue_id=2)
    assert {ms.put("Two", b"x").queue_id for _ in range(4)} == {0, 1}
    with pytest.raises(rmqlog.InvalidTopicError):
        ms.create_topic("bad/topic", 2)


def test_auto_create_disabled(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config(auto_create_topic_enable=False)) as s:
        with pytest.raises(rmqlog.InvalidTopicError):
            s.put("Nope", b"x")
        assert walk(root) == []
        assert "Nope" not in s.topics()
        s.create_topic("Yes", 1)
        assert s.put("Yes", b"x").queue_id == 0


# --------------------------------------------------------------------------- get_messages statuses


@pytest.fixture
def ten(ms: rmqlog.MessageStore) -> rmqlog.MessageStore:
    """Topic Q (4 queues): queue 0 holds bodies m0..m9, queues 1..3 are empty."""
    ms.put_batch(batch(topic="Q", body=[b"m%d" % i for i in range(10)], queueId=pa.array([0] * 10, pa.int32())))
    assert ms.dispatch() == 10
    return ms


def test_status_no_matched_logic_queue(ten: rmqlog.MessageStore) -> None:
    for topic, qid in (("Unknown", 0), ("Q", 4), ("Q", 100), ("Q", -1)):
        res = ten.get_messages("g", topic, qid, 0)
        assert res.status is S.NO_MATCHED_LOGIC_QUEUE, (topic, qid)
        assert res.next_begin_offset == 0 and len(res) == 0
        assert res.messages.schema == rmqlog.MESSAGE_SCHEMA


def test_status_no_message_in_queue(ten: rmqlog.MessageStore) -> None:
    for offset in (0, 5):
        res = ten.get_messages("g", "Q", 3, offset)
        assert res.status is S.NO_MESSAGE_IN_QUEUE
        assert (res.next_begin_offset, res.min_offset, res.max_offset) == (0, 0, 0)


def test_status_before_dispatch_is_empty_queue(ms: rmqlog.MessageStore) -> None:
    ms.put("Q", b"x", queue_id=0)
    res = ms.get_messages("g", "Q", 0, 0)
    assert res.status is S.NO_MESSAGE_IN_QUEUE and res.next_begin_offset == 0
    assert ms.max_offset("Q", 0) == 0
    ms.dispatch()
    assert ms.get_messages("g", "Q", 0, 0).status is S.FOUND


def test_status_overflow_one_and_badly(ten: rmqlog.MessageStore) -> None:
    one = ten.get_messages("g", "Q", 0, 10)
    assert one.status is S.OFFSET_OVERFLOW_ONE and one.next_begin_offset == 10 and len(one) == 0
    assert (one.min_offset, one.max_offset) == (0, 10)
    badly = ten.get_messages("g", "Q", 0, 11)
    assert badly.status is S.OFFSET_OVERFLOW_BADLY
    assert badly.next_begin_offset == 0  # RocketMQ: back to 0 when min is 0
    assert ten.get_messages("g", "Q", 0, 10**9).next_begin_offset == 0


def test_found_max_count_and_next_offsets(ten: rmqlog.MessageStore) -> None:
    res = ten.get_messages("g", "Q", 0, 3, max_count=4)
    assert res.status is S.FOUND
    assert res.messages["body"].to_pylist() == [b"m3", b"m4", b"m5", b"m6"]
    assert res.messages["queueOffset"].to_pylist() == [3, 4, 5, 6]
    assert (res.next_begin_offset, res.min_offset, res.max_offset) == (7, 0, 10)
    tail = ten.get_messages("g", "Q", 0, 8, max_count=4)
    assert tail.messages["body"].to_pylist() == [b"m8", b"m9"] and tail.next_begin_offset == 10
    assert len(ten.get_messages("g", "Q", 0, 0)) == 10  # default max_count 32
    for k in (1, 3, 7, 10, 50):
        got = read_queue_all(ten, "Q", 0, max_count=k)
        assert [r["body"] for r in got] == [b"m%d" % i for i in range(10)]


def test_invalid_group_and_topic_on_read(ten: rmqlog.MessageStore) -> None:
    for group in ("", "a b", "g/x", "g.x"):
        with pytest.raises(rmqlog.InvalidGroupError):
            ten.get_messages(group, "Q", 0, 0)
    with pytest.raises(rmqlog.InvalidTopicError):
        ten.get_messages("g", "../Q", 0, 0)


def test_min_max_offsets(ms: rmqlog.MessageStore) -> None:
    assert (ms.min_offset("Q", 0), ms.max_offset("Q", 0)) == (0, 0)
    ms.put_batch(batch(topic="Q", body=[b"x"] * 11))  # round robin: 3, 3, 3, 2
    assert ms.max_offset("Q", 0) == 0  # not dispatched yet
    ms.dispatch()
    assert [ms.max_offset("Q", q) for q in range(4)] == [3, 3, 3, 2]
    assert [ms.min_offset("Q", q) for q in range(4)] == [0, 0, 0, 0]
    assert ms.max_offset("Unknown", 0) == 0


def test_read_queue(ten: rmqlog.MessageStore) -> None:
    t = ten.read_queue("Q", 0, 2, 5)
    assert t.schema == rmqlog.MESSAGE_SCHEMA
    assert t["body"].to_pylist() == [b"m2", b"m3", b"m4"]
    assert ten.read_queue("Q", 0, -5, 100)["queueOffset"].to_pylist() == list(range(10))
    assert ten.read_queue("Q", 0, 10, 20).num_rows == 0
    assert ten.read_queue("Q", 0, 5, 5).num_rows == 0
    assert ten.read_queue("Q", 1, 0, 10).num_rows == 0


# --------------------------------------------------------------------------- tag filter


TAGS = ["A", "B", None, "A", "C", "B", "Aa", "BB", "A", "BB"]


@pytest.fixture
def tagged(ms: rmqlog.MessageStore, root: Path) -> rmqlog.MessageStore:
    ms.put_batch(pa.table({
        "topic": ["TG"] * len(TAGS),
        "body": [b"%d" % i for i in range(len(TAGS))],
        "queueId": pa.array([0] * len(TAGS), pa.int32()),
        "tags": pa.array(TAGS, pa.string()),
    }))
    ms.dispatch()
    return ms


def _bodies(res: rmqlog.GetMessageResult) -> list[int]:
    return [int(b) for b in res.messages["body"].to_pylist()]


def test_tags_code_in_consume_queue(tagged: rmqlog.MessageStore, root: Path) -> None:
    recs = walk(root)
    assert units(root, "TG", 0) == [(r.physical_offset, r.total_size, r.tags_code) for r in recs]
    assert [u[2] for u in units(root, "TG", 0)][:3] == [rc.java_string_hash("A"), rc.java_string_hash("B"), 0]


def test_tag_filter(tagged: rmqlog.MessageStore) -> None:
    a = tagged.get_messages("g", "TG", 0, 0, tags="A")
    assert a.status is S.FOUND and _bodies(a) == [0, 3, 8]
    assert a.next_begin_offset == len(TAGS)
    assert _bodies(tagged.get_messages("g", "TG", 0, 0, tags="A || C")) == [0, 3, 4, 8]
    assert _bodies(tagged.get_messages("g", "TG", 0, 0, tags=" C ||B ")) == [1, 4, 5]
    for everything in ("*", None, "", "A || *"):
        assert _bodies(tagged.get_messages("g", "TG", 0, 0, tags=everything)) == list(range(len(TAGS)))
    none = tagged.get_messages("g", "TG", 0, 0, tags="Z")
    assert none.status is S.NO_MATCHED_MESSAGE and len(none) == 0
    assert none.next_begin_offset == len(TAGS)


def test_tag_filter_max_count_next_offset(tagged: rmqlog.MessageStore) -> None:
    res = tagged.get_messages("g", "TG", 0, 0, max_count=2, tags="A")
    assert _bodies(res) == [0, 3]
    assert res.next_begin_offset == 4  # units 0..3 scanned
    res = tagged.get_messages("g", "TG", 0, 4, max_count=2, tags="A")
    assert _bodies(res) == [8] and res.next_begin_offset == len(TAGS)
    got = read_queue_all(tagged, "TG", 0, max_count=1, tags="A || B")
    assert [int(r["body"]) for r in got] == [0, 1, 3, 5, 8]


def test_tag_hash_collision(tagged: rmqlog.MessageStore, root: Path) -> None:
    assert rc.java_string_hash("Aa") == rc.java_string_hash("BB")
    codes = [u[2] for u in units(root, "TG", 0)]
    assert codes[6] == codes[7] == rc.java_string_hash("Aa")
    aa = tagged.get_messages("g", "TG", 0, 0, tags="Aa")
    assert aa.status is S.FOUND
    assert _bodies(aa) == [6]
    assert aa.messages["tags"].to_pylist() == ["Aa"]
    bb = tagged.get_messages("g", "TG", 0, 0, tags="BB")
    assert _bodies(bb) == [7, 9]
    assert [int(r["body"]) for r in read_queue_all(tagged, "TG", 0, max_count=1, tags="Aa")] == [6]


def test_tag_hash_collision_only_other_tag(ms: rmqlog.MessageStore) -> None:
    ms.put_batch(batch(topic="TC", body=[b"1", b"2", b"3"], tags="BB", queueId=pa.array([0, 0, 0], pa.int32())))
    ms.dispatch()
    res = ms.get_messages("g", "TC", 0, 0, tags="Aa")
    assert res.status is S.NO_MATCHED_MESSAGE
    assert len(res) == 0
    assert res.next_begin_offset == 3


# --------------------------------------------------------------------------- offset_for_timestamp


def test_offset_for_timestamp(root: Path, small_config: rmqlog.StoreConfig) -> None:
    clock = rmqlog.ManualClock()
    with rmqlog.MessageStore.open(root, small_config, clock=clock) as ms:
        stamps = []
        sizes = [3, 2, 4]
        for n in sizes:
            clock.advance(1)  # distinct store timestamps
            out = ms.put_batch(batch(topic="TS", body=[b"x"] * n, queueId=pa.array([0] * n, pa.int32())))
            stamps.append(dt_to_ms(out.column("storeTimestamp")[0].as_py()))
        ms.dispatch()
        assert stamps == sorted(stamps) and len(set(stamps)) == 3
        t1, t2, t3 = stamps
        assert ms.offset_for_timestamp("TS", 0, 0) == 0
        assert ms.offset_for_timestamp("TS", 0, t1) == 0
        assert ms.offset_for_timestamp("TS", 0, t1 + 1) == 3
        assert ms.offset_for_timestamp("TS", 0, t2) == 3
        assert ms.offset_for_timestamp("TS", 0, t2 + 1) == 5
        assert ms.offset_for_timestamp("TS", 0, t3) == 5
        assert ms.offset_for_timestamp("TS", 0, t3 + 1) == 9  # none: max offset
        assert ms.offset_for_timestamp("TS", 1, t1) == 0  # empty queue
        for q in range(4):
            ms.offset_for_timestamp("TS", q, 2**62)


# --------------------------------------------------------------------------- message_by_offset


def test_message_by_offset(ms: rmqlog.MessageStore, root: Path) -> None:
    out = ms.put_batch(batch(topic="M", body=[b"b%d" % i * 40 for i in range(40)])).to_pylist()
    ms.dispatch()
    recs = walk(root)
    assert len({r.physical_offset // SMALL_COMMITLOG for r in recs}) > 1
    for o in out:
        row = ms.message_by_offset(o["commitLogOffset"])
        assert row is not None
        assert row["msgId"] == o["msgId"] and row["queueOffset"] == o["queueOffset"]
        got = ms.get_messages("g", "M", row["queueId"], row["queueOffset"], max_count=1).messages.to_pylist()
        assert got == [row]
    # offsets that are not the start of a record
    last = recs[-1]
    end = last.physical_offset + last.total_size
    seg0 = [r for r in recs if r.physical_offset < SMALL_COMMITLOG]
    blank_at = seg0[-1].physical_offset + seg0[-1].total_size
    assert rc.decode_record((root / "commitlog" / f"{0:020d}").read_bytes(), blank_at)[0] == rc.KIND_BLANK
    for bad in (1, 4, recs[3].physical_offset + 20, blank_at, end, end + 1000, 10**12, -1):
        assert ms.message_by_offset(bad) is None, bad


# --------------------------------------------------------------------------- segments


def _segment_files(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def test_segments_roll_with_blank_records(ms: rmqlog.MessageStore, root: Path) -> None:
    out = ms.put_batch(batch(topic="R", body=[bytes([65 + i % 26]) * (100 + 7 * i) for i in range(60)]))
    recs = walk(root)
    assert len(recs) == 60
    assert [r.physical_offset for r in recs] == out.column("commitLogOffset").to_pylist()
    files = _segment_files(root)
    assert len(files) >= 4
    assert [f.name for f in files] == [f"{i * SMALL_COMMITLOG:020d}" for i in range(len(files))]
    assert all(f.stat().st_size == SMALL_COMMITLOG for f in files)
    for i, f in enumerate(files[:-1]):
        data = f.read_bytes()
        in_seg = [r for r in recs if r.physical_offset // SMALL_COMMITLOG == i]
        end = in_seg[-1].physical_offset + in_seg[-1].total_size - i * SMALL_COMMITLOG
        kind, size = rc.decode_record(data, end)
        assert kind == rc.KIND_BLANK and size == SMALL_COMMITLOG - end
        nxt = recs[recs.index(in_seg[-1]) + 1]
        assert nxt.physical_offset == (i + 1) * SMALL_COMMITLOG
        assert nxt.total_size + 8 > SMALL_COMMITLOG - end  # it really did not fit
    for r in recs:  # no record crosses a segment boundary
        assert r.physical_offset // SMALL_COMMITLOG == (r.physical_offset + r.total_size - 1) // SMALL_COMMITLOG


def test_batch_and_single_puts_lay_out_identically(root: Path) -> None:
    bodies = [bytes([48 + i % 10]) * (50 + 13 * i) for i in range(45)]
    with rmqlog.MessageStore.open(root / "a", small_store_config()) as a:
        a.put_batch(batch(topic="R", body=bodies, tags="t"))
    with rmqlog.MessageStore.open(root / "b", small_store_config()) as b:
        for body in bodies:
            b.put("R", body, tags="t")
    ra, rb = walk(root / "a"), walk(root / "b")
    assert [r.physical_offset for r in ra] == [r.physical_offset for r in rb]
    assert [r.body for r in ra] == [r.body for r in rb] == bodies


def test_exact_fit_and_largest_record(ms: rmqlog.MessageStore, root: Path) -> None:
    first = ms.put("F", b"x" * 100, queue_id=0)
    overhead = walk(root)[0].total_size - 100
    # a record leaving exactly 8 bytes stays in the segment ...
    fill = SMALL_COMMITLOG - first_size(root) - 8
    r2 = ms.put("F", b"y" * (fill - overhead), queue_id=0)
    assert r2.commit_log_offset == first_size(root)
    # ... the next one cannot: an 8-byte blank, then the next segment
    r3 = ms.put("F", b"z", queue_id=0)
    assert r3.commit_log_offset == SMALL_COMMITLOG
    seg0 = (root / "commitlog" / f"{0:020d}").read_bytes()
    assert rc.decode_record(seg0, SMALL_COMMITLOG - 8) == (rc.KIND_BLANK, 8)
    # a record leaving 7 bytes does not fit
    r4_body = SMALL_COMMITLOG - (walk(root)[-1].total_size) - 7 - overhead
    r4 = ms.put("F", b"w" * r4_body, queue_id=0)
    assert r4.commit_log_offset == 2 * SMALL_COMMITLOG
    # the largest record a segment takes is segment - 8 bytes
    big = ms.put("F", b"L" * (SMALL_COMMITLOG - 8 - overhead), queue_id=0)
    assert big.commit_log_offset == 3 * SMALL_COMMITLOG
    with pytest.raises(rmqlog.MessageTooLargeError):
        ms.put("F", b"L" * (SMALL_COMMITLOG - 7 - overhead), queue_id=0)
    recs = walk(root)
    assert [r.queue_offset for r in recs] == [0, 1, 2, 3, 4]
    assert recs[-1].total_size == SMALL_COMMITLOG - 8
    assert first.commit_log_offset == 0
    ms.dispatch()
    assert [r["queueOffset"] for r in read_queue_all(ms, "F", 0)] == [0, 1, 2, 3, 4]


def first_size(root: Path) -> int:
    return walk(root)[0].total_size


def test_consume_queue_segments_roll(ms: rmqlog.MessageStore, root: Path) -> None:
    ms.put_batch(batch(topic="CQ", body=[b"%d" % i for i in range(120)], tags="t",
                       queueId=pa.array([2] * 120, pa.int32())))
    assert ms.dispatch() == 120
    qdir = root / "consumequeue" / "CQ" / "2"
    assert sorted(p.name for p in qdir.iterdir()) == [f"{i * 1000:020d}" for i in range(3)]
    assert all(p.stat().st_size == 1000 for p in qdir.iterdir())
    recs = walk(root)
    assert units(root, "CQ", 2) == [(r.physical_offset, r.total_size, rc.java_string_hash("t")) for r in recs]
    assert ms.max_offset("CQ", 2) == 120
    assert [int(r["body"]) for r in read_queue_all(ms, "CQ", 2, max_count=32)] == list(range(120))


# --------------------------------------------------------------------------- reopen, recovery


def test_reopen_continues_offsets(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(batch(topic="RO", body=[b"a" * 300] * 30))
        s.dispatch()
    end = _log_end(root)
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        out = s.put_batch(batch(topic="RO", body=[b"b" * 300] * 30, queueId=pa.array([1] * 30, pa.int32()))).to_pylist()
        assert out[0]["commitLogOffset"] >= end
        assert out[0]["queueOffset"] == 8  # 30 round-robin messages gave queue 1 eight
        s.dispatch()
        for q in range(4):
            got = read_queue_all(s, "RO", q)
            assert [r["queueOffset"] for r in got] == list(range(len(got)))
        assert sum(s.max_offset("RO", q) for q in range(4)) == 60
    _assert_log_consistent(root)


def test_reopen_keeps_existing_segment_size(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(batch(topic="RO", body=[b"a" * 100] * 10))
    with rmqlog.MessageStore.open(root, small_store_config(mapped_file_size_commit_log=65536)) as s:
        s.put_batch(batch(topic="RO", body=[b"b" * 300] * 40))
    assert {f.stat().st_size for f in _segment_files(root)} == {SMALL_COMMITLOG}
    assert len(walk(root)) == 50


def test_lost_append_state_is_rebuilt(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(batch(topic="AS", body=[b"a" * 200] * 30))
        s.put_batch(batch(topic="AT", body=[b"a" * 10] * 3, queueId=pa.array([2, 2, 2], pa.int32())))
    (root / "append.state").unlink()
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        res = s.put("AT", b"next", queue_id=2)
        assert res.queue_offset == 3
        assert res.commit_log_offset == _log_end(root, exclude_last=True)
        res = s.put("AS", b"next", queue_id=0)
        assert res.queue_offset == 8
        s.dispatch()
        for t in ("AS", "AT"):
            for q in range(4):
                got = read_queue_all(s, t, q)
                assert [r["queueOffset"] for r in got] == list(range(len(got)))
    _assert_log_consistent(root)


def test_consume_queues_rebuilt_from_commitlog(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(batch(topic=["X", "Y"] * 60, body=[b"%d" % i for i in range(120)],
                          tags=pa.array(["a", None] * 60, pa.string())))
        s.dispatch()
    before = {(t, q): units(root, t, q) for t in ("X", "Y") for q in range(4)}
    import shutil

    shutil.rmtree(root / "consumequeue")
    (root / "dispatch.state").unlink()
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.recovery is not None and s.recovery.redispatched == 120 and s.dispatch() == 0
    assert {(t, q): units(root, t, q) for t in ("X", "Y") for q in range(4)} == before


def _log_end(root: Path, *, exclude_last: bool = False) -> int:
    recs = walk(root)
    if exclude_last:
        recs = recs[:-1]
    last = recs[-1]
    end = last.physical_offset + last.total_size
    return end


def _assert_log_consistent(root: Path) -> None:
    """refcodec reads the whole log; per queue the offsets are dense and every unit points at its record."""
    recs = walk(root)
    by_queue: dict[tuple[str, int], list[rc.RefRecord]] = {}
    for r in recs:
        by_queue.setdefault((r.topic, r.queue_id), []).append(r)
    for (topic, qid), rs in by_queue.items():
        assert [r.queue_offset for r in rs] == list(range(len(rs))), (topic, qid)
        assert units(root, topic, qid) == [(r.physical_offset, r.total_size, r.tags_code) for r in rs]


# --------------------------------------------------------------------------- hosts, config


def test_store_and_born_host_configurable(root: Path) -> None:
    cfg = small_store_config(store_host="10.0.0.7:9876", born_host="192.168.1.2:5555")
    with rmqlog.MessageStore.open(root, cfg) as s:
        res = s.put("H", b"x", queue_id=0)
        assert res.msg_id == rc.offset_msg_id("10.0.0.7:9876", 0)
        assert res.msg_id.startswith("0A00000700002694")
        s.dispatch()
        row = s.message_by_id(res.msg_id)
        assert row is not None and row["storeHost"] == "10.0.0.7:9876" and row["bornHost"] == "192.168.1.2:5555"
    [rec] = walk(root)
    assert (rec.store_host, rec.born_host, rec.sys_flag) == ("10.0.0.7:9876", "192.168.1.2:5555", 0)


def test_ipv6_store_host(root: Path) -> None:
    cfg = small_store_config(store_host="[fe80::1]:10911")
    with rmqlog.MessageStore.open(root, cfg) as s:
        out = s.put_batch(batch(topic="V6", body=[b"a", b"bb", b"ccc"], queueId=pa.array([0, 0, 0], pa.int32()))).to_pylist()
        s.dispatch()
        rows = read_queue_all(s, "V6", 0)
    recs = walk(root)
    assert [r.sys_flag for r in recs] == [rc.SYSFLAG_BORN_HOST_V6 | rc.SYSFLAG_STORE_HOST_V6] * 3
    assert recs[0].store_host == "[fe80::1]:10911" and recs[0].born_host == "[fe80::1]:10911"
    assert recs[0].total_size == 91 + 24 + 1 + 2 + len(rc.encode_properties(recs[0].properties))
    for o, r, row in zip(out, recs, rows, strict=True):
        assert len(o["msgId"]) == 56
        assert o["msgId"] == r.msg_id == row["msgId"] == rc.offset_msg_id("[fe80::1]:10911", r.physical_offset)
        assert row["storeHost"] == "[fe80::1]:10911" and row["body"] == r.body
    assert units(root, "V6", 0) == [(r.physical_offset, r.total_size, 0) for r in recs]


@pytest.mark.parametrize("host", ["nohost", "1.2.3.4", "1.2.3.4:x", "300.1.1.1:80", ""])
def test_bad_store_host(host: str) -> None:
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(store_host=host)


def test_config_validation() -> None:
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(mapped_file_size_consume_queue=1001)
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(mapped_file_size_consume_queue=0)
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(mapped_file_size_commit_log=100)
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(max_message_size=0)
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(default_topic_queue_nums=0)
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(flush_disk_type="SOMETIMES")
    cfg = rmqlog.StoreConfig()
    with pytest.raises(Exception):  # frozen  # noqa: B017
        cfg.max_message_size = 1  # type: ignore[misc]
    assert cfg.replace(max_message_size=5).max_message_size == 5


def test_config_from_properties(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# RocketMQ broker config\n"
        "brokerClusterName=DefaultCluster\n"
        "brokerName=broker-a\n"
        "brokerIP1=10.1.2.3\n"
        "listenPort=10000\n"
        "storePathRootDir=/tmp/ignored\n"
        "mappedFileSizeCommitLog=8192\n"
        "mappedFileSizeConsumeQueue=1000\n"
        "maxMessageSize = 1024\n"
        "defaultTopicQueueNums=2\n"
        "autoCreateTopicEnable=false\n"
        "flushDiskType=SYNC_FLUSH\n"
        "fileReservedTime=48\n"
        "deleteWhen=04;16\n",
        "utf-8",
    )
    cfg = rmqlog.StoreConfig.from_properties(conf)
    assert cfg.store_host == "10.1.2.3:10000"
    assert cfg.mapped_file_size_commit_log == 8192
    assert cfg.mapped_file_size_consume_queue == 1000
    assert cfg.max_message_size == 1024
    assert cfg.default_topic_queue_nums == 2
    assert cfg.auto_create_topic_enable is False
    assert cfg.flush_disk_type == rmqlog.SYNC_FLUSH
    assert cfg.file_reserved_time == 48
    assert cfg.delete_when == "04;16"
    bad = tmp_path / "bad.conf"
    bad.write_text("defaultTopicQueueNums=many\n", "utf-8")
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig.from_properties(bad)
    bad.write_text("autoCreateTopicEnable=yes\n", "utf-8")
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig.from_properties(bad)
    bad.write_text("mappedFileSizeConsumeQueue=1001\n", "utf-8")
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig.from_properties(bad)


# RocketMQ's key is 'checkCRCOnRecover' (a regex camel->snake split made it check_c_r_c_...; fixed in 0a51de4)
def test_config_from_properties_check_crc(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("checkCRCOnRecover=false\nflushCommitLogThoroughInterval=2000\n", "utf-8")
    cfg = rmqlog.StoreConfig.from_properties(conf)
    assert cfg.check_crc_on_recover is False
    assert cfg.flush_commit_log_thorough_interval == 2000


# --------------------------------------------------------------------------- closed store


def _closed_calls():
    return {
        "put": lambda s: s.put("T", b"x"),
        "put_batch": lambda s: s.put_batch(batch(topic="T", body=[b"x"])),
        "dispatch": lambda s: s.dispatch(),
        "get_messages": lambda s: s.get_messages("g", "T", 0, 0),
        "message_by_offset": lambda s: s.message_by_offset(0),
        "message_by_id": lambda s: s.message_by_id(rc.offset_msg_id(DEFAULT_HOST, 0)),
        "start_services": lambda s: s.start_services(),
        "min_offset": lambda s: s.min_offset("T", 0),
        "max_offset": lambda s: s.max_offset("T", 0),
        "offset_for_timestamp": lambda s: s.offset_for_timestamp("T", 0, 0),
        "read_queue": lambda s: s.read_queue("T", 0, 0, 10),
        "commit_offset": lambda s: s.commit_offset("g", "T", 0, 1),
        "committed_offset": lambda s: s.committed_offset("g", "T", 0),
        "create_topic": lambda s: s.create_topic("T2", 2),
        "topics": lambda s: s.topics(),
    }


# (min_offset .. topics did not check before commit 0a51de4; these cases pin that fix)
@pytest.mark.parametrize("name", list(_closed_calls()))
def test_closed_store_raises(root: Path, name: str) -> None:
    s = rmqlog.MessageStore.open(root, small_store_config())
    s.put("T", b"x", queue_id=0)
    s.dispatch()
    s.close()
    s.close()  # idempotent
    with pytest.raises(rmqlog.StoreClosedError):
        _closed_calls()[name](s)


def test_context_manager_closes(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"x")
    with pytest.raises(rmqlog.StoreClosedError):
        s.put("T", b"y")


# --------------------------------------------------------------------------- dispatcher


def test_background_dispatcher(ms: rmqlog.MessageStore) -> None:
    ms.start_services()
    ms.start_services()  # a second start is a no-op
    try:
        total = 0
        for i in range(8):
            ms.put_batch(batch(topic="BG", body=[b"%d-%d" % (i, j) for j in range(25)]))
            total += 25
        ok = wait_until(lambda: sum(ms.max_offset("BG", q) for q in range(4)) == total, timeout=20)
        assert ok, [ms.max_offset("BG", q) for q in range(4)]
        ms.put("BG", b"late", queue_id=3)
        assert wait_until(lambda: ms.max_offset("BG", 3) == total // 4 + 1, timeout=20)
    finally:
        ms.stop_services()
    assert ms.dispatch() == 0
    bodies = sorted(r["body"] for q in range(4) for r in read_queue_all(ms, "BG", q))
    assert bodies == sorted([b"%d-%d" % (i, j) for i in range(8) for j in range(25)] + [b"late"])


def test_close_stops_background_dispatcher(root: Path) -> None:
    def dispatcher_threads() -> int:  # the dispatcher runs in the store's one service thread
        return sum(1 for t in threading.enumerate() if t.name == "rmq-services")

    before = dispatcher_threads()
    s = rmqlog.MessageStore.open(root, small_store_config())
    s.start_services()
    s.put("T", b"x")
    assert wait_until(lambda: sum(s.max_offset("T", q) for q in range(4)) == 1)
    s.close()
    assert dispatcher_threads() == before
    s.stop_services()  # harmless after close


def test_dispatch_is_idempotent(ms: rmqlog.MessageStore, root: Path) -> None:
    ms.put_batch(batch(topic=["I", "J"] * 50, body=[b"%d" % i for i in range(100)],
                       tags=pa.array(["a", "b", None, "c"] * 25, pa.string())))
    assert ms.dispatch() == 100
    assert ms.dispatch() == 0
    snap = snapshot_files(root)
    all_units = {(t, q): units(root, t, q) for t in ("I", "J") for q in range(4)}
    assert sum(len(u) for u in all_units.values()) == 100
    # lost dispatch position: rebuilt from the consume queues, nothing changes or is added
    (root / "dispatch.state").unlink()
    assert ms.dispatch() == 0
    assert snapshot_files(root) == snap
    # a position from before every record: the records are walked again, the units stay as they are
    (root / "dispatch.state").write_text(json.dumps({"version": 1, "offset": 0}))
    ms.dispatch()
    assert snapshot_files(root) == snap
    assert {(t, q): units(root, t, q) for t in ("I", "J") for q in range(4)} == all_units
    # and a second store object on the same root agrees
    with rmqlog.MessageStore.open(root, small_store_config()) as other:
        assert other.dispatch() == 0
        assert sum(other.max_offset(t, q) for t in ("I", "J") for q in range(4)) == 100
    ms.put("I", b"new", queue_id=0)
    assert ms.dispatch() == 1
    assert len(units(root, "I", 0)) == len(all_units[("I", 0)]) + 1


def test_two_store_objects_same_root(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as a, rmqlog.MessageStore.open(root, small_store_config()) as b:
        a.put_batch(batch(topic="S", body=[b"a%d" % i for i in range(10)], queueId=pa.array([0] * 10, pa.int32())))
        b.put_batch(batch(topic="S", body=[b"b%d" % i for i in range(10)], queueId=pa.array([0] * 10, pa.int32())))
        assert b.dispatch() == 20
        assert a.dispatch() == 0
        assert [r["queueOffset"] for r in read_queue_all(a, "S", 0)] == list(range(20))
        assert [r["body"] for r in read_queue_all(b, "S", 0)] == [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(10)]


# --------------------------------------------------------------------------- retention (segments removed)


def test_statuses_after_oldest_segment_removed(root: Path) -> None:
    """RocketMQ's retention deletes the oldest commitlog segments: min offset moves up."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        out = s.put_batch(batch(topic="RT", body=[b"r" * 200] * 60, queueId=pa.array([0] * 60, pa.int32()))).to_pylist()
        s.dispatch()
    (root / "commitlog" / f"{0:020d}").unlink()
    first_kept = next(o["queueOffset"] for o in out if o["commitLogOffset"] >= SMALL_COMMITLOG)
    assert first_kept > 0
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.min_offset("RT", 0) == first_kept
        assert s.max_offset("RT", 0) == 60
        small = s.get_messages("g", "RT", 0, 0)
        assert small.status is S.OFFSET_TOO_SMALL and small.next_begin_offset == first_kept
        assert (small.min_offset, small.max_offset) == (first_kept, 60)
        found = s.get_messages("g", "RT", 0, first_kept, max_count=5)
        assert found.status is S.FOUND
        assert found.messages["queueOffset"].to_pylist() == list(range(first_kept, first_kept + 5))
        badly = s.get_messages("g", "RT", 0, 61)
        assert badly.status is S.OFFSET_OVERFLOW_BADLY and badly.next_begin_offset == 60
        one = s.get_messages("g", "RT", 0, 60)
        assert one.status is S.OFFSET_OVERFLOW_ONE and one.next_begin_offset == 60
        assert s.message_by_offset(0) is None
        assert s.read_queue("RT", 0, 0, 60)["queueOffset"].to_pylist() == list(range(first_kept, 60))
        res = s.put("RT", b"after", queue_id=0)
        assert res.queue_offset == 60
        assert s.dispatch() == 1
        assert read_queue_all(s, "RT", 0)[-1]["body"] == b"after"
    assert [r.queue_offset for r in walk(root)] == list(range(first_kept, 61))


# --------------------------------------------------------------------------- more hosts, filters


def test_ipv6_born_host_ipv4_store_host(root: Path) -> None:
    cfg = small_store_config(born_host="[::1]:1234")
    with rmqlog.MessageStore.open(root, cfg) as s:
        res = s.put("M6", b"mixed", queue_id=0, tags="t")
        s.dispatch()
        row = s.message_by_id(res.msg_id)
    [rec] = walk(root)
    assert rec.sys_flag == rc.SYSFLAG_BORN_HOST_V6
    assert (rec.born_host, rec.store_host) == ("[::1]:1234", DEFAULT_HOST)
    assert len(res.msg_id) == 32 and res.msg_id == rec.msg_id
    assert row is not None and row["bornHost"] == "[::1]:1234" and row["storeHost"] == DEFAULT_HOST
    assert row["body"] == b"mixed" and row["tags"] == "t" and row["sysFlag"] == rc.SYSFLAG_BORN_HOST_V6


def test_ipv6_message_by_id(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config(store_host="[2001:db8::7]:10911")) as s:
        ids = [s.put("V6", b"%d" % i).msg_id for i in range(3)]
        for i, msg_id in enumerate(ids):
            row = s.message_by_id(msg_id)
            assert row is not None and row["body"] == b"%d" % i
        assert s.message_by_id(ids[0][:-1] + "F") is None


def test_tag_filter_beyond_one_window(ms: rmqlog.MessageStore) -> None:
    n = 1000
    ms.put_batch(batch(topic="W", body=[b"%d" % i for i in range(n)], queueId=pa.array([0] * n, pa.int32()),
                       tags=pa.array(["x"] * (n - 1) + ["y"], pa.string())))
    ms.dispatch()
    offset, statuses = 0, []
    while True:
        res = ms.get_messages("g", "W", 0, offset, tags="y")
        statuses.append(res.status)
        if res.status is not S.NO_MATCHED_MESSAGE:
            break
        assert res.next_begin_offset > offset
        offset = res.next_begin_offset
    assert statuses[-1] is S.FOUND
    assert _bodies(res) == [n - 1] and res.next_begin_offset == n


# --------------------------------------------------------------------------- damaged files


def test_corrupt_record_stops_dispatch(ms: rmqlog.MessageStore, root: Path) -> None:
    out = ms.put_batch(batch(topic="D", body=[b"abc"] * 5, queueId=pa.array([0] * 5, pa.int32()))).to_pylist()
    at = out[3]["commitLogOffset"]
    seg = root / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[at + 4 : at + 8] = b"\x00\x00\x00\x01"  # bad magic
    seg.write_bytes(bytes(data))
    with pytest.raises(rmqlog.CorruptStoreError):
        ms.dispatch()
    assert ms.max_offset("D", 0) <= 3
    assert ms.message_by_offset(at) is None
    assert ms.message_by_offset(out[2]["commitLogOffset"])["body"] == b"abc"


def test_segments_of_different_sizes(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"x")
    (root / "commitlog" / f"{SMALL_COMMITLOG:020d}").write_bytes(bytes(100))
    with pytest.raises(rmqlog.CorruptStoreError):
        rmqlog.MessageStore.open(root, small_store_config())


@pytest.mark.parametrize("content", [b"", b"not json", b'{"version": 1, "tail": '])
def test_unreadable_append_state_is_rebuilt(root: Path, content: bytes) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(batch(topic="T", body=[b"x" * 300] * 20, queueId=pa.array([1] * 20, pa.int32())))
    end = _log_end(root)
    (root / "append.state").write_bytes(content)
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        res = s.put("T", b"next", queue_id=1)
        assert (res.commit_log_offset, res.queue_offset) == (end, 20)
        assert s.recovery is not None and s.recovery.redispatched == 20 and s.dispatch() == 1
    _assert_log_consistent(root)


def test_config_file_falls_back_to_backup(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.commit_offset("g", "T", 0, 5)
        s.commit_offset("g", "T", 0, 6)
    (root / "config" / "consumerOffset.json").write_text("{garbage")
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.committed_offset("g", "T", 0) == 5  # the .bak holds the state before the last commit
        s.commit_offset("g", "T", 1, 9)
    data = rc.parse_fastjson((root / "config" / "consumerOffset.json").read_text("utf-8"))
    assert data["offsetTable"]["T@g"] == {"0": 5, "1": 9}
    (root / "config" / "topics.json").write_text("[")
    with pytest.raises(rmqlog.CorruptStoreError):
        rmqlog.MessageStore.open(root, small_store_config())


def test_commit_offset_validation(ms: rmqlog.MessageStore) -> None:
    with pytest.raises(rmqlog.InvalidGroupError):
        ms.commit_offset("bad group", "T", 0, 1)
    with pytest.raises(rmqlog.InvalidTopicError):
        ms.commit_offset("g", "bad/topic", 0, 1)
    with pytest.raises(rmqlog.InvalidArgumentError, match="queue_id"):
        ms.commit_offset("g", "T", -1, 1)
    with pytest.raises(rmqlog.InvalidArgumentError, match="offset"):
        ms.commit_offset("g", "T", 0, -5)
    assert ms.committed_offset("g", "T", 0) == -1
    ms.commit_offset("g", "T", 0, 0)
    assert ms.committed_offset("g", "T", 0) == 0


@pytest.mark.parametrize(("max_count", "tags"), [(0, "*"), (0, "m"), (-1, "m")])
def test_get_messages_non_positive_max_count(ten: rmqlog.MessageStore, max_count: int, tags: str) -> None:
    with pytest.raises(rmqlog.InvalidArgumentError, match="max_count"):
        ten.get_messages("g", "Q", 0, 2, max_count=max_count, tags=tags)


# --------------------------------------------------------------------------- a writer that died


def _dead_writer_bytes(root: Path, dead: Path, bodies: list[bytes]) -> int:
    """Leave in ``root``'s segments what a writer killed before publishing would leave there.

    The writer's batch is appended to a copy of the store; its bytes past the published tail
    are copied back into ``root``'s segment files, ``root``'s append.state is untouched.
    Returns the published tail.
    """
    import shutil

    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        tail = s.append_state().tail
    shutil.copytree(root, dead)
    with rmqlog.MessageStore.open(dead, small_store_config()) as d:
        d.put_batch(batch(topic="T", body=bodies, queueId=pa.array([0] * len(bodies), pa.int32())))
    for f in sorted((dead / "commitlog").iterdir()):
        start = int(f.name)
        if start + SMALL_COMMITLOG <= tail:
            continue
        mine = root / "commitlog" / f.name
        data = bytearray(mine.read_bytes() if mine.exists() else bytes(SMALL_COMMITLOG))
        cut = max(0, tail - start)
        data[cut:] = f.read_bytes()[cut:]
        mine.write_bytes(bytes(data))
    return tail


def test_dead_writer_bytes_are_not_part_of_the_log(root: Path, tmp_path: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        for _ in range(3):
            s.put("T", b"a" * 200, queue_id=0)
    tail = _dead_writer_bytes(root, tmp_path / "dead", [b"D" * 500, b"E" * 20])
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.message_by_offset(tail) is None  # not published
        assert s.dispatch() == 0 and s.max_offset("T", 0) == 3  # (dispatched by an earlier open)
        res = s.put("T", b"S" * 10, queue_id=0)
        assert (res.commit_log_offset, res.queue_offset) == (tail, 3)
        s.dispatch()
        assert [r["body"] for r in read_queue_all(s, "T", 0)][-1] == b"S" * 10
    assert [r.body[:1] for r in walk(root)] == [b"a", b"a", b"a", b"S"]


def test_dead_writer_bytes_in_next_segment_are_scrubbed(root: Path, tmp_path: Path) -> None:
    # Before 70ed813 CommitLog.append scrubbed a new segment only for rows after the batch's first
    # ('if a > 0'): when the FIRST record rolled, a dead writer's records after it survived, read
    # by RocketMQ/refcodec as part of the log and by the rebuild when append.state was lost.
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        for _ in range(11):
            s.put("T", b"a" * 200, queue_id=0)  # 11 x 334 bytes: 422 left in segment 0
    tail = _dead_writer_bytes(root, tmp_path / "dead", [b"D" * 300, b"E" * 300])
    assert tail > SMALL_COMMITLOG - 500
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        res = s.put("T", b"S" * 300, queue_id=0)  # does not fit: goes to the next segment
        assert res.commit_log_offset == SMALL_COMMITLOG
    assert [r.body[:1] for r in walk(root)] == [b"a"] * 11 + [b"S"]
    (root / "append.state").unlink()
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.put("T", b"N", queue_id=0).queue_offset == 12


def test_retention_of_whole_consume_queue_segment(root: Path) -> None:
    """Oldest commitlog segments and the consume-queue segment wholly below them are gone (RocketMQ retention)."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        body = b"r" * 266  # 400-byte records: 10 per commitlog segment, 50 per consume-queue segment
        out = s.put_batch(batch(topic="RQ", body=[body] * 120, queueId=pa.array([0] * 120, pa.int32()))).to_pylist()
        assert s.dispatch() == 120
    assert out[50]["commitLogOffset"] == 5 * SMALL_COMMITLOG and out[49]["commitLogOffset"] < 5 * SMALL_COMMITLOG
    for i in range(5):
        (root / "commitlog" / f"{i * SMALL_COMMITLOG:020d}").unlink()
    (root / "consumequeue" / "RQ" / "0" / f"{0:020d}").unlink()
    (root / "dispatch.state").unlink()
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert (s.min_offset("RQ", 0), s.max_offset("RQ", 0)) == (50, 120)
        assert s.dispatch() == 0
        small = s.get_messages("g", "RQ", 0, 10)
        assert small.status is S.OFFSET_TOO_SMALL and small.next_begin_offset == 50
        found = s.get_messages("g", "RQ", 0, 50, max_count=3)
        assert found.status is S.FOUND and found.messages["queueOffset"].to_pylist() == [50, 51, 52]
        assert s.get_messages("g", "RQ", 0, 500).next_begin_offset == 120
        assert s.offset_for_timestamp("RQ", 0, 0) == 50
        assert s.read_queue("RQ", 0, 0, 1000)["queueOffset"].to_pylist() == list(range(50, 120))
        assert [r["queueOffset"] for r in read_queue_all(s, "RQ", 0, max_count=16)] == list(range(50, 120))
        assert s.put("RQ", b"new", queue_id=0).queue_offset == 120
        assert s.dispatch() == 1
        assert s.max_offset("RQ", 0) == 121
    assert rc.consume_queue_start(str(root / "consumequeue" / "RQ" / "0")) == 50
    assert [u[0] for u in units(root, "RQ", 0)] == [o["commitLogOffset"] for o in out[50:]] + [walk(root)[-1].physical_offset]


def test_rebuild_stops_at_a_torn_record(root: Path) -> None:
    """No append.state and a half-written record at the end of the log: the log ends before it."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        out = s.put_batch(batch(topic="TR", body=[b"w" * 100] * 4, queueId=pa.array([0] * 4, pa.int32()))).to_pylist()
    seg = root / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    end = out[-1]["commitLogOffset"]
    torn = bytes(data[end : end + 60])  # the first 60 bytes of the last record, as a killed writer leaves them
    data[end:] = bytes(len(data) - end)
    data[end : end + 60] = torn
    seg.write_bytes(bytes(data))
    (root / "append.state").unlink()
    (root / "flush.state").unlink()  # a flushed position never covers an unpublished record
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.append_state().tail == end
        assert s.message_by_offset(end) is None
        res = s.put("TR", b"after", queue_id=0)
        assert (res.commit_log_offset, res.queue_offset) == (end, 3)
        assert s.recovery is not None and s.recovery.redispatched == 3 and s.dispatch() == 1
        assert [r["body"] for r in read_queue_all(s, "TR", 0)] == [b"w" * 100] * 3 + [b"after"]
    assert [r.body for r in walk(root)] == [b"w" * 100] * 3 + [b"after"]


def test_recovery_truncates_consume_queues_past_the_log_end(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        out = s.put_batch(batch(topic="TR", body=[b"w" * 100] * 4, queueId=pa.array([0] * 4, pa.int32()))).to_pylist()
        assert s.dispatch() == 4
    # power loss: the commitlog page holding the last record never reached the disk, and
    # neither did the state files; the consume queue's page did
    seg = root / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    lost = out[-1]["commitLogOffset"]
    data[lost:] = bytes(len(data) - lost)
    seg.write_bytes(bytes(data))
    (root / "append.state").unlink()
    (root / "dispatch.state").unlink()
    # the durable flushed position and the checkpoint are written after the data they cover
    # is on disk: with that record's page lost, their last versions were never written
    (root / "flush.state").unlink()
    (root / "checkpoint").unlink()
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.max_offset("TR", 0) == 3  # the unit of the lost record is gone
        res = s.put("TR", b"after", queue_id=0)
        assert (res.commit_log_offset, res.queue_offset) == (lost, 3)
        assert s.dispatch() == 1
        for _ in range(3):
            s.put("TR", b"more", queue_id=0)
        assert s.dispatch() == 3
        assert [r["body"] for r in read_queue_all(s, "TR", 0)] == [b"w" * 100] * 3 + [b"after"] + [b"more"] * 3
    _assert_log_consistent(root)


def test_opening_and_closing_many_stores_keeps_no_descriptor(tmp_path: Path) -> None:
    """A process that opens store after store (a notebook, the fuzz test, a service) must not
    run out of descriptors: the locks of a closed store, and of an open that failed, are released."""
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    with rmqlog.MessageStore.open(tmp_path / "warm"):
        pass
    before = fds()
    for i in range(20):
        with rmqlog.MessageStore.open(tmp_path / f"s{i}", small_store_config()) as s:
            s.put("t", b"x")
        (tmp_path / f"s{i}" / "config" / "topics.json").write_bytes(b"{")
        (tmp_path / f"s{i}" / "config" / "topics.json.bak").write_bytes(b"{")
        with pytest.raises(rmqlog.CorruptStoreError):
            rmqlog.MessageStore.open(tmp_path / f"s{i}", small_store_config())
    assert fds() == before
