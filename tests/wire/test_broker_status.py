"""``rmqlog broker-status --namesrv``: a SYNC_MASTER and its slave as ``rmqlog broker``
processes with a name server; the command prints each broker's role, address, version, disk
use, rates and HA lag (text and ``--json``), and its exit statuses (1: no broker registered,
3: no name server to ask). The rates' arithmetic (``putTps``/``getTransferedTps``) on an
injected clock."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import rmqlog
from rmqnet.broker.metrics import RateSampler
from rmqnet.cli import main
from rmqnet.client import Producer
from rmqnet.client.cluster_status import cluster_status as status
from rmqnet.commands.broker_status import text_lines
from rmqnet.remoting.register import ClusterInfo
from rmqnet.remoting.route import BrokerData
from tests.wire.broker_helpers import read_until
from tests.wire.real_clients import free_port
from tests.wire.test_ha_process import BrokerProc, _conf, _send_until_ok


def test_broker_status_of_a_master_and_its_slave(
    tmp_path: Path, namesrv: tuple[subprocess.Popen[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    ns_proc, ns_addr = namesrv
    master = BrokerProc(tmp_path / "m", _conf(tmp_path / "m.conf", "SYNC_MASTER", 0), ns_addr)
    slave: BrokerProc | None = None
    producer = Producer("PG", ns_addr)
    try:
        assert ns_proc.stderr is not None
        read_until(ns_proc.stderr, f"broker registered: broker-a id 0 at {master.address}")
        slave = BrokerProc(tmp_path / "s", _conf(tmp_path / "s.conf", "SLAVE", 1), ns_addr)
        read_until(ns_proc.stderr, f"broker registered: broker-a id 1 at {slave.address}")
        _send_until_ok(producer, b"first")  # SEND_OK from a SYNC_MASTER: the slave holds everything so far
        assert main(["broker-status", "--namesrv", ns_addr, "--json"]) == 0
        obj = json.loads(capsys.readouterr().out)
        assert obj["namesrv"] == ns_addr and obj["totals"]["brokers"] == 2 and obj["totals"]["unreachable"] == 0
        rows = {r["brokerId"]: r for r in obj["brokers"]}
        m, s = rows[0], rows[1]
        assert (m["cluster"], m["brokerName"], m["role"], m["address"]) == (
            "C1",
            "broker-a",
            "SYNC_MASTER",
            master.address,
        )
        assert (s["role"], s["address"]) == ("SLAVE", slave.address)
        assert m["version"] == s["version"] == "V4_9_8"
        assert 0 < m["diskUsedRatio"] <= 1
        assert m["msgPutTotalTodayNow"] >= 1 and m["commitLogMaxOffset"] > 0
        assert s["haLagBytes"] == m["commitLogMaxOffset"] - s["commitLogMaxOffset"] == 0
        assert m["haLagBytes"] == 0
        assert m["inTps"] >= 0 and m["outTps"] == 0
        assert main(["broker-status", "--namesrv", ns_addr]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split()[:4] == ["cluster", "broker", "id", "role"]
        assert any(line.split()[:5] == ["C1", "broker-a", "0", "SYNC_MASTER", master.address] for line in lines)
        assert any(line.split()[:5] == ["C1", "broker-a", "1", "SLAVE", slave.address] for line in lines)
        assert lines[-1].startswith("2 brokers (0 unreachable)")
    finally:
        producer.close()
        if slave is not None:
            slave.stop()
        master.stop()


def test_exit_statuses_without_brokers_or_name_server(
    namesrv: tuple[subprocess.Popen[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, ns_addr = namesrv
    assert main(["broker-status", "--namesrv", ns_addr]) == 1
    assert "no broker is registered" in capsys.readouterr().err
    assert main(["broker-status", "--namesrv", f"127.0.0.1:{free_port()}", "--timeout", "2"]) == 3
    err = capsys.readouterr().err
    assert "cannot be asked" in err and "Traceback" not in err
    assert main(["broker-status"]) == 2  # --namesrv is required


class _Admin:
    """A name server's answer with two brokers, one of which does not answer."""

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo({"b": BrokerData("C", "b", {0: "127.0.0.1:1", 1: "127.0.0.1:2"})}, {"C": ["b"]})

    def runtime_info(self, addr: str) -> dict[str, str]:
        if addr.endswith(":2"):
            raise ConnectionRefusedError("refused")
        return {
            "brokerVersionDesc": "V4_9_8",
            "putTps": "3.50 1.00 0.10",
            "getTransferedTps": "2.00 0 0",
            "commitLogMaxOffset": "100",
            "commitLogDiskRatio": "0.25",
        }


def test_a_broker_that_does_not_answer_is_listed_with_its_error() -> None:
    obj = status(_Admin(), "ns:9876")  # type: ignore[arg-type]
    master, slave = obj["brokers"]
    assert (master["inTps"], master["outTps"], master["diskUsedRatio"], master["role"]) == (3.5, 2.0, 0.25, "MASTER")
    assert master["haLagBytes"] is None and slave["haLagBytes"] is None  # the slave's side is not known
    assert slave["role"] == "SLAVE" and "ConnectionRefusedError" in slave["error"]
    assert obj["totals"] == {"brokers": 2, "unreachable": 1, "inTps": 3.5, "outTps": 2.0}
    lines = text_lines(obj)
    assert "unreachable: ConnectionRefusedError" in lines[2] and lines[-1].startswith("2 brokers (1 unreachable)")


class _Broker:
    """What :class:`RateSampler` reads of a broker."""

    def __init__(self) -> None:
        self.sender: Any = type("S", (), {"put_total": 0})()
        self.metrics: Any = type("M", (), {"get_total": 0})()


def test_rates_over_10_s_1_min_and_10_min_on_the_clock() -> None:
    clock = rmqlog.ManualClock(1_700_000_000_000)
    b = _Broker()
    rates = RateSampler(b)  # type: ignore[arg-type]
    assert rates.runtime_keys() == {"putTps": "0.00 0.00 0.00", "getTransferedTps": "0.00 0.00 0.00"}
    for second in range(120):  # 5 stored and 2 pulled a second for a minute, then 20 stored a second
        b.sender.put_total += 5 if second < 60 else 20
        b.metrics.get_total += 2 if second < 60 else 0
        rates.run_once(clock.wall_ms())
        rates.run_once(clock.wall_ms() + 500)  # within the second: no sample
        clock.advance(1000)
    assert len(rates.samples) == 120
    put10, get10 = rates.tps(10_000)
    assert (put10, get10) == (20.0, 0.0)
    assert rates.tps(60_000) == (20.0, 0.0)
    put600, get600 = rates.tps(600_000)  # as much of it as was sampled: 119 s
    assert put600 == pytest.approx((59 * 5 + 60 * 20) / 119) and get600 == pytest.approx(59 * 2 / 119)
    assert rates.runtime_keys()["putTps"].split()[:2] == ["20.00", "20.00"]
