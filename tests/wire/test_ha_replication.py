"""Master and slave over 127.0.0.1 on RocketMQ 4.x's HA protocol (``rmqnet.ha``).

The frames are written here from RocketMQ 4.9.8's source, not from our codec:
``HAConnection.ReadSocketService`` reads the slave's ``long`` (8 bytes, big-endian: Java's
``ByteBuffer.getLong``), ``WriteSocketService`` writes ``putLong(offset)``, ``putInt(size)``
and then the commitlog bytes (``headerSize = 8 + 4``), ``size <= haTransferBatchSize``
(32768) and never past a mapped file (``getCommitLogData``); ``HAClient.reportSlaveMaxOffset``
writes ``putLong(maxPhyOffset)``. Nothing here waits for time to pass: tests await the
events (bytes arriving, the slave's progress event); the heartbeat and back-off timing is
driven by a manual clock on the sans-I/O parts.
"""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

import pyarrow as pa
import pytest

import refcodec as rc
import rmqlog
from rmqnet.ha import HAClient, HAProtocolError, HAServer, SlaveLink
from rmqnet.ha.wire import ReportReader, TransferReader
from tests.conftest import small_store_config

SEG = 4096
GUARD_S = 30.0  # a hang guard only


def run(test: Callable[[], Awaitable[None]]) -> None:
    async def guarded() -> None:
        async with asyncio.timeout(GUARD_S):
            await test()

    asyncio.run(guarded())


def _open(root: Path) -> rmqlog.MessageStore:
    return rmqlog.MessageStore.open(root, small_store_config(mapped_file_size_commit_log=SEG, max_message_size=1024))


def _fill(store: rmqlog.MessageStore, rounds: int, seed: int = 1, start: int = 0) -> None:
    rnd = random.Random(seed)
    for r in range(start, start + rounds):
        n = rnd.randint(1, 6)
        table = pa.table({"topic": [f"T{r % 3}"] * n, "body": [rnd.randbytes(rnd.randint(0, 700)) for _ in range(n)]})
        store.put_batch(table)


def _log_bytes(root: Path, upto: int) -> bytes:
    out = []
    for start, path in rc.list_segments(str(root / "commitlog")):
        if start < upto:
            out.append(Path(path).read_bytes()[: min(SEG, upto - start)])
    return b"".join(out)


async def _read_transfer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readexactly(12)
    offset, size = struct.unpack(">qi", head)  # putLong, putInt
    return offset, await reader.readexactly(size)


async def _await_end(client: HAClient, store: rmqlog.MessageStore, target: int) -> None:
    while store.replica.replica_end() < target:
        client.progress.clear()
        if store.replica.replica_end() >= target:
            return
        await client.progress.wait()


def test_master_frames_as_java_writes_them(tmp_path: Path) -> None:
    master = _open(tmp_path / "m")
    _fill(master, 30)
    tail = master.published_tail()

    async def body() -> None:
        server = HAServer(master)
        port = await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(struct.pack(">q", 0))  # a new slave: reportSlaveMaxOffset(0)
            got = bytearray()
            while len(got) < tail:
                offset, data = await _read_transfer(reader)
                assert offset == len(got)
                assert 0 < len(data) <= 32768
                assert offset // SEG == (offset + len(data) - 1) // SEG  # never across a segment
                got += data
            assert bytes(got) == _log_bytes(tmp_path / "m", tail)
            writer.write(struct.pack(">q", tail)[:5])  # an ack arriving in pieces
            await writer.drain()
            writer.write(struct.pack(">q", tail)[5:])
            assert await server.wait_for_replica(tail, GUARD_S)
            assert server.push_offset == tail and server.slave_ok(tail)
            writer.close()
        finally:
            await server.stop()
        master.close()

    run(body)


