"""Admin requests (rmqnet.broker.admin): UPDATE_AND_CREATE_TOPIC 17, GET_ALL_TOPIC_CONFIG 21,
GET_BROKER_RUNTIME_INFO 28, built from RocketMQ's field names."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker.broker import Broker
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from wire.broker_helpers import (
    FakePeer,
    RecordingStore,
    make_broker,
    run,
    send_header,
    send_request,
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RecordingStore]:
    s = rmqlog.MessageStore.open(tmp_path / "store", small_store_config())
    try:
        yield RecordingStore(s)
    finally:
        s.close()


def _create(topic: str, **fields: object) -> RemotingCommand:
    ext = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": 8,
        "writeQueueNums": 8,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }
    ext.update(fields)
    return RemotingCommand(
        RequestCode.UPDATE_AND_CREATE_TOPIC, 1, 0, None, {k: v for k, v in ext.items() if v is not None}
    )


def _call(broker: Broker, req: RemotingCommand) -> RemotingCommand:
    r = broker.table.process(broker, FakePeer(), req)
    assert isinstance(r, RemotingCommand)
    return r


def test_create_topic_goes_to_the_store_and_to_the_topic_table(store: RecordingStore) -> None:
    broker = make_broker(store)
    r = _call(broker, _create("NEW", readQueueNums="3", writeQueueNums="5", perm="4"))  # Java sends strings
    assert r.code == ResponseCode.SUCCESS
    stored = store.topics()["NEW"]
    assert (stored.read_queue_nums, stored.write_queue_nums) == (3, 5)
    tc = broker.topics.get("NEW")
    assert tc is not None and tc.perm == 4  # held over the store's entry (the store keeps queue counts only)
    # the perm counts: a send to a read-only topic is refused
    (s,) = run(broker, FakePeer(), send_request(send_header("NEW"), b"x"))
    assert s is not None and s.code == ResponseCode.NO_PERMISSION


@pytest.mark.parametrize(
    ("fields", "remark"),
    [
        ({"topic": "TBW102"}, "The topic[TBW102] is conflict with system topic."),
        ({"topic": "rmq_sys_x"}, "The topic[rmq_sys_x] is conflict with system topic."),
        ({"topic": "a b"}, "illegal characters"),
        ({"topic": "x" * 128}, "The specified topic is longer than topic max length."),
        ({"readQueueNums": 0}, "readQueueNums 0 is outside 1..65535"),
        ({"perm": 9}, "perm 9"),
        ({"topicFilterType": "ODD"}, "topicFilterType"),
        ({"perm": None}, "'perm' is missing"),
        ({"writeQueueNums": "many"}, "'writeQueueNums'"),
    ],
)
def test_create_topic_refusals_are_system_error(store: RecordingStore, fields: dict[str, object], remark: str) -> None:
    broker = make_broker(store)
    before = set(store.topics())
    topic = fields.pop("topic", "OK1")
    r = _call(broker, _create(str(topic), **fields))
    assert r.code == ResponseCode.SYSTEM_ERROR and remark in (r.remark or "")
    assert set(store.topics()) == before


def test_get_all_topic_config_is_the_serialize_wrapper(store: RecordingStore) -> None:
    store.create_topic("T9", 2)
    broker = make_broker(store)
    assert _call(broker, _create("T10")).code == ResponseCode.SUCCESS
    r = _call(broker, RemotingCommand(RequestCode.GET_ALL_TOPIC_CONFIG, 2, 0, None, {}))
    body = json.loads(bytes(r.body))
    assert set(body) == {"topicConfigTable", "dataVersion"} and body["dataVersion"]["counter"] >= 1
    table = body["topicConfigTable"]
    assert table["T9"] == {
        "order": False,
        "perm": 6,
        "readQueueNums": 2,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "T9",
        "topicSysFlag": 0,
        "writeQueueNums": 2,
    }
    assert table["TBW102"]["perm"] == 7 and table["T10"]["writeQueueNums"] == 8


def test_runtime_info_reports_puts_and_the_commitlog(store: RecordingStore) -> None:
    clock = rmqlog.ManualClock(1_700_000_000_000)
    broker = make_broker(store, clock=clock)
    run(broker, FakePeer(), *[send_request(send_header("T1"), b"x", opaque=i) for i in range(3)])
    clock.advance(90_061_000)
    r = _call(broker, RemotingCommand(RequestCode.GET_BROKER_RUNTIME_INFO, 3, 0, None, {}))
    table = json.loads(bytes(r.body))["table"]
    assert all(isinstance(v, str) for v in table.values())
    assert table["msgPutTotalTodayNow"] == "3" and table["brokerVersion"] == "435"
    assert table["commitLogMaxOffset"] == str(store.published_tail())
    assert table["runtime"] == "[ 1 days, 1 hours, 1 minutes, 1 seconds ]"
    assert table["sendThreadPoolQueueCapacity"] == "10000"
