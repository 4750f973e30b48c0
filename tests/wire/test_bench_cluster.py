"""``jobs/bench_cluster.py`` runs end to end at a tiny size and prints each figure beside its
peer (the figures themselves are the job's to report, never a test's). Its ``spark`` part, a
Spark application of its own, is left out here as ``bench_spark.py`` is (a JVM per run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import subprocess_env

JOBS = Path(__file__).resolve().parents[2] / "jobs"


def test_bench_cluster_prints_lag_sync_and_failover_beside_their_peers(tmp_path: Path) -> None:
    res = subprocess.run(
        [
            sys.executable,
            str(JOBS / "bench_cluster.py"),
            "--root",
            str(tmp_path),
            "--rounds",
            "1",
            "--json",
            "--parts",
            "lag,sync,failover",
            "--rate",
            "2000",
            "--lag-seconds",
            "0.5",
            "--batch",
            "10",
            "--seconds",
            "0.5",
            "--in-flight",
            "2",
            "--backlog",
            "400",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=subprocess_env(),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    figures = [json.loads(line) for line in res.stdout.splitlines()]  # (under --json stdout holds only these)
    names = [f["name"] for f in figures]
    assert len(names) == 4 and names[0].startswith("replication lag p50, 2000 msgs/s asked")
    assert names[1].startswith("replication lag p99") and names[2:] == [
        "SYNC_MASTER sends",
        "master killed: next message from the slave",
    ]
    p50, p99, sync, failover = figures
    for lag, q in ((p50, "p50"), (p99, "p99")):
        assert lag["unit"] == "ms" and lag["peer"] == f"send round trip {q}" and lag["value"] >= 0
    assert sync["value"] > 0 and sync["peer_value"] > 0 and sync["peer"] == "ASYNC_MASTER sends" and sync["ratio"] > 0
    assert failover["unit"] == "s" and failover["value"] > 0 and failover["peer_value"] > 0
    assert "replication lag, " in res.stderr and "batches never seen on the slave: 0" in res.stderr


def test_bench_cluster_refuses_an_unknown_part(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(JOBS / "bench_cluster.py"), "--parts", "lag,nope", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
    )
    assert res.returncode == 2 and "unknown part 'nope'" in res.stderr
