"""ReceiveMessage, AckMessage and ChangeInvisibleDuration of the broker's gRPC endpoint
(rmqnet.broker.grpc_consumers) over a real store and the broker's POP, on a ManualClock: the
stream's shape (status, messages, delivery timestamp), the messages' system properties, acks
per entry, a redelivery's attempt count, a changed handle, FIFO groups, and the typed refusals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import small_store_config

import rmqlog
from rmqlog import SubscriptionGroupConfig
from rmqnet.broker.broker import Broker
from rmqnet.grpc.convert import Code
from rmqnet.grpc.v2 import definition_pb2 as pb
from rmqnet.grpc.v2 import service_pb2 as svc
from wire.broker_helpers import make_broker
from wire.grpc_helpers import Client, serve

NOW = 1_700_000_000_000
INVISIBLE_MS = 10_000


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
    b.topics.update(rmqlog.TopicConfig("T1", 2, 2))
    return b


def put(store: rmqlog.MessageStore, *bodies: bytes, queue: int = 0, group: str | None = None) -> None:
    n = len(bodies)
    extra = f"__SHARDINGKEY\x01{group}\x02" if group else ""
    props = [f"TAGS\x01TagA\x02UNIQ_KEY\x01ID{i:04d}{b.decode()}\x02{extra}" for i, b in enumerate(bodies)]
    store.wire.put_wire(
        pa.table({"topic": ["T1"] * n, "queueId": [queue] * n, "body": list(bodies), "properties": props}),
        dispatch=True,
    )
    store.dispatch()


def receive_req(
    group: str = "G",
    *,
    batch: int = 32,
    invisible_ms: int | None = INVISIBLE_MS,
    polling_ms: int = 0,
    expression: str = "*",
    kind: int = pb.TAG,
) -> svc.ReceiveMessageRequest:
    req = svc.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        batch_size=batch,
        message_queue=pb.MessageQueue(topic=pb.Resource(name="T1"), id=0),
        filter_expression=pb.FilterExpression(type=kind, expression=expression),
    )  # type: ignore[arg-type]
    if invisible_ms is not None:
        req.invisible_duration.FromMilliseconds(invisible_ms)
    req.long_polling_timeout.FromMilliseconds(polling_ms)
    return req


def call(broker: Broker, method: str, request: Any, timeout: float = 10.0) -> Any:
    async def body(c: Client, _: Any) -> Any:
        return await c.call(method, request, timeout=timeout)

    return serve(broker, body)


def ack_req(*handles: str, group: str = "G") -> svc.AckMessageRequest:
    return svc.AckMessageRequest(
        group=pb.Resource(name=group),
        topic=pb.Resource(name="T1"),
        entries=[svc.AckMessageEntry(message_id=f"m{i}", receipt_handle=h) for i, h in enumerate(handles)],
    )


def messages(responses: list[svc.ReceiveMessageResponse]) -> list[pb.Message]:
    return [r.message for r in responses if r.WhichOneof("content") == "message"]


def test_receive_streams_status_then_messages_then_the_delivery_timestamp(
    broker: Broker, store: rmqlog.MessageStore
) -> None:
    put(store, b"a", b"b", b"c")
    out = call(broker, "ReceiveMessage", receive_req())
    kinds = [r.WhichOneof("content") for r in out]
    assert kinds == ["status", "message", "message", "message", "delivery_timestamp"]
    assert out[0].status.code == Code.OK
    assert out[-1].delivery_timestamp.ToMilliseconds() == NOW
    msgs = messages(out)
    assert [m.body for m in msgs] == [b"a", b"b", b"c"]
    sp = msgs[0].system_properties
    assert (msgs[0].topic.name, sp.tag, sp.message_id, sp.delivery_attempt, sp.queue_id, sp.queue_offset) == (
        "T1",
        "TagA",
        "ID0000a",
        1,
        0,
        0,
    )
    assert sp.invisible_duration.ToMilliseconds() == INVISIBLE_MS and sp.message_type == pb.NORMAL
    assert sp.receipt_handle.split(" ")[1] == str(NOW)  # RocketMQ's extraInfo: its popTime
    assert sp.HasField("born_timestamp") and sp.HasField("store_timestamp")
    # handed out: invisible now, a second receive finds nothing
    again = call(broker, "ReceiveMessage", receive_req())
    assert [r.WhichOneof("content") for r in again] == ["status", "delivery_timestamp"]
    assert again[0].status.code == Code.MESSAGE_NOT_FOUND


def test_an_empty_receive_long_polls_then_answers_message_not_found(broker: Broker) -> None:
    """No message: the receive is held (one wait on the POP holds), then answered when its
    polling time ends (bounded by the call's deadline, less the reserve)."""
    waits: list[int] = []
    real = broker.pop_holds.wait_arrival

    def counted(*args: Any) -> Any:
        waits.append(args[3])
        return real(*args)

    broker.pop_holds.wait_arrival = counted  # type: ignore[method-assign]
    out = call(broker, "ReceiveMessage", receive_req(polling_ms=20_000), timeout=1.5)
    assert [r.WhichOneof("content") for r in out] == ["status", "delivery_timestamp"]
    assert (out[0].status.code, out[0].status.message) == (Code.MESSAGE_NOT_FOUND, "no new message")
    assert len(waits) == 1 and NOW < waits[0] <= NOW + 1500


def test_a_held_receive_is_answered_by_an_arrival(broker: Broker, store: rmqlog.MessageStore) -> None:
    import asyncio

    async def body(c: Client, _: Any) -> Any:
        task = asyncio.ensure_future(c.call("ReceiveMessage", receive_req(polling_ms=20_000), timeout=30))
        for _ in range(1000):  # (until the receive is held; a refused one ends the task instead)
            if len(broker.pop_holds) or task.done():
                break
            await asyncio.sleep(0.01)
        assert len(broker.pop_holds) == 1, "the receive was not held"
        put(store, b"late")
        return await task

    out = serve(broker, body)
    assert out[0].status.code == Code.OK and [m.body for m in messages(out)] == [b"late"]


def test_acked_messages_are_not_redelivered_and_the_unacked_come_back_with_attempt_2(
    broker: Broker, store: rmqlog.MessageStore, clock: rmqlog.ManualClock
) -> None:
    put(store, b"a", b"b")
    msgs = messages(call(broker, "ReceiveMessage", receive_req()))
    ack = call(broker, "AckMessage", ack_req(msgs[0].system_properties.receipt_handle))
    assert ack.status.code == Code.OK and [e.status.code for e in ack.entries] == [Code.OK]
    # acking it again: still OK (idempotent), nothing else changes
    assert call(broker, "AckMessage", ack_req(msgs[0].system_properties.receipt_handle)).status.code == Code.OK
    clock.set(NOW + INVISIBLE_MS + 1)
    broker.pop.run_once(clock.wall_ms())
    store.dispatch()
    again = messages(call(broker, "ReceiveMessage", receive_req()))
    assert [(m.body, m.topic.name, m.system_properties.delivery_attempt) for m in again] == [(b"b", "T1", 2)]
    assert again[0].system_properties.message_id == msgs[1].system_properties.message_id
    # the redelivered one (read from the retry topic) is acked by its new handle, under the topic
    assert call(broker, "AckMessage", ack_req(again[0].system_properties.receipt_handle)).status.code == Code.OK
    # the first handle of b expired: INVALID_RECEIPT_HANDLE
    late = call(broker, "AckMessage", ack_req(msgs[1].system_properties.receipt_handle))
    assert late.status.code == Code.INVALID_RECEIPT_HANDLE and "expired" in late.status.message


def test_ack_answers_per_entry_and_multiple_results(broker: Broker, store: rmqlog.MessageStore) -> None:
    put(store, b"a")
    (m,) = messages(call(broker, "ReceiveMessage", receive_req()))
    r = call(
        broker,
        "AckMessage",
        ack_req(
            m.system_properties.receipt_handle,
            "not a handle",
            m.system_properties.receipt_handle.replace(broker.config.broker_name, "other"),
        ),
    )
    assert r.status.code == Code.MULTIPLE_RESULTS
    assert [e.status.code for e in r.entries] == [Code.OK, Code.INVALID_RECEIPT_HANDLE, Code.INVALID_RECEIPT_HANDLE]
    assert [e.message_id for e in r.entries] == ["m0", "m1", "m2"]
    assert "malformed" in r.entries[1].status.message and "other" in r.entries[2].status.message
    assert broker.pop.acked == 1


def test_change_invisible_duration_gives_a_new_handle_and_moves_the_redelivery(
    broker: Broker, store: rmqlog.MessageStore, clock: rmqlog.ManualClock
) -> None:
    put(store, b"a")
    (m,) = messages(call(broker, "ReceiveMessage", receive_req()))
    old = m.system_properties.receipt_handle
    req = svc.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="G"),
        topic=pb.Resource(name="T1"),
        receipt_handle=old,
        message_id=m.system_properties.message_id,
    )
    req.invisible_duration.FromMilliseconds(60_000)
    clock.set(NOW + 1)  # (a change in the pop's own ms gets the same popTime: the old handle would name it)
    r = call(broker, "ChangeInvisibleDuration", req)
    assert r.status.code == Code.OK and r.receipt_handle != old
    # past the first invisible time, before the new one: the revive stores nothing again
    clock.set(NOW + INVISIBLE_MS + 1)
    assert broker.pop.run_once(clock.wall_ms()) == 0
    assert [r.WhichOneof("content") for r in call(broker, "ReceiveMessage", receive_req())] == [
        "status",
        "delivery_timestamp",
    ]
    # the old handle no longer changes nor acks it; the new one acks it
    assert call(broker, "ChangeInvisibleDuration", req).status.code == Code.INVALID_RECEIPT_HANDLE
    assert call(broker, "AckMessage", ack_req(r.receipt_handle)).status.code == Code.OK
    clock.set(NOW + 62_000)
    assert broker.pop.run_once(clock.wall_ms()) == 0


