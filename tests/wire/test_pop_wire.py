"""POP_MESSAGE (200050), ACK_MESSAGE (200051), CHANGE_MESSAGE_INVISIBLETIME (200053) on the wire
(rmqnet.broker.pop_remoting): requests built from RocketMQ 5's header field names
(``PopMessageRequestHeader``, ``AckMessageRequestHeader``, ``ChangeInvisibleTimeRequestHeader``,
extFields as strings as Java sends them), the receipt handles built from the answer as
``MQClientAPIImpl.processPopResponse`` builds them, failures with Java's codes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker.broker import Broker
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from wire.broker_helpers import FakePeer, make_broker, run

T0 = 1_700_000_000_000
INVISIBLE = 20_000


@pytest.fixture
def clock() -> rmqlog.ManualClock:
    return rmqlog.ManualClock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: rmqlog.ManualClock) -> Iterator[rmqlog.MessageStore]:
    with rmqlog.MessageStore.open(tmp_path / "store", small_store_config(), clock=clock) as s:
        s.create_topic("T", 2)
        yield s


@pytest.fixture
def broker(store: rmqlog.MessageStore, clock: rmqlog.ManualClock) -> Broker:
    return make_broker(store, clock=clock, broker_name="bk")


def put(store: rmqlog.MessageStore, *bodies: bytes, queue: int = 0) -> None:
    n = len(bodies)
    store.wire.put_wire(
        pa.table(
            {"topic": ["T"] * n, "queueId": [queue] * n, "body": list(bodies), "properties": ["TAGS\x01TagA\x02"] * n}
        ),
        dispatch=True,
    )
    store.dispatch()


def pop_req(
    queue: int = -1, n: int = 32, *, poll: int = 0, born: int = T0, order: bool = False, **ext: Any
) -> RemotingCommand:
    fields = {
        "consumerGroup": "G",
        "topic": "T",
        "queueId": str(queue),
        "maxMsgNums": str(n),
        "invisibleTime": str(INVISIBLE),
        "pollTime": str(poll),
        "bornTime": str(born),
        "initMode": "0",
        "expType": "TAG",
        "exp": "*",
        "order": "true" if order else "false",
    }
    return RemotingCommand(RequestCode.POP_MESSAGE, 1, 0, None, {**fields, **ext}, b"", "JAVA")


def ack_req(
    topic: str, queue: int, extra: str, offset: int, *, code: int = RequestCode.ACK_MESSAGE, **ext: Any
) -> RemotingCommand:
    fields = {"consumerGroup": "G", "topic": topic, "queueId": str(queue), "extraInfo": extra, "offset": str(offset)}
    return RemotingCommand(code, 2, 0, None, {**fields, **ext}, b"", "JAVA")


def one(broker: Broker, req: RemotingCommand) -> RemotingCommand:
    (res,) = run(broker, FakePeer(), req)
    assert res is not None
    return res


def client_messages(res: RemotingCommand) -> list[dict[str, Any]]:
    """What ``MQClientAPIImpl.processPopResponse`` makes of a FOUND answer: the messages, each
    with its ``POP_CK`` (``ExtraInfoUtil.buildExtraInfo`` from ``startOffsetInfo``)."""
    ext = res.ext_fields
    starts = {}
    for entry in ext["startOffsetInfo"].split(";"):
        mark, qid, start = entry.split(" ")
        starts[f"{mark}@{qid}"] = int(start)
    msgs = rmqlog.decode_records(res.body_bytes()).to_pylist()
    for m in msgs:
        mark = "1" if m["topic"].startswith("%RETRY%") else "0"
        start = starts[f"{mark}@{m['queueId']}"]
        m["POP_CK"] = (
            f"{start} {ext['popTime']} {ext['invisibleTime']} {ext['reviveQid']} {mark} bk "
            f"{m['queueId']} {m['queueOffset']}"
        )
    return msgs


def test_a_pop_answers_the_records_and_the_header_a_java_client_builds_handles_from(broker: Broker) -> None:
    put(broker.store, b"a", b"b")
    res = one(broker, pop_req(0))
    assert (res.code, res.remark) == (ResponseCode.SUCCESS, "FOUND")
    ext = res.ext_fields
    assert {k: str(v) for k, v in ext.items()} == {
        "popTime": str(T0),
        "invisibleTime": str(INVISIBLE),
        "reviveQid": "0",
        "restNum": "0",
        "startOffsetInfo": "0 0 0",
        "msgOffsetInfo": "0 0 0,1",
    }
    msgs = client_messages(res)
    assert [m["body"] for m in msgs] == [b"a", b"b"]
    for m in msgs:  # acked with the header Java's consumer sends
        assert one(broker, ack_req("T", m["queueId"], m["POP_CK"], m["queueOffset"])).code == ResponseCode.SUCCESS
    assert broker.pop.inflight() == 0 and broker.pop.run_once(T0 + INVISIBLE) == 0


def test_a_retried_message_comes_from_the_retry_topic_and_is_acked_there(broker: Broker) -> None:
    put(broker.store, b"a")
    one(broker, pop_req())
    assert broker.pop.run_once(T0 + INVISIBLE) == 1
    broker.store.dispatch()
    res = one(broker, pop_req())
    [m] = client_messages(res)
    assert (m["topic"], m["reconsumeTimes"], m["POP_CK"].split(" ")[4]) == ("%RETRY%G_T", 1, "1")
    assert res.ext_fields["startOffsetInfo"] == "1 0 0"
    assert one(broker, ack_req(m["topic"], 0, m["POP_CK"], m["queueOffset"])).code == ResponseCode.SUCCESS
    assert broker.pop.inflight() == 0


def test_change_invisible_answers_the_new_handle_and_the_old_one_changes_nothing_more(broker: Broker) -> None:
    put(broker.store, b"a")
    [m] = client_messages(one(broker, pop_req()))
    broker.clock.advance(1000)  # type: ignore[attr-defined]
    res = one(
        broker, ack_req("T", 0, m["POP_CK"], 0, code=RequestCode.CHANGE_MESSAGE_INVISIBLETIME, invisibleTime="60000")
    )
    assert res.code == ResponseCode.SUCCESS
    assert {k: str(v) for k, v in res.ext_fields.items()} == {
        "popTime": str(T0 + 1000),
        "invisibleTime": "60000",
        "reviveQid": "0",
    }
    again = one(
        broker, ack_req("T", 0, m["POP_CK"], 0, code=RequestCode.CHANGE_MESSAGE_INVISIBLETIME, invisibleTime="60000")
    )
    assert again.code == ResponseCode.NO_MESSAGE
    assert broker.pop.run_once(T0 + INVISIBLE + 1) == 0  # the new handle holds it
    new = f"0 {T0 + 1000} 60000 0 0 bk 0 0"
    assert one(broker, ack_req("T", 0, new, 0)).code == ResponseCode.SUCCESS
    assert broker.pop.inflight() == 0


def test_an_orderly_pop_answers_its_order_count_info(broker: Broker) -> None:
    put(broker.store, b"1", b"2")
    res = one(broker, pop_req(0, 1, order=True))
    assert res.ext_fields["reviveQid"] == 999 and res.ext_fields["orderCountInfo"] == "0 qo0%0 0"
    assert one(broker, pop_req(0, 1, order=True)).code == ResponseCode.POLLING_TIMEOUT  # blocked


def test_a_pop_that_finds_nothing_without_poll_time_answers_polling_timeout(broker: Broker) -> None:
    res = one(broker, pop_req())
    assert (res.code, res.remark) == (ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE")
    assert res.ext_fields["popTime"] == T0 and res.ext_fields["restNum"] == 0


def test_a_held_pop_is_answered_by_a_message_arriving(broker: Broker) -> None:
    async def main() -> RemotingCommand | None:
        fut = broker.table.process(broker, FakePeer(), pop_req(poll=15_000))
        assert asyncio.isfuture(fut) and len(broker.pop_holds) == 1
        put(broker.store, b"late")
        return await asyncio.wait_for(fut, 5)

    res = asyncio.run(main())
    assert res is not None and res.code == ResponseCode.SUCCESS
    assert [m["body"] for m in client_messages(res)] == [b"late"]


def test_a_held_pop_with_nothing_arriving_answers_polling_timeout_at_its_deadline(broker: Broker) -> None:
    async def main() -> RemotingCommand | None:
        fut = broker.table.process(broker, FakePeer(), pop_req(poll=15_000))
        assert asyncio.isfuture(fut)
        broker.pop_holds.run_once(T0 + 15_000)
        return await asyncio.wait_for(fut, 5)

    res = asyncio.run(main())
    assert res is not None and res.code == ResponseCode.POLLING_TIMEOUT and len(broker.pop_holds) == 0


@pytest.mark.parametrize(
    ("req", "code", "remark"),
    [
        (pop_req(born=T0 - 10_000), ResponseCode.POLLING_TIMEOUT, "pop message is timeout too much"),
        (pop_req(topic="NOPE"), ResponseCode.TOPIC_NOT_EXIST, "topic[NOPE] not exist"),
        (pop_req(n=33), ResponseCode.SYSTEM_ERROR, "greater than 32"),
        (pop_req(queue=5), ResponseCode.SYSTEM_ERROR, "queueId[5] is illegal"),
        (pop_req(expType="SQL92", exp="a = 1"), ResponseCode.SYSTEM_ERROR, "filter message by SQL92"),
        (pop_req(expType="SQL92"), ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription"),
        (pop_req(consumerGroup="no such group!"), ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "does not exist"),
        (
            RemotingCommand(RequestCode.POP_MESSAGE, 1, 0, None, {"consumerGroup": "G", "topic": "T"}, b"", "JAVA"),
            ResponseCode.SYSTEM_ERROR,
            "queueId",
        ),
        (ack_req("NOPE", 0, "0 1 2 0 0 bk 0 0", 0), ResponseCode.TOPIC_NOT_EXIST, "topic[NOPE] not exist"),
        (ack_req("T", 9, "0 1 2 0 0 bk 9 0", 0), ResponseCode.MESSAGE_ILLEGAL, "queueId[9] is illegal"),
        (ack_req("T", 0, "0 1 2 0 0 bk 0 7", 7), ResponseCode.NO_MESSAGE, "offset is illegal"),
        (ack_req("T", 0, "garbage", 0), ResponseCode.SYSTEM_ERROR, "extraInfo"),
        (ack_req("T", 0, "0 1 2 0 7 bk 0 0", 0), ResponseCode.SYSTEM_ERROR, "topic type"),
        (
            ack_req("T", 0, "0 1 2 0 0 bk 0 0", 0, code=RequestCode.CHANGE_MESSAGE_INVISIBLETIME, invisibleTime="0"),
            ResponseCode.SYSTEM_ERROR,
            "invisibleTime 0",
        ),
        (
            ack_req("T", 0, "0 1 2 0 0 bk 0 0", 0, code=RequestCode.CHANGE_MESSAGE_INVISIBLETIME, invisibleTime="5000"),
            ResponseCode.NO_MESSAGE,
            "not in flight",
        ),
    ],
    ids=lambda v: str(v)[:30],
)
def test_refusals_answer_javas_codes_and_change_nothing(
    broker: Broker, req: RemotingCommand, code: int, remark: str
) -> None:
    put(broker.store, b"a")
    res = one(broker, req)
    assert res.code == code and res.remark is not None and remark in res.remark, res.remark
    assert broker.pop.inflight() == 0


def test_an_ack_of_a_handle_no_longer_in_flight_answers_success_as_java_does(broker: Broker) -> None:
    put(broker.store, b"a")
    [m] = client_messages(one(broker, pop_req()))
    assert broker.pop.run_once(T0 + INVISIBLE) == 1  # redelivered to the retry topic
    assert one(broker, ack_req("T", 0, m["POP_CK"], 0)).code == ResponseCode.SUCCESS
    broker.store.dispatch()
    assert [x["body"] for x in client_messages(one(broker, pop_req()))] == [b"a"]  # the redelivery stands


def test_a_waiter_is_woken_by_an_arrival_in_the_retry_topic_or_at_its_deadline(broker: Broker) -> None:
    """The gRPC receive's long polling: wait_arrival, then a pop again."""
    put(broker.store, b"a")
    one(broker, pop_req())

    async def main() -> tuple[bool, bool]:
        fut = broker.pop_holds.wait_arrival("G", "T", -1, T0 + 60_000)
        assert fut is not None and not fut.done()
        broker.pop.run_once(T0 + INVISIBLE)  # the revive stores it in %RETRY%G_T: an arrival there
        broker.store.dispatch()
        await asyncio.wait_for(fut, 5)
        late = broker.pop_holds.wait_arrival("G", "T", 1, T0 + INVISIBLE + 5)
        assert late is not None
        broker.pop_holds.run_once(T0 + INVISIBLE + 5)
        await asyncio.wait_for(late, 5)
        return fut.done(), late.done()

    assert asyncio.run(main()) == (True, True)
    assert len(broker.pop_holds) == 0


