"""The Spark path against what a data engineer would pick instead: Spark's parquet writer and
reader, each figure beside its peer measured in the same run (``local[2]``).

    python jobs/bench_spark.py [--messages 2000000] [--body 100] [--rounds 2] [--stream-seconds 8] [--root PATH]
    [--json]

The input is made once and cached: ``--messages`` rows of ``--body`` random bytes (parquet would
compress a repeated body to nothing) in two partitions. Every measurement runs once to warm up,
then ``--rounds`` times; the best run counts.

- **Sink**: ``df.write.format("rmqlog")`` into a new local store, against Spark's parquet writer
  and a Python Arrow writer that only counts rows (the Python data source API's own ceiling).
  Each sink run writes a new store, after a warm-up of the page cache (see below).
- **Source**, each read consumed by the ``noop`` sink so that every row is materialized:
  ``spark.read.format("rmqlog")`` of the whole message schema against a Python reader that
  re-yields one batch of the store's own messages (the API's ceiling for that schema), and the ``columns``
  option (``body,keys,queueOffset``) against Spark's parquet reader of those columns from a
  parquet file of the same messages (and the ceiling reader with those columns).
- **Streaming** (``jobs/spark_stream_peers.py``): a ``readStream`` -> ``writeStream`` pipeline
  between two topics of one store. Its sustained rate: the time its micro-batches take to copy
  a backlog of ``--messages`` rows (after a warm-up query), against the batch sink's rate and
  the API's ceiling for a copy (a reader re-yielding a batch into a counting writer). Its
  latency: a producer appends at half that rate for ``--stream-seconds``; each copy carries
  its original's store time, so latency = the copy's store time minus the original's (the
  copy is readable once stored: the sink task dispatches at once); p50 and p99, beside the
  API's floor at the same rate (a Python reader's rows into a Python writer, no store); the
  same at a trickle of 2,000 msgs/s.
- **Memory**: the peak anonymous memory (``RssAnon``) of a process appending 1 M and 4 M rows as a sink task does
  (``put_stream``, 64 MiB buffer): bounded by the buffer whatever the data size; beside it
  ``put_batches``, which holds a task's whole input until the append.

Page cache: on this VM, the first touch of guest memory the host has taken back costs ~10x a
normal page-cache write, so a sink run is measured right after a warm-up that writes and deletes
a scratch file twice the log's expected size (``bench_store.warm_up``), as a long-running log
recycles its page cache.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
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
from spark_stream_peers import PeerStreams, copy_rate, latencies, percentile, random_bodies, reyield  # noqa: E402

import rmqlog  # noqa: E402
import spark_rmq  # noqa: E402
from spark_rmq.schema import SPARK_SCHEMA, spark_schema  # noqa: E402

#: the columns of the column-selection read
COLUMNS = "body,keys,queueOffset"


class CountOnlyWriter(DataSourceArrowWriter):
    def write(self, iterator):  # type: ignore[no-untyped-def]
        n = 0
        for b in iterator:
            n += b.num_rows
        return WriterCommitMessage()


class PrebuiltReader(DataSourceReader):
    """Re-yields one batch of the store's own messages (the message schema, or ``columns``),
    read once per task: what is left is Spark's part, the Python data source API's ceiling
    for that schema and those values."""

    def __init__(self, path: str, total: int, parts: int, columns: list[str] | None) -> None:
        self.path, self.total, self.parts, self.columns = path, total, parts, columns

    def partitions(self):  # type: ignore[no-untyped-def]
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition):  # type: ignore[no-untyped-def]
        return reyield(self.path, "bench", self.columns, self.total // self.parts)


class PeerSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_peer"

    def schema(self):  # type: ignore[no-untyped-def]
        columns = self.options.get("columns")
        return spark_schema(columns.split(",")) if columns else SPARK_SCHEMA

    def reader(self, schema):  # type: ignore[no-untyped-def]
        columns = self.options.get("columns")
        return PrebuiltReader(
            self.options["path"],
            int(self.options["total"]),
            int(self.options["parts"]),
            columns.split(",") if columns else None,
        )

    def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
        return CountOnlyWriter()


def random_input(spark, n: int, body: int, parts: int = 2):  # type: ignore[no-untyped-def]
    """``n`` rows (topic ``bench``, ``body`` random bytes) in ``parts`` partitions, cached."""

    def gen(batches):  # type: ignore[no-untyped-def]
        import numpy as np
        import pyarrow as pa

        rng = np.random.default_rng()
        for b in batches:
            m = b.num_rows
            data = rng.integers(0, 256, m * body, dtype=np.uint8)
            offsets = np.arange(0, m * body + 1, body, dtype=np.int32)
            bodies = pa.Array.from_buffers(pa.binary(), m, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
            yield pa.RecordBatch.from_arrays(
                [pa.array(np.full(m, "bench", object), pa.string()), bodies], ["topic", "body"]
            )

    df = spark.range(n, numPartitions=parts).mapInArrow(gen, "topic string, body binary").cache()
    assert df.count() == n
    return df


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def best_of(rounds: int, fn, before=None) -> float:  # type: ignore[no-untyped-def]
    """One warm-up run, then the best of ``rounds`` (``before`` runs ahead of each, untimed)."""
    times = []
    for _ in range(rounds + 1):
        if before is not None:
            before()
        times.append(timed(fn))
    return min(times[1:])


def memory_child(kind: str, n: int, root: str) -> None:
    """In a child process: append ``n`` rows of 100 random bytes as a sink task receives them
    (10,000-row tables) with ``put_stream`` (64 MiB buffer) or ``put_batches``; print the peak of
    its anonymous memory (RssAnon, sampled every 10 ms)."""
    import threading

    peak = [0]
    done = threading.Event()

    def watch() -> None:  # anonymous memory only: the commitlog's mapped pages are page cache
        while not done.wait(0.01):
            with open("/proc/self/status") as f:
                anon = next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))
            peak[0] = max(peak[0], anon * 1024)

    threading.Thread(target=watch, daemon=True).start()
    rng = np.random.default_rng()

    def tables():  # type: ignore[no-untyped-def]
        for _ in range(n // 10_000):
            yield pa.table(
                {
                    "topic": pa.array(np.full(10_000, "bench", object), pa.string()),
                    "body": random_bodies(rng, 10_000, 100),
                }
            )

    with rmqlog.MessageStore.open(root) as ms:
        ms.create_topic("bench", 4)
        if kind == "put_stream":
            ms.put_stream(tables(), writer="w", sequence=1, dispatch=True, buffer_bytes=64 << 20)
        else:
            ms.put_batches(tables(), writer="w", sequence=1, dispatch=True)
    done.set()
    print(peak[0])


def memory(work: Path, job: Bench) -> None:
    """Peak RSS of a process appending 1 M and 4 M rows with ``put_stream`` (the sink's path)
    and with ``put_batches`` (the whole input held until the append)."""
    import subprocess

    peaks: dict[tuple[str, int], int] = {}
    for kind in ("put_stream", "put_batches"):
        for n in (1_000_000, 4_000_000):
            root = work / f"mem-{kind}-{n}"
            out = subprocess.run(
                [sys.executable, __file__, "--child-memory", kind, str(n), str(root)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            peaks[(kind, n)] = int(out.split()[-1])
            shutil.rmtree(root, ignore_errors=True)
    for kind in ("put_stream", "put_batches"):
        a, b = peaks[(kind, 1_000_000)] / 2**20, peaks[(kind, 4_000_000)] / 2**20
        print(
            f"peak anonymous memory appending 1 M / 4 M rows of 100 random bytes with {kind}: {a:,.0f} / {b:,.0f} MiB"
        )
    job.figure(
        "peak anonymous memory of a sink task's append, 4 M rows (put_stream, 64 MiB buffer)",
        peaks[("put_stream", 4_000_000)] / 2**20,
        "MiB",
        peer="the same at 1 M rows",
        peer_value=peaks[("put_stream", 1_000_000)] / 2**20,
    )


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child-memory":
        memory_child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    job = Bench(
        "bench_spark",
        __doc__,
        rounds=2,
        rounds_help="measured runs after one warm-up run; the best counts",
        temp_in=REPO / "bench-data" if (REPO / "bench-data").is_dir() else None,
    )
    job.add_argument("--messages", type=int, default=2_000_000)
    job.add_argument("--body", type=int, default=100)
    job.add_argument("--stream-seconds", type=float, default=8.0)
    job.add_argument("--only", choices=["sink", "source", "stream", "memory"], default=None, help="run one part")
    with job.run() as work:
        _run(job, job.args, work)


def _run(job: Bench, args: argparse.Namespace, work: Path) -> None:
    n, body, rounds = args.messages, args.body, args.rounds
    spark = spark_rmq.local_session("rmq-bench-spark", master="local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    import spark_stream_peers
    from pyspark import cloudpickle

    # the peers (and what they call there) travel by value: the workers cannot import jobs/
    cloudpickle.register_pickle_by_value(spark_stream_peers)
    spark.dataSource.register(PeerSource)
    spark.dataSource.register(PeerStreams)
    src = random_input(spark, n, body)
    print(
        f"rmqlog against parquet: {n:,} messages of {body} random bytes, {spark.sparkContext.master}, "
        f"best of {rounds} after a warm-up, work dir {work}"
    )
    rows: list[tuple[str, float, str, float, str]] = []

    def row(what: str, t: float, peer: str, t_peer: float, target: str) -> None:
        rows.append((what, t, peer, t_peer, target))
        job.figure(what, n / t, "msgs/s", peer=peer, peer_value=n / t_peer)

    log_bytes = n * (body + 150)  # ~ the sink's records: header, body, topic, UNIQ_KEY
    store_n = [0]

    def new_store() -> str:
        old = work / f"store{store_n[0]}"
        shutil.rmtree(old, ignore_errors=True)  # the previous run's (frees its pages)
        store_n[0] += 1  # a new path: workers keep the stores they opened open
        root = work / f"store{store_n[0]}"
        with rmqlog.MessageStore.open(root) as ms:
            ms.create_topic("bench", 4)
        warm_up(work / "warm", 2 * log_bytes)
        return str(root)

    root = ""
    if args.only in (None, "sink", "stream"):
        t_pq_w = best_of(rounds, lambda: src.write.mode("overwrite").parquet(str(work / "input.parquet")))
        t_count = best_of(rounds, lambda: src.write.format("bench_peer").mode("append").save())
        sink_times = []
        for _ in range(rounds + 1):
            root = new_store()
            sink_times.append(
                timed(lambda root=root: src.write.format("rmqlog").option("path", root).mode("append").save())
            )
        t_sink = min(sink_times[1:])
        row("sink, df.write into a local store", t_sink, "Spark's parquet writer", t_pq_w, ">= 0.6x")
        row("count-only Python Arrow writer (the API's ceiling)", t_count, "Spark's parquet writer", t_pq_w, "")
        root = new_store()  # (the store the source reads below)
        src.write.format("rmqlog").option("path", root).mode("append").save()
    if args.only in (None, "source"):
        if not root:
            root = new_store()
            src.write.format("rmqlog").option("path", root).mode("append").save()
        rmq = spark.read.format("rmqlog").option("path", root).option("topics", "bench").load()
        rmq.write.mode("overwrite").parquet(str(work / "messages.parquet"))
        assert rmq.count() == n

        def peer(columns: str | None = None):  # type: ignore[no-untyped-def]
            r = spark.read.format("bench_peer").option("path", root).option("total", n).option("parts", 4)
            return (r.option("columns", columns) if columns else r).load()

        def noop(df) -> float:  # type: ignore[no-untyped-def]
            return best_of(rounds, lambda: df.write.format("noop").mode("overwrite").save())

        t_ceiling = noop(peer())
        t_source = noop(rmq)
        t_pq_r = noop(spark.read.parquet(str(work / "messages.parquet")))
        row(
            "source, whole message schema",
            t_source,
            "a reader re-yielding a prebuilt batch (the API's ceiling)",
            t_ceiling,
            ">= 0.9x",
        )
        row(
            "parquet reader, whole message schema",
            t_pq_r,
            "a reader re-yielding a prebuilt batch (the API's ceiling)",
            t_ceiling,
            "",
        )
        cols = COLUMNS.split(",")
        t_cols = noop(
            spark.read.format("rmqlog").option("path", root).option("topics", "bench").option("columns", COLUMNS).load()
        )
        t_pq_cols = noop(spark.read.parquet(str(work / "messages.parquet")).select(*cols))
        t_ceiling_cols = noop(peer(COLUMNS))
        row(f"source, columns={COLUMNS}", t_cols, "Spark's parquet reader of those columns", t_pq_cols, ">= 0.6x")
        row(f"ceiling reader, {COLUMNS}", t_ceiling_cols, "Spark's parquet reader of those columns", t_pq_cols, "")
    if args.only in (None, "memory"):
        memory(work, job)
    if args.only in (None, "stream"):
        t_batch = min(sink_times[1:])
        t_copy, t_ceiling_copy = copy_rate(spark, work, n)
        row("streaming copy between two topics, backlog", t_copy, "the batch sink", t_batch, ">= 0.5x")
        row(
            "ceiling copy: a reader re-yielding a batch into a counting writer",
            t_ceiling_copy,
            "the batch sink",
            t_batch,
            "",
        )
        job.figure(
            "streaming copy against the API's ceiling for a copy",
            n / t_copy,
            "msgs/s",
            peer="a reader re-yielding a batch into a counting writer",
            peer_value=n / t_ceiling_copy,
        )
        rate = n / t_copy / 2
        lat, floor = latencies(spark, work, rate, args.stream_seconds)
        p50, p99, f50, f99 = (
            percentile(lat, 0.5),
            percentile(lat, 0.99),
            percentile(floor, 0.5),
            percentile(floor, 0.99),
        )
        print(
            f"streaming copy at {rate:,.0f} msgs/s (half its sustained rate) for {args.stream_seconds:.0f} s: latency "
            f"p50 {p50:.0f} ms, p99 {p99:.0f} ms over {len(lat):,} messages (target: p50 <= 100 ms); the API's floor "
            f"at that rate (a Python reader's rows into a Python writer, no store): p50 {f50:.0f} ms, p99 {f99:.0f} ms"
        )
        job.figure(
            "streaming copy latency p50 at half its sustained rate",
            p50,
            "ms",
            peer="the API's floor at that rate: a Python reader into a Python writer",
            peer_value=f50,
        )
        job.figure(
            "streaming copy latency p99 at half its sustained rate",
            p99,
            "ms",
            peer="the API's floor at that rate: a Python reader into a Python writer",
            peer_value=f99,
        )
        low = 2000.0  # a trickle: each micro-batch holds a few hundred rows
        lat, floor = latencies(spark, work, low, args.stream_seconds)
        p50, f50 = percentile(lat, 0.5), percentile(floor, 0.5)
        print(
            f"streaming copy at {low:,.0f} msgs/s: latency p50 {p50:.0f} ms, p99 {percentile(lat, 0.99):.0f} ms; "
            f"the API's floor at that rate: p50 {f50:.0f} ms, p99 {percentile(floor, 0.99):.0f} ms"
        )
        job.figure(
            f"streaming copy latency p50 at {low:,.0f} msgs/s",
            p50,
            "ms",
            peer="the API's floor at that rate: a Python reader into a Python writer",
            peer_value=f50,
        )
    spark.stop()
    print("\n| | rmqlog | peer | vs peer (target) |")
    print("|---|---|---|---|")
    for what, t, peer_name, t_peer, target in rows:
        print(
            f"| {what} | {n / t / 1e6:.2f} M msgs/s ({t:.2f} s) | {peer_name}: {n / t_peer / 1e6:.2f} M msgs/s | "
            f"{t_peer / t:.2f}x {('(' + target + ')') if target else ''} |"
        )


if __name__ == "__main__":
    main()
