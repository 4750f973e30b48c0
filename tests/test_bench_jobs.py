"""The benchmark jobs run end to end (tiny sizes; no timing is asserted, only that every
figure the issue asks for is printed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

JOBS = Path(__file__).resolve().parent.parent / "jobs"


def test_bench_store_prints_each_body_size_from_its_own_process(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(JOBS / "bench_store.py"), "--messages", "4096", "--messages-4k", "1024",
         "--batch", "1024", "--rounds", "1", "--root", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    for body in (100, 4096):
        section = out.split(f"== body {body} B:")[1].split("== body")[0]
        for line in ("put_batch ", "plain write()", "read to Arrow", "plain read()"):
            assert line in section, (body, line, out)
        assert re.search(r"-> put_batch = \d+% of plain", section), section
        # reads three ways over the same ranges: read_queue and get_messages with CRCs checked, read_queue unchecked
        assert re.search(r"read to Arrow +[\d,]+ msgs/s .* read_queue, body CRCs checked \(([\d,]+) messages, ranges of ([\d,]+)\)", section), section
        step = re.search(r"ranges of ([\d,]+)\)", section).group(1)  # type: ignore[union-attr]
        assert re.search(rf"get_messages +[\d,]+ msgs/s +body CRCs checked, max_count = {step} ", section), section
        assert re.search(r"read_queue +[\d,]+ msgs/s +body CRCs not checked \(check_crc=False\): the peer", section), section
        assert re.search(r"-> CRC checks: read_queue checked = \d+% of unchecked; get_messages = \d+% of read_queue "
                         r"\(by the reading thread's CPU time: \d+%; \d+%\)", section), section
        assert (tmp_path / f"body-{body}").is_dir()  # each size ran in its own child, in its own directory


def test_bench_store_rejects_an_unknown_body_size(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(JOBS / "bench_store.py"), "--body", "512", "--root", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )
    assert res.returncode == 2 and "invalid choice" in res.stderr


def test_bench_durability_prints_every_target_figure_beside_its_peer(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(JOBS / "bench_durability.py"), "--recovery-gib", "0.01", "--sync-batches", "5",
         "--async-messages", "65536", "--rounds", "1", "--root", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    assert re.search(r"recovery after abnormal exit, .* records re-dispatched: [\d.]+ s \| peer: sequential read", out), out
    sync = next(line for line in out.splitlines() if line.startswith("SYNC_FLUSH, 4 writer processes"))
    assert re.search(r"[\d,]+ msgs/s \[\d+ k\] over the span of the puts \(through the writers' close and exit: [\d,]+ msgs/s", sync), sync
    syncs, puts = map(int, re.search(r"(\d+) syncs for (\d+) puts", sync).groups())  # type: ignore[union-attr]
    assert puts == 20 and 1 <= syncs <= puts  # the measured puts' syncs only: never more than one each
    assert "peer: pwrite+fdatasync" in sync and "under ASYNC_FLUSH" in sync
    assert re.search(r"ASYNC_FLUSH put_batch, .* \| same store, flusher held off: [\d,]+ msgs/s", out), out


def test_bench_timer_prints_every_target_figure_beside_its_peer(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(JOBS / "bench_timer.py"), "--messages", "3000", "--rounds", "1", "--root", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    assert re.search(r"timer: 3,000 due together, one pass: [\d.]+ M msgs/s", out), out
    assert re.search(r"peer, put_batch of the same messages: [\d.]+ M msgs/s", out), out
    assert re.search(r"timer: 3,000 pending, ~1,000 due per second, a pass per second: p50 [\d.]+ ms  p99 [\d.]+ ms", out), out
    assert re.search(r"peer, a pass with nothing due: p50", out), out
    late = re.search(r"timer lateness, a pass every second: .* \(min (-?\d+) ms: never early", out)
    assert late and int(late.group(1)) >= 0, out


def test_bench_export_prints_jsonl_beside_parquet(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(JOBS / "bench_export.py"), "--messages", "3000", "--rounds", "1", "--root", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    for name in ("parquet", "jsonl", "jsonl --body hex"):
        assert re.search(rf"export {name} +[\d,]+ msgs/s +[\d.]+ s a million", out), out
    assert re.search(r"-> JSON lines = \d+% of Parquet's rate", out), out
