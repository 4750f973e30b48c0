"""Quickstart (the README's first command): stream order events into the log with Spark, read them back.

    python jobs/quickstart.py [--root PATH] [--events N] [--files N]

Everything is embedded: a local Spark (local[2]) and a store under ./data/quickstart (wiped
at start). It

1. streams generated order events (dropped as parquet files, read by a file stream) into
   topic ``orders`` with ``df.writeStream.format("rmqlog")``: one message per event, the order id as key (hash
   routing keeps an order's events on one queue, in order), the event kind as tag;
2. reads the topic back with ``spark.readStream.format("rmqlog")`` and Trigger.AvailableNow;
3. prints per-queue counts, a few messages, and a batch read with a tag filter.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import spark_rmq  # noqa: E402
import store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=REPO / "data" / "quickstart", help="store directory (wiped first)")
    ap.add_argument("--events", type=int, default=100_000, help="order events to generate")
    ap.add_argument("--files", type=int, default=4, help="files they arrive in (one micro-batch each)")
    args = ap.parse_args()
    t_start = time.perf_counter()
    root = args.root
    shutil.rmtree(root, ignore_errors=True)
    with store.MessageStore.open(root) as ms:
        ms.create_topic("orders", 4)
    checkpoints = Path(tempfile.mkdtemp(prefix="rmq-quickstart-ck-"))

    spark = spark_rmq.local_session("rmq-quickstart")
    spark.sparkContext.setLogLevel("ERROR")
    print(f"store: {root}  (Spark {spark.version}, {spark.sparkContext.master})")

    # 1. stream generated order events into the log: the events land as files in a folder
    #    (as an upstream job would drop them) and a stream picks them up, one file per trigger
    incoming = checkpoints / "incoming"
    (spark.range(args.events, numPartitions=args.files)
     .selectExpr(
         "id AS seq",
         "CAST(id % 20000 AS STRING) AS order_id",
         "element_at(array('created', 'paid', 'shipped'), CAST(id % 3 + 1 AS INT)) AS kind",
         "CAST(id * 37 % 100000 AS INT) AS cents",
     ).write.parquet(str(incoming)))
    events = (
        spark.readStream.schema("seq bigint, order_id string, kind string, cents int")
        .option("maxFilesPerTrigger", 1).parquet(str(incoming))
        .selectExpr(
            "'orders' AS topic",
            "to_json(named_struct('order', order_id, 'event', kind, 'cents', cents, 'seq', seq)) AS body",
            "array(concat('order-', order_id)) AS keys",
            "kind AS tags",
            "map('source', 'quickstart') AS properties",
        )
    )
    t0 = time.perf_counter()
    writer = (
        events.writeStream.format("rmqlog").option("path", str(root))
        .option("queueSelector", "hash")  # same order -> same queue, in order
        .option("checkpointLocation", str(checkpoints / "write"))
        .trigger(availableNow=True).start()
    )
    writer.awaitTermination()
    written = sum(p["numInputRows"] for p in writer.recentProgress)
    print(f"wrote {written:,} order events in {time.perf_counter() - t0:.1f}s with writeStream.format('rmqlog') "
          f"({len([p for p in writer.recentProgress if p['numInputRows']])} micro-batches)")

    # 2. read them back as a stream (AvailableNow: everything there now, then stop)
    t0 = time.perf_counter()
    reader = (
        spark.readStream.format("rmqlog").option("path", str(root)).option("topics", "orders")
        .option("startingOffsets", "earliest").option("group", "quickstart").load()
        .writeStream.format("memory").queryName("orders_back")
        .option("checkpointLocation", str(checkpoints / "read"))
        .trigger(availableNow=True).start()
    )
    reader.awaitTermination()
    back = spark.table("orders_back")
    print(f"read back {back.count():,} messages in {time.perf_counter() - t0:.1f}s with readStream (AvailableNow)\n")
    print("messages per queue:")
    back.groupBy("topic", "queueId").count().orderBy("queueId").show()
    print("a few messages:")
    (back.orderBy("queueId", "queueOffset")
     .selectExpr("queueId", "queueOffset", "msgId", "tags", "keys", "CAST(body AS STRING) AS body")
     .show(5, truncate=False))

    # 3. a batch read with a tag filter (filtered on the consume queue's tag hash first)
    shipped = spark.read.format("rmqlog").option("path", str(root)).option("topics", "orders").option("tags", "shipped").load()
    print(f"batch read, tags='shipped': {shipped.count():,} messages")
    with store.MessageStore.open(root) as ms:
        lag = {q: ms.max_offset("orders", q) - ms.committed_offset("quickstart", "orders", q) for q in range(4)}
    print(f"group 'quickstart' lag per queue (config/consumerOffset.json): {lag}")
    spark.stop()
    shutil.rmtree(checkpoints, ignore_errors=True)
    print(f"\nquickstart done in {time.perf_counter() - t_start:.1f}s")


if __name__ == "__main__":
    main()
