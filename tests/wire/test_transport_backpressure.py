"""Back-pressure on answers (before, a client that never reads its answers made the broker
buffer them: 60 VIEW_MESSAGE_BY_ID requests, 7 KB sent, cost +195 to +423 MiB). A peer that
does not read stops being served and read once its unsent answers pass ``Limits.write_high``;
answers of requests already in flight count, and one that would take it past
``Limits.write_limit`` closes it; a connection that sends nothing for ``write_timeout_ms`` with
bytes to send is closed by the sweeper (a manual clock here). Other connections are served
throughout. Bytes buffered are read from the connection (:attr:`Connection.buffered`, its
peak :attr:`Connection.buffered_peak`), never timed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import small_store_config

import rmqlog
from rmqlog import ManualClock
from rmqnet.broker import launch
from rmqnet.broker.config import BrokerConfig
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode, encode_bytes
from rmqnet.transport import ClientConnection, Connection, Limits, RemotingServer

GUARD_S = 60.0  # a hang guard only
ANSWER = 256 * 1024  # bytes of each large answer's body
HIGH, LOW, LIMIT = 1024 * 1024, 256 * 1024, 4 * 1024 * 1024


def run(test: Callable[[], Awaitable[None]]) -> None:
    async def guarded() -> None:
        async with asyncio.timeout(GUARD_S):
            await test()

    asyncio.run(guarded())


def frame(code: int, opaque: int, ext: dict[str, Any] | None = None) -> bytes:
    return encode_bytes(RemotingCommand(code, opaque, 0, None, ext or {}, b""))


async def deaf_peer(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A peer that sends and does not read (its stream reader takes in its 128 KiB and stops;
    a small receive buffer, so the server's bytes stay with the server, not in the kernel)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock)


async def until(cond: Callable[[], bool]) -> None:
    """Turn the loop until ``cond`` (what the code under test does next), under the guard."""
    while not cond():
        await asyncio.sleep(0.005)


def big_or_echo(served: list[int]) -> Any:
    def handler(conn: Connection, r: RemotingCommand) -> RemotingCommand:
        if r.code == RequestCode.VIEW_MESSAGE_BY_ID:
            served.append(r.opaque)
            return r.reply(ResponseCode.SUCCESS, body=b"x" * ANSWER)
        return r.reply(ResponseCode.SUCCESS, ext_fields={"echo": r.ext_fields.get("n", "")})

    return handler


def test_one_read_of_many_requests_queues_answers_up_to_the_high_mark_only() -> None:
    """The defect itself: every request of one read was served and answered into the write
    buffer before the high mark was looked at (200 requests here: 50 MiB buffered)."""

    async def t() -> None:
        served: list[int] = []
        server = RemotingServer(big_or_echo(served), limits=Limits(write_high=HIGH, write_low=LOW), sweep_interval_s=0)
        await server.start()
        reader, writer = await deaf_peer(server.port)
        n = 200
        writer.write(b"".join(frame(RequestCode.VIEW_MESSAGE_BY_ID, i) for i in range(n)))
        await writer.drain()
        await until(lambda: len(server.connections) == 1 and len(served) > 0 and not server.connections[0].reading)
        (conn,) = server.connections
        for _ in range(20):
            await asyncio.sleep(0)
        assert conn._transport is not None
        assert conn._transport.get_write_buffer_size() <= HIGH + ANSWER + 1024
        assert len(served) < n
        writer.close()
        await server.stop(1)

    run(t)


def test_a_peer_that_does_not_read_is_not_served_past_the_high_mark_then_closed_when_stalled() -> None:
    async def t() -> None:
        clock = ManualClock()
        served: list[int] = []
        limits = Limits(write_high=HIGH, write_low=LOW, write_limit=LIMIT, write_timeout_ms=5000, idle_ms=0)
        server = RemotingServer(big_or_echo(served), limits=limits, clock=clock, sweep_interval_s=0)
        await server.start()
        reader, writer = await deaf_peer(server.port)
        n = 200  # 50 MiB of answers asked for in one write of ~20 KB
        writer.write(b"".join(frame(RequestCode.VIEW_MESSAGE_BY_ID, i) for i in range(n)))
        await writer.drain()
        await until(
            lambda: (
                len(server.connections) == 1
                and not server.connections[0].reading
                and server.connections[0].buffered > HIGH
            )
        )
        (deaf,) = server.connections
        for _ in range(20):  # the loop turns: nothing more is served while the peer does not read
            await asyncio.sleep(0)
        assert len(served) < n
        assert deaf.buffered_peak <= HIGH + ANSWER + 1024  # one answer past the mark at most
        assert deaf.buffered <= HIGH + ANSWER + 1024
        # another connection is served meanwhile
        healthy = await ClientConnection.connect("127.0.0.1", server.port)
        assert (await healthy.invoke(RemotingCommand(10, ext_fields={"n": "1"}))).ext_fields == {"echo": "1"}
        # nothing sent for write_timeout_ms: the sweeper closes it; the healthy one stays
        sweeper = server.idle_sweeper
        assert sweeper is not None
        assert not sweeper.run_once(sweeper.now_ms())  # first sight
        clock.advance(4999)
        assert not sweeper.run_once(sweeper.now_ms())
        clock.advance(1)
        assert sweeper.run_once(sweeper.now_ms())
        await deaf.wait_closed()
        assert deaf.buffered == 0 and deaf not in server.connections
        assert (await healthy.invoke(RemotingCommand(10, ext_fields={"n": "2"}))).ext_fields == {"echo": "2"}
        healthy.close()
        writer.close()
        await server.stop(1)

    run(t)


def test_a_reader_that_catches_up_is_served_to_the_end() -> None:
    async def t() -> None:
        served: list[int] = []
        limits = Limits(write_high=HIGH, write_low=LOW, write_limit=LIMIT, write_timeout_ms=0, idle_ms=0)
        server = RemotingServer(big_or_echo(served), limits=limits, sweep_interval_s=0)
        await server.start()
        reader, writer = await deaf_peer(server.port)
        n = 40
        writer.write(b"".join(frame(RequestCode.VIEW_MESSAGE_BY_ID, i) for i in range(n)))
        await writer.drain()
        await until(lambda: len(server.connections) == 1 and not server.connections[0].reading)
        (conn,) = server.connections
        got = 0
        while got < n * ANSWER:  # now read everything: every request is answered
            data = await reader.read(1 << 20)
            assert data, "closed"
            got += len(data)
        assert served == list(range(n)) and conn.buffered_peak <= HIGH + ANSWER + 1024
        writer.close()
        await server.stop(1)

    run(t)


def test_answers_in_flight_past_the_write_limit_close_the_connection(caplog: pytest.LogCaptureFixture) -> None:
    async def t() -> None:
        gate = asyncio.Event()
        entered: list[int] = []

        def handler(conn: Connection, r: RemotingCommand) -> Any:
            if r.code != RequestCode.PULL_MESSAGE:
                return r.reply(ResponseCode.SUCCESS)
            entered.append(r.opaque)

            async def held() -> RemotingCommand:  # a held pull answered with a large body
                await gate.wait()
                return r.reply(ResponseCode.SUCCESS, body=b"y" * ANSWER)

            return held()

        limits = Limits(write_high=HIGH, write_low=LOW, write_limit=LIMIT, write_timeout_ms=0, idle_ms=0)
        server = RemotingServer(handler, limits=limits, sweep_interval_s=0)
        await server.start()
        reader, writer = await deaf_peer(server.port)
        n = 100  # 25 MiB of answers, all in flight before any is answered
        writer.write(b"".join(frame(RequestCode.PULL_MESSAGE, i) for i in range(n)))
        await writer.drain()
        await until(lambda: len(entered) == n)
        (conn,) = server.connections
        healthy = await ClientConnection.connect("127.0.0.1", server.port)
        with caplog.at_level(logging.WARNING, logger="rmqnet.transport.connection"):
            gate.set()
            await conn.wait_closed()
        assert conn.buffered_peak <= LIMIT
        assert any("does not read its answers" in r.getMessage() for r in caplog.records)
        assert (await healthy.invoke(RemotingCommand(10))).code == ResponseCode.SUCCESS
        healthy.close()
        writer.close()
        await server.stop(1)

    run(t)


def test_the_broker_reads_its_bounds_from_broker_conf_and_a_deaf_viewer_costs_it_one_mark(tmp_path: Path) -> None:
    """The issue's reproduction: 60 VIEW_MESSAGE_BY_ID of a 1 MiB message from a peer that
    never reads, against ``rmqlog broker``'s process object configured by broker.conf keys."""
    root = tmp_path / "store"
    store_config = small_store_config(mapped_file_size_commit_log=4 << 20)
    with rmqlog.MessageStore.open(root, store_config) as store:
        store.create_topic("T", 1)
        res = store.put_batch(pa.table({"topic": ["T"], "body": [b"z" * (1 << 20)], "queueId": [0]}), dispatch=True)
        offset = res["commitLogOffset"][0].as_py()
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"writeBufferHighWaterMark={HIGH}\nwriteBufferLowWaterMark={LOW}\nwriteBufferLimit={LIMIT}\n"
        "writeStallTimeoutMills=0\nserverChannelMaxIdleTimeSeconds=0\nautoCreateTopicEnable=false\n"
    )
    config = BrokerConfig.from_properties(conf, listen_port=0).replace(store=store_config)
    assert config.limits() == {
        "write_high": HIGH,
        "write_low": LOW,
        "write_limit": LIMIT,
        "write_timeout_ms": 0,
        "idle_ms": 0,
    }

    async def t() -> None:
        proc = launch.BrokerProcess(root, config)
        await proc.start()
        try:
            server = proc.server
            assert server.limits == Limits(**config.limits())
            reader, writer = await deaf_peer(server.port)
            writer.write(b"".join(frame(RequestCode.VIEW_MESSAGE_BY_ID, i, {"offset": str(offset)}) for i in range(60)))
            await writer.drain()
            await until(
                lambda: (
                    len(server.connections) == 1
                    and not server.connections[0].reading
                    and server.connections[0].buffered > HIGH
                )
            )
            (deaf,) = server.connections
            assert deaf.buffered_peak <= HIGH + (1 << 20) + 4096
            healthy = await ClientConnection.connect("127.0.0.1", server.port)
            view = RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": str(offset)})
            got = await healthy.invoke(view)
            assert got.code == ResponseCode.SUCCESS and len(got.body_bytes()) > 1 << 20
            healthy.close()
            writer.close()
        finally:
            proc.request_stop()
            await proc.wait_stopped(1)

    run(t)


def test_limits_and_broker_conf_refuse_inconsistent_bounds(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="write_limit"):
        Limits(write_high=10, write_low=5, write_limit=9)
    with pytest.raises(ValueError, match="write_timeout_ms"):
        Limits(write_timeout_ms=-1)
    for line, named in (
        ("writeBufferLimit=10", "write_buffer_limit"),
        ("writeBufferHighWaterMark=0", "write_buffer_high"),
        ("writeBufferLowWaterMark=99999999", "write_buffer_low"),
        ("writeStallTimeoutMills=-1", "write_stall"),
    ):
        conf = tmp_path / "broker.conf"
        conf.write_text(line + "\n")
        with pytest.raises(rmqlog.ConfigError, match=named):
            BrokerConfig.from_properties(conf)
    assert BrokerConfig().limits() == {
        "write_high": 4 << 20,
        "write_low": 1 << 20,
        "write_limit": 64 << 20,
        "write_timeout_ms": 30_000,
        "idle_ms": 120_000,
    }
