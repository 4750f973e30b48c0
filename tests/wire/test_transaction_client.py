"""Our transactional producer (rmqnet.client.transaction) against a name server and a broker
(``rmqnet.broker.launch``) over real sockets on 127.0.0.1, served on an event loop of their own
as two processes would: commit, rollback, a transaction left UNKNOW settled by the broker's
check-back, and a pull consumer seeing the committed messages only."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rmqlog
from rmqnet.broker import launch
from rmqnet.broker.config import BrokerConfig
from rmqnet.client import LocalTransactionState, PullConsumer, TransactionProducer
from rmqnet.client.errors import BrokerError
from rmqnet.namesrv.process import NameServerProcess

from .brokerpull_support import HANG_GUARD_S, SEGMENT

State = LocalTransactionState


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[dict[str, Any]]:
    root = tmp_path / "root"
    store_config = rmqlog.StoreConfig(mapped_file_size_commit_log=SEGMENT)
    with rmqlog.MessageStore.open(root, store_config) as store:
        store.create_topic("T", 2)
    ready: dict[str, Any] = {}
    started, stop = threading.Event(), threading.Event()

    def serve() -> None:
        async def main() -> None:
            ns = NameServerProcess("127.0.0.1", 0)
            await ns.start()
            # checked back as soon as the check service's next round (every 200 ms) finds it open
            config = BrokerConfig(
                broker_name="broker-a",
                listen_port=0,
                namesrv_addr=ns.address,
                store=store_config,
                transaction_time_out=0,
                transaction_check_interval=200,
            )
            proc = launch.BrokerProcess(root, config)
            try:
                await proc.start()
                while ns.server.routes.route("T") is None:  # registered
                    await asyncio.sleep(0.01)
                ready.update(namesrv=ns.address, proc=proc, ns=ns)
                started.set()
                await asyncio.get_running_loop().run_in_executor(None, stop.wait)
            finally:
                proc.request_stop()
                await proc.wait_stopped(grace_s=1.0)
                await ns.stop()

        try:
            asyncio.run(main())
        finally:
            started.set()

    thread = threading.Thread(target=serve, name="servers")
    thread.start()
    assert started.wait(HANG_GUARD_S) and "proc" in ready, "the servers did not start"
    try:
        yield ready
    finally:
        stop.set()
        thread.join(HANG_GUARD_S)


def bodies(namesrv: str) -> list[bytes]:
    consumer = PullConsumer("CG", namesrv)
    out: list[bytes] = []
    for q in (0, 1):
        res = consumer.pull("T", q, 0, max_nums=64, suspend_ms=0)
        out += res.messages.column("body").to_pylist()
    return sorted(out)


def wait_for(cond: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_commit_rollback_and_a_check_back(servers: dict[str, Any]) -> None:
    asked: list[bytes] = []

    def check(message: dict[str, Any]) -> LocalTransactionState:
        asked.append(message["body"])
        assert message["topic"] == "T"
        return State.COMMIT_MESSAGE

    producer = TransactionProducer("TPG", servers["namesrv"], check_listener=check)
    a = producer.send_in_transaction("T", b"commit-me", lambda r: State.COMMIT_MESSAGE)
    b = producer.send_in_transaction("T", b"roll-me-back", lambda r: State.ROLLBACK_MESSAGE)
    c = producer.send_in_transaction("T", b"ask-me", lambda r: State.UNKNOW)

    def failing(_: Any) -> LocalTransactionState:
        raise RuntimeError("the local transaction broke")

    d = producer.send_in_transaction("T", b"broken-local", failing)  # UNKNOW: checked back too
    assert (a.state, b.state, c.state, d.state) == (
        State.COMMIT_MESSAGE,
        State.ROLLBACK_MESSAGE,
        State.UNKNOW,
        State.UNKNOW,
    )
    assert a.send.status == "SEND_OK" and a.send.broker_name == "broker-a"
    wait_for(
        lambda: bodies(servers["namesrv"]) == [b"ask-me", b"broken-local", b"commit-me"], "the check-backs committed"
    )
    assert sorted(asked) == [b"ask-me", b"broken-local"] and producer.checks_answered == 2
    # ending it again from the client: answered, nothing stored again; the other outcome refused
    again = producer.aend_transaction("T", a.send, State.COMMIT_MESSAGE)
    from rmqnet.client.loop import call

    res = call(again)
    assert res is not None and "already committed" in (res.remark or "")
    with pytest.raises(BrokerError):
        call(producer.aend_transaction("T", a.send, State.ROLLBACK_MESSAGE))
    assert bodies(servers["namesrv"]) == [b"ask-me", b"broken-local", b"commit-me"]
    producer.close()


def test_the_end_goes_to_the_broker_that_stored_the_half(
    servers: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The END goes where the half went: a transaction on a topic the name server has no route for yet (the
    broker made it from TBW102 with the half message; its registration not yet in): the END
    goes to the broker named by the half send's result, as Java's client does
    (``findBrokerAddressInPublish(sendResult.getMessageQueue().getBrokerName())``), not to a
    route asked again (which failed with ``TopicNotFoundError``, the half message stored)."""
    routes = servers["ns"].server.routes
    real = routes.route
    asked: list[str] = []

    def not_yet(topic: str) -> Any:
        asked.append(topic)
        return None if topic == "NEW" else real(topic)

    monkeypatch.setattr(routes, "route", not_yet)  # the registration with NEW never arrives
    producer = TransactionProducer("TPG", servers["namesrv"])
    try:
        done = producer.send_in_transaction("NEW", b"new-topic", lambda r: State.COMMIT_MESSAGE)
        assert done.state is State.COMMIT_MESSAGE and done.send.status == "SEND_OK"
        assert done.send.broker_name == "broker-a" and done.send.broker_addr
    finally:
        producer.close()
    assert "NEW" in asked and "TBW102" in asked  # the half went through TBW102's route
    store = servers["proc"].broker.store
    wait_for(lambda: store.max_offset("NEW", done.send.queue_id) == 1, "the commit stored the message")
    assert store.read_queue("NEW", done.send.queue_id, 0, 1)["body"].to_pylist() == [b"new-topic"]
