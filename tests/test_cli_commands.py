"""The rmqlog command's rough edges: stdout export, one unknown-topic
error, one exit-status table, camelCase JSON everywhere, --json on get, reset-offset of a
misspelt group, a quiet schedule that tells timed from delayed, --config, packaging."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import small_store_config, subprocess_env

import rmqlog
from rmqlog.admin import changing
from rmqlog.admin.cli import main
from rmqlog.schedule.scheduler import PassReport

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.create_topic("orders", 2)
        s.put_batch(
            pa.table(
                {
                    "topic": ["orders"] * 4,
                    "body": [b"a", b"b", b"c", b"d"],
                    "keys": [["k1"]] * 4,
                    "queueId": pa.array([0, 0, 1, 1], pa.int32()),
                }
            )
        )
        s.dispatch()
        s.commit_offset("billing", "orders", 0, 1)
    return root


def test_export_to_stdout(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(store), "orders", "--format", "jsonl", "--out", "-"]) == 0
    out = capsysbinary.readouterr().out
    assert sorted(json.loads(line)["body"] for line in out.splitlines()) == ["a", "b", "c", "d"]
    assert not (tmp_path / "-").exists()


def test_export_parquet_to_stdout_through_a_pipe(store: Path, tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "rmqlog", "export", str(store), "orders", "--format", "parquet", "--out", "-"],
        capture_output=True,
        env=subprocess_env(),
        timeout=120,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    (tmp_path / "got.parquet").write_bytes(r.stdout)
    assert sorted(pq.read_table(tmp_path / "got.parquet").column("body").to_pylist()) == [b"a", b"b", b"c", b"d"]
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["topic-status", "{root}", "ordres"],
        ["read", "{root}", "ordres", "0"],
        ["query", "{root}", "ordres"],
        ["query", "{root}", "ordres", "--key", "k1"],
        ["export", "{root}", "ordres", "--format", "jsonl", "--out", "{tmp}/x"],
        ["reset-offset", "{root}", "billing", "ordres", "--latest"],
    ],
    ids=lambda a: "-".join(a[:1] + a[3:4]),
)
def test_an_unknown_topic_is_one_error_with_one_code(
    store: Path, tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    args = [a.format(root=store, tmp=tmp_path) for a in argv]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"rmqlog: no topic 'ordres' in {store}; topics: orders\n"


def _busy(store: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, rmqlog\nwith rmqlog.MessageStore.open(sys.argv[1]):\n"
            "    print('open', flush=True); sys.stdin.read()",
            str(store),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    assert p.stdout is not None and p.stdout.readline() == "open\n"
    return p


# every command, its failure modes, and the exit status the table (rmqlog --help) gives them
EXIT_CASES = [
    # 1: nothing found / problems found
    (["read", "{root}", "orders", "0", "--offset", "9"], 1),
    (["get", "{root}", "--offset", "999999"], 1),
    (["query", "{root}", "orders", "--key", "nokey"], 1),
    (["query", "{root}", "orders", "--begin", "2999-01-01"], 1),
    (["export", "{root}", "orders", "--format", "jsonl", "--out", "{tmp}/e", "--begin", "2999-01-01"], 1),
    (["verify", "{damaged}"], 1),
    (["lag", "{fresh}"], 1),
    # 2: what was asked is wrong
    (["info", "{empty}"], 2),
    (["verify", "{empty}"], 2),
    (["dispatch", "{empty}"], 2),
    (["clean", "{empty}"], 2),
    (["recover", "{empty}", "--repair"], 2),
    (["schedule", "{empty}", "--once"], 2),
    (["read", "{root}", "nope", "0"], 2),
    (["read", "{root}", "orders", "7"], 2),
    (["export", "{root}", "orders", "--queue", "7", "--format", "jsonl", "--out", "{tmp}/e"], 2),
    (["export", "{root}", "orders", "--format", "jsonl", "--out", "{root}/x"], 2),
    (["export", "{root}", "orders", "--format", "jsonl", "--out", "{tmp}/missing/x"], 2),
    (["lag", "{root}", "nobody"], 2),
    (["reset-offset", "{root}", "nobody", "orders", "--latest"], 2),
    (["reset-offset", "{root}", "bad group!", "orders", "--latest", "--create"], 2),
    (["get", "{root}", "--id", "ZZZ"], 2),
    (["query", "{root}", "orders", "--id", "x"], 2),
    (["info", "{root}", "--config", "{tmp}/bad.conf"], 2),
    (["clean", "{root}", "--config", "{tmp}/none.conf"], 2),
    (["read", "{root}", "orders", "0", "--count", "0"], 2),
    (["query", "{root}", "orders", "--begin", "soon"], 2),
    (["recover", "{root}"], 2),
    (["nosuchcommand", "{root}"], 2),
    # 3: the store cannot do it
    (["recover", "{busy}", "--repair"], 3),
    (["info", "{lost}"], 3),
]


@pytest.mark.parametrize("argv, code", EXIT_CASES, ids=lambda v: "-".join(v) if isinstance(v, list) else str(v))
def test_exit_statuses_follow_one_table(
    store: Path, tmp_path: Path, argv: list[str], code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.conf").write_text("fileReservedTime=soon\n")
    fresh = tmp_path / "fresh"
    with rmqlog.MessageStore.open(fresh, small_store_config()) as s:
        s.put("T", b"x")
    damaged = tmp_path / "damaged"
    with rmqlog.MessageStore.open(damaged, small_store_config()) as s:
        s.put_batch(pa.table({"topic": ["T"] * 2, "body": [b"x", b"y"], "queueId": pa.array([0, 0], pa.int32())}))
        s.dispatch()
    cq = damaged / "consumequeue" / "T" / "0" / ("0" * 20)
    data = bytearray(cq.read_bytes())
    data[20:28] = data[0:8]  # the second unit points at the first record
    cq.write_bytes(bytes(data))
    lost = tmp_path / "lost"
    with rmqlog.MessageStore.open(lost, small_store_config()) as s:
        s.put_batch(pa.table({"topic": ["T"] * 40, "body": [b"v" * 100] * 40}))
    with open(lost / "commitlog" / ("0" * 20), "ab") as f:
        f.write(b"x")  # a segment of the wrong size: CorruptStoreError at open
    holder = _busy(store) if "{busy}" in argv else None
    try:
        args = [
            a.format(
                root=store, tmp=tmp_path, empty=tmp_path / "empty", fresh=fresh, damaged=damaged, busy=store, lost=lost
            )
            for a in argv
        ]
        try:
            got = main(args)
        except SystemExit as exc:  # argparse's own usage errors
            got = exc.code
    finally:
        if holder is not None:
            holder.communicate("", timeout=60)
    assert got == code, capsys.readouterr().err
    err = capsys.readouterr().err
    if code >= 2:
        assert err.strip(), "an error says why"


def test_help_documents_the_exit_statuses_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0 done; 1 nothing found" in out and "3 the store cannot do it" in out
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == "rmqlog 0.1.0"


def test_clean_json_is_camel_case(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["clean", str(store), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"logStart", "logStartBefore", "consumeQueueFiles", "indexFiles", "diskUsedPercent"} <= set(report)
    assert not [k for k in report if "_" in k]


def test_get_and_read_take_json(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["get", str(store), "--offset", "0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [m["body"] for m in doc["messages"]] == ["a"]
    assert main(["read", str(store), "orders", "1", "--json", "--body", "hex"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert [m["body"] for m in doc["messages"]] == ["63", "64"]
    assert doc["status"] == "FOUND" and doc["nextOffset"] == 2 and captured.err == ""


def test_reset_offset_of_a_misspelt_group(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reset-offset", str(store), "biling", "orders", "--earliest"]) == 2
    assert capsys.readouterr().err == (
        f"rmqlog: no consumer group 'biling' in {store} (none with committed offsets); "
        "groups: billing; --create to start a new group\n"
    )
    with rmqlog.MessageStore.open(store) as s:
        assert s.committed_offset("biling", "orders", 0) == -1  # nothing was created
    assert main(["reset-offset", str(store), "billing", "orders", "--earliest"]) == 0  # a known group
    assert main(["reset-offset", str(store), "biling", "orders", "--earliest", "--create"]) == 0
    with rmqlog.MessageStore.open(store) as s:
        assert s.committed_offset("biling", "orders", 1) == 0


def test_schedule_is_quiet_and_tells_timed_from_delayed(capsys: pytest.CaptureFixture[str]) -> None:
    # the passes' reports keep delay-level and timed messages apart; the command says which
    reports = iter([PassReport(delivered={1: 1, 3: 2}, timed=2)] + [PassReport()] * 149)
    store = SimpleNamespace(scheduler=SimpleNamespace(deliver_due=lambda now_ms: next(reports)))
    clock = [0.0]
    passes: list[int] = []

    def sleep(seconds: float) -> None:
        clock[0] += seconds
        passes.append(1)
        if len(passes) == 150:
            raise KeyboardInterrupt  # Ctrl-C: exit 0

    args = argparse.Namespace(once=False, json=False)
    assert changing.schedule(store, args, sleep=sleep, clock=lambda: clock[0]) == 0  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    # the pass that delivered, then one quiet summary a minute: not "delivered 0" 149 times
    assert lines == [
        "delivered 3 delayed message(s) (level 1: 1, level 3: 2) and 2 timed message(s)",
        "nothing due in the last 60 s (60 pass(es))",
        "nothing due in the last 60 s (60 pass(es))",
    ]


def test_schedule_delivers_from_a_real_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("orders", b"delayed", delay_level=1)  # due 1 s after its store time
        now = int(time.time() * 1000)
        args = argparse.Namespace(once=True, json=True)
        assert changing.schedule(s, args, now_ms=lambda: now + 5_000) == 0  # a pass as of 5 s later
    assert json.loads(capsys.readouterr().out) == {
        "delivered": 1,
        "delayed": 1,
        "levels": {"1": 1},
        "timed": 0,
        "lost": 0,
    }


def test_schedule_once_json(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schedule", str(store), "--once", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"delivered": 0, "delayed": 0, "levels": {}, "timed": 0, "lost": 0}
    assert main(["schedule", str(store), "--once"]) == 0
    assert capsys.readouterr().out == "delivered nothing: no delayed or timed message due\n"


def test_clean_uses_the_retention_of_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        for _ in range(4):
            s.put_batch(pa.table({"topic": ["T"] * 30, "body": [b"v" * 100] * 30}))
        s.dispatch()
    segments = sorted(p.name for p in (root / "commitlog").iterdir())
    assert len(segments) > 2
    assert main(["clean", str(root), "--force", "--json"]) == 0  # the default: kept 72 hours
    assert json.loads(capsys.readouterr().out)["segments"] == []
    conf = tmp_path / "broker.conf"
    conf.write_text("# keep nothing\nfileReservedTime : 0\ndestroyMapedFileIntervalForcibly 0\n")
    assert main(["clean", str(root), "--force", "--json", "--config", str(conf)]) == 0
    assert json.loads(capsys.readouterr().out)["segments"] != []
    assert sorted(p.name for p in (root / "commitlog").iterdir()) != segments


@pytest.mark.parametrize("module", ["rmqlog", "rmqlog.admin.cli"])
def test_python_dash_m(store: Path, module: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", module, "topic-status", str(store), "orders", "--json"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["queues"][0]["messages"] == 2
    r = subprocess.run(
        [sys.executable, "-m", module, "--version"], capture_output=True, text=True, env=subprocess_env(), timeout=120
    )
    assert r.returncode == 0 and r.stdout.strip() == "rmqlog 0.1.0"


def test_license_is_the_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    assert 'license-files = ["LICENSE"]' in (ROOT / "pyproject.toml").read_text()
    assert (ROOT / "store" / "py.typed").exists()
