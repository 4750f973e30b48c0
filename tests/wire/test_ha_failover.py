"""Failover as RocketMQ 4.x operators do it: a slave restarted with
``brokerId=0`` and a master role serves writes with everything its master acknowledged, and
the old master, restarted as its SLAVE, cuts what it held past the new master's log before it
replicates (``rmqnet.ha.verify``), so that both commitlogs end byte-identical.

In process first (brokers over 127.0.0.1, the stores on a manual clock): the promoted slave
continues the old master's queue offsets and idempotence markers, and its scheduler delivers
neither a delay-level message nor a timed message the old master delivered, but delivers those
that were still waiting. Then as ``rmqlog broker`` processes with a name server: an
ASYNC_MASTER with an unreplicated tail killed (SIGKILL), and a SYNC_MASTER whose every SEND_OK
is on the promoted slave.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import refcodec as rc
import rmqlog
from rmqnet.broker.broker import Broker
from rmqnet.broker.config import BrokerConfig
from rmqnet.client import Producer
from rmqnet.remoting import RemotingCommand, ResponseCode
from rmqnet.remoting.headers import DUPLICATE_FIELD, IdempotenceMarker
from rmqnet.transport import ClientConnection
from tests.conftest import subprocess_env, wait_until
from tests.wire.broker_helpers import FakePeer, read_until, send_header, send_request

GUARD_S = 60.0  # a hang guard only


# ------------------------------------------------------------------ in process
def _run(test: Callable[[], Any]) -> None:
    async def guarded() -> None:
        async with asyncio.timeout(GUARD_S):
            await test()

    asyncio.run(guarded())


def _broker(root: Path, role: str, clock: rmqlog.Clock) -> Broker:
    store = rmqlog.MessageStore.open(root, rmqlog.StoreConfig(mapped_file_size_commit_log=64 << 10), clock=clock)
    config = BrokerConfig(
        broker_name="broker-a",
        broker_role=role,
        ha_listen_port=0,
        broker_id=1 if role == "SLAVE" else 0,
        store=store.config,
    )
    return Broker(store, config, clock=rmqlog.SystemClock(), address="127.0.0.1:10911")


async def _process(broker: Broker, req: RemotingCommand) -> RemotingCommand:
    res = broker.table.process(broker, FakePeer(), req)
    if asyncio.isfuture(res) or asyncio.iscoroutine(res):
        res = await res
    assert isinstance(res, RemotingCommand)
    return res


def _marked(body: bytes, sequence: int, opaque: int) -> RemotingCommand:
    req = send_request(send_header("TopicA", queue_id=1), body, opaque=opaque)
    req.ext_fields.update(IdempotenceMarker("sink/q/0", sequence).to_ext())
    return req


def _bodies(store: rmqlog.MessageStore, topic: str) -> list[bytes]:
    store.dispatch()
    out: list[bytes] = []
    for q in range(16):
        out += store.read_queue(topic, q, 0, 1000).column("body").to_pylist()
    return sorted(out)


def test_a_promoted_slave_continues_queues_markers_and_deliveries(tmp_path: Path) -> None:
    clock = rmqlog.ManualClock(1_800_000_000_000)
    master = _broker(tmp_path / "m", "ASYNC_MASTER", clock)
    slave = _broker(tmp_path / "s", "SLAVE", clock)
    m = master.store
    for i in range(3):
        m.put("D", b"due-%d" % i, delay_level=1)  # 1 s: delivered by the master
    m.put("D", b"waiting", delay_level=5)  # 1 min: still waiting at the failover
    m.put("T", b"timed-due", deliver_time_ms=clock.wall_ms() + 2_000)
    m.put("T", b"timed-waiting", deliver_time_ms=clock.wall_ms() + 120_000)
    clock.advance(5_000)
    assert m.deliver_due() == 4
    offsets_before = m.delay_offsets()
    assert offsets_before.get(1) == 3

    async def body() -> None:
        res = await _process(master, _marked(b"marked-1", 1, 1))
        assert res.code == ResponseCode.SUCCESS
        first_offset = int(res.ext_fields["queueOffset"])
        await master.replication.start()
        await slave.replication.start()
        client = slave.replication.client
        client.set_master(master.replication.ha_server_addr)
        slave.run_services()
        while slave.store.replica_end() < m.published_tail():
            client.progress.clear()
            if slave.store.replica_end() < m.published_tail():
                await client.progress.wait()
        sync = slave.slave_sync

        async def invoke(addr: str, req: RemotingCommand, timeout_s: float) -> RemotingCommand:
            return await _process(master, req)

        sync.invoke = invoke
        await sync.sync_all("master")
        assert sync.last_error is None and slave.store.delay_offsets() == offsets_before
        await master.replication.close()
        await slave.replication.close()
        await sync.close()
        assert first_offset == 0

    _run(body)
    m.close()  # the master is gone
    slave.store.close()
    promoted = _broker(tmp_path / "s", "ASYNC_MASTER", clock)  # restarted with brokerId=0
    p = promoted.store

    async def after() -> None:
        # a replay of the marked send is a duplicate; the next one is stored at the queue's next offset
        res = await _process(promoted, _marked(b"marked-1", 1, 2))
        assert res.code == ResponseCode.SUCCESS and res.ext_fields[DUPLICATE_FIELD] == "true"
        res = await _process(promoted, _marked(b"marked-2", 2, 3))
        assert res.code == ResponseCode.SUCCESS and int(res.ext_fields["queueOffset"]) == 1
        res = await _process(promoted, send_request(send_header("TopicA", queue_id=1), b"plain", opaque=4))
        assert int(res.ext_fields["queueOffset"]) == 2

    _run(after)
    assert p.deliver_due() == 0  # nothing the old master delivered is delivered again
    assert _bodies(p, "D") == [b"due-0", b"due-1", b"due-2"]
    assert _bodies(p, "T") == [b"timed-due"]
    clock.advance(130_000)
    assert p.deliver_due() == 2  # what was still waiting is delivered, once
    assert p.deliver_due() == 0
    assert _bodies(p, "D") == [b"due-0", b"due-1", b"due-2", b"waiting"]
    assert _bodies(p, "T") == [b"timed-due", b"timed-waiting"]
    assert p.verify().problems == []
    p.close()


# ------------------------------------------------------------------ processes
SEGMENT = 64 << 10
TIMEOUT_S = 60


class BrokerProc:
    """``rmqlog broker`` on ``root`` as ``role`` (its log in ``<root>.<n>.log``)."""

    count = 0

    def __init__(self, root: Path, role: str, broker_id: int, namesrv: str) -> None:
        BrokerProc.count += 1
        conf = root.with_name(f"{root.name}.{BrokerProc.count}.conf")
        conf.write_text(
            f"brokerClusterName=C1\nbrokerName=broker-a\nbrokerId={broker_id}\nbrokerRole={role}\n"
            f"mappedFileSizeCommitLog={SEGMENT}\nslaveTimeout=3000\nhaSendHeartbeatInterval=1000\n"
        )
        self.log_path = root.with_name(f"{root.name}.{BrokerProc.count}.log")
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed by stop/kill
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rmqnet",
                "broker",
                str(root),
                "-c",
                str(conf),
                "--listen",
                "127.0.0.1:0",
                "--namesrv",
                namesrv,
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=subprocess_env(),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert " ready at 127.0.0.1:" in line, line + self.log_path.read_text()[-3000:]
        self.address = line.split()[-1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(timeout=TIMEOUT_S) == 0
        self._close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close()

    def _close(self) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text()


def _end(root: Path) -> int:
    records = rc.walk_commitlog(str(root / "commitlog"), SEGMENT)
    return records[-1].physical_offset + records[-1].total_size if records else 0


def _ack(root: Path) -> int | None:
    """``config/replicationCheckpoint.json``'s offset (``None``: none, or caught mid-rename)."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        return json.loads((root / "config" / "replicationCheckpoint.json").read_text())["slaveAckOffset"]
    return None


