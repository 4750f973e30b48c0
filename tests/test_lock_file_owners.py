"""Owner files (``<root>/owners``): a process that died with the store open is noticed even
when other processes outlive it and close the store cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import subprocess_env

import rmqlog
from rmqlog.durability.lock_file import OWNERS_DIR

#: Opens the store, appends, says "open", then closes when stdin says so (or is killed first).
HOLDER = """
import sys, rmqlog
ms = rmqlog.MessageStore.open(sys.argv[1])
ms.put("T", b"from " + sys.argv[2].encode(), queue_id=0)
print("open", flush=True)
sys.stdin.readline()
ms.close()
print("closed", flush=True)
"""


def _holder(root: Path, name: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root), name],
        env=subprocess_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline() == "open\n"
    return p


def _close(p: subprocess.Popen[str]) -> None:
    out, _ = p.communicate("close\n")
    assert out == "closed\n" and p.returncode == 0


def _owners(root: Path) -> list[str]:
    d = root / OWNERS_DIR
    return sorted(os.listdir(d)) if d.is_dir() else []


def bodies(root: Path) -> list[bytes]:
    with rmqlog.MessageStore.open(root) as ms:
        ms.dispatch()
        return sorted(ms.read_queue("T", 0, 0, 100)["body"].to_pylist())


def test_each_open_process_has_an_owner_file_until_it_closes(tmp_path: Path) -> None:
    root = tmp_path / "s"
    a, b = _holder(root, "a"), _holder(root, "b")
    assert [n.split("-")[0] for n in _owners(root)] == sorted([str(a.pid), str(b.pid)])
    _close(a)
    assert [n.split("-")[0] for n in _owners(root)] == [str(b.pid)]
    assert (root / "abort").exists()  # b still has it open
    _close(b)
    assert _owners(root) == [] and not (root / "abort").exists()
    with rmqlog.MessageStore.open(root) as ms:
        assert ms.recovery is not None and not ms.recovery.abnormal
        assert len(_owners(root)) == 1  # this process's own file while open
    assert _owners(root) == []


def test_a_killed_owner_keeps_abort_although_the_last_closer_closes_cleanly(tmp_path: Path) -> None:
    root = tmp_path / "s"
    a, b = _holder(root, "a"), _holder(root, "b")
    b.send_signal(signal.SIGKILL)
    b.wait()
    _close(a)  # the last closer: nobody else holds the lock, but b never closed
    assert (root / "abort").exists()
    assert [n.split("-")[0] for n in _owners(root)] == [str(b.pid)]
    with rmqlog.MessageStore.open(root) as ms:
        assert ms.recovery is not None and ms.recovery.abnormal
        assert len(_owners(root)) == 1  # b's file went with the recovery that answered it
    assert not (root / "abort").exists() and _owners(root) == []
    assert bodies(root) == [b"from a", b"from b"]  # nothing acknowledged is lost
    with rmqlog.MessageStore.open(root) as ms:
        assert ms.recovery is not None and not ms.recovery.abnormal


def test_an_owner_file_alone_means_abnormal_recovery(tmp_path: Path) -> None:
    """Even without ``abort``, a dead owner's file sends the first opener down the abnormal path."""
    root = tmp_path / "s"
    rmqlog.MessageStore.open(root).close()
    (root / OWNERS_DIR / "12345-deadbeef").touch()
    with rmqlog.MessageStore.open(root) as ms:
        assert ms.recovery is not None and ms.recovery.abnormal
    assert _owners(root) == [] and not (root / "abort").exists()


def test_a_close_whose_final_flush_failed_leaves_the_store_to_crash_recovery(tmp_path, monkeypatch) -> None:
    import errno

    import pyarrow as pa
    import pytest

    import rmqlog

    root = tmp_path / "s"
    s = rmqlog.MessageStore.open(root)
    s.put_batch(pa.table({"topic": ["t"], "body": [b"x"]}))

    real, calls = s.flush_service.flush_to, []

    def fail(*args: object) -> int:  # the close's own flush fails; later ones would work
        calls.append(args)
        if len(calls) == 1:
            raise rmqlog.DiskFullError(errno.ENOSPC, "disk full while syncing", str(root))
        return real(*args)

    monkeypatch.setattr(s.flush_service, "flush_to", fail)
    with pytest.raises(rmqlog.DiskFullError):
        s.close()
    monkeypatch.undo()
    assert (root / "abort").exists() and list((root / "owners").iterdir())
    with rmqlog.MessageStore.open(root) as again:
        assert again.recovery is not None and again.recovery.abnormal
        assert again.read_queue("t", 0, 0, 10)["body"].to_pylist() + again.read_queue("t", 1, 0, 10)[
            "body"
        ].to_pylist() + again.read_queue("t", 2, 0, 10)["body"].to_pylist() + again.read_queue("t", 3, 0, 10)[
            "body"
        ].to_pylist() == [b"x"]


def test_openers_waiting_for_a_recovery_that_dies_recover_themselves(tmp_path) -> None:
    """A process waiting while the first opener recovers must not go on with a half-recovered
    store when that opener is killed (found by the torture job, jobs/torture/)."""
    import subprocess
    import sys
    import threading
    import time

    import pyarrow as pa

    import rmqlog

    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        s.put_batch(pa.table({"topic": ["t"] * 3, "body": [b"a", b"b", b"c"]}))
    (root / "abort").touch()  # the last owner crashed: the next first opener recovers
    # a "first opener" that takes the lock exclusively, starts recovering, and is killed
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import fcntl, os, sys, time
fd = os.open({str(root / "lock")!r}, os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)
open({str(root / "recovering")!r}, "w").close()
print("ready", flush=True)
time.sleep(60)  # (holds the lock until the test kills it)
""",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        got: list[rmqlog.MessageStore] = []
        waiter = threading.Thread(target=lambda: got.append(rmqlog.MessageStore.open(root)))
        waiter.start()
        time.sleep(0.3)  # the waiter is blocked behind the "recovery"
        assert not got
        holder.kill()
        waiter.join(30)
        assert got, "the waiting open did not return"
        s = got[0]
        try:
            assert s.recovery is not None and s.recovery.abnormal  # it recovered the store itself
            assert not (root / "recovering").exists()
        finally:
            s.close()
    finally:
        holder.kill()
        holder.wait()
