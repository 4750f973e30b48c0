"""The ``rmqlog`` command (store.admin.cli): what a user types in a terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import subprocess_env

import store
from store.admin.cli import main


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    with store.MessageStore.open(tmp_path) as s:
        s.put_batch(pa.table({"topic": ["orders"] * 4, "body": [b"a", b"b", b"c", b"\xff"],
                              "tags": ["x", "y", "x", "y"], "queueId": pa.array([0] * 4, pa.int32())}))
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
    assert main(["lag", str(filled), "nobody"]) == 1


def test_errors_exit_2_and_never_create_a_store(tmp_path: Path, filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "not-a-store"
    empty.mkdir()
    assert main(["info", str(empty)]) == 2
    assert list(empty.iterdir()) == []
    assert main(["read", str(filled), "../etc", "0"]) == 2
    assert "topic" in capsys.readouterr().err


def test_console_script_runs(filled: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "store.admin.cli", "info", str(filled)], capture_output=True, text=True,
                       env=subprocess_env(), timeout=60)
    assert r.returncode == 0 and "orders" in r.stdout
