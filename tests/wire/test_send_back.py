"""CONSUMER_SEND_MSG_BACK (36), rmqnet.broker.send_back: handlers called with RemotingCommands
built from RocketMQ 4.9.8's field names (``ConsumerSendMsgBackRequestHeader``) over a real
store; what is stored checked against ``asyncConsumerSendMsgBack`` and, after the delay, the
scheduler's delivery (``messageTimeup``)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker.topics import PERM_RW
from rmqnet.remoting import ConsumerSendMsgBackHeader, RemotingCommand, RequestCode, ResponseCode
from wire.broker_helpers import FakePeer, make_broker, run, send_header, send_request

FAR = 1 << 50
SCHEDULE = "SCHEDULE_TOPIC_XXXX"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[rmqlog.MessageStore]:
    with rmqlog.MessageStore.open(
        tmp_path / "store", small_store_config(), clock=rmqlog.ManualClock(1_700_000_000_000)
    ) as s:
        s.create_topic("T", 2)
        yield s


def put(store: rmqlog.MessageStore, *bodies: bytes, sys_flag: int = 0, reconsume: int = 0) -> list[dict[str, Any]]:
    n = len(bodies)
    res = store.wire.put_wire(
        pa.table(
            {
                "topic": ["T"] * n,
                "queueId": [0] * n,
                "body": list(bodies),
                "flag": pa.array([9] * n, pa.int32()),
                "sysFlag": pa.array([sys_flag] * n, pa.int32()),
                "bornHost": ["10.9.8.7:4321"] * n,
                "properties": ["TAGS\x01TagA\x02KEYS\x01k1\x02"] * n,
                "reconsumeTimes": pa.array([reconsume] * n, pa.int32()),
            }
        ),
        dispatch=True,
    )
    return res.to_pylist()


def back(
    offset: int,
    group: str = "G",
    delay: int = 0,
    *,
    max_reconsume: int | None = None,
    version: int = 121,
    opaque: int = 1,
    **ext: Any,
) -> RemotingCommand:
    h = ConsumerSendMsgBackHeader(
        offset=offset,
        group=group,
        delay_level=delay,
        origin_msg_id="X",
        origin_topic="T",
        max_reconsume_times=max_reconsume,
    )
    return RemotingCommand(
        RequestCode.CONSUMER_SEND_MSG_BACK, opaque, 0, None, {**h.to_ext(), **ext}, b"", "JAVA", version
    )


def rows(store: rmqlog.MessageStore, topic: str, queue: int = 0) -> list[dict[str, Any]]:
    store.dispatch()
    if topic not in store.topics():
        return []
    return store.read_queue(topic, queue, 0, 1 << 40).to_pylist()


def code(r: RemotingCommand | None) -> int:
    assert r is not None
    return r.code


def test_a_message_sent_back_waits_its_delay_then_is_in_the_retry_topic(store: rmqlog.MessageStore) -> None:
    body = zlib.compress(b"z" * 6000)
    [m] = put(store, body, sys_flag=1)
    broker = make_broker(store)
    (r,) = run(broker, FakePeer(), back(m["commitLogOffset"]))
    assert code(r) == ResponseCode.SUCCESS and r is not None and r.ext_fields == {}
    tc = broker.topics.get("%RETRY%G")
    assert tc is not None and (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (1, 1, PERM_RW)
    assert rows(store, "%RETRY%G") == []  # not yet: delay level 3 + reconsumeTimes 0 = 3
    assert len(rows(store, SCHEDULE, 2)) == 1
    assert store.deliver_due(FAR) == 1
    [got] = rows(store, "%RETRY%G")
    props = dict(got["properties"])
    assert (got["body"], got["flag"], got["sysFlag"] & 1, got["reconsumeTimes"]) == (body, 9, 1, 1)
    assert got["bornHost"] == "10.9.8.7:4321" and got["tags"] == "TagA" and got["keys"] == ["k1"]
    assert props["RETRY_TOPIC"] == "T" and props["ORIGIN_MESSAGE_ID"] == m["msgId"]
    assert "DELAY" not in props


def test_the_requested_delay_level_and_the_next_retry_keep_the_origin(store: rmqlog.MessageStore) -> None:
    [m] = put(store, b"x")
    broker = make_broker(store)
    assert code(run(broker, FakePeer(), back(m["commitLogOffset"], delay=1))[0]) == ResponseCode.SUCCESS
    assert len(rows(store, SCHEDULE, 0)) == 1  # level 1 waits in queue 0
    store.deliver_due(FAR)
    [first] = rows(store, "%RETRY%G")
    assert code(run(broker, FakePeer(), back(first["commitLogOffset"]))[0]) == ResponseCode.SUCCESS
    assert len(rows(store, SCHEDULE, 3)) == 1  # 3 + reconsumeTimes 1 = level 4
    store.deliver_due(FAR)
    second = rows(store, "%RETRY%G")[1]
    props = dict(second["properties"])
    assert second["reconsumeTimes"] == 2 and props["RETRY_TOPIC"] == "T" and props["ORIGIN_MESSAGE_ID"] == m["msgId"]


def test_at_the_maximum_or_with_a_negative_level_it_is_a_dead_letter(store: rmqlog.MessageStore) -> None:
    a, b, c = put(store, b"a", b"b", b"c", reconsume=2)
    broker = make_broker(store)
    replies = run(
        broker,
        FakePeer(),
        back(a["commitLogOffset"], max_reconsume=2, opaque=1),
        back(b["commitLogOffset"], delay=-1, opaque=2),
        back(c["commitLogOffset"], max_reconsume=3, opaque=3),
    )
    assert [code(r) for r in replies] == [ResponseCode.SUCCESS] * 3
    dead = rows(store, "%DLQ%G")
    assert [(d["body"], d["reconsumeTimes"]) for d in dead] == [(b"a", 3), (b"b", 3)]
    assert all("DELAY" not in dict(d["properties"]) and dict(d["properties"])["RETRY_TOPIC"] == "T" for d in dead)
    tc = broker.topics.get("%DLQ%G")
    assert tc is not None and (tc.write_queue_nums, tc.perm) == (1, PERM_RW)  # 4.9.8: PERM_WRITE | PERM_READ
    assert len(rows(store, SCHEDULE, 4)) == 1  # c: 3 + 2 = level 5
    assert (broker.send_back.retried, broker.send_back.dead) == (1, 2)


def test_the_request_max_counts_from_client_version_v3_4_9(store: rmqlog.MessageStore) -> None:
    [m] = put(store, b"old", reconsume=2)
    broker = make_broker(store)
    # an older client's maxReconsumeTimes is not read: the group's 16
    assert (
        code(run(broker, FakePeer(), back(m["commitLogOffset"], max_reconsume=2, version=63))[0])
        == ResponseCode.SUCCESS
    )
    assert rows(store, "%DLQ%G") == [] and len(rows(store, SCHEDULE, 4)) == 1
    [m2] = put(store, b"x", reconsume=16)
    run(broker, FakePeer(), back(m2["commitLogOffset"], version=63))
    assert [d["body"] for d in rows(store, "%DLQ%G")] == [b"x"]


def test_send_backs_arriving_together_are_one_read_and_one_put(
    store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ms = put(store, *[b"m%d" % i for i in range(50)])
    broker = make_broker(store)
    calls: list[str] = []
    for name in ("wire_records", "put_wire"):
        real = getattr(store.wire, name)
        monkeypatch.setattr(store.wire, name, lambda *a, _r=real, _n=name, **k: (calls.append(_n), _r(*a, **k))[1])
    replies = run(
        broker, FakePeer(), *[back(m["commitLogOffset"], group=f"G{i % 3}", opaque=i) for i, m in enumerate(ms)]
    )
    assert [code(r) for r in replies] == [ResponseCode.SUCCESS] * 50 and [r.opaque for r in replies if r] == list(
        range(50)
    )
    assert calls == ["wire_records", "put_wire"]
    store.deliver_due(FAR)
    assert sorted(m["body"] for g in range(3) for m in rows(store, f"%RETRY%G{g}")) == sorted(
        b"m%d" % i for i in range(50)
    )


# ------------------------------------------------------------------ failures
def test_an_offset_that_starts_no_record_is_refused_alone(store: rmqlog.MessageStore) -> None:
    a, b = put(store, b"first", b"second")
    broker = make_broker(store)
    bad = [-5, 1 << 40, a["commitLogOffset"] + 3]
    replies = run(
        broker,
        FakePeer(),
        back(a["commitLogOffset"], opaque=1),
        *[back(o, opaque=10 + i) for i, o in enumerate(bad)],
        back(b["commitLogOffset"], opaque=2),
    )
    assert code(replies[0]) == code(replies[-1]) == ResponseCode.SUCCESS
    for r, o in zip(replies[1:-1], bad, strict=True):
        assert r is not None and (r.code, r.remark) == (
            ResponseCode.SYSTEM_ERROR,
            f"look message by offset failed, {o}",
        )
    store.deliver_due(FAR)
    assert [m["body"] for m in rows(store, "%RETRY%G")] == [b"first", b"second"]


@pytest.mark.parametrize("group", ["bad/group", "", "x" * 300])
def test_a_bad_group_is_subscription_group_not_exist(store: rmqlog.MessageStore, group: str) -> None:
    [m] = put(store, b"x")
    broker = make_broker(store)
    (r,) = run(broker, FakePeer(), back(m["commitLogOffset"], group=group))
    assert r is not None and r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    assert r.remark is not None and r.remark.startswith(f"subscription group not exist, {group}")
    assert not any(t.startswith("%RETRY%") for t in store.topics())


def test_without_auto_created_groups_only_known_groups_send_back(store: rmqlog.MessageStore) -> None:
    [m] = put(store, b"x")
    broker = make_broker(store, auto_create_subscription_group=False)
    assert (
        code(run(broker, FakePeer(), back(m["commitLogOffset"], group="Unknown"))[0])
        == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    )
    broker.topics.create_retry("Known")
    assert code(run(broker, FakePeer(), back(m["commitLogOffset"], group="Known"))[0]) == ResponseCode.SUCCESS


@pytest.mark.parametrize("missing", ["offset", "group", "delayLevel"])
def test_a_missing_required_field_is_system_error_naming_it(store: rmqlog.MessageStore, missing: str) -> None:
    [m] = put(store, b"x")
    req = back(m["commitLogOffset"])
    del req.ext_fields[missing]
    (r,) = run(make_broker(store), FakePeer(), req)
    assert r is not None and r.code == ResponseCode.SYSTEM_ERROR and r.remark is not None and missing in r.remark


def test_a_store_error_is_mapped_and_nothing_is_stored(
    store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    [m] = put(store, b"x")
    broker = make_broker(store)

    def full(*_a: Any, **_k: Any) -> Any:
        raise rmqlog.DiskFullError("disk full (test)")

    monkeypatch.setattr(store.wire, "put_wire", full)
    (r,) = run(broker, FakePeer(), back(m["commitLogOffset"]))
    assert r is not None and r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk full (test)" in (r.remark or "")
    monkeypatch.undo()
    assert rows(store, SCHEDULE, 2) == [] and rows(store, "%RETRY%G") == []


def test_a_damaged_record_fails_only_its_request(store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = put(store, b"good", b"bad")
    broker = make_broker(store)
    real = store.wire.wire_records

    def damaged(offsets: Any) -> Any:
        if b["commitLogOffset"] in np.asarray(offsets).tolist():
            raise rmqlog.CorruptRecordError("damaged commitlog record: body CRC mismatch", offset=b["commitLogOffset"])
        return real(offsets)

    monkeypatch.setattr(store.wire, "wire_records", damaged)
    ra, rb = run(broker, FakePeer(), back(a["commitLogOffset"], opaque=1), back(b["commitLogOffset"], opaque=2))
    assert code(ra) == ResponseCode.SUCCESS
    assert rb is not None and rb.code == ResponseCode.SYSTEM_ERROR and "CorruptRecordError" in (rb.remark or "")


def test_a_broker_without_write_permission_refuses(store: rmqlog.MessageStore) -> None:
    [m] = put(store, b"x")
    (r,) = run(make_broker(store, broker_permission=4), FakePeer(), back(m["commitLogOffset"]))
    assert r is not None and r.code == ResponseCode.NO_PERMISSION and "sending message is forbidden" in (r.remark or "")


def test_the_keys_update_broker_config_changes_count_at_once(store: rmqlog.MessageStore) -> None:
    """brokerPermission and autoCreateSubscriptionGroup are read per request (UPDATE_BROKER_CONFIG,
    25): a send-back sees the broker's config of now, not the one it was built with."""
    [m] = put(store, b"x")
    broker = make_broker(store)
    update = RemotingCommand(RequestCode.UPDATE_BROKER_CONFIG, 9, 0, None, {}, b"brokerPermission=4\n", "JAVA")
    assert code(run(broker, FakePeer(), update)[0]) == ResponseCode.SUCCESS
    (r,) = run(broker, FakePeer(), back(m["commitLogOffset"]))
    assert r is not None and r.code == ResponseCode.NO_PERMISSION and "sending message is forbidden" in (r.remark or "")
    update = RemotingCommand(
        RequestCode.UPDATE_BROKER_CONFIG,
        10,
        0,
        None,
        {},
        b"brokerPermission=6\nautoCreateSubscriptionGroup=false\n",
        "JAVA",
    )
    assert code(run(broker, FakePeer(), update)[0]) == ResponseCode.SUCCESS
    assert (
        code(run(broker, FakePeer(), back(m["commitLogOffset"], group="Unknown"))[0])
        == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    )
    assert rows(store, "%RETRY%G") == [] and rows(store, SCHEDULE, 2) == []  # nothing was stored


