"""Benchmark of the store past one host, each figure beside its peer
measured in the same run.

    python jobs/bench_cluster.py [--root DIR] [--rounds R] [--json] [--parts spark,lag,sync,failover]
                                 [--messages N] [--rate MSGS_PER_S] [--lag-seconds S] [--batch B]
                                 [--seconds S] [--in-flight K] [--backlog N]

Brokers and name servers are ``rmqlog`` processes on 127.0.0.1 started by the job, each store
under ``ROOT``; load comes from this process through ``rmqnet.client`` (100-byte bodies).

- ``spark``: ``local[2]``; N rows written by ``df.write.format("rmqlog")`` through a broker
  (``nameServer``, ASYNC_MASTER, no slave: the wire's cost, not replication's) beside the same
  rows written into a store's files (``path``); then read back by ``spark.read`` (into the
  ``noop`` sink) over the wire beside the files. Best of ``--rounds`` after a warm-up run. The
  broker's transfer limits are raised as docs/spark.md asks of brokers serving Spark.
- ``lag``: ASYNC_MASTER and its slave; ``--in-flight`` senders send batches of ``--batch``
  messages on a fixed schedule adding up to ``--rate`` messages per second, each to a queue of
  its own, for ``--lag-seconds``; beside each queue a long-polling pull on the **slave** (a
  held PULL_MESSAGE, answered as soon as records arrive there: replicated, appended and
  dispatched) records when each batch became readable on the slave. Lag = that moment minus
  the moment the master's SEND_OK reached the sender (0 when the slave had it first); p50 and
  p99, the rate actually sent, and the peer: the same sends' round trip.
- ``sync``: ``--in-flight`` threads sending batches for ``--seconds`` to a SYNC_MASTER (each
  answer waits for the slave) and to an ASYNC_MASTER: msgs/s of each, and answers that were not
  SEND_OK.
- ``failover``: a master (SYNC_MASTER) and its slave; ``--backlog`` messages sent; a consumer
  pulls them 32 at a time (PullConsumer, as an application does: pulls that fail are retried
  after 0.1 s); halfway the master is killed (SIGKILL). Figure: the time from the kill to the
  consumer's next message (from the slave), beside the gap between two pulls before the kill.

Figures are wall-clock on this machine; nothing here is a test threshold.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness import Bench  # noqa: E402

from rmqnet.client import Admin, Producer, PullConsumer  # noqa: E402
from rmqnet.client.loop import call  # noqa: E402
from rmqnet.remoting import PullMessageHeader, RemotingCommand, RequestCode, ResponseCode  # noqa: E402
from rmqnet.remoting.headers import PULL_SUBSCRIPTION, PULL_SUSPEND  # noqa: E402

SEGMENT = 64 << 20
TOPIC = "CLUSTER_BENCH"
PARTS = ("spark", "lag", "sync", "failover")
#: what docs/spark.md asks of brokers that serve Spark: pulls of many messages (the defaults,
#: RocketMQ's, answer 32 messages or 256 KiB a pull), well below the 16 MiB frame cap
SPARK_CONF = (
    "maxTransferCountOnMessageInMemory=65536\nmaxTransferBytesOnMessageInMemory=8388608\n"
    "maxTransferCountOnMessageInDisk=65536\nmaxTransferBytesOnMessageInDisk=8388608\n"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(args: list[str], marker: str, log: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqnet", *args], stdout=subprocess.PIPE, stderr=log.open("w"), text=True, cwd=REPO
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if marker not in line:
        proc.kill()
        raise RuntimeError(f"{args[0]} did not start: {line!r}; see {log}")
    return proc, line.split()[-1]


@dataclass
class Trio:
    """A name server, a master and (unless none) its slave: addresses and processes."""

    namesrv: str
    master: str
    slave: str | None
    procs: dict[str, subprocess.Popen[str]] = field(default_factory=dict)


@contextmanager
def cluster(root: Path, role: str, *, slave: bool = True, segment: int = SEGMENT, extra: str = "") -> Iterator[Trio]:
    """A fresh trio under ``root`` (the master in ``role``; ``extra``: more broker.conf lines
    for both); stopped on exit."""
    root.mkdir(parents=True, exist_ok=True)
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        procs["namesrv"], ns = _start(["namesrv", "--listen", "127.0.0.1:0"], "listening on", root / "namesrv.log")
        port, ha_port = _free_port(), _free_port()
        (root / "master.conf").write_text(
            f"brokerName=bench\nbrokerId=0\nbrokerRole={role}\nhaListenPort={ha_port}\n"
            f"mappedFileSizeCommitLog={segment}\n{extra}"
        )
        slave_addr = None
        if slave:
            (root / "slave.conf").write_text(
                f"brokerName=bench\nbrokerId=1\nbrokerRole=SLAVE\n"
                f"haMasterAddress=127.0.0.1:{ha_port}\nmappedFileSizeCommitLog={segment}\n{extra}"
            )
            procs["slave"], slave_addr = _start(
                [
                    "broker",
                    str(root / "slave"),
                    "-c",
                    str(root / "slave.conf"),
                    "--listen",
                    "127.0.0.1:0",
                    "--namesrv",
                    ns,
                ],
                "ready at",
                root / "slave.log",
            )
        procs["master"], master = _start(
            [
                "broker",
                str(root / "master"),
                "-c",
                str(root / "master.conf"),
                "--listen",
                f"127.0.0.1:{port}",
                "--namesrv",
                ns,
            ],
            "ready at",
            root / "master.log",
        )
        yield Trio(ns, master, slave_addr, procs)
    finally:
        for p in reversed(procs.values()):
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _ready(producer: Producer, admin: Admin, trio: Trio, batch: list[bytes], queues: int = 4) -> None:
    """Create the topic on the master with ``queues`` queues and send a batch to each until
    it is readable on the slave (the topic routed, the slave connected, every queue known
    there)."""
    admin.create_topic(trio.master, TOPIC, queues)
    deadline = time.monotonic() + 60
    for q in range(queues):
        while True:
            if time.monotonic() > deadline:
                raise RuntimeError("the topic was never routed, or the slave never caught up")
            try:
                res = producer.send_batch(TOPIC, batch, queue_id=q)
            except Exception:  # noqa: BLE001 - the topic not routed yet
                time.sleep(0.05)
                continue
            if trio.slave is None or _on_slave(admin, trio.slave, q, res.queue_offset + len(batch)):
                break


def _on_slave(admin: Admin, slave: str, queue: int, want: int) -> bool:
    until = time.monotonic() + 10
    while time.monotonic() < until:
        try:
            if admin.max_offset(slave, TOPIC, queue) >= want:
                return True
        except Exception:  # noqa: BLE001 - the topic not on the slave yet
            pass
        time.sleep(0.01)
    return False


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


# ----------------------------------------------------------------------------------- lag
async def _held_pull(client: PullConsumer, addr: str, queue: int, offset: int, suspend_ms: int) -> int:
    """A long-polling PULL_MESSAGE of one message on ``addr`` itself (the slave); the queue's
    max offset there when answered."""
    header = PullMessageHeader(
        consumer_group="bench-lag",
        topic=TOPIC,
        queue_id=queue,
        queue_offset=offset,
        max_msg_nums=1,
        sys_flag=PULL_SUBSCRIPTION | PULL_SUSPEND,
        commit_offset=0,
        suspend_timeout_millis=suspend_ms,
        subscription="*",
        sub_version=0,
        expression_type="TAG",
    )
    cmd = RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=header.to_ext())
    res = await client.invoke(
        addr,
        cmd,
        timeout_s=suspend_ms / 1000 + 5,
        ok=(
            ResponseCode.SUCCESS,
            ResponseCode.PULL_NOT_FOUND,
            ResponseCode.PULL_RETRY_IMMEDIATELY,
            ResponseCode.PULL_OFFSET_MOVED,
        ),
    )
    return int(res.ext_fields.get("maxOffset", offset))


def measure_lag(root: Path, rate: int, seconds: float, batch: int, senders: int) -> dict[str, float]:
    """Senders and watchers are coroutines on the client's one event loop, so each moment is
    taken where its answer arrives (no thread hop between the answer and its timestamp)."""
    bodies = [b"x" * 100] * batch
    with cluster(root, "ASYNC_MASTER") as trio:
        producer, admin, puller = (
            Producer("bench", trio.namesrv),
            Admin(trio.namesrv),
            PullConsumer("bench", trio.namesrv),
        )
        try:
            _ready(producer, admin, trio, bodies, queues=senders)
            slave = trio.slave
            assert slave is not None
            starts = [admin.max_offset(slave, TOPIC, q) for q in range(senders)]
            acked: list[list[tuple[int, float, float]]] = [[] for _ in range(senders)]  # (end, sent, acked)
            seen: list[list[tuple[int, float]]] = [[] for _ in range(senders)]  # (max offset on the slave, when)
            interval = batch * senders / rate

            async def send(q: int, t0: float) -> None:
                next_at = t0 + q * interval / senders  # staggered
                while next_at < t0 + seconds:
                    await asyncio.sleep(max(0.0, next_at - time.monotonic()))  # the fixed schedule
                    next_at += interval
                    sent_at = time.monotonic()
                    res = await producer.asend_batch(TOPIC, bodies, queue_id=q)
                    acked[q].append((res.queue_offset + batch, sent_at, time.monotonic()))

            async def watch(q: int, stop: asyncio.Event) -> None:
                offset = starts[q]
                while not stop.is_set():
                    top = await _held_pull(puller, slave, q, offset, 500)
                    if top > offset:
                        seen[q].append((top, time.monotonic()))
                        offset = top

            async def run() -> float:
                stop = asyncio.Event()
                watchers = [asyncio.create_task(watch(q, stop)) for q in range(senders)]
                t0 = time.monotonic()
                await asyncio.gather(*(send(q, t0) for q in range(senders)))
                span = max(a[-1][2] for a in acked if a) - t0
                await asyncio.sleep(1.0)  # the last batches reach the slave
                stop.set()
                await asyncio.gather(*watchers)
                return span

            span = call(run())
            lags, rtts, missing = [], [], 0
            for q in range(senders):
                for end, sent_at, ack_at in acked[q]:
                    rtts.append(ack_at - sent_at)
                    when = next((w for top, w in seen[q] if top >= end), None)
                    if when is None:
                        missing += 1
                    else:
                        lags.append(max(0.0, when - ack_at))
            sent = sum(len(a) for a in acked) * batch
            return {
                "lag_p50": _pct(lags, 0.5),
                "lag_p99": _pct(lags, 0.99),
                "send_p50": _pct(rtts, 0.5),
                "send_p99": _pct(rtts, 0.99),
                "rate": sent / span,
                "missing": missing,
            }
        finally:
            producer.close()
            admin.close()
            puller.close()


# ---------------------------------------------------------------------------------- sync
def measure_sync(root: Path, role: str, seconds: float, in_flight: int, batch: int) -> tuple[float, int]:
    bodies = [b"y" * 100] * batch
    with cluster(root, role) as trio:
        producer, admin = Producer("bench", trio.namesrv), Admin(trio.namesrv)
        try:
            _ready(producer, admin, trio, bodies)
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


# ------------------------------------------------------------------------------ failover
def measure_failover(root: Path, backlog: int, timeout_s: float = 30.0) -> tuple[float, float]:
    """(seconds from the kill to the next message received, median gap between pulls before)."""
    with cluster(root, "SYNC_MASTER") as trio:
        producer, admin = Producer("bench", trio.namesrv), Admin(trio.namesrv)
        consumer = PullConsumer("bench-failover", trio.namesrv)
        try:
            chunk = [b"f" * 100] * 100
            _ready(producer, admin, trio, chunk, queues=1)
            for _ in range(max(1, backlog // len(chunk))):
                producer.send_batch(TOPIC, chunk, queue_id=0)
            top = admin.max_offset(trio.master, TOPIC, 0)
            deadline = time.monotonic() + 30
            while admin.max_offset(trio.slave or "", TOPIC, 0) < top:  # all of it replicated
                if time.monotonic() > deadline:
                    raise RuntimeError("the slave never caught up")
                time.sleep(0.01)
            offset, received, killed_at = 0, [], None
            give_up = None
            while offset < top:
                try:
                    res = consumer.pull(TOPIC, 0, offset, 32)
                except Exception:  # noqa: BLE001 - as an application: retried a moment later
                    if give_up is not None and time.monotonic() > give_up:
                        raise RuntimeError(f"no message from the slave within {timeout_s} s of the kill") from None
                    time.sleep(0.1)
                    continue
                if res.status == "FOUND":
                    received.append(time.monotonic())
                    offset = res.next_begin_offset
                    if killed_at is not None:
                        return received[-1] - killed_at, statistics.median(
                            b - a for a, b in zip(received[:-2], received[1:-1], strict=True)
                        )
                if killed_at is None and offset >= top // 2:
                    trio.procs["master"].send_signal(signal.SIGKILL)
                    trio.procs["master"].wait()
                    killed_at = time.monotonic()
                    give_up = killed_at + timeout_s
            raise RuntimeError("the backlog ended before the kill")
        finally:
            producer.close()
            admin.close()
            consumer.close()


# --------------------------------------------------------------------------------- spark
def measure_spark(root: Path, n: int, rounds: int) -> dict[str, float]:
    import rmqlog
    import spark_rmq

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = spark_rmq.local_session("rmq-bench-cluster", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    src = spark.range(n, numPartitions=2).selectExpr(
        f"'{TOPIC}' AS topic", "CAST(lpad(CAST(id AS STRING), 100, 'x') AS BINARY) AS body"
    )
    out: dict[str, list[float]] = {"wire_sink": [], "file_sink": [], "wire_source": [], "file_source": []}
    try:
        for r in range(rounds + 1):  # the first round warms the JVM, the workers and the page cache
            with cluster(root / f"spark-{r}", "ASYNC_MASTER", slave=False, segment=1 << 30, extra=SPARK_CONF) as trio:
                with Admin(trio.namesrv) as admin:
                    admin.create_topic(trio.master, TOPIC, 4)
                    deadline = time.monotonic() + 30
                    while True:  # routed once the broker registered the topic
                        try:
                            admin.route(TOPIC)
                            break
                        except Exception:  # noqa: BLE001
                            if time.monotonic() > deadline:
                                raise
                            time.sleep(0.05)
                files = root / f"files-{r}"
                with rmqlog.MessageStore.open(files) as ms:
                    ms.create_topic(TOPIC, 4)
                t = time.perf_counter()
                src.write.format("rmqlog").option("nameServer", trio.namesrv).mode("append").save()
                out["wire_sink"].append(time.perf_counter() - t)
                t = time.perf_counter()
                src.write.format("rmqlog").option("path", str(files)).mode("append").save()
                out["file_sink"].append(time.perf_counter() - t)
                wire = spark.read.format("rmqlog").option("nameServer", trio.namesrv).option("topics", TOPIC).load()
                file = spark.read.format("rmqlog").option("path", str(files)).option("topics", TOPIC).load()
                t = time.perf_counter()
                wire.write.format("noop").mode("overwrite").save()
                out["wire_source"].append(time.perf_counter() - t)
                t = time.perf_counter()
                file.write.format("noop").mode("overwrite").save()
                out["file_source"].append(time.perf_counter() - t)
                if r == 0:
                    assert wire.count() == n and file.count() == n, "a run lost or doubled rows"
                    for k in out:
                        out[k].clear()
            shutil.rmtree(root / f"spark-{r}", ignore_errors=True)
            shutil.rmtree(root / f"files-{r}", ignore_errors=True)
    finally:
        spark.stop()
    return {k: n / min(v) for k, v in out.items()}


# ---------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    bench = Bench("bench_cluster", __doc__, rounds=2, rounds_help="rounds of each part (medians; spark: best of)")
    bench.add_argument("--parts", default=",".join(PARTS), help="spark, lag, sync, failover (comma-separated)")
    bench.add_argument("--messages", type=int, default=1_000_000, help="spark: rows written and read")
    bench.add_argument("--rate", type=int, default=100_000, help="lag: messages per second sent")
    bench.add_argument("--lag-seconds", type=float, default=5.0, help="lag: seconds of sending")
    bench.add_argument("--batch", type=int, default=2000, help="lag and sync: messages per batch")
    bench.add_argument("--seconds", type=float, default=5.0, help="sync: seconds of sending per role")
    bench.add_argument("--in-flight", type=int, default=4, help="lag and sync: sending threads")
    bench.add_argument("--backlog", type=int, default=20_000, help="failover: messages to consume")
    a = bench.parse(argv)
    parts = a.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        bench.parser.error(f"unknown part {unknown[0]!r} ({', '.join(PARTS)})")
    with bench.run(parsed=True) as root:
        if "spark" in parts:
            s = measure_spark(root, a.messages, a.rounds)
            for what, peer in (
                ("sink", "the sink writing the files directly"),
                ("source", "the source reading the files directly"),
            ):
                wire, file = s[f"wire_{what}"], s[f"file_{what}"]
                print(
                    f"Spark {what} over the wire: {wire:,.0f} rows/s (peer: {peer}: {file:,.0f} rows/s): "
                    f"{wire / file:.2f}x"
                )
                bench.figure(
                    f"Spark {what} over the wire, {a.messages} rows", wire, "rows/s", peer=peer, peer_value=file
                )
        results: dict[str, list[float]] = {}
        for r in range(a.rounds):
            if "lag" in parts:
                for k, v in measure_lag(root / f"lag-{r}", a.rate, a.lag_seconds, a.batch, a.in_flight).items():
                    results.setdefault(k, []).append(v)
            if "sync" in parts:
                for role in ("SYNC_MASTER", "ASYNC_MASTER"):
                    rate, bad = measure_sync(root / f"{role}-{r}", role, a.seconds, a.in_flight, a.batch)
                    results.setdefault(role, []).append(rate)
                    results.setdefault(f"{role}_not_ok", []).append(bad)
            if "failover" in parts:
                took, gap = measure_failover(root / f"failover-{r}", a.backlog)
                results.setdefault("failover", []).append(took)
                results.setdefault("pull_gap", []).append(gap)
        med = {k: statistics.median(v) for k, v in results.items()}
        if "lag" in parts:
            print(
                f"replication lag, {med['rate']:,.0f} msgs/s sent (asked: {a.rate:,}) in batches of {a.batch}; "
                f"batches never seen on the slave: {med['missing']:.0f}"
            )
            for q in ("p50", "p99"):
                print(f"  {q}: {med[f'lag_{q}']:.2f} ms (peer: the send round trip {q}: {med[f'send_{q}']:.2f} ms)")
                bench.figure(
                    f"replication lag {q}, {a.rate} msgs/s asked ({med['rate']:.0f} sent) in batches of {a.batch}",
                    med[f"lag_{q}"],
                    "ms",
                    peer=f"send round trip {q}",
                    peer_value=med[f"send_{q}"],
                )
        if "sync" in parts:
            sync, async_ = med["SYNC_MASTER"], med["ASYNC_MASTER"]
            print(
                f"SYNC_MASTER sends: {sync:,.0f} msgs/s (peer: ASYNC_MASTER {async_:,.0f} msgs/s): "
                f"{sync / async_:.2f}x; answers not SEND_OK: {med['SYNC_MASTER_not_ok']:.0f} and "
                f"{med['ASYNC_MASTER_not_ok']:.0f}"
            )
            bench.figure("SYNC_MASTER sends", sync, "msgs/s", peer="ASYNC_MASTER sends", peer_value=async_)
        if "failover" in parts:
            print(
                f"master killed: the consumer's next message (from the slave) {med['failover']:.2f} s later "
                f"(peer: the gap between two pulls before the kill: {med['pull_gap'] * 1000:.1f} ms)"
            )
            bench.figure(
                "master killed: next message from the slave",
                med["failover"],
                "s",
                peer="gap between two pulls before the kill",
                peer_value=med["pull_gap"],
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
