"""The gRPC benchmark (``jobs/bench_grpc.py``) runs end to end at a tiny size: a broker process
on 127.0.0.1 with its gRPC port, sends of both protocols, receive + ack beside the remoting
pull, and the redelivery of unacked messages. No figure is judged (they are wall-clock); what is
checked is that each target is measured beside its peer of the same run, under ``--json`` one
line per figure, and that the broker was stopped (its store opens again holding what was sent)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import rmqlog

REPO = Path(__file__).resolve().parent.parent.parent


def test_bench_grpc_prints_each_target_beside_its_peer(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "jobs" / "bench_grpc.py"),
            "--rounds",
            "2",
            "--messages",
            "20",
            "--consume",
            "256",
            "--root",
            str(tmp_path / "w"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    by_name = {f["name"]: f for f in lines}
    recv = by_name["gRPC ReceiveMessage 32 + AckMessage, one pair at a time"]
    assert recv["unit"] == "msgs/s" and recv["value"] > 0 and recv["peer_value"] > 0 and "PULL_MESSAGE" in recv["peer"]
    late = by_name["redelivery of an unacked message after its invisible time, p99"]
    assert late["unit"] == "ms" and 0 <= late["value"] < 30_000
    send = by_name["gRPC SendMessage 1 KiB, one at a time, round trip p50"]
    assert send["value"] > 0 and send["peer"] == "remoting SEND_MESSAGE_V2 on the same broker"
    # (two rounds: each round's groups read every message again, and 2 x 32 come back)
    assert "gRPC receive + ack" in out.stderr and "redelivery after a 1000 ms invisible time, 64 messages" in out.stderr
    # the broker stopped cleanly: the store opens, holding the sends and the consume topics
    with rmqlog.MessageStore.open(tmp_path / "w" / "store", read_only=True) as store:
        assert sum(store.max_offset("BenchGrpc", q) for q in range(4)) >= 2 * 2 * 20
        assert store.max_offset("BenchPop", 0) == 256 and store.max_offset("BenchRedeliver", 0) == 32
