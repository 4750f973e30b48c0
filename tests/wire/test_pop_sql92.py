"""SQL92 property filters on POP (RocketMQ 5's ``PopMessageProcessor`` with an
``ExpressionMessageFilter`` built from ``expType``/``exp``; the proxy's ``ReceiveMessageActivity``
passing a gRPC ``FilterExpression`` of type SQL through): over POP_MESSAGE (200050) and gRPC
ReceiveMessage, the matching messages handed out, the others skipped with the group's position
moved past them (never handed out, never revived), redeliveries filtered as their originals,
refused with ``enablePropertyFilter=false``, expressions that do not parse refused."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker import pull
from rmqnet.broker.broker import Broker
from rmqnet.broker.pop import AckStatus
from rmqnet.broker.pop_handle import ExtraInfo
from rmqnet.grpc.convert import Code
from rmqnet.grpc.v2 import definition_pb2 as pb
from rmqnet.grpc.v2 import service_pb2 as svc
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from wire.broker_helpers import FakePeer, make_broker, run
from wire.grpc_helpers import Client, serve

T0 = 1_700_000_000_000
INVISIBLE = 20_000


@pytest.fixture
def clock() -> rmqlog.ManualClock:
    return rmqlog.ManualClock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: rmqlog.ManualClock) -> Iterator[rmqlog.MessageStore]:
    with rmqlog.MessageStore.open(
        tmp_path / "store", small_store_config(store_host="127.0.0.1:10911"), clock=clock
    ) as s:
        s.create_topic("T", 1)
        yield s


@pytest.fixture
def broker(store: rmqlog.MessageStore, clock: rmqlog.ManualClock) -> Broker:
    return make_broker(store, clock=clock, broker_name="bk", enable_property_filter=True)


def put(store: rmqlog.MessageStore, *numbers: int) -> None:
    """One message per number on queue 0: body ``m<i>``, property ``i``; ``color=red`` on the even."""
    props = [f"TAGS\x01TagA\x02i\x01{i}\x02" + ("color\x01red\x02" if i % 2 == 0 else "") for i in numbers]
    n = len(numbers)
    store.wire.put_wire(
        pa.table(
            {"topic": ["T"] * n, "queueId": [0] * n, "body": [f"m{i}".encode() for i in numbers], "properties": props}
        ),
        dispatch=True,
    )
    store.dispatch()


def pop_req(exp: str, exp_type: str = "SQL92", *, poll: int = 0) -> RemotingCommand:
    fields = {
        "consumerGroup": "G",
        "topic": "T",
        "queueId": "-1",
        "maxMsgNums": "32",
        "invisibleTime": str(INVISIBLE),
        "pollTime": str(poll),
        "bornTime": "0",
        "initMode": "0",
        "expType": exp_type,
        "exp": exp,
        "order": "false",
    }
    return RemotingCommand(RequestCode.POP_MESSAGE, 1, 0, None, fields, b"", "JAVA")


def one(broker: Broker, req: RemotingCommand) -> RemotingCommand:
    (res,) = run(broker, FakePeer(), req)
    assert res is not None
    return res


def bodies(res: RemotingCommand) -> list[bytes]:
    assert res.code == ResponseCode.SUCCESS, (res.code, res.remark)
    return [bytes(b) for b in rmqlog.decode_records(res.body_bytes()).column("body").to_pylist()]


def popped(broker: Broker, exp: str, exp_type: str = "SQL92") -> list[bytes]:
    res = one(broker, pop_req(exp, exp_type))
    return [] if res.code == ResponseCode.POLLING_TIMEOUT else bodies(res)


# ------------------------------------------------------------------ remoting
def test_a_sql92_pop_hands_out_the_matching_and_moves_the_position_past_the_others(broker: Broker) -> None:
    put(broker.store, *range(10))
    assert popped(broker, "i >= 3 AND i < 6") == [b"m3", b"m4", b"m5"]
    # the group's position is past all ten: a pop of everything finds nothing
    assert broker.consumer_offsets.query("G", "T", 0) == 10
    assert popped(broker, "*", "TAG") == []
    # only the three handed out are in flight, and only they come back
    assert broker.pop.inflight("G") == 3
    assert broker.pop.run_once(T0 + INVISIBLE) == 3


def test_a_mixed_batch_takes_the_matching_of_each_window(broker: Broker) -> None:
    put(broker.store, *range(6))
    assert popped(broker, "color = 'red'") == [b"m0", b"m2", b"m4"]
    put(broker.store, 6, 7)
    assert popped(broker, "color = 'red'") == [b"m6"]
    assert popped(broker, "color = 'red'") == []
    assert broker.consumer_offsets.query("G", "T", 0) == 8


def test_a_pop_with_no_match_answers_nothing_moves_the_position_and_revives_nothing(broker: Broker) -> None:
    put(broker.store, 1, 3, 5)
    res = one(broker, pop_req("color = 'red'"))
    assert (res.code, res.remark) == (ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE")
    assert broker.consumer_offsets.query("G", "T", 0) == 3
    assert broker.pop.inflight("G") == 0 and broker.pop.run_once(T0 + INVISIBLE) == 0
    assert popped(broker, "*", "TAG") == []


def test_an_empty_sql92_expression_takes_everything_as_javas(broker: Broker) -> None:
    put(broker.store, 1, 2)
    assert popped(broker, "") == [b"m1", b"m2"]


def test_a_redelivery_is_filtered_by_the_same_expression(broker: Broker, clock: rmqlog.ManualClock) -> None:
    """Java reads the POP retry topic with the pop's one ``ExpressionMessageFilter``: a retried
    record keeps its properties, so it matches as its original did; an expression it does not
    match skips it in the retry topic too (its position moved past)."""
    put(broker.store, 1, 2)
    assert popped(broker, "i = 1") == [b"m1"]
    assert broker.pop.run_once(T0 + INVISIBLE) == 1
    broker.store.dispatch()
    clock.set(T0 + INVISIBLE + 1)
    res = one(broker, pop_req("i = 1"))
    [m] = rmqlog.decode_records(res.body_bytes()).to_pylist()
    assert (m["topic"], m["reconsumeTimes"], bytes(m["body"])) == ("%RETRY%G_T", 1, b"m1")
    assert broker.pop.run_once(T0 + 2 * INVISIBLE + 1) == 1
    broker.store.dispatch()
    clock.set(T0 + 2 * INVISIBLE + 2)
    assert popped(broker, "i = 2") == []  # skipped in the retry topic
    assert broker.consumer_offsets.query("G", "%RETRY%G_T", 0) == 2
    assert popped(broker, "i = 1") == []


def test_an_orderly_sql92_pop_hands_out_the_matching_in_order_one_batch_at_a_time(broker: Broker) -> None:
    put(broker.store, *range(8))

    def pop(now: int) -> list[dict[str, Any]]:
        return broker.pop.pop("G", "T", 0, 2, INVISIBLE, now, order=True, tags="color = 'red'", exp_type="SQL92").rows()

    first = pop(T0)
    assert [bytes(r["body"]) for r in first] == [b"m0", b"m2"]
    assert pop(T0 + 1) == []  # the batch is in flight: the queue is blocked
    again = pop(T0 + INVISIBLE + 1)  # not acked: the same, in order, attempt 2
    assert [(bytes(r["body"]), r["reconsumeTimes"]) for r in again] == [(b"m0", 1), (b"m2", 1)]
    handles = [ExtraInfo.parse(r["receiptHandle"]) for r in again]
    assert broker.pop.ack_many("G", "T", handles, T0 + INVISIBLE + 2) == [AckStatus.OK, AckStatus.OK]
    assert [bytes(r["body"]) for r in pop(T0 + INVISIBLE + 3)] == [b"m4", b"m6"]


def test_a_held_sql92_pop_is_answered_by_a_matching_arrival_only(broker: Broker) -> None:
    async def main() -> RemotingCommand | None:
        fut = broker.table.process(broker, FakePeer(), pop_req("color = 'red'", poll=15_000))
        assert asyncio.isfuture(fut)
        put(broker.store, 1)  # does not match: its wake-up (the loop's next turn) re-runs the pop, held again
        for _ in range(3):
            await asyncio.sleep(0)
        assert not fut.done() and len(broker.pop_holds) == 1
        put(broker.store, 2)
        return await asyncio.wait_for(fut, 5)

    res = asyncio.run(main())
    assert res is not None and bodies(res) == [b"m2"]
    assert broker.consumer_offsets.query("G", "T", 0) == 2


def test_sql92_pops_use_the_pulls_compiled_expression_cache(broker: Broker) -> None:
    put(broker.store, 1, 2)
    before = pull.compiled.cache_info()
    popped(broker, "i > 100 OR color = 'red'")
    popped(broker, "i > 100 OR color = 'red'")
    after = pull.compiled.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 1)


@pytest.mark.parametrize(
    ("exp", "exp_type", "code", "says"),
    [
        ("i >", "SQL92", ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"),
        ("i = 'a", "SQL92", ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"),
        ("a = 1", "XPATH", ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"),
        ("(" * 200_000 + "a = 1", "SQL92", ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse"),
        ("a = " + "'x" * 100_000, "SQL92", ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse"),
    ],
    ids=["incomplete", "unterminated", "other-type", "200k-parens", "100k-quotes"],
)
def test_an_expression_that_does_not_parse_is_refused_and_changes_nothing(
    broker: Broker, exp: str, exp_type: str, code: int, says: str
) -> None:
    put(broker.store, 1, 2)
    res = one(broker, pop_req(exp, exp_type))
    assert res.code == code and says in (res.remark or ""), (res.code, res.remark)
    assert broker.pop.inflight() == 0 and broker.consumer_offsets.query("G", "T", 0) < 0
    assert popped(broker, "*", "TAG") == [b"m1", b"m2"]


def test_sql92_on_a_broker_without_enable_property_filter_is_refused(
    store: rmqlog.MessageStore, clock: rmqlog.ManualClock
) -> None:
    broker = make_broker(store, clock=clock, broker_name="bk")
    put(store, 1, 2)
    res = one(broker, pop_req("i = 1"))
    assert (res.code, res.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "The broker does not support consumer to filter message by SQL92",
    )
    assert broker.pop.inflight() == 0 and broker.consumer_offsets.query("G", "T", 0) < 0
    # a malformed expression is a parse failure first (the pull's order)
    assert one(broker, pop_req("i >")).code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert popped(broker, "*", "TAG") == [b"m1", b"m2"]


# ---------------------------------------------------------------------- gRPC
def receive_req(expression: str, kind: int = pb.SQL) -> svc.ReceiveMessageRequest:
    req = svc.ReceiveMessageRequest(
        group=pb.Resource(name="G"),
        batch_size=32,
        message_queue=pb.MessageQueue(topic=pb.Resource(name="T"), id=0),
        filter_expression=pb.FilterExpression(type=kind, expression=expression),
    )  # type: ignore[arg-type]
    req.invisible_duration.FromMilliseconds(INVISIBLE)
    req.long_polling_timeout.FromMilliseconds(0)
    return req


def receive(broker: Broker, req: svc.ReceiveMessageRequest) -> tuple[int, str, list[pb.Message]]:
    async def body(c: Client, _: Any) -> Any:
        return await c.call("ReceiveMessage", req, timeout=10.0)

    out = serve(broker, body)
    assert out[-1].WhichOneof("content") == "delivery_timestamp"
    return out[0].status.code, out[0].status.message, [r.message for r in out if r.WhichOneof("content") == "message"]


def test_a_grpc_sql_filter_receives_the_matching_and_skips_the_others(broker: Broker) -> None:
    put(broker.store, *range(6))
    code, _, got = receive(broker, receive_req("color = 'red' AND i > 0"))
    assert code == Code.OK and [m.body for m in got] == [b"m2", b"m4"]
    assert {m.user_properties["color"] for m in got} == {"red"}
    code, _, got = receive(broker, receive_req("i IS NOT NULL"))
    assert code == Code.MESSAGE_NOT_FOUND and got == []  # the position is past all six
    assert broker.pop.inflight("G") == 2


@pytest.mark.parametrize(
    ("expression", "code", "says"),
    [
        ("i >", Code.ILLEGAL_FILTER_EXPRESSION, "parse"),
        ("", Code.ILLEGAL_FILTER_EXPRESSION, "Expression can't be null"),
    ],
)
def test_a_grpc_sql_filter_that_does_not_parse_is_illegal_filter_expression(
    broker: Broker, expression: str, code: int, says: str
) -> None:
    put(broker.store, 1)
    got = receive(broker, receive_req(expression))
    assert got[0] == code and says in got[1] and got[2] == []
    assert broker.pop.inflight() == 0


def test_a_grpc_sql_filter_without_enable_property_filter_is_unsupported(
    store: rmqlog.MessageStore, clock: rmqlog.ManualClock
) -> None:
    broker = make_broker(store, clock=clock, broker_name="bk")
    put(store, 1)
    code, message, got = receive(broker, receive_req("i = 1"))
    assert code == Code.UNSUPPORTED and "SQL92" in message and got == []
    assert broker.pop.inflight() == 0
