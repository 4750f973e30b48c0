"""The broker's Registrar (rmqnet.broker.registration) against name server cores called
directly (no sockets), over a stand-in broker: registration with every name server, its
period, a topic change registered at the next round, a name server that is down or refuses,
unregistration on close."""

from __future__ import annotations

import asyncio
import json
import logging
from types import SimpleNamespace
from typing import Any

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
        res = self.servers[addr].handle(
            RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, ext_fields={"topic": topic}), self.clock.wall_ms()
        )
        assert res is not None
        return res


class Topics:
    """The broker's TopicManager as the registrar sees it: ``all()`` and ``data_version``."""

    def __init__(self, *topics: Any) -> None:
        self.table = {t.topic_name: t for t in topics}
        self.data_version = {"counter": 0, "timestamp": 1_000}

    def all(self) -> dict[str, Any]:
        return dict(self.table)

    def add(self, t: Any) -> None:
        self.table[t.topic_name] = t
        self.data_version = {"counter": self.data_version["counter"] + 1, "timestamp": 2_000}


def _broker(
    topics: Topics,
    *,
    namesrv: str = f"{NS1};{NS2}",
    broker_id: int = 0,
    addr: str = "127.0.0.1:10911",
    period: int = REGISTER_PERIOD_MS,
) -> Any:
    config = SimpleNamespace(
        broker_cluster_name="DefaultCluster",
        broker_name="broker-a",
        broker_id=broker_id,
        namesrv_addr=namesrv,
        register_name_server_period=period,
        register_broker_timeout_mills=6000,
    )
    return SimpleNamespace(config=config, address=addr, topics=topics)


def _round(r: Registrar, now_ms: int) -> int | None:
    """One service round, on a loop; what the registration it started returned, if any."""

    async def go() -> int | None:
        task = r.run_once(now_ms)
        return None if task is None else await task

    return asyncio.run(go())


def test_it_registers_with_every_name_server_at_the_first_round_then_every_period() -> None:
    clock = ManualClock(1_700_000_000_000)
    wire = Wire(clock, NS1, NS2)
    r = Registrar(_broker(Topics(TopicConfig("T1", 4, 4), TopicConfig("TBW102", 8, 8, 7))), invoke=wire.invoke)
    assert _round(r, clock.wall_ms()) == 2
    for ns in (NS1, NS2):
        route = json.loads(wire.route(ns, "T1").body_bytes())
        assert route["brokerDatas"] == [
            {"cluster": "DefaultCluster", "brokerName": "broker-a", "brokerAddrs": {"0": "127.0.0.1:10911"}}
        ]
        assert json.loads(wire.route(ns, "TBW102").body_bytes())["queueDatas"][0]["perm"] == 7
        assert wire.servers[ns].routes.live["127.0.0.1:10911"].data_version == DataVersion(1_000, 0)
    assert len(wire.sent) == 2
    clock.advance(REGISTER_PERIOD_MS - 1)
    assert _round(r, clock.wall_ms()) is None and len(wire.sent) == 2  # not due
    clock.advance(1)
    assert _round(r, clock.wall_ms()) == 2 and len(wire.sent) == 4
    assert r.next_due_ms == clock.wall_ms() + REGISTER_PERIOD_MS


def test_a_topic_change_is_registered_at_the_next_round_with_its_version() -> None:
    clock = ManualClock(1_000_000)
    wire = Wire(clock, NS1)
    topics = Topics(TopicConfig("T1"))
    r = Registrar(_broker(topics, namesrv=NS1), invoke=wire.invoke)
    _round(r, clock.wall_ms())
    clock.advance(5)
    assert _round(r, clock.wall_ms()) is None  # nothing changed, not due
    topics.add(TopicConfigData("%RETRY%G1", 1, 1))  # a consumer group's retry topic was created
    assert _round(r, clock.wall_ms()) == 1
    assert wire.servers[NS1].routes.live["127.0.0.1:10911"].data_version == DataVersion(2_000, 1)
    assert json.loads(wire.route(NS1, "%RETRY%G1").body_bytes())["queueDatas"][0]["readQueueNums"] == 1
    r.request_now()
    assert _round(r, clock.wall_ms()) == 1  # requested: registers although nothing is due


def test_the_period_is_clamped_as_java_clamps_it() -> None:
    wire = Wire(ManualClock(0), NS1)
    assert Registrar(_broker(Topics(), period=1000), invoke=wire.invoke).period_ms == 10_000
    assert Registrar(_broker(Topics(), period=600_000), invoke=wire.invoke).period_ms == 60_000


