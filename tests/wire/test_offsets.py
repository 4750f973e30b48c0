"""Consumer offsets and positions (14, 15, 29, 30, 31, 32) against a real store: the same
consumerOffset.json the store API reads, Java's rule for a group with no offset yet, and the
failure paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import rmqlog
from rmqnet.broker import pull
from rmqnet.remoting import RequestCode, ResponseCode

from .broker_helpers import make_broker
from .brokerpull_support import FakePeer, open_store, request

T0 = 1_700_000_000_000


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    clock = rmqlog.ManualClock(T0)
    store = open_store(tmp_path / "store", clock)
    store.create_topic("T", 4)
    b = make_broker(store, clock)
    yield b
    store.close()


def call(broker: Any, code: int, oneway: bool = False, **ext: Any) -> Any:
    return broker.table.process(broker, FakePeer(), request(code, ext, oneway=oneway))


def put(broker: Any, n: int, queue_id: int = 0) -> None:
    broker.store.put_batch(pa.table({"topic": ["T"] * n, "body": [b"x"] * n, "queueId": [queue_id] * n}), dispatch=True)


def committed(broker: Any, group: str, queue_id: int) -> int:
    """What QUERY_CONSUMER_OFFSET answers (the broker's table)."""
    res = call(broker, RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=group, topic="T", queueId=queue_id)
    assert res.code == ResponseCode.SUCCESS
    return int(res.ext_fields["offset"])


def test_update_then_query_then_persisted_to_consumer_offset_json(broker: Any) -> None:
    res = call(broker, RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="G", topic="T", queueId=1, commitOffset=42)
    assert res.code == ResponseCode.SUCCESS
    res = call(broker, RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="G", topic="T", queueId=1)
    assert res.code == ResponseCode.SUCCESS and res.ext_fields == {"offset": 42}
    assert broker.store.committed_offset("G", "T", 1) == -1  # in the broker's table until its persist
    assert broker.consumer_offsets.persist() is True
    assert broker.store.committed_offset("G", "T", 1) == 42  # what rmqlog lag and Spark read


def test_update_negative_is_ignored_and_oneway_unanswered(broker: Any) -> None:
    call(broker, RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="G", topic="T", queueId=0, commitOffset=5)
    res = call(broker, RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="G", topic="T", queueId=0, commitOffset=-1)
    assert res.code == ResponseCode.SUCCESS and committed(broker, "G", 0) == 5
    assert (
        call(
            broker,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            oneway=True,
            consumerGroup="G",
            topic="T",
            queueId=0,
            commitOffset=7,
        )
        is None
    )
    assert committed(broker, "G", 0) == 7


def test_query_with_none_stored_on_a_queue_from_zero_is_zero(broker: Any) -> None:
    res = call(broker, RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="New", topic="T", queueId=0)
    assert res.code == ResponseCode.SUCCESS and res.ext_fields == {"offset": 0}  # empty queue
    put(broker, 3)
    res = call(broker, RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="New", topic="T", queueId=0)
    assert res.code == ResponseCode.SUCCESS and res.ext_fields == {"offset": 0}


def test_query_with_none_stored_and_the_first_record_on_disk_is_not_found(
    broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(broker, 3)
    monkeypatch.setattr(pull, "total_memory", lambda: 10)
    res = call(broker, RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="New", topic="T", queueId=0)
    assert res.code == ResponseCode.QUERY_NOT_FOUND and "maybe this group consumer boot first" in res.remark


def test_query_with_none_stored_and_min_offset_above_zero_is_not_found(
    broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(broker, 3)
    monkeypatch.setattr(broker.store, "min_offset", lambda topic, queue_id: 2)  # as after retention
    res = call(broker, RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="New", topic="T", queueId=0)
    assert res.code == ResponseCode.QUERY_NOT_FOUND


def test_max_min_offsets(broker: Any) -> None:
    put(broker, 4, queue_id=2)
    assert call(broker, RequestCode.GET_MAX_OFFSET, topic="T", queueId=2).ext_fields == {"offset": 4}
    assert call(broker, RequestCode.GET_MIN_OFFSET, topic="T", queueId=2).ext_fields == {"offset": 0}
    assert call(broker, RequestCode.GET_MAX_OFFSET, topic="T", queueId=3).ext_fields == {"offset": 0}
    assert call(broker, RequestCode.GET_MAX_OFFSET, topic="Unknown", queueId=0).ext_fields == {"offset": 0}


def test_search_offset_by_timestamp(broker: Any) -> None:
    put(broker, 2)
    broker.clock.advance(1000)
    put(broker, 3)

    def search(ts: int) -> int:
        res = call(broker, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic="T", queueId=0, timestamp=ts)
        assert res.code == ResponseCode.SUCCESS
        return int(res.ext_fields["offset"])

    assert search(0) == 0
    assert search(T0 + 1) == 2
    assert search(T0 + 1000) == 2
    assert search(T0 + 5000) == 5


def test_earliest_msg_storetime(broker: Any) -> None:
    res = call(broker, RequestCode.GET_EARLIEST_MSG_STORETIME, topic="T", queueId=0)
    assert res.code == ResponseCode.SUCCESS and res.ext_fields == {"timestamp": -1}
    put(broker, 1)
    broker.clock.advance(500)
    put(broker, 1)
    res = call(broker, RequestCode.GET_EARLIEST_MSG_STORETIME, topic="T", queueId=0)
    assert res.ext_fields == {"timestamp": T0}


@pytest.mark.parametrize(
    ("code", "ext", "names"),
    [
        (RequestCode.QUERY_CONSUMER_OFFSET, {"topic": "T", "queueId": 0}, "consumerGroup"),
        (RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T", "queueId": 0}, "commitOffset"),
        (RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": "x"}, "queueId"),
        (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "T", "queueId": 0}, "timestamp"),
        (RequestCode.GET_MIN_OFFSET, {"topic": "../etc", "queueId": 0}, "../etc"),
        (RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": -1}, "queue_id"),
        (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "bad group", "topic": "T", "queueId": 0}, "bad group"),
        (
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "G", "topic": "T", "queueId": 9, "commitOffset": 1},
            "queue_id 9",
        ),
        (RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": "a/b", "queueId": 0}, "a/b"),
    ],
)
def test_failures_are_system_error_naming_the_field(broker: Any, code: int, ext: dict[str, Any], names: str) -> None:
    res = call(broker, code, **ext)
    assert res.code == ResponseCode.SYSTEM_ERROR and names in res.remark
    assert len(broker.consumer_offsets) == 0 and broker.consumer_offsets.pending == 0  # nothing stored


def test_store_closed_is_service_not_available(broker: Any) -> None:
    broker.store.close()
    res = call(broker, RequestCode.GET_MAX_OFFSET, topic="T", queueId=0)
    assert res.code == ResponseCode.SERVICE_NOT_AVAILABLE
    broker.store = rmqlog.MessageStore.open(broker.store.paths.root, clock=broker.clock)  # (the fixture closes it)
