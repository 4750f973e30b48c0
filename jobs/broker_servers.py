"""The broker benchmark's server processes (``jobs/bench_broker.py``): ours and its peers, each
started on 127.0.0.1 with a port and a data folder of the run's, measured from ``/proc``, and
stopped by its PID; and the printing of a figure beside each of its peers.

- :class:`Server`: a process of ``jobs/broker_load.py`` (our broker, or the bare frame server),
  its port read from the ready line it prints.
- :class:`PeerServer`: ``redis-server`` or ``nats-server`` on a port picked here, waited for by
  a probe (a ``PING`` answered, JetStream's account info for NATS) until a deadline that only
  bounds a failure; its output kept in a log file of the run.
- :class:`CpuMeter`: a process's CPU time over an interval, every thread's
  (``/proc/PID/task/*/schedstat``, nanoseconds; ``/proc/PID/stat``'s clock ticks, which keep
  the time of threads that ended, are taken instead when they show more).
- :func:`vm_rss_mib`: ``VmRSS`` of ``/proc/PID/status``.
- :class:`Peers`: which peers this run has: a binary missing (or named missing by a flag) is
  said once and its figures go without it.
- :class:`Servers`: the run's servers by key (:data:`LABELS`), each started when a part
  first asks for it and stopped at the end: our brokers over stores of their own
  (``ROOT/broker``, ``ROOT/broker-sync``; :data:`TOPICS` created before each starts), the bare
  server, the two Redis instances, NATS (its stream ``BENCH`` created).
- :func:`report`: a figure printed as ``ours X   peer Y (ratio)``, one line per peer present,
  and one JSON line per (figure, peer) under ``--json`` (one line without a peer when none is).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from broker_load import HOST, parse_ready  # jobs/ is the scripts' directory
from harness import Bench
from peers_nats import NatsWire, create_stream, nats_argv, nats_ready
from peers_redis import redis_argv, redis_ready

import rmqlog

LOAD = Path(__file__).resolve().parent / "broker_load.py"
#: how long a server may take to start before the run fails (a bound, not a wait)
START_TIMEOUT_S = 60.0
#: the topics of our brokers' stores (queues), created before each broker starts
TOPICS = {
    "BenchTopic": 4,
    "BenchSync": 1,
    "BenchBatch": 4,
    "BenchBatch100": 4,
    "BenchPull": 4,
    "BenchPoll": 1,
    "BenchIdle": 4,
    "BenchFlight": 4,
}
#: the servers' names in the figures
LABELS = {
    "async": "rmqlog broker, ASYNC_FLUSH",
    "sync": "rmqlog broker, SYNC_FLUSH",
    "bare": "bare server (rmqnet.transport, nothing stored)",
    "nats": "NATS JetStream (file storage)",
    "redis-always": "Redis Streams, appendfsync always",
    "redis-everysec": "Redis Streams, appendfsync everysec",
}


class CpuMeter:
    """CPU time of process ``pid`` (all its threads) between :meth:`start` and :meth:`stop`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.t0 = (0, 0.0)

    def _now(self) -> tuple[int, float]:
        ns = 0
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                ns += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that ended just now
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return ns, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def start(self) -> CpuMeter:
        self.t0 = self._now()
        return self

    def stop(self) -> float:
        """Seconds of CPU since :meth:`start`."""
        ns, ticks = self._now()
        by_task, by_ticks = (ns - self.t0[0]) / 1e9, ticks - self.t0[1]
        # threads that ended in between are gone from task/ but not from stat
        return by_ticks if by_ticks > by_task + 2 / os.sysconf("SC_CLK_TCK") else by_task


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def med(xs: list[float]) -> float:
    return float(np.median(np.asarray(xs)))


