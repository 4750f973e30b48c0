"""Benchmark of segment preallocation and warm-up: the Spark sink into a NEW store.

    python jobs/bench_prealloc.py [--messages 2000000] [--body 100] [--rounds 3] [--root PATH] [--json]

``df.write.format("rmqlog")`` of ``--messages`` rows of ``--body`` bytes into a store created
just before (no page-cache warm-up of any kind by the benchmark), beside the count-only
Python Arrow writer of ``jobs/bench_spark.py`` (the floor: moving the rows to the Python
workers) measured in the same Spark session; the ratio is count-only time / sink time
(target >= 0.8x). Each run is one Spark session (local[2]) in a process of its own, with
``warm_mapped_file_enable`` on or off for every process of it (driver and Python workers:
the setting reaches the workers through a ``sitecustomize`` that this script puts first on
their ``PYTHONPATH``, since Spark's workers open stores with the default config); runs
alternate on/off so that both see the same drift. Medians of the runs are printed, and the
machine's idle CPU during the sink (what a background warm-up can use).

Memory: on this VM the first touch of guest memory the host has taken back costs ~10x a
normal page-cache write (see ``jobs/bench_spark.py``); the store's warm-up is what moves that
cost off the writer. Figures are wall-clock on this machine; nothing here is a test threshold.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import Bench  # jobs/ is this script's directory

REPO = Path(__file__).resolve().parents[1]

SITECUSTOMIZE = """
import os
_warm = os.environ.get("RMQLOG_BENCH_WARM")
if _warm is not None:  # the benchmark's switch, for every Python process of the run
    import dataclasses
    import rmqlog.config as _c
    _names = [f.name for f in dataclasses.fields(_c.StoreConfig)]
    _d = list(_c.StoreConfig.__init__.__defaults__)
    _d[_names.index("warm_mapped_file_enable") - (len(_names) - len(_d))] = _warm == "1"
    _c.StoreConfig.__init__.__defaults__ = tuple(_d)
