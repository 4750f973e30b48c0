"""Several brokers from the client's side: the queue list across brokers, round robin, retries
on another broker, ``sendLatencyFaultEnable`` (RocketMQ 4.9.8's ``MQFaultStrategy`` and
``LatencyFaultToleranceImpl``, their tables and their tests), and a group's queues shared
by ``AllocateMessageQueueAveragely`` (its Java test's example and hand-worked cases).
Brokers are in-test servers on 127.0.0.1 (tests/wire/test_client.py's ``FakeServer``); the
fault durations run on a ManualClock, so nothing waits for them to pass."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from rmqlog import ManualClock
from rmqnet.client import (
    BrokerError,
    FaultStrategy,
    LatencyFaultTolerance,
    Producer,
    QueueRef,
    allocate_averagely,
    publish_queues,
    read_queues,
)
from rmqnet.client.latency import LATENCY_MAX_MS, NOT_AVAILABLE_MS
from rmqnet.remoting import RemotingCommand, ResponseCode
from rmqnet.remoting.route import BrokerData, QueueData, TopicRouteData
from rmqnet.transport import RemotingTimeoutError

from .test_client import FakeServer

# ---- AllocateMessageQueueAveragely ----------------------------------------------------------


def mqs(n: int, broker: str = "brokerName", topic: str = "topic") -> list[QueueRef]:
    return [QueueRef(topic, broker, i) for i in range(n)]


def test_allocate_averagely_java_s_example() -> None:
    """AllocateMessageQueueAveragelyTest: 4 consumers, 10 queues -> 3, 3, 2, 2."""
    cids = [f"CID_PREFIX{i}" for i in range(4)]
    queues = mqs(10)
    shares = [allocate_averagely("", c, queues, cids) for c in cids]
    assert [len(s) for s in shares] == [3, 3, 2, 2]
    assert [[q.queue_id for q in s] for s in shares] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]


@pytest.mark.parametrize(
    ("n", "c", "expected"),
    [
        (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
        (4, 4, [[0], [1], [2], [3]]),
        (2, 3, [[0], [1], []]),  # more clients than queues: the last get nothing
        (1, 1, [[0]]),
        (7, 2, [[0, 1, 2, 3], [4, 5, 6]]),
    ],
)
def test_allocate_averagely_contiguous_runs(n: int, c: int, expected: list[list[int]]) -> None:
    cids = [f"c{i}" for i in range(c)]
    queues = mqs(n)
    assert [[q.queue_id for q in allocate_averagely("G", cid, queues, cids)] for cid in cids] == expected
    together = sorted(q for cid in cids for q in allocate_averagely("G", cid, queues, cids))
    assert together == queues  # every queue to exactly one client


def test_allocate_averagely_refusals() -> None:
    assert allocate_averagely("G", "stranger", mqs(4), ["a", "b"]) == []
    for args in (("", mqs(1), ["a"]), ("a", [], ["a"]), ("a", mqs(1), [])):
        with pytest.raises(ValueError):
            allocate_averagely("G", *args)


def two_broker_route(
    order: tuple[str, str] = ("broker-b", "broker-a"), queues: int = 2, addrs: dict[str, str] | None = None
) -> TopicRouteData:
    addrs = addrs or {"broker-a": "10.0.0.1:10911", "broker-b": "10.0.0.2:10911"}
    return TopicRouteData(
        [QueueData(b, queues, queues) for b in order], [BrokerData("C", b, {0: addrs[b]}) for b in order]
    )


def test_queues_across_brokers_in_java_s_order() -> None:
    route = two_broker_route()
    assert publish_queues("T", route) == [
        QueueRef("T", "broker-a", 0),
        QueueRef("T", "broker-a", 1),
        QueueRef("T", "broker-b", 0),
        QueueRef("T", "broker-b", 1),
    ]
    # a broker without a master, or without the write perm, has no queue to send to
    route.broker_datas[0].broker_addrs = {1: "10.0.0.9:10911"}  # broker-b: a slave only
    route.queue_datas[1].perm = 4  # broker-a: read only
    assert publish_queues("T", route) == []
    assert read_queues("T", route) == [
        QueueRef("T", "broker-a", 0),
        QueueRef("T", "broker-a", 1),
        QueueRef("T", "broker-b", 0),
        QueueRef("T", "broker-b", 1),
    ]
    assert publish_queues("T", two_broker_route(queues=8), max_queues=4)[-1] == QueueRef("T", "broker-b", 3)


def test_rebalance_shares_queues_of_both_brokers() -> None:
    queues = read_queues("T", two_broker_route(queues=3))
    cids = sorted(["10.231.0.4@2", "10.231.0.4@1"])
    first, second = (allocate_averagely("G", c, queues, cids) for c in cids)
    assert [(q.broker_name, q.queue_id) for q in first] == [("broker-a", 0), ("broker-a", 1), ("broker-a", 2)]
    assert [(q.broker_name, q.queue_id) for q in second] == [("broker-b", 0), ("broker-b", 1), ("broker-b", 2)]


# ---- LatencyFaultToleranceImpl and MQFaultStrategy ---------------------------------------------


def test_latency_fault_tolerance_as_java_s_test() -> None:
    clock = ManualClock()
    t = LatencyFaultTolerance(clock)
    t.update("BrokerA", 3000, 3000)
    assert not t.is_available("BrokerA") and t.is_available("BrokerB")
    t.update("BrokerA", 3000, 50)
    assert not t.is_available("BrokerA")
    clock.advance(70)
    assert t.is_available("BrokerA")
    t.update("BrokerA", 3000, 3000)
    t.remove("BrokerA")
    assert t.is_available("BrokerA")
    t.update("BrokerA", 1000, 3000)
    assert t.pick_one_at_least() == "BrokerA"
    t.update("BrokerB", 1001, 3000)
    assert t.pick_one_at_least() == "BrokerA"  # half = 1: always the best


def test_not_available_durations_follow_java_s_tables() -> None:
    f = FaultStrategy(ManualClock(), enabled=True)
    assert (LATENCY_MAX_MS, NOT_AVAILABLE_MS) == (
        (50, 100, 550, 1000, 2000, 3000, 15000),
        (0, 0, 30000, 60000, 120000, 180000, 600000),
    )
    got = [f.not_available_for(ms) for ms in (0, 49, 50, 549, 550, 999, 1000, 2999, 3000, 14999, 15000, 30000)]
    assert got == [0, 0, 0, 0, 30000, 30000, 60000, 120000, 180000, 180000, 600000, 600000]
    with pytest.raises(ValueError):
        FaultStrategy(ManualClock(), latency_max_ms=(2, 1), not_available_ms=(0, 0))


def test_the_strategy_skips_a_slow_or_failed_broker_for_a_while() -> None:
    clock = ManualClock()
    f = FaultStrategy(clock, enabled=True)
    queues = publish_queues("T", two_broker_route())
    assert [f.select(queues, None) for _ in range(4)] == queues  # round robin from the first queue
    f.update("broker-b", 600, False)  # slow: 30 s out
    assert {f.select(queues, None).broker_name for _ in range(8)} == {"broker-a"}
    clock.advance(30_000)
    assert {f.select(queues, None).broker_name for _ in range(8)} == {"broker-a", "broker-b"}
    f.update("broker-b", 5, True)  # failed: isolation counts as 30 s of latency -> 10 minutes
    clock.advance(599_999)
    assert {f.select(queues, None).broker_name for _ in range(8)} == {"broker-a"}
    clock.advance(1)
    assert "broker-b" in {f.select(queues, None).broker_name for _ in range(8)}
    # every broker out: one of the better half is tried anyway, on one of its own queues
    f.update("broker-a", 20, True)
    f.update("broker-b", 10, True)
    picked = {f.select(queues, None) for _ in range(6)}
    assert {q.broker_name for q in picked} == {"broker-b"} and {q.queue_id for q in picked} <= {0, 1}


def test_without_the_fault_switch_a_retry_takes_another_broker() -> None:
    f = FaultStrategy(ManualClock())
    queues = publish_queues("T", two_broker_route())
    f.update("broker-a", 100_000, True)  # recorded nowhere: the switch is off
    assert f.tolerance.snapshot() == {}
    assert f.select(queues, None).broker_name == "broker-a"
    assert all(f.select(queues, "broker-a").broker_name == "broker-b" for _ in range(5))
    assert all(f.select(queues, "broker-b").broker_name == "broker-a" for _ in range(5))


# ---- the producer against two brokers ------------------------------------------------------------


class Brokers:
    """Two in-test servers: ``a`` is the name server and broker-a, ``b`` is broker-b."""

    def __init__(self) -> None:
        self.a = FakeServer()
        self.b = FakeServer()
        body = two_broker_route(addrs={"broker-a": self.a.addr, "broker-b": self.b.addr}).encode()

        def route(r: RemotingCommand) -> RemotingCommand:
            if r.ext_fields.get("topic") == "T":
                return r.reply(ResponseCode.SUCCESS, body=body)
            return r.reply(ResponseCode.TOPIC_NOT_EXIST, "no route")

        self.a.answers[105] = route
        for s, name in ((self.a, "broker-a"), (self.b, "broker-b")):
            s.answers[310] = s.answers[320] = self._ok(name)

    @staticmethod
    def _ok(name: str):  # type: ignore[no-untyped-def]
        def answer(r: RemotingCommand) -> RemotingCommand:
            return r.reply(
                ResponseCode.SUCCESS, ext_fields={"msgId": name, "queueId": r.ext_fields["e"], "queueOffset": "0"}
            )

        return answer

    def sends(self, server: FakeServer) -> list[tuple[str, str]]:
        return [(r.ext_fields["n"], r.ext_fields["e"]) for r in server.seen if r.code in (310, 320)]

    def stop(self) -> None:
        self.a.stop()
        self.b.stop()


@pytest.fixture
def brokers() -> Iterator[Brokers]:
    b = Brokers()
    yield b
    b.stop()


def test_sends_go_round_robin_over_both_brokers(brokers: Brokers) -> None:
    with Producer("PG", brokers.a.addr) as p:
        got = [(r.offset_msg_id, r.queue_id) for r in (p.send("T", b"x") for _ in range(6))]
    assert got == [("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1), ("broker-a", 0), ("broker-a", 1)]


def test_a_refusing_broker_is_retried_elsewhere_without_the_fault_switch(brokers: Brokers) -> None:
    brokers.b.answers[310] = lambda r: r.reply(ResponseCode.SERVICE_NOT_AVAILABLE, "stopping")
    with Producer("PG", brokers.a.addr) as p:
        results = [p.send("T", b"x") for _ in range(6)]
    assert {r.offset_msg_id for r in results} == {"broker-a"} and all(r.status == "SEND_OK" for r in results)
    # without the switch broker-b is tried again each time its turn comes: sends 3 and 5 (a retry
    # advances the same counter: b0 failed, b1 is skipped as the same broker, a0 takes it)
    assert brokers.sends(brokers.b) == [("broker-b", "0"), ("broker-b", "0")]
    # a code not among the retry codes is the caller's answer
    brokers.b.answers[310] = lambda r: r.reply(ResponseCode.MESSAGE_ILLEGAL, "too big")
    with Producer("PG", brokers.a.addr) as p, pytest.raises(BrokerError) as err:
        for _ in range(3):
            p.send("T", b"x")
    assert err.value.code == ResponseCode.MESSAGE_ILLEGAL


def test_a_dead_broker_is_skipped_after_one_failed_attempt(brokers: Brokers) -> None:
    clock = ManualClock()
    brokers.b.stop()  # connection refused from now on
    with Producer("PG", brokers.a.addr, clock=clock, send_latency_fault_enable=True) as p:
        results = [p.send("T", b"x") for _ in range(10)]
        assert {r.offset_msg_id for r in results} == {"broker-a"}  # no error reached the caller
        latency, left = p.fault.tolerance.snapshot()["broker-b"]
        assert left == 600_000
        batch = p.send_batch("T", [b"1", b"2"])
        assert batch.offset_msg_id == "broker-a"
    assert len(brokers.sends(brokers.a)) == 11


def test_a_stalled_broker_costs_one_timeout_then_is_avoided(brokers: Brokers) -> None:
    never: list[asyncio.Future[RemotingCommand]] = []

    def stall(r: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        never.append(fut)
        return fut

    brokers.b.answers[310] = stall
    clock = ManualClock()
    with Producer("PG", brokers.a.addr, clock=clock, send_latency_fault_enable=True, timeout_s=0.3) as p:
        assert [p.send("T", b"x").offset_msg_id for _ in range(2)] == ["broker-a", "broker-a"]
        with pytest.raises(RemotingTimeoutError):  # the third goes to broker-b: all the budget spent there
            p.send("T", b"x")
        assert [p.send("T", b"x").offset_msg_id for _ in range(6)] == ["broker-a"] * 6
    assert len(brokers.sends(brokers.b)) == 1


def test_a_send_to_a_named_queue_is_not_retried(brokers: Brokers) -> None:
    brokers.b.answers[310] = lambda r: r.reply(ResponseCode.SERVICE_NOT_AVAILABLE, "stopping")
    with Producer("PG", brokers.a.addr, send_latency_fault_enable=True) as p, pytest.raises(BrokerError):
        p.send("T", b"x", broker_name="broker-b", queue_id=1)
    assert brokers.sends(brokers.b) == [("broker-b", "1")] and brokers.sends(brokers.a) == []


def test_a_stale_route_is_asked_again_and_the_send_goes_elsewhere(brokers: Brokers) -> None:
    """TOPIC_NOT_EXIST from a broker (the topic left it) is a retry code: the route is asked
    again, and the send answered by the other broker."""
    brokers.b.answers[310] = lambda r: r.reply(ResponseCode.TOPIC_NOT_EXIST, "topic[T] not exist")
    with Producer("PG", brokers.a.addr, send_latency_fault_enable=True) as p:
        results = [p.send("T", b"x") for _ in range(4)]
    assert [r.offset_msg_id for r in results] == ["broker-a"] * 4
    assert len(brokers.a.of(105)) == 2  # the first lookup, and again after broker-b's refusal
    assert len(brokers.sends(brokers.b)) == 1


def test_a_slave_answering_a_send_makes_the_route_asked_again(brokers: Brokers) -> None:
    """SERVICE_NOT_AVAILABLE (what a slave answers a send: an old master back as a slave while
    the cached route still names it the master) is a retry code that also drops the cached
    route: asked again at once, not a route poll (30 s) later."""
    brokers.b.answers[310] = lambda r: r.reply(ResponseCode.SERVICE_NOT_AVAILABLE, "service not available now...")
    with Producer("PG", brokers.a.addr, send_latency_fault_enable=True) as p:
        results = [p.send("T", b"x") for _ in range(4)]
    assert [r.offset_msg_id for r in results] == ["broker-a"] * 4
    assert len(brokers.a.of(105)) == 2  # the first lookup, and again after broker-b's refusal
    assert len(brokers.sends(brokers.b)) == 1


def test_a_stored_but_status_is_the_answer_unless_asked_to_try_another_broker(brokers: Brokers) -> None:
    brokers.a.answers[310] = lambda r: r.reply(
        ResponseCode.SLAVE_NOT_AVAILABLE, None, {"msgId": "broker-a", "queueId": r.ext_fields["e"], "queueOffset": "0"}
    )
    with Producer("PG", brokers.a.addr) as p:
        assert p.send("T", b"x").status == "SLAVE_NOT_AVAILABLE"  # stored on broker-a: the answer
    assert brokers.sends(brokers.b) == []
    with Producer("PG", brokers.a.addr, retry_another_broker_when_not_store_ok=True) as p:
        r = p.send("T", b"x")
        assert (r.status, r.offset_msg_id) == ("SEND_OK", "broker-b")
        brokers.b.answers[310] = brokers.a.answers[310]  # nobody stores OK: the last stored-but answer
        assert p.send("T", b"x").status == "SLAVE_NOT_AVAILABLE"
