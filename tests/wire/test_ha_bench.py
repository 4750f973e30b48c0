"""``jobs/bench_ha.py`` runs end to end at a tiny size and prints each figure beside its peer
(the figures themselves are the job's to report, never a test's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import subprocess_env

JOBS = Path(__file__).resolve().parents[2] / "jobs"


def test_bench_ha_prints_lag_and_sync_beside_their_peers(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, str(JOBS / "bench_ha.py"), "--root", str(tmp_path), "--rounds", "1", "--json",
                          "--rate", "2000", "--lag-batches", "5", "--batch", "10", "--seconds", "0.5", "--in-flight", "2"],
                         capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert res.returncode == 0, res.stderr[-3000:]
    figures = [json.loads(line) for line in res.stdout.splitlines()]  # (under --json stdout holds only these)
    assert [f["name"] for f in figures] == ["replication lag p50, 2000 msgs/s in batches of 10",
                                            "replication lag p99, 2000 msgs/s in batches of 10", "SYNC_MASTER sends"]
    p50, p99, sync = figures
    for lag, q in ((p50, "p50"), (p99, "p99")):
        assert lag["unit"] == "ms" and lag["peer"] == f"send round trip {q}" and lag["value"] >= 0
    assert sync["value"] > 0 and sync["peer_value"] > 0 and sync["peer"] == "ASYNC_MASTER sends" and sync["ratio"] > 0
    assert "replication lag p50" in res.stderr  # the readable lines, on stderr under --json


def test_bench_ha_refuses_an_unknown_part(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, str(JOBS / "bench_ha.py"), "--parts", "lag,nope", "--root", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, env=subprocess_env())
    assert res.returncode == 2 and "unknown part 'nope'" in res.stderr