def test_a_pop_without_born_time_is_taken_as_born_now(broker: Broker) -> None:
    """PopMessageProcessor adds bornTime (now) when the request has none."""
    put(broker.store, b"a")
    req = pop_req()
    del req.ext_fields["bornTime"]
    assert one(broker, req).code == ResponseCode.SUCCESS


@pytest.fixture
def sync_broker(tmp_path: Path, clock: rmqlog.ManualClock) -> Iterator[Broker]:
    with rmqlog.MessageStore.open(
        tmp_path / "sync", small_store_config(flush_disk_type="SYNC_FLUSH"), clock=clock
    ) as s:
        s.create_topic("T", 2)
        yield make_broker(s, clock=clock, broker_name="bk")


def test_under_sync_flush_pops_and_acks_answer_after_one_sync_off_the_loop(sync_broker: Broker) -> None:
    import threading

    broker = sync_broker
    put(broker.store, b"a", b"b")
    log = broker.pop.state.log
    threads: list[int] = []
    real = log.sync

    def recorded() -> int:
        threads.append(threading.get_ident())
        return real()

    log.sync = recorded  # type: ignore[method-assign]
    res = run(broker, FakePeer(), pop_req(0, 1), pop_req(1, 1), pop_req(0, 1))  # one loop turn
    assert [r.code for r in res if r is not None] == [
        ResponseCode.SUCCESS,
        ResponseCode.POLLING_TIMEOUT,
        ResponseCode.SUCCESS,
    ]
    assert broker.pop.sync.syncs == 1 and threading.get_ident() not in threads  # one fsync, in a worker
    assert log.synced_writes == log.writes
    msgs = [m for r in res if r is not None and r.code == ResponseCode.SUCCESS for m in client_messages(r)]
    acks = [ack_req("T", 0, m["POP_CK"], m["queueOffset"]) for m in msgs]
    assert [r.code for r in run(broker, FakePeer(), *acks) if r is not None] == [ResponseCode.SUCCESS] * 2
    assert broker.pop.sync.syncs == 2 and broker.pop.inflight() == 0


