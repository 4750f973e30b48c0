"""Benchmark of the rmqlog data source against peers measured in the same run (local[2]).

    python jobs/bench_spark.py [--messages 2000000] [--body 100] [--root PATH] [--samples 20] [--rounds 3] [--json]

- **Sink**: ``df.write.format("rmqlog")`` of N messages vs a Python Arrow writer that only
  counts rows (the floor cost of moving the rows to Python workers) and a parquet write.
- **Source**: ``spark.read.format("rmqlog")`` of the N messages vs a Python Arrow reader that
  only generates rows of the same schema and sizes, and a parquet read; each consumed by the
  ``noop`` sink so every row is materialized.
- **Latency**: a readStream with the default trigger runs; the driver appends one message at a
  time with plain Python ``put``; latency = time from the append to the message's arrival in
  ``foreachBatch`` on the driver. Median and p90 of ``--samples`` messages.

Ratios are peer time / rmqlog time (>= 1 means rmqlog is faster than the peer).

Memory: the sink is the only job here that fills the page cache (~0.5 GB for 2M messages).
On this VM, the first touch of guest memory that the host has taken back (freed pages are
reported to it) costs ~10x a normal page-cache write: the sink's appends took 0.2-0.5 s per
task on such pages against 0.12-0.2 s on recently freed ones. A long-running log recycles
its page cache (steady state), so the sink row is measured the way ``bench_store.py``
measures puts: right after a warm-up that writes and deletes a scratch file twice the
log's expected size (the count-only peer gets the same warm-up). The row below it is the
sink on a store deleted and recreated just before (pages partly first-touch), for reference.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402
from bench_store import warm_up  # noqa: E402  (jobs/ is this script's directory)
from harness import Bench  # noqa: E402
from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

import rmqlog  # noqa: E402
import spark_rmq  # noqa: E402
from spark_rmq.schema import SPARK_SCHEMA  # noqa: E402


class CountOnlyWriter(DataSourceArrowWriter):
    def write(self, iterator):  # type: ignore[no-untyped-def]
        n = 0
        for b in iterator:
            n += b.num_rows
        return WriterCommitMessage()


class GenerateOnlyReader(DataSourceReader):
    def __init__(self, total: int, parts: int, body: int) -> None:
        self.total, self.parts, self.body = total, parts, body

    def partitions(self):  # type: ignore[no-untyped-def]
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition):  # type: ignore[no-untyped-def]
        import numpy as np

        from rmqlog import MESSAGE_SCHEMA

        n = self.total // self.parts
        rows = min(65536, n)
        # one batch of the message schema with the same sizes (100-byte bodies, 32-char ids,
        # one key, one property), built vectorized once, then yielded until n rows are out:
        # the cost of generating rows is as close to zero as it gets, Spark's part remains
        body = np.frombuffer(b"x" * (self.body * rows), np.uint8)
        s32 = pa.array(np.full(rows, "bench-topic-00000000000000000000", object), pa.string())
        ones = np.arange(rows + 1, dtype=np.int32)
        cols = []
        for f in MESSAGE_SCHEMA:
            if f.name == "body":
                cols.append(pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(np.arange(0, self.body * rows + 1, self.body, dtype=np.int32)), pa.py_buffer(body)]))
            elif pa.types.is_string(f.type):
                cols.append(s32)
            elif f.name == "keys":
                cols.append(pa.ListArray.from_arrays(pa.array(ones), pa.array(np.full(rows, "k", object), pa.string())))
            elif f.name == "properties":
                kv = pa.array(np.full(rows, "KEYS", object), pa.string())
                cols.append(pa.MapArray.from_arrays(pa.array(ones), kv, kv))
            elif pa.types.is_timestamp(f.type):
                cols.append(pa.array(np.full(rows, 1_700_000_000_000_000, np.int64)).cast(f.type))
            else:
                cols.append(pa.array(np.arange(rows) % 1000).cast(f.type))
        batch = pa.RecordBatch.from_arrays(cols, schema=MESSAGE_SCHEMA)
        for start in range(0, n, rows):
            yield batch.slice(0, min(rows, n - start))


class PeerSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_peer"

    def schema(self):  # type: ignore[no-untyped-def]
        return SPARK_SCHEMA

    def reader(self, schema):  # type: ignore[no-untyped-def]
        return GenerateOnlyReader(int(self.options["total"]), int(self.options["parts"]), int(self.options["body"]))

    def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
        return CountOnlyWriter()


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def best_of(runs: int, fn) -> float:  # type: ignore[no-untyped-def]
    return min(timed(fn) for _ in range(runs))


def latency(spark, root: Path, samples: int) -> list[float]:  # type: ignore[no-untyped-def]
    """Seconds from a plain-Python append to its arrival in foreachBatch (default trigger)."""
    with rmqlog.MessageStore.open(root) as ms:
        ms.create_topic("latency", 1)
    seen: dict[str, float] = {}
    done = threading.Event()

    def on_batch(df, batch_id):  # type: ignore[no-untyped-def]
        now = time.time()
        for r in df.select("body").collect():
            seen[bytes(r.body).decode()] = now
        if len(seen) >= samples:
            done.set()

    q = (spark.readStream.format("rmqlog").option("path", str(root)).option("topics", "latency").load()
         .writeStream.foreachBatch(on_batch).start())
    sent: dict[str, float] = {}
    with rmqlog.MessageStore.open(root) as ms:
        while q.lastProgress is None:  # the query is up (its first, empty batch ran)
            time.sleep(0.1)
        for i in range(samples):
            time.sleep(0.7)  # spaced out, so each message meets an idle, polling query
            key = f"probe-{i}"
            sent[key] = time.time()
            ms.put("latency", key.encode())
        done.wait(timeout=60)
    q.stop()
    return [seen[k] - sent[k] for k in sent if k in seen]


def main() -> None:
    job = Bench("bench_spark", __doc__, rounds=3, rounds_help="best of this many runs per measurement",
                temp_in=REPO / "bench-data" if (REPO / "bench-data").is_dir() else None)
    job.add_argument("--messages", type=int, default=2_000_000)
    job.add_argument("--body", type=int, default=100)
    job.add_argument("--samples", type=int, default=20)
    with job.run() as work:
        _run(job, job.args, work)


def _run(job: Bench, args: argparse.Namespace, work: Path) -> None:
    n, body = args.messages, args.body
    spark = spark_rmq.local_session("rmq-bench-spark", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(PeerSource)
    parts = 2
    src = (spark.range(n, numPartitions=parts)
           .selectExpr("'bench' AS topic", f"CAST(lpad(CAST(id AS STRING), {body}, 'x') AS BINARY) AS body"))

    print(f"rmqlog benchmark: {n:,} messages, {body}-byte bodies, {spark.sparkContext.master}, work dir {work}")
    # warm up the JVM and the Python workers so that the first measured job does not pay for it
    src.limit(1000).write.format("bench_peer").mode("append").save()

    log_bytes = n * (body + 150)  # ~ the sink's records: header, body, topic, UNIQ_KEY
    count_times = []
    for _ in range(args.rounds):
        warm_up(work / "warm", 2 * log_bytes)
        count_times.append(timed(lambda: src.write.format("bench_peer").mode("append").save()))
    t_count = min(count_times)
    t_parquet_w = best_of(args.rounds, lambda: src.write.mode("overwrite").parquet(str(work / "parquet")))
    sink_times: dict[bool, list[float]] = {True: [], False: []}
    root = work / "store"
    for i in range(2 * args.rounds):  # each run into a new store (the last one is read below)
        shutil.rmtree(root, ignore_errors=True)  # the previous run's (frees its pages)
        root = work / f"store{i}"  # a new path: workers keep the stores they opened open
        with rmqlog.MessageStore.open(root) as ms:
            ms.create_topic("bench", 4)
        warm = i % 2 == 1  # alternate, so that both series see the same drift
        if warm:
            warm_up(work / "warm", 2 * log_bytes)
        sink_times[warm].append(timed(lambda root=root: src.write.format("rmqlog").option("path", str(root)).mode("append").save()))
    t_sink, t_sink_new = min(sink_times[True]), min(sink_times[False])

    gen = spark.read.format("bench_peer").option("total", n).option("parts", 4).option("body", body).load()
    t_gen = best_of(args.rounds, lambda: gen.write.format("noop").mode("overwrite").save())
    t_parquet_r = best_of(args.rounds, lambda: spark.read.parquet(str(work / "parquet")).write.format("noop").mode("overwrite").save())
    rmq = spark.read.format("rmqlog").option("path", str(root)).option("topics", "bench").load()
    t_source = best_of(args.rounds, lambda: rmq.write.format("noop").mode("overwrite").save())
    assert rmq.count() == n

    lat = sorted(latency(spark, work / "latency-store", args.samples))
    spark.stop()

    def rate(t: float) -> str:
        return f"{n / t / 1e6:.2f} M msgs/s ({t:.2f} s)"

    print("\n| | rmqlog | count-only / generate-only Python Arrow peer | parquet | rmqlog vs peer (target) |")
    print("|---|---|---|---|---|")
    print(f"| sink (`df.write`) | {rate(t_sink)} | {rate(t_count)} | {rate(t_parquet_w)} | {t_count / t_sink:.2f}x (>= 0.7x) |")
    print(f"| sink, store just recreated (no warm-up) | {rate(t_sink_new)} | | | {t_count / t_sink_new:.2f}x (reference) |")
    print(f"| source (`spark.read`) | {rate(t_source)} | {rate(t_gen)} | {rate(t_parquet_r)} | {t_gen / t_source:.2f}x (>= 0.6x) |")
    if lat:
        p90 = lat[min(len(lat) - 1, int(len(lat) * 0.9))]
        print(f"| end-to-end latency, default trigger | median {statistics.median(lat) * 1000:.0f} ms, "
              f"p90 {p90 * 1000:.0f} ms ({len(lat)} samples) | | | target: median <= 1000 ms |")
        job.figure("end-to-end latency, readStream, default trigger, median", statistics.median(lat) * 1000, "ms")
    job.figure("sink, df.write", n / t_sink, "msgs/s", peer="a count-only Python Arrow writer", peer_value=n / t_count)
    job.figure("sink, df.write, store just recreated (no warm-up)", n / t_sink_new, "msgs/s",
               peer="a count-only Python Arrow writer", peer_value=n / t_count)
    job.figure("source, spark.read", n / t_source, "msgs/s", peer="a generate-only Python Arrow reader", peer_value=n / t_gen)


if __name__ == "__main__":
    main()
