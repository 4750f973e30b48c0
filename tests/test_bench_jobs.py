"""The benchmark jobs run end to end (tiny sizes; no timing is asserted, only that every
figure the job reports, with its peer, is printed), all on the shared harness (jobs/harness.py): the same
flags, and under ``--json`` one JSON line per figure with its peer on stdout (the readable
output then on stderr, checked here as it is printed)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

JOBS = Path(__file__).resolve().parent.parent / "jobs"
BENCH_JOBS = sorted(p.stem for p in JOBS.glob("bench_*.py"))
KEYS = {"job", "name", "value", "unit", "peer", "peer_value", "peer_unit", "ratio", "settings"}


def _figures(stdout: str, job: str, root: Path) -> list[dict[str, Any]]:
    """The JSON lines of a ``--json`` run: every line one figure, at least one with a peer."""
    figures = [json.loads(line) for line in stdout.splitlines()]
    assert figures, stdout
    for f in figures:
        assert set(f) == KEYS and f["job"] == job, f
        assert isinstance(f["value"], float) and f["name"] and f["unit"], f
        assert f["settings"]["rounds"] == 1 and f["settings"]["root"].startswith(str(root)), f
        if f["peer"] is not None:
            assert isinstance(f["peer_value"], float) and f["peer_unit"], f
    assert any(f["peer"] and f["ratio"] is not None for f in figures), figures
    return figures


def _run_json(job: str, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(JOBS / f"{job}.py"), *args, "--rounds", "1", "--root", str(root), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )


def test_every_bench_job_is_on_the_harness() -> None:
    assert len(BENCH_JOBS) == 18, BENCH_JOBS
    for job in BENCH_JOBS:
        assert "from harness import Bench" in (JOBS / f"{job}.py").read_text(), job


@pytest.mark.parametrize("job", BENCH_JOBS)
def test_bench_job_takes_the_shared_flags(job: str, tmp_path: Path) -> None:
    helped = subprocess.run(
        [sys.executable, str(JOBS / f"{job}.py"), "--help"], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    for flag in ("--root", "--rounds", "--json"):
        assert flag in helped, (job, flag, helped)
    res = subprocess.run(
        [sys.executable, str(JOBS / f"{job}.py"), "--rounds", "0", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and "--rounds must be at least 1" in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == []  # refused before anything ran


@pytest.mark.parametrize(
    ("job", "args", "names"),
    [
        ("bench_schedule", ["--messages", "3000"], ["deliver_due, 3,000 due together"]),
        ("bench_send_back", ["--messages", "400"], ["CONSUMER_SEND_MSG_BACK, 400 failed deliveries re-stored"]),
        (
            "bench_scrub",
            ["--segment-mib", "4", "--leftover-kib", "64", "--puts", "20"],
            ["put after a killed writer's"],
        ),
        (
            "bench_retention",
            ["--segments", "20", "--queues", "4", "--passes", "20"],
            ["retention pass, nothing due, median", "get_messages x32, read pins on"],
        ),
        ("bench_transactions", ["--messages", "400"], ["END_TRANSACTION commits", "half messages sent"]),
        (
            "bench_metrics",
            ["--requests", "300", "--groups", "5", "--forms", "thread"],
            ["sends, 64 in flight, a scrape every 1 s (thread)", "broker CPU per send, a scrape every 1 s (thread)"],
        ),
        (
            "bench_console",
            ["--topics", "50", "--groups", "5", "--messages", "200"],
            ["server time of /cluster", "server time of /topics/BENCH", "server time of /groups/GROUP_0001"],
        ),
    ],
)
def test_bench_job_prints_a_json_line_per_figure_with_its_peer(
    job: str, args: list[str], names: list[str], tmp_path: Path
) -> None:
    res = _run_json(job, tmp_path, *args)
    figures = _figures(res.stdout, job, tmp_path)
    for name in names:
        assert any(f["name"].startswith(name) and f["peer"] for f in figures), (name, figures)
    assert res.stderr.strip()  # the readable output, on stderr under --json


def test_bench_store_prints_each_body_size_from_its_own_process(tmp_path: Path) -> None:
    res = _run_json("bench_store", tmp_path, "--messages", "4096", "--messages-4k", "1024", "--batch", "1024")
    out = res.stderr
    figures = _figures(res.stdout, "bench_store", tmp_path)
    for body in (100, 4096):
        put = next(f for f in figures if f["name"] == f"put_batch, {body}-byte bodies")
        assert put["unit"] == "msgs/s" and put["peer_unit"] == "B/s" and put["ratio"] > 0, put
        assert any(f["name"] == f"read_queue into Arrow, body CRCs checked, {body}-byte bodies" for f in figures)
    for body in (100, 4096):
        section = out.split(f"== body {body} B:")[1].split("== body")[0]
        for line in ("put_batch ", "plain write()", "read to Arrow", "plain read()"):
            assert line in section, (body, line, out)
        assert re.search(r"-> put_batch = \d+% of plain", section), section
        # reads three ways over the same ranges: read_queue and get_messages with CRCs checked, read_queue unchecked
        assert re.search(
            r"read to Arrow +[\d,]+ msgs/s .* read_queue, body CRCs checked \(([\d,]+) messages, ranges of ([\d,]+)\)",
            section,
        ), section
        step = re.search(r"ranges of ([\d,]+)\)", section).group(1)  # type: ignore[union-attr]
        assert re.search(rf"get_messages +[\d,]+ msgs/s +body CRCs checked, max_count = {step} ", section), section
        assert re.search(r"read_queue +[\d,]+ msgs/s +body CRCs not checked \(check_crc=False\): the peer", section), (
            section
        )
        assert re.search(
            r"-> CRC checks: read_queue checked = \d+% of unchecked; get_messages = \d+% of read_queue "
            r"\(by the reading thread's CPU time: \d+%; \d+%\)",
            section,
        ), section
        assert (tmp_path / f"body-{body}").is_dir()  # each size ran in its own child, in its own directory


def test_bench_store_rejects_an_unknown_body_size(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(JOBS / "bench_store.py"), "--body", "512", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "invalid choice" in res.stderr


def test_bench_durability_prints_every_target_figure_beside_its_peer(tmp_path: Path) -> None:
    res = _run_json(
        "bench_durability", tmp_path, "--recovery-gib", "0.01", "--sync-batches", "5", "--async-messages", "65536"
    )
    out = res.stderr
    names = [f["name"] for f in _figures(res.stdout, "bench_durability", tmp_path) if f["peer"]]
    assert len(names) == 4 and names[1:] == [
        "SYNC_FLUSH, 4 writer processes",
        "SYNC_FLUSH, 4 writer processes, vs ASYNC_FLUSH",
        "ASYNC_FLUSH put_batch, 100-byte bodies, the flusher at work",
    ], names
    assert re.search(
        r"recovery after abnormal exit, .* records re-dispatched: [\d.]+ s \| peer: sequential read", out
    ), out
    sync = next(line for line in out.splitlines() if line.startswith("SYNC_FLUSH, 4 writer processes"))
    assert re.search(
        r"[\d,]+ msgs/s \[\d+ k\] over the span of the puts \(through the writers' close and exit: [\d,]+ msgs/s", sync
    ), sync
    syncs, puts = map(int, re.search(r"(\d+) syncs for (\d+) puts", sync).groups())  # type: ignore[union-attr]
    assert puts == 20 and 1 <= syncs <= puts  # the measured puts' syncs only: never more than one each
    assert "peer: pwrite+fdatasync" in sync and "under ASYNC_FLUSH" in sync
    assert re.search(r"ASYNC_FLUSH put_batch, .* \| same store, flusher held off: [\d,]+ msgs/s", out), out


def test_bench_timer_prints_every_target_figure_beside_its_peer(tmp_path: Path) -> None:
    res = _run_json("bench_timer", tmp_path, "--messages", "3000")
    out = res.stderr
    figures = _figures(res.stdout, "bench_timer", tmp_path)
    assert [f["peer"] for f in figures if f["name"].startswith("timer: a pass, 3,000 pending")] == [
        "a pass with nothing due, p50",
        "a pass with nothing due, p99",
    ], figures
    assert re.search(r"timer: 3,000 due together, one pass: [\d.]+ M msgs/s", out), out
    assert re.search(r"peer, put_batch of the same messages: [\d.]+ M msgs/s", out), out
    assert re.search(
        r"timer: 3,000 pending, ~1,000 due per second, a pass per second: p50 [\d.]+ ms  p99 [\d.]+ ms", out
    ), out
    assert re.search(r"peer, a pass with nothing due: p50", out), out
    late = re.search(r"timer lateness, a pass every second: .* \(min (-?\d+) ms: never early", out)
    assert late and int(late.group(1)) >= 0, out


def test_bench_export_prints_jsonl_beside_parquet(tmp_path: Path) -> None:
    res = _run_json("bench_export", tmp_path, "--messages", "3000")
    out = res.stderr
    figures = _figures(res.stdout, "bench_export", tmp_path)
    assert [(f["name"], f["peer"]) for f in figures] == [
        ("export jsonl", "export parquet"),
        ("export jsonl --body hex", "export parquet"),
    ], figures
    for name in ("parquet", "jsonl", "jsonl --body hex"):
        assert re.search(rf"export {name} +[\d,]+ msgs/s +[\d.]+ s a million", out), out
    assert re.search(r"-> JSON lines = \d+% of Parquet's rate", out), out


def test_bench_sql92_prints_each_filter_beside_the_tag_filter(tmp_path: Path) -> None:
    res = _run_json("bench_sql92", tmp_path, "--messages", "3000")
    figures = _figures(res.stdout, "bench_sql92", tmp_path)
    assert [(f["name"], f["peer"]) for f in figures] == [
        ("SQL92 evaluation over stored properties, windows of 800", "exact-tag check, same windows"),
        ("SQL92 evaluation over stored properties, windows of 65536", "exact-tag check, same windows"),
        ("pull path scan with SQL92, max_count 32", "pull path scan with the tag filter"),
    ], figures
    assert re.search(
        r"pull path, .* SQL92: [\d,]+ msgs scanned/s \| peer, tag filter: [\d,]+ msgs scanned/s", res.stderr
    )
