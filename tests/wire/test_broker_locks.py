"""Queue locks for orderly consumption (rmqnet.broker.locks): LOCK_BATCH_MQ 41 and
UNLOCK_BATCH_MQ 42, built from RocketMQ 4.9.8's ``RebalanceLockManager`` and the bodies its
``LockBatchRequestBody`` / ``LockBatchResponseBody`` / ``UnlockBatchRequestBody`` write. Time is
the broker's ``ManualClock``: expiry is tested without sleeping."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker.broker import Broker
from rmqnet.broker.locks import LOCK_MAX_LIVE_MS, LockedQueue, QueueLocks
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from wire.broker_helpers import FakePeer, make_broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    s = rmqlog.MessageStore.open(tmp_path / "store", small_store_config())
    try:
        yield make_broker(s, clock=rmqlog.ManualClock(1_700_000_000_000))
    finally:
        s.close()


def _mq(qid: int, topic: str = "ORDERS") -> dict[str, Any]:
    return {"brokerName": "broker-a", "queueId": qid, "topic": topic}


def _body(client: str, qids: list[int], group: str = "CG_ORDER") -> bytes:
    return json.dumps({"consumerGroup": group, "clientId": client, "mqSet": [_mq(q) for q in qids]}).encode()


def _call(broker: Broker, code: int, body: bytes) -> RemotingCommand:
    r = broker.table.process(broker, FakePeer(), RemotingCommand(code, 7, 0, None, {}, body, "JAVA"))
    assert isinstance(r, RemotingCommand)
    return r


def lock(broker: Broker, client: str, qids: list[int], group: str = "CG_ORDER") -> list[int]:
    r = _call(broker, RequestCode.LOCK_BATCH_MQ, _body(client, qids, group))
    assert r.code == ResponseCode.SUCCESS, r.remark
    got = json.loads(bytes(r.body))
    assert set(got) == {"lockOKMQSet"}
    return sorted(m["queueId"] for m in got["lockOKMQSet"])


def unlock(broker: Broker, client: str, qids: list[int]) -> None:
    r = _call(broker, RequestCode.UNLOCK_BATCH_MQ, _body(client, qids))
    assert r.code == ResponseCode.SUCCESS and not r.body


def test_a_queue_is_held_by_one_client_at_a_time(broker: Broker) -> None:
    assert lock(broker, "c1", [0, 1]) == [0, 1]
    # c2 gets only what nobody holds
    assert lock(broker, "c2", [0, 1, 2, 3]) == [2, 3]
    # the holder renews its own locks
    assert lock(broker, "c1", [0, 1]) == [0, 1]
    # another group's table is its own
    assert lock(broker, "c2", [0, 1], group="CG_OTHER") == [0, 1]


def test_the_answer_body_is_lock_batch_response_body(broker: Broker) -> None:
    r = _call(broker, RequestCode.LOCK_BATCH_MQ, _body("c1", [1]))
    assert json.loads(bytes(r.body)) == {"lockOKMQSet": [{"brokerName": "broker-a", "queueId": 1, "topic": "ORDERS"}]}


def test_an_expired_lock_is_taken_over_and_a_renewed_one_is_not(broker: Broker) -> None:
    clock = broker.clock
    assert isinstance(clock, rmqlog.ManualClock)
    assert lock(broker, "c1", [0, 1]) == [0, 1]
    clock.advance(LOCK_MAX_LIVE_MS - 1000)
    assert lock(broker, "c1", [1]) == [1]  # queue 1 renewed, queue 0 not
    clock.advance(1000)  # queue 0: exactly 60 s old, not expired yet (Java: "> maxLiveTime")
    assert lock(broker, "c2", [0, 1]) == []
    clock.advance(1)
    assert lock(broker, "c2", [0, 1]) == [0]  # 60 s + 1 ms: taken over; queue 1 still c1's
    assert broker.queue_locks.holder("CG_ORDER", LockedQueue("ORDERS", "broker-a", 0), clock.wall_ms()) == "c2"
    # the old holder is refused now
    assert lock(broker, "c1", [0, 1]) == [1]


def test_unlock_frees_only_the_clients_own_queues(broker: Broker) -> None:
    assert lock(broker, "c1", [0, 1]) == [0, 1]
    unlock(broker, "c2", [0, 1])  # not c2's: nothing happens (Java logs it)
    assert lock(broker, "c2", [0, 1]) == []
    unlock(broker, "c1", [0])
    assert lock(broker, "c2", [0, 1]) == [0]
    unlock(broker, "c9", [5])  # nothing locked there: SUCCESS all the same
    now = broker.clock.wall_ms()
    assert broker.queue_locks.locked("CG_ORDER", now) == {
        LockedQueue("ORDERS", "broker-a", 0): "c2",
        LockedQueue("ORDERS", "broker-a", 1): "c1",
    }


@pytest.mark.parametrize(
    ("body", "remark"),
    [
        (b"not json", "is not LockBatchRequestBody JSON"),
        (b"[]", "not a JSON object"),
        (json.dumps({"consumerGroup": "../etc", "clientId": "c", "mqSet": []}).encode(), "consumerGroup"),
        (json.dumps({"consumerGroup": "G", "clientId": "", "mqSet": []}).encode(), "clientId"),
        (json.dumps({"consumerGroup": "G", "clientId": "c", "mqSet": {"x": 1}}).encode(), "mqSet"),
        (json.dumps({"consumerGroup": "G", "clientId": "c", "mqSet": [_mq(0, "a/b")]}).encode(), "topic"),
        (json.dumps({"consumerGroup": "G", "clientId": "c", "mqSet": [_mq(-1)]}).encode(), "queueId"),
        (
            json.dumps({"consumerGroup": "G", "clientId": "c", "mqSet": [{**_mq(0), "brokerName": None}]}).encode(),
            "brokerName",
        ),
    ],
)
@pytest.mark.parametrize("code", [RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ])
def test_bad_bodies_are_refused_and_lock_nothing(broker: Broker, code: int, body: bytes, remark: str) -> None:
    r = _call(broker, code, body)
    assert r.code == ResponseCode.SYSTEM_ERROR and remark in (r.remark or ""), r.remark
    assert broker.queue_locks.locked("G", broker.clock.wall_ms()) == {}


def test_queue_ids_as_strings_and_duplicates_are_read_as_java_reads_them(broker: Broker) -> None:
    body = json.dumps(
        {"consumerGroup": "G", "clientId": "c1", "mqSet": [_mq(0), {**_mq(0), "queueId": "0"}, _mq(2)]}
    ).encode()
    r = _call(broker, RequestCode.LOCK_BATCH_MQ, body)
    assert sorted(m["queueId"] for m in json.loads(bytes(r.body))["lockOKMQSet"]) == [0, 2]


def test_the_table_alone() -> None:
    locks = QueueLocks(max_live_ms=10)
    a, b = LockedQueue("T", "b", 0), LockedQueue("T", "b", 1)
    assert locks.try_lock("G", (a, b), "x", 100) == [a, b]
    assert locks.try_lock("G", (a,), "y", 110) == []
    assert locks.try_lock("G", (a,), "y", 111) == [a]
    assert locks.unlock("G", (a, b), "x") == 1  # b only: a is y's now
    assert locks.locked("G", 111) == {a: "y"}
    assert locks.locked("G", 200) == {}  # expired: nobody holds it
