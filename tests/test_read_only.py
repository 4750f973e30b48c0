"""Read-only opens (``MessageStore.open(root, read_only=True)``, ``rmqlog --read-only``, the
Spark source's ``readOnly``): every read works, and not one byte, file or timestamp of the
store changes (see :mod:`rmqlog.read_only`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import FIXTURE_COMMITLOG, copy_file, small_store_config, subprocess_env
from conftest import snapshot_tree as snapshot

import rmqlog
from rmqlog.admin.cli import main as cli

FIRST_ID = "C0A8470100001FBB0000000000000000"  # the RocketMQ fixture's first record


def fill(root: Path, *, dispatch: bool = True) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.create_topic("T", 2)
        s.put_batch(
            pa.table(
                {
                    "topic": ["T"] * 40,
                    "body": [b"m%d" % i for i in range(40)],
                    "keys": [[f"k{i}"] for i in range(40)],
                    "tags": ["a", "b"] * 20,
                }
            )
        )
        if dispatch:
            s.dispatch()
        s.commit_offset("g", "T", 0, 5)


@pytest.fixture
def closed(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    fill(root)
    return root


def test_every_read_works_and_nothing_changes(closed: Path) -> None:
    before = snapshot(closed)
    with rmqlog.MessageStore.open(closed, read_only=True) as s:
        assert s.read_only and s.recovery is None
        assert set(s.topics()) == {"T"}
        assert [s.max_offset("T", q) for q in (0, 1)] == [20, 20] and s.min_offset("T", 0) == 0
        res = s.get_messages("g", "T", 0, 0, 32)
        assert res.messages.num_rows == 20
        assert s.read_queue("T", 1, 0, 100)["body"].to_pylist() == [b"m%d" % i for i in range(1, 40, 2)]
        assert s.committed_offset("g", "T", 0) == 5
        hit = s.query_by_key("T", "k7")
        assert hit["body"].to_pylist() == [b"m7"]
        uniq = hit["properties"].to_pylist()[0]
        uniq_key = dict(uniq)["UNIQ_KEY"]
        assert s.message_by_id(uniq_key)["body"] == b"m7"
        assert s.query_by_unique_key("T", uniq_key).num_rows == 1
        assert s.query_by_time(0).num_rows == 40
        first = res.messages.to_pylist()[0]
        assert s.message_by_offset(first["commitLogOffset"])["body"] == first["body"]
        assert s.offset_for_timestamp("T", 0, 0) == 0
        assert s.published_tail() == s.flushed_offset() > 0
        assert s.verify().ok
        assert s.writer_sequence("nobody") is None
    assert snapshot(closed) == before


MUTATORS: dict[str, Callable[[rmqlog.MessageStore], object]] = {
    "put": lambda s: s.put("T", b"x"),
    "put_batch": lambda s: s.put_batch(pa.table({"topic": ["T"], "body": [b"x"]})),
    "put_batches": lambda s: s.put_batches([pa.table({"topic": ["T"], "body": [b"x"]})]),
    "dispatch": lambda s: s.dispatch(),
    "start_services": lambda s: s.start_services(),
    "deliver_due": lambda s: s.deliver_due(),
    "clean_expired": lambda s: s.clean_expired(force=True),
    "commit_offset": lambda s: s.commit_offset("g", "T", 0, 9),
    "create_topic": lambda s: s.create_topic("U", 1),
    "delete_topic": lambda s: s.delete_topic("T"),
    "flush": lambda s: s.flush(),
}


@pytest.mark.parametrize("name", sorted(MUTATORS))
def test_changes_are_refused_typed(closed: Path, name: str) -> None:
    before = snapshot(closed)
    with rmqlog.MessageStore.open(closed, read_only=True) as s:
        with pytest.raises(rmqlog.ReadOnlyStoreError, match=f"^{name}: the store is open read-only"):
            MUTATORS[name](s)
        assert s.max_offset("T", 0) == 20  # still usable
    assert snapshot(closed) == before


def test_no_store_or_repair(tmp_path: Path) -> None:
    with pytest.raises(rmqlog.StoreNotFoundError):
        rmqlog.MessageStore.open(tmp_path / "none", read_only=True)
    assert not (tmp_path / "none").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(rmqlog.StoreNotFoundError):
        rmqlog.MessageStore.open(tmp_path / "empty", read_only=True)
    assert list((tmp_path / "empty").iterdir()) == []
    fill(tmp_path / "s")
    with pytest.raises(rmqlog.InvalidArgumentError, match="repair"):
        rmqlog.MessageStore.open(tmp_path / "s", read_only=True, repair=True)


def test_undispatched_records_stay_undispatched(tmp_path: Path) -> None:
    """No dispatch on a read-only open: the records are in the log (by offset) but not in the queues."""
    root = tmp_path / "s"
    fill(root, dispatch=False)
    before = snapshot(root)
    with rmqlog.MessageStore.open(root, read_only=True) as s:
        assert s.max_offset("T", 0) == 0 and s.dispatcher.position() < s.published_tail()
        assert s.message_by_offset(0)["body"] == b"m0"
    assert snapshot(root) == before
    with rmqlog.MessageStore.open(root) as s:  # a normal open recovers: dispatched
        assert s.max_offset("T", 0) == 20


def test_rocketmq_store_without_our_files(tmp_path: Path) -> None:
    """A store RocketMQ wrote (no append.state, no lock files, no consume queue): its log is
    read up to the tail rebuilt in memory; not one file is created."""
    root = tmp_path / "rmq"
    copy_file(FIXTURE_COMMITLOG, root / "commitlog" / FIXTURE_COMMITLOG.name)
    before = snapshot(root)
    with rmqlog.MessageStore.open(root, read_only=True) as s:
        assert s.published_tail() == 8192  # 47 records of 172 bytes, then the end-of-segment blank
        row = s.message_by_id(FIRST_ID)
        assert row["topic"] == "abc" and row["body"] == b"Once, there was a chance for me!"
        assert s.max_offset("abc", 0) == 0  # no consume queue: nothing dispatched
        assert s.query_by_key("abc", "nothing").num_rows == 0
    assert snapshot(root) == before


def test_reads_a_store_a_writer_holds_open(closed: Path) -> None:
    """A writer appends after the read-only open: the reader sees what it publishes and
    dispatches; a read-only handle first in the process does not hold the writer's locks back."""
    with rmqlog.MessageStore.open(closed, read_only=True) as r:
        with rmqlog.MessageStore.open(closed, small_store_config()) as w:
            w.put_batch(pa.table({"topic": ["T"] * 4, "body": [b"new"] * 4, "queueId": [0] * 4}), dispatch=True)
            assert r.max_offset("T", 0) == 24
            assert r.read_queue("T", 0, 20, 24)["body"].to_pylist() == [b"new"] * 4
        assert r.max_offset("T", 0) == 24


