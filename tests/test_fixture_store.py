"""The store on files written by RocketMQ itself (the shared fixtures).

- commitlog-8k-4.9: one 8192-byte commitlog segment, 47 records of topic ``abc`` queue 0 and
  no consume queue: the store must infer the segment size, rebuild the consume queue,
  decode every field, and append after it in RocketMQ's layout.
- broker-4.4-store/config: fastjson config files (unquoted integer keys).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from conftest import (
    FIXTURE_COMMITLOG,
    FIXTURE_CONFIG_DIR,
    copy_file,
    ms_to_dt,
    read_queue_all,
    small_store_config,
    units,
    walk,
)

import refcodec as rc
import rmqlog
from rmqlog import GetMessageStatus as S

BODY = b"Once, there was a chance for me!"
N = 47
SIZE = 172
SEG = 8192
TAG1_CODE = 2567159
FIRST_ID = "C0A8470100001FBB0000000000000000"
SECOND_ID = "C0A8470100001FBB00000000000000AC"
GROUP = "please_rename_unique_group_name_4"


@pytest.fixture
def fixture_root(tmp_path: Path, fixture_dir: Path) -> Path:
    """A store root holding a writable copy of the fixture commitlog segment."""
    root = tmp_path / "rmq"
    copy_file(FIXTURE_COMMITLOG, root / "commitlog" / FIXTURE_COMMITLOG.name)
    return root


@pytest.fixture
def ref_records(fixture_dir: Path) -> list[rc.RefRecord]:
    return rc.walk_commitlog(str(FIXTURE_COMMITLOG.parent))


@pytest.fixture
def fx(fixture_root: Path):
    """The fixture store, opened with the default config (1 GiB segments configured)."""
    s = rmqlog.MessageStore.open(fixture_root)
    try:
        yield s
    finally:
        s.close()


# --------------------------------------------------------------------------- commitlog


def test_dispatch_rebuilds_consume_queue(fx: rmqlog.MessageStore, fixture_root: Path) -> None:
    assert fx.recovery is not None and fx.recovery.redispatched == N  # dispatched at open, as a broker does
    assert fx.dispatch() == 0  # nothing new
    assert units(fixture_root, "abc", 0) == [(i * SIZE, SIZE, TAG1_CODE) for i in range(N)]
    assert rc.java_string_hash("TAG1") == TAG1_CODE
    assert sorted(p.name for p in (fixture_root / "consumequeue").iterdir()) == ["abc"]
    assert sorted(p.name for p in (fixture_root / "consumequeue" / "abc").iterdir()) == ["0"]
    assert fx.min_offset("abc", 0) == 0
    assert fx.max_offset("abc", 0) == N


def test_open_does_not_modify_fixture_segment(fx: rmqlog.MessageStore, fixture_root: Path) -> None:
    fx.dispatch()
    fx.get_messages("g", "abc", 0, 0, max_count=N)
    fx.close()
    assert (fixture_root / "commitlog" / FIXTURE_COMMITLOG.name).read_bytes() == FIXTURE_COMMITLOG.read_bytes()


def test_every_field_decoded(fx: rmqlog.MessageStore, ref_records: list[rc.RefRecord]) -> None:
    fx.dispatch()
    res = fx.get_messages("g", "abc", 0, 0, max_count=100)
    assert res.status is S.FOUND
    assert (res.next_begin_offset, res.min_offset, res.max_offset) == (N, 0, N)
    assert res.messages.schema == rmqlog.MESSAGE_SCHEMA
    rows = res.messages.to_pylist()
    assert len(rows) == N
    for i, (row, ref) in enumerate(zip(rows, ref_records, strict=True)):
        born_ms = ref.born_timestamp
        assert row == {
            "topic": "abc",
            "queueId": 0,
            "queueOffset": i,
            "commitLogOffset": i * SIZE,
            "msgId": f"C0A8470100001FBB{i * SIZE:016X}",
            "body": BODY,
            "tags": "TAG1",
            "keys": [str(born_ms)],
            "properties": row["properties"],  # compared as a mapping below
            "bornTimestamp": ms_to_dt(born_ms),
            "storeTimestamp": ms_to_dt(ref.store_timestamp),
            "bornHost": "127.0.0.1:0",
            "storeHost": "192.168.71.1:8123",
            "flag": 0,
            "sysFlag": 0,
            "reconsumeTimes": 0,
            "bodyCRC": 151131488,
        }
        assert dict(row["properties"]) == {"0": "imagoodperson0", "KEYS": str(born_ms), "TAGS": "TAG1"}
        assert row["msgId"] == ref.msg_id
    assert rows[0]["msgId"] == FIRST_ID
    assert rows[1]["msgId"] == SECOND_ID


def test_default_batch_and_next_offsets(fx: rmqlog.MessageStore) -> None:
    fx.dispatch()
    first = fx.get_messages("g", "abc", 0, 0)
    assert first.status is S.FOUND and len(first) == 32 and first.next_begin_offset == 32
    second = fx.get_messages("g", "abc", 0, 32)
    assert second.status is S.FOUND and len(second) == N - 32 and second.next_begin_offset == N
    assert second.messages["queueOffset"].to_pylist() == list(range(32, N))
    end = fx.get_messages("g", "abc", 0, N)
    assert end.status is S.OFFSET_OVERFLOW_ONE and end.next_begin_offset == N and len(end) == 0
    assert [r["queueOffset"] for r in read_queue_all(fx, "abc", 0, max_count=5)] == list(range(N))


def test_tag_filter_on_fixture(fx: rmqlog.MessageStore) -> None:
    fx.dispatch()
    hit = fx.get_messages("g", "abc", 0, 0, max_count=100, tags="TAG1 || TAG2")
    assert hit.status is S.FOUND and len(hit) == N
    miss = fx.get_messages("g", "abc", 0, 0, max_count=100, tags="TAG2")
    assert miss.status is S.NO_MATCHED_MESSAGE and len(miss) == 0
    assert miss.next_begin_offset == N


def test_message_by_id_and_offset(fx: rmqlog.MessageStore, ref_records: list[rc.RefRecord]) -> None:
    first = fx.message_by_id(FIRST_ID)
    second = fx.message_by_id(SECOND_ID)
    assert first is not None and second is not None
    assert (first["queueOffset"], first["commitLogOffset"], first["body"]) == (0, 0, BODY)
    assert (second["queueOffset"], second["commitLogOffset"], second["body"]) == (1, SIZE, BODY)
    assert second["storeTimestamp"] == ms_to_dt(ref_records[1].store_timestamp)
    assert fx.message_by_offset(46 * SIZE)["queueOffset"] == 46
    assert fx.message_by_offset(8084) is None  # the blank end-of-segment record
    assert fx.message_by_offset(SIZE + 1) is None  # inside a record
    assert fx.message_by_offset(SEG) is None  # past the end of the log
    assert fx.message_by_id("7F00000100002A9F00000000000000AC") is None  # another store host


def test_offset_for_timestamp_on_fixture(fx: rmqlog.MessageStore, ref_records: list[rc.RefRecord]) -> None:
    fx.dispatch()
    ts = [r.store_timestamp for r in ref_records]
    assert ts == sorted(ts)
    for probe in sorted({ts[0] - 1, ts[0], ts[10], ts[10] + 1, ts[-1], ts[-1] + 1}):
        expected = next((i for i, t in enumerate(ts) if t >= probe), N)
        assert fx.offset_for_timestamp("abc", 0, probe) == expected, probe


def test_append_after_fixture(fx: rmqlog.MessageStore, fixture_root: Path) -> None:
    fx.dispatch()
    res = fx.put("abc", b"appended", queue_id=0, tags="TAG1")
    assert res.commit_log_offset == SEG  # the fixture's segment ends with a blank record
    assert res.queue_offset == N
    assert res.queue_id == 0
    assert res.msg_id == rc.offset_msg_id("127.0.0.1:10911", SEG)
    # the size of the existing segment wins over the configured 1 GiB
    new_seg = fixture_root / "commitlog" / f"{SEG:020d}"
    assert new_seg.stat().st_size == SEG
    assert (fixture_root / "commitlog" / FIXTURE_COMMITLOG.name).read_bytes() == FIXTURE_COMMITLOG.read_bytes()
    recs = walk(fixture_root)
    assert len(recs) == N + 1
    last = recs[-1]
    assert (last.physical_offset, last.queue_offset, last.queue_id, last.topic, last.body) == (
        SEG,
        N,
        0,
        "abc",
        b"appended",
    )
    assert last.store_host == "127.0.0.1:10911"
    assert last.properties["TAGS"] == "TAG1"
    assert fx.dispatch() == 1
    assert units(fixture_root, "abc", 0)[-1] == (SEG, last.total_size, TAG1_CODE)
    got = fx.get_messages("g", "abc", 0, N)
    assert got.status is S.FOUND and got.messages["body"].to_pylist() == [b"appended"]


def test_round_robin_append_after_fixture_continues_queue_offsets(fixture_root: Path) -> None:
    with rmqlog.MessageStore.open(fixture_root, small_store_config()) as s:
        out = s.put_batch(pa_table_abc(8)).to_pylist()
    by_queue: dict[int, list[int]] = {}
    for r in walk(fixture_root)[N:]:
        by_queue.setdefault(r.queue_id, []).append(r.queue_offset)
    assert len(out) == 8
    assert by_queue[0] == [N, N + 1]  # queue 0 continues after the fixture's 47
    for q in (1, 2, 3):
        assert by_queue[q] == [0, 1]


def pa_table_abc(n: int) -> pa.Table:
    return pa.table({"topic": ["abc"] * n, "body": [b"m%d" % i for i in range(n)]})


def test_reopen_fixture_store(fixture_root: Path) -> None:
    with rmqlog.MessageStore.open(fixture_root) as s:
        assert s.recovery is not None and s.recovery.redispatched == N and s.dispatch() == 0
        s.put("abc", b"x", queue_id=0)
        assert s.dispatch() == 1
    with rmqlog.MessageStore.open(fixture_root) as s:
        assert s.dispatch() == 0
        assert s.max_offset("abc", 0) == N + 1
        res = s.put("abc", b"y", queue_id=0)
        assert res.queue_offset == N + 1
        assert s.dispatch() == 1
        assert [r["body"] for r in read_queue_all(s, "abc", 0)][-2:] == [b"x", b"y"]
    assert [r.queue_offset for r in walk(fixture_root)] == list(range(N + 2))


# --------------------------------------------------------------------------- config files


@pytest.fixture
def config_root(tmp_path: Path, fixture_dir: Path) -> Path:
    root = tmp_path / "cfg"
    for f in FIXTURE_CONFIG_DIR.glob("*.json"):
        copy_file(f, root / "config" / f.name)
    return root


def test_committed_offsets_from_fastjson(config_root: Path) -> None:
    with rmqlog.MessageStore.open(config_root, small_store_config()) as s:
        for q in range(4):
            assert s.committed_offset(GROUP, "TopicTest", q) == 250
        assert s.committed_offset(GROUP, "TopicTest", 4) == -1
        assert s.committed_offset(GROUP, f"%RETRY%{GROUP}", 0) == 0
        assert s.committed_offset("other_group", "TopicTest", 0) == -1


def test_topics_from_fixture(config_root: Path) -> None:
    with rmqlog.MessageStore.open(config_root, small_store_config()) as s:
        topics = s.topics()
        assert topics["TopicTest"].read_queue_nums == 4 and topics["TopicTest"].write_queue_nums == 4
        assert topics["DefaultCluster"].write_queue_nums == 16 and topics["DefaultCluster"].perm == 7
        assert topics["SELF_TEST_TOPIC"].write_queue_nums == 1
        # the fixture's queue counts are used for puts
        assert {s.put("SELF_TEST_TOPIC", b"x").queue_id for _ in range(3)} == {0}
        with pytest.raises(rmqlog.QueueIdError):
            s.put("SELF_TEST_TOPIC", b"x", queue_id=1)


def test_commit_offset_keeps_fastjson_file_readable(config_root: Path) -> None:
    path = config_root / "config" / "consumerOffset.json"
    original = path.read_text("utf-8")
    with rmqlog.MessageStore.open(config_root, small_store_config()) as s:
        s.commit_offset(GROUP, "TopicTest", 1, 300)
        s.commit_offset("new_group", "NewTopic", 2, 7)
        assert s.committed_offset(GROUP, "TopicTest", 1) == 300
    data = rc.parse_fastjson(path.read_text("utf-8"))
    assert isinstance(data, dict)
    table = data["offsetTable"]
    assert table[f"TopicTest@{GROUP}"] == {"0": 250, "1": 300, "2": 250, "3": 250}
    assert table[f"%RETRY%{GROUP}@{GROUP}"] == {"0": 0}
    assert table["NewTopic@new_group"] == {"2": 7}
    bak = path.with_name("consumerOffset.json.bak")
    assert bak.exists()
    bak_data = rc.parse_fastjson(bak.read_text("utf-8"))
    # the backup is the file as it was before the last change (after the first commit)
    assert bak_data["offsetTable"][f"TopicTest@{GROUP}"] == {"0": 250, "1": 300, "2": 250, "3": 250}
    assert "NewTopic@new_group" not in bak_data["offsetTable"]
    assert original != path.read_text("utf-8")
    assert not path.with_name("consumerOffset.json.tmp").exists()
    with rmqlog.MessageStore.open(config_root, small_store_config()) as s:
        assert s.committed_offset(GROUP, "TopicTest", 0) == 250
        assert s.committed_offset(GROUP, "TopicTest", 1) == 300
        assert s.committed_offset("new_group", "NewTopic", 2) == 7


def test_first_commit_backs_up_fixture_file(config_root: Path) -> None:
    path = config_root / "config" / "consumerOffset.json"
    original = path.read_bytes()
    with rmqlog.MessageStore.open(config_root, small_store_config()) as s:
        s.commit_offset(GROUP, "TopicTest", 0, 251)
    assert path.with_name("consumerOffset.json.bak").read_bytes() == original


def test_auto_created_topic_keeps_fixture_topics(config_root: Path) -> None:
    path = config_root / "config" / "topics.json"
    before = rc.parse_fastjson(path.read_text("utf-8"))
    with rmqlog.MessageStore.open(config_root, small_store_config()) as s:
        s.put("BrandNewTopic", b"x")
    after = rc.parse_fastjson(path.read_text("utf-8"))
    assert isinstance(before, dict) and isinstance(after, dict)
    for name, cfg in before["topicConfigTable"].items():
        assert after["topicConfigTable"][name] == cfg
    new = after["topicConfigTable"]["BrandNewTopic"]
    assert (new["readQueueNums"], new["writeQueueNums"], new["perm"], new["topicName"]) == (4, 4, 6, "BrandNewTopic")
    assert after["dataVersion"]["counter"] > before["dataVersion"]["counter"]
    assert path.with_name("topics.json.bak").exists()
