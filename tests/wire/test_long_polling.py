"""Long polling (PullRequestHoldService): a pull that finds nothing with the suspend flag is
held and answered on arrival, on timeout (ManualClock, run_once), never for a message its
subscription does not match, and dropped when its connection closes. Driven by awaiting the
held future, never by sleeping."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import rmqlog
from rmqnet.broker.holds import PullHoldService
from rmqnet.remoting import RequestCode, ResponseCode

from .broker_helpers import make_broker
from .brokerpull_support import FakePeer, open_store, request, run, segment_bytes

SUSPEND_SUB = 6  # suspend + subscription: what ali-ons and the C++ push consumer send


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    clock = rmqlog.ManualClock(1_700_000_000_000)
    store = open_store(tmp_path / "store", clock)
    store.create_topic("T", 4)
    b = make_broker(store, clock)
    yield b
    store.close()


def put(broker: Any, tags: list[str], queue_id: int = 0) -> pa.Table:
    n = len(tags)
    return broker.store.put_batch(
        pa.table({"topic": ["T"] * n, "body": [b"m%d" % i for i in range(n)], "queueId": [queue_id] * n, "tags": tags}),
        dispatch=True,
    )


def pull_req(
    offset: int, *, queue_id: int = 0, subscription: str = "*", timeout_ms: int = 15000, sys_flag: int = SUSPEND_SUB
) -> Any:
    return request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": "T",
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": 32,
            "sysFlag": sys_flag,
            "commitOffset": 0,
            "suspendTimeoutMillis": timeout_ms,
            "subscription": subscription,
            "subVersion": 0,
        },
    )


def held(broker: Any, req: Any, peer: Any = None) -> asyncio.Future[Any]:
    res = broker.table.process(broker, peer or FakePeer(), req)
    assert isinstance(res, asyncio.Future), f"expected a held pull, got {res!r}"
    assert not res.done()
    return res


async def turn() -> None:
    """One turn of the event loop: an arrival signalled on the loop's thread is handled on
    its next turn (no time passes; the hand-over is FIFO)."""
    await asyncio.sleep(0)


def record_bytes(broker: Any, results: pa.Table, queue_id: int = 0) -> bytes:
    qo = results["queueOffset"].to_pylist()
    sizes = broker.store.record_sizes("T", queue_id, 0, max(qo) + 1)
    return b"".join(
        segment_bytes(broker.store.paths.root, o, int(sizes[q]))
        for o, q in zip(results["commitLogOffset"].to_pylist(), qo, strict=True)
    )


def test_held_pull_answered_on_arrival(broker: Any) -> None:
    async def go() -> None:
        req = pull_req(0)
        fut = held(broker, req)
        assert len(broker.holds) == 1
        results = put(broker, ["A", "B"])
        broker.holds.notify_arrival("T", 0, 2)
        res = await fut
        assert res.code == ResponseCode.SUCCESS and res.opaque == req.opaque and res.is_response
        assert res.body_bytes() == record_bytes(broker, results)
        assert int(res.ext_fields["nextBeginOffset"]) == 2
        assert len(broker.holds) == 0

    run(go())


def test_arrival_on_another_queue_or_below_the_offset_does_not_answer(broker: Any) -> None:
    async def go() -> None:
        put(broker, ["A"])
        fut = held(broker, pull_req(1))
        put(broker, ["A"], queue_id=1)
        broker.holds.notify_arrival("T", 1, 1)  # another queue
        broker.holds.notify_arrival("T", 0, 1)  # not past the held offset
        await turn()
        assert not fut.done() and len(broker.holds) == 1
        put(broker, ["A"])
        broker.holds.notify_arrivals(["T"], [0], [2])
        res = await fut
        assert res.code == ResponseCode.SUCCESS and int(res.ext_fields["nextBeginOffset"]) == 2

    run(go())


def test_timeout_answers_not_found_with_the_requested_offset(broker: Any) -> None:
    async def go() -> None:
        put(broker, ["A", "A", "A"])
        fut = held(broker, pull_req(3, timeout_ms=3000))
        broker.holds.run_once(broker.clock.wall_ms() + 2999)
        assert not fut.done()
        broker.clock.advance(3000)
        broker.holds.run_once(broker.clock.wall_ms())
        res = await fut
        assert res.code == ResponseCode.PULL_NOT_FOUND
        assert int(res.ext_fields["nextBeginOffset"]) == 3 and int(res.ext_fields["maxOffset"]) == 3
        assert len(broker.holds) == 0

    run(go())


def test_non_matching_tag_keeps_the_pull_held(broker: Any) -> None:
    async def go() -> None:
        fut = held(broker, pull_req(0, subscription="A"))
        put(broker, ["B", "C"])
        broker.holds.notify_arrival("T", 0, 2)
        await turn()
        assert not fut.done(), "a message the subscription does not match must not answer the pull"
        assert len(broker.holds) == 1
        results = put(broker, ["A"])
        broker.holds.notify_arrival("T", 0, 3)
        res = await fut
        assert res.code == ResponseCode.SUCCESS
        assert res.body_bytes() == record_bytes(broker, results)

    run(go())


def test_non_matching_then_timeout_moves_past_the_scanned(broker: Any) -> None:
    """At the deadline the pull is re-run and its answer sent, as Java's wake-up does: the
    units scanned and filtered out are skipped (20), so the consumer does not rescan them."""

    async def go() -> None:
        fut = held(broker, pull_req(0, subscription="A", timeout_ms=1000))
        put(broker, ["B", "B"])
        broker.holds.notify_arrival("T", 0, 2)
        broker.clock.advance(1000)
        broker.holds.run_once(broker.clock.wall_ms())
        res = await fut
        assert res.code == ResponseCode.PULL_RETRY_IMMEDIATELY and int(res.ext_fields["nextBeginOffset"]) == 2

    run(go())


def test_dropped_when_its_connection_closes(broker: Any) -> None:
    async def go() -> None:
        gone, alive = FakePeer(), FakePeer()
        f1 = held(broker, pull_req(0), gone)
        f2 = held(broker, pull_req(0, queue_id=1), gone)
        f3 = held(broker, pull_req(0), alive)
        assert len(gone.on_close) == 1, "one close callback per connection, however many pulls it holds"
        gone.close()  # the transport runs the connection's on_close callbacks
        assert await f1 is None and await f2 is None
        assert len(broker.holds) == 1 and not f3.done()
        assert broker.holds.on_close(gone) == 0

    run(go())


def test_a_closed_peer_found_when_answering_is_dropped(broker: Any) -> None:
    async def go() -> None:
        silent = FakePeer()
        silent.on_close = None  # type: ignore[assignment]  # a peer that cannot tell us it closed
        fut = held(broker, pull_req(0), silent)
        silent._closed = True
        put(broker, ["A"])
        broker.holds.notify_arrival("T", 0, 1)
        assert await fut is None
        assert len(broker.holds) == 0

    run(go())


def test_cancelled_by_the_transport_is_forgotten(broker: Any) -> None:
    async def go() -> None:
        fut = held(broker, pull_req(0))
        fut.cancel()
        await asyncio.sleep(0)  # the done callback runs on the next loop turn
        assert len(broker.holds) == 0

    run(go())


def test_short_polling_holds_for_short_polling_time(broker: Any) -> None:
    broker.config = broker.config.replace(long_polling_enable=False)

    async def go() -> None:
        fut = held(broker, pull_req(0, timeout_ms=15000))
        broker.holds.run_once(broker.clock.wall_ms() + 999)
        assert not fut.done()
        broker.holds.run_once(broker.clock.wall_ms() + 1000)
        res = await fut
        assert res.code == ResponseCode.PULL_NOT_FOUND

    run(go())


def test_arrival_on_the_loop_thread_is_answered_inside_the_notifying_call(broker: Any) -> None:
    """On the loop's thread (a broker's put dispatching itself) the held pull is answered at
    once, so that its answer leaves in the same turn of the loop as the send's."""

    async def go() -> None:
        fut = held(broker, pull_req(0))
        broker.store.wire.put_wire(pa.table({"topic": ["T"], "queueId": [0], "body": [b"A"]}))  # not dispatched
        broker.holds.notify_arrival("T", 0, 0)
        assert not fut.done()  # (nothing past the held offset)
        broker.store.dispatch()  # the store's signal, on this thread
        assert fut.done(), "answered inside the notifying call"
        assert (await fut).code == ResponseCode.SUCCESS

    run(go())


