"""spark_rmq.stores: a process's shared stores are closed on every way it ends normally, and
never under a running store operation (no Spark here: plain processes given the signals
Spark sends its Python workers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import subprocess_env

import rmqlog
from rmqlog.durability.lock_file import OWNERS_DIR

SCRIPT = """
import os, signal, sys, time
# as a Spark worker starts: default dispositions (a suite run under nohup passes SIGHUP ignored)
signal.signal(signal.SIGHUP, signal.SIG_DFL)
import pyarrow as pa
from spark_rmq import stores
from spark_rmq.read import QueueRange, read_range

root, mode = sys.argv[1:3]
if mode == "chained":
    def mine(signum, frame):
        print("chained", flush=True)
        sys.exit(3)
    signal.signal(signal.SIGTERM, mine)
with stores.using(root) as ms:
    ms.put_batch(pa.table({"topic": ["T"] * 3, "body": [b"a", b"b", b"c"], "queueId": pa.array([0] * 3, pa.int32())}))
    ms.dispatch()
    if mode == "busy":
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside the operation
        time.sleep(5)  # (the signal's handler ends the process meanwhile)
if mode == "reading":  # a read task suspended between two windows
    rows = read_range(QueueRange(root, "T", 0, 0, 3, batch_rows=1))
    print(next(rows).num_rows, flush=True)
sig = {"idle": signal.SIGTERM, "hup": signal.SIGHUP, "chained": signal.SIGTERM, "reading": signal.SIGTERM}.get(mode)
if sig is not None:
    os.kill(os.getpid(), sig)
    time.sleep(5)  # (the signal's handler ends the process meanwhile)
print("exit", flush=True)
"""


def run(root: Path, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root), mode],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def owners(root: Path) -> list[str]:
    return sorted(os.listdir(root / OWNERS_DIR))


@pytest.mark.parametrize(
    ("mode", "rc", "out"),
    [
        ("idle", -signal.SIGTERM, ""),  # the stream source runner at query.stop()
        ("hup", -signal.SIGHUP, ""),  # a daemon's worker at spark.stop()
        ("reading", -signal.SIGTERM, "1\n"),  # reads yield outside the store operation
        ("exit", 0, "exit\n"),  # atexit
        ("chained", 3, "chained\n"),  # a handler that was there before runs, then atexit closes
    ],
)
def test_a_process_ending_normally_leaves_a_clean_store(tmp_path: Path, mode: str, rc: int, out: str) -> None:
    root = tmp_path / "s"
    done = run(root, mode)
    assert (done.returncode, done.stdout) == (rc, out), done.stderr[-2000:]
    assert not (root / "abort").exists() and owners(root) == []
    with rmqlog.MessageStore.open(root) as ms:
        assert ms.recovery is not None and not ms.recovery.abnormal
        assert ms.read_queue("T", 0, 0, 10)["body"].to_pylist() == [b"a", b"b", b"c"]


def test_a_signal_during_a_store_operation_is_a_crash(tmp_path: Path) -> None:
    root = tmp_path / "s"
    done = run(root, "busy")
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]
    assert (root / "abort").exists() and len(owners(root)) == 1  # as after kill -9
    with rmqlog.MessageStore.open(root) as ms:
        assert ms.recovery is not None and ms.recovery.abnormal
        assert ms.read_queue("T", 0, 0, 10)["body"].to_pylist() == [b"a", b"b", b"c"]  # acknowledged: kept
