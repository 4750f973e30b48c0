"""Writing: put / put_batch results and the records they lay down, msgIds and UNIQ_KEY,
queue assignment and topics, store and born hosts.

Bytes written by the store are checked with the independent reference codec (refcodec).
"""

from __future__ import annotations

import datetime as dt
import re
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
    units,
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
    tbl = batch(
        topic=["A", "B", "A", "B", "A"],
        body=[b"a0", b"b0", b"a1", b"b1", b"a2"],
        queueId=pa.array([0, 1, 0, 1, 0], pa.int32()),
    )
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
    tbl = pa.table(
        {
            "topic": pa.array(["T", "T", "T"]),
            "body": pa.array(["text body", "", "ü"], pa.string()),  # string bodies are UTF-8 encoded
            "queueId": pa.array([2, None, 3], pa.int64()),
            "tags": pa.array(["x", None, "y"]),
            "keys": pa.array([["a"], None, []], pa.list_(pa.string())),
            "properties": pa.array(
                [[("k", "v")], None, [("k2", "v2"), ("k3", "v3")]], pa.map_(pa.string(), pa.string())
            ),
            "flag": pa.array([1, None, -5], pa.int32()),
            "bornTimestamp": pa.array(born, pa.int64()),
        }
    )
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
    ms.put_batch(
        pa.table({"topic": ["T"], "body": [b"x"], "bornTimestamp": pa.array([when], pa.timestamp("us", tz="UTC"))})
    )
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
    tbl = pa.table(
        {
            "topic": ["T", "T"],
            "body": [b"m", b"n"],
            "properties": pa.array(
                [[("UNIQ_KEY", "0A0B0C0D1234ABCDEF0123456789ABCE")], None], pa.map_(pa.string(), pa.string())
            ),
        }
    )
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
    tbl = pa.table(
        {
            "topic": ["three", "X", "three", "X", "three", "three"],
            "body": [b"0", b"1", b"2", b"3", b"4", b"5"],
            "queueId": pa.array([None, None, 2, None, None, None], pa.int32()),
        }
    )
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
        "order": False,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "NewTopic",
        "topicSysFlag": 0,
        "writeQueueNums": 4,
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


# --------------------------------------------------------------------------- hosts


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
        out = s.put_batch(
            batch(topic="V6", body=[b"a", b"bb", b"ccc"], queueId=pa.array([0, 0, 0], pa.int32()))
        ).to_pylist()
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