def test_a_fifo_group_is_served_in_order_one_batch_in_flight(broker: Broker, store: rmqlog.MessageStore) -> None:
    broker.subscription_groups.update(SubscriptionGroupConfig("GF", consume_message_orderly=True))
    put(store, b"1", b"2", b"3", group="order-1")
    first = messages(call(broker, "ReceiveMessage", receive_req("GF", batch=2)))
    assert [m.body for m in first] == [b"1", b"2"] and first[0].system_properties.message_type == pb.FIFO
    assert first[0].system_properties.message_group == "order-1"
    # the queue's batch is in flight: nothing more until it is acked
    assert messages(call(broker, "ReceiveMessage", receive_req("GF"))) == []
    assert (
        call(
            broker, "AckMessage", ack_req(*(m.system_properties.receipt_handle for m in first), group="GF")
        ).status.code
        == Code.OK
    )
    assert [m.body for m in messages(call(broker, "ReceiveMessage", receive_req("GF")))] == [b"3"]


@pytest.mark.parametrize(
    ("request_", "code", "says"),
    [
        (receive_req(invisible_ms=500), Code.ILLEGAL_INVISIBLE_TIME, "minInvisibleTimeMillsForRecv"),
        (receive_req(invisible_ms=None), Code.ILLEGAL_INVISIBLE_TIME, "required"),
        (receive_req(batch=0), Code.BAD_REQUEST, "batch_size"),
        (receive_req(expression="a > 1", kind=pb.SQL), Code.UNSUPPORTED, "SQL92"),
        (receive_req(group=""), Code.ILLEGAL_CONSUMER_GROUP, "group"),
    ],
)
def test_a_bad_receive_is_one_typed_status(broker: Broker, request_: Any, code: int, says: str) -> None:
    out = call(broker, "ReceiveMessage", request_)
    assert [r.WhichOneof("content") for r in out] == ["status", "delivery_timestamp"]
    assert out[0].status.code == code and says in out[0].status.message, out