def test_under_async_flush_nothing_waits_for_a_sync(broker: Broker) -> None:
    put(broker.store, b"a")
    assert isinstance(broker.table.process(broker, FakePeer(), pop_req()), RemotingCommand)
    assert broker.pop.sync.syncs == 0


def test_a_failed_sync_answers_system_error(sync_broker: Broker) -> None:
    broker = sync_broker
    put(broker.store, b"a")

    def failing() -> int:
        raise OSError(5, "Input/output error")

    broker.pop.state.log.sync = failing  # type: ignore[method-assign]
    (res,) = run(broker, FakePeer(), pop_req())
    assert res is not None and res.code == ResponseCode.SYSTEM_ERROR and "could not be synced" in (res.remark or "")


def test_under_sync_flush_a_held_pop_answers_after_the_sync(sync_broker: Broker) -> None:
    broker = sync_broker

    async def main() -> RemotingCommand | None:
        fut = broker.table.process(broker, FakePeer(), pop_req(poll=15_000))
        assert asyncio.isfuture(fut)
        put(broker.store, b"late")
        return await asyncio.wait_for(fut, 5)

    res = asyncio.run(main())
    assert res is not None and res.code == ResponseCode.SUCCESS and broker.pop.sync.syncs == 1
    assert broker.pop.state.log.synced_writes == broker.pop.state.log.writes


