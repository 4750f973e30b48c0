"""The gRPC endpoint's routes across broker groups (rmqnet.broker.grpc_routes, grpc_service's
QueryRoute and QueryAssignment), as RocketMQ 5's proxy answers them in local mode: the name
server's route of the topic, each other group's queues at its master's host with this
endpoint's port. In process: a name server and two registered brokers, broker-a's endpoint
asked; and the route cache over a counted lookup on a manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker.broker import Broker
from rmqnet.broker.grpc_routes import EXPIRE_MS, REFRESH_MS, ClusterRoutes
from rmqnet.broker.grpc_server import GrpcEndpoint
from rmqnet.broker.registration import Registrar
from rmqnet.grpc.convert import Code
from rmqnet.grpc.v2 import definition_pb2 as pb
from rmqnet.grpc.v2 import service_pb2 as svc
from rmqnet.namesrv import NameServerProcess
from rmqnet.remoting.route import PERM_READ, BrokerData, QueueData, TopicRouteData
from wire.broker_helpers import make_broker
from wire.grpc_helpers import Client

NOW = 1_700_000_000_000
A_ADDR, B_ADDR = "127.0.0.1:10911", "127.0.0.2:10911"


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[rmqlog.MessageStore, rmqlog.MessageStore]]:
    a = rmqlog.MessageStore.open(tmp_path / "a", small_store_config(store_host=A_ADDR), clock=rmqlog.ManualClock(NOW))
    b = rmqlog.MessageStore.open(tmp_path / "b", small_store_config(store_host=B_ADDR), clock=rmqlog.ManualClock(NOW))
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _brokers(stores: tuple[rmqlog.MessageStore, rmqlog.MessageStore], namesrv: str) -> tuple[Broker, Broker]:
    a = make_broker(stores[0], clock=rmqlog.ManualClock(NOW), namesrv_addr=namesrv)
    b = make_broker(stores[1], clock=rmqlog.ManualClock(NOW), namesrv_addr=namesrv, broker_name="broker-b")
    b.address = B_ADDR
    a.topics.update(rmqlog.TopicConfig("BOTH", 4, 4))
    b.topics.update(rmqlog.TopicConfig("BOTH", 2, 2))
    a.topics.update(rmqlog.TopicConfig("ONLY_A", 2, 2))
    b.topics.update(rmqlog.TopicConfig("ONLY_B", 3, 3, perm=PERM_READ))
    return a, b


def _ask(a: Broker, b: Broker | None, calls: list[tuple[str, Any]]) -> tuple[list[Any], int]:
    """Register broker-a and broker-b (``b``) with an in-process name server, then make
    ``calls`` on broker-a's gRPC endpoint; their answers and the endpoint's port."""

    async def main() -> tuple[list[Any], int]:
        ns = NameServerProcess("127.0.0.1", 0)
        await ns.start()
        brokers = [x for x in (a, b) if x is not None]
        for x in brokers:
            x.config = x.config.replace(namesrv_addr=ns.address)
        registrars = [Registrar(x) for x in brokers]
        endpoint = GrpcEndpoint(a, "127.0.0.1", 0)
        try:
            for r in registrars:
                assert await r.register_all() == 1
            await endpoint.start()
            async with grpc.aio.insecure_channel(endpoint.address) as channel:
                c = Client(channel)
                return [await c.call(name, req) for name, req in calls], endpoint.port
        finally:
            await endpoint.stop(0)
            for r in registrars:
                await r.close()
            await ns.stop(0)

    return asyncio.run(main())


def _route(topic: str) -> tuple[str, Any]:
    return "QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name=topic))


def _assignment(topic: str) -> tuple[str, Any]:
    return "QueryAssignment", svc.QueryAssignmentRequest(topic=pb.Resource(name=topic), group=pb.Resource(name="G"))


def _queues(r: svc.QueryRouteResponse) -> list[tuple[str, int, int, str, int]]:
    return [
        (q.broker.name, q.broker.id, q.id, q.broker.endpoints.addresses[0].host, q.broker.endpoints.addresses[0].port)
        for q in r.message_queues
    ]


def test_a_topic_on_two_groups_lists_both_groups_queues_each_at_its_masters_endpoint(stores: Any) -> None:
    a, b = _brokers(stores, "127.0.0.1:1")
    (both, only_a, only_b, unknown, assign_both, assign_b), port = _ask(
        a,
        b,
        [
            _route("BOTH"),
            _route("ONLY_A"),
            _route("ONLY_B"),
            _route("NOPE"),
            _assignment("BOTH"),
            _assignment("ONLY_B"),
        ],
    )
    assert both.status.code == Code.OK
    assert _queues(both) == (
        [("broker-a", 0, q, "127.0.0.1", port) for q in range(4)]
        + [("broker-b", 0, q, "127.0.0.2", port) for q in range(2)]
    )
    assert {q.permission for q in both.message_queues} == {pb.READ_WRITE}
    assert list(both.message_queues[-1].accept_message_types) == [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
    # a topic on this broker only answers as a lone broker does; one on the other group only: its queues
    assert _queues(only_a) == [("broker-a", 0, q, "127.0.0.1", port) for q in range(2)]
    assert _queues(only_b) == [("broker-b", 0, q, "127.0.0.2", port) for q in range(3)]
    assert {q.permission for q in only_b.message_queues} == {pb.READ}
    assert unknown.status.code == Code.TOPIC_NOT_FOUND and not unknown.message_queues
    # one assignment per group (queue -1), each at its own endpoint, as the proxy assigns a push consumer
    assert [
        (
            x.message_queue.broker.name,
            x.message_queue.id,
            x.message_queue.permission,
            x.message_queue.broker.endpoints.addresses[0].host,
        )
        for x in assign_both.assignments
    ] == [("broker-a", -1, pb.READ_WRITE, "127.0.0.1"), ("broker-b", -1, pb.READ_WRITE, "127.0.0.2")]
    assert [(x.message_queue.broker.name, x.message_queue.permission) for x in assign_b.assignments] == [
        ("broker-b", pb.READ)
    ]


def test_without_the_other_groups_registration_only_this_brokers_queues(stores: Any) -> None:
    a, _ = _brokers(stores, "127.0.0.1:1")
    (both, only_b, bad), port = _ask(a, None, [_route("BOTH"), _route("ONLY_B"), _assignment("bad topic!")])
    assert _queues(both) == [("broker-a", 0, q, "127.0.0.1", port) for q in range(4)]
    assert only_b.status.code == Code.TOPIC_NOT_FOUND
    assert bad.status.code == Code.ILLEGAL_TOPIC


def test_no_name_server_answering_leaves_this_brokers_own_route(stores: Any) -> None:
    a, _ = _brokers(stores, "127.0.0.1:1")

    async def main() -> tuple[svc.QueryRouteResponse, svc.QueryRouteResponse]:
        endpoint = GrpcEndpoint(a, "127.0.0.1", 0)  # (namesrvAddr 127.0.0.1:1: refused)
        await endpoint.start()
        try:
            async with grpc.aio.insecure_channel(endpoint.address) as channel:
                c = Client(channel)
                return await c.call(*_route("BOTH")), await c.call(*_route("ONLY_B"))
        finally:
            await endpoint.stop(0)

    both, only_b = asyncio.run(main())
    assert [q.broker.name for q in both.message_queues] == ["broker-a"] * 4
    assert only_b.status.code == Code.TOPIC_NOT_FOUND


# ------------------------------------------------------------------------- the cache


class Lookups:
    """A lookup that answers ``routes[topic]`` (raising what is there), counting its calls."""

    def __init__(self) -> None:
        self.routes: dict[str, TopicRouteData | None | Exception] = {}
        self.calls: list[str] = []
        self.gate: asyncio.Event | None = None

    async def __call__(self, topic: str) -> TopicRouteData | None:
        self.calls.append(topic)
        if self.gate is not None:
            await self.gate.wait()
        got = self.routes.get(topic)
        if isinstance(got, Exception):
            raise got
        return got


def _r(n: int) -> TopicRouteData:
    return TopicRouteData([QueueData("broker-b", n, n, 6)], [BrokerData("C", "broker-b", {0: B_ADDR})])


def test_routes_are_looked_up_once_refreshed_after_20_s_and_kept_when_a_refresh_fails() -> None:
    clock = rmqlog.ManualClock(NOW)
    look = Lookups()
    routes = ClusterRoutes(look, clock)
    look.routes["T"] = _r(1)

    async def main() -> None:
        look.gate = asyncio.Event()
        first = [asyncio.ensure_future(routes.route("T")) for _ in range(3)]
        await asyncio.sleep(0)
        look.gate.set()
        assert [r.queue_datas[0].read_queue_nums for r in await asyncio.gather(*first) if r] == [1, 1, 1]
        assert look.calls == ["T"]  # three requests, one lookup
        look.gate = None
        look.routes["T"] = _r(2)
        clock.advance(REFRESH_MS - 1)
        assert (await routes.route("T")).queue_datas[0].read_queue_nums == 1 and look.calls == ["T"]  # type: ignore[union-attr]
        clock.advance(1)
        # due: answered from the cache now, looked up behind it
        assert (await routes.route("T")).queue_datas[0].read_queue_nums == 1  # type: ignore[union-attr]
        await asyncio.sleep(0)
        assert look.calls == ["T", "T"]
        assert (await routes.route("T")).queue_datas[0].read_queue_nums == 2  # type: ignore[union-attr]
        look.routes["T"] = OSError("refused")
        clock.advance(REFRESH_MS)
        await routes.route("T")
        await asyncio.sleep(0)
        assert (await routes.route("T")).queue_datas[0].read_queue_nums == 2  # type: ignore[union-attr]
        assert len(look.calls) == 3

    asyncio.run(main())


def test_an_unknown_topic_is_cached_a_failed_first_lookup_is_not() -> None:
    clock = rmqlog.ManualClock(NOW)
    look = Lookups()
    routes = ClusterRoutes(look, clock)
    look.routes["DOWN"] = OSError("no name server")

    async def main() -> None:
        assert await routes.route("NOPE") is None and await routes.route("NOPE") is None
        assert await routes.route("DOWN") is None
        look.routes["DOWN"] = _r(3)
        assert (await routes.route("DOWN")).queue_datas[0].read_queue_nums == 3  # type: ignore[union-attr]
        assert look.calls == ["NOPE", "DOWN", "DOWN"]

    asyncio.run(main())


def test_topics_not_asked_for_300_s_are_dropped_and_the_least_recent_past_the_bound() -> None:
    clock = rmqlog.ManualClock(NOW)
    look = Lookups()
    routes = ClusterRoutes(look, clock, max_topics=2)

    async def main() -> None:
        for t in ("A", "B"):
            look.routes[t] = _r(1)
            await routes.route(t)
        clock.advance(1000)
        await routes.route("A")  # B is now the least recently asked
        look.routes["C"] = _r(1)
        await routes.route("C")
        assert len(routes) == 2
        await routes.route("A")
        assert look.calls == ["A", "B", "C"]
        await routes.route("B")  # dropped: looked up again
        assert look.calls == ["A", "B", "C", "B"]
        clock.advance(EXPIRE_MS)
        await routes.route("A")  # everything expired: A looked up again, the others dropped
        assert look.calls[-1] == "A" and len(routes) == 1

    asyncio.run(main())


def test_a_group_without_a_master_and_this_brokers_own_group_in_the_route_are_not_peers(stores: Any) -> None:
    from rmqnet.broker.grpc_service import MessagingService

    a, _ = _brokers(stores, "127.0.0.1:1")
    route = TopicRouteData(
        [QueueData("broker-a", 8, 8, 6), QueueData("broker-b", 2, 2, 6), QueueData("broker-c", 2, 2, 6)],
        [
            BrokerData("C", "broker-a", {0: "10.0.0.1:10911"}),
            BrokerData("C", "broker-b", {0: B_ADDR, 1: "10.0.0.9:1"}),
            BrokerData("C", "broker-c", {1: "10.0.0.3:10911"}),
        ],
    )
    look = Lookups()
    look.routes["BOTH"] = route
    service = MessagingService(a, "127.0.0.1", 8081, routes=ClusterRoutes(look, rmqlog.ManualClock(NOW)))
    r = asyncio.run(service.query_route(svc.QueryRouteRequest(topic=pb.Resource(name="BOTH")), None))
    assert _queues(r) == (
        [("broker-a", 0, q, "127.0.0.1", 8081) for q in range(4)]
        + [("broker-b", 0, q, "127.0.0.2", 8081) for q in range(2)]
    )


def test_a_send_is_served_by_the_broker_it_reaches_never_forwarded(stores: Any) -> None:
    """As the proxy in local mode: a send for a topic only the other group holds is
    ``TOPIC_NOT_FOUND`` here (the client sends to that group's endpoint); one for a topic on both
    is stored here, whatever group the route offered."""
    a, b = _brokers(stores, "127.0.0.1:1")

    def send(topic: str) -> tuple[str, Any]:
        sp = pb.SystemProperties(message_id="0A0000010000000000000000000000B1", message_type=pb.NORMAL)
        return "SendMessage", svc.SendMessageRequest(
            messages=[pb.Message(topic=pb.Resource(name=topic), body=b"x", system_properties=sp)]
        )

    (only_b, both), _ = _ask(a, b, [send("ONLY_B"), send("BOTH")])
    assert only_b.status.code == Code.TOPIC_NOT_FOUND
    assert both.status.code == Code.OK
    stores[0].dispatch()
    assert "ONLY_B" not in stores[0].topics()
    assert sum(stores[0].read_queue("BOTH", q, 0, 100).num_rows for q in range(4)) == 1
