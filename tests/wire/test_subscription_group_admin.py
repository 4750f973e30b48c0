"""Subscription groups over the wire (RocketMQ 4.9.8's AdminBrokerProcessor 200, 201, 207, and
PullMessageProcessor's group check), driven through the broker's processor table with the
frames' fields as Java's headers name them; the table and the store's
``subscriptionGroup.json`` / ``consumerOffset.json`` asserted after each."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker.broker import Broker
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from rmqnet.remoting.admin_bodies import decode_subscription_groups
from wire.broker_helpers import FakePeer, make_broker

T0 = 1_700_000_000_000


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path) -> Iterator[rmqlog.MessageStore]:
    s = rmqlog.MessageStore.open(root, small_store_config())
    s.create_topic("T", 2)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def broker(store: rmqlog.MessageStore) -> Broker:
    return make_broker(store, clock=rmqlog.ManualClock(T0))


def call(broker: Broker, code: int, ext: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
    res = broker.table.process(broker, FakePeer(), RemotingCommand(code, 3, 0, None, ext or {}, body, "JAVA"))
    assert isinstance(res, RemotingCommand)
    return res


def create(broker: Broker, config: dict[str, Any]) -> RemotingCommand:
    return call(broker, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(config).encode())


def listed(broker: Broker) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    res = call(broker, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert res.code == ResponseCode.SUCCESS, res.remark
    return decode_subscription_groups(res.body_bytes())


def pull(broker: Broker, group: str) -> RemotingCommand:
    ext = {
        "consumerGroup": group,
        "topic": "T",
        "queueId": 0,
        "queueOffset": 0,
        "maxMsgNums": 32,
        "sysFlag": 4,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
    }
    return call(broker, RequestCode.PULL_MESSAGE, ext)


def group_file(root: Path) -> dict[str, Any]:
    path = root / "config" / "subscriptionGroup.json"
    return json.loads(path.read_text())["subscriptionGroupTable"] if path.exists() else {}


def offsets_file(root: Path) -> dict[str, Any]:
    path = root / "config" / "consumerOffset.json"
    return json.loads(path.read_text())["offsetTable"] if path.exists() else {}


def test_a_group_created_is_listed_with_its_fields_and_a_new_version(broker: Broker, root: Path) -> None:
    _, before = listed(broker)
    res = create(broker, {"groupName": "G1", "consumeEnable": True, "retryMaxTimes": 3, "retryQueueNums": 2})
    assert res.code == ResponseCode.SUCCESS, res.remark
    table, version = listed(broker)
    assert version["counter"] == before["counter"] + 1
    g = table["G1"]
    assert (g["groupName"], g["retryMaxTimes"], g["retryQueueNums"], g["consumeBroadcastEnable"]) == ("G1", 3, 2, True)
    assert "TOOLS_CONSUMER" in table  # RocketMQ's own groups are there from the start
    assert "G1" not in group_file(root)  # in memory until the persist round ...
    broker.state.persist_all()
    assert group_file(root)["G1"]["retryMaxTimes"] == 3  # ... then in RocketMQ's file
    # an update replaces the config
    assert create(broker, {"groupName": "G1", "retryMaxTimes": 5}).code == ResponseCode.SUCCESS
    assert listed(broker)[0]["G1"]["retryMaxTimes"] == 5 and listed(broker)[0]["G1"]["retryQueueNums"] == 1


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (b"", "empty"),
        (b"not json", "body"),
        (b"[1, 2]", "SubscriptionGroupConfig object"),
        (b'{"consumeEnable": true}', "groupName"),
        (b'{"groupName": "bad/name"}', "bad/name"),
        (b'{"groupName": "G2", "retryMaxTimes": "many"}', "retryMaxTimes"),
        (b'{"groupName": "G2", "consumeEnable": 1}', "consumeEnable"),
    ],
)
def test_a_bad_body_is_refused_naming_what_is_wrong_and_changes_nothing(
    broker: Broker, body: bytes, names: str
) -> None:
    table, version = listed(broker)
    res = call(broker, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
    assert res.code == ResponseCode.SYSTEM_ERROR and names in (res.remark or ""), res.remark
    assert listed(broker) == (table, version)


def test_delete_removes_the_group_and_with_remove_offset_its_offsets(broker: Broker, root: Path) -> None:
    assert create(broker, {"groupName": "G1"}).code == ResponseCode.SUCCESS
    assert create(broker, {"groupName": "G2"}).code == ResponseCode.SUCCESS
    for group in ("G1", "G2"):
        broker.consumer_offsets.commit(group, "T", 0, 4)
        broker.consumer_offsets.commit(group, "T", 1, 6)
    broker.state.persist_all()
    assert set(offsets_file(root)) == {"T@G1", "T@G2"}
    _, before = listed(broker)
    res = call(broker, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G1", "removeOffset": "true"})
    assert res.code == ResponseCode.SUCCESS, res.remark
    table, version = listed(broker)
    assert "G1" not in table and "G2" in table and version["counter"] == before["counter"] + 1
    assert set(offsets_file(root)) == {"T@G2"}  # removed from the file at once
    assert broker.consumer_offsets.query("G1", "T", 0) == -1 and broker.consumer_offsets.query("G2", "T", 1) == 6
    # without removeOffset the offsets stay
    assert call(broker, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G2"}).code == ResponseCode.SUCCESS
    assert broker.consumer_offsets.query("G2", "T", 1) == 6
    broker.state.persist_all()
    assert "G1" not in group_file(root) and "G2" not in group_file(root)
    assert set(offsets_file(root)) == {"T@G2"}
    # an unknown group: SUCCESS, as Java's deleteSubscriptionGroupConfig; a bad name or none: refused
    assert call(broker, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "Nobody"}).code == ResponseCode.SUCCESS
    bad = call(broker, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "a/b"})
    assert bad.code == ResponseCode.SYSTEM_ERROR and "a/b" in (bad.remark or "")
    missing = call(broker, RequestCode.DELETE_SUBSCRIPTIONGROUP, {})
    assert missing.code != ResponseCode.SUCCESS and "groupName" in (missing.remark or "")


def test_a_slave_refuses_to_change_groups(store: rmqlog.MessageStore) -> None:
    slave = make_broker(store, clock=rmqlog.ManualClock(T0), broker_id=1, broker_role="SLAVE")
    table, version = listed(slave)
    for res in (
        create(slave, {"groupName": "G1"}),
        call(slave, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "TOOLS_CONSUMER"}),
    ):
        assert res.code == ResponseCode.SYSTEM_ERROR and "slave" in (res.remark or "")
    assert listed(slave) == (table, version)


def test_a_pull_checks_its_group_as_java_does(store: rmqlog.MessageStore) -> None:
    strict = make_broker(store, clock=rmqlog.ManualClock(T0), auto_create_subscription_group=False)
    res = pull(strict, "Unknown")
    assert res.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "Unknown" in (res.remark or "")
    assert create(strict, {"groupName": "Off", "consumeEnable": False}).code == ResponseCode.SUCCESS
    res = pull(strict, "Off")
    assert res.code == ResponseCode.NO_PERMISSION and res.remark == "subscription group no permission, Off"
    assert create(strict, {"groupName": "Off", "consumeEnable": True}).code == ResponseCode.SUCCESS
    assert pull(strict, "Off").code == ResponseCode.PULL_NOT_FOUND
    # with autoCreateSubscriptionGroup (the default) a pull creates its group, as Java does
    auto = make_broker(store, clock=rmqlog.ManualClock(T0))
    assert pull(auto, "NewGroup").code == ResponseCode.PULL_NOT_FOUND
    assert "NewGroup" in listed(auto)[0]


def test_pull_rates_of_pairs_idle_for_a_window_are_dropped() -> None:
    """GetNums (208's pull rate) kept every (group, topic) ever pulled: a client pulling under
    ever new names grew it without bound. Its service round forgets the idle ones."""
    from rmqnet.broker.admin_stats import GetNums

    nums = GetNums(window_ms=60_000)
    nums.run_once(T0)
    for i in range(1000):
        nums.record(f"G{i}", "T", 5, T0 + 30_000 + i)
    nums.record("Busy", "T", 1, T0 + 59_000)
    assert len(nums) == 1001
    assert nums.run_once(T0 + 30_000) is False  # not before a window passed
    assert nums.run_once(T0 + 61_000) and len(nums) == 1001  # still within the window
    nums.record("Busy", "T", 1, T0 + 100_000)
    assert nums.run_once(T0 + 121_000) and len(nums) == 1  # the idle pairs gone, the busy one kept
    assert nums.tps("Busy", "T", T0 + 121_000) > 0 and nums.tps("G1", "T", T0 + 121_000) == 0.0
