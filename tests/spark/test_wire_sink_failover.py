"""The wire sink across a master failover, in this process (no broker): the queue list keeps a
group whose master is gone, and a chunk for it waits for the group's next master, named by a
fresh route, within ``sendRetryTimeout``. The same across real hosts, Spark and a promoted
slave: tests/cluster/test_spark_hosts.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rmqnet.client import NoRouteError
from rmqnet.client.errors import BrokerError
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from rmqnet.remoting.route import PERM_READ, PERM_RW, BrokerData, QueueData, TopicRouteData
from spark_rmq import wire_sink
from spark_rmq.errors import RmqLogOptionError
from spark_rmq.options import SinkOptions


def route(masters: dict[str, str | None], perms: dict[str, int] | None = None) -> TopicRouteData:
    """Groups ``name -> master address`` (``None``: only its slave is registered), 2 queues each."""
    return TopicRouteData(
        [QueueData(name, 2, 2, (perms or {}).get(name, PERM_RW), 0) for name in sorted(masters, reverse=True)],
        [BrokerData("C", name, {0: addr, 1: f"{name}-slave:1"} if addr else {1: f"{name}-slave:1"})
         for name, addr in masters.items()])


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


class FakeProducer:
    """Answers routes from a script (one per ask, the last repeated) and sends by address."""

    def __init__(self, routes: list[TopicRouteData], dead: set[str], slaves: frozenset[str] = frozenset()) -> None:
        self.routes = routes
        self.dead = dead
        self.slaves = slaves  # addresses that answer a send as a slave does
        self.asked = 0
        self.sent: list[str] = []

    async def aroute(self, topic: str) -> TopicRouteData:
        self.asked += 1
        return self.routes[min(self.asked - 1, len(self.routes) - 1)]

    async def invoke(self, addr: str, cmd: RemotingCommand, ok: Any = ()) -> RemotingCommand:
        self.sent.append(addr)
        if addr in self.dead:
            raise ConnectionRefusedError(addr)
        if addr in self.slaves:
            raise BrokerError(ResponseCode.SERVICE_NOT_AVAILABLE, "service not available now...", addr, cmd.code)
        return cmd.reply(0, None, {})


def chunk(addr: str) -> wire_sink._Chunk:
    return wire_sink._Chunk("T", "b", addr, 0, False, b"", 1)


def send(p: FakeProducer, c: wire_sink._Chunk, retry_s: float) -> RemotingCommand:
    cmd = RemotingCommand(RequestCode.SEND_BATCH_MESSAGE)
    return asyncio.run(wire_sink._invoke(p, c, cmd, retry_s))  # type: ignore[arg-type]


def test_a_chunk_waits_for_the_group_s_next_master(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire_sink, "RETRY_PAUSE_S", 0.01)
    # the group had no master when the task routed; its slave is promoted two asks later
    p = FakeProducer([route({"b": None}), route({"b": None}), route({"b": "b-slave:1"})], dead=set())
    send(p, chunk(""), 5.0)
    assert p.sent == ["b-slave:1"] and p.asked == 3
    # the master dies under the send: the chunk goes to the one the route names next; while a
    # group is missing from the route altogether (its slave restarting), its last address is kept
    p = FakeProducer([route({"a": "a:1"}), route({"b": None}), route({"b": "b-new:1"})], dead={"b:1"})
    send(p, chunk("b:1"), 5.0)
    assert p.sent == ["b:1", "b:1", "b-new:1"]


def test_a_chunk_sent_to_what_is_now_a_slave_goes_to_the_group_s_master(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old master came back as a slave under the address the task's route named master:
    its SERVICE_NOT_AVAILABLE (nothing stored) sends the chunk to the master the route names now."""
    monkeypatch.setattr(wire_sink, "RETRY_PAUSE_S", 0.01)
    p = FakeProducer([route({"b": "b-new:1"})], dead=set(), slaves=frozenset({"b:1"}))
    send(p, chunk("b:1"), 5.0)
    assert p.sent == ["b:1", "b-new:1"]


def test_no_master_within_the_timeout_fails_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire_sink, "RETRY_PAUSE_S", 0.01)
    p = FakeProducer([route({"b": None})], dead=set())
    # (0.5 s of 0.01 s pauses: ~50 asks, so a loaded machine's stall cannot leave only two)
    with pytest.raises(NoRouteError, match="broker group 'b' has had no master for 0.5 s"):
        send(p, chunk(""), 0.5)
    assert p.sent == [] and p.asked > 2
    p = FakeProducer([route({"b": "b:1"})], dead={"b:1"})
    with pytest.raises(ConnectionRefusedError):
        send(p, chunk("b:1"), 0.1)


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

    async def aroute(self, topic: str) -> TopicRouteData:
        self.asked += 1
        return self.routes[min(self.asked - 1, len(self.routes) - 1)]


def queues(p: RouteOnly, topic: str = "T") -> tuple[tuple[str, int, str], ...]:
    return asyncio.run(wire_sink.topic_queues(p, topic)).queues  # type: ignore[arg-type]


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
    for other in ({"T": q(("a", 2))}, {"T": q(("a", 2), ("b", 3))}, {"U": q(("a", 2), ("b", 2))},
                  {"T": q(("a", 2), ("b", 2)), "U": q(("a", 1))}):
        assert wire_sink.layout_tag(other) != same
    assert len(same) == 8
