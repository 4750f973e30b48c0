"""The store's calls for a broker's transactional messages: ``put_wire(system=True)`` (RocketMQ's
transaction topics and ``REAL_TOPIC``/``REAL_QID``, refused to every other put) and
``stored_rows`` (stored records read back as wire rows, each checked against its queue)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import small_store_config

import rmqlog

HALF = "RMQ_SYS_TRANS_HALF_TOPIC"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[rmqlog.MessageStore]:
    s = rmqlog.MessageStore.open(tmp_path / "s", small_store_config(store_host="127.0.0.1:10911"))
    s.create_topic(HALF, 1)
    s.create_topic("T1", 4)
    try:
        yield s
    finally:
        s.close()


def halves(n: int) -> pa.Table:
    props = [
        f"TRAN_MSG\x01true\x02PGROUP\x01PG\x02UNIQ_KEY\x01U{i}\x02REAL_TOPIC\x01T1\x02REAL_QID\x01{i % 4}\x02"
        for i in range(n)
    ]
    return pa.table(
        {
            "topic": [HALF] * n,
            "queueId": pa.array([0] * n, pa.int32()),
            "body": [f"b{i}".encode() for i in range(n)],
            "flag": pa.array([i for i in range(n)], pa.int32()),
            "bornTimestamp": pa.array([1_700_000_000_000 + i for i in range(n)], pa.int64()),
            "bornHost": ["10.0.0.9:4321"] * n,
            "properties": props,
        }
    )


def test_transaction_topics_and_real_topic_only_in_a_system_put(store: rmqlog.MessageStore) -> None:
    with pytest.raises(rmqlog.InvalidMessageError, match="REAL_TOPIC"):
        store.wire.put_wire(halves(1))
    with pytest.raises(rmqlog.InvalidMessageError, match="RMQ_SYS_TRANS_HALF_TOPIC"):
        store.wire.put_wire(pa.table({"topic": [HALF], "body": [b"x"]}))
    plain = pa.table({"topic": ["T1"], "body": [b"x"], "properties": ["REAL_TOPIC\x01T9\x02"]})
    with pytest.raises(rmqlog.InvalidMessageError, match="REAL_TOPIC"):
        store.wire.put_wire(plain)
    with pytest.raises(rmqlog.InvalidMessageError, match="SCHEDULE_TOPIC_XXXX"):
        store.wire.put_wire(pa.table({"topic": ["SCHEDULE_TOPIC_XXXX"], "body": [b"x"]}), system=True)
    res = store.wire.put_wire(halves(3), system=True)
    assert res.num_rows == 3
    store.dispatch()
    got = store.read_queue(HALF, 0, 0, 3)
    assert [dict(p)["REAL_QID"] for p in got.column("properties").to_pylist()] == ["0", "1", "2"]
    # kept as sent, in order (the put's fast path, REAL_TOPIC/REAL_QID not screened out in a system put)
    assert [k for k, _ in got.column("properties")[0].as_py()] == [
        "TRAN_MSG",
        "PGROUP",
        "UNIQ_KEY",
        "REAL_TOPIC",
        "REAL_QID",
    ]
    from rmqlog.log.encode.wire_put import joined_wire_properties

    props = halves(2).column("properties")
    assert joined_wire_properties(props, 2, None, system=True) is not None
    assert joined_wire_properties(props, 2, None) is None  # a client's put takes the general path, which refuses


def test_stored_rows_checks_each_offset_against_its_queue(store: rmqlog.MessageStore) -> None:
    res = store.wire.put_wire(halves(5), system=True)
    offsets = np.asarray(res.column("commitLogOffset"))
    qoffs = np.asarray(res.column("queueOffset"))
    ask = np.array([offsets[3], offsets[0] + 1, offsets[1], offsets[2], 1 << 40, offsets[4]])
    at = np.array([qoffs[3], 0, qoffs[1] + 1, qoffs[2], 0, qoffs[4]])
    rows, found = store.wire.stored_rows(
        ask, at, topic=HALF, queue_id=0, drop=("REAL_TOPIC", "REAL_QID"), find=("UNIQ_KEY", "REAL_QID", "NONE")
    )
    assert found.tolist() == [True, False, False, True, False, True]
    assert rows.column("UNIQ_KEY").to_pylist() == ["U3", "U2", "U4"]
    assert rows.column("REAL_QID").to_pylist() == ["3", "2", "0"]
    assert rows.column("NONE").null_count == 3
    assert rows.column("body").to_pylist() == [b"b3", b"b2", b"b4"]
    assert rows.column("commitLogOffset").to_pylist() == [offsets[3], offsets[2], offsets[4]]
    assert all("REAL_" not in p for p in rows.column("properties").to_pylist())
    # a wrong topic finds nothing
    _, none = store.wire.stored_rows(offsets, qoffs, topic="T1", queue_id=0)
    assert not none.any()


def test_stored_rows_put_again_keep_what_was_sent(store: rmqlog.MessageStore) -> None:
    res = store.wire.put_wire(halves(2), system=True)
    rows, _ = store.wire.stored_rows(
        np.asarray(res.column("commitLogOffset")),
        np.asarray(res.column("queueOffset")),
        topic=HALF,
        queue_id=0,
        drop=("REAL_TOPIC", "REAL_QID"),
    )
    again = rows.select(["body", "flag", "sysFlag", "bornTimestamp", "bornHost", "properties", "reconsumeTimes"])
    again = again.append_column("topic", pa.array(["T1", "T1"])).append_column("queueId", pa.array([1, 2], pa.int32()))
    store.wire.put_wire(again)
    store.dispatch()
    (a,) = store.read_queue("T1", 1, 0, 1).to_pylist()
    assert (a["body"], a["flag"], a["bornHost"], dict(a["properties"])["UNIQ_KEY"]) == (b"b0", 0, "10.0.0.9:4321", "U0")
    assert int(a["bornTimestamp"].timestamp() * 1000) == 1_700_000_000_000


def test_stored_rows_refuses_mismatched_lengths(store: rmqlog.MessageStore) -> None:
    with pytest.raises(rmqlog.InvalidArgumentError):
        store.wire.stored_rows(np.array([0, 1]), np.array([0]), topic=HALF, queue_id=0)
    rows, found = store.wire.stored_rows(
        np.array([], np.int64), np.array([], np.int64), topic=HALF, queue_id=0, find=("X",)
    )
    assert rows.num_rows == 0 and "X" in rows.column_names and len(found) == 0
