"""Processes of the cluster and Connect tests: Spark's own launchers started in sessions of
their own, waited for by their logs, and killed with their whole process group at the end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def bare_python(dest: Path) -> Path:
    """A Python with this environment's dependencies (pyspark, pyarrow, numpy, isal...) but not
    spark-rmq itself: a venv whose one ``.pth`` lists this environment's site-packages (the
    ``.pth`` files there, such as an editable install of this project, are not run)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    site = next(dest.glob("lib/python*/site-packages"))
    paths = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site / "deps.pth").write_text("".join(f"{p}\n" for p in paths))
    python = dest / "bin" / "python"
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import pyarrow, pyspark, isal\ntry:\n import rmqlog\nexcept ImportError: print('no store')",
        ],
        capture_output=True,
        text=True,
        cwd=dest,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert probe.stdout.strip() == "no store", probe
    return python


def zip_packages(dest: Path) -> Path:
    """``rmqlog`` and ``spark_rmq`` as one zip for ``--py-files``, made as docs/spark.md says
    (``python -m spark_rmq.shipping``; the C helper cannot be imported from a zip)."""
    subprocess.run([sys.executable, "-m", "spark_rmq.shipping", str(dest)], check=True)
    return dest


class Processes:
    """Child processes, each in a session of its own, killed with their whole group at the end."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[subprocess.Popen[bytes]] = []

    def start(
        self, name: str, argv: list[str], env: dict[str, str], cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        with open(self.logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=cwd
            )
        self.started.append(proc)
        return proc

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def wait_for(self, name: str, proc: subprocess.Popen[bytes], text: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log(name):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{name} did not say {text!r} (exit {proc.poll()}):\n{self.log(name)[-3000:]}")
            time.sleep(0.2)  # (waits for the process)

    def stop_all(self) -> list[int]:
        """SIGTERM then SIGKILL every group; returns the groups that still have a process."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for proc in self.started:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and any(_group_alive(p.pid) for p in self.started):
                for proc in self.started:
                    proc.poll()
                time.sleep(0.2)  # (waits for the processes to end)
        for proc in self.started:
            proc.wait(timeout=10)
        return [p.pid for p in self.started if _group_alive(p.pid)]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@contextmanager
def running(logs: Path) -> Iterator[Processes]:
    """Start processes with it; every group is stopped at the end, and none may be left."""
    procs = Processes(logs)
    try:
        yield procs
    finally:
        left = procs.stop_all()
        assert left == [], f"process groups left running: {left}"
