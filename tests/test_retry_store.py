"""What the store gives the broker's retries (RocketMQ's retry and dead-letter topics): delay-level
deliveries that keep RECONSUMETIMES and the client's SYSFLAG bits, as RocketMQ's
``ScheduleMessageService.messageTimeup`` does; the records at commitlog offsets in a wire
put's columns (``MessageStore.wire_records``); reserved names still refused from users."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import rmqlog
from refcodec.record import decode_record

FAR = 1 << 50  # a clock past every delivery time


@pytest.fixture
def store(tmp_path: Path):
    with rmqlog.MessageStore.open(tmp_path / "s", clock=rmqlog.ManualClock()) as s:
        yield s


def _delivered(store: rmqlog.MessageStore, topic: str) -> list[dict]:
    store.dispatch()
    return store.read_queue(topic, 0, 0, 1 << 40).to_pylist()


def test_a_delay_level_delivery_keeps_reconsume_times(store: rmqlog.MessageStore) -> None:
    """RocketMQ's messageTimeup: ``msgInner.setReconsumeTimes(msgExt.getReconsumeTimes())``."""
    store.create_topic("%RETRY%G", 1)
    store.put_wire(
        pa.table(
            {
                "topic": ["%RETRY%G", "%RETRY%G"],
                "queueId": [0, 0],
                "body": [b"a", b"b"],
                "properties": ["DELAY\x013\x02", "DELAY\x014\x02"],
                "reconsumeTimes": pa.array([3, 15], pa.int32()),
            }
        ),
        dispatch=True,
    )
    assert store.deliver_due(FAR) == 2
    got = _delivered(store, "%RETRY%G")
    assert sorted((m["body"], m["reconsumeTimes"]) for m in got) == [(b"a", 3), (b"b", 15)]


def test_a_delay_level_delivery_keeps_the_client_sysflag_bits(store: rmqlog.MessageStore) -> None:
    """A compressed body stays compressed through the schedule topic, its bit kept (else a
    consumer would read the deflated bytes as the body)."""
    import zlib

    body = zlib.compress(b"x" * 5000)
    store.put_wire(
        pa.table(
            {
                "topic": ["T"],
                "queueId": [0],
                "body": [body],
                "sysFlag": pa.array([1], pa.int32()),
                "properties": ["DELAY\x011\x02"],
            }
        ),
        dispatch=True,
    )
    assert store.deliver_due(FAR) == 1
    store.dispatch()
    [row] = store.read_queue("T", 0, 0, 1).to_pylist()
    raw = store.record_at(row["commitLogOffset"])
    assert raw is not None
    kind, rec = decode_record(bytes(raw.array[0].as_py()))
    assert kind == "record" and not isinstance(rec, int | None)
    assert rec.sys_flag & 1 and rec.body == body


def test_wire_records_gives_what_a_put_wire_takes(store: rmqlog.MessageStore) -> None:
    res = store.put_wire(
        pa.table(
            {
                "topic": ["T", "T"],
                "queueId": [0, 1],
                "body": [b"one", b"two"],
                "flag": pa.array([5, 6], pa.int32()),
                "sysFlag": pa.array([0, 2], pa.int32()),
                "bornTimestamp": pa.array([1_700_000_000_000, 1_700_000_000_001]),
                "bornHost": ["10.0.0.1:1234", "10.0.0.2:99"],
                "properties": ["TAGS\x01a\x02k\x01v\x02", "TAGS\x01b\x02"],
                "reconsumeTimes": pa.array([0, 7], pa.int32()),
            }
        ),
        dispatch=True,
    )
    offsets = res.column("commitLogOffset").to_numpy()
    table, found = store.wire_records(np.array([offsets[1], 12345, offsets[0]]))
    assert found.tolist() == [0, 2]  # 12345 starts no record
    rows = table.to_pylist()
    assert [r["topic"] for r in rows] == ["T", "T"]
    assert [r["body"] for r in rows] == [b"two", b"one"]
    assert [(r["flag"], r["sysFlag"] & 0xF, r["reconsumeTimes"]) for r in rows] == [(6, 2, 7), (5, 0, 0)]
    assert [r["bornHost"] for r in rows] == [bytes([10, 0, 0, 2, 0, 0, 0, 99]), bytes([10, 0, 0, 1, 0, 0, 4, 210])]
    assert rows[1]["properties"].startswith("TAGS\x01a\x02k\x01v\x02")
    assert [r["msgId"] for r in rows] == [res.column("msgId")[1].as_py(), res.column("msgId")[0].as_py()]
    assert [r["commitLogOffset"] for r in rows] == [int(offsets[1]), int(offsets[0])]
    # and back in: the same columns are a wire put
    again = store.put_wire(
        table.select(
            ["topic", "queueId", "body", "flag", "sysFlag", "bornTimestamp", "bornHost", "properties", "reconsumeTimes"]
        ),
        dispatch=True,
    )
    assert again.num_rows == 2