def _log(root: Path, upto: int) -> bytes:
    out = b""
    for start, path in rc.list_segments(str(root / "commitlog")):
        if start < upto:
            out += Path(path).read_bytes()[: min(SEGMENT, upto - start)]
    return out


def _bodies_of(root: Path) -> list[bytes]:
    return [r.body for r in rc.walk_commitlog(str(root / "commitlog"), SEGMENT)]


def _dense(root: Path) -> None:
    """Every queue's offsets in the log are 0, 1, 2... (the promoted master continued them)."""
    seen: dict[tuple[str, int], list[int]] = {}
    for r in rc.walk_commitlog(str(root / "commitlog"), SEGMENT):
        seen.setdefault((r.topic, r.queue_id), []).append(r.queue_offset)
    for key, offsets in seen.items():
        assert offsets == list(range(len(offsets))), key


def _identical(new: Path, old: Path) -> int:
    end = _end(new)
    assert _end(old) == end
    assert _log(old, end) == _log(new, end)
    return end


def test_async_master_killed_its_slave_promoted_and_the_old_master_rejoins(
    tmp_path: Path, namesrv: tuple[subprocess.Popen[str], str]
) -> None:
    ns_proc, ns_addr = namesrv
    assert ns_proc.stderr is not None
    m_root, s_root = tmp_path / "m", tmp_path / "s"
    master = BrokerProc(m_root, "ASYNC_MASTER", 0, ns_addr)
    procs = [master]
    try:
        read_until(ns_proc.stderr, f"broker registered: broker-a id 0 at {master.address}")
        slave = BrokerProc(s_root, "SLAVE", 1, ns_addr)
        procs.append(slave)
        read_until(ns_proc.stderr, f"broker registered: broker-a id 1 at {slave.address}")
        with contextlib.closing(
            Producer("PG", ns_addr, timeout_s=10.0)
        ) as producer:  # (a send may wait slaveTimeout, 3 s)
            for i in range(200):  # over three 64 KiB segments
                assert producer.send("HA", b"shared-%03d-" % i + bytes([i % 251]) * 700).status == "SEND_OK"
            assert wait_until(lambda: _ack(m_root) == _end(m_root), TIMEOUT_S, 0.1)  # the slave holds it all
            shared = _end(m_root)
            slave.stop()
            for i in range(50):  # acknowledged to the producer (ASYNC_MASTER), never replicated
                assert producer.send("HA", b"lost-%03d-" % i + bytes([7]) * 700).status == "SEND_OK"
        master.kill()
        old_end = _end(m_root)
        assert old_end > shared + 50 * 700 and old_end // SEGMENT > shared // SEGMENT

        promoted = BrokerProc(s_root, "ASYNC_MASTER", 0, ns_addr)  # the slave restarted as the master
        procs.append(promoted)
        read_until(ns_proc.stderr, f"broker registered: broker-a id 0 at {promoted.address}")
        with contextlib.closing(Producer("PG2", ns_addr, timeout_s=10.0)) as producer:
            for i in range(60):
                assert producer.send("HA", b"new-%03d-" % i + bytes([9]) * 700).status == "SEND_OK"
        rejoined = BrokerProc(m_root, "SLAVE", 1, ns_addr)  # the old master restarted as its slave
        procs.append(rejoined)
        assert wait_until(lambda: _ack(s_root) == _end(s_root) and _ack(m_root) is None, TIMEOUT_S, 0.1), (
            rejoined.log()[-3000:]
        )
        with contextlib.closing(Producer("PG3", ns_addr, timeout_s=10.0)) as producer:  # and replication goes on
            for i in range(20):
                assert producer.send("HA", b"more-%03d" % i).status == "SEND_OK"
        assert wait_until(lambda: _ack(s_root) == _end(s_root), TIMEOUT_S, 0.1)
        rejoined.stop()
        promoted.stop()
    finally:
        for p in procs:
            p.kill()
    assert f"{old_end - shared} bytes of this log from offset {shared} are not in the master" in rejoined.log()
    end = _identical(s_root, m_root)
    bodies = _bodies_of(m_root)
    assert not any(b.startswith(b"lost-") for b in bodies)
    assert sum(b.startswith(b"new-") for b in bodies) == 60 and end > old_end - 50 * 700
    _dense(s_root)


