"""Light message queues (RocketMQ 4.9.8's LMQ: ``enableLmq`` + ``enableMultiDispatch``): a put
naming LMQs in ``INNER_MULTI_DISPATCH`` gets ``INNER_MULTI_QUEUE_OFFSET`` in its record and a
unit in each LMQ's queue 0 (rmqlog.access.lmq, rmqlog.log.lmq, the dispatcher); reads of an
LMQ return the original records, checked against their properties; recovery rebuilds the
units and the offsets; the limit and bad names are refused with nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import (
    kill_at_crash_point,
    read_queue_all,
    small_store_config,
    units,
    walk,
    write_unit,
)

import refcodec as rc
import rmqlog
from rmqlog import InvalidMessageError, LmqLimitError, MessageStore, WireMessage

LMQ_ON = {"enable_lmq": True, "enable_multi_dispatch": True}


def _open(root: Path, **config: Any) -> MessageStore:
    s = MessageStore.open(root, config=small_store_config(**{**LMQ_ON, **config}))
    s.create_topic("T", 4)
    return s


def _msg(body: bytes, lmqs: str | None, qid: int = 1, extra: str = "") -> WireMessage:
    props = (f"INNER_MULTI_DISPATCH\x01{lmqs}\x02" if lmqs is not None else "") + extra
    return WireMessage("T", qid, body, properties=props)


def test_a_message_is_dispatched_into_each_lmq_it_names(root: Path) -> None:
    with _open(root) as s:
        s.wire.put_messages(
            [_msg(b"a", "%LMQ%1,%LMQ%2", extra="WAIT\x01true\x02TAGS\x01tg\x02"), _msg(b"b", "%LMQ%2", qid=2)],
            dispatch=True,
        )
        s.put_batch(
            pa.table(
                {
                    "topic": ["T"],
                    "queueId": [1],
                    "body": [b"c"],
                    "properties": pa.array([[("INNER_MULTI_DISPATCH", "%LMQ%1")]], pa.map_(pa.string(), pa.string())),
                }
            ),
            dispatch=True,
        )
        recs = walk(root)
        assert [r.properties.get("INNER_MULTI_QUEUE_OFFSET") for r in recs] == ["0,0", "1", "1"]
        own = {(r.queue_id, r.queue_offset): (r.physical_offset, r.total_size) for r in recs}
        tag = rc.java_string_hash("tg")
        assert units(root, "%LMQ%1", 0) == [
            (recs[0].physical_offset, recs[0].total_size, tag),
            (recs[2].physical_offset, recs[2].total_size, 0),
        ]
        assert units(root, "%LMQ%2", 0) == [
            (recs[0].physical_offset, recs[0].total_size, tag),
            (recs[1].physical_offset, recs[1].total_size, 0),
        ]
        assert own[(1, 0)] == (recs[0].physical_offset, recs[0].total_size)  # its own queue's unit too
        assert units(root, "T", 1)[0][:2] == (recs[0].physical_offset, recs[0].total_size)
        got = read_queue_all(s, "%LMQ%2", 0)  # the original records, as stored
        assert [(m["topic"], m["queueId"], m["body"]) for m in got] == [("T", 1, b"a"), ("T", 2, b"b")]
        assert s.get_messages("g", "%LMQ%1", 0, 0, tags="tg").messages.column("body").to_pylist() == [b"a"]
        assert s.max_offset("%LMQ%1", 0) == 2
        assert s.verify().problems == []


def test_the_offsets_property_is_written_as_rocketmq_writes_it(root: Path) -> None:
    with _open(root) as s:
        s.wire.put_messages([_msg(b"x", f"%LMQ%{i}") for i in range(12)], dispatch=True)  # %LMQ%0..11 at 0
        s.wire.put_messages([_msg(b"y", ",".join(f"%LMQ%{i}" for i in range(12)) + ",")], dispatch=True)  # Java's split
    data = b"".join(p.read_bytes() for p in sorted((root / "commitlog").iterdir()))
    rec = walk(root)[-1]
    raw = data[rec.physical_offset : rec.physical_offset + rec.total_size]
    item = b"INNER_MULTI_QUEUE_OFFSET\x01" + b",".join([b"1"] * 12) + b"\x02"
    props = rc.encode_properties(rec.properties)
    # the store's own item first, then the message's properties as sent (WAIT dropped)
    assert props.startswith(item) and raw.endswith(len(props).to_bytes(2, "big") + props)
    assert rc.encode_ref_record(rec) == raw  # lengths, CRC and layout as the reference codec writes them


def test_a_name_given_twice_takes_one_offset(root: Path) -> None:
    with _open(root) as s:
        s.wire.put_messages([_msg(b"a", "%LMQ%d,%LMQ%d"), _msg(b"b", "%LMQ%d")], dispatch=True)
        assert [r.properties["INNER_MULTI_QUEUE_OFFSET"] for r in walk(root)] == ["0,0", "1"]
        assert len(units(root, "%LMQ%d", 0)) == 2


def test_flags_off_no_lmq_dispatch(root: Path) -> None:
    configs = (
        {"enable_lmq": False},
        {"enable_multi_dispatch": False},
        {"enable_lmq": False, "enable_multi_dispatch": False},
    )
    for i, config in enumerate(configs):
        r = root / str(i)
        with _open(r, **config) as s:
            s.wire.put_messages([_msg(b"a", "%LMQ%1")], dispatch=True)
            (rec,) = walk(r)
            assert (
                rec.properties["INNER_MULTI_DISPATCH"] == "%LMQ%1" and "INNER_MULTI_QUEUE_OFFSET" not in rec.properties
            )
            assert not (r / "consumequeue" / "%LMQ%1").exists()
            assert s.get_messages("g", "%LMQ%1", 0, 0).status != rmqlog.GetMessageStatus.FOUND


@pytest.mark.parametrize("names", ["%LMQ%a/../b", "plain_topic", "%LMQ%a,,%LMQ%b", "%LMQ%" + "x" * 300, "%LMQ%é"])
def test_a_bad_lmq_name_is_refused_with_nothing_written(root: Path, names: str) -> None:
    with _open(root) as s:
        tail = s.published_tail()
        with pytest.raises(InvalidMessageError) as e:
            s.wire.put_messages([_msg(b"ok", None), _msg(b"a", names)], dispatch=True)
        assert e.value.row == 1 and e.value.field == "properties"
        assert s.published_tail() == tail and walk(root) == []
        assert not (root / "consumequeue").exists() or not any((root / "consumequeue").iterdir())


def test_a_delayed_message_cannot_name_lmqs(root: Path) -> None:
    with _open(root) as s, pytest.raises(InvalidMessageError, match="delayed or timed"):
        s.wire.put_messages([_msg(b"a", "%LMQ%1", extra="DELAY\x012\x02")])
    assert walk(root) == []


def test_past_the_limit_puts_naming_lmqs_are_refused(root: Path) -> None:
    with _open(root, max_lmq_consume_queue_num=2) as s:
        s.wire.put_messages([_msg(b"a", "%LMQ%1,%LMQ%2")], dispatch=True)  # 0 LMQs: not more than 2
        s.wire.put_messages([_msg(b"b", "%LMQ%3")], dispatch=True)  # 2 LMQs: still not more than 2 (RocketMQ's >)
        tail = s.published_tail()
        with pytest.raises(LmqLimitError) as e:
            s.wire.put_messages([_msg(b"c", "%LMQ%1")], dispatch=True)  # 3 LMQs
        assert (e.value.count, e.value.limit) == (3, 2)
        assert s.published_tail() == tail
        s.wire.put_messages([_msg(b"d", None)], dispatch=True)  # a put naming none goes on
        assert [r.body for r in walk(root)] == [b"a", b"b", b"d"]


def test_a_unit_pointing_at_a_record_not_in_the_lmq_fails_the_read(root: Path) -> None:
    with _open(root) as s:
        s.wire.put_messages([_msg(b"a", "%LMQ%1"), _msg(b"b", "%LMQ%2")], dispatch=True)
        other = units(root, "%LMQ%2", 0)[0]
        write_unit(root, "%LMQ%1", 0, 0, other[0], other[1])  # the record is in %LMQ%2 only
        with pytest.raises(rmqlog.CorruptQueueError, match="not in %LMQ%1 at queue offset 0"):
            s.get_messages("g", "%LMQ%1", 0, 0)


def test_rebuilt_state_continues_each_lmq(root: Path) -> None:
    with _open(root) as s:
        s.wire.put_messages([_msg(b"a", "%LMQ%1,%LMQ%2"), _msg(b"b", "%LMQ%2")], dispatch=True)
    (root / "append.state").unlink()
    with _open(root) as s:
        s.wire.put_messages([_msg(b"c", "%LMQ%2,%LMQ%1")], dispatch=True)
        assert walk(root)[-1].properties["INNER_MULTI_QUEUE_OFFSET"] == "2,1"
        assert [m["body"] for m in read_queue_all(s, "%LMQ%2", 0)] == [b"a", b"b", b"c"]


CHILD = """
import sys
from rmqlog import MessageStore, WireMessage
sys.path.insert(0, {tests!r})
from conftest import small_store_config
s = MessageStore.open(sys.argv[1], config=small_store_config(enable_lmq=True, enable_multi_dispatch=True))
s.create_topic("T", 4)
for i in range(int(sys.argv[2])):
    s.wire.put_messages([WireMessage("T", i % 2, b"m%d" % i, properties="INNER_MULTI_DISPATCH\\x01%LMQ%a,%LMQ%b\\x02")],
                   dispatch=True)
    print("acked", i, flush=True)
