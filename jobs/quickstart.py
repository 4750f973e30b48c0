"""Quickstart (the README's first command): stream order events into the log with Spark, read them back.

    python jobs/quickstart.py [--root PATH] [--events N] [--files N]

Everything is embedded: a local Spark (local[2]) and a store under ./data/quickstart (wiped
at start). It

1. streams generated order events (dropped as parquet files, read by a file stream) into
   topic ``orders`` with ``df.writeStream.format("rmqlog")``: one message per event, the order id as key (hash
   routing keeps an order's events on one queue, in order), the event kind as tag;
2. reads the topic back with ``spark.readStream.format("rmqlog")`` and Trigger.AvailableNow;
3. prints per-queue counts, a few messages, and a batch read with a tag filter.

What it measures is said apart: Spark's start, then for the write and the read the first
micro-batch (which carries Spark's warm-up) and the steady rate of the others (Spark's own
``durationMs.triggerExecution`` of each micro-batch).

Each step prints what it is doing, and each micro-batch its rows and rate (polled from the
query's progress). Spark's own log
(its start-up warnings included) goes to ``<root>.spark.log``, not to the terminal. The times
printed are wall-clock times measured from the start of this script.
"""

from __future__ import annotations

import time

T_START = time.perf_counter()  # before the imports: pyspark's and pyarrow's take seconds too

import argparse  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import rmqlog  # noqa: E402
import spark_rmq  # noqa: E402


def say(text: str) -> None:
    print(f"[{time.perf_counter() - T_START:5.1f}s] {text}", flush=True)


