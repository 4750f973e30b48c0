"""The broker benchmark's figures with processes other than the broker (``jobs/bench_broker.py``
parts ``cpp`` and ``namesrv``).

``cpp``: Apache's C++ client 1.0.1 (PyPI ``rocketmq`` 0.4.4 in ``.venv-rocketmq``, ``make
clients``; ``--cpp-python`` names another environment's Python) sends 1 KiB messages with
``send_sync`` one at a time (``jobs/cpp_sync_send.py``), beside our own client shape (a
blocking socket with frames encoded first: ``broker_load.py rtt``) against the same broker
in the same round. The C++ client's libevent probes an outside address at start-up, so, as
the real-client tests do (``tests/wire/real_clients.py``), it runs in a loopback-only network
namespace (``unshare -n``, ``ip link set lo up``, held by a ``sleep``) with a name server
(``rmqlog namesrv``) and a broker (ASYNC_FLUSH, a store of its own under ``ROOT/cpp``) of its
own started inside it through ``nsenter --net``; our client shape runs there too. Root
(CAP_SYS_ADMIN) is needed; without the client, ``unshare``, ``nsenter`` or ``ip`` the part
says so and reports nothing.

``namesrv``: ``rmqlog namesrv`` (the project's command beside this Python) started on a free
port of 127.0.0.1: its ``VmRSS`` after start, then after ``--namesrv-brokers`` brokers
registered ``--namesrv-topics`` topics each and ``--namesrv-routes`` route queries were
answered; beside Redis's and NATS's resident memory after their start and now.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker_load import HOST, Wire, check_ok  # jobs/ is the scripts' directory
from broker_servers import LABELS, PeerServer, Server, med, pct, report, vm_rss_mib

import rmqlog
from rmqnet.remoting import RemotingCommand, RequestCode, encode_bytes
from rmqnet.remoting.register import (
    RegisterBrokerBody,
    RegisterBrokerHeader,
    TopicConfigData,
    body_crc32,
)

if TYPE_CHECKING:
    from bench_broker import Run

JOBS = Path(__file__).resolve().parent
CPP_SEND = JOBS / "cpp_sync_send.py"
LOAD = JOBS / "broker_load.py"
RMQLOG = Path(sys.executable).with_name("rmqlog")
#: the name server's port inside the namespace (which holds nothing else)
NS_NAMESRV = "127.0.0.1:9876"
START_TIMEOUT_S = 60.0


class Netns:
    """A loopback-only network namespace held by a ``sleep`` child until :meth:`close`."""

    def __init__(self) -> None:
        self.holder = subprocess.Popen(
            ["unshare", "-n", "sh", "-c", "ip link set lo up && echo up && exec sleep 86400"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.holder.stdout is not None
        if self.holder.stdout.readline().strip() != "up":
            err = self.holder.stderr.read() if self.holder.stderr else ""
            self.close()
            raise RuntimeError(f"no loopback-only namespace (unshare -n needs root): {err.strip()}")

    def wrap(self) -> list[str]:
        """The prefix that runs a command inside (``nsenter`` execs it: its PID is the command's)."""
        return ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", "--"]

    def close(self) -> None:
        if self.holder.poll() is None:
            self.holder.kill()
        self.holder.wait()


def _namesrv(argv_prefix: list[str], listen: str, log: Path) -> tuple[subprocess.Popen[str], int, Any]:
    """``rmqlog namesrv --listen`` (``-m rmqnet`` without the command); its port once it prints
    ``listening on``."""
    cmd = [str(RMQLOG)] if RMQLOG.is_file() else [sys.executable, "-m", "rmqnet"]
    out = open(log, "ab")  # noqa: SIM115 (closed by the caller)
    proc = subprocess.Popen(
        [*argv_prefix, *cmd, "namesrv", "--listen", listen], stdout=subprocess.PIPE, stderr=out, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        proc.wait()
        out.close()
        raise RuntimeError(f"rmqlog namesrv did not start ({line!r}); see {log}")
    return proc, int(line.strip().rsplit(":", 1)[1]), out


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _json_child(argv: list[str], env: dict[str, str] | None, what: str, timeout: float) -> dict[str, Any]:
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"{what} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    obj: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return obj


def cpp(run: Run) -> None:
    python = run.peers.get("cpp")
    if python is None:
        return
    tools = [t for t in ("unshare", "nsenter", "ip") if shutil.which(t) is None]
    if tools:
        print(
            f"\n(peer absent: the C++ client runs in a loopback-only namespace and {', '.join(tools)} is not on PATH)"
        )
        return
    n, work = run.a.cpp_messages, run.work
    root, home = work / "cpp", work / "cpp-home"
    for d in (root, home):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    with rmqlog.MessageStore.open(root, run.servers.store_config()) as store:
        store.create_topic("BenchCpp", 4)
    conf = run.servers.broker_conf(work / "cpp.conf", "ASYNC_FLUSH", f"namesrvAddr={NS_NAMESRV}\nbrokerIP1=127.0.0.1\n")
    try:
        ns = Netns()
    except RuntimeError as exc:
        print(f"\n(peer absent: the C++ client runs in a loopback-only namespace: {exc})")
        return
    log = None
    namesrv = broker = None
    try:
        namesrv, _, log = _namesrv(ns.wrap(), NS_NAMESRV, work / "cpp-namesrv.log")
        broker = Server(["broker", str(root), str(conf)], work / "cpp-broker.log", wrap=ns.wrap())
        env = {**os.environ, "HOME": str(home)}
        opts = json.dumps({"nameSrv": NS_NAMESRV, "topic": "BenchCpp", "n": n, "size": 1024, "warm": 50})
        theirs: list[list[float]] = []
        ours: list[list[float]] = []
        for _ in range(run.a.rounds):
            ours.append(
                _json_child(
                    [*ns.wrap(), sys.executable, str(LOAD), "rtt", str(broker.port), "BenchCpp", str(n), "1024"],
                    None,
                    "our client shape's sends",
                    600,
                )["rtts_ms"]
            )
            theirs.append(
                _json_child([*ns.wrap(), python, str(CPP_SEND), opts], env, "the C++ client's sends", 600)["rtts_ms"]
            )
    finally:
        for p in (broker,):
            if p is not None:
                p.stop()
        if namesrv is not None:
            _stop(namesrv)
        if log is not None:
            log.close()
        ns.close()
    print(
        f"\n== the real C++ client: send_sync of 1 KiB, one at a time, {n:,} a round (after 50 unmeasured), "
        f"beside our client shape's sends to the same broker (both in the namespace), medians of {run.a.rounds} rounds"
    )
    for q in (50, 99):
        report(
            run.b,
            f"sync send 1 KiB in the C++ client's namespace, our client shape, round trip p{q}",
            med([pct(xs, q) for xs in ours]),
            "ms",
            [
                (
                    f"Apache's C++ client 1.0.1 (PyPI rocketmq 0.4.4) send_sync, same broker, p{q}",
                    med([pct(xs, q) for xs in theirs]),
                )
            ],
        )


def _register(opaque: int, broker: int, topics: list[str]) -> bytes:
    body = RegisterBrokerBody({t: TopicConfigData(t, 4, 4) for t in topics}).encode()
    addr = f"127.0.0.1:{20000 + broker}"
    ext = RegisterBrokerHeader(
        broker_name=f"bench-{broker}",
        broker_addr=addr,
        cluster_name="BenchCluster",
        ha_server_addr=f"127.0.0.1:{30000 + broker}",
        broker_id=0,
        body_crc32=body_crc32(body),
    ).to_ext()
    return encode_bytes(
        RemotingCommand(RequestCode.REGISTER_BROKER, opaque, ext_fields=ext, body=body, language="JAVA")
    )


def namesrv(run: Run) -> None:
    a = run.a
    proc, port, log = _namesrv([], f"{HOST}:0", run.work / "namesrv.log")
    try:
        start = vm_rss_mib(proc.pid)
        w = Wire(port)
        topics = [f"NsTopic{i:05d}" for i in range(a.namesrv_topics)]
        try:
            t0 = time.monotonic()
            for b in range(a.namesrv_brokers):
                check_ok(w.call(_register(b + 1, b, topics)), "REGISTER_BROKER")
            for i in range(a.namesrv_routes):
                route = RemotingCommand(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC,
                    i + 1,
                    ext_fields={"topic": topics[i % len(topics)]},
                    language="JAVA",
                )
                check_ok(w.call(encode_bytes(route)), "GET_ROUTEINFO_BY_TOPIC")
            took = time.monotonic() - t0
        finally:
            w.close()
        after = vm_rss_mib(proc.pid)
    finally:
        _stop(proc)
        log.close()
    peers: dict[str, PeerServer] = {}
    for key in ("redis-everysec", "nats"):
        srv = run.servers.get(key)
        if isinstance(srv, PeerServer):
            peers[key] = srv
    print(
        f"\n== the name server's resident memory (VmRSS): rmqlog namesrv after its start, then after "
        f"{a.namesrv_brokers} brokers registered {a.namesrv_topics:,} topics each and {a.namesrv_routes:,} route "
        f"queries were answered ({took:.2f} s); the peers' after their start and now"
    )
    report(
        run.b,
        "rmqlog namesrv VmRSS after start",
        start,
        "MiB",
        [(f"{LABELS[k]} VmRSS after start", s.rss_at_start) for k, s in peers.items()],
    )
    report(
        run.b,
        f"rmqlog namesrv VmRSS after {a.namesrv_brokers} registrations of {a.namesrv_topics:,} topics "
        f"and {a.namesrv_routes:,} route queries",
        after,
        "MiB",
        [(f"{LABELS[k]} VmRSS now (after this run's load)", vm_rss_mib(s.pid)) for k, s in peers.items()],
    )