@pytest.mark.parametrize("name", ["REAL_TOPIC", "REAL_QID", "RMQLOG_WRITER", "TIMER_OUT_MS"])
def test_reserved_property_names_from_users_are_still_refused(store: rmqlog.MessageStore, name: str) -> None:
    """Only the broker's own path writes what the store sets itself; a client's send of one is
    MESSAGE_ILLEGAL, and the store's put refuses RocketMQ's system names too."""
    (r,) = run(make_broker(store), FakePeer(), send_request(send_header("T", props=f"{name}\x01v\x02"), b"x"))
    assert r is not None and r.code == ResponseCode.MESSAGE_ILLEGAL and name in (r.remark or "")
    with pytest.raises(rmqlog.InvalidMessageError, match="ORIGIN_MESSAGE_ID"):
        store.put("T", b"x", properties={"ORIGIN_MESSAGE_ID": "v"})


def test_acl_checks_code_36_against_the_retry_group(
    store: rmqlog.MessageStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With aclEnable: 36 needs ``%RETRY%<group>`` SUB (PlainAccessValidator); refused, nothing is stored."""
    from rmqnet.broker.acl import ACL_EXCEPTION
    from rmqnet.remoting.acl_sign import sign
    from wire.test_acl import PLAIN_ACL, USER_KEY, USER_SECRET

    home = tmp_path / "rmqhome"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    [m] = put(store, b"x")
    broker = make_broker(store, acl_enable=True)
    (r,) = run(
        broker, FakePeer(), sign(back(m["commitLogOffset"], group="groupA"), USER_KEY, USER_SECRET)
    )  # groupA=DENY
    assert r is not None and (r.code, r.remark) == (
        ResponseCode.SYSTEM_ERROR,
        f"{ACL_EXCEPTION}: No default permission for group:groupA",
    )
    (r,) = run(broker, FakePeer(), back(m["commitLogOffset"], group="groupC"))  # unsigned
    assert r is not None and r.code == ResponseCode.SYSTEM_ERROR and "No accessKey" in (r.remark or "")
    assert "%RETRY%groupA" not in store.topics() and rows(store, SCHEDULE, 2) == []
    (r,) = run(broker, FakePeer(), sign(back(m["commitLogOffset"], group="groupC"), USER_KEY, USER_SECRET))  # SUB
    assert code(r) == ResponseCode.SUCCESS
    assert len(rows(store, SCHEDULE, 2)) == 1
