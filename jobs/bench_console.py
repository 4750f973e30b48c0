"""The console's server time per page (the target: every page under 300 ms with 10k
topics, 1k groups and 1M messages in the cluster).

A store is filled before its broker starts (``--topics`` topics of one queue each, a topic
``BENCH`` of 4 queues holding ``--messages`` messages with a key each, ``--groups`` consumer
groups with committed offsets, each on ``BENCH`` and on a topic of its own); a name server and
a broker (``rmqlog namesrv``, ``rmqlog broker``: processes of their own, stopped by PID) serve
it; the console runs in this process over the wire (``WireBackend``) and each page is asked
``--rounds`` times through aiohttp's client. The figure is the page's server time as the
console measures it (its ``Server-Timing`` header: from the request's arrival to the answer,
the broker's and name server's answers included), median and worst of the rounds. The peer of
each page is the name server's topic list (206) asked by our client directly: the one request
whose answer grows with the cluster.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
from aiohttp.test_utils import TestClient, TestServer
from harness import Bench  # jobs/ is the scripts' directory

import rmqlog
from rmqnet.client import Admin
from rmqnet.console import ConsoleApp, WireBackend, make_app

#: how long a server may take to start or register (a bound on a failure, not a wait)
START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fill(root: Path, port: int, topics: int, groups: int, messages: int) -> str:
    """The store the broker will serve on ``port`` (its offset msgIds name that address); the
    offset msgId of a message of ``BENCH``."""
    with rmqlog.MessageStore.open(root, rmqlog.StoreConfig(store_host=f"127.0.0.1:{port}")) as store:
        store.create_topic("BENCH", 4)
        for i in range(topics):
            store.put_topic(rmqlog.TopicConfig(f"TOPIC_{i:05d}", 1, 1), persist=False)
        store.persist_topics()
        first = ""
        step = 100_000
        for start in range(0, messages, step):
            n = min(step, messages - start)
            table = pa.table(
                {
                    "topic": pa.array(["BENCH"] * n),
                    "queueId": pa.array([i % 4 for i in range(n)], pa.int32()),
                    "body": pa.array([b"%d" % (start + i) for i in range(n)], pa.binary()),
                    "keys": pa.array([[f"k{start + i}"] for i in range(n)], pa.list_(pa.string())),
                }
            )
            res = store.put_batch(table)
            first = first or res.column("msgId")[0].as_py()
        store.dispatch()
        offsets = {}
        for g in range(groups):
            offsets[f"BENCH@GROUP_{g:04d}"] = {q: 0 for q in range(4)}
            offsets[f"TOPIC_{g % max(1, topics):05d}@GROUP_{g:04d}"] = {0: 0}
        store.merge_consumer_offsets(offsets)
    return first


def start(argv: list[str], ready: str, log: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqnet", *argv], stdout=subprocess.PIPE, stderr=log.open("w"), text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if ready not in line:
        proc.kill()
        raise SystemExit(f"{argv[0]} did not start: {line!r}; see {log}")
    return proc, line.split()[-1]


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def measure(console: ConsoleApp, pages: list[str], rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {p: [] for p in pages}
    async with TestClient(TestServer(make_app(console))) as client:
        for _ in range(rounds):
            for page in pages:
                res = await client.get(page)
                await res.read()
                if res.status != 200:
                    raise SystemExit(f"{page}: {res.status}")
                out[page].append(float(res.headers["Server-Timing"].split("dur=")[1]))
    return out


def main() -> None:
    bench = Bench("bench_console", __doc__, rounds=5, rounds_help="times each page is asked (median and worst)")
    bench.add_argument("--topics", type=int, default=10_000, help="topics besides BENCH (default 10000)")
    bench.add_argument("--groups", type=int, default=1000, help="consumer groups with offsets (default 1000)")
    bench.add_argument("--messages", type=int, default=1_000_000, help="messages in BENCH (default 1000000)")
    with bench.run() as work:
        a = bench.args
        root = work / "root"
        t0 = time.perf_counter()
        port = free_port()
        msg_id = fill(root, port, a.topics, a.groups, a.messages)
        print(
            f"store filled in {time.perf_counter() - t0:.1f} s: {a.topics} topics, {a.groups} groups, "
            f"{a.messages} messages"
        )
        ns, ns_addr = start(["namesrv", "--listen", "127.0.0.1:0"], "listening on", work / "namesrv.log")
        broker = None
        try:
            broker, _ = start(
                ["broker", str(root), "--listen", f"127.0.0.1:{port}", "--namesrv", ns_addr],
                "ready at",
                work / "broker.log",
            )
            with Admin(ns_addr) as admin:
                deadline = time.monotonic() + START_TIMEOUT_S
                while len(admin.topic_list()) < a.topics:
                    if time.monotonic() > deadline:
                        raise SystemExit("the broker's topics did not reach the name server")
                    time.sleep(0.2)
                lists = []
                for _ in range(a.rounds):
                    t = time.perf_counter()
                    admin.topic_list()
                    lists.append((time.perf_counter() - t) * 1000)
            peer = statistics.median(lists)
            pages = [
                "/cluster",
                "/topics",
                "/topics?q=TOPIC_0123",
                "/topics/BENCH",
                "/topics/TOPIC_00042",
                "/messages?topic=BENCH&queue=0&count=20",
                f"/messages?topic=BENCH&key=k{a.messages // 2}",
                f"/messages?topic=BENCH&msgId={msg_id}",
                "/messages?topic=BENCH&begin=0&count=20",
                "/groups",
                "/groups?q=GROUP_09",
                "/groups/GROUP_0001",
                "/dlq",
            ]
            backend = WireBackend(ns_addr, timeout_s=30.0)
            try:
                times = asyncio.run(measure(ConsoleApp(backend, sample_s=0), pages, a.rounds))
            finally:
                backend.close()
            print(
                f"{'page':<48} {'median ms':>10} {'worst ms':>10}   (the name server's topic list alone: {peer:.1f} ms)"
            )
            for page, ms in times.items():
                print(f"{page:<48} {statistics.median(ms):>10.1f} {max(ms):>10.1f}")
                bench.figure(
                    f"server time of {page}",
                    statistics.median(ms),
                    "ms",
                    peer="the topic list (206) from our client",
                    peer_value=peer,
                )
        finally:
            if broker is not None:
                stop(broker)
            stop(ns)


if __name__ == "__main__":
    main()
