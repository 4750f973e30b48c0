"""The ``rmqlog`` command (rmqlog.admin.cli): what a user types in a terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import subprocess_env

import rmqlog
from rmqlog.admin.cli import main


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    with rmqlog.MessageStore.open(tmp_path) as s:
        s.put_batch(
            pa.table(
                {
                    "topic": ["orders"] * 4,
                    "body": [b"a", b"b", b"c", b"\xff"],
                    "tags": ["x", "y", "x", "y"],
                    "queueId": pa.array([0] * 4, pa.int32()),
                }
            )
        )
        s.dispatch()
        s.commit_offset("g", "orders", 0, 1)
    return tmp_path


def test_info_lists_topics_and_queue_ranges(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(filled)]) == 0
    out = capsys.readouterr().out
    assert "orders" in out and "0:[0,4)" in out and "published tail" in out


def test_read_prints_json_lines_with_tag_filter(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["read", str(filled), "orders", "0", "--tags", "y", "--body", "hex"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["queueOffset"], r["body"], r["tags"]) for r in rows] == [(1, "62", "y"), (3, "ff", "y")]


def test_read_from_offset_with_count(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["read", str(filled), "orders", "0", "--offset", "2", "--count", "1"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["body"] for r in rows] == ["c"]


def test_get_by_offset_and_id(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["get", str(filled), "--offset", "0", "--body", "none"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert "body" not in row
    assert main(["get", str(filled), "--id", row["msgId"]]) == 0
    assert json.loads(capsys.readouterr().out)["body"] == "a"
    assert main(["get", str(filled), "--offset", "7"]) == 1


def test_lag_of_a_group(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lag", str(filled), "g"]) == 0
    assert "orders/0  committed 1  max 4  lag 3" in capsys.readouterr().out
    assert main(["lag", str(filled), "nobody"]) == 2  # an unknown group: what was asked is wrong


def test_errors_exit_2_and_never_create_a_store(
    tmp_path: Path, filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "not-a-store"
    empty.mkdir()
    assert main(["info", str(empty)]) == 2
    assert list(empty.iterdir()) == []
    assert main(["read", str(filled), "../etc", "0"]) == 2
    assert "topic" in capsys.readouterr().err


def test_console_script_runs(filled: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "rmqlog.admin.cli", "info", str(filled)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
    )
    assert r.returncode == 0 and "orders" in r.stdout


def test_json_on_info_lag_topic_status_and_dispatch(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(filled), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["topics"]["orders"]["queues"][0] == {"queueId": 0, "min": 0, "max": 4, "messages": 4}
    assert info["publishedTail"] > 0
    assert main(["lag", str(filled), "g", "--json"]) == 0
    lag = json.loads(capsys.readouterr().out)
    assert lag["offsets"] == [{"group": "g", "topic": "orders", "queueId": 0, "committed": 1, "max": 4, "lag": 3}]
    assert lag["totalLag"] == 3
    assert main(["topic-status", str(filled), "orders", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["queues"][0]["messages"] == 4
    assert main(["dispatch", str(filled), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"dispatched": 0}


def test_lag_of_every_group_and_of_an_unknown_one(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with rmqlog.MessageStore.open(filled) as s:
        s.commit_offset("h", "orders", 0, 4)
    assert main(["consumer-progress", str(filled)]) == 0
    out = capsys.readouterr().out
    assert "g  orders/0  committed 1  max 4  lag 3" in out and "h  orders/0  committed 4  max 4  lag 0" in out
    assert "total lag 3" in out
    assert main(["lag", str(filled), "nosuchgroup"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        f"rmqlog: no consumer group 'nosuchgroup' in {filled} (none with committed offsets); groups: g, h\n"
    )
    assert main(["topic-status", str(filled), "nosuchtopic"]) == 2
    assert f"no topic 'nosuchtopic' in {filled}; topics: orders" in capsys.readouterr().err


def test_verify_reports_ok_and_damage(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(filled)]) == 0
    assert capsys.readouterr().out.startswith("OK: 4 records, 4 units, 0 problem(s)")
    # a unit pointing at another record: verify finds it, exit 1, and --json names it
    cq = filled / "consumequeue" / "orders" / "0" / ("0" * 20)
    data = bytearray(cq.read_bytes())
    data[20:28] = data[0:8]
    cq.write_bytes(bytes(data))
    assert main(["verify", str(filled), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["problems"][0]["path"].endswith("consumequeue/orders/0")


def test_recover_requires_repair_and_repairs(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["recover", str(filled)])
    assert exc.value.code == 2
    assert "--repair" in capsys.readouterr().err
    (filled / "abort").touch()
    assert main(["recover", str(filled), "--repair", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["abnormal"] is True and rep["droppedBytes"] == 0


@pytest.mark.parametrize("count", ["0", "-1", "x"])
def test_bad_count_is_rejected_with_the_reason(filled: Path, capsys: pytest.CaptureFixture[str], count: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["read", str(filled), "orders", "0", "--count", count])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--count" in err and f"not a positive integer, got {count!r}" in err


def test_get_with_something_that_is_not_a_message_id(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["get", str(filled), "--id", "ZZZ"]) == 2
    assert (
        capsys.readouterr().err
        == "rmqlog: not a message id: 'ZZZ' (an offset msgId or a client msgId: 32 or 56 hex digits)\n"
    )
    assert main(["get", str(filled), "--id", "0" * 32]) == 1
    err = capsys.readouterr().err  # not found is said, with why (never a bare exit status)
    assert err.startswith(f"rmqlog: no message with msgId {'0' * 32}: ") and "commitlog offset 0" in err


def test_every_argument_has_help() -> None:
    from rmqlog.admin.cli import _parser

    ap = _parser()
    subs = next(a for a in ap._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    for name, p in subs.choices.items():
        for action in p._actions:
            if action.dest != "help":
                assert action.help, f"{name}: {action.dest} has no help"


def test_export_jsonl_and_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow.parquet as pq

    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        s.create_topic("E", 2)
        res = s.put_batch(
            pa.table(
                {"topic": ["E"] * 10, "body": [b"e%d" % i for i in range(10)], "queueId": [i % 2 for i in range(10)]}
            )
        )
        s.dispatch()
        t5 = res.column("storeTimestamp")[0].value // 1000
    out = tmp_path / "e.jsonl"
    capsys.readouterr()
    assert main(["export", str(root), "E", "--format", "jsonl", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"exported": 10, "out": str(out), "format": "jsonl"}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["body"] for r in rows) == sorted(f"e{i}" for i in range(10))
    pout = tmp_path / "e.parquet"
    assert (
        main(
            [
                "export",
                str(root),
                "E",
                "--queue",
                "1",
                "--from-offset",
                "1",
                "--to-offset",
                "4",
                "--format",
                "parquet",
                "--out",
                str(pout),
            ]
        )
        == 0
    )
    table = pq.read_table(pout)
    assert table.schema == rmqlog.MESSAGE_SCHEMA and table.column("body").to_pylist() == [b"e3", b"e5", b"e7"]
    assert main(["export", str(root), "E", "--begin", str(t5 + 60_000), "--format", "jsonl", "--out", str(out)]) == 1
    assert main(["export", str(root), "NOPE", "--format", "jsonl", "--out", str(out)]) == 2
    assert "no topic 'NOPE'" in capsys.readouterr().err
    assert main(["export", str(root), "E", "--queue", "7", "--format", "jsonl", "--out", str(out)]) == 2
    assert main(["export", str(root), "E", "--format", "jsonl", "--out", str(tmp_path / "missing" / "x.jsonl")]) == 2
    assert "No such file or directory" in capsys.readouterr().err


def test_reset_offset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        s.create_topic("R", 2)
        s.put_batch(pa.table({"topic": ["R"] * 6, "body": [b"r"] * 6, "queueId": [0, 1, 0, 1, 0, 1]}))
        s.dispatch()
    capsys.readouterr()
    assert main(["reset-offset", str(root), "g1", "R", "--latest", "--json"]) == 2  # a new group needs --create
    assert "no consumer group 'g1'" in capsys.readouterr().err
    assert main(["reset-offset", str(root), "g1", "R", "--latest", "--json", "--create"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(q["queueId"], q["before"], q["offset"]) for q in doc["queues"]] == [(0, -1, 3), (1, -1, 3)]
    assert main(["reset-offset", str(root), "g1", "R", "--earliest", "--queue", "1"]) == 0
    assert capsys.readouterr().out.strip() == "g1 R/1: 3 -> 0"
    assert main(["reset-offset", str(root), "g1", "R", "--timestamp", "2999-01-01T00:00"]) == 0
    with rmqlog.MessageStore.open(root) as s:
        assert [s.committed_offset("g1", "R", q) for q in (0, 1)] == [3, 3]
    assert main(["reset-offset", str(root), "g1", "NOPE", "--latest"]) == 2
    assert main(["reset-offset", str(root), "bad group!", "R", "--latest"]) == 2
    with pytest.raises(SystemExit):
        main(["reset-offset", str(root), "g1", "R"])  # one of --earliest/--latest/--timestamp


def test_verify_reports_progress_through_the_store_api(tmp_path: Path) -> None:
    root = tmp_path / "s"
    seen: list[tuple[int, int]] = []
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=200)
    with rmqlog.MessageStore.open(root, cfg) as s:
        s.put_batch(pa.table({"topic": ["V"] * 60, "body": [b"v" * 100] * 60}))
        tail = s.published_tail()
        assert s.verify(lambda done, total: seen.append((done, total))).ok
    assert len(seen) > 2 and seen[-1] == (tail, tail) and [d for d, _ in seen] == sorted(d for d, _ in seen)