def test_slave_reports_and_appends_as_java_master_sends(tmp_path: Path) -> None:
    master = _open(tmp_path / "m")
    slave = _open(tmp_path / "s")
    _fill(master, 20)
    tail = master.published_tail()

    async def body() -> None:
        reports: asyncio.Queue[int] = asyncio.Queue()

        async def fake_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            first = struct.unpack(">q", await reader.readexactly(8))[0]
            await reports.put(first)
            pos = first
            writer.write(struct.pack(">qi", pos, 0))  # a heartbeat first
            while pos < tail:
                n = min(32768, tail - pos, SEG - pos % SEG)
                data = bytes(master.replica.replica_read(pos, n))
                writer.write(struct.pack(">qi", pos, len(data)) + data)
                pos += len(data)
            await writer.drain()
            while True:
                raw = await reader.read(8)
                if not raw:
                    return
                await reports.put(struct.unpack(">q", raw)[0])

        srv = await asyncio.start_server(fake_master, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        client = HAClient(slave, f"127.0.0.1:{port}", clock=rmqlog.ManualClock())
        client.run_once(0)
        assert await reports.get() == 0  # on connect: the slave's max offset
        await _await_end(client, slave, tail)
        while (await reports.get()) < tail:  # after appending: the new max offset
            pass
        assert _log_bytes(tmp_path / "s", tail) == _log_bytes(tmp_path / "m", tail)
        await client.close()
        srv.close()
        await srv.wait_closed()

    run(body)
    master.close()
    slave.close()


def test_replication_across_rolls_restart_and_more_sends(tmp_path: Path) -> None:
    master = _open(tmp_path / "m")
    slave = _open(tmp_path / "s")
    _fill(master, 25)

    async def body() -> None:
        nonlocal slave
        server = HAServer(master)
        port = await server.start()
        clock = rmqlog.ManualClock()
        client = HAClient(slave, f"127.0.0.1:{port}", clock=clock)
        client.run_once(clock.wall_ms())
        await _await_end(client, slave, master.published_tail())
        _fill(master, 15, seed=3, start=25)  # while connected: the writer is woken
        server.notify_appended()
        await _await_end(client, slave, master.published_tail())
        assert await server.wait_for_replica(master.published_tail(), GUARD_S)
        # the slave restarts mid-stream; the master kept writing meanwhile
        await client.close()
        slave.close()
        _fill(master, 10, seed=4, start=40)
        slave = _open(tmp_path / "s")
        client = HAClient(slave, f"127.0.0.1:{port}", clock=clock)
        client.run_once(clock.wall_ms())
        await _await_end(client, slave, master.published_tail())
        await client.close()
        await server.stop()

    run(body)
    tail = master.published_tail()
    assert tail > 5 * SEG
    assert slave.published_tail() == tail
    assert _log_bytes(tmp_path / "s", tail) == _log_bytes(tmp_path / "m", tail)
    assert len(rc.walk_commitlog(str(tmp_path / "s" / "commitlog"), SEG)) == len(
        rc.walk_commitlog(str(tmp_path / "m" / "commitlog"), SEG)
    )
    slave.dispatch()
    master.dispatch()
    for t in ("T0", "T1", "T2"):
        for q in range(4):
            assert (
                slave.read_queue(t, q, 0, 10_000).column("body").to_pylist()
                == master.read_queue(t, q, 0, 10_000).column("body").to_pylist()
            )
    master.close()
    slave.close()


def test_bad_report_closes_that_connection_only(tmp_path: Path) -> None:
    master = _open(tmp_path / "m")
    _fill(master, 5)
    tail = master.published_tail()

    async def body() -> None:
        server = HAServer(master)
        port = await server.start()
        good_r, good_w = await asyncio.open_connection("127.0.0.1", port)
        good_w.write(struct.pack(">q", 0))
        for bad in (-5, tail + 1):  # negative; ahead of the master
            r, w = await asyncio.open_connection("127.0.0.1", port)
            if bad < 0:
                w.write(struct.pack(">q", bad))
            else:
                w.write(struct.pack(">q", 0))
                await _read_transfer(r)
                w.write(struct.pack(">q", bad))
            while not r.at_eof():  # the master closes it
                await r.read(1 << 16)
            w.close()
        got = 0
        while got < tail:  # the good slave is served all along
            offset, data = await _read_transfer(good_r)
            assert offset == got
            got += len(data)
        good_w.write(struct.pack(">q", tail))
        assert await server.wait_for_replica(tail, GUARD_S)
        assert server.connection_count() == 1
        good_w.close()
        await server.stop()

    run(body)
    master.close()


def test_foreign_stream_refused_nothing_appended(tmp_path: Path) -> None:
    master = _open(tmp_path / "m")
    other = _open(tmp_path / "o")
    slave = _open(tmp_path / "s")
    _fill(master, 6)
    _fill(other, 6, seed=9)
    good_end = master.published_tail()
    while slave.replica.replica_end() < good_end:
        at = slave.replica.replica_end()
        slave.replica.replica_append(at, master.replica.replica_read(at, 32768))
    foreign = other.replica.replica_read(0, 2000)

    async def body() -> None:
        sessions: asyncio.Queue[int] = asyncio.Queue()

        async def foreign_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            start = struct.unpack(">q", await reader.readexactly(8))[0]
            writer.write(struct.pack(">qi", start, len(foreign)) + foreign)
            await writer.drain()
            await reader.read()  # until the slave drops the connection
            await sessions.put(start)

        srv = await asyncio.start_server(foreign_master, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        clock = rmqlog.ManualClock()
        client = HAClient(slave, f"127.0.0.1:{port}", clock=clock)
        client.run_once(clock.wall_ms())
        assert await sessions.get() == good_end
        assert client.last_error is not None and "ReplicaStreamError" in client.last_error
        # back-off before the next attempt (on the injected clock), then the same refusal
        assert client.next_attempt_ms > clock.wall_ms()
        client.run_once(clock.wall_ms())
        assert client.connects == 1
        clock.advance(client.next_attempt_ms - clock.wall_ms())
        client.run_once(clock.wall_ms())
        assert await sessions.get() == good_end  # it reports the same end: nothing was appended
        await client.close()
        srv.close()
        await srv.wait_closed()

    run(body)
    assert slave.published_tail() == good_end == slave.replica.replica_end()
    assert _log_bytes(tmp_path / "s", good_end) == _log_bytes(tmp_path / "m", good_end)
    assert not any((tmp_path / "s" / "commitlog" / f"{good_end // SEG * SEG:020d}").read_bytes()[good_end % SEG :])
    for s in (master, other, slave):
        s.close()


def test_heartbeats_and_first_offset_on_the_clock(tmp_path: Path) -> None:
    master = _open(tmp_path / "m")
    try:
        link = SlaveLink(master, 1000, heartbeat_ms=5000)
        assert link.frames(10_000) == []  # nothing before the first report
        assert link.on_bytes(struct.pack(">q", 0), 10_000) == 0
        assert link.frames(10_000) == [struct.pack(">qi", 0, 0)]  # nothing to send, 9 s since the last write
        assert link.frames(14_000) == []
        assert link.frames(15_001) == [struct.pack(">qi", 0, 0)]
        _fill(master, 3)
        frames = link.frames(15_002)
        assert struct.unpack(">qi", frames[0]) == (0, len(frames[1]))
        with pytest.raises(HAProtocolError):
            link.on_bytes(struct.pack(">q", master.published_tail() + 1), 15_003)
    finally:
        master.close()


def test_codec_readers_in_pieces() -> None:
    reports = ReportReader()
    raw = struct.pack(">q", 7) + struct.pack(">q", 9)
    assert reports.feed(raw[:3]) is None
    assert reports.feed(raw[3:12]) == 7
    assert reports.feed(raw[12:]) == 9  # the last complete group counts
    with pytest.raises(HAProtocolError):
        ReportReader().feed(struct.pack(">q", -1))
    transfers = TransferReader(max_size=100)
    stream = struct.pack(">qi", 5, 3) + b"abc" + struct.pack(">qi", 8, 0)
    got = [t for i in range(len(stream)) for t in transfers.feed(stream[i : i + 1])]
    assert [(t.offset, t.data) for t in got] == [(5, b"abc"), (8, b"")]
    with pytest.raises(HAProtocolError):
        TransferReader(max_size=100).feed(struct.pack(">qi", 0, 101))
    with pytest.raises(HAProtocolError):
        TransferReader().feed(struct.pack(">qi", 0, -1))


def test_slave_reports_on_its_heartbeat_and_closes_a_silent_master(tmp_path: Path) -> None:
    slave = _open(tmp_path / "s")

    async def body() -> None:
        reports: asyncio.Queue[int] = asyncio.Queue()
        closed = asyncio.Event()

        async def silent_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while raw := await reader.read(8):
                await reports.put(struct.unpack(">q", raw)[0])
            closed.set()

        srv = await asyncio.start_server(silent_master, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        clock = rmqlog.ManualClock(1_000_000)
        client = HAClient(slave, f"127.0.0.1:{port}", clock=clock, heartbeat_ms=5000, housekeeping_ms=20_000)
        client.run_once(clock.wall_ms())
        assert await reports.get() == 0  # on connect
        assert client.connected  # (set before its first report)
        client.run_once(clock.advance(4999))
        client.run_once(clock.advance(1))  # haSendHeartbeatInterval: the end again
        assert await reports.get() == 0
        client.run_once(clock.advance(20_001))  # nothing read for haHousekeepingInterval: closed
        await closed.wait()
        await client.close()
        srv.close()
        await srv.wait_closed()
        assert reports.empty()  # no report between the heartbeats

    run(body)
    slave.close()


def test_codec_readers_take_any_bytes_in_any_chunks() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=400), st.lists(st.integers(1, 50), max_size=20))
    def check(data: bytes, cuts: list[int]) -> None:
        reports, transfers = ReportReader(), TransferReader(max_size=64)
        pieces, at = [], 0
        for c in cuts:
            pieces.append(data[at : at + c])
            at += c
        pieces.append(data[at:])
        got: list[int] = []
        seen: list[tuple[int, bytes]] = []
        r_ok = t_ok = True
        for p in pieces:
            if r_ok:
                try:
                    v = reports.feed(p)
                    if v is not None:
                        got.append(v)
                except HAProtocolError:
                    r_ok = False
            if t_ok:
                try:
                    seen += [(t.offset, t.data) for t in transfers.feed(p)]
                except HAProtocolError:
                    t_ok = False
            assert transfers.buffered <= 12 + 64  # at most one partial transfer kept
        # what the readers gave equals a whole-buffer parse of the same bytes
        whole = [struct.unpack_from(">q", data, i)[0] for i in range(0, len(data) - len(data) % 8, 8)]
        if r_ok:
            assert not got or got[-1] == whole[-1]
        pos, expect = 0, []
        while t_ok and len(data) - pos >= 12:
            off, size = struct.unpack_from(">qi", data, pos)
            if len(data) - pos - 12 < size:
                break
            expect.append((off, data[pos + 12 : pos + 12 + size]))
            pos += 12 + size
        if t_ok:
            assert seen == expect

    check()
