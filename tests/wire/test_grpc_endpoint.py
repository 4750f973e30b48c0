"""The broker's gRPC endpoint (rmqnet.broker.grpc_server, grpc_service; rmqnet.grpc) over a real
store, called through a grpc.aio channel on 127.0.0.1: routes, the settings handshake, sends of
every message type read back from the store, transactions ended, and the failure paths (each
answered with its typed status, nothing stored)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import small_store_config
from google.protobuf import message_factory

import rmqlog
from rmqnet.broker.broker import Broker
from rmqnet.broker.transactions import HALF_TOPIC
from rmqnet.grpc.convert import Code, consistent_hash, java_string_hash, transaction_id
from rmqnet.grpc.v2 import definition_pb2 as pb
from rmqnet.grpc.v2 import service_pb2 as svc
from wire.broker_helpers import make_broker
from wire.grpc_helpers import Client, serve

NOW = 1_700_000_000_000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[rmqlog.MessageStore]:
    s = rmqlog.MessageStore.open(
        tmp_path / "store", small_store_config(store_host="127.0.0.1:10911"), clock=rmqlog.ManualClock(NOW)
    )
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def broker(store: rmqlog.MessageStore) -> Broker:
    b = make_broker(store, clock=rmqlog.ManualClock(NOW))
    b.topics.update(rmqlog.TopicConfig("T1", 4, 4))
    return b


def stored(store: rmqlog.MessageStore, topic: str) -> list[dict[str, Any]]:
    store.dispatch()
    if topic not in store.topics():
        return []
    out = []
    for q in range(8):
        try:
            out += store.read_queue(topic, q, 0, 1 << 40).to_pylist()
        except rmqlog.StoreError:
            continue
    return out


def props(row: dict[str, Any]) -> dict[str, str]:
    return dict(row["properties"] or [])


def message(
    topic: str = "T1",
    body: bytes = b"hello",
    msg_id: str = "0A0000010000000000000000000000A1",
    *,
    tag: str | None = "TagA",
    keys: tuple[str, ...] = ("k1", "k2"),
    user: dict[str, str] | None = None,
    kind: int = pb.NORMAL,
    group: str | None = None,
    deliver_ms: int | None = None,
) -> pb.Message:
    sp = pb.SystemProperties(message_id=msg_id, keys=list(keys), message_type=kind)  # type: ignore[arg-type]
    if tag is not None:
        sp.tag = tag
    if group is not None:
        sp.message_group = group
    if deliver_ms is not None:
        sp.delivery_timestamp.FromMilliseconds(deliver_ms)
    return pb.Message(topic=pb.Resource(name=topic), body=body, user_properties=user or {}, system_properties=sp)


def send(broker: Broker, *messages: pb.Message) -> svc.SendMessageResponse:
    async def body(c: Client, _: Any) -> svc.SendMessageResponse:
        r: svc.SendMessageResponse = await c.call("SendMessage", svc.SendMessageRequest(messages=list(messages)))
        return r

    return serve(broker, body)


# ------------------------------------------------------------------------------------ routes


def test_query_route_lists_the_topics_queues_with_permissions_types_and_this_endpoint(broker: Broker) -> None:
    broker.topics.update(rmqlog.TopicConfig("T2", read_queue_nums=4, write_queue_nums=2))

    async def body(c: Client, endpoint: Any) -> Any:
        return (
            await c.call("QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name="T1"))),
            await c.call("QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name="T2"))),
            endpoint.port,
        )

    r1, r2, port = serve(broker, body)
    assert r1.status.code == Code.OK
    assert [q.id for q in r1.message_queues] == [0, 1, 2, 3]
    assert {q.permission for q in r1.message_queues} == {pb.READ_WRITE}
    q = r1.message_queues[0]
    assert q.broker.name == "broker-a" and q.broker.id == 0
    assert [(a.host, a.port) for a in q.broker.endpoints.addresses] == [("127.0.0.1", port)]
    assert list(q.accept_message_types) == [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
    assert [q.permission for q in r2.message_queues] == [pb.READ_WRITE, pb.READ_WRITE, pb.READ, pb.READ]


def test_query_route_of_an_unknown_or_illegal_topic(broker: Broker) -> None:
    async def body(c: Client, _: Any) -> Any:
        return (
            await c.call("QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name="Nope"))),
            await c.call("QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name="bad topic!"))),
        )

    unknown, illegal = serve(broker, body)
    assert unknown.status.code == Code.TOPIC_NOT_FOUND and not unknown.message_queues
    assert illegal.status.code == Code.ILLEGAL_TOPIC


def test_query_assignment_is_one_queue_per_broker(broker: Broker) -> None:
    async def body(c: Client, _: Any) -> Any:
        req = svc.QueryAssignmentRequest(topic=pb.Resource(name="T1"), group=pb.Resource(name="G"))
        return await c.call("QueryAssignment", req)

    r = serve(broker, body)
    assert r.status.code == Code.OK
    assert [(a.message_queue.id, a.message_queue.broker.name) for a in r.assignments] == [(-1, "broker-a")]


# ------------------------------------------------------------------------- clients' calls


def test_telemetry_answers_each_settings_with_the_servers(broker: Broker) -> None:
    producer = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T1")]))
    consumer = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name="G")))

    async def body(c: Client, _: Any) -> Any:
        return await c.telemetry([svc.TelemetryCommand(settings=producer), svc.TelemetryCommand(settings=consumer)])

    p, s = serve(broker, body)
    assert p.status.code == Code.OK and s.status.code == Code.OK
    assert p.settings.publishing.max_body_size == broker.config.max_message_size
    assert p.settings.publishing.validate_message_type
    assert [t.name for t in p.settings.publishing.topics] == ["T1"]
    assert p.settings.backoff_policy.max_attempts == 3
    assert p.settings.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
    assert s.settings.subscription.receive_batch_size == 32
    assert s.settings.subscription.long_polling_timeout.seconds == 20
    assert s.settings.backoff_policy.max_attempts == 17


def test_heartbeat_and_termination_are_ok(broker: Broker) -> None:
    async def body(c: Client, _: Any) -> Any:
        return (
            await c.call("Heartbeat", svc.HeartbeatRequest(client_type=pb.PRODUCER)),
            await c.call("NotifyClientTermination", svc.NotifyClientTerminationRequest()),
        )

    hb, bye = serve(broker, body)
    assert hb.status.code == Code.OK and bye.status.code == Code.OK


# ------------------------------------------------------------------------------------ sends


def test_a_normal_send_is_stored_with_its_tag_keys_id_and_user_properties(
    broker: Broker, store: rmqlog.MessageStore
) -> None:
    r = send(broker, message(user={"color": "red"}))
    assert r.status.code == Code.OK, r
    (entry,) = r.entries
    assert entry.message_id == "0A0000010000000000000000000000A1" and entry.offset == 0
    (row,) = stored(store, "T1")
    p = props(row)
    assert bytes(row["body"]) == b"hello"
    assert (p["TAGS"], p["KEYS"], p["UNIQ_KEY"], p["color"], p["PGROUP"]) == (
        "TagA",
        "k1 k2",
        "0A0000010000000000000000000000A1",
        "red",
        "T1",
    )
    assert "TRAN_MSG" not in p and "TIMER_DELIVER_MS" not in p


def test_fifo_sends_of_one_group_go_to_one_queue_with_the_group(broker: Broker, store: rmqlog.MessageStore) -> None:
    for i in range(6):
        r = send(broker, message(msg_id=f"0A00000100000000000000000000000{i}", kind=pb.FIFO, group="order-7"))
        assert r.status.code == Code.OK
    rows = stored(store, "T1")
    assert len(rows) == 6
    assert {r["queueId"] for r in rows} == {consistent_hash("order-7", 4)}
    assert {props(r)["__SHARDINGKEY"] for r in rows} == {"order-7"}
    assert [props(r)["UNIQ_KEY"][-1] for r in sorted(rows, key=lambda r: r["queueOffset"])] == list("012345")


def test_a_timed_send_waits_in_the_timer_with_its_delivery_time(broker: Broker, store: rmqlog.MessageStore) -> None:
    due = NOW + 60_000
    r = send(broker, message(kind=pb.DELAY, deliver_ms=due))
    assert r.status.code == Code.OK, r
    assert stored(store, "T1") == []  # not delivered before its time
    (row,) = stored(store, "rmq_sys_wheel_timer")
    p = props(row)
    assert (
        p["TIMER_DELIVER_MS"] == str(due)
        and p["REAL_TOPIC"] == "T1"
        and p["UNIQ_KEY"] == "0A0000010000000000000000000000A1"
    )


def test_a_transactional_send_is_a_half_message_committed_or_rolled_back(
    broker: Broker, store: rmqlog.MessageStore
) -> None:
    async def body(c: Client, _: Any) -> Any:
        a = await c.call(
            "SendMessage", svc.SendMessageRequest(messages=[message(msg_id="A" * 32, kind=pb.TRANSACTION)])
        )
        b = await c.call(
            "SendMessage", svc.SendMessageRequest(messages=[message(msg_id="B" * 32, kind=pb.TRANSACTION)])
        )
        assert stored(store, "T1") == []  # halves only
        ends = []
        for sent, resolution in ((a, pb.COMMIT), (b, pb.ROLLBACK)):
            (e,) = sent.entries
            ends.append(
                await c.call(
                    "EndTransaction",
                    svc.EndTransactionRequest(
                        topic=pb.Resource(name="T1"),
                        message_id=e.message_id,
                        transaction_id=e.transaction_id,
                        resolution=resolution,
                        source=pb.SOURCE_CLIENT,
                    ),
                )
            )
        again = await c.call(
            "EndTransaction",
            svc.EndTransactionRequest(
                topic=pb.Resource(name="T1"),
                message_id="B" * 32,
                transaction_id=b.entries[0].transaction_id,
                resolution=pb.COMMIT,
            ),
        )
        return a, ends, again

    a, ends, again = serve(broker, body)
    assert a.status.code == Code.OK and len(a.entries[0].transaction_id) == 32
    assert [e.status.code for e in ends] == [Code.OK, Code.OK]
    assert again.status.code == Code.INTERNAL_SERVER_ERROR  # a commit after the rollback: refused
    assert len(stored(store, HALF_TOPIC)) == 2
    (row,) = stored(store, "T1")
    assert props(row)["UNIQ_KEY"] == "A" * 32


def test_end_transaction_with_an_id_this_broker_did_not_issue(broker: Broker, store: rmqlog.MessageStore) -> None:
    async def body(c: Client, _: Any) -> Any:
        return (
            await c.call(
                "EndTransaction",
                svc.EndTransactionRequest(
                    topic=pb.Resource(name="T1"), message_id="X", transaction_id="not-ours", resolution=pb.COMMIT
                ),
            ),
            await c.call(
                "EndTransaction",
                svc.EndTransactionRequest(
                    topic=pb.Resource(name="T1"),
                    message_id="X",
                    transaction_id=transaction_id(123456, 9),
                    resolution=pb.COMMIT,
                ),
            ),
        )

    bad, nowhere = serve(broker, body)
    assert bad.status.code == Code.INVALID_TRANSACTION_ID
    assert nowhere.status.code != Code.OK  # no half there: the end path refuses it
    assert stored(store, "T1") == []


# ---------------------------------------------------------------------------- failure paths


@pytest.mark.parametrize(
    ("method", "request_"),
    [
        ("UpdateOffset", svc.UpdateOffsetRequest()),
        ("GetOffset", svc.GetOffsetRequest()),
        ("QueryOffset", svc.QueryOffsetRequest()),
        ("RecallMessage", svc.RecallMessageRequest()),
        ("SyncLiteSubscription", svc.SyncLiteSubscriptionRequest()),
        ("PullMessage", svc.PullMessageRequest()),
    ],
)
def test_every_other_call_answers_unsupported_at_once(broker: Broker, method: str, request_: Any) -> None:
    async def body(c: Client, _: Any) -> Any:
        return await c.call(method, request_, timeout=5.0)

    r = serve(broker, body)
    if isinstance(r, list):  # a server stream: one response with the status, then its end
        assert len(r) == 1
        r = r[0]
    assert r.status.code == Code.UNSUPPORTED and method in r.status.message


def test_a_send_to_an_unknown_topic_is_topic_not_found_and_creates_nothing(
    broker: Broker, store: rmqlog.MessageStore
) -> None:
    r = send(broker, message(topic="Unknown"))
    assert r.status.code == Code.TOPIC_NOT_FOUND
    assert broker.topics.get("Unknown") is None and stored(store, "Unknown") == []


@pytest.mark.parametrize(
    ("msg", "code"),
    [
        (message(body=b""), Code.MESSAGE_BODY_EMPTY),
        (message(msg_id=""), Code.ILLEGAL_MESSAGE_ID),
        (message(user={"UNIQ_KEY": "x"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (message(user={"TIMER_DELIVER_MS": "1"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (message(user={"a": "b\x01c"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (message(user={"a\x02": "b"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (message(user={f"k{i}": "v" for i in range(129)}), Code.MESSAGE_PROPERTIES_TOO_LARGE),
        (message(user={"big": "v" * 20_000}), Code.MESSAGE_PROPERTIES_TOO_LARGE),
        (message(tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
        (message(tag="  "), Code.ILLEGAL_MESSAGE_TAG),
        (message(keys=("ok", " ")), Code.ILLEGAL_MESSAGE_KEY),
        (message(kind=pb.FIFO, group=""), Code.ILLEGAL_MESSAGE_GROUP),
        (message(kind=pb.FIFO, group="g" * 65), Code.ILLEGAL_MESSAGE_GROUP),
        (message(kind=pb.TRANSACTION, deliver_ms=NOW + 1000), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (message(topic="bad topic"), Code.ILLEGAL_TOPIC),
    ],
)
def test_a_bad_message_is_refused_with_its_code_and_nothing_is_stored(
    broker: Broker, store: rmqlog.MessageStore, msg: pb.Message, code: int
) -> None:
    r = send(broker, msg)
    assert r.status.code == code, r
    assert stored(store, "T1") == []


def test_a_body_past_max_message_size_is_too_large(broker: Broker, store: rmqlog.MessageStore) -> None:
    big = b"x" * (broker.config.max_message_size + 1)
    r = send(broker, message(body=big))
    assert r.status.code == Code.MESSAGE_BODY_TOO_LARGE
    assert str(broker.config.max_message_size) in r.status.message
    assert stored(store, "T1") == []


def test_a_request_with_one_good_and_one_bad_message_is_multiple_results(
    broker: Broker, store: rmqlog.MessageStore
) -> None:
    r = send(broker, message(), message(msg_id=""))
    assert r.status.code == Code.MULTIPLE_RESULTS
    assert [e.status.code for e in r.entries] == [Code.OK, Code.ILLEGAL_MESSAGE_ID]
    assert len(stored(store, "T1")) == 1


def test_empty_and_mixed_topic_requests_are_corrupted(broker: Broker, store: rmqlog.MessageStore) -> None:
    assert send(broker).status.code == Code.MESSAGE_CORRUPTED
    broker.topics.update(rmqlog.TopicConfig("T2", 4, 4))
    r = send(broker, message(), message(topic="T2"))
    assert [e.status.code for e in r.entries] == [Code.OK, Code.MESSAGE_CORRUPTED]


def test_a_topic_without_write_permission_is_forbidden(broker: Broker, store: rmqlog.MessageStore) -> None:
    broker.topics.update(rmqlog.TopicConfig("RO", 4, 4, perm=4))
    r = send(broker, message(topic="RO"))
    assert r.status.code == Code.FORBIDDEN and "forbidden" in r.status.message
    assert stored(store, "RO") == []


def test_a_stopping_broker_refuses_sends(broker: Broker, store: rmqlog.MessageStore) -> None:
    broker.begin_stop()
    r = send(broker, message())
    assert r.status.code == Code.INTERNAL_SERVER_ERROR and r.status.message
    assert stored(store, "T1") == []


def test_acl_enabled_without_its_files_loaded_refuses_every_call(broker: Broker, store: rmqlog.MessageStore) -> None:
    broker.config = broker.config.replace(acl_enable=True)

    async def body(c: Client, _: Any) -> Any:
        return (
            await c.call("QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name="T1"))),
            await c.call("SendMessage", svc.SendMessageRequest(messages=[message()])),
            await c.telemetry([svc.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER))]),
        )

    route, sent, tele = serve(broker, body)
    assert route.status.code == sent.status.code == tele[0].status.code == Code.UNAUTHORIZED
    assert stored(store, "T1") == []


def test_a_handler_that_fails_is_answered_internal_server_error(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(topic: str) -> None:
        raise RuntimeError("topic table unreadable")

    monkeypatch.setattr(broker.topics, "get", boom)

    async def body(c: Client, _: Any) -> Any:
        return await c.call("QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name="T1")))

    r = serve(broker, body)
    assert r.status.code == Code.INTERNAL_SERVER_ERROR and "topic table unreadable" in r.status.message


# ------------------------------------------------------------------------------ helpers


def test_java_string_hash_and_consistent_hash() -> None:
    assert [java_string_hash(s) for s in ("", "abc", "hello", "é")] == [0, 96354, 99162322, 233]
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # (Java's famous MIN_VALUE hash)
    for n in (1, 2, 4, 8, 16):
        buckets = [consistent_hash(f"group-{i}", n) for i in range(200)]
        assert all(0 <= b < n for b in buckets) and buckets == [consistent_hash(f"group-{i}", n) for i in range(200)]
    # consistency: growing from 4 to 5 buckets moves a key only to the new bucket
    for i in range(200):
        before, after = consistent_hash(f"group-{i}", 4), consistent_hash(f"group-{i}", 5)
        assert after in (before, 4)


def test_an_open_telemetry_stream_completes_when_the_broker_begins_to_stop(broker: Broker) -> None:
    async def body(c: Client, _: Any) -> Any:
        call = c.channel.stream_stream(
            "/apache.rocketmq.v2.MessagingService/Telemetry",
            request_serializer=svc.TelemetryCommand.SerializeToString,
            response_deserializer=svc.TelemetryCommand.FromString,
        )(timeout=30)
        await call.write(svc.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER)))
        first = await call.read()
        broker.begin_stop()  # (the process: SIGTERM)
        rest = await call.read()
        return first, rest, await call.code()

    first, rest, code = serve(broker, body)
    assert first.status.code == Code.OK
    assert rest is grpc.aio.EOF and code == grpc.StatusCode.OK  # completed by the server, not cut


def test_a_telemetry_handler_cancelled_while_waiting_leaves_no_unretrieved_task_error(broker: Broker) -> None:
    """grpc cancels the handler when its client goes away; the read it was waiting on ends
    later (StopAsyncIteration): that must not surface as "Task exception was never retrieved"
    in the broker's log."""
    import asyncio
    import contextlib
    import gc

    from rmqnet.broker.grpc_service import MessagingService

    errors: list[dict[str, Any]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, ctx: errors.append(ctx))
        gate = asyncio.Event()

        async def requests() -> Any:
            yield svc.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER))
            await gate.wait()  # then the client's side ends

        stream = MessagingService(broker, "127.0.0.1", 1).telemetry(requests(), None)
        first = await anext(stream)
        assert first.status.code == Code.OK
        waiting = asyncio.ensure_future(anext(stream))
        for _ in range(3):
            await asyncio.sleep(0)  # (loop turns, not time: the handler reaches its wait)
        waiting.cancel()  # grpc cancels the handler
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        gate.set()
        for _ in range(5):
            await asyncio.sleep(0)
        await stream.aclose()
        gc.collect()
        await asyncio.sleep(0)

    asyncio.run(main())
    gc.collect()
    assert [e.get("message") for e in errors] == []