def test_reader_in_another_process_while_this_one_writes(closed: Path) -> None:
    code = textwrap.dedent(f"""
        import json, rmqlog
        with rmqlog.MessageStore.open({str(closed)!r}, read_only=True) as s:
            print(json.dumps([s.max_offset("T", 0), s.max_offset("T", 1)]))
    """)
    with rmqlog.MessageStore.open(closed, small_store_config()) as w:
        w.put_batch(pa.table({"topic": ["T"] * 6, "body": [b"x"] * 6, "queueId": [1] * 6}), dispatch=True)
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), timeout=120, check=True
        ).stdout
    assert json.loads(out) == [20, 26]


def test_crashed_store_is_read_as_it_is(tmp_path: Path) -> None:
    """A writer killed -9: a read-only open does not recover (``abort`` stays, nothing cut);
    it reads what was dispatched. The next normal open recovers as usual."""
    root = tmp_path / "s"
    fill(root)
    code = textwrap.dedent(f"""
        import os, signal, pyarrow as pa, rmqlog
        s = rmqlog.MessageStore.open({str(root)!r})
        s.put_batch(pa.table({{"topic": ["T"] * 10, "body": [b"late"] * 10, "queueId": [0] * 10}}), dispatch=True)
        s.put_batch(pa.table({{"topic": ["T"] * 5, "body": [b"undispatched"] * 5, "queueId": [0] * 5}}))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert (root / "abort").exists()
    before = snapshot(root)
    with rmqlog.MessageStore.open(root, read_only=True) as s:
        assert s.max_offset("T", 0) == 30
        assert s.read_queue("T", 0, 20, 30)["body"].to_pylist() == [b"late"] * 10
    assert snapshot(root) == before
    with rmqlog.MessageStore.open(root) as s:
        assert s.recovery is not None and s.max_offset("T", 0) == 35


def test_read_only_mount(tmp_path: Path) -> None:
    """The store on a filesystem mounted read-only: a read-only open reads it; a normal open
    fails (it must write), typed or as the OSError the mount gives."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (no privilege in this container)")
    try:
        fill(mnt / "s")
        if subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True).returncode:
            pytest.skip("cannot remount the tmpfs read-only here")
        with rmqlog.MessageStore.open(mnt / "s", read_only=True) as s:
            assert s.read_queue("T", 0, 0, 100).num_rows == 20
            assert s.query_by_key("T", "k3")["body"].to_pylist() == [b"m3"]
            assert s.verify().ok
        with pytest.raises(OSError):  # EROFS: a normal open writes its lock and abort files
            rmqlog.MessageStore.open(mnt / "s")
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_cli_read_only(closed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(closed)
    assert cli(["info", str(closed), "--read-only", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [q["max"] for q in info["topics"]["T"]["queues"]] == [20, 20]
    assert cli(["read", str(closed), "T", "0", "--count", "3", "--read-only"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert cli(["query", str(closed), "T", "--key", "k5", "--read-only", "--json"]) == 0
    capsys.readouterr()
    assert cli(["lag", str(closed), "g", "--read-only", "--json"]) == 0
    assert cli(["verify", str(closed), "--read-only"]) == 0
    capsys.readouterr()
    assert snapshot(closed) == before
    with pytest.raises(SystemExit):  # a command that writes has no --read-only
        cli(["dispatch", str(closed), "--read-only"])