"""


def _cpu() -> tuple[int, int]:
    """(idle, total) jiffies of all CPUs so far."""
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    return vals[3] + vals[4], sum(vals)


def child(messages: int, body: int, workdir: Path) -> dict[str, float]:
    sys.path.insert(0, str(REPO / "jobs"))
    from bench_spark import PeerSource  # the count-only writer

    import rmqlog
    import spark_rmq

    spark = spark_rmq.local_session("rmq-bench-prealloc", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(PeerSource)
    src = spark.range(messages, numPartitions=2).selectExpr(
        "'bench' AS topic", f"CAST(lpad(CAST(id AS STRING), {body}, 'x') AS BINARY) AS body"
    )
    # the JVM and the Python workers started, and the data source code imported, first
    src.limit(1000).write.format("bench_peer").mode("append").save()
    scratch = workdir / "scratch"
    with rmqlog.MessageStore.open(scratch) as ms:
        ms.create_topic("bench", 4)
    src.limit(1000).write.format("rmqlog").option("path", str(scratch)).mode("append").save()

    def timed(fn) -> tuple[float, float]:  # type: ignore[no-untyped-def]
        i0, t0 = _cpu()
        w0 = time.perf_counter()
        fn()
        w = time.perf_counter() - w0
        i1, t1 = _cpu()
        return w, (i1 - i0) / max(1, t1 - t0)

    t_count, idle_count = timed(lambda: src.write.format("bench_peer").mode("append").save())
    root = workdir / "store"
    with rmqlog.MessageStore.open(root) as ms:  # a new store, as bench_spark.py makes it
        ms.create_topic("bench", 4)
        warm = ms.config.warm_mapped_file_enable
    t_sink, idle_sink = timed(lambda: src.write.format("rmqlog").option("path", str(root)).mode("append").save())
    with rmqlog.MessageStore.open(root) as ms:
        n = sum(ms.max_offset("bench", q) for q in range(4))
    assert n == messages, n
    spark.stop()
    return {
        "warm": warm,
        "count": t_count,
        "sink": t_sink,
        "ratio": t_count / t_sink,
        "idle_count": idle_count,
        "idle_sink": idle_sink,
    }


def store_only(messages: int, body: int, workdir: Path, runs: int, rest_s: float) -> None:
    """``put_batches`` of the rows in tables of 65,536 into a new store, warm-up on and off
    alternating, each after ``rest_s`` seconds of rest (pages freed by the previous run go
    back to the host meanwhile: the writer meets cold pages, as a new store's first writer
    does): the append's time, encoding included, and the part under the append lock."""
    import numpy as np
    import pyarrow as pa

    import rmqlog

    rows = 65536
    table = pa.table(
        {
            "topic": ["bench"] * rows,
            "body": pa.array([b"x" * body] * rows, pa.binary()),
            "queueId": pa.array(np.arange(rows) % 4, pa.int32()),
        }
    )
    times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for i in range(2 * runs):
        warm = i % 2 == 1
        root = workdir / f"put{i}"
        cfg = rmqlog.StoreConfig(warm_mapped_file_enable=warm)
        with rmqlog.MessageStore.open(root, cfg) as ms:
            ms.create_topic("bench", 4)
            time.sleep(rest_s)
            lock = ms.parts.append_lock
            real = lock.held
            held: list[float] = []

            def timed_held(shared: bool = False, real=real, held=held):  # type: ignore[no-untyped-def]
                import contextlib

                @contextlib.contextmanager
                def cm():  # type: ignore[no-untyped-def]
                    with real(shared):
                        t0 = time.perf_counter()
                        try:
                            yield
                        finally:
                            held.append(time.perf_counter() - t0)

                return cm()

            lock.held = timed_held  # type: ignore[method-assign]
            t0 = time.perf_counter()
            ms.put_batches(table for _ in range(messages // rows))
            total = time.perf_counter() - t0
            lock.held = real  # type: ignore[method-assign]
            times[warm].append((total, sum(held)))
            print(
                f"put_batches run {i}: warm-up {'on ' if warm else 'off'}  {total:.2f} s, of which {sum(held):.2f} s "
                f"under the append lock (writing); warmed {ms.preparer.warmed_bytes >> 20} MB",
                flush=True,
            )
        shutil.rmtree(root, ignore_errors=True)
    for warm in (False, True):
        print(
            f"warm-up {'on ' if warm else 'off'}: put_batches median "
            f"{statistics.median(t for t, _ in times[warm]):.2f} s, "
            f"writing median {statistics.median(h for _, h in times[warm]):.2f} s"
        )


def main() -> None:
    job = Bench("bench_prealloc", __doc__, rounds=3, rounds_help="runs per setting (alternating; medians printed)")
    ap = job
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--body", type=int, default=100)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--store-only", action="store_true", help="only put_batches into new stores, after a rest each")
    ap.add_argument("--rest", type=float, default=20.0, help="--store-only: seconds of rest before each run")
    args = job.parse()
    if args.child:  # one run, in a process of its own: its figures as one JSON object
        print(json.dumps(child(args.messages, args.body, args.root)))
        return
    with job.run(parsed=True) as work:
        if args.store_only:
            store_only(args.messages, args.body, work, args.rounds, args.rest)
        else:
            _runs(job, work)


def _runs(job: Bench, work: Path) -> None:
    """Sink runs, warm-up off and on alternating, each Spark session in a child process."""
    args = job.args
    site = work / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    results: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for i in range(2 * args.rounds):
        warm = i % 2 == 1
        run_dir = work / f"run{i}"
        env = dict(
            os.environ,
            RMQLOG_BENCH_WARM="1" if warm else "0",
            PYTHONPATH=os.pathsep.join(
                [str(site), str(REPO), str(REPO / "jobs")]
                + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
            ),
        )
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                "--messages",
                str(args.messages),
                "--body",
                str(args.body),
                "--root",
                str(run_dir),
            ],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        assert r["warm"] is warm, r
        results[warm].append(r)
        print(
            f"run {i}: warm-up {'on ' if warm else 'off'}  count-only {r['count']:.2f} s  sink {r['sink']:.2f} s  "
            f"-> {r['ratio']:.2f}x  (idle CPU: {r['idle_count']:.0%} during count-only, {r['idle_sink']:.0%} during "
            "the sink)",
            flush=True,
        )
        shutil.rmtree(run_dir, ignore_errors=True)
    n = args.messages
    print(f"\nsink into a new store, {n:,} rows of {args.body} B, local[2], medians of {args.rounds} runs each:")
    print("| warm_mapped_file_enable | count-only peer | rmqlog sink | sink vs peer (target >= 0.8x) |")
    print("|---|---|---|---|")
    for warm in (False, True):
        rs = results[warm]
        tc, ts = statistics.median(r["count"] for r in rs), statistics.median(r["sink"] for r in rs)
        print(
            f"| {'on' if warm else 'off'} | {n / tc / 1e6:.2f} M rows/s ({tc:.2f} s) | {n / ts / 1e6:.2f} M rows/s "
            f"({ts:.2f} s) | {statistics.median(r['ratio'] for r in rs):.2f}x |"
        )
        job.figure(
            f"df.write into a new store, warm-up {'on' if warm else 'off'}",
            n / ts,
            "rows/s",
            peer="the count-only Python Arrow writer",
            peer_value=n / tc,
        )


if __name__ == "__main__":
    main()