def inflight_req(**ext: Any) -> RemotingCommand:
    return RemotingCommand(
        RequestCode.GET_POP_INFLIGHT, 3, 0, None, {"consumerGroup": "G", "topic": "T", **ext}, b"", "JAVA"
    )


def test_get_pop_inflight_lists_unacked_messages_and_refuses_what_it_cannot_answer(broker: Broker) -> None:
    put(broker.store, b"a", b"b", b"c")
    msgs = client_messages(one(broker, pop_req(0)))
    one(broker, ack_req("T", 0, msgs[1]["POP_CK"], 1))
    res = one(broker, inflight_req())
    assert res.code == ResponseCode.SUCCESS
    assert json.loads(res.body_bytes()) == {
        "brokerName": "bk",
        "now": T0,
        "total": 2,
        "messages": [
            {"topic": "T", "queueId": 0, "offset": o, "popTime": T0, "invisibleTime": INVISIBLE, "attempt": None}
            for o in (0, 2)
        ],
    }
    assert json.loads(one(broker, inflight_req(maxNum="1")).body_bytes())["messages"][0]["offset"] == 0
    assert json.loads(one(broker, inflight_req(consumerGroup="other")).body_bytes())["total"] == 0
    assert one(broker, inflight_req(topic="Nope")).code == ResponseCode.TOPIC_NOT_EXIST
    bad = one(broker, inflight_req(maxNum="0"))
    assert bad.code == ResponseCode.SYSTEM_ERROR and "maxNum 0" in (bad.remark or "")
    assert one(broker, inflight_req(consumerGroup="bad/name")).code == ResponseCode.SYSTEM_ERROR
    missing = RemotingCommand(RequestCode.GET_POP_INFLIGHT, 4, 0, None, {"topic": "T"}, b"", "JAVA")
    assert one(broker, missing).code == ResponseCode.SYSTEM_ERROR  # a required field (the table's field error)
