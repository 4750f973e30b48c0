"""The streaming part of ``jobs/bench_spark.py``: the rmqlog copy between two topics, and its
peers measured in the same run through the same Python data source API (a ``readStream`` ->
``writeStream`` pipeline of Python sources and sinks pays Spark's Arrow -> row -> Arrow
hand-over in the JVM for every row, and a fixed cost per micro-batch: the offset and commit
logs, a Python round trip per planning step, a task's Python workers).

- **Rate**: a backlog appended before the query starts, copied in its micro-batches; rate =
  rows / the sum of their ``triggerExecution``. Each query runs after a warm-up query of the
  same shape in the same application (Python workers forked, the store opened by them, the
  JVM's compiled code), as a long-running pipeline is. Peer, the API's ceiling for such a
  copy: a reader re-yielding one batch of the store's own ``body, storeTimestamp`` into a
  writer that only counts.
- **Latency** at a given rate: a producer appends every 10 ms; each copy carries its
  original's store time in a property, so latency = the copy's store time minus the
  original's. Peer, the API's floor at the same rate: a reader whose rows appear as time
  passes (each carrying its creation time) into a writer that records now minus that time:
  no store at either end, only Spark's micro-batches.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StructField, StructType, TimestampType

import rmqlog

#: the projection of every pipeline here: the copy's topic, its body, and the original's store
#: time in a property (what the latency is measured with; the rate is of the same pipeline)
WITH_TIME = ["'out' AS topic", "body", "map('SRC_STORE_MS', CAST(unix_millis(storeTimestamp) AS STRING)) AS properties"]


def reyield(path: str, topic: str, columns: list[str] | None, n: int):  # type: ignore[no-untyped-def]
    """``n`` rows of one batch of queue 0 of ``topic`` (read once, its ``columns``, up to
    65,536 rows), re-yielded: what a ceiling reader hands Spark (no store work per row)."""
    with rmqlog.MessageStore.open(path, read_only=True) as ms:
        table = ms.read_window(topic, 0, 0, max_count=min(65536, n), columns=columns).messages
    batch = table.combine_chunks().to_batches()[0]
    for at in range(0, n, batch.num_rows):
        yield batch.slice(0, min(batch.num_rows, n - at))


class _Reader(DataSourceStreamReader):
    """``mode=ceiling``: offsets 0..``total`` at once, ``parts`` tasks re-yielding slices of one
    batch of the store's ``body, storeTimestamp``. ``mode=floor``: ``rate`` rows a second
    from ``t0`` (epoch seconds), each stamped with its creation time."""

    def __init__(self, options: dict[str, str]) -> None:
        self.o = options

    def initialOffset(self) -> dict:
        return {"o": 0}

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        if self.o["mode"] == "ceiling":
            return {"o": int(self.o["total"])}
        return {"o": max(0, int((time.time() - float(self.o["t0"])) * float(self.o["rate"])))}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        a, b, parts = start["o"], end["o"], int(self.o.get("parts", 1))
        cuts = np.linspace(a, b, parts + 1).astype(int)
        return [InputPartition((int(x), int(y))) for x, y in zip(cuts[:-1], cuts[1:], strict=True) if y > x]

    def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
        a, b = partition.value
        if self.o["mode"] == "floor":
            created = (float(self.o["t0"]) * 1000 + np.arange(a, b) * 1000 / float(self.o["rate"])).astype(np.int64)
            yield pa.record_batch(
                {
                    "body": pa.array([b"x" * 100] * (b - a), pa.binary()),
                    "storeTimestamp": pa.array(created * 1000, pa.timestamp("us", tz="UTC")),
                }
            )
            return
        yield from reyield(self.o["path"], "in", ["body", "storeTimestamp"], b - a)

    def commit(self, end: dict) -> None:
        pass


class _Writer(DataSourceStreamArrowWriter):
    """``mode=count``: counts. ``mode=latency``: saves each row's ``SRC_STORE_MS`` and now minus
    it into ``dir``."""

    def __init__(self, options: dict[str, str]) -> None:
        self.o = options

    def write(self, iterator):  # type: ignore[no-untyped-def]
        import pyarrow.compute as pc

        for b in iterator:
            if self.o["mode"] == "latency" and b.num_rows:
                now = time.time() * 1000
                src = pc.cast(b.column("properties").items, pa.int64()).to_numpy()  # one entry a row
                np.save(Path(self.o["dir"], uuid.uuid4().hex + ".npy"), np.stack([src, now - src]))
        return WriterCommitMessage()

    def commit(self, messages, batchId) -> None:  # type: ignore[no-untyped-def]
        pass

    def abort(self, messages, batchId) -> None:  # type: ignore[no-untyped-def]
        pass


class PeerStreams(DataSource):
    """``bench_stream``: the peers of the streaming copy (see the module's docstring)."""

    @classmethod
    def name(cls) -> str:
        return "bench_stream"

    def schema(self) -> StructType:
        return StructType([StructField("body", BinaryType()), StructField("storeTimestamp", TimestampType())])

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _Reader(dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return _Writer(dict(self.options))


def random_bodies(rng: np.random.Generator, m: int, body: int) -> pa.Array:
    data = rng.integers(0, 256, m * body, dtype=np.uint8)
    return pa.Array.from_buffers(
        pa.binary(), m, [None, pa.py_buffer(np.arange(0, m * body + 1, body, dtype=np.int32)), pa.py_buffer(data)]
    )


def append(ms: rmqlog.MessageStore, topic: str, n: int, rng: np.random.Generator) -> None:
    for start in range(0, n, 100_000):
        m = min(100_000, n - start)
        ms.put_batch(pa.table({"topic": [topic] * m, "body": random_bodies(rng, m, 100)}), dispatch=True)


def _checkpoint(work: Path, name: str) -> str:
    """A new checkpoint folder (a query would resume from an old one's offsets)."""
    path = work / f"ckpt-{name}"
    shutil.rmtree(path, ignore_errors=True)
    return str(path)


def _batches_time(q, rows: int, timeout_s: float) -> float:  # type: ignore[no-untyped-def]
    """Seconds of the query's micro-batches with rows, once they hold ``rows`` rows."""
    deadline = time.monotonic() + timeout_s
    while sum(p["numInputRows"] for p in q.recentProgress) < rows:
        if q.exception() is not None:
            raise RuntimeError(f"the streaming query failed: {q.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the streaming query did not take {rows:,} rows in {timeout_s:.0f} s")
        time.sleep(0.05)
    return sum(p["durationMs"]["triggerExecution"] for p in q.recentProgress if p["numInputRows"]) / 1000


def copy_rate(spark, work: Path, n: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(seconds rmqlog's pipeline took to copy a backlog of ``n`` rows from topic ``in`` to
    ``out``, seconds the ceiling pipeline took for as many rows); each after a warm-up query."""
    root = work / "stream-store"
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng()
    with rmqlog.MessageStore.open(root) as ms:  # (kept open as a writer: see stream_copy)
        for t in ("warm", "in", "out"):
            ms.create_topic(t, 2)
        append(ms, "warm", 200_000, rng)
        append(ms, "in", n, rng)

        def ours(topic: str, rows: int) -> float:
            q = (
                spark.readStream.format("rmqlog")
                .option("path", str(root))
                .option("topics", topic)
                .option("startingOffsets", "earliest")
                .option("columns", "body,storeTimestamp")
                .load()
                .selectExpr(*WITH_TIME)
                .writeStream.format("rmqlog")
                .option("path", str(root))
                .option("checkpointLocation", _checkpoint(work, topic))
                .start()
            )
            try:
                return _batches_time(q, rows, 600)
            finally:
                q.stop()

        def ceiling(rows: int, name: str) -> float:
            q = (
                spark.readStream.format("bench_stream")
                .option("mode", "ceiling")
                .option("path", str(root))
                .option("total", rows)
                .option("parts", 2)
                .load()
                .selectExpr(*WITH_TIME)
                .writeStream.format("bench_stream")
                .option("mode", "count")
                .option("checkpointLocation", _checkpoint(work, name))
                .start()
            )
            try:
                return _batches_time(q, rows, 600)
            finally:
                q.stop()

        ours("warm", 200_000)
        t_ours = ours("in", n)
        ceiling(200_000, "ceiling-warm")
        t_ceiling = ceiling(n, "ceiling")
    shutil.rmtree(root, ignore_errors=True)
    return t_ours, t_ceiling


def latencies(spark, work: Path, rate: float, seconds: float) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    """(rmqlog's copy latencies, the API floor's), in ms, at ``rate`` rows/s for ``seconds`` each."""
    root = work / f"latency-store-{rate:.0f}"  # (a path of its own: workers keep the stores they opened)
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng()
    lat: list[float] = []
    with rmqlog.MessageStore.open(root) as ms:
        ms.create_topic("in", 2)
        ms.create_topic("out", 2)
        q = (
            spark.readStream.format("rmqlog")
            .option("path", str(root))
            .option("topics", "in")
            .option("startingOffsets", "earliest")
            .option("columns", "body,storeTimestamp")
            .load()
            .selectExpr(*WITH_TIME)
            .writeStream.format("rmqlog")
            .option("path", str(root))
            .option("checkpointLocation", _checkpoint(work, f"latency-{rate:.0f}"))
            .start()
        )
        try:
            warm = _produce(ms, rate, 2.0, rng)  # warm-up: not counted
            _wait_for_copies(ms, q, warm, 120)
            start = [ms.max_offset("out", i) for i in range(2)]
            sent = _produce(ms, rate, seconds, rng)
            _wait_for_copies(ms, q, sum(start) + sent, 120)
        finally:
            q.stop()
        for i in range(2):
            t = ms.read_queue("out", i, start[i], ms.max_offset("out", i))
            src = np.array([int(dict(p)["SRC_STORE_MS"]) for p in t["properties"].to_pylist()], np.int64)
            lat.extend((t["storeTimestamp"].cast(pa.int64()).to_numpy() // 1000 - src).tolist())
    shutil.rmtree(root, ignore_errors=True)
    floor = _floor_latencies(spark, work, rate, seconds)
    return lat, floor


def _floor_latencies(spark, work: Path, rate: float, seconds: float) -> list[float]:  # type: ignore[no-untyped-def]
    out = work / f"floor-latency-{rate:.0f}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t0 = time.time() + 3  # the first rows appear once the query is up
    q = (
        spark.readStream.format("bench_stream")
        .option("mode", "floor")
        .option("rate", rate)
        .option("t0", t0)
        .load()
        .selectExpr(*WITH_TIME)
        .writeStream.format("bench_stream")
        .option("mode", "latency")
        .option("dir", str(out))
        .option("checkpointLocation", _checkpoint(work, f"floor-{rate:.0f}"))
        .start()
    )
    try:
        time.sleep(3 + 2.0 + seconds)
        if q.exception() is not None:
            raise RuntimeError(f"the floor's streaming query failed: {q.exception()}")
    finally:
        q.stop()
    warm_until = t0 * 1000 + 2000  # rows created in the first 2 s are the warm-up, as for rmqlog's
    lat: list[float] = []
    for f in sorted(out.iterdir()):
        created, latency = np.load(f)
        lat.extend(latency[created >= warm_until].tolist())
    return lat


def _produce(ms: rmqlog.MessageStore, rate: float, seconds: float, rng: np.random.Generator) -> int:
    """Append to topic ``in`` at ``rate`` msgs/s for ``seconds``, a batch every 10 ms; how many."""
    t0 = time.perf_counter()
    sent = 0
    while (now := time.perf_counter() - t0) < seconds:
        due = int(rate * now) - sent
        if due > 0:
            ms.put_batch(pa.table({"topic": ["in"] * due, "body": random_bodies(rng, due, 100)}), dispatch=True)
            sent += due
        time.sleep(0.01)
    return sent


def _wait_for_copies(ms: rmqlog.MessageStore, query, total: int, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    """Until topic ``out`` holds ``total`` messages (the query's failure is raised)."""
    deadline = time.monotonic() + timeout_s
    while sum(ms.max_offset("out", q_) for q_ in range(2)) < total:
        if query.exception() is not None:
            raise RuntimeError(f"the streaming query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic out did not reach {total:,} messages in {timeout_s:.0f} s")
        time.sleep(0.002)


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p))] if s else float("nan")
