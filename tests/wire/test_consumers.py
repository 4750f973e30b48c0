"""The client registry: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
NOTIFY_CONSUMER_IDS_CHANGED (40) on membership changes, expiry after 120 s on a ManualClock,
closed connections, and the registered subscription used by pulls without their own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import rmqlog
from rmqnet.broker import consumers
from rmqnet.remoting import FLAG_ONEWAY, RequestCode, ResponseCode

from .broker_helpers import make_broker
from .brokerpull_support import FakePeer, open_store, request


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    clock = rmqlog.ManualClock(1_700_000_000_000)
    store = open_store(tmp_path / "store", clock)
    b = make_broker(store, clock)
    yield b
    store.close()


def heartbeat_body(
    client_id: str,
    *,
    consumer_groups: tuple[str, ...] = ("CG",),
    producer_groups: tuple[str, ...] = (),
    topics: tuple[str, ...] = ("T",),
    sub: str = "*",
    sub_version: int = 1,
) -> bytes:
    return json.dumps(
        {
            "clientID": client_id,
            "producerDataSet": [{"groupName": g} for g in producer_groups],
            "consumerDataSet": [
                {
                    "groupName": g,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "unitMode": False,
                    "subscriptionDataSet": [
                        {
                            "topic": t,
                            "subString": sub,
                            "tagsSet": [] if sub == "*" else [sub],
                            "codeSet": [],
                            "subVersion": sub_version,
                            "classFilterMode": False,
                        }
                        for t in topics
                    ],
                }
                for g in consumer_groups
            ],
        }
    ).encode()


def beat(broker: Any, peer: Any, client_id: str, **kw: Any) -> Any:
    res = broker.table.process(broker, peer, request(RequestCode.HEART_BEAT, body=heartbeat_body(client_id, **kw)))
    return res


def consumer_list(broker: Any, group: str = "CG") -> Any:
    return broker.table.process(
        broker, FakePeer(), request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    )


def notified(peer: Any) -> list[str]:
    assert all(c.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and c.flag & FLAG_ONEWAY for c in peer.sent)
    return [c.ext_fields["consumerGroup"] for c in peer.sent]


def test_heartbeat_registers_and_lists(broker: Any) -> None:
    p1, p2 = FakePeer(), FakePeer()
    assert beat(broker, p1, "c1").code == ResponseCode.SUCCESS
    assert beat(broker, p2, "c2").code == ResponseCode.SUCCESS
    res = consumer_list(broker)
    assert res.code == ResponseCode.SUCCESS
    assert json.loads(res.body_bytes()) == {"consumerIdList": ["c1", "c2"]}


def test_heartbeat_creates_the_retry_topic(broker: Any) -> None:
    beat(broker, FakePeer(), "c1", consumer_groups=("CG", "CG2"))
    topics = broker.store.topics()
    assert topics["%RETRY%CG"].write_queue_nums == 1 and topics["%RETRY%CG"].read_queue_nums == 1
    assert "%RETRY%CG2" in topics


def test_no_consumer_is_system_error(broker: Any) -> None:
    res = consumer_list(broker, "Nobody")
    assert res.code == ResponseCode.SYSTEM_ERROR and res.remark == "no consumer for this group, Nobody"


def test_membership_change_notifies_every_member(broker: Any) -> None:
    p1, p2 = FakePeer(), FakePeer()
    beat(broker, p1, "c1")
    assert notified(p1) == ["CG"]  # the group changed: its one member is told
    beat(broker, p1, "c1")
    assert notified(p1) == ["CG"]  # a repeated heartbeat changes nothing
    beat(broker, p2, "c2")
    assert notified(p1) == ["CG", "CG"] and notified(p2) == ["CG"]
    res = broker.table.process(
        broker,
        p2,
        request(RequestCode.UNREGISTER_CLIENT, {"clientID": "c2", "consumerGroup": "CG", "producerGroup": ""}),
    )
    assert res.code == ResponseCode.SUCCESS
    assert notified(p1) == ["CG"] * 3 and notified(p2) == ["CG"]  # the one who left is not told
    assert json.loads(consumer_list(broker).body_bytes()) == {"consumerIdList": ["c1"]}


def test_subscription_change_notifies(broker: Any) -> None:
    p1 = FakePeer()
    beat(broker, p1, "c1", topics=("T",))
    beat(broker, p1, "c1", topics=("T", "U"))
    assert notified(p1) == ["CG", "CG"]
    assert broker.consumers.find_subscription("CG", "U") is not None
    beat(broker, p1, "c1", topics=("U",))
    assert broker.consumers.find_subscription("CG", "T") is None


def test_higher_sub_version_replaces(broker: Any) -> None:
    p1 = FakePeer()
    beat(broker, p1, "c1", sub="A", sub_version=5)
    beat(broker, p1, "c1", sub="B", sub_version=4)
    assert broker.consumers.find_subscription("CG", "T").sub_string == "A"
    beat(broker, p1, "c1", sub="B", sub_version=6)
    assert broker.consumers.find_subscription("CG", "T").sub_string == "B"


def test_expiry_after_120_s_without_heartbeat(broker: Any) -> None:
    p1, p2 = FakePeer(), FakePeer()
    beat(broker, p1, "c1")
    broker.clock.advance(60_000)
    beat(broker, p2, "c2", producer_groups=("PG",))
    p2.sent.clear()
    broker.clock.advance(60_000)
    assert broker.consumers.run_once(broker.clock.wall_ms()) == 0  # c1 silent exactly 120 s: kept
    broker.clock.advance(10_001)
    assert broker.consumers.run_once(broker.clock.wall_ms()) == 1  # c1 silent 130 s: dropped
    assert json.loads(consumer_list(broker).body_bytes()) == {"consumerIdList": ["c2"]}
    assert notified(p2) == ["CG"]
    broker.clock.advance(120_000)
    assert broker.consumers.run_once(broker.clock.wall_ms()) == 2  # c2 as consumer and as producer
    assert consumer_list(broker).code == ResponseCode.SYSTEM_ERROR
    assert broker.consumers.producer_groups == {}


def test_expiry_scan_runs_at_most_every_10_s(broker: Any) -> None:
    beat(broker, FakePeer(), "c1")
    assert broker.consumers.run_once(broker.clock.wall_ms()) == 0
    assert broker.consumers.run_once(broker.clock.wall_ms() + 200_000) == 1
    beat(broker, FakePeer(), "c2")
    assert broker.consumers.run_once(broker.clock.wall_ms() + 205_000) == 0  # within 10 s of the last scan


def test_closed_connection_drops_its_clients_and_holds(broker: Any) -> None:
    p1, p2 = FakePeer(), FakePeer()
    beat(broker, p1, "c1", producer_groups=("PG",))
    beat(broker, p2, "c2")
    p2.sent.clear()
    assert len(p1.on_close) == 1  # registered by its first heartbeat, once
    p1.close()  # the transport runs the connection's on_close callbacks
    assert json.loads(consumer_list(broker).body_bytes()) == {"consumerIdList": ["c2"]}
    assert notified(p2) == ["CG"] and broker.consumers.producer_groups == {}
    consumers.on_close(broker, p2)  # callable directly too
    assert consumer_list(broker).code == ResponseCode.SYSTEM_ERROR


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (b"{not json", "is not HeartbeatData JSON"),
        (b"[1]", "not a JSON object"),
        (json.dumps({"consumerDataSet": []}).encode(), "clientID"),
        (json.dumps({"clientID": "c", "consumerDataSet": [{"groupName": "bad group!"}]}).encode(), "bad group!"),
        (json.dumps({"clientID": "c", "consumerDataSet": "x"}).encode(), "consumerDataSet"),
        (
            json.dumps(
                {
                    "clientID": "c",
                    "consumerDataSet": [
                        {"groupName": "G", "subscriptionDataSet": [{"topic": "T", "subVersion": "soon"}]}
                    ],
                }
            ).encode(),
            "subVersion",
        ),
    ],
)
def test_bad_heartbeat_is_system_error_and_registers_nothing(broker: Any, body: bytes, names: str) -> None:
    res = broker.table.process(broker, FakePeer(), request(RequestCode.HEART_BEAT, body=body))
    assert res.code == ResponseCode.SYSTEM_ERROR and names in res.remark
    assert broker.consumers.consumer_groups == {}


def test_unregister_needs_client_id(broker: Any) -> None:
    res = broker.table.process(broker, FakePeer(), request(RequestCode.UNREGISTER_CLIENT, {"consumerGroup": "CG"}))
    assert res.code == ResponseCode.SYSTEM_ERROR and "clientID" in res.remark


def test_pull_without_its_own_subscription_uses_the_registered_one(broker: Any) -> None:
    broker.store.create_topic("T", 4)
    broker.store.put_batch(
        pa.table({"topic": ["T"] * 3, "body": [b"a", b"b", b"c"], "queueId": [0] * 3, "tags": ["A", "B", "A"]}),
        dispatch=True,
    )
    beat(broker, FakePeer(), "c1", sub="B", sub_version=3)
    ext = {
        "consumerGroup": "CG",
        "topic": "T",
        "queueId": 0,
        "queueOffset": 0,
        "maxMsgNums": 32,
        "sysFlag": 0,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subVersion": 3,
    }
    res = broker.table.process(broker, FakePeer(), request(RequestCode.PULL_MESSAGE, ext))
    assert res.code == ResponseCode.SUCCESS
    table = broker.store.read_window("T", 0, 1, max_count=1, raw=True)
    assert res.body_bytes() == table.records.data.to_pybytes()  # only the B record
    ext["subVersion"] = 4
    res = broker.table.process(broker, FakePeer(), request(RequestCode.PULL_MESSAGE, ext))
    assert res.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
