"""The pull side over real sockets: a name server and a broker process (``rmqnet.broker.launch``)
on 127.0.0.1, driven by our own client (``rmqnet.client``) from the test's thread while the
servers run on an event loop of their own, as two processes would. Pulls (a long poll woken by a
send), commits and queried offsets, positions, queries by key and by id, and a stop answering a
held pull. Every wait is on an event the test causes; nothing sleeps."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import rmqlog
from rmqnet.broker import launch
from rmqnet.broker.config import BrokerConfig
from rmqnet.client import Admin, Producer, PullConsumer
from rmqnet.namesrv.process import NameServerProcess

from .brokerpull_support import HANG_GUARD_S, SEGMENT


@dataclass
class Servers:
    namesrv: str
    broker: str
    proc: launch.BrokerProcess
    loop: asyncio.AbstractEventLoop

    def on_loop(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the servers' loop and return its result."""

        async def call() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(HANG_GUARD_S)


@pytest.fixture
def servers(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Servers]:
    """Topic ``T`` with 4 queues; ``indirect`` parametrization adds topics (name: queues)."""
    root = tmp_path / "root"
    store_config = rmqlog.StoreConfig(mapped_file_size_commit_log=SEGMENT)
    with rmqlog.MessageStore.open(root, store_config) as store:  # the topics exist before the first registration
        store.create_topic("T", 4)
        for name, queues in getattr(request, "param", {}).items():
            store.put_topic(rmqlog.TopicConfig(name, queues, queues), persist=False)
        store.persist_topics()
    ready: dict[str, Any] = {}
    started, stop = threading.Event(), threading.Event()

    def serve() -> None:
        async def main() -> None:
            ns = NameServerProcess("127.0.0.1", 0)
            await ns.start()
            registered = asyncio.Event()
            register = ns.server.routes.register

            def watched(**kw: Any) -> Any:
                res = register(**kw)
                registered.set()
                return res

            ns.server.routes.register = watched  # type: ignore[method-assign]
            config = BrokerConfig(broker_name="broker-a", listen_port=0, namesrv_addr=ns.address, store=store_config)
            proc = launch.BrokerProcess(root, config)
            try:
                ready["broker"] = await proc.start()
                await registered.wait()
                ready.update(namesrv=ns.address, proc=proc, loop=asyncio.get_running_loop())
                started.set()
                await asyncio.get_running_loop().run_in_executor(None, stop.wait)
            finally:
                if not proc._stop.is_set():
                    proc.request_stop()
                await proc.wait_stopped(grace_s=1.0)
                await ns.stop()

        try:
            asyncio.run(main())
        finally:
            started.set()

    thread = threading.Thread(target=serve, name="servers")
    thread.start()
    assert started.wait(HANG_GUARD_S) and "loop" in ready, "the servers did not start"
    try:
        yield Servers(ready["namesrv"], ready["broker"], ready["proc"], ready["loop"])
    finally:
        stop.set()
        thread.join(HANG_GUARD_S)


def test_long_poll_woken_by_a_send_and_the_group_s_progress(servers: Servers) -> None:
    producer = Producer("PG", servers.namesrv)
    consumer = PullConsumer("CG", servers.namesrv)
    admin = Admin(servers.namesrv)
    holds = servers.proc.broker.holds  # type: ignore[union-attr]
    held = threading.Event()
    hold = holds.hold

    def watched_hold(*a: Any, **kw: Any) -> Any:
        fut = hold(*a, **kw)
        held.set()
        return fut

    holds.hold = watched_hold
    try:
        first = producer.send("T", b"first", tags="A", keys=["k1"], queue_id=0)
        # a long poll: the dispatcher makes the message readable a moment after SEND_OK
        got = consumer.pull("T", 0, 0, suspend_ms=60_000)
        assert got.status == "FOUND" and got.messages["body"].to_pylist() == [b"first"]
        assert got.next_begin_offset == 1
        held.clear()  # (that pull may have been held)

        with ThreadPoolExecutor(1) as pool:
            parked = pool.submit(consumer.pull, "T", 0, 1, suspend_ms=60_000, subscription="B")
            assert held.wait(HANG_GUARD_S), "the pull was not held"
            producer.send("T", b"not for B", tags="A", queue_id=0)
            second = producer.send("T", b"for B", tags="B", keys=["k2"], queue_id=0)
            woken = parked.result(HANG_GUARD_S)
        assert woken.status == "FOUND"
        assert woken.messages["body"].to_pylist() == [b"for B"]
        assert woken.next_begin_offset == 3

        consumer.commit("T", 0, 3)
        assert admin.query_offset(servers.broker, "CG", "T", 0) == 3
        servers.proc.broker.state.persist_all()  # type: ignore[union-attr]  # (its schedule: every 5 s)
        assert servers.proc.store.committed_offset("CG", "T", 0) == 3  # type: ignore[union-attr]
        assert admin.query_offset(servers.broker, "NewGroup", "T", 0) == 0  # Java: the queue still starts at 0

        assert admin.max_offset(servers.broker, "T", 0) == 3
        assert admin.min_offset(servers.broker, "T", 0) == 0
        earliest = admin.earliest_store_time(servers.broker, "T", 0)
        assert earliest > 0 and admin.search_offset(servers.broker, "T", 0, earliest) == 0

        by_key = admin.query_by_key("T", "k2")
        assert by_key["body"].to_pylist() == [b"for B"]
        by_id = admin.view_by_id(first.offset_msg_id)
        assert by_id["body"].to_pylist() == [b"first"]
        assert admin.view_by_id(second.offset_msg_id)["tags"].to_pylist() == ["B"]
    finally:
        for client in (producer, consumer, admin):
            client.close()


def test_a_stop_answers_a_held_pull(servers: Servers) -> None:
    consumer = PullConsumer("CG", servers.namesrv)
    holds = servers.proc.broker.holds  # type: ignore[union-attr]
    held = threading.Event()
    hold = holds.hold

    def watched_hold(*a: Any, **kw: Any) -> Any:
        fut = hold(*a, **kw)
        held.set()
        return fut

    holds.hold = watched_hold
    try:
        with ThreadPoolExecutor(1) as pool:
            parked = pool.submit(consumer.pull, "T", 2, 0, suspend_ms=60_000)
            assert held.wait(HANG_GUARD_S)
            servers.on_loop(servers.proc.request_stop)  # SIGTERM's first step
            answer = parked.result(HANG_GUARD_S)
        assert answer.status == "NO_NEW_MSG" and answer.next_begin_offset == 0
    finally:
        consumer.close()
