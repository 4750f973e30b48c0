"""QUERY_MESSAGE (12) by key and by unique key, VIEW_MESSAGE_BY_ID (33): bodies byte-exact with
the segment files, QUERY_NOT_FOUND, offsets that are not a record's start, the index off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import rmqlog
from rmqnet.remoting import RequestCode, ResponseCode

from .broker_helpers import make_broker as broker_over
from .brokerpull_support import FakePeer, open_store, request, segment_bytes

T0 = 1_700_000_000_000


def make_broker(root: Path, **store_kw: Any) -> Any:
    clock = rmqlog.ManualClock(T0)
    store = open_store(root, clock, **store_kw)
    store.create_topic("T", 4)
    store.create_topic("U", 4)
    return broker_over(store, clock)


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    b = make_broker(tmp_path / "store")
    yield b
    b.store.close()


def put(broker: Any, topic: str, keys: list[list[str]], queue_id: int = 0) -> list[tuple[int, int]]:
    """(commitLogOffset, size) of each message put."""
    n = len(keys)
    res = broker.store.put_batch(
        pa.table(
            {"topic": [topic] * n, "body": [b"body%d" % i for i in range(n)], "queueId": [queue_id] * n, "keys": keys}
        ),
        dispatch=True,
    )
    broker.store.dispatch()
    offs, qos = res["commitLogOffset"].to_pylist(), res["queueOffset"].to_pylist()
    sizes = broker.store.record_sizes(topic, queue_id, 0, max(qos) + 1)
    return [(o, int(sizes[q])) for o, q in zip(offs, qos, strict=True)]


def stored(broker: Any, records: list[tuple[int, int]]) -> bytes:
    return b"".join(segment_bytes(broker.store.paths.root, o, s) for o, s in records)


def query_req(
    topic: str, key: str, *, max_num: int = 32, begin: int = 0, end: int = 1 << 62, unique: bool = False
) -> Any:
    ext: dict[str, Any] = {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin, "endTimestamp": end}
    if unique:
        ext["_UNIQUE_KEY_QUERY"] = "true"
    return request(RequestCode.QUERY_MESSAGE, ext)


def call(broker: Any, req: Any) -> Any:
    return broker.table.process(broker, FakePeer(), req)


def test_query_by_key_body_is_the_stored_records(broker: Any) -> None:
    recs = put(broker, "T", [["k1"], ["k2"], ["k1", "k3"], []])
    put(broker, "U", [["k1"]])  # another topic's k1 is not T's
    res = call(broker, query_req("T", "k1"))
    assert res.code == ResponseCode.SUCCESS and isinstance(res.body, list)
    assert res.body_bytes() == stored(broker, [recs[0], recs[2]])
    ts, phy = broker.store.wire.index_last_update()  # the newest index file's end, as Java reports it
    assert (int(res.ext_fields["indexLastUpdateTimestamp"]), int(res.ext_fields["indexLastUpdatePhyoffset"])) == (
        ts,
        phy,
    )
    assert ts == T0 and phy >= recs[2][0]


def test_query_max_num_and_time_range(broker: Any) -> None:
    put(broker, "T", [["k"]] * 3)
    broker.clock.advance(10_000)
    later = put(broker, "T", [["k"]] * 2)
    res = call(broker, query_req("T", "k", begin=T0 + 5000))
    assert res.body_bytes() == stored(broker, later)
    res = call(broker, query_req("T", "k", max_num=2))
    assert rmqlog.decode_records(res.body_bytes()).num_rows == 2
    assert res.body_bytes() == stored(broker, later)  # the index walks newest first, as RocketMQ's


def test_query_not_found(broker: Any) -> None:
    put(broker, "T", [["k1"]])
    res = call(broker, query_req("T", "nothing"))
    assert (
        res.code == ResponseCode.QUERY_NOT_FOUND and res.remark == "can not find message, maybe time range not correct"
    )
    res = call(broker, query_req("T", "k1", begin=T0 + 1))
    assert res.code == ResponseCode.QUERY_NOT_FOUND


def test_query_by_unique_key(broker: Any) -> None:
    recs = put(broker, "T", [["a"], ["b"]])
    uniq = broker.store.read_queue("T", 0, 1, 2)["properties"].to_pylist()[0]
    uniq_key = dict(uniq)["UNIQ_KEY"]
    res = call(broker, query_req("T", uniq_key, unique=True))
    assert res.code == ResponseCode.SUCCESS and res.body_bytes() == stored(broker, [recs[1]])
    assert call(broker, query_req("U", uniq_key, unique=True)).code == ResponseCode.QUERY_NOT_FOUND


def test_query_without_index(tmp_path: Path) -> None:
    b = make_broker(tmp_path / "s", message_index_enable=False)
    try:
        put(b, "T", [["k"]])
        res = call(b, query_req("T", "k"))
        assert res.code == ResponseCode.QUERY_NOT_FOUND and "messageIndexEnable" in res.remark
    finally:
        b.store.close()


@pytest.mark.parametrize(
    ("ext", "names"),
    [
        ({"topic": "T", "key": "k", "maxNum": 1, "beginTimestamp": 0}, "endTimestamp"),
        ({"topic": "T", "maxNum": 1, "beginTimestamp": 0, "endTimestamp": 1}, "key"),
        ({"topic": "a/../b", "key": "k", "maxNum": 1, "beginTimestamp": 0, "endTimestamp": 1}, "a/../b"),
    ],
)
def test_query_bad_fields(broker: Any, ext: dict[str, Any], names: str) -> None:
    res = call(broker, request(RequestCode.QUERY_MESSAGE, ext))
    assert res.code == ResponseCode.SYSTEM_ERROR and names in res.remark


def test_view_by_offset_is_the_one_record(broker: Any) -> None:
    recs = put(broker, "T", [["a"], ["b"], ["c"]], queue_id=2)
    for offset, size in recs:
        res = call(broker, request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}))
        assert res.code == ResponseCode.SUCCESS
        assert res.body_bytes() == segment_bytes(broker.store.paths.root, offset, size)


@pytest.mark.parametrize("where", ["inside", "past", "negative"])
def test_view_by_an_offset_where_no_record_starts(broker: Any, where: str) -> None:
    recs = put(broker, "T", [["a"], ["b"]])
    offset = {"inside": recs[0][0] + 20, "past": recs[-1][0] + recs[-1][1] + 1000, "negative": -5}[where]
    res = call(broker, request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}))
    assert res.code == ResponseCode.SYSTEM_ERROR and res.remark == f"can not find message by the offset, {offset}"
    assert res.body_bytes() == b""


def test_view_needs_its_offset(broker: Any) -> None:
    res = call(broker, request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "abc"}))
    assert res.code == ResponseCode.SYSTEM_ERROR and "offset" in res.remark


def test_view_never_returns_a_record_forged_inside_a_body(broker: Any) -> None:
    """A message body holding bytes that look like a stored record (valid lengths and CRC,
    its PHYSICALOFFSET set to where it will lie): the store reads a record there, but no
    queue lists it, so VIEW_MESSAGE_BY_ID refuses it."""
    ((offset, size),) = put(broker, "T", [["a"]])
    original = bytearray(segment_bytes(broker.store.paths.root, offset, size))
    body_start = 88  # TOTALSIZE..BODYLENGTH: the fixed header before a v4 record's body
    where = broker.store.published_tail() + body_start
    original[28:36] = where.to_bytes(8, "big")  # PHYSICALOFFSET
    broker.store.put_batch(pa.table({"topic": ["U"], "body": [bytes(original)], "queueId": [0]}), dispatch=True)
    assert segment_bytes(broker.store.paths.root, where, size) == bytes(original)
    res = call(broker, request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": where}))
    assert res.code == ResponseCode.SYSTEM_ERROR and res.body_bytes() == b""
    res = call(broker, request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset}))
    assert res.code == ResponseCode.SUCCESS
