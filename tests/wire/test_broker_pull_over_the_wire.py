"""The pull side over real sockets: a name server and a broker process (``rmqnet.broker.launch``)
on 127.0.0.1, driven by our own client (``rmqnet.client``) from the test's thread while the
servers run on an event loop of their own, as two processes would. Pulls (a long poll woken by a
send), commits and queried offsets, positions, queries by key and by id, and a stop answering a
held pull. Every wait is on an event the test causes; nothing sleeps."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import rmqlog
from rmqnet.broker import launch
from rmqnet.broker.config import BrokerConfig
from rmqnet.client import Admin, Producer, PullConsumer

from .broker_helpers import LiveCluster, live_cluster
from .brokerpull_support import HANG_GUARD_S, SEGMENT


class Servers(LiveCluster):
    """The cluster of one broker, ``broker-a``."""

    @property
    def broker(self) -> str:
        return self.addresses["broker-a"]

    @property
    def proc(self) -> launch.BrokerProcess:
        return self.procs["broker-a"]


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
    config = BrokerConfig(broker_name="broker-a", listen_port=0, store=store_config)
    with live_cluster({"broker-a": (root, config)}, "servers") as live:
        yield Servers(live.namesrv, live.procs, live.addresses, live.loop, live.ns)


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
