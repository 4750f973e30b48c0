"""No rmqlog command writes inside a store it reads.

``rmqlog export ROOT T --out ROOT/commitlog/00000000000000000000 --read-only`` truncated the
segment before reading it. Every output path that resolves (links included, at any level)
into the store, or is a hard link to a store file, is refused with exit 2 before anything is
opened; and with ``--read-only`` no reading command changes anything in the tree (checked
entry by entry: kind, size, content, mtime).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import small_store_config, tree

import rmqlog
from rmqlog.admin.cli import main

SEGMENT = "commitlog/" + "0" * 20


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(
            pa.table(
                {
                    "topic": ["T"] * 6,
                    "body": [b"m%d" % i for i in range(6)],
                    "keys": [["k"]] * 6,
                    "queueId": pa.array([0] * 6, pa.int32()),
                }
            )
        )
        s.dispatch()
        s.commit_offset("g", "T", 0, 2)
    return root


def _outs(store: Path, tmp_path: Path) -> list[tuple[str, str]]:
    """(name, --out) pairs that all land inside the store."""
    outside_link = tmp_path / "via-link"
    outside_link.symlink_to(store / "commitlog")
    file_link = tmp_path / "file-link"
    file_link.symlink_to(store / SEGMENT)
    root_link = tmp_path / "root-link"
    root_link.symlink_to(store)
    return [
        ("the segment", str(store / SEGMENT)),
        ("a new file in the root", str(store / "export.jsonl")),
        ("the root itself", str(store)),
        ("relative with ..", str(store / "config" / ".." / SEGMENT)),
        ("through a linked folder", str(outside_link / ("0" * 20))),
        ("a link to the segment", str(file_link)),
        ("through a link to the root", str(root_link / "x.jsonl")),
    ]


@pytest.mark.parametrize("read_only", [False, True])
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_refuses_every_output_inside_the_store(
    store: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    read_only: bool,
    fmt: str,
) -> None:
    outs = _outs(store, tmp_path)
    before = tree(store, mtimes=True)
    for name, out in outs:
        argv = ["export", str(store), "T", "--format", fmt, "--out", out] + (["--read-only"] if read_only else [])
        assert main(argv) == 2, name
        err = capsys.readouterr().err
        assert "is inside the store" in err and "no command writes inside a store it reads" in err, name
        assert tree(store, mtimes=True) == before, name  # nothing created, truncated or recovered
    with rmqlog.MessageStore.open(store, read_only=True) as s:
        assert s.read_queue("T", 0, 0, 6).column("body").to_pylist() == [b"m%d" % i for i in range(6)]


def test_export_through_the_store_root_given_as_a_link(store: Path, tmp_path: Path) -> None:
    link = tmp_path / "root-link"
    link.symlink_to(store)
    before = tree(store, mtimes=True)
    assert main(["export", str(link), "T", "--format", "jsonl", "--out", str(store / SEGMENT), "--read-only"]) == 2
    assert tree(store, mtimes=True) == before


def test_export_refuses_a_hard_link_to_a_store_file(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    twin = tmp_path / "twin"
    os.link(store / SEGMENT, twin)  # the same file as the segment, outside the root
    before = tree(store, mtimes=True)
    assert main(["export", str(store), "T", "--format", "jsonl", "--out", str(twin), "--read-only"]) == 2
    assert "hard link to the store's file" in capsys.readouterr().err
    assert tree(store, mtimes=True) == before and twin.stat().st_size == (store / SEGMENT).stat().st_size


def test_export_to_a_link_outside_the_store_writes_its_target(store: Path, tmp_path: Path) -> None:
    target = tmp_path / "real.jsonl"
    target.write_text("old\n")
    link = tmp_path / "out-link"
    link.symlink_to(target)
    assert main(["export", str(store), "T", "--format", "jsonl", "--out", str(link), "--read-only"]) == 0
    assert len(target.read_text().splitlines()) == 6 and link.is_symlink()


def _crashed(store: Path) -> None:
    """Make an open that is not read-only change files: it recovers (abort), and dispatches."""
    (store / "abort").touch()


READING = [
    ["info"],
    ["topic-status", "T"],
    ["read", "T", "0"],
    ["get", "--offset", "0"],
    ["query", "T", "--key", "k"],
    ["query", "*"],
    ["lag"],
    ["lag", "g"],
    ["verify"],
    ["consumer-progress"],
]


@pytest.mark.parametrize(
    "cmd",
    READING + [["export", "T", "--format", "jsonl"], ["export", "T", "--format", "parquet"]],
    ids=lambda c: "-".join(c[:1] + c[-1:]),
)
def test_read_only_commands_change_nothing_in_the_store(
    store: Path,
    tmp_path: Path,
    cmd: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _crashed(store)
    extra = ["--out", str(tmp_path / "out.file")] if cmd[0] == "export" else []
    before = tree(store, mtimes=True)
    assert main([cmd[0], str(store), *cmd[1:], *extra, "--read-only"]) == 0
    assert tree(store, mtimes=True) == before
    assert main([cmd[0], str(store), *cmd[1:], *extra, "--json", "--read-only"]) == 0
    assert tree(store, mtimes=True) == before
    capsys.readouterr()
    # the check can fail: the same command without --read-only recovers (and changes files)
    assert main([cmd[0], str(store), *cmd[1:], *extra]) == 0
    assert tree(store, mtimes=True) != before
