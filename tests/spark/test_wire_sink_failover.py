"""The wire sink across a master failover, in this process (no broker): the queue list keeps a
group whose master is gone, and a chunk for it is sent to its queue with the address the task
routed over and ``sendRetryTimeout`` as the client's wait for the group's next master
(the wait itself: tests/wire/test_producer_encoded_batch.py). The same across real hosts, Spark
and a promoted slave: tests/cluster/test_spark_hosts.py."""

from __future__ import annotations

import pytest

from rmqnet.client import SendResult
from rmqnet.remoting.route import PERM_READ, PERM_RW, BrokerData, QueueData, TopicRouteData
from spark_rmq import wire_sink
from spark_rmq.errors import RmqLogOptionError
from spark_rmq.options import SinkOptions


def route(masters: dict[str, str | None], perms: dict[str, int] | None = None) -> TopicRouteData:
    """Groups ``name -> master address`` (``None``: only its slave is registered), 2 queues each."""
    return TopicRouteData(
        [QueueData(name, 2, 2, (perms or {}).get(name, PERM_RW), 0) for name in sorted(masters, reverse=True)],
        [
            BrokerData("C", name, {0: addr, 1: f"{name}-slave:1"} if addr else {1: f"{name}-slave:1"})
            for name, addr in masters.items()
        ],
    )


def test_a_group_without_a_master_keeps_its_queues() -> None:
    up = wire_sink._writable(route({"b": "b:1", "a": "a:1"}), False)
    down = wire_sink._writable(route({"b": None, "a": "a:1"}), False)
    assert up == [("a", 0, "a:1"), ("a", 1, "a:1"), ("b", 0, "b:1"), ("b", 1, "b:1")]
    assert [q[:2] for q in down] == [q[:2] for q in up]  # the same list: rows route the same
    assert down[2:] == [("b", 0, ""), ("b", 1, "")]  # (no address: its chunks wait for a master)
    # a group that is not writable, or that no broker serves, is not in the list
    assert wire_sink._writable(route({"b": "b:1", "a": "a:1"}, {"b": PERM_READ}), False) == up[:2]
    gone = route({"a": "a:1"})
    gone.queue_datas.append(QueueData("b", 2, 2, PERM_RW, 0))
    assert wire_sink._writable(gone, False) == up[:2]


class RecordingProducer:
    """Records each pre-encoded batch the sink sends; answers replays as duplicates."""

    def __init__(self, duplicates: set[int]) -> None:
        self.duplicates = duplicates
        self.calls: list[tuple[str, str, int, str | None, tuple[str, int] | None, float]] = []

    def send_encoded_batch(
        self,
        topic: str,
        body: bytes,
        *,
        broker_name: str,
        queue_id: int,
        addr: str | None,
        via_default: bool,
        marker: tuple[str, int] | None,
        master_wait_s: float,
    ) -> SendResult:
        assert marker is not None
        self.calls.append((topic, broker_name, queue_id, addr, marker, master_wait_s))
        return SendResult("SEND_OK", "", "", queue_id, 0, broker_name, addr or "", marker[1] in self.duplicates)


def test_a_task_s_chunks_go_to_their_queues_with_their_markers_and_wait() -> None:
    """Each chunk to the queue and address the task routed over, with the marker's next
    sequence and the option's wait for a master (the wait itself is the client's:
    tests/wire/test_producer_encoded_batch.py); the rows of duplicates are not counted."""
    chunks = [
        wire_sink._Chunk("T", "b", "", 0, False, b"x", 3),
        wire_sink._Chunk("T", "b", "b:1", 1, False, b"y", 4),
        wire_sink._Chunk("U", "b", "b:1", 0, True, b"z", 5),
    ]
    p = RecordingProducer(duplicates={11})
    assert wire_sink._send_chunks(p, chunks, "w/0/abcd", 10, 2.5) == 3 + 5  # type: ignore[arg-type]
    assert p.calls == [
        ("T", "b", 0, "", ("w/0/abcd", 10), 2.5),
        ("T", "b", 1, "b:1", ("w/0/abcd", 11), 2.5),
        ("U", "b", 0, "b:1", ("w/0/abcd", 12), 2.5),
    ]


def test_send_retry_timeout_option() -> None:
    assert SinkOptions.parse({"nameServer": "h:1"}).send_retry_s == wire_sink.RETRY_S == 30.0
    assert SinkOptions.parse({"nameServer": "h:1", "sendRetryTimeout": "2m"}).send_retry_s == 120.0
    with pytest.raises(RmqLogOptionError, match="only applies with nameServer") as err:
        SinkOptions.parse({"path": "/p", "sendRetryTimeout": "5s"})
    assert err.value.option == "sendRetryTimeout"
    with pytest.raises(RmqLogOptionError, match="duration"):
        SinkOptions.parse({"nameServer": "h:1", "sendRetryTimeout": "soon"})


class RouteOnly:
    """A producer that only answers routes (one per ask, the last repeated)."""

    def __init__(self, routes: list[TopicRouteData], namesrv: str) -> None:
        self.routes = routes
        self.namesrv_addrs = [namesrv]
        self.asked = 0

    def route(self, topic: str) -> TopicRouteData:
        self.asked += 1
        return self.routes[min(self.asked - 1, len(self.routes) - 1)]


def queues(p: RouteOnly, topic: str = "T") -> tuple[tuple[str, int, str], ...]:
    return wire_sink.topic_queues(p, topic).queues  # type: ignore[arg-type]


def test_a_group_gone_from_the_route_keeps_the_queues_this_process_saw(request: pytest.FixtureRequest) -> None:
    """Between a slave's stop and its start as master no broker of the group is registered: the
    name server drops its queues. A process that saw the group keeps them (its chunks wait)."""
    namesrv = f"{request.node.name}:1"  # (the process's memory is per name servers and topic)
    both, without_b = route({"b": "b:1", "a": "a:1"}), route({"a": "a:1"})
    p = RouteOnly([both, without_b, both], namesrv)
    first = queues(p)
    during = queues(p)
    assert [q[:2] for q in during] == [q[:2] for q in first]  # routed the same way
    assert during[2:] == (("b", 0, ""), ("b", 1, ""))  # waiting for a master
    assert queues(p) == first
    fresh = RouteOnly([without_b], f"{namesrv}-other")  # a process that never saw b
    assert [q[0] for q in queues(fresh)] == ["a", "a"]


def test_the_writer_name_carries_the_layout_the_task_routed_over() -> None:
    """Two attempts over the same layout share the markers (a replay is a duplicate); over
    another layout (a group missing, added, resized) they are two writers: stored, never
    skipped as duplicates of other rows."""

    def q(*groups: tuple[str, int], addr: str = "x:1") -> wire_sink.Queues:
        return wire_sink.Queues(tuple((b, i, addr) for b, n in groups for i in range(n)), False)

    same = wire_sink.layout_tag({"T": q(("a", 2), ("b", 2))})
    assert wire_sink.layout_tag({"T": q(("a", 2), ("b", 2), addr="")}) == same  # addresses do not count
    for other in (
        {"T": q(("a", 2))},
        {"T": q(("a", 2), ("b", 3))},
        {"U": q(("a", 2), ("b", 2))},
        {"T": q(("a", 2), ("b", 2)), "U": q(("a", 1))},
    ):
        assert wire_sink.layout_tag(other) != same
    assert len(same) == 8