@pytest.mark.parametrize("method", ["SendMessage", "QueryRoute", "AckMessage", "ReceiveMessage"])
def test_a_corrupt_request_is_bad_request_without_a_traceback(
    broker: Broker, store: rmqlog.MessageStore, method: str, caplog: pytest.LogCaptureFixture
) -> None:
    from rmqnet.broker.grpc_server import SERVICE

    response = message_factory.GetMessageClass(SERVICE.methods_by_name[method].output_type)

    async def body(c: Client, _: Any) -> Any:
        path = f"/apache.rocketmq.v2.MessagingService/{method}"
        if SERVICE.methods_by_name[method].server_streaming:
            return [response.FromString(r) async for r in c.channel.unary_stream(path)(b"\xff\xff\xff", timeout=10)]
        return response.FromString(await c.channel.unary_unary(path)(b"\xff\xff\xff", timeout=10))

    with caplog.at_level("DEBUG"):
        r = serve(broker, body)
    if isinstance(r, list):
        (r,) = r
    assert r.status.code == Code.BAD_REQUEST and "not a valid" in r.status.message
    assert not [rec for rec in caplog.records if rec.exc_info], "a traceback in the broker's log"
    assert stored(store, "T1") == []


def test_a_corrupt_telemetry_command_ends_the_stream_with_bad_request(broker: Broker) -> None:
    async def body(c: Client, _: Any) -> Any:
        call = c.channel.stream_stream("/apache.rocketmq.v2.MessagingService/Telemetry")(timeout=10)
        await call.write(b"\xff\xff\xff")
        first = svc.TelemetryCommand.FromString(await call.read())
        return first, await call.read()

    first, end = serve(broker, body)
    assert first.status.code == Code.BAD_REQUEST and end is grpc.aio.EOF