def test_the_store_dispatcher_wakes_held_pulls(broker: Any) -> None:
    """No hand-made notify: the store's arrival signal (``MessageStore.wire.on_arrival``, which
    the broker subscribes its hold service to) wakes the held pull when a put is dispatched."""

    async def go() -> None:
        other = held(broker, pull_req(0, queue_id=1))
        fut = held(broker, pull_req(0))
        results = put(broker, ["A"])  # dispatch=True: the store signals queue T/0 up to 1
        res = await fut
        assert res.code == ResponseCode.SUCCESS and res.body_bytes() == record_bytes(broker, results)
        assert not other.done()

    run(go())


def test_the_background_dispatcher_wakes_held_pulls(broker: Any) -> None:
    """Appends not dispatched by their writer (another process, a Spark sink) are found by the
    store's background dispatcher, on its own thread; its signal wakes the held pull."""

    async def go() -> None:
        fut = held(broker, pull_req(0))
        broker.store.put_batch(pa.table({"topic": ["T"], "body": [b"late"], "queueId": [0]}))  # no dispatch
        t = threading.Thread(target=broker.store.dispatch)
        t.start()
        t.join()
        res = await fut
        assert res.code == ResponseCode.SUCCESS and int(res.ext_fields["nextBeginOffset"]) == 1

    run(go())


