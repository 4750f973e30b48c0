"""How a Spark application leaves a store: clean after a normal end, a crash after a kill -9.

Each test runs a whole application (tests/spark/rmq_app_job.py) in a subprocess with its own
session, since ending one is the point (the suite's session lives for the whole run).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import rmqlog
from rmqlog.durability.lock_file import OWNERS_DIR

HERE = Path(__file__).resolve().parent


def start(root: Path, checkpoints: Path, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE)])}
    return subprocess.Popen([sys.executable, str(HERE / "rmq_app_job.py"), str(root), str(checkpoints), mode],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(app: subprocess.Popen[str]) -> None:
    out, err = app.communicate(timeout=600)
    assert app.returncode == 0 and out.endswith("stopped\n"), err[-3000:]


def wait_until_nobody_has_it_open(root: Path) -> None:
    """The application's Python workers outlive its driver by the time they take to close."""
    fd = os.open(root / "lock", os.O_RDWR)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
                return
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("a process still has the store open 120 s after the application ended")
                time.sleep(0.1)  # (waits for Spark's processes)
    finally:
        os.close(fd)  # drops the lock


def contents(ms: rmqlog.MessageStore) -> dict[str, Counter]:
    out = {}
    for topic, tc in ms.topics().items():
        out[topic] = Counter(bytes(b).decode() for q in range(tc.read_queue_nums)
                             for b in ms.read_queue(topic, q, 0, 1 << 40)["body"].to_pylist())
    return out


ALL = Counter(str(i) for i in range(200))


def test_an_application_that_ends_normally_leaves_a_store_that_opens_normally(tmp_path: Path) -> None:
    root = tmp_path / "store"
    finish(start(root, tmp_path / "ck", "clean"))
    wait_until_nobody_has_it_open(root)
    assert not (root / "abort").exists()
    assert os.listdir(root / OWNERS_DIR) == []
    with rmqlog.MessageStore.open(root) as ms:
        assert ms.recovery is not None and ms.recovery.abnormal is False
        assert contents(ms) == {"orders": ALL, "copy": ALL}


def test_a_worker_killed_with_the_store_open_is_a_crash_whatever_follows(tmp_path: Path) -> None:
    root, ck = tmp_path / "store", tmp_path / "ck"
    app = start(root, ck, "kill")
    try:
        deadline = time.monotonic() + 300
        while not (ck / "victim").exists():  # the write task's worker appended and waits
            if app.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the application ended (rc={app.returncode}) before the victim appended")
            time.sleep(0.2)  # (waits for Spark's processes)
        victim = int((ck / "victim").read_text())
        os.kill(victim, signal.SIGKILL)
        finish(app)  # Spark retried the task (a no-op replay) and the application ended normally
    finally:
        if app.poll() is None:
            app.kill()
    wait_until_nobody_has_it_open(root)
    owners = [n.split("-")[0] for n in os.listdir(root / OWNERS_DIR)]
    if (root / "abort").exists():
        # the usual order: every other process closed cleanly while the victim's crash stays
        # recorded (its owner file) for the next opener's recovery
        assert owners == [str(victim)]
        abnormal = True
    else:
        # under load, every other process may have closed before the victim died: the retried
        # task then opened the store first, recovered it (abnormal) and closed it cleanly
        assert owners == []
        abnormal = False
    with rmqlog.MessageStore.open(root) as ms:
        assert ms.recovery is not None and ms.recovery.abnormal is abnormal
        assert contents(ms) == {"orders": ALL, "copy": ALL}  # nothing acknowledged lost, nothing twice