def test_a_receive_of_an_unknown_topic_is_topic_not_found(broker: Broker) -> None:
    req = receive_req()
    req.message_queue.topic.name = "Nope"
    r, end = call(broker, "ReceiveMessage", req)
    assert r.status.code == Code.TOPIC_NOT_FOUND and end.delivery_timestamp.ToMilliseconds() == NOW


def test_change_refuses_a_bad_handle_and_duration(broker: Broker) -> None:
    req = svc.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="G"), topic=pb.Resource(name="T1"), receipt_handle="junk", message_id="x"
    )
    req.invisible_duration.FromMilliseconds(1000)
    assert call(broker, "ChangeInvisibleDuration", req).status.code == Code.INVALID_RECEIPT_HANDLE
    req.invisible_duration.FromMilliseconds(0)
    assert call(broker, "ChangeInvisibleDuration", req).status.code == Code.ILLEGAL_INVISIBLE_TIME


def test_ack_change_and_forward_refuse_in_the_proxy_s_order(broker: Broker) -> None:
    """The topic's name first, then the request's own problem, then the topic's existence,
    then the receipt handle: each refusal with its own code."""

    def ack(topic: str, *handles: str) -> int:
        req = ack_req(*handles)
        req.topic.name = topic
        return int(call(broker, "AckMessage", req).status.code)

    def change(topic: str, ms: int, handle: str = "junk") -> int:
        req = svc.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="G"), topic=pb.Resource(name=topic), receipt_handle=handle, message_id="x"
        )
        req.invisible_duration.FromMilliseconds(ms)
        return int(call(broker, "ChangeInvisibleDuration", req).status.code)

    def forward(topic: str, group: str, handle: str = "junk") -> int:
        req = svc.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic), receipt_handle=handle, message_id="x"
        )
        return int(call(broker, "ForwardMessageToDeadLetterQueue", req).status.code)

    assert [ack("bad topic"), ack("Nope"), ack("Nope", "junk"), ack("T1", "junk")] == [
        Code.ILLEGAL_TOPIC,
        Code.BAD_REQUEST,
        Code.TOPIC_NOT_FOUND,
        Code.INVALID_RECEIPT_HANDLE,
    ]
    assert [change("bad topic", 0), change("Nope", 0), change("Nope", 1000), change("T1", 1000)] == [
        Code.ILLEGAL_TOPIC,
        Code.ILLEGAL_INVISIBLE_TIME,
        Code.TOPIC_NOT_FOUND,
        Code.INVALID_RECEIPT_HANDLE,
    ]
    assert [forward("bad topic", ""), forward("Nope", ""), forward("Nope", "G"), forward("T1", "G")] == [
        Code.ILLEGAL_TOPIC,
        Code.ILLEGAL_CONSUMER_GROUP,
        Code.TOPIC_NOT_FOUND,
        Code.INVALID_RECEIPT_HANDLE,
    ]


