"""jobs/quickstart.py as ``make quickstart`` runs it (a process of its own, a small run): progress
for every micro-batch written and read, nothing of Spark's log on the terminal (it goes to the
log file beside the store), the store it leaves, and the time it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import subprocess_env

import rmqlog

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_quickstart_shows_progress_and_no_spark_log(tmp_path: Path) -> None:
    root = tmp_path / "quickstart"
    run = subprocess.run(
        [sys.executable, str(REPO / "jobs" / "quickstart.py"), "--root", str(root), "--events", "2000", "--files", "2"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-5000:]
    out = run.stdout
    assert run.stderr == "", f"the quickstart wrote to stderr:\n{run.stderr}"
    assert "WARN" not in out
    assert len(re.findall(r"write batch \d+: 1,000 rows", out)) == 2, out
    assert len(re.findall(r"read batch \d+: 500 rows", out)) == 4, out
    assert re.search(r"Spark [\d.]+ started in [\d.]+s", out), out
    # what was measured, said apart: the first micro-batch (Spark's warm-up), then the steady rate
    assert re.search(
        r"wrote 2,000 messages in [\d.]+s: first micro-batch 1,000 in [\d.]+s \(with Spark's warm-up\), "
        r"then 1,000 in [\d.]+s: [\d,]+ messages/s steady",
        out,
    ), out
    assert re.search(
        r"read back 2,000 messages in [\d.]+s: first micro-batch 500 in [\d.]+s \(with Spark's warm-up\), "
        r"then 1,500 in [\d.]+s: [\d,]+ messages/s steady",
        out,
    ), out
    stamps = [float(s) for s in re.findall(r"^\[\s*([\d.]+)s\]", out, re.M)]
    assert stamps == sorted(stamps) and out.rstrip().endswith(
        "quickstart done (the time includes starting Python and Spark)"
    )
    log = root.with_name("quickstart.spark.log")
    assert log.is_file()  # Spark's own output went there
    with rmqlog.MessageStore.open(root, create=False) as ms:
        assert sum(ms.max_offset("orders", q) for q in range(4)) == 2000
        assert all(ms.committed_offset("quickstart", "orders", q) == ms.max_offset("orders", q) for q in range(4))
