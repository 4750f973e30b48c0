"""How a Spark application leaves a store: clean after a normal end, a crash after a kill -9.

A whole application (tests/spark/rmq_app_job.py) runs in a subprocess with its own session,
since ending one is the point (the suite's session lives for the whole run). One application
serves both tests (:func:`app`, a JVM start less): it runs its jobs on a first store, where
the test kills (kill -9) the Python worker of a write task that appended, then the same jobs
on a second store, which no killed process ever opened, and ends normally. The first store
is the crash's, the second the normal end's. The module is one xdist group (one worker runs
both tests, and the application once).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import rmqlog
from rmqlog.durability.lock_file import OWNERS_DIR

HERE = Path(__file__).resolve().parent

#: one worker runs the module (under ``-n 2 --dist loadgroup``): its tests share one application
pytestmark = pytest.mark.xdist_group("spark_app_end")


def start(*parts: tuple[Path, Path, str]) -> subprocess.Popen[str]:
    """The application on the stores ``(root, checkpoints, mode)``, in this order."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE)])}
    args = [str(a) for part in parts for a in part]
    return subprocess.Popen(
        [sys.executable, str(HERE / "rmq_app_job.py"), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


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
        out[topic] = Counter(
            bytes(b).decode()
            for q in range(tc.read_queue_nums)
            for b in ms.read_queue(topic, q, 0, 1 << 40)["body"].to_pylist()
        )
    return out


ALL = Counter(str(i) for i in range(200))


@dataclass
class App:
    """What the application left: the killed store (its checkpoints, the victim's pid) and
    the clean one."""

    killed: Path
    killed_checkpoints: Path
    victim: int
    clean: Path


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    """The application, run to its normal end: on the ``kill`` store first (the test kills the
    write task's worker once it appended and waits), then on the ``clean`` store; then every
    process that had a store open gone."""
    tmp = tmp_path_factory.mktemp("app-end")
    killed, ck = tmp / "killed" / "store", tmp / "killed" / "ck"
    clean = tmp / "clean" / "store"
    proc = start((killed, ck, "kill"), (clean, tmp / "clean" / "ck", "clean"))
    try:
        deadline = time.monotonic() + 300
        while not (ck / "victim").exists():  # the write task's worker appended and waits
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the application ended (rc={proc.returncode}) before the victim appended")
            time.sleep(0.2)  # (waits for Spark's processes)
        victim = int((ck / "victim").read_text())
        os.kill(victim, signal.SIGKILL)
        finish(proc)  # Spark retried the task (a no-op replay), went on to the clean store and ended normally
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_until_nobody_has_it_open(killed)
    wait_until_nobody_has_it_open(clean)
    yield App(killed, ck, victim, clean)


def test_an_application_that_ends_normally_leaves_a_store_that_opens_normally(app: App) -> None:
    root = app.clean
    assert not (root / "abort").exists()
    assert os.listdir(root / OWNERS_DIR) == []
    with rmqlog.MessageStore.open(root) as ms:
        assert ms.recovery is not None and ms.recovery.abnormal is False
        assert contents(ms) == {"orders": ALL, "copy": ALL}


def test_a_worker_killed_with_the_store_open_is_a_crash_whatever_follows(app: App) -> None:
    root, victim = app.killed, app.victim
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