def test_a_fifo_groups_consumer_settings_say_fifo(broker: Broker) -> None:
    """The Settings answered on Telemetry carry ``fifo`` = the group's consumeMessageOrderly
    (the simple consumer never sets it itself) and its attempts."""
    broker.subscription_groups.update(SubscriptionGroupConfig("GF", consume_message_orderly=True, retry_max_times=3))

    def settings(group: str) -> pb.Settings:
        return pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name=group)))

    async def body(c: Client, _: Any) -> Any:
        return await c.telemetry(
            [svc.TelemetryCommand(settings=settings("GF")), svc.TelemetryCommand(settings=settings("G"))]
        )

    fifo, plain = serve(broker, body)
    assert (fifo.settings.subscription.fifo, plain.settings.subscription.fifo) == (True, False)
    # the attempts: the group's retryMaxTimes + 1 (17 for a group the broker does not know)
    assert (fifo.settings.backoff_policy.max_attempts, plain.settings.backoff_policy.max_attempts) == (4, 17)


def test_a_receive_stream_broken_midway_makes_the_unwritten_messages_visible_in_1s(
    broker: Broker, store: rmqlog.MessageStore, clock: rmqlog.ManualClock
) -> None:
    """The client goes away after the first message: it and the two not written are changed to
    be visible again 1 s later (the proxy's nack), not after the 10 s invisible time."""
    import asyncio

    from rmqnet.broker.grpc_consumers import GrpcConsumers

    put(store, b"a", b"b", b"c")

    async def main() -> list[Any]:
        stream = GrpcConsumers(broker).receive(receive_req(), None)
        got = [await anext(stream), await anext(stream)]  # the status, the first message
        await stream.aclose()  # (what grpc does to a handler whose client is gone)
        return got

    got = asyncio.run(main())
    assert got[0].status.code == Code.OK and got[1].message.body == b"a"
    clock.set(NOW + 1001)
    assert broker.pop.run_once(clock.wall_ms()) == 3


def test_a_receive_read_to_its_end_is_not_nacked(
    broker: Broker, store: rmqlog.MessageStore, clock: rmqlog.ManualClock
) -> None:
    put(store, b"a", b"b")
    assert len(messages(call(broker, "ReceiveMessage", receive_req()))) == 2
    clock.set(NOW + 1001)
    assert broker.pop.run_once(clock.wall_ms()) == 0