def test_wire_records_of_nothing_and_of_offsets_past_the_end(store: rmqlog.MessageStore) -> None:
    table, found = store.wire_records(np.array([], np.int64))
    assert table.num_rows == 0 and len(found) == 0
    store.put_wire(pa.table({"topic": ["T"], "queueId": [0], "body": [b"x"]}), dispatch=True)
    table, found = store.wire_records(np.array([-1, 1 << 40, 1]))
    assert table.num_rows == 0 and len(found) == 0


@pytest.mark.parametrize(
    "offsets",
    [
        pa.array([b"T", b"\xff\xfe"], pa.binary()).view(pa.string()),  # numpy cannot take it (an ArrowException)
        pa.array(["1"]),
        [1.5],
        [[1]],
        "12",
        np.array([1 << 63], np.uint64),
    ],
)
def test_wire_records_refuses_offsets_that_are_not_longs(store: rmqlog.MessageStore, offsets: object) -> None:
    with pytest.raises(rmqlog.InvalidArgumentError, match="offsets must be a 1-D array of integers"):
        store.wire_records(offsets)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "level",
    [
        pa.array([b"\xff\xfe"], pa.binary()).view(pa.string()),
        ["3"],
        [3.0],
        [3, 4],
        np.array([1 << 63], np.uint64),
    ],
)
def test_send_back_table_refuses_levels_that_are_not_one_long_a_row(store: rmqlog.MessageStore, level: object) -> None:
    res = store.put_wire(pa.table({"topic": ["T"], "queueId": [0], "body": [b"x"]}), dispatch=True)
    records, _ = store.wire_records(res.column("commitLogOffset").to_numpy())
    with pytest.raises(rmqlog.InvalidArgumentError, match="delay_level must be"):
        rmqlog.send_back_table(records, pa.array(["%RETRY%G"]), np.array([0]), level)  # type: ignore[arg-type]