def test_a_slave_offers_its_queues_for_reading_and_refuses_sends(store: rmqlog.MessageStore) -> None:
    slave = make_broker(store, clock=rmqlog.ManualClock(NOW), broker_role="SLAVE", broker_id=1)
    slave.topics.update(rmqlog.TopicConfig("T1", 4, 4))

    async def body(c: Client, _: Any) -> Any:
        return (
            await c.call("QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name="T1"))),
            await c.call("SendMessage", svc.SendMessageRequest(messages=[message()])),
        )

    route, sent = serve(slave, body)
    assert {q.permission for q in route.message_queues} == {pb.READ}
    assert {q.broker.id for q in route.message_queues} == {1}
    assert sent.status.code == Code.INTERNAL_SERVER_ERROR and "slave" in sent.status.message.lower()
    assert stored(store, "T1") == []


def test_an_orphaned_transaction_is_recovered_over_the_producers_telemetry_stream(
    broker: Broker, store: rmqlog.MessageStore
) -> None:
    """A producer's Telemetry stream is its connection for the check-back: an open half older
    than transactionTimeOut comes back on it as RecoverOrphanedTransactionCommand (the message
    with its id, tag, body and an MD5 digest; a transaction id of the renewed half), and the
    producer's EndTransaction from the check commits it once."""
    import hashlib

    async def body(c: Client, _: Any) -> Any:
        call = c.channel.stream_stream(
            "/apache.rocketmq.v2.MessagingService/Telemetry",
            request_serializer=svc.TelemetryCommand.SerializeToString,
            response_deserializer=svc.TelemetryCommand.FromString,
        )(timeout=30, metadata=(("x-mq-client-id", "client-1"),))
        await call.write(
            svc.TelemetryCommand(
                settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T1")]))
            )
        )
        assert (await call.read()).status.code == Code.OK
        assert set(broker.consumers.producer_groups) == {"T1"}
        sent = await c.call(
            "SendMessage",
            svc.SendMessageRequest(messages=[message(msg_id="C" * 32, kind=pb.TRANSACTION, user={"color": "blue"})]),
        )
        assert sent.status.code == Code.OK
        store.dispatch()
        checked = broker.transaction_check.run_once(NOW + 61_000)  # (the injected clock: past transactionTimeOut)
        recover = (await call.read()).recover_orphaned_transaction_command
        end = await c.call(
            "EndTransaction",
            svc.EndTransactionRequest(
                topic=recover.message.topic,
                message_id=recover.message.system_properties.message_id,
                transaction_id=recover.transaction_id,
                resolution=pb.COMMIT,
                source=pb.SOURCE_SERVER_CHECK,
            ),
        )
        await call.done_writing()
        rest = [r async for r in _drain(call)]
        return checked, recover, sent.entries[0].transaction_id, end, rest

    checked, recover, first_id, end, rest = serve(broker, body)
    assert checked == 1 and rest == []
    m = recover.message
    assert (m.topic.name, m.body, m.system_properties.message_id, m.system_properties.tag) == (
        "T1",
        b"hello",
        "C" * 32,
        "TagA",
    )
    assert m.system_properties.message_type == pb.TRANSACTION and dict(m.user_properties) == {"color": "blue"}
    assert m.system_properties.body_digest.checksum == hashlib.md5(b"hello").hexdigest().upper()
    assert recover.transaction_id != first_id  # the renewed half's offsets
    assert end.status.code == Code.OK
    (row,) = stored(store, "T1")
    assert props(row)["UNIQ_KEY"] == "C" * 32
    assert broker.consumers.producer_groups == {}  # the stream's end: the producer left its group


async def _drain(call: Any) -> Any:
    while (r := await call.read()) is not grpc.aio.EOF:
        yield r


def test_a_producers_settings_register_only_known_topics_within_the_caps(broker: Broker) -> None:
    from rmqnet.broker.grpc_producers import GrpcProducers, TelemetryPeer

    for t in ("T2", "T3", "T4"):
        broker.topics.update(rmqlog.TopicConfig(t, 1, 1))
    producers = GrpcProducers(broker)
    settings = pb.Settings(
        client_type=pb.PRODUCER,
        publishing=pb.Publishing(topics=[pb.Resource(name=n) for n in ("T1", "Unknown", "T2", "T3", "T4")]),
    )
    broker.config = broker.config.replace(heartbeat_max_group_nums=3)
    producers.register("c1", "PYTHON", TelemetryPeer("127.0.0.1:1"), settings)
    assert set(broker.consumers.producer_groups) == {"T1", "T2", "T3"}
    broker.config = broker.config.replace(client_group_max_nums=3)  # (three groups held: no new one)
    c2 = TelemetryPeer("127.0.0.1:2")
    producers.register(
        "c2",
        "PYTHON",
        c2,
        pb.Settings(
            client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=n) for n in ("T4", "T1")])
        ),
    )
    assert set(broker.consumers.producer_groups) == {"T1", "T2", "T3"}
    assert len(broker.consumers.producer_groups["T1"]) == 2
    producers.closed(c2)
    assert len(broker.consumers.producer_groups["T1"]) == 1 and len(producers) == 1


def test_a_sync_flush_past_its_timeout_is_master_persistence_timeout(tmp_path: Path) -> None:
    """Under SYNC_FLUSH a gRPC send is answered after the group commit, as a remoting send; one
    whose flush is late gets the proxy's code for FLUSH_DISK_TIMEOUT."""
    import threading

    from wire.broker_helpers import RecordingStore

    s = rmqlog.MessageStore.open(tmp_path / "store", small_store_config())
    try:
        rec = RecordingStore(s)
        b = make_broker(rec, store_config=small_store_config(flush_disk_type=rmqlog.SYNC_FLUSH), sync_flush_timeout=1)
        b.topics.update(rmqlog.TopicConfig("T1", 4, 4))
        gate = rec.flush_gate = threading.Event()

        async def body(c: Client, _: Any) -> Any:
            try:
                return await c.call("SendMessage", svc.SendMessageRequest(messages=[message()]))
            finally:
                gate.set()

        r = serve(b, body)
    finally:
        s.close()
    assert r.status.code == Code.MASTER_PERSISTENCE_TIMEOUT and len(rec.puts) == 1
