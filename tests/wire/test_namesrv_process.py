"""The name server as a process: ``rmqlog namesrv`` in a subprocess asked over a socket with
our own frames, SIGTERM ending it with status 0; in-process, a broker's Registrar registering
over the transport, a closed broker connection dropping its routes, and the expiry timer's
scan closing an expired broker's connection. Everything on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import small_store_config, subprocess_env

from rmqlog import ManualClock
from rmqnet.broker import launch
from rmqnet.broker.config import BrokerConfig
from rmqnet.namesrv.process import NameServerProcess
from rmqnet.remoting import (
    FrameDecoder,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode,
    encode_bytes,
)
from rmqnet.remoting.register import (
    RegisterBrokerBody,
    RegisterBrokerHeader,
    TopicConfigData,
    body_crc32,
)
from rmqnet.transport import ClientConnection

BROKER = "127.0.0.1:10911"


def _register_cmd(opaque: int, topics: list[str]) -> RemotingCommand:
    body = RegisterBrokerBody({t: TopicConfigData(t, 4, 4) for t in topics}).encode()
    ext = RegisterBrokerHeader(
        broker_name="broker-a",
        broker_addr=BROKER,
        cluster_name="DefaultCluster",
        ha_server_addr="127.0.0.1:10912",
        broker_id=0,
        body_crc32=body_crc32(body),
    ).to_ext()
    return RemotingCommand(RequestCode.REGISTER_BROKER, opaque, ext_fields=ext, body=body, language="JAVA")


def _route_cmd(opaque: int, topic: str) -> RemotingCommand:
    return RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque, ext_fields={"topic": topic}, language="JAVA")


class Wire:
    """A blocking socket speaking frames: send a command, read the next response."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.decoder = FrameDecoder()
        self.pending: list[RemotingCommand] = []

    def call(self, cmd: RemotingCommand) -> RemotingCommand:
        self.sock.sendall(encode_bytes(cmd))
        while not self.pending:
            data = self.sock.recv(65536)
            assert data, "the name server closed the connection"
            self.pending += [decode(f) for f in self.decoder.feed(data)]
        res = self.pending.pop(0)
        assert res.is_response and res.opaque == cmd.opaque
        return res

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def namesrv_process() -> Iterator[tuple[subprocess.Popen[str], int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqnet", "namesrv", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once it listens; '' if it died first
        assert line.startswith("listening on 127.0.0.1:"), (line, proc.stderr.read() if proc.poll() is not None else "")
        yield proc, int(line.rsplit(":", 1)[1])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()


def test_the_namesrv_command_routes_over_a_socket_and_stops_on_sigterm(
    namesrv_process: tuple[subprocess.Popen[str], int],
) -> None:
    proc, port = namesrv_process
    broker = Wire(port)
    client = Wire(port)
    try:
        res = client.call(_route_cmd(1, "T1"))
        assert res.code == ResponseCode.TOPIC_NOT_EXIST
        assert res.remark is not None and res.remark.startswith("No topic route info in name server for the topic: T1")
        assert broker.call(_register_cmd(2, ["T1", "TBW102"])).code == ResponseCode.SUCCESS
        res = client.call(_route_cmd(3, "T1"))
        assert res.code == ResponseCode.SUCCESS
        assert json.loads(res.body_bytes())["brokerDatas"] == [
            {"cluster": "DefaultCluster", "brokerName": "broker-a", "brokerAddrs": {"0": BROKER}}
        ]
        res = client.call(RemotingCommand(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 4))
        assert json.loads(res.body_bytes()) == {"topicList": ["T1", "TBW102"]}
        res = client.call(RemotingCommand(12345, 5))
        assert res.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    finally:
        broker.close()
        client.close()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert proc.stderr is not None and "name server stopped" in proc.stderr.read()


def test_an_address_in_use_exits_3(namesrv_process: tuple[subprocess.Popen[str], int]) -> None:
    _, port = namesrv_process
    r = subprocess.run(
        [sys.executable, "-m", "rmqnet", "namesrv", "--listen", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
    )
    assert r.returncode == 3 and f"cannot listen on 127.0.0.1:{port}" in r.stderr


def test_a_broker_process_registers_over_the_transport_and_unregisters_on_stop(tmp_path: Path) -> None:
    """The broker's own process (rmqnet.broker.launch) with namesrvAddr naming this name server
    and a dead one: it registers at its first service round (the dead one logged and skipped),
    clients get routes for its topics, and a clean stop unregisters it."""

    async def scenario() -> None:
        ns = NameServerProcess("127.0.0.1", 0)
        await ns.start()
        registered = asyncio.Event()
        register = ns.server.routes.register

        def watched(**kw: Any) -> Any:
            res = register(**kw)
            registered.set()
            return res

        ns.server.routes.register = watched  # type: ignore[method-assign]
        config = BrokerConfig(
            broker_name="broker-a", listen_port=0, namesrv_addr=f"{ns.address};127.0.0.1:1", store=small_store_config()
        )
        proc = launch.BrokerProcess(tmp_path / "root", config)
        client = await ClientConnection.connect("127.0.0.1", ns.port)
        try:
            address = await proc.start()
            await registered.wait()
            res = await client.invoke(_route_cmd(0, "TBW102"), 10)  # auto-creation's topic, from the broker
            assert res.code == ResponseCode.SUCCESS, res.remark
            assert json.loads(res.body_bytes())["brokerDatas"][0]["brokerAddrs"] == {"0": address}
            # the master's HA service as bound (listening on port 0: any free port; else listenPort + 1)
            assert ns.server.routes.live[address].ha_server_addr == proc.broker.replication.ha_server_addr  # type: ignore[union-attr]
            proc.request_stop()
            await proc.wait_stopped(grace_s=1.0)
            assert (await client.invoke(_route_cmd(0, "TBW102"), 10)).code == ResponseCode.TOPIC_NOT_EXIST
            assert ns.server.routes.live == {}
        finally:
            if not proc._stop.is_set():
                proc.request_stop()
                await proc.wait_stopped(grace_s=1.0)
            client.close()
            await ns.stop()

    asyncio.run(scenario())


def test_a_closed_broker_connection_drops_its_routes() -> None:
    async def scenario() -> None:
        ns = NameServerProcess("127.0.0.1", 0)
        await ns.start()
        broker = await ClientConnection.connect("127.0.0.1", ns.port)
        client = await ClientConnection.connect("127.0.0.1", ns.port)
        try:
            assert (await broker.invoke(_register_cmd(0, ["T1"]), 10)).code == ResponseCode.SUCCESS
            assert (await client.invoke(_route_cmd(0, "T1"), 10)).code == ResponseCode.SUCCESS
            server_side = ns.server.routes.live[BROKER].conn  # the name server's end of it
            assert server_side in ns.remoting.connections
            broker.close()
            await server_side.wait_closed()  # type: ignore[union-attr]
            assert (await client.invoke(_route_cmd(0, "T1"), 10)).code == ResponseCode.TOPIC_NOT_EXIST
        finally:
            client.close()
            await ns.stop()

    asyncio.run(scenario())


def test_the_expiry_scan_drops_a_silent_broker_and_closes_its_connection() -> None:
    async def scenario() -> None:
        clock = ManualClock(1_000_000)
        ns = NameServerProcess("127.0.0.1", 0, clock=clock)
        await ns.start()
        broker = await ClientConnection.connect("127.0.0.1", ns.port)
        try:
            assert (await broker.invoke(_register_cmd(0, ["T1"]), 10)).code == ResponseCode.SUCCESS
            clock.advance(120_001)
            ns._expire()  # one tick of the timer, at the clock's time
            await broker.wait_closed()  # the name server closed the expired broker's connection
            assert ns.server.routes.route("T1") is None and ns.server.routes.live == {}
        finally:
            await ns.stop()

    asyncio.run(scenario())


def _read_until(stream: Any, text: str) -> list[str]:
    """Lines of ``stream`` up to the first holding ``text`` (fails if it ends first)."""
    lines = []
    for line in iter(stream.readline, ""):
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"{text!r} never came: {''.join(lines)[-2000:]}")


def test_rmqlog_broker_registers_with_rmqlog_namesrv_and_unregisters_on_sigterm(
    tmp_path: Path, namesrv_process: tuple[subprocess.Popen[str], int]
) -> None:
    ns_proc, port = namesrv_process
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerClusterName = C1\nbrokerName = broker-x\nbrokerId = 0\n")
    broker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rmqnet",
            "broker",
            str(tmp_path / "root"),
            "-c",
            str(conf),
            "--listen",
            "127.0.0.1:0",
            "--namesrv",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=subprocess_env(),
    )
    client = Wire(port)
    try:
        assert broker.stdout is not None and ns_proc.stderr is not None
        ready = broker.stdout.readline()
        assert ready.startswith("broker broker-x ready at 127.0.0.1:"), ready
        address = ready.rsplit(" ", 1)[1].strip()
        _read_until(ns_proc.stderr, f"broker registered: broker-x id 0 at {address}, cluster C1")
        res = client.call(_route_cmd(1, "TBW102"))
        assert res.code == ResponseCode.SUCCESS
        assert json.loads(res.body_bytes())["brokerDatas"] == [
            {"cluster": "C1", "brokerName": "broker-x", "brokerAddrs": {"0": address}}
        ]
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(timeout=60) == 0
        _read_until(ns_proc.stderr, f"broker unregistered: broker-x id 0 at {address} (OK)")
        assert client.call(_route_cmd(2, "TBW102")).code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        client.close()
        if broker.poll() is None:
            broker.kill()
            broker.wait()
        if broker.stdout is not None:
            broker.stdout.close()
