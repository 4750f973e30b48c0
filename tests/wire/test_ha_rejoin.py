"""An old master come back as a slave (``rmqnet.ha.verify``, ``HAClient``'s comparison): it
reports the offset its slave acknowledged (its replication checkpoint, rounded down to a record
boundary), compares the new master's stream with its own log, cuts where they part
(``replica_truncate``) and replicates from there, so that its log ends byte-identical to the
new master's; where nothing parted, nothing is cut. The master's side records the slaves'
acknowledgements as that checkpoint. The verifier is tested alone first (sans-I/O), then over
127.0.0.1 against our HA server and against a master writing frames as RocketMQ 4.9.8's
``HAConnection.WriteSocketService`` does.
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
from rmqnet.ha import HAClient, HAProtocolError, HAServer, RejoinVerifier
from rmqnet.ha.wire import Transfer
from tests.conftest import small_store_config

SEG = 4096
GUARD_S = 30.0  # a hang guard only

# ------------------------------------------------------------------ the verifier alone
LOG = bytes(random.Random(5).randbytes(10_000))


def _local(offset: int, n: int) -> bytes:
    assert offset >= 0 and offset + n <= len(LOG)
    return LOG[offset : offset + n]


def _stream(data: bytes, start: int, size: int = 700) -> list[Transfer]:
    return [Transfer(start + i, data[i : i + size]) for i in range(0, len(data), size)]


def test_verifier_match_then_the_rest() -> None:
    v = RejoinVerifier(1000, 5000)
    master = LOG[:5000] + b"new records past E" * 50
    ts = _stream(master[1000:], 1000)
    assert v.feed(ts[:3], _local) is None and v.position == 1000 + 3 * 700
    verdict = v.feed(ts[3:], _local)
    assert verdict is not None and verdict.matched and verdict.offset == 5000
    rest = b"".join(t.data for t in verdict.rest)
    assert verdict.rest[0].offset == 5000 and rest == master[5000:]  # the transfer crossing E, split at E
    with pytest.raises(HAProtocolError):
        v.feed(ts, _local)  # (it is over)


def test_verifier_differs_inside_a_transfer() -> None:
    v = RejoinVerifier(1000, 5000)
    master = bytearray(LOG[:5000])
    master[3456] ^= 0xFF
    verdict = v.feed(_stream(bytes(master[1000:]), 1000), _local)
    assert verdict is not None and not verdict.matched and verdict.offset == 3456
    assert v.position == 1000 + 3 * 700  # what it reported: the matched prefix


def test_verifier_differs_at_the_acknowledged_offset() -> None:
    """The promoted slave held exactly [0, A) and wrote its own from A: the cut is at A."""
    v = RejoinVerifier(1000, 5000)
    verdict = v.feed([Transfer(1000, bytes([LOG[1000] ^ 1]) + LOG[1001:1500])], _local)
    assert verdict is not None and not verdict.matched and verdict.offset == 1000


def test_verifier_master_shorter() -> None:
    """A heartbeat (the master's next transfer position, size 0) before E: its log ends there."""
    v = RejoinVerifier(1000, 5000)
    assert v.feed(_stream(LOG[1000:2400], 1000), _local) is None
    verdict = v.feed([Transfer(2400, b"")], _local)
    assert verdict is not None and not verdict.matched and verdict.offset == 2400
    v = RejoinVerifier(1000, 5000)  # a heartbeat at A itself: the promoted slave has nothing past A
    verdict = v.feed([Transfer(1000, b"")], _local)
    assert verdict is not None and not verdict.matched and verdict.offset == 1000


def test_verifier_master_longer_and_exactly_as_long() -> None:
    v = RejoinVerifier(1000, 5000)
    verdict = v.feed(_stream(LOG[1000:5000], 1000, 1000) + [Transfer(5000, b""), Transfer(5000, b"x" * 10)], _local)
    assert verdict is not None and verdict.matched and verdict.offset == 5000
    assert [(t.offset, t.data) for t in verdict.rest] == [(5000, b""), (5000, b"x" * 10)]
    v = RejoinVerifier(1000, 5000)  # a heartbeat at E: the logs are the same
    assert v.feed(_stream(LOG[1000:5000], 1000, 4000), _local) is not None
    v = RejoinVerifier(1000, 5000)
    assert v.feed(_stream(LOG[1000:4000], 1000, 3000), _local) is None
    verdict = v.feed([Transfer(4000, LOG[4000:5000]), Transfer(5000, b"")], _local)
    assert verdict is not None and verdict.matched and [t.offset for t in verdict.rest] == [5000]


def test_verifier_offsets() -> None:
    v = RejoinVerifier(1000, 5000)
    with pytest.raises(HAProtocolError, match="offset not match"):
        v.feed([Transfer(1200, LOG[1200:1300])], _local)
    v = RejoinVerifier(0, 5000)  # A = 0: a master starting a new slave elsewhere (RocketMQ: its last segment)
    verdict = v.feed([Transfer(4096, LOG[4096:5000] + b"more")], _local)
    assert verdict is not None and verdict.matched and verdict.rest[0].data == b"more"
    v = RejoinVerifier(0, 5000)
    with pytest.raises(HAProtocolError):
        v.feed([Transfer(8192, b"beyond")], _local)


# ------------------------------------------------------------------ over 127.0.0.1
def run(test: Callable[[], Awaitable[None]]) -> None:
    async def guarded() -> None:
        async with asyncio.timeout(GUARD_S):
            await test()

    asyncio.run(guarded())


def _open(root: Path) -> rmqlog.MessageStore:
    return rmqlog.MessageStore.open(root, small_store_config(mapped_file_size_commit_log=SEG, max_message_size=1024))


def _fill(store: rmqlog.MessageStore, rounds: int, seed: int) -> None:
    rnd = random.Random(seed)
    for r in range(rounds):
        n = rnd.randint(1, 6)
        table = pa.table({"topic": [f"T{r % 3}"] * n, "body": [rnd.randbytes(rnd.randint(0, 700)) for _ in range(n)]})
        store.put_batch(table)


def _copy(src: rmqlog.MessageStore, dst: rmqlog.MessageStore) -> None:
    """Replicate ``src``'s whole log into ``dst`` (as an HA session would)."""
    end = dst.replica.replica_end()
    while end < src.published_tail():
        end = dst.replica.replica_append(end, src.replica.replica_read(end, 1 << 20))


def _log_bytes(root: Path, upto: int) -> bytes:
    out = []
    for start, path in rc.list_segments(str(root / "commitlog")):
        if start < upto:
            out.append(Path(path).read_bytes()[: min(SEG, upto - start)])
    return b"".join(out)


async def _rejoin(
    old: rmqlog.MessageStore, master: str, done: Callable[[], bool], client: HAClient | None = None
) -> HAClient:
    """Run ``old``'s HA client against ``master`` until ``done()``."""
    clock = rmqlog.ManualClock()
    client = client or HAClient(old, master, clock=clock, backoff_min_ms=0)
    while not done():
        client.run_once(client.clock.wall_ms())
        await asyncio.sleep(0.005)
    return client


def _caught_up(old: rmqlog.MessageStore, new: rmqlog.MessageStore) -> Callable[[], bool]:
    return lambda: old.replica.replica_end() == new.published_tail() and old.replica.replication_checkpoint() is None


@pytest.mark.parametrize("acked", ["at_the_end", "lagging"])
def test_diverged_tail_is_cut_and_the_logs_end_identical(tmp_path: Path, acked: str) -> None:
    """The old master holds records past what its slave acknowledged; the promoted slave wrote
    its own there. The old master cuts at the first differing byte's record and replicates."""
    old, new = _open(tmp_path / "old"), _open(tmp_path / "new")
    _fill(old, 30, seed=1)
    _copy(old, new)
    shared = old.published_tail()
    old.replica.set_replication_checkpoint(shared if acked == "at_the_end" else shared // 2 + 5)  # (mid-record)
    _fill(old, 12, seed=2)  # acknowledged to nobody: the promoted slave never got them
    _fill(new, 15, seed=3)  # the promoted slave's own
    old_tail = old.published_tail()
    assert old_tail > shared and old_tail // SEG > shared // SEG  # the divergent tail spans segments

    async def body() -> None:
        server = HAServer(new, heartbeat_ms=50)
        port = await server.start()
        client = await _rejoin(old, f"127.0.0.1:{port}", _caught_up(old, new))
        # the whole records of the shared prefix stay: the cut is where the promoted slave's own begin
        assert client.cuts == [(shared, old_tail - shared)]
        assert await server.wait_for_replica(new.published_tail(), GUARD_S)
        await client.close()
        await server.stop()

    run(body)
    tail = new.published_tail()
    assert _log_bytes(tmp_path / "old", tail) == _log_bytes(tmp_path / "new", tail)
    old.dispatch()
    new.dispatch()
    assert old.verify().problems == []
    for t in ("T0", "T1", "T2"):
        for q in range(4):
            assert (
                old.read_queue(t, q, 0, 10_000).column("body").to_pylist()
                == new.read_queue(t, q, 0, 10_000).column("body").to_pylist()
            )
    assert old.replica.replication_checkpoint() is None
    old.close()
    new.close()


def test_a_byte_differing_inside_a_record_cuts_at_the_records_start(tmp_path: Path) -> None:
    """The verifier over a store's own bytes: a master's copy with one byte changed inside a
    record past ``A`` (a header field) parts there, and the cut keeps the records before it."""
    old = _open(tmp_path / "old")
    _fill(old, 30, seed=1)
    start, end = SEG + 5, old.published_tail()
    a = old.replica.record_boundary(start)
    records = [r for r in rc.walk_commitlog(str(tmp_path / "old" / "commitlog"), SEG) if r.physical_offset > a]
    victim = records[len(records) // 2]
    master = bytearray(_log_bytes(tmp_path / "old", end))
    master[victim.physical_offset + 17] ^= 0x40  # FLAG (bytes 16..20 of the record)
    v = RejoinVerifier(a, end)

    def local(offset: int, n: int) -> bytes:
        out = b""
        while len(out) < n:
            out += old.replica.replica_read(offset + len(out), n - len(out))
        return out

    verdict = None
    for t in _stream(bytes(master[a:]), a, 3000):
        if verdict is None:
            verdict = v.feed([t], local)
    assert verdict is not None and not verdict.matched and verdict.offset == victim.physical_offset + 17
    assert old.replica.replica_truncate(verdict.offset) == victim.physical_offset
    assert old.published_tail() == victim.physical_offset
    old.dispatch()
    assert old.verify().problems == []
    old.close()


def test_nothing_diverged_nothing_is_cut(tmp_path: Path) -> None:
    """The promoted slave held everything (the checkpoint lagged): the comparison matches up
    to the old master's end and replication goes on in the same session."""
    old, new = _open(tmp_path / "old"), _open(tmp_path / "new")
    _fill(old, 30, seed=1)
    _copy(old, new)
    old.replica.set_replication_checkpoint(SEG + 17)
    _fill(new, 10, seed=3)

    async def body() -> None:
        server = HAServer(new, heartbeat_ms=50)
        port = await server.start()
        client = await _rejoin(old, f"127.0.0.1:{port}", _caught_up(old, new))
        assert client.cuts == [] and client.connects == 1
        await client.close()
        await server.stop()

    run(body)
    tail = new.published_tail()
    assert _log_bytes(tmp_path / "old", tail) == _log_bytes(tmp_path / "new", tail)
    old.close()
    new.close()


def test_master_shorter_the_old_masters_tail_goes(tmp_path: Path) -> None:
    """The promoted slave wrote nothing yet: its heartbeat says where its log ends."""
    old, new = _open(tmp_path / "old"), _open(tmp_path / "new")
    _fill(old, 20, seed=1)
    _copy(old, new)
    shared = old.published_tail()
    old.replica.set_replication_checkpoint(shared)
    _fill(old, 5, seed=2)

    async def body() -> None:
        server = HAServer(new, heartbeat_ms=50)
        port = await server.start()
        client = await _rejoin(old, f"127.0.0.1:{port}", _caught_up(old, new))
        assert client.cuts[0][0] == shared
        _fill(new, 5, seed=3)  # then it writes: replicated as usual
        server.notify_appended()
        await _rejoin(old, "", lambda: old.replica.replica_end() == new.published_tail(), client)
        await client.close()
        await server.stop()

    run(body)
    tail = new.published_tail()
    assert _log_bytes(tmp_path / "old", tail) == _log_bytes(tmp_path / "new", tail)
    old.close()
    new.close()


def test_a_whole_log_below_the_checkpoint_is_not_compared(tmp_path: Path) -> None:
    old, new = _open(tmp_path / "old"), _open(tmp_path / "new")
    _fill(old, 10, seed=1)
    _copy(old, new)
    old.replica.set_replication_checkpoint(old.published_tail() + 1000)  # (a slave acknowledged all of it)
    _fill(new, 5, seed=3)

    async def body() -> None:
        server = HAServer(new)
        port = await server.start()
        client = await _rejoin(old, f"127.0.0.1:{port}", _caught_up(old, new))
        assert client.cuts == []
        await client.close()
        await server.stop()

    run(body)
    old.close()
    new.close()


def test_as_a_java_master_streams(tmp_path: Path) -> None:
    """A master writing RocketMQ 4.9.8's frames (``WriteSocketService``: it streams from the
    slave's first report; a heartbeat header of its next position when idle): the old master
    reports the checkpoint rounded down to a record boundary, then how far it matched, cuts at
    the master's end when the heartbeat comes, and reports its new end on the next connection."""
    old, new = _open(tmp_path / "old"), _open(tmp_path / "new")
    _fill(old, 20, seed=1)
    _copy(old, new)
    shared = new.published_tail()
    _fill(old, 6, seed=2)
    old.replica.set_replication_checkpoint(shared - 1)  # a slave acknowledged all but the last byte of a record
    boundary = old.replica.record_boundary(shared - 1)
    assert shared - 1024 < boundary < shared and old.wire.record_at(boundary) is not None  # the last record's start
    old_tail = old.published_tail()

    async def body() -> None:
        reports: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
        conns = 0

        async def java_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal conns
            conns += 1
            me = conns
            pos = struct.unpack(">q", await reader.readexactly(8))[0]  # slaveRequestOffset
            await reports.put((me, pos))
            tail = new.published_tail()
            while pos < tail:  # getCommitLogData(nextTransferFromWhere), at most haTransferBatchSize
                data = bytes(new.replica.replica_read(pos, min(32768, tail - pos)))
                writer.write(struct.pack(">qi", pos, len(data)) + data)  # putLong, putInt
                pos += len(data)
            writer.write(struct.pack(">qi", pos, 0))  # idle past haSendHeartbeatInterval
            await writer.drain()
            while raw := await reader.read(8):
                await reports.put((me, struct.unpack(">q", raw[-8:])[0]))

        srv = await asyncio.start_server(java_master, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        caught_up = _caught_up(old, new)
        client = await _rejoin(old, f"127.0.0.1:{port}", lambda: caught_up() and conns == 2)
        assert await reports.get() == (1, boundary)  # never past what the promoted slave holds
        got = []
        while (item := await reports.get())[0] == 1:
            got.append(item[1])
        assert all(boundary <= r <= shared for r in got)  # only matched bytes are acknowledged
        assert item == (2, shared)  # reconnected with its new end
        assert client.cuts == [(shared, old_tail - shared)]
        await client.close()
        srv.close()
        await srv.wait_closed()

    run(body)
    assert _log_bytes(tmp_path / "old", shared) == _log_bytes(tmp_path / "new", shared)
    assert old.published_tail() == shared
    old.close()
    new.close()


def test_the_master_records_acknowledgements_as_the_checkpoint(tmp_path: Path) -> None:
    """``push_offset`` recorded when it moved, at most once a second on the clock, and at stop."""
    master, slave = _open(tmp_path / "m"), _open(tmp_path / "s")
    _fill(master, 10, seed=1)

    async def body() -> None:
        server = HAServer(master)
        port = await server.start()
        clock = rmqlog.ManualClock()
        client = HAClient(slave, f"127.0.0.1:{port}", clock=clock)
        client.run_once(clock.wall_ms())
        assert await server.wait_for_replica(master.published_tail(), GUARD_S)
        assert master.replica.replication_checkpoint() is None
        assert server.run_once(10_000) == 0 and master.replica.replication_checkpoint() == master.published_tail()
        first = master.published_tail()
        _fill(master, 5, seed=2)
        server.notify_appended()
        assert await server.wait_for_replica(master.published_tail(), GUARD_S)
        server.run_once(10_500)  # within the second: not yet
        assert master.replica.replication_checkpoint() == first
        server.run_once(11_000)
        assert master.replica.replication_checkpoint() == master.published_tail()
        _fill(master, 5, seed=3)
        server.notify_appended()
        assert await server.wait_for_replica(master.published_tail(), GUARD_S)
        await client.close()
        await server.stop()  # recorded at stop
        assert master.replica.replication_checkpoint() == master.published_tail()

    run(body)
    assert slave.replica.replication_checkpoint() is None  # (a slave records none)
    master.close()
    slave.close()
