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
    figures = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert [f["figure"] for f in figures] == ["replication lag p50/p99", "SYNC_MASTER sends"]
    lag, sync = figures
    assert len(lag["value"]) == 2 and lag["peer"].startswith("send round trip")
    assert sync["value"] > 0 and sync["peer_value"] > 0 and sync["peer"] == "ASYNC_MASTER sends"


def test_bench_ha_refuses_an_unknown_part(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, str(JOBS / "bench_ha.py"), "--parts", "lag,nope", "--root", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, env=subprocess_env())
    assert res.returncode == 2 and "unknown part 'nope'" in res.stderr