def vm_rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` (``VmRSS``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick for port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM to ``proc``'s own PID, SIGKILL if it has not ended within 120 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Server:
    """A server process of ``broker_load.py`` (its ready line read; SIGTERM to stop).
    ``wrap``: a prefix of the command (``nsenter --net=...`` to run it in a namespace)."""

    def __init__(self, args: list[str], log: Path, *, wrap: list[str] | None = None) -> None:
        self.log = open(log, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [*(wrap or []), sys.executable, str(LOAD), *args], stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        try:
            self.port = parse_ready(line)
        except ValueError:
            self.stop()
            raise RuntimeError(f"{args[0]} did not start ({line!r}); see {log}") from None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_s(self) -> float:
        """The process's CPU time so far (user + system), from ``/proc/PID/stat``."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> None:
        _stop(self.proc)
        self.log.close()


class PeerServer:
    """A peer's server process on ``port``, ready once ``probe(port)`` holds."""

    def __init__(self, name: str, argv: list[str], port: int, log: Path, probe: Callable[[int], bool]) -> None:
        self.name, self.port, self.log_path = name, port, log
        self.log = open(log, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not probe(port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name} did not start on 127.0.0.1:{port} (see {log}):\n{tail}")
            time.sleep(0.02)  # polling the probe: the servers print no line this process reads
        self.rss_at_start = vm_rss_mib(self.proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        _stop(self.proc)
        self.log.close()


def start_redis(binary: str, work: Path, fsync: str) -> PeerServer:
    """``redis-server`` with ``appendfsync`` = ``fsync``, its files in ``work/redis-<fsync>``."""
    folder = work / f"redis-{fsync}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    port = free_port()
    return PeerServer(
        f"redis-{fsync}", redis_argv(binary, port, folder, fsync), port, work / f"redis-{fsync}.log", redis_ready
    )


def start_nats(binary: str, work: Path) -> PeerServer:
    """``nats-server -js``, its store in ``work/nats``."""
    folder = work / "nats"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    port = free_port()
    return PeerServer("nats", nats_argv(binary, port, str(folder)), port, work / "nats.log", nats_ready)


class Peers:
    """The binaries of the peers (``None``: absent, said once when first asked for)."""

    def __init__(self, redis: str | None, nats: str | None, cpp_python: str | None) -> None:
        self.paths = {
            "redis": _found(redis, "redis-server"),
            "nats": _found(nats, "nats-server"),
            "cpp": cpp_python if cpp_python and os.access(cpp_python, os.X_OK) else None,
        }
        self.asked = {"redis": redis or "redis-server", "nats": nats or "nats-server", "cpp": cpp_python or "(none)"}
        self.said: set[str] = set()

    def get(self, kind: str) -> str | None:
        path = self.paths[kind]
        if path is None and kind not in self.said:
            self.said.add(kind)
            what = {"redis": "Redis", "nats": "NATS JetStream", "cpp": "the C++ client (PyPI rocketmq 0.4.4)"}[kind]
            hint = {
                "redis": "apt-get install redis-server",
                "nats": "apt-get install nats-server",
                "cpp": "make clients",
            }[kind]
            print(f"\n(peer absent: {what}: {self.asked[kind]} not found ({hint}); its figures go without it)")
        return path


def _found(path: str | None, name: str) -> str | None:
    """``path`` if it is an executable, else None; without ``path``, ``name`` on PATH."""
    if path is None:
        return shutil.which(name)
    return path if os.access(path, os.X_OK) and Path(path).is_file() else None


def _fmt(value: float, unit: str) -> str:
    if unit == "msgs/s":
        return f"{value:,.0f} {unit}"
    if unit in ("ms", "MiB", "% of a core"):
        return f"{value:,.3f} {unit}" if unit == "ms" else f"{value:,.1f} {unit}"
    if unit == "us":
        return f"{value:,.1f} {unit}"
    if unit == "s":
        return f"{value:.2f} {unit}"
    return f"{value:g} {unit}"


def report(bench: Bench, name: str, value: float, unit: str, peers: list[tuple[str, float | None]]) -> None:
    """Print ``name``: ours, then each present peer with the ratio ours / peer; JSON lines:
    one per present peer (or one without a peer if none is present)."""
    present = [(p, v) for p, v in peers if v is not None]
    print(f"{name}")
    if not present:
        print(f"    ours {_fmt(value, unit):>14}   (no peer present)")
        bench.figure(name, value, unit)
        return
    for peer, pv in present:
        assert pv is not None
        ratio = f"({value / pv:.2f}x)" if pv else "(-)"
        print(f"    ours {_fmt(value, unit):>14}   peer {_fmt(pv, unit):>14} {ratio:>10}   {peer}")
        bench.figure(name, value, unit, peer=peer, peer_value=pv)


class Servers:
    """The run's servers by key (:data:`LABELS`): started on first :meth:`get`, stopped by
    :meth:`stop_all`. A peer whose binary is absent is ``None`` (said once, by :class:`Peers`)."""

    def __init__(self, work: Path, peers: Peers, *, segment_mib: int, profile: bool) -> None:
        self.work, self.peers, self.segment_mib, self.profile = work, peers, segment_mib, profile
        self.running: dict[str, Server | PeerServer] = {}
        self.absent: set[str] = set()

    def store_config(self) -> rmqlog.StoreConfig:
        return rmqlog.StoreConfig(mapped_file_size_commit_log=self.segment_mib << 20)

    def broker_conf(self, path: Path, flush: str, extra: str = "") -> Path:
        """A broker.conf at ``path``: ``flush`` (ASYNC_FLUSH or SYNC_FLUSH), the run's segment
        size, ``maxTransferCountOnMessageInMemory`` 1,000 (RocketMQ's default, 32, would answer
        a pull at 1,000 with 32 messages; 1,000 x 100-byte records fit the 256 KiB byte budget)."""
        path.write_text(
            f"brokerName=bench\nbrokerClusterName=BenchCluster\nflushDiskType={flush}\n"
            f"mappedFileSizeCommitLog={self.segment_mib << 20}\nmaxTransferCountOnMessageInMemory=1000\n" + extra
        )
        return path

    def root(self, key: str) -> Path:
        """Our broker's store folder (``async``: ``ROOT/broker``, ``sync``: ``ROOT/broker-sync``)."""
        return self.work / ("broker" if key == "async" else "broker-sync")

    def get(self, key: str) -> Server | PeerServer | None:
        if key in self.running:
            return self.running[key]
        if key in self.absent:
            return None
        started = self._start(key)
        if started is None:
            self.absent.add(key)
            return None
        self.running[key] = started
        return started

    def _start(self, key: str) -> Server | PeerServer | None:
        work = self.work
        if key in ("async", "sync"):
            root = self.root(key)
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            with rmqlog.MessageStore.open(root, self.store_config()) as store:  # the topics exist before the broker
                for topic, queues in TOPICS.items():
                    store.create_topic(topic, queues)
            conf = self.broker_conf(work / f"{root.name}.conf", "ASYNC_FLUSH" if key == "async" else "SYNC_FLUSH")
            profile = ["--profile", str(work)] if self.profile and key == "async" else []
            return Server(["broker", str(root), str(conf), *profile], work / f"{root.name}.log")
        if key == "bare":
            return Server(["bare"], work / "bare.log")
        if key.startswith("redis-"):
            binary = self.peers.get("redis")
            srv = None if binary is None else start_redis(binary, work, key.split("-", 1)[1])
        else:
            binary = self.peers.get("nats")
            srv = None if binary is None else start_nats(binary, work)
            if srv is not None:
                w = NatsWire(srv.port, "setup")
                try:
                    create_stream(w)
                finally:
                    w.close()
        if srv is not None:
            print(
                f"({LABELS[key]}: pid {srv.pid} at {HOST}:{srv.port}, {srv.rss_at_start:.1f} MiB resident after start)"
            )
        return srv

    def stop_all(self) -> None:
        for s in self.running.values():
            s.stop()
        self.running.clear()