def quiet_session(log: Path) -> Any:
    """``spark_rmq.local_session`` with the JVM's stderr (log4j's console output, the JVM's own
    warnings) sent to ``log``: the JVM inherits this process's stderr when it starts."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log, "wb") as f:
        os.dup2(f.fileno(), 2)
    try:
        return spark_rmq.local_session("rmq-quickstart")
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def steady(batches: list[tuple[int, int]]) -> str:
    """What a query's micro-batches measured, ``(rows, ms)`` each (Spark's ``numInputRows`` and
    ``durationMs.triggerExecution``): the first batch apart (it carries Spark's warm-up: the
    query's planning, the Python workers' start, the first task's imports), then the steady
    rate of the others. A rate over the whole run would be mostly that warm-up."""
    if not batches:
        return "no micro-batch"
    (rows0, ms0), rest = batches[0], batches[1:]
    text = f"first micro-batch {rows0:,} in {ms0 / 1000:.1f}s (with Spark's warm-up)"
    rows, ms = sum(r for r, _ in rest), sum(m for _, m in rest)
    if not rest or not ms:
        return text + "; no further micro-batch to measure a steady rate on"
    return text + f", then {rows:,} in {ms / 1000:.1f}s: {rows * 1000 / ms:,.0f} messages/s steady"


def follow(query: Any, what: str, batches: list[tuple[int, int]] | None = None) -> int:
    """Wait for ``query`` to end, printing each micro-batch (rows, total, rate) and, every 5 s
    without one, what the query is doing; returns the rows. ``batches`` gets each non-empty
    micro-batch's ``(rows, ms)`` (:func:`steady`)."""
    shown, total, last = 0, 0, time.perf_counter()
    while True:
        active = query.isActive  # read before the progress: the last batches are then in it
        for p in query.recentProgress[shown:]:
            shown += 1
            if p["numInputRows"]:
                if batches is not None:
                    batches.append((int(p["numInputRows"]), int(p["durationMs"]["triggerExecution"])))
                total += p["numInputRows"]
                last = time.perf_counter()
                say(
                    f"  {what} batch {p['batchId']}: {p['numInputRows']:,} rows ({total:,} so far, "
                    f"{p['processedRowsPerSecond']:,.0f} rows/s)"
                )
        if not active:
            query.awaitTermination()  # raises the query's error, if it failed
            return total
        if time.perf_counter() - last >= 5:
            last = time.perf_counter()
            say(f"  {what}: {query.status['message'].lower()}")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=REPO / "data" / "quickstart", help="store directory (wiped first)")
    ap.add_argument("--events", type=int, default=100_000, help="order events to generate")
    ap.add_argument("--files", type=int, default=4, help="files they arrive in (one micro-batch each)")
    args = ap.parse_args(argv)
    root = args.root
    shutil.rmtree(root, ignore_errors=True)
    with rmqlog.MessageStore.open(root) as ms:
        ms.create_topic("orders", 4)
    checkpoints = Path(tempfile.mkdtemp(prefix="rmq-quickstart-ck-"))
    spark_log = root.with_name(root.name + ".spark.log")

    say(f"starting Spark (local[2]; its log: {spark_log})")
    t0 = time.perf_counter()
    spark = quiet_session(spark_log)
    say(f"Spark {spark.version} started in {time.perf_counter() - t0:.1f}s (its JVM); store: {root}")

    # 1. stream generated order events into the log: the events land as files in a folder
    #    (as an upstream job would drop them) and a stream picks them up, one file per trigger
    incoming = checkpoints / "incoming"
    say(f"generating {args.events:,} order events into {args.files} parquet files")
    (
        spark.range(args.events, numPartitions=args.files)
        .selectExpr(
            "id AS seq",
            "CAST(id % 20000 AS STRING) AS order_id",
            "element_at(array('created', 'paid', 'shipped'), CAST(id % 3 + 1 AS INT)) AS kind",
            "CAST(id * 37 % 100000 AS INT) AS cents",
        )
        .write.parquet(str(incoming))
    )
    events = (
        spark.readStream.schema("seq bigint, order_id string, kind string, cents int")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(incoming))
        .selectExpr(
            "'orders' AS topic",
            "to_json(named_struct('order', order_id, 'event', kind, 'cents', cents, 'seq', seq)) AS body",
            "array(concat('order-', order_id)) AS keys",
            "kind AS tags",
            "map('source', 'quickstart') AS properties",
        )
    )
    say("writing them with writeStream.format('rmqlog'), one micro-batch per file")
    t0 = time.perf_counter()
    writer = (
        events.writeStream.format("rmqlog")
        .option("path", str(root))
        .option("queueSelector", "hash")  # same order -> same queue, in order
        .option("checkpointLocation", str(checkpoints / "write"))
        .trigger(availableNow=True)
        .start()
    )
    batches: list[tuple[int, int]] = []
    written = follow(writer, "write", batches)
    took = time.perf_counter() - t0
    say(f"wrote {written:,} messages in {took:.1f}s: {steady(batches)}")

    # 2. read them back as a stream (AvailableNow: everything there now, then stop)
    say("reading them back with readStream.format('rmqlog') (AvailableNow, in 4 micro-batches)")
    t0 = time.perf_counter()
    reader = (
        spark.readStream.format("rmqlog")
        .option("path", str(root))
        .option("topics", "orders")
        .option("startingOffsets", "earliest")
        .option("group", "quickstart")
        .option("maxMessagesPerTrigger", max(1, args.events // 4))
        .load()  # a few batches, to show progress
        .writeStream.format("memory")
        .queryName("orders_back")
        .option("checkpointLocation", str(checkpoints / "read"))
        .trigger(availableNow=True)
        .start()
    )
    batches = []
    follow(reader, "read", batches)
    took = time.perf_counter() - t0
    back = spark.table("orders_back")
    say(f"read back {back.count():,} messages in {took:.1f}s: {steady(batches)}")
    say(
        "(a micro-batch's time is Spark's too: planning, tasks, the memory sink; the store alone appends "
        "millions of messages a second, jobs/bench_store.py)\n"
    )
    print("messages per queue:")
    back.groupBy("topic", "queueId").count().orderBy("queueId").show()
    print("a few messages:")
    (
        back.orderBy("queueId", "queueOffset")
        .selectExpr("queueId", "queueOffset", "msgId", "tags", "keys", "CAST(body AS STRING) AS body")
        .show(5, truncate=False)
    )

    # 3. a batch read with a tag filter (filtered on the consume queue's tag hash first)
    shipped = (
        spark.read.format("rmqlog")
        .option("path", str(root))
        .option("topics", "orders")
        .option("tags", "shipped")
        .load()
    )
    say(f"batch read, tags='shipped': {shipped.count():,} messages")
    with rmqlog.MessageStore.open(root) as ms:
        lag = {q: ms.max_offset("orders", q) - ms.committed_offset("quickstart", "orders", q) for q in range(4)}
    say(f"group 'quickstart' lag per queue (config/consumerOffset.json): {lag}")
    spark.stop()
    shutil.rmtree(checkpoints, ignore_errors=True)
    say("quickstart done (the time includes starting Python and Spark)")


if __name__ == "__main__":
    main()