def test_retry_names_are_still_refused_from_users(store: rmqlog.MessageStore) -> None:
    for name in ("RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "RECONSUME_TIME"):
        with pytest.raises(rmqlog.InvalidMessageError, match=name):
            store.put("T", b"x", properties={name: "v"})


@pytest.mark.parametrize("native", [True, False])
def test_send_back_table_rewrites_the_retry_properties(
    store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    import rmqlog.log.send_back as send_back

    if not native:
        monkeypatch.setattr(send_back, "_native_copy", None)
    res = store.put_wire(
        pa.table(
            {
                "topic": ["T", "%RETRY%G"],
                "queueId": [0, 0],
                "body": [b"first", b"again"],
                "properties": [
                    "TAGS\x01a\x02k\x01v\x02WAIT\x01true\x02",
                    "RETRY_TOPIC\x01T\x02ORIGIN_MESSAGE_ID\x01ORIG\x02k\x01w\x02",
                ],
                "reconsumeTimes": pa.array([0, 4], pa.int32()),
            }
        ),
        dispatch=True,
    )
    records, found = store.wire_records(res.column("commitLogOffset").to_numpy())
    assert found.tolist() == [0, 1]
    out = send_back.send_back_table(records, pa.array(["%RETRY%G", "%DLQ%G"]), np.array([0, 0]), np.array([3, 0]))
    rows = out.to_pylist()
    assert [r["reconsumeTimes"] for r in rows] == [1, 5]
    assert [r["topic"] for r in rows] == ["%RETRY%G", "%DLQ%G"]
    first_msg_id = res.column("msgId")[0].as_py()
    props0 = dict(item.split("\x01") for item in rows[0]["properties"].split("\x02") if item)
    assert props0["RETRY_TOPIC"] == "T" and props0["ORIGIN_MESSAGE_ID"] == first_msg_id and "DELAY" not in props0
    assert out.column("delayLevel").to_pylist() == [3, None]  # routed by the put, as a DELAY property
    assert "WAIT" not in props0 and props0["k"] == "v" and props0["TAGS"] == "a"
    props1 = dict(item.split("\x01") for item in rows[1]["properties"].split("\x02") if item)
    assert props1["RETRY_TOPIC"] == "T" and props1["ORIGIN_MESSAGE_ID"] == "ORIG" and "DELAY" not in props1
    assert rows[1]["properties"].count("RETRY_TOPIC") == 1
    # the broker's own path: put_wire takes them (a user's put refuses them)
    again = store.put_wire(out, dispatch=True)
    store.dispatch()
    assert again.num_rows == 2 and store.max_offset("%DLQ%G", 0) == 1
    assert store.max_offset("SCHEDULE_TOPIC_XXXX", 2) == 1  # level 3 waits in queue 2
    assert store.deliver_due(FAR) == 1
    [back] = _delivered(store, "%RETRY%G")[1:]
    assert (back["body"], back["reconsumeTimes"]) == (b"first", 1)
    assert dict(back["properties"])["ORIGIN_MESSAGE_ID"] == first_msg_id
    # a delivered copy carries REAL_TOPIC/REAL_QID: sent back again, they are dropped and set anew
    records2, _ = store.wire_records(np.array([back["commitLogOffset"]]))
    out2 = send_back.send_back_table(records2, pa.array(["%RETRY%G"]), np.array([0]), np.array([4]))
    assert "REAL_TOPIC" not in out2.column("properties")[0].as_py()
    store.put_wire(out2, dispatch=True)
    assert store.deliver_due(FAR) == 1
    last = _delivered(store, "%RETRY%G")[-1]
    assert (last["body"], last["reconsumeTimes"]) == (b"first", 2)
    assert dict(last["properties"])["ORIGIN_MESSAGE_ID"] == first_msg_id


def test_put_wire_takes_a_delay_level_column(store: rmqlog.MessageStore) -> None:
    """The broker's send-back gives the level as a column (the properties then keep the fast
    path); it routes as a DELAY property does, null or 0 is no delay, and the two must agree."""
    store.create_topic("R", 1)
    res = store.put_wire(
        pa.table(
            {
                "topic": ["R", "R", "R"],
                "queueId": [0, 0, 0],
                "body": [b"a", b"b", b"c"],
                "properties": ["k\x01v\x02", "k\x01w\x02", "DELAY\x012\x02"],
                "delayLevel": pa.array([3, None, 2], pa.int32()),
                "reconsumeTimes": pa.array([1, 0, 0], pa.int32()),
            }
        ),
        dispatch=True,
    )
    assert res.num_rows == 3
    assert [m["body"] for m in _delivered(store, "R")] == [b"b"]
    waiting = store.read_queue("SCHEDULE_TOPIC_XXXX", 2, 0, 10).to_pylist()
    assert [(m["body"], dict(m["properties"])["DELAY"], dict(m["properties"])["k"]) for m in waiting] == [
        (b"a", "3", "v")
    ]
    assert store.deliver_due(FAR) == 2
    assert sorted((m["body"], m["reconsumeTimes"]) for m in _delivered(store, "R")) == [(b"a", 1), (b"b", 0), (b"c", 0)]
    with pytest.raises(rmqlog.InvalidMessageError, match="disagree"):
        store.put_wire(
            pa.table(
                {
                    "topic": ["R"],
                    "body": [b"x"],
                    "properties": ["DELAY\x012\x02"],
                    "delayLevel": pa.array([3], pa.int32()),
                }
            )
        )


def test_wire_records_of_an_ipv6_born_host_put_back(store: rmqlog.MessageStore) -> None:
    res = store.put_wire(
        pa.table({"topic": ["T"], "queueId": [0], "body": [b"v6"], "bornHost": ["[::1]:9876"]}), dispatch=True
    )
    table, found = store.wire_records(res.column("commitLogOffset").to_numpy())
    assert found.tolist() == [0] and len(table.column("bornHost")[0].as_py()) == 20
    again = store.put_wire(table.drop_columns(["commitLogOffset", "msgId", "queueOffset"]), dispatch=True)
    store.dispatch()
    first, copy = store.read_queue("T", 0, 0, 2).to_pylist()
    assert again.num_rows == 1 and copy["bornHost"] == first["bornHost"] and copy["body"] == b"v6"
