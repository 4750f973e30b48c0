"""Reading: get_messages and its statuses, read_queue, the tag filter, offset_for_timestamp,
message_by_offset, committed offsets.

Bytes written by the store are checked with the independent reference codec (refcodec).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from conftest import (
    SMALL_COMMITLOG,
    batch,
    dt_to_ms,
    read_queue_all,
    units,
    walk,
)

import refcodec as rc
import rmqlog
from rmqlog import GetMessageStatus as S

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
    assert badly.next_begin_offset == 10  # RocketMQ 4.9.4 on: the max offset (before: 0 when min was 0)
    assert ten.get_messages("g", "Q", 0, 10**9).next_begin_offset == 10


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
    ms.put_batch(
        pa.table(
            {
                "topic": ["TG"] * len(TAGS),
                "body": [b"%d" % i for i in range(len(TAGS))],
                "queueId": pa.array([0] * len(TAGS), pa.int32()),
                "tags": pa.array(TAGS, pa.string()),
            }
        )
    )
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


def test_tag_filter_beyond_one_window(ms: rmqlog.MessageStore) -> None:
    n = 1000
    ms.put_batch(
        batch(
            topic="W",
            body=[b"%d" % i for i in range(n)],
            queueId=pa.array([0] * n, pa.int32()),
            tags=pa.array(["x"] * (n - 1) + ["y"], pa.string()),
        )
    )
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


# --------------------------------------------------------------------------- committed offsets, arguments


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
