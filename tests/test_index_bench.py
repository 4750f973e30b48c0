"""jobs/bench_index.py runs end to end (tiny sizes; no timing is asserted, only that every figure
of its docstring is printed beside its peers, and that every queried key was found)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

JOBS = Path(__file__).resolve().parent.parent / "jobs"


def test_bench_index_prints_build_rate_beside_peers_and_query_latency(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(JOBS / "bench_index.py"),
            "--keys",
            "40000",
            "--batch",
            "4096",
            "--queries",
            "300",
            "--slots",
            "2000",
            "--entries",
            "8000",
            "--root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert re.search(r"index: 40,000 keys in 6 file\(s\) of 168,040 bytes", out), out
    assert re.search(r"build \(IndexService.build\): +[\d.]+ M msgs/s +[\d.]+ M keys/s .*CPU [\d.]+ M msgs/s", out), out
    assert re.search(r"peer, making the keys alone: +[\d.]+ M msgs/s", out), out
    assert re.search(r"peer, one numpy pass: +[\d.]+ M msgs/s", out), out
    assert re.search(
        r"query \(IndexService.query, 300 keys, 40,000 indexed\): p50 [\d.]+ us +p99 [\d.]+ us .*\(misses: 0\)", out
    ), out
    assert list(tmp_path.iterdir()) == []  # the job cleans up