def test_no_suspend_flag_is_answered_at_once(broker: Any) -> None:
    res = broker.table.process(broker, FakePeer(), pull_req(0, sys_flag=4))
    assert res.code == ResponseCode.PULL_NOT_FOUND


def test_arrival_from_the_dispatcher_thread(broker: Any) -> None:
    async def go() -> None:
        fut = held(broker, pull_req(0))
        results = put(broker, ["A"])
        t = threading.Thread(target=broker.holds.notify_arrivals, args=(["T"], [0], [1]))
        t.start()
        t.join()
        res = await fut  # handed to the loop with call_soon_threadsafe
        assert res.body_bytes() == record_bytes(broker, results)

    run(go())


def test_timeout_from_a_timer_thread(broker: Any) -> None:
    async def go() -> None:
        fut = held(broker, pull_req(0, timeout_ms=10))
        t = threading.Thread(target=broker.holds.run_once, args=(broker.clock.wall_ms() + 10,))
        t.start()
        t.join()
        assert (await fut).code == ResponseCode.PULL_NOT_FOUND

    run(go())


def test_many_holds_an_arrival_reruns_only_its_queue() -> None:
    """10,000 held pulls over 100 queues: an arrival re-runs the 100 of its queue, a tick
    with nothing due re-runs none, a deadline re-runs exactly those due."""
    reruns: list[int] = []

    def rerun(h: Any, final: bool) -> Any:
        reruns.append(h.queue_id)
        return h.request.reply(ResponseCode.PULL_NOT_FOUND) if final else None

    async def go() -> None:
        svc = PullHoldService(rerun)
        peers = [FakePeer() for _ in range(10)]
        futs = [svc.hold(peers[i % 10], request(11), "T", i % 100, 5, 1000 + (i % 2) * 1000) for i in range(10_000)]
        assert len(svc) == 10_000
        svc.notify_arrival("T", 7, 6)
        await turn()
        assert sorted(set(reruns)) == [7] and len(reruns) == 100
        reruns.clear()
        svc.run_once(999)
        assert reruns == []
        svc.run_once(1000)
        assert len(reruns) == 5000 and sum(f.done() for f in futs) == 5000
        assert len(svc) == 5000
        svc.stop()
        assert all(f.done() for f in futs) and len(svc) == 0

    run(go())


def test_outside_an_event_loop_the_pull_is_answered_at_once(broker: Any) -> None:
    res = broker.table.process(broker, FakePeer(), pull_req(0))
    assert res.code == ResponseCode.PULL_NOT_FOUND and int(res.ext_fields["nextBeginOffset"]) == 0
    assert len(broker.holds) == 0


def test_pulls_answered_early_do_not_grow_the_deadline_heap() -> None:
    """Each pull answered on arrival leaves its heap entry behind until its deadline; the
    heap is compacted so it stays within twice the held pulls plus a constant."""
    from rmqnet.broker import holds as holds_module

    async def go() -> None:
        svc = PullHoldService(lambda h, final: h.request.reply(ResponseCode.SUCCESS))
        peer = FakePeer()
        for i in range(5000):
            svc.hold(peer, request(11), "T", 0, i, 10**9)
            svc.notify_arrival("T", 0, i + 1)
            await turn()
            assert len(svc) == 0
        assert len(svc._deadlines) <= holds_module.COMPACT_SLACK + 1

    run(go())


def test_appends_by_another_opener_wake_held_pulls(broker: Any) -> None:
    """A second opener of the store root (a Spark sink, another process) appends without
    dispatching; the broker's store finds those records on its next dispatch and its arrival
    signal wakes the held pull."""

    async def go() -> None:
        fut = held(broker, pull_req(0))
        other = rmqlog.MessageStore.open(broker.store.paths.root, broker.store.config, clock=broker.clock)
        try:
            written = other.put_batch(pa.table({"topic": ["T"], "body": [b"from elsewhere"], "queueId": [0]}))
        finally:
            other.close()
        t = threading.Thread(target=broker.store.dispatch)  # the broker's dispatcher thread
        t.start()
        t.join()
        res = await fut
        assert res.code == ResponseCode.SUCCESS
        assert res.body_bytes() == record_bytes(broker, written)

    run(go())
