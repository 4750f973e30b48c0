"""A Spark standalone cluster on the test hosts (:mod:`.hosts`): the master on one host, workers
on others, and jobs submitted with ``spark-submit`` (client mode) from a driver host of their
own, every JVM bound to its host's address (``--host``, ``SPARK_LOCAL_IP``,
``spark.driver.host``). Ports are fixed (7077 for the master): every host has its own stack.

**The Python of Spark's workers** is this environment's (``sys.executable``, the project's venv
with spark-rmq installed) as ``PYSPARK_PYTHON``: the venv is on the shared file system, so
every host sees it, as a deployment that installs spark-rmq into the workers' Python on every
host (docs/spark.md, "On a cluster"). The executors then run with the C helper, and nothing is
zipped or shipped per job; shipping the packages as ``--py-files`` is tested on 127.0.0.1 by
tests/spark/test_cluster.py.

**Small and quick**: the master and workers get 256 MB heaps, each worker one core and one
executor of 512 MB, the driver 512 MB; every JVM runs the serial collector and the client
compiler only (``-XX:TieredStopAtLevel=1``: these JVMs live for seconds, start-up is what
costs).

Every process is started in a session of its own (:class:`spark.processes.Processes`: Spark's
launchers start children, the workers start executors, executors start Python workers) and
:meth:`SparkCluster.close` kills each whole process group, SIGTERM then SIGKILL, pass or fail;
the test hosts are deleted after that (the fixture's :meth:`Hosts.close`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from spark.processes import Processes, spark_home

from .hosts import Hosts

MASTER_PORT = 7077
JOB = Path(__file__).with_name("spark_job.py")
#: the JVMs' options: the serial collector, the client compiler only (start-up dominates)
JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss4m"


class SparkCluster:
    """``SparkCluster(hosts, tmp, master="sm", workers=["w1", "w2"], driver="d")``; :meth:`start`,
    then :meth:`submit` jobs (:mod:`.spark_job`), :meth:`close` at the end."""

    def __init__(self, hosts: Hosts, tmp: Path, *, master: str, workers: Sequence[str], driver: str) -> None:
        self.hosts = hosts
        self.tmp = tmp
        self.master_host = master
        self.worker_hosts = list(workers)
        self.driver_host = driver
        self.logs = tmp / "spark-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs = Processes(self.logs)
        self.url = f"spark://{hosts.addr(master)}:{MASTER_PORT}"
        self.submits = 0

    def _env(self, host: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
        env.update(
            SPARK_LOCAL_IP=self.hosts.addr(host),
            SPARK_LOCAL_DIRS=str(self.tmp / f"spark-local-{host}"),
            PYSPARK_PYTHON=sys.executable,
            SPARK_DAEMON_MEMORY="256m",
            SPARK_DAEMON_JAVA_OPTS=JAVA_OPTS,
            SPARK_NO_DAEMONIZE="1",
        )
        return env

    def _start(self, name: str, host: str, argv: list[str]) -> subprocess.Popen[bytes]:
        return self.procs.start(name, ["ip", "netns", "exec", self.hosts.ns(host), *argv], self._env(host))

    def start(self) -> None:
        """The master and the workers, started together; returns once every worker registered."""
        spark_class = str(spark_home() / "bin" / "spark-class")
        addr = self.hosts.addr(self.master_host)
        master = self._start(
            "master",
            self.master_host,
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                addr,
                "--port",
                str(MASTER_PORT),
                "--webui-port",
                "8080",
            ],
        )
        workers = []
        for w in self.worker_hosts:
            workers.append(
                (
                    w,
                    self._start(
                        f"worker-{w}",
                        w,
                        [
                            spark_class,
                            "org.apache.spark.deploy.worker.Worker",
                            "--host",
                            self.hosts.addr(w),
                            "--webui-port",
                            "8081",
                            "--cores",
                            "1",
                            "--memory",
                            "640m",
                            "--work-dir",
                            str(self.tmp / f"spark-work-{w}"),
                            self.url,
                        ],
                    ),
                )
            )
        self.procs.wait_for("master", master, f"Starting Spark master at {self.url}")
        for w, proc in workers:
            self.procs.wait_for(f"worker-{w}", proc, "Successfully registered with master")

    def submit(self, spec: dict[str, Any], name: str = "") -> tuple[subprocess.Popen[bytes], str, Path]:
        """A job (:mod:`.spark_job`, its steps in ``spec``) submitted from the driver host; the
        process (``spark-submit``: its whole group is the driver), its log's name and the file
        its results are written to, step by step."""
        self.submits += 1
        name = name or f"submit-{self.submits}"
        spec_file = self.tmp / f"{name}.spec.json"
        result = self.tmp / f"{name}.result.json"
        spec_file.write_text(json.dumps({**spec, "result": str(result)}))
        driver = self.hosts.addr(self.driver_host)
        argv = [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            self.url,
            "--conf",
            f"spark.driver.host={driver}",
            "--conf",
            f"spark.driver.bindAddress={driver}",
            "--conf",
            f"spark.pyspark.python={sys.executable}",
            "--conf",
            f"spark.pyspark.driver.python={sys.executable}",
            "--conf",
            "spark.driver.memory=512m",
            "--conf",
            "spark.executor.memory=512m",
            "--conf",
            "spark.executor.cores=1",
            "--conf",
            f"spark.cores.max={len(self.worker_hosts)}",
            "--conf",
            f"spark.driver.extraJavaOptions={JAVA_OPTS}",
            "--conf",
            f"spark.executor.extraJavaOptions={JAVA_OPTS}",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.shuffle.partitions=2",
            "--conf",
            "spark.task.maxFailures=4",
            str(JOB),
            str(spec_file),
        ]
        return self._start(name, self.driver_host, argv), name, result

    def wait(self, proc: subprocess.Popen[bytes], name: str, timeout: float = 120) -> dict[str, Any]:
        """The job's results once ``spark-submit`` ended with 0 (an AssertionError with its log
        otherwise)."""
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, f"{name}: exit {code}:\n{self.procs.log(name)[-6000:]}"
        return results(self.tmp / f"{name}.result.json")

    def kill_driver(self, proc: subprocess.Popen[bytes]) -> None:
        """kill -9 of a job's driver (its process group: spark-submit's JVM and the job's Python)."""
        os.killpg(proc.pid, 9)
        proc.wait(30)

    def apps(self) -> set[str]:
        """The applications the workers ran so far (their ``work/<app>`` folders)."""
        return {p.name for w in self.worker_hosts for p in (self.tmp / f"spark-work-{w}").glob("app-*")}

    def executor_log(self, skip: Collection[str] = (), workers: Sequence[str] = ()) -> str:
        """Every executor's stderr so far (the workers' ``work/<app>/<id>/stderr``; of the hosts
        ``workers``, else of all) but those of the applications in ``skip``."""
        return "".join(
            p.read_text(errors="replace")
            for w in workers or self.worker_hosts
            for p in sorted((self.tmp / f"spark-work-{w}").glob("app-*/*/stderr"))
            if p.parent.parent.name not in skip
        )

    def wait_for_executors(
        self, done: Callable[[str], bool], what: str, skip: Collection[str] = (), timeout: float = 60
    ) -> None:
        """Until ``done`` holds for the executors' log (:meth:`executor_log` but ``skip``)."""
        deadline = time.monotonic() + timeout
        while not done(self.executor_log(skip)):
            assert time.monotonic() < deadline, f"the executors did not log {what}:\n" + self.executor_log(skip)[-4000:]
            time.sleep(0.2)  # (waits for the executors)

    def close(self) -> list[int]:
        """Every process group started here stopped; the groups that still had a process."""
        return self.procs.stop_all()


def results(path: Path) -> dict[str, Any]:
    """A job's results so far (``{}`` before its first step ended)."""
    try:
        out: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return out


def wait_for_file(path: Path, proc: subprocess.Popen[bytes], timeout: float = 90) -> None:
    """Until ``path`` exists (a job's sign); an AssertionError when the job ended first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the job ended ({proc.returncode}) before {path.name} appeared"
        assert time.monotonic() < deadline, f"{path.name} did not appear in {timeout} s"
        time.sleep(0.1)  # (waits for the job)