def test_a_name_server_that_is_down_is_logged_and_retried_next_period(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(1_000_000)
    wire = Wire(clock, NS1, NS2)
    wire.down.add(NS2)
    r = Registrar(_broker(Topics(TopicConfig("T1"))), invoke=wire.invoke)
    with caplog.at_level(logging.WARNING, "rmqnet.broker.registration"):
        assert _round(r, clock.wall_ms()) == 1
    assert f"cannot register with name server {NS2}: ConnectionRefusedError" in caplog.text
    assert wire.route(NS1, "T1").code == ResponseCode.SUCCESS
    assert wire.route(NS2, "T1").code == ResponseCode.TOPIC_NOT_EXIST
    wire.down.clear()
    assert _round(r, clock.wall_ms()) is None  # not before the period
    clock.advance(REGISTER_PERIOD_MS)
    assert _round(r, clock.wall_ms()) == 2
    assert wire.route(NS2, "T1").code == ResponseCode.SUCCESS


def test_a_refusal_is_logged_with_its_code_and_remark(caplog: pytest.LogCaptureFixture) -> None:
    async def refuse(addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
        return req.reply(ResponseCode.SYSTEM_ERROR, "crc32 not match")

    r = Registrar(_broker(Topics(), namesrv=NS1), invoke=refuse)
    with caplog.at_level(logging.WARNING, "rmqnet.broker.registration"):
        assert _round(r, 0) == 0
    assert f"name server {NS1} refused to register it: code 1, crc32 not match" in caplog.text
    assert r.results == {}


def test_one_registration_at_a_time() -> None:
    calls: list[str] = []

    async def scenario() -> None:
        release = asyncio.Event()

        async def slow(addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
            calls.append(addr)
            await release.wait()
            return req.reply(ResponseCode.SUCCESS)

        r = Registrar(_broker(Topics(), namesrv=NS1), invoke=slow)
        task = r.run_once(0)
        assert task is not None
        r.request_now()
        assert r.run_once(REGISTER_PERIOD_MS * 2) is None  # one is still in flight
        release.set()
        assert await task == 1
        assert calls == [NS1]

    asyncio.run(scenario())


@pytest.mark.parametrize("compressed", [False, True])
def test_the_request_carries_javas_header_and_a_checked_body(compressed: bool) -> None:
    clock = ManualClock(1_000_000)
    wire = Wire(clock, NS1)
    r = Registrar(_broker(Topics(TopicConfig("T1")), namesrv=NS1), invoke=wire.invoke, compressed=compressed)
    _round(r, clock.wall_ms())
    ((_, req),) = wire.sent
    assert req.code == RequestCode.REGISTER_BROKER
    assert req.ext_fields["haServerAddr"] == "127.0.0.1:10912"
    assert set(req.ext_fields) == {
        "brokerName",
        "brokerAddr",
        "clusterName",
        "haServerAddr",
        "brokerId",
        "compressed",
        "bodyCrc32",
    }
    # (as Java writes extFields: every value a string)
    assert req.ext_fields["compressed"] == str(compressed).lower() and req.ext_fields["bodyCrc32"] != "0"
    assert wire.route(NS1, "T1").code == ResponseCode.SUCCESS


def test_a_slave_learns_its_masters_addresses() -> None:
    clock = ManualClock(1_000_000)
    wire = Wire(clock, NS1)
    master = Registrar(_broker(Topics(TopicConfig("T1")), namesrv=NS1), invoke=wire.invoke)
    slave = Registrar(
        _broker(Topics(TopicConfig("T1")), namesrv=NS1, broker_id=1, addr="127.0.0.1:10921"), invoke=wire.invoke
    )
    _round(master, clock.wall_ms())
    _round(slave, clock.wall_ms())
    assert slave.results[NS1].master_addr == "127.0.0.1:10911"
    assert slave.results[NS1].ha_server_addr == "127.0.0.1:10912"
    assert master.results[NS1].master_addr is None


def test_close_unregisters_and_survives_a_name_server_down() -> None:
    clock = ManualClock(1_000_000)
    wire = Wire(clock, NS1, NS2)
    r = Registrar(_broker(Topics(TopicConfig("T1"))), invoke=wire.invoke)
    _round(r, clock.wall_ms())
    wire.down.add(NS2)
    assert asyncio.run(r.close()) == 1
    assert [req.code for _, req in wire.sent[2:]] == [RequestCode.UNREGISTER_BROKER] * 2
    assert wire.route(NS1, "T1").code == ResponseCode.TOPIC_NOT_EXIST
    assert wire.servers[NS1].routes.live == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9876", ["127.0.0.1:9876"]),
        (" 127.0.0.1:9876; 10.0.0.2:9877 ;", ["127.0.0.1:9876", "10.0.0.2:9877"]),
        ("", []),
    ],
)
def test_namesrv_addr_is_split_on_semicolons(text: str, expected: list[str]) -> None:
    assert parse_namesrv_addr(text) == expected


@pytest.mark.parametrize("text", ["127.0.0.1", "host:", ":9876", "h:99999", "h:x"])
def test_a_namesrv_addr_without_a_port_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not host:port"):
        parse_namesrv_addr(text)


def test_a_malformed_namesrv_entry_is_logged_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    wire = Wire(ManualClock(0), NS1)
    with caplog.at_level(logging.WARNING, "rmqnet.broker.registration"):
        r = Registrar(_broker(Topics(TopicConfig("T1")), namesrv=f"localhost;{NS1}"), invoke=wire.invoke)
    assert r.namesrv_addrs == [NS1]
    assert "namesrvAddr entry 'localhost' is not host:port: not registering there" in caplog.text
    assert _round(r, 0) == 1
