"""ForwardMessageToDeadLetterQueue of the broker's gRPC endpoint (rmqnet.broker.grpc_consumers
over the send-back path and the POP checkpoints), called through a grpc.aio channel on a
ManualClock: the message read back from ``%DLQ%<group>`` and never redelivered, a redelivered one
from the retry topic, and the refusals (a malformed, expired or already acked handle; an
account without the group's SUB), each storing nothing and leaving the message in flight."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker.broker import Broker
from rmqnet.grpc.convert import Code
from rmqnet.grpc.v2 import definition_pb2 as pb
from rmqnet.grpc.v2 import service_pb2 as svc
from wire.broker_helpers import make_broker
from wire.grpc_helpers import Client, serve
from wire.test_grpc_acl import CONSUMER, OTHER, home
from wire.test_grpc_receive import INVISIBLE_MS, NOW, messages, put, receive_req


@pytest.fixture
def clock() -> rmqlog.ManualClock:
    return rmqlog.ManualClock(NOW)


@pytest.fixture
def store(tmp_path: Path, clock: rmqlog.ManualClock) -> Iterator[rmqlog.MessageStore]:
    with rmqlog.MessageStore.open(
        tmp_path / "store", small_store_config(store_host="127.0.0.1:10911"), clock=clock
    ) as s:
        yield s


@pytest.fixture
def broker(store: rmqlog.MessageStore, clock: rmqlog.ManualClock) -> Broker:
    b = make_broker(store, clock=clock)
    b.topics.update(rmqlog.TopicConfig("T1", 1, 1))
    return b


def call(broker: Broker, method: str, request: Any, metadata: Any = None) -> Any:
    async def body(c: Client, _: Any) -> Any:
        return await c.call(method, request, metadata=metadata)

    return serve(broker, body)


def forward_req(
    msg: pb.Message, group: str = "G", handle: str | None = None
) -> svc.ForwardMessageToDeadLetterQueueRequest:
    sp = msg.system_properties
    return svc.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name=group),
        topic=pb.Resource(name="T1"),
        message_id=sp.message_id,
        receipt_handle=sp.receipt_handle if handle is None else handle,
        delivery_attempt=sp.delivery_attempt,
        max_delivery_attempts=sp.delivery_attempt,
    )


def dead(store: rmqlog.MessageStore, group: str = "G") -> list[dict[str, Any]]:
    store.dispatch()
    topic = f"%DLQ%{group}"
    return store.read_queue(topic, 0, 0, 100).to_pylist() if topic in store.topics() else []


def test_a_forwarded_message_is_in_the_dead_letters_and_never_redelivered(
    broker: Broker, store: rmqlog.MessageStore, clock: rmqlog.ManualClock
) -> None:
    put(store, b"a", b"b")
    first, second = messages(call(broker, "ReceiveMessage", receive_req()))
    r = call(broker, "ForwardMessageToDeadLetterQueue", forward_req(first))
    assert r.status.code == Code.OK
    (row,) = dead(store)
    props = dict(row["properties"])
    assert row["body"] == b"a" and props["UNIQ_KEY"] == first.system_properties.message_id
    assert props["RETRY_TOPIC"] == "T1"
    assert broker.pop.inflight("G") == 1  # acked: only b is in flight
    # the same handle again: no longer in flight, nothing stored twice
    again = call(broker, "ForwardMessageToDeadLetterQueue", forward_req(first))
    assert again.status.code == Code.INVALID_RECEIPT_HANDLE and "not in flight" in again.status.message
    clock.set(NOW + INVISIBLE_MS + 1)
    broker.pop.run_once(clock.wall_ms())
    store.dispatch()
    later = messages(call(broker, "ReceiveMessage", receive_req()))
    assert [m.body for m in later] == [b"b"]  # only the unacked b came back, not a
    # a redelivered message (read from %RETRY%G_T1) forwarded by its new handle
    assert call(broker, "ForwardMessageToDeadLetterQueue", forward_req(later[0])).status.code == Code.OK
    assert [m["body"] for m in dead(store)] == [b"a", b"b"]
    assert broker.pop.inflight("G") == 0
    # the expired first handle of b: refused
    late = call(broker, "ForwardMessageToDeadLetterQueue", forward_req(second))
    assert late.status.code == Code.INVALID_RECEIPT_HANDLE


def test_an_expired_or_bad_handle_stores_nothing(
    broker: Broker, store: rmqlog.MessageStore, clock: rmqlog.ManualClock
) -> None:
    put(store, b"a")
    (msg,) = messages(call(broker, "ReceiveMessage", receive_req()))
    bad = call(broker, "ForwardMessageToDeadLetterQueue", forward_req(msg, handle="not a handle"))
    other_broker = msg.system_properties.receipt_handle.replace("broker-a", "broker-b")
    foreign = call(broker, "ForwardMessageToDeadLetterQueue", forward_req(msg, handle=other_broker))
    no_group = call(broker, "ForwardMessageToDeadLetterQueue", forward_req(msg, group=""))
    assert bad.status.code == foreign.status.code == Code.INVALID_RECEIPT_HANDLE
    assert no_group.status.code == Code.ILLEGAL_CONSUMER_GROUP
    clock.set(NOW + INVISIBLE_MS)
    expired = call(broker, "ForwardMessageToDeadLetterQueue", forward_req(msg))
    assert expired.status.code == Code.INVALID_RECEIPT_HANDLE and "expired" in expired.status.message
    assert dead(store) == []
    assert broker.pop.inflight("G") == 1  # left to the revive


def test_with_acl_forwarding_needs_the_groups_sub(
    store: rmqlog.MessageStore, clock: rmqlog.ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home(tmp_path, monkeypatch)
    broker = make_broker(store, clock=clock, acl_enable=True)
    broker.topics.update(rmqlog.TopicConfig("T1", 1, 1))
    put(store, b"a")
    (msg,) = messages(call(broker, "ReceiveMessage", receive_req(), CONSUMER))
    refused = call(broker, "ForwardMessageToDeadLetterQueue", forward_req(msg), OTHER)
    assert refused.status.code == Code.FORBIDDEN
    assert dead(store) == [] and broker.pop.inflight("G") == 1
    assert call(broker, "ForwardMessageToDeadLetterQueue", forward_req(msg), CONSUMER).status.code == Code.OK
    assert [m["body"] for m in dead(store)] == [b"a"] and broker.pop.inflight("G") == 0