"""


@pytest.mark.parametrize("point", ["append.published", "dispatch.units"])
def test_recovery_after_a_kill_rebuilds_the_lmq_units(tmp_path: Path, point: str) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=str(Path(__file__).parent)))
    printed = kill_at_crash_point([str(script), str(tmp_path / "s"), "20"], point, 6, tmp=tmp_path)
    acked = [int(line.split()[1]) for line in printed if line.startswith("acked")]
    assert len(acked) == 5
    with _open(tmp_path / "s") as s:
        recs = [r for r in walk(tmp_path / "s")]
        assert len(recs) == 6  # the killed put was published
        for name in ("%LMQ%a", "%LMQ%b"):
            assert [m["body"] for m in read_queue_all(s, name, 0)] == [b"m%d" % i for i in range(6)]
        s.wire.put_messages([_msg(b"next", "%LMQ%b")], dispatch=True)
        assert walk(tmp_path / "s")[-1].properties["INNER_MULTI_QUEUE_OFFSET"] == "6"
        assert s.verify().problems == []


def test_a_replica_keeps_the_lmq_offsets_and_units(root: Path, tmp_path: Path) -> None:
    with _open(root) as master, MessageStore.open(tmp_path / "slave", config=small_store_config(**LMQ_ON)) as slave:
        master.wire.put_messages([_msg(b"a", "%LMQ%1,%LMQ%2"), _msg(b"b", "%LMQ%2")], dispatch=True)
        end = 0
        while end < master.published_tail():
            end = slave.replica.replica_append(end, master.replica.replica_read(end, 1 << 20))
        slave.dispatch()
        assert [m["body"] for m in read_queue_all(slave, "%LMQ%2", 0)] == [b"a", b"b"]
        assert units(tmp_path / "slave", "%LMQ%1", 0) == units(root, "%LMQ%1", 0)
        # promoted, it continues each LMQ where the master was
        slave.wire.put_messages([_msg(b"c", "%LMQ%2,%LMQ%1")], dispatch=True)
        assert walk(tmp_path / "slave")[-1].properties["INNER_MULTI_QUEUE_OFFSET"] == "2,1"