def _send_marked(address: str, body: bytes, sequence: int) -> RemotingCommand:
    async def send() -> RemotingCommand:
        host, _, port = address.rpartition(":")
        conn = await ClientConnection.connect(host, int(port), timeout_s=10)
        try:
            req = send_request(send_header("HA", queue_id=0), body)
            req.ext_fields.update(IdempotenceMarker("sink/q/0", sequence).to_ext())
            return await conn.invoke(req, 10)
        finally:
            conn.close()
            await conn.wait_closed()

    return asyncio.run(send())


def test_sync_master_every_send_ok_is_on_the_promoted_slave(
    tmp_path: Path, namesrv: tuple[subprocess.Popen[str], str]
) -> None:
    ns_proc, ns_addr = namesrv
    assert ns_proc.stderr is not None
    m_root, s_root = tmp_path / "m", tmp_path / "s"
    master = BrokerProc(m_root, "SYNC_MASTER", 0, ns_addr)
    procs = [master]
    ok: list[bytes] = []
    not_ok: list[bytes] = []
    try:
        read_until(ns_proc.stderr, f"broker registered: broker-a id 0 at {master.address}")
        slave = BrokerProc(s_root, "SLAVE", 1, ns_addr)
        procs.append(slave)
        read_until(ns_proc.stderr, f"broker registered: broker-a id 1 at {slave.address}")
        with contextlib.closing(
            Producer("PG", ns_addr, timeout_s=10.0)
        ) as producer:  # (a send may wait slaveTimeout, 3 s)
            for i in range(10_000):  # until the slave is in reach
                body = b"first-%d" % i
                (ok if producer.send("HA", body).status == "SEND_OK" else not_ok).append(body)
                if ok:
                    break
            for i in range(150):
                body = b"sync-%03d-" % i + bytes([i % 251]) * 600
                if producer.send("HA", body).status == "SEND_OK":  # (FLUSH_SLAVE_TIMEOUT on a slow host: stored)
                    ok.append(body)
            assert len(ok) > 100
            marked = _send_marked(master.address, b"marked-1", 1)
            assert marked.code == ResponseCode.SUCCESS
            ok.append(b"marked-1")
            slave.kill()  # SIGKILL: the slave goes first
            for i in range(20):  # stored on the master only, never SEND_OK
                body = b"unacked-%02d" % i
                assert producer.send("HA", body).status == "SLAVE_NOT_AVAILABLE"
                not_ok.append(body)
            assert _send_marked(master.address, b"marked-2", 2).code == ResponseCode.SLAVE_NOT_AVAILABLE
            not_ok.append(b"marked-2")
        master.kill()

        promoted = BrokerProc(s_root, "SYNC_MASTER", 0, ns_addr)
        procs.append(promoted)
        read_until(ns_proc.stderr, f"broker registered: broker-a id 0 at {promoted.address}")
        on_promoted = set(_bodies_of(s_root))
        assert set(ok) <= on_promoted  # every SEND_OK is there
        replay = _send_marked(promoted.address, b"marked-1", 1)  # a duplicate: the marker came with the log
        assert replay.ext_fields.get(DUPLICATE_FIELD) == "true"
        again = _send_marked(promoted.address, b"marked-2", 2)  # its marker never reached the slave: stored
        assert again.ext_fields.get(DUPLICATE_FIELD) is None and again.ext_fields["queueOffset"] != "-1"
        rejoined = BrokerProc(m_root, "SLAVE", 1, ns_addr)
        procs.append(rejoined)
        with contextlib.closing(Producer("PG2", ns_addr, timeout_s=10.0)) as producer:
            for i in range(10_000):  # SEND_OK again once the old master, now its slave, holds it
                if producer.send("HA", b"after-%d" % i).status == "SEND_OK":
                    break
            else:
                raise AssertionError("the rejoined slave never acknowledged")
        assert wait_until(lambda: _ack(s_root) == _end(s_root) and _ack(m_root) is None, TIMEOUT_S, 0.1)
        rejoined.stop()
        promoted.stop()
    finally:
        for p in procs:
            p.kill()
    assert "are not in the master" in rejoined.log()
    _identical(s_root, m_root)
    bodies = _bodies_of(m_root)
    assert set(ok) <= set(bodies)
    assert not any(b.startswith(b"unacked-") for b in bodies)
    assert bodies.count(b"marked-1") == 1 and bodies.count(b"marked-2") == 1
    _dense(s_root)
