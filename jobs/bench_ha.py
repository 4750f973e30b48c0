"""Benchmark of master/slave replication (issue 30's targets), each figure beside its peer
measured in the same run.

    python jobs/bench_ha.py [--root DIR] [--rounds R] [--json] [--parts lag,sync]
                            [--rate MSGS_PER_S] [--lag-batches N] [--batch B] [--seconds S] [--in-flight K]

Every round starts a name server, a slave (``brokerRole=SLAVE``, ``haMasterAddress`` set) and
a master as ``rmqlog`` processes on 127.0.0.1, each store under ``ROOT``; load comes from
this process through ``rmqnet.client`` (SEND_BATCH_MESSAGE, 100-byte bodies).

- ``lag`` (ASYNC_MASTER): batches of ``--batch`` messages sent at ``--rate`` messages per
  second; for each batch, the time from its SEND_OK to the moment the slave answers a
  GET_MAX_OFFSET (30) that covers it (replicated, appended, dispatched: readable there),
  p50 and p99; peer: the same batches' send round trip on the master.
- ``sync``: ``--in-flight`` threads sending batches for ``--seconds`` seconds to a
  SYNC_MASTER (each answer waits for the slave) and to an ASYNC_MASTER: msgs/s of each, and
  how many answers were not SEND_OK.

Medians over ``--rounds``. Figures are wall-clock on this machine; nothing here is a test
threshold.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness import Bench  # noqa: E402

from rmqnet.client import Admin, Producer  # noqa: E402

SEGMENT = 64 << 20
TOPIC = "HA_BENCH"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(args: list[str], marker: str, log: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "rmqnet", *args], stdout=subprocess.PIPE,
                            stderr=log.open("w"), text=True, cwd=REPO)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if marker not in line:
        proc.kill()
        raise RuntimeError(f"{args[0]} did not start: {line!r}; see {log}")
    return proc, line.split()[-1]


@contextmanager
def cluster(root: Path, role: str) -> Iterator[tuple[str, str, str]]:
    """(name server, master, slave) addresses of a fresh trio; stopped on exit."""
    root.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[str]] = []
    try:
        ns, ns_addr = _start(["namesrv", "--listen", "127.0.0.1:0"], "listening on", root / "namesrv.log")
        procs.append(ns)
        port, ha_port = _free_port(), _free_port()
        (root / "master.conf").write_text(f"brokerName=bench\nbrokerId=0\nbrokerRole={role}\nhaListenPort={ha_port}\n"
                                          f"mappedFileSizeCommitLog={SEGMENT}\n")
        (root / "slave.conf").write_text(f"brokerName=bench\nbrokerId=1\nbrokerRole=SLAVE\n"
                                         f"haMasterAddress=127.0.0.1:{ha_port}\nmappedFileSizeCommitLog={SEGMENT}\n")
        slave, slave_addr = _start(["broker", str(root / "slave"), "-c", str(root / "slave.conf"), "--listen",
                                    "127.0.0.1:0", "--namesrv", ns_addr], "ready at", root / "slave.log")
        procs.append(slave)
        master, master_addr = _start(["broker", str(root / "master"), "-c", str(root / "master.conf"), "--listen",
                                      f"127.0.0.1:{port}", "--namesrv", ns_addr], "ready at", root / "master.log")
        procs.append(master)
        yield ns_addr, master_addr, slave_addr
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _ready(producer: Producer, admin: Admin, slave: str, batch: list[bytes]) -> None:
    """Send until a batch reaches the slave (the topic exists on both, the slave connected)."""
    for _ in range(10_000):
        try:
            res = producer.send_batch(TOPIC, batch, queue_id=0)
        except Exception:  # noqa: BLE001 - the master not registered yet (no route)
            time.sleep(0.05)
            continue
        want = res.queue_offset + len(batch)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if admin.max_offset(slave, TOPIC, 0) >= want:
                    return
            except Exception:  # noqa: BLE001 - the topic not on the slave yet
                pass
    raise RuntimeError("the slave never caught up")


def measure_lag(root: Path, rate: int, batches: int, batch: int) -> tuple[list[float], list[float]]:
    bodies = [b"x" * 100] * batch
    with cluster(root, "ASYNC_MASTER") as (ns, _master, slave):
        producer, admin = Producer("bench", ns), Admin(ns)
        try:
            _ready(producer, admin, slave, bodies)
            lags, rtts = [], []
            interval = batch / rate
            next_at = time.monotonic()
            for _ in range(batches):
                now = time.monotonic()
                if now < next_at:
                    time.sleep(next_at - now)  # the fixed send rate (a benchmark, not a test)
                next_at += interval
                t0 = time.perf_counter()
                res = producer.send_batch(TOPIC, bodies, queue_id=0)
                acked = time.perf_counter()
                rtts.append(acked - t0)
                want = res.queue_offset + batch
                while admin.max_offset(slave, TOPIC, 0) < want:
                    pass
                lags.append(time.perf_counter() - acked)
            return lags, rtts
        finally:
            producer.close()
            admin.close()


def measure_sync(root: Path, role: str, seconds: float, in_flight: int, batch: int) -> tuple[float, int]:
    bodies = [b"y" * 100] * batch
    with cluster(root, role) as (ns, _master, slave):
        producer, admin = Producer("bench", ns), Admin(ns)
        try:
            _ready(producer, admin, slave, bodies)
            counts = [0] * in_flight
            bad = [0] * in_flight
            stop = time.monotonic() + seconds

            def worker(i: int) -> None:
                while time.monotonic() < stop:
                    res = producer.send_batch(TOPIC, bodies, queue_id=i % 4)
                    if res.status == "SEND_OK":
                        counts[i] += batch
                    else:
                        bad[i] += 1

            t0 = time.perf_counter()
            threads = [threading.Thread(target=worker, args=(i,)) for i in range(in_flight)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return sum(counts) / (time.perf_counter() - t0), sum(bad)
        finally:
            producer.close()
            admin.close()


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


def main(argv: list[str] | None = None) -> int:
    bench = Bench("bench_ha", __doc__, rounds=1, rounds_help="rounds of each part (the figures are medians)")
    bench.add_argument("--parts", default="lag,sync", help="lag, sync (comma-separated)")
    bench.add_argument("--rate", type=int, default=20_000, help="lag: messages per second sent")
    bench.add_argument("--lag-batches", type=int, default=500, help="lag: batches sent")
    bench.add_argument("--batch", type=int, default=100, help="messages per batch")
    bench.add_argument("--seconds", type=float, default=5.0, help="sync: seconds of sending per role")
    bench.add_argument("--in-flight", type=int, default=8, help="sync: sending threads")
    a = bench.parse(argv)
    parts = a.parts.split(",")
    unknown = sorted(set(parts) - {"lag", "sync"})
    if unknown:
        bench.parser.error(f"unknown part {unknown[0]!r} (lag, sync)")
    with bench.run(parsed=True) as root:
        results: dict[str, list[float]] = {}
        for r in range(a.rounds):
            if "lag" in parts:
                lags, rtts = measure_lag(root / f"lag-{r}", a.rate, a.lag_batches, a.batch)
                for k, v in (("lag_p50", _pct(lags, 0.5)), ("lag_p99", _pct(lags, 0.99)),
                             ("send_p50", _pct(rtts, 0.5)), ("send_p99", _pct(rtts, 0.99))):
                    results.setdefault(k, []).append(v)
            if "sync" in parts:
                for role in ("SYNC_MASTER", "ASYNC_MASTER"):
                    rate, bad = measure_sync(root / f"{role}-{r}", role, a.seconds, a.in_flight, a.batch)
                    results.setdefault(role, []).append(rate)
                    results.setdefault(f"{role}_not_ok", []).append(bad)
        med = {k: statistics.median(v) for k, v in results.items()}
        if "lag" in parts:
            for q in ("p50", "p99"):
                print(f"replication lag {q} at {a.rate:,} msgs/s: {med[f'lag_{q}']:.2f} ms "
                      f"(peer: the send round trip {q}: {med[f'send_{q}']:.2f} ms)")
                bench.figure(f"replication lag {q}, {a.rate} msgs/s in batches of {a.batch}", med[f"lag_{q}"], "ms",
                             peer=f"send round trip {q}", peer_value=med[f"send_{q}"])
        if "sync" in parts:
            sync, async_ = med["SYNC_MASTER"], med["ASYNC_MASTER"]
            print(f"SYNC_MASTER sends: {sync:,.0f} msgs/s (peer: ASYNC_MASTER {async_:,.0f} msgs/s); answers not "
                  f"SEND_OK: {med['SYNC_MASTER_not_ok']:.0f} and {med['ASYNC_MASTER_not_ok']:.0f}")
            bench.figure("SYNC_MASTER sends", sync, "msgs/s", peer="ASYNC_MASTER sends", peer_value=async_)
    return 0


if __name__ == "__main__":
    sys.exit(main())
