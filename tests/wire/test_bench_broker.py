"""The broker's benchmark (``jobs/bench_broker.py``) runs end to end at a tiny size: a broker and
a bare server in processes of their own on 127.0.0.1, the load from worker processes, and under
``--json`` one line per figure, each beside its peer (issue 29's targets). No figure is judged:
they are wall-clock; what is checked is that every target is measured with its peer, that the
readable report says what it measured, and that the servers were stopped cleanly (the broker's
store then opens normally, holding what the benchmark sent)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rmqlog

JOBS = Path(__file__).resolve().parent.parent.parent / "jobs"
TINY = ["--messages", "400", "--sync-messages", "20", "--batches", "2", "--pull-messages", "4000",
        "--poll-messages", "5", "--holds", "300", "--idle-s", "0.2", "--connections", "12", "--conn-messages", "3",
        "--procs", "2", "--segment-mib", "16"]
FIGURES = {
    "SEND_MESSAGE_V2, 100-byte bodies, 64 in flight over 4 connections": ("msgs/s", "bare server"),
    "sync send 1 KiB, round trip p50": ("ms", "bare server round trip p50"),
    "sync send 1 KiB, round trip p99": ("ms", "bare server round trip p99"),
    "SEND_BATCH_MESSAGE, 1,000 x 100-byte bodies": ("msgs/s", "MessageStore.put_batch"),
    "PULL_MESSAGE, maxMsgNums 32": ("msgs/s", "read_window(raw=True)"),
    "PULL_MESSAGE, maxMsgNums 1000": ("msgs/s", "read_window(raw=True)"),
    "long polling, send to a held consumer's hand p50": ("ms", "the same sends' round trip p50"),
    "long polling, send to a held consumer's hand p99": ("ms", "the same sends' round trip p99"),
    "300 held pulls, broker CPU while idle": ("% of a core", "the broker idle with no held pulls"),
    "12 connections sending at once": ("msgs/s", "bare server"),
    "12 connections sending at once, errors": ("errors", "bare server errors"),
}


@pytest.mark.slow  # ~1-2 minutes: two servers and a score of worker processes spawned
def test_bench_broker_prints_every_target_beside_its_peer(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, str(JOBS / "bench_broker.py"), *TINY, "--rounds", "1", "--root", str(tmp_path),
                          "--json"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    figures = [json.loads(line) for line in res.stdout.splitlines()]
    assert [f["name"] for f in figures] == list(FIGURES), figures
    for f in figures:
        unit, peer = FIGURES[f["name"]]
        assert f["job"] == "bench_broker" and f["unit"] == unit and f["peer"].startswith(peer), f
        assert isinstance(f["value"], float) and isinstance(f["peer_value"], float) and f["peer_unit"] == unit, f
        assert f["settings"]["rounds"] == 1 and f["settings"]["root"] == str(tmp_path), f
        if unit == "msgs/s":
            assert f["value"] > 0 and f["peer_value"] > 0 and f["ratio"] is not None, f
    errors = next(f for f in figures if f["name"].endswith("errors"))
    assert errors["value"] == 0.0, errors  # every send answered SEND_OK (also raised on by the job itself)
    out = res.stderr
    assert re.search(r"broker pid \d+ at 127\.0\.0\.1:\d+; bare server pid \d+ at 127\.0\.0\.1:\d+", out), out
    for line in (r"-> broker = \d+% of the bare server", r"-> broker = \d+% of put_batch",
                 r"maxMsgNums +32: broker .* \(32 messages per answer\)", r"held pulls +[\d.]+ % of a core",
                 r"12 connections \(2 worker processes\)"):
        assert re.search(line, out), (line, out)
    # the broker stopped cleanly: its store opens without recovery and holds the sends
    with rmqlog.MessageStore.open(tmp_path / "broker") as store:
        assert store.recovery is not None and not store.recovery.abnormal
        assert store.max_offset("BenchTopic", 0) >= 100 + 9  # 400 over 4 queues, plus the many connections' sends
        assert store.max_offset("BenchPull", 3) >= 1000


def test_bench_broker_refuses_an_unknown_part_before_starting_anything(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, str(JOBS / "bench_broker.py"), "--parts", "sends,pulls", "--root", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--parts: unknown 'pulls'" in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == []  # no store, no server


def test_bench_broker_runs_only_the_parts_asked(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, str(JOBS / "bench_broker.py"), *TINY, "--parts", "sync,batch", "--rounds", "1",
                          "--root", str(tmp_path), "--json"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    names = [json.loads(line)["name"] for line in res.stdout.splitlines()]
    assert names == ["sync send 1 KiB, round trip p50", "sync send 1 KiB, round trip p99",
                     "SEND_BATCH_MESSAGE, 1,000 x 100-byte bodies"], names
