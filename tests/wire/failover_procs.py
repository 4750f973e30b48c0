"""Broker groups as ``rmqlog broker`` processes on 127.0.0.1 for the failover tests (a name
server from :func:`tests.wire.test_ha_process.namesrv`): broker-a's SYNC_MASTER (``a0``) and
SLAVE (``a1``), broker-b's ASYNC_MASTER (``b0``), each on a fixed port of its own so that a
master killed and started again keeps its address. Used by tests/wire/test_failover_process.py
and tests/spark/test_spark_failover.py."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import subprocess_env

TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    """``rmqlog broker`` on a fixed port of 127.0.0.1 (a restart keeps its address)."""

    def __init__(self, root: Path, conf: Path, ns: str, port: int) -> None:
        self.args = [
            sys.executable,
            "-m",
            "rmqnet",
            "broker",
            str(root),
            "-c",
            str(conf),
            "--listen",
            f"127.0.0.1:{port}",
            "--namesrv",
            ns,
        ]
        self.address = f"127.0.0.1:{port}"
        self.proc: subprocess.Popen[str] | None = None
        self.start()

    def start(self) -> None:
        """Start it and wait until it serves (it registers at its first round)."""
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=subprocess_env()
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip().endswith(f" ready at {self.address}"), line

    def kill(self) -> None:
        """kill -9."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM (a clean stop), else kill; its stdout closed."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def conf(path: Path, name: str, role: str, broker_id: int, **extra: Any) -> Path:
    """A broker.conf: its own HA port (``haListenPort=0``), small segments, ``extra`` keys."""
    lines = {
        "brokerClusterName": "C1",
        "brokerName": name,
        "brokerId": broker_id,
        "brokerRole": role,
        "haListenPort": 0,
        "slaveTimeout": 3000,
        "mappedFileSizeCommitLog": 1 << 20,
        **extra,
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    return path


@contextmanager
def start_groups(tmp: Path, ns: str, **extra: Any) -> Iterator[dict[str, Broker]]:
    """``a0`` (broker-a SYNC_MASTER), ``a1`` (its SLAVE), ``b0`` (broker-b ASYNC_MASTER), roots
    and confs under ``tmp``; every one stopped (or killed) at the end."""
    started: dict[str, Broker] = {}
    try:
        for key, name, role, bid in (
            ("a0", "broker-a", "SYNC_MASTER", 0),
            ("a1", "broker-a", "SLAVE", 1),
            ("b0", "broker-b", "ASYNC_MASTER", 0),
        ):
            started[key] = Broker(tmp / key, conf(tmp / f"{key}.conf", name, role, bid, **extra), ns, free_port())
        yield started
    finally:
        for b in started.values():
            b.stop()


def wait(what: str, check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    """``check()`` until it answers something true (the processes' state is remote: asked
    again every 50 ms); its answer."""
    deadline = time.monotonic() + timeout_s
    got: Any = None
    while True:
        try:
            got = check()
            if got:
                return got
        except Exception as exc:  # noqa: BLE001 - not there yet
            got = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: never (last: {got!r})")
        time.sleep(0.05)
