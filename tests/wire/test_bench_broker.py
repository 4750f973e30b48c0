"""The broker's benchmark (``jobs/bench_broker.py``) runs end to end at a tiny size: a broker and
a bare server in processes of their own on 127.0.0.1, the load from worker processes, the peers
(Redis Streams, NATS JetStream, Apache's C++ client) where they are installed, and under
``--json`` one line per figure and peer (the broker's targets). No figure is judged:
they are wall-clock; what is checked is that every target is measured with each of its peers
present, that an absent peer is said and its figures go on without it, that the readable report
says what it measured, and that every server was stopped by its PID (the brokers cleanly: their
stores then open normally, holding what the benchmark sent)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import rmqlog

REPO = Path(__file__).resolve().parent.parent.parent
JOBS = REPO / "jobs"
TINY = [
    "--messages",
    "400",
    "--sync-messages",
    "20",
    "--batches",
    "2",
    "--batches100",
    "3",
    "--pull-messages",
    "4000",
    "--poll-messages",
    "5",
    "--holds",
    "300",
    "--idle-s",
    "0.2",
    "--connections",
    "12",
    "--conn-messages",
    "3",
    "--procs",
    "2",
    "--segment-mib",
    "16",
    "--inflight-messages",
    "200",
    "--state-topics",
    "50",
    "--state-groups",
    "40",
    "--state-offsets",
    "400",
    "--state-filled",
    "5",
    "--state-requests",
    "5",
    "--state-seconds",
    "0.5",
    "--cpp-messages",
    "10",
    "--namesrv-brokers",
    "2",
    "--namesrv-topics",
    "20",
    "--namesrv-routes",
    "20",
]
ABSENT = [
    "--redis-server",
    "/nonexistent/redis-server",
    "--nats-server",
    "/nonexistent/nats-server",
    "--cpp-python",
    "/nonexistent/python",
]
REDIS = shutil.which("redis-server") is not None
NATS = shutil.which("nats-server") is not None
CPP = (
    (REPO / ".venv-rocketmq" / "bin" / "python").is_file()
    and os.geteuid() == 0
    and all(shutil.which(t) for t in ("unshare", "nsenter", "ip"))
)
BARE = "bare server"
ALWAYS, EVERYSEC, JS = "Redis Streams, appendfsync always", "Redis Streams, appendfsync everysec", "NATS JetStream"
STATE = "at 50 topics, 40 groups, 400 offset entries"


def expected(parts: list[str], *, redis: bool, nats: bool, cpp: bool) -> list[tuple[str, str, str | None]]:
    """(name, unit, the start of the peer's name or None) of every JSON line, in order."""

    def only(*peers: str) -> list[str]:
        return [p for p in peers if (redis or not p.startswith("Redis")) and (nats or not p.startswith("NATS"))]

    out: list[tuple[str, str, str | None]] = []

    def add(name: str, unit: str, peers: list[str]) -> None:
        out.extend([(name, unit, p) for p in peers] or [(name, unit, None)])

    for part in parts:
        if part == "sends":
            add("SEND_MESSAGE_V2, 100-byte bodies, 64 in flight over 4 connections", "msgs/s", [BARE])
        elif part == "sync":
            for label, peers in (
                ("", only(BARE, JS, EVERYSEC, ALWAYS)),
                (" under SYNC_FLUSH", only(ALWAYS, EVERYSEC, JS, BARE)),
            ):
                for what, unit in (
                    ("round trip p50", "ms"),
                    ("round trip p99", "ms"),
                    ("server CPU per message", "us"),
                ):
                    add(f"sync send 1 KiB{label}, {what}", unit, peers)
        elif part == "inflight":
            add("1 KiB sends, 64 in flight over 4 connections, ASYNC_FLUSH", "msgs/s", only(EVERYSEC, ALWAYS, JS))
            add("1 KiB sends, 64 in flight over 4 connections, SYNC_FLUSH", "msgs/s", only(ALWAYS, EVERYSEC, JS))
        elif part == "batch":
            add("SEND_BATCH_MESSAGE, 1,000 x 100-byte bodies", "msgs/s", ["MessageStore.put_batch"])
            add("SEND_BATCH_MESSAGE, 100 x 1 KiB bodies", "msgs/s", only(EVERYSEC))
        elif part == "pull":
            add("PULL_MESSAGE, maxMsgNums 32", "msgs/s", ["read_window(raw=True)", *only(EVERYSEC, JS)])
            add("PULL_MESSAGE, maxMsgNums 1000", "msgs/s", ["read_window(raw=True)", "the target's 0.4 M msgs/s"])
        elif part == "poll":
            for q in (50, 99):
                add(
                    f"long polling, send to a held consumer's hand p{q}",
                    "ms",
                    [
                        f"the same sends' round trip p{q}",
                        *only("Redis Streams XREAD BLOCK", "NATS JetStream push consumer"),
                    ],
                )
        elif part == "idle":
            add("300 held pulls, broker CPU while idle", "% of a core", ["the broker idle with no held pulls"])
        elif part == "conns":
            add("12 connections sending at once", "msgs/s", [BARE])
            add("12 connections sending at once, errors", "errors", ["bare server errors"])
        elif part == "state":
            for kind in (
                "SEND_MESSAGE_V2 1 KiB",
                "PULL_MESSAGE with the commit flag",
                "QUERY_CONSUMER_OFFSET (14)",
                "HEART_BEAT (34)",
            ):
                add(f"state: {kind} p50 {STATE}", "ms", ["the same at 10 topics"])
            add(f"state: the broker's start to its ready line {STATE}", "s", ["the same at 10 topics"])
        elif part == "cpp" and cpp:
            for q in (50, 99):
                add(
                    f"sync send 1 KiB in the C++ client's namespace, our client shape, round trip p{q}",
                    "ms",
                    ["Apache's C++ client 1.0.1"],
                )
        elif part == "namesrv":
            add("rmqlog namesrv VmRSS after start", "MiB", only(EVERYSEC, JS))
            add(
                "rmqlog namesrv VmRSS after 2 registrations of 20 topics and 20 route queries",
                "MiB",
                only(EVERYSEC, JS),
            )
    return out


def _run(tmp_path: Path, *args: str, timeout: float = 600) -> tuple[list[dict[str, Any]], str]:
    res = subprocess.run(
        [
            sys.executable,
            str(JOBS / "bench_broker.py"),
            *TINY,
            *args,
            "--rounds",
            "1",
            "--root",
            str(tmp_path),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert res.returncode == 0, res.stderr[-5000:]
    return [json.loads(line) for line in res.stdout.splitlines()], res.stderr


def _check(figures: list[dict[str, Any]], want: list[tuple[str, str, str | None]], root: Path) -> None:
    assert [(f["name"], f["unit"]) for f in figures] == [(n, u) for n, u, _ in want], (figures, want)
    for f, (_, unit, peer) in zip(figures, want, strict=True):
        assert f["job"] == "bench_broker" and isinstance(f["value"], float), f
        assert f["settings"]["rounds"] == 1 and f["settings"]["root"] == str(root), f
        if peer is None:
            assert f["peer"] is None and f["peer_value"] is None and f["ratio"] is None, f
            continue
        assert f["peer"].startswith(peer), (f, peer)
        assert isinstance(f["peer_value"], float) and f["peer_unit"] == unit, f
        if unit == "msgs/s":
            assert f["value"] > 0 and f["peer_value"] > 0 and f["ratio"] is not None, f


def _stopped(out: str) -> None:
    """Every server the run started has ended (each was stopped by its PID)."""
    pids = [int(p) for p in re.findall(r"\bpid (\d+) at 127\.0\.0\.1:\d+", out)]
    assert pids, out
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"), (pid, out)


@pytest.mark.slow  # ~30-60 s: a dozen servers and their loads
def test_bench_broker_prints_every_target_beside_each_installed_peer(tmp_path: Path) -> None:
    figures, out = _run(tmp_path)
    parts = ["sends", "sync", "inflight", "batch", "pull", "poll", "idle", "conns", "state", "cpp", "namesrv"]
    _check(figures, expected(parts, redis=REDIS, nats=NATS, cpp=CPP), tmp_path)
    errors = next(f for f in figures if f["name"].endswith("errors"))
    assert errors["value"] == 0.0, errors  # every send answered SEND_OK (also raised on by the job itself)
    assert re.search(r"broker pid \d+ at 127\.0\.0\.1:\d+; bare server pid \d+ at 127\.0\.0\.1:\d+", out), out
    for line in (
        r"-> broker = \d+% of the bare server",
        r"-> broker = \d+% of put_batch",
        r"maxMsgNums +32: broker .* \(32 messages per answer\)",
        r"held pulls +[\d.]+ % of a core",
        r"12 connections \(2 worker processes\)",
        r"p50 ms +p99 ms +server CPU us/msg",
        r"rmqlog broker, SYNC_FLUSH +[\d.]+ +[\d.]+ +[\d.]+",
        r"ours +[\d,.]+ ms +peer +[\d,.]+ ms +\([\d.]+x\) +bare server",
        r"40 groups registered by heartbeats",
        r"; 5 topics holding a message\)",
    ):
        assert re.search(line, out), (line, out)
    for present, label in (
        (REDIS, "Redis Streams, appendfsync always"),
        (REDIS, "Redis Streams, appendfsync everysec"),
        (NATS, "NATS JetStream \\(file storage\\)"),
    ):
        assert bool(re.search(rf"^{label} +[\d.]+ +[\d.]+ +[\d.]+$", out, re.M)) == present, (label, out)
    assert ("peer absent" in out) == (not (REDIS and NATS and CPP)), out
    _stopped(out)
    # the brokers stopped cleanly: their stores open without recovery and hold the sends
    with rmqlog.MessageStore.open(tmp_path / "broker") as store:
        assert store.recovery is not None and not store.recovery.abnormal
        assert store.max_offset("BenchTopic", 0) >= 100 + 9  # 400 over 4 queues, plus the many connections' sends
        assert store.max_offset("BenchPull", 3) >= 1000
        assert store.max_offset("BenchSync", 0) == 70  # 50 unmeasured + 20
    with rmqlog.MessageStore.open(tmp_path / "broker-sync") as store:
        assert store.recovery is not None and not store.recovery.abnormal
        assert store.max_offset("BenchSync", 0) == 70
    with rmqlog.MessageStore.open(tmp_path / "state-large") as store:
        assert len([t for t in store.topics() if t.startswith("StateT")]) == 50
        assert store.committed_offset("StateG00039", "StateT00039", 0) == 7 + 39  # as written before the broker started


@pytest.mark.slow  # ~20-40 s
def test_bench_broker_says_which_peers_are_absent_and_goes_on(tmp_path: Path) -> None:
    parts = ["sync", "inflight", "batch", "pull", "poll", "cpp", "namesrv"]
    figures, out = _run(tmp_path, *ABSENT, "--parts", ",".join(parts))
    _check(figures, expected(parts, redis=False, nats=False, cpp=False), tmp_path)
    for line in (
        "(peer absent: Redis: /nonexistent/redis-server not found (apt-get install redis-server)",
        "(peer absent: NATS JetStream: /nonexistent/nats-server not found (apt-get install nats-server)",
        "(peer absent: the C++ client (PyPI rocketmq 0.4.4): /nonexistent/python not found (make clients)",
    ):
        assert out.count(line) == 1, (line, out)  # said once, however many figures miss it
    assert "ours" in out and "(no peer present)" in out, out
    assert not (tmp_path / "redis-always").exists() and not (tmp_path / "nats").exists()
    _stopped(out)


def test_bench_broker_refuses_an_unknown_part_before_starting_anything(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(JOBS / "bench_broker.py"), "--parts", "sends,pulls", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and "--parts: unknown 'pulls'" in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == []  # no store, no server


def test_bench_broker_runs_only_the_parts_asked(tmp_path: Path) -> None:
    figures, _ = _run(tmp_path, *ABSENT, "--parts", "sync,batch", timeout=300)
    names = [f["name"] for f in figures]
    assert names == [n for n, _, _ in expected(["sync", "batch"], redis=False, nats=False, cpp=False)], names
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["broker", "broker-sync"]  # no peer's folder
