"""Repair needs the store to itself.

``MessageStore.open(root, repair=True)`` and ``rmqlog recover ROOT --repair`` while another
process holds the store used to open it without repairing anything (``{}``, exit 0). They
now refuse with :class:`rmqlog.StoreBusyError` naming the holder's pid, and change nothing.
The holder is a real second process that says when it has the store open.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import small_store_config, subprocess_env, tree

import rmqlog
from rmqlog.admin.cli import main

_HOLDER = """
import sys, rmqlog
with rmqlog.MessageStore.open(sys.argv[1], create=False):
    print("open", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(pa.table({"topic": ["T"] * 3, "body": [b"a", b"b", b"c"]}))
        s.dispatch()
    return root


@pytest.fixture
def holder(store: Path) -> Iterator[subprocess.Popen[str]]:
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    assert p.stdout is not None and p.stdout.readline() == "open\n"  # it has the store open now
    yield p
    if p.poll() is None:
        p.communicate("", timeout=60)


def _damage_topics(root: Path) -> None:
    (root / "config" / "topics.json").write_text("{not json", "utf-8")


def test_open_with_repair_while_another_process_holds_the_store(store: Path, holder: subprocess.Popen[str]) -> None:
    _damage_topics(store)  # something repair would set aside: it must stay where it is
    before = tree(store)
    with pytest.raises(rmqlog.StoreBusyError) as exc:
        rmqlog.MessageStore.open(store, repair=True)
    assert exc.value.holders == [holder.pid] and f"pid {holder.pid}" in str(exc.value)
    assert str(store) in str(exc.value)
    assert tree(store) == before  # nothing set aside, nothing cut, no file made
    # once the holder is gone, the same call repairs
    holder.communicate("", timeout=60)
    with rmqlog.MessageStore.open(store, repair=True) as s:
        assert s.recovery is not None and any("topics.json" in p for p in s.recovery.problems)
        assert s.read_queue("T", 0, 0, 10).num_rows + sum(s.read_queue("T", q, 0, 10).num_rows for q in (1, 2, 3)) == 3


def test_rmqlog_recover_repair_while_held_exits_non_zero_naming_the_holder(
    store: Path,
    holder: subprocess.Popen[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = tree(store)
    assert main(["recover", str(store), "--repair", "--json"]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"pid {holder.pid}" in captured.err and "repair needs the store to itself" in captured.err
    assert tree(store) == before
    holder.communicate("", timeout=60)
    assert main(["recover", str(store), "--repair", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["abnormal"] is False


def test_repair_while_this_process_has_the_store_open(store: Path) -> None:
    with rmqlog.MessageStore.open(store):
        with pytest.raises(rmqlog.StoreBusyError) as exc:
            rmqlog.MessageStore.open(store, repair=True)
        assert exc.value.holders == [os.getpid()]
    with rmqlog.MessageStore.open(store, repair=True) as s:  # the failed claim left nothing held
        assert s.recovery is not None


def test_a_failed_repair_open_gives_the_store_back(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an open with repair that fails after claiming the store must not keep it claimed
    from rmqlog.recovery import assembly

    def fail(*args: object) -> None:  # the wiring of the parts, after this process claimed the store
        raise rmqlog.CorruptStoreError("wiring failed")

    with monkeypatch.context() as m:
        m.setattr(assembly, "_wire", fail)
        with pytest.raises(rmqlog.CorruptStoreError):
            rmqlog.MessageStore.open(store, repair=True)
    with rmqlog.MessageStore.open(store, repair=True) as s:  # this process is the first opener again
        assert s.recovery is not None
