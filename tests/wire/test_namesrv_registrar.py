"""The broker's Registrar (rmqnet.broker.registration) against name server cores called
directly (no sockets): registration with every name server, its period and data version, a
name server that is down or refuses, unregistration on stop."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from rmqlog import ManualClock, TopicConfig
from rmqnet.broker.registration import REGISTER_PERIOD_MS, Registrar, parse_namesrv_addr
from rmqnet.namesrv import NameServer
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from rmqnet.remoting.register import DataVersion, TopicConfigData

NS1, NS2 = "127.0.0.1:9876", "127.0.0.1:9877"


class Wire:
    """Name server cores by address; ``down`` ones raise as a refused connection does."""

    def __init__(self, clock: ManualClock, *addrs: str) -> None:
        self.clock = clock
        self.servers = {a: NameServer() for a in addrs}
        self.down: set[str] = set()
        self.sent: list[tuple[str, RemotingCommand]] = []

    async def invoke(self, addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
        self.sent.append((addr, req))
        if addr in self.down:
            raise ConnectionRefusedError(111, "Connection refused")
        res = self.servers[addr].handle(req, self.clock.wall_ms(), conn=("broker", addr))
        assert res is not None
        return res

    def route(self, addr: str, topic: str) -> RemotingCommand:
        res = self.servers[addr].handle(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1,
                                                        ext_fields={"topic": topic}), self.clock.wall_ms())
        assert res is not None
        return res


def _registrar(wire: Wire, topics: dict[str, object], *, namesrv: str = f"{NS1};{NS2}", broker_id: int = 0,
               addr: str = "127.0.0.1:10911", compressed: bool = False) -> Registrar:
    return Registrar(cluster_name="DefaultCluster", broker_name="broker-a", broker_id=broker_id, broker_addr=addr,
                     ha_server_addr="127.0.0.1:10912", namesrv_addr=namesrv, topics=lambda: topics,
                     invoke=wire.invoke, compressed=compressed)


def test_it_registers_with_every_name_server_at_once_then_every_period() -> None:
    clock = ManualClock(1_700_000_000_000)
    wire = Wire(clock, NS1, NS2)
    topics = {"T1": TopicConfig("T1", 4, 4), "TBW102": TopicConfig("TBW102", 8, 8, 7)}
    r = _registrar(wire, topics)
    assert asyncio.run(r.run_once(clock.wall_ms())) == 2
    for ns in (NS1, NS2):
        route = json.loads(wire.route(ns, "T1").body_bytes())
        assert route["brokerDatas"] == [{"cluster": "DefaultCluster", "brokerName": "broker-a",
                                         "brokerAddrs": {"0": "127.0.0.1:10911"}}]
        assert json.loads(wire.route(ns, "TBW102").body_bytes())["queueDatas"][0]["perm"] == 7
    assert len(wire.sent) == 2
    clock.advance(REGISTER_PERIOD_MS - 1)
    assert asyncio.run(r.run_once(clock.wall_ms())) is None and len(wire.sent) == 2  # not due
    clock.advance(1)
    assert asyncio.run(r.run_once(clock.wall_ms())) == 2 and len(wire.sent) == 4
    assert r.next_due_ms == clock.wall_ms() + REGISTER_PERIOD_MS


def test_request_now_registers_before_the_period_with_a_new_data_version() -> None:
    clock = ManualClock(1_000_000)
    wire = Wire(clock, NS1)
    topics: dict[str, object] = {"T1": TopicConfig("T1")}
    r = _registrar(wire, topics, namesrv=NS1)
    asyncio.run(r.run_once(clock.wall_ms()))
    v1 = wire.servers[NS1].routes.live["127.0.0.1:10911"].data_version
    assert v1 == DataVersion(1_000_000, 0)
    clock.advance(5)
    topics["%RETRY%G1"] = TopicConfigData("%RETRY%G1", 1, 1)  # a consumer group's retry topic was created
    r.request_now()
    assert asyncio.run(r.run_once(clock.wall_ms())) == 1
    assert wire.servers[NS1].routes.live["127.0.0.1:10911"].data_version == DataVersion(1_000_005, 1)
    assert json.loads(wire.route(NS1, "%RETRY%G1").body_bytes())["queueDatas"][0]["readQueueNums"] == 1
    clock.advance(REGISTER_PERIOD_MS)
    asyncio.run(r.run_once(clock.wall_ms()))  # nothing changed: the same version
    assert wire.servers[NS1].routes.live["127.0.0.1:10911"].data_version == DataVersion(1_000_005, 1)


def test_a_name_server_that_is_down_is_logged_and_retried_next_period(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(1_000_000)
    wire = Wire(clock, NS1, NS2)
    wire.down.add(NS2)
    r = _registrar(wire, {"T1": TopicConfig("T1")})
    with caplog.at_level(logging.WARNING, "rmqnet.broker.registration"):
        assert asyncio.run(r.run_once(clock.wall_ms())) == 1
    assert f"cannot register with name server {NS2}: ConnectionRefusedError" in caplog.text
    assert wire.route(NS1, "T1").code == ResponseCode.SUCCESS
    assert wire.route(NS2, "T1").code == ResponseCode.TOPIC_NOT_EXIST
    wire.down.clear()
    clock.advance(REGISTER_PERIOD_MS)
    assert asyncio.run(r.run_once(clock.wall_ms())) == 2
    assert wire.route(NS2, "T1").code == ResponseCode.SUCCESS


def test_a_refusal_is_logged_with_its_code_and_remark(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(1_000_000)

    async def refuse(addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
        return req.reply(ResponseCode.SYSTEM_ERROR, "crc32 not match")

    r = Registrar(cluster_name="c", broker_name="b", broker_id=0, broker_addr="127.0.0.1:1", ha_server_addr="",
                  namesrv_addr=NS1, topics=lambda: [], invoke=refuse)
    with caplog.at_level(logging.WARNING, "rmqnet.broker.registration"):
        assert asyncio.run(r.run_once(clock.wall_ms())) == 0
    assert f"name server {NS1} refused to register it: code 1, crc32 not match" in caplog.text
    assert r.results == {}


def test_the_request_carries_javas_header_and_a_checked_body() -> None:
    clock = ManualClock(1_000_000)
    wire = Wire(clock, NS1)
    r = _registrar(wire, {"T1": TopicConfig("T1")}, namesrv=NS1, compressed=True)
    asyncio.run(r.run_once(clock.wall_ms()))
    (_, req), = wire.sent
    assert req.code == RequestCode.REGISTER_BROKER
    assert set(req.ext_fields) == {"brokerName", "brokerAddr", "clusterName", "haServerAddr", "brokerId",
                                   "compressed", "bodyCrc32"}
    assert req.ext_fields["compressed"] is True and req.ext_fields["bodyCrc32"] != 0
    assert wire.route(NS1, "T1").code == ResponseCode.SUCCESS  # the compressed form was read


def test_a_slave_learns_its_masters_addresses() -> None:
    clock = ManualClock(1_000_000)
    wire = Wire(clock, NS1)
    master = _registrar(wire, {"T1": TopicConfig("T1")}, namesrv=NS1)
    slave = _registrar(wire, {"T1": TopicConfig("T1")}, namesrv=NS1, broker_id=1, addr="127.0.0.1:10921")
    asyncio.run(master.run_once(clock.wall_ms()))
    asyncio.run(slave.run_once(clock.wall_ms()))
    assert slave.results[NS1].master_addr == "127.0.0.1:10911"
    assert slave.results[NS1].ha_server_addr == "127.0.0.1:10912"
    assert master.results[NS1].master_addr is None


def test_unregister_on_stop_drops_the_broker_and_survives_a_name_server_down() -> None:
    clock = ManualClock(1_000_000)
    wire = Wire(clock, NS1, NS2)
    r = _registrar(wire, {"T1": TopicConfig("T1")})
    asyncio.run(r.run_once(clock.wall_ms()))
    wire.down.add(NS2)
    assert asyncio.run(r.unregister_all()) == 1
    assert wire.route(NS1, "T1").code == ResponseCode.TOPIC_NOT_EXIST
    assert wire.servers[NS1].routes.live == {}


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:9876", ["127.0.0.1:9876"]),
    (" 127.0.0.1:9876; 10.0.0.2:9877 ;", ["127.0.0.1:9876", "10.0.0.2:9877"]),
    ("", []),
])
def test_namesrv_addr_is_split_on_semicolons(text: str, expected: list[str]) -> None:
    assert parse_namesrv_addr(text) == expected


@pytest.mark.parametrize("text", ["127.0.0.1", "host:", ":9876", "h:99999", "h:x"])
def test_a_namesrv_addr_without_a_port_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not host:port"):
        parse_namesrv_addr(text)


def test_serve_registers_at_once_on_request_and_unregisters_when_stopped() -> None:
    clock = ManualClock(1_000_000)
    wire = Wire(clock, NS1)
    topics: dict[str, object] = {"T1": TopicConfig("T1")}

    async def scenario() -> None:
        sent = asyncio.Event()
        inner = wire.invoke

        async def invoke(addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
            res = await inner(addr, req, timeout_s)
            sent.set()
            return res

        r = _registrar(wire, topics, namesrv=NS1)
        r.invoke = invoke
        stop = asyncio.Event()
        task = asyncio.ensure_future(r.serve(clock, stop))
        await sent.wait()  # the registration at start
        assert [req.code for _, req in wire.sent] == [RequestCode.REGISTER_BROKER]
        sent.clear()
        topics["%RETRY%G"] = TopicConfigData("%RETRY%G", 1, 1)
        r.request_now()  # no time passes: only the request wakes it
        await sent.wait()
        assert wire.route(NS1, "%RETRY%G").code == ResponseCode.SUCCESS
        stop.set()
        await task
        assert [req.code for _, req in wire.sent] == [RequestCode.REGISTER_BROKER, RequestCode.REGISTER_BROKER,
                                                      RequestCode.UNREGISTER_BROKER]
        assert wire.servers[NS1].routes.live == {}

    asyncio.run(scenario())
