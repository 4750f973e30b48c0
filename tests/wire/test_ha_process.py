"""A master and a slave as separate ``rmqlog broker`` processes with a name server, on
127.0.0.1: the slave learns its master's HA address from its registration, a SYNC_MASTER
send is SEND_OK only once the slave holds it, a slave stopped and restarted resumes, and
after both stop cleanly their commitlogs compare byte for byte (segment rolls included) and
read the same through the reference codec.

Waits are on what the processes print or answer (SEND_OK from a SYNC_MASTER means the slave
acknowledged everything up to that message); nothing sleeps.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import refcodec as rc
from rmqnet.client import Producer
from tests.conftest import subprocess_env
from tests.wire.broker_helpers import read_until

SEGMENT = 64 << 10
TIMEOUT_S = 60


class BrokerProc:
    def __init__(self, root: Path, conf: Path, namesrv: str) -> None:
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
            stderr=subprocess.DEVNULL,
            text=True,
            env=subprocess_env(),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert " ready at 127.0.0.1:" in line, line
        self.address = line.split()[-1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(timeout=TIMEOUT_S) == 0
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _conf(path: Path, role: str, broker_id: int) -> Path:
    path.write_text(
        f"brokerClusterName=C1\nbrokerName=broker-a\nbrokerId={broker_id}\nbrokerRole={role}\n"
        f"mappedFileSizeCommitLog={SEGMENT}\nslaveTimeout=3000\n"
    )
    return path


def _send_until_ok(producer: Producer, body: bytes) -> None:
    """Send until a SYNC_MASTER answers SEND_OK: its slave acknowledged everything up to it
    (before the slave is in reach, sends are SLAVE_NOT_AVAILABLE: stored on the master)."""
    for _ in range(10_000):
        if producer.send("HA", body).status == "SEND_OK":
            return
    raise AssertionError("the slave never acknowledged")


def _log(root: Path, upto: int) -> bytes:
    out = b""
    for start, path in rc.list_segments(str(root / "commitlog")):
        if start < upto:
            out += Path(path).read_bytes()[: min(SEGMENT, upto - start)]
    return out


def test_sync_master_and_slave_processes(tmp_path: Path, namesrv: tuple[subprocess.Popen[str], str]) -> None:
    ns_proc, ns_addr = namesrv
    master = BrokerProc(tmp_path / "m", _conf(tmp_path / "m.conf", "SYNC_MASTER", 0), ns_addr)
    slave: BrokerProc | None = None
    producer = Producer("PG", ns_addr)
    try:
        assert ns_proc.stderr is not None
        read_until(ns_proc.stderr, f"broker registered: broker-a id 0 at {master.address}")
        slave = BrokerProc(tmp_path / "s", _conf(tmp_path / "s.conf", "SLAVE", 1), ns_addr)
        read_until(ns_proc.stderr, f"broker registered: broker-a id 1 at {slave.address}")
        _send_until_ok(producer, b"first")
        statuses = [producer.send("HA", bytes([i % 251]) * 700).status for i in range(300)]  # rolls 64 KiB segments
        assert set(statuses) == {"SEND_OK"}
        slave.stop()  # the slave stops; the master goes on (SLAVE_NOT_AVAILABLE: stored, unreplicated)
        assert producer.send("HA", b"while the slave is down").status == "SLAVE_NOT_AVAILABLE"
        slave = BrokerProc(tmp_path / "s", _conf(tmp_path / "s.conf", "SLAVE", 1), ns_addr)
        _send_until_ok(producer, b"after the restart")
    finally:
        producer.close()
        if slave is not None:
            slave.stop()
        master.stop()
    m_records = rc.walk_commitlog(str(tmp_path / "m" / "commitlog"), SEGMENT)
    s_records = rc.walk_commitlog(str(tmp_path / "s" / "commitlog"), SEGMENT)
    assert len(m_records) >= 303 and len(s_records) == len(m_records)
    end = m_records[-1].physical_offset + m_records[-1].total_size
    assert end > 3 * SEGMENT
    assert _log(tmp_path / "s", end) == _log(tmp_path / "m", end)
