"""A name server, a SYNC_MASTER and its slave as ``rmqlog`` processes on 127.0.0.1, all with
ACL: the brokers register signed with the cluster's credentials, the slave proves
them to its master and replicates (a signed producer's sends are SEND_OK once it holds them),
and a fake slave on the master's HA port gets no byte. Waits are on what the processes print
or answer; nothing sleeps."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqnet.client import Producer
from tests.conftest import subprocess_env
from tests.wire.broker_helpers import read_until
from tests.wire.failover_procs import free_port
from tests.wire.test_ha_process import BrokerProc

ADMIN_KEY, ADMIN_SECRET = "rocketmq2", "12345678"
CREDS = json.dumps({"accessKey": ADMIN_KEY, "secretKey": ADMIN_SECRET}, separators=(",", ":"))
PLAIN_ACL = f"""
accounts:
  - accessKey: {ADMIN_KEY}
    secretKey: {ADMIN_SECRET}
    admin: true
"""


@pytest.fixture
def acl_namesrv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[subprocess.Popen[str], str]]:
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"aclEnable=true\ninnerClientAuthenticationCredentials={CREDS}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqnet", "namesrv", "--listen", "127.0.0.1:0", "-c", str(conf)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        yield proc, line.split()[-1]
    finally:
        proc.kill()
        proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()


def _conf(path: Path, role: str, broker_id: int, extra: str = "") -> Path:
    path.write_text(
        f"brokerClusterName=C1\nbrokerName=broker-a\nbrokerId={broker_id}\nbrokerRole={role}\n"
        f"aclEnable=true\ninnerClientAuthenticationCredentials={CREDS}\nslaveTimeout=3000\n{extra}"
    )
    return path


def test_an_acl_cluster_of_processes_registers_and_replicates(
    tmp_path: Path, acl_namesrv: tuple[subprocess.Popen[str], str]
) -> None:
    ns_proc, ns_addr = acl_namesrv
    assert ns_proc.stderr is not None
    ha_port = free_port()
    master = BrokerProc(
        tmp_path / "m", _conf(tmp_path / "m.conf", "SYNC_MASTER", 0, f"haListenPort={ha_port}\n"), ns_addr
    )
    slave: BrokerProc | None = None
    producer = Producer("PG", ns_addr, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET)
    fake = None
    try:
        read_until(ns_proc.stderr, f"broker registered: broker-a id 0 at {master.address}")
        slave = BrokerProc(tmp_path / "s", _conf(tmp_path / "s.conf", "SLAVE", 1), ns_addr)
        read_until(ns_proc.stderr, f"broker registered: broker-a id 1 at {slave.address}")
        for _ in range(10_000):  # until the slave is in reach (SLAVE_NOT_AVAILABLE before)
            if producer.send("HA", b"first").status == "SEND_OK":
                break
        else:
            raise AssertionError("the slave never acknowledged")
        assert {producer.send("HA", b"m%d" % i).status for i in range(20)} == {"SEND_OK"}
        fake = socket.create_connection(("127.0.0.1", ha_port), timeout=60)  # a fake slave on the HA port
        fake.sendall(struct.pack(">q", 0))
        assert fake.recv(65536) == b""  # closed, nothing of the log
    finally:
        if fake is not None:
            fake.close()
        producer.close()
        if slave is not None:
            slave.stop()
        master.stop()
