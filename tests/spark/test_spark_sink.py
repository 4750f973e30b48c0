"""The rmqlog sink: columns, routing, errors, the route() helper, streaming writes."""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

import rmqlog
import spark_rmq
from spark_rmq.routing import java_hash

from .spark_helpers import bodies, fill


def write(df, root: str, **options: str) -> None:
    df.write.format("rmqlog").option("path", root).options(**options).mode("append").save()


def all_messages(root: str, topic: str) -> list[dict]:
    with rmqlog.MessageStore.open(root) as ms:
        ms.dispatch()
        n = ms.topics()[topic].read_queue_nums
        return [r for q in range(n) for r in ms.read_queue(topic, q, 0, 1 << 40).to_pylist()]


def test_batch_write_all_columns(spark, store_root: str) -> None:
    df = spark.createDataFrame(
        [("b0", "orders", 1, "A", "k1 k2", {"p": "1"}, 3), ("b1", "orders", None, None, "", None, None)],
        "body string, topic string, queueId int, tags string, keys string, properties map<string,string>, flag int",
    ).coalesce(1)
    write(df, store_root)
    got = {bytes(r["body"]).decode(): r for r in all_messages(store_root, "orders")}
    assert set(got) == {"b0", "b1"}
    assert got["b0"]["queueId"] == 1 and got["b0"]["tags"] == "A" and got["b0"]["keys"] == ["k1", "k2"]
    assert dict(got["b0"]["properties"])["p"] == "1" and got["b0"]["flag"] == 3
    assert got["b1"]["keys"] in ([], None) and got["b1"]["tags"] is None


def test_hash_routing_keeps_keys_on_one_queue_in_order(spark, store_root: str) -> None:
    df = (
        spark.range(400)
        .select(
            F.format_string("%d", F.col("id")).alias("body"),
            F.format_string("user-%d", F.col("id") % 7).alias("user"),
        )
        .coalesce(1)
    )
    write(df, store_root, topic="events", queueSelector="hash", shardingKey="user")
    queue_of: dict[str, set[int]] = {}
    for r in sorted(all_messages(store_root, "events"), key=lambda r: (r["queueId"], r["queueOffset"])):
        user = f"user-{int(r['body']) % 7}"
        queue_of.setdefault(user, set()).add(r["queueId"])
    assert all(len(q) == 1 for q in queue_of.values())
    assert len({q for qs in queue_of.values() for q in qs}) > 1
    by_queue: dict[int, list[int]] = {}
    for r in all_messages(store_root, "events"):
        by_queue.setdefault(r["queueId"], []).append((r["queueOffset"], int(r["body"])))
    for rows in by_queue.values():
        assert [b for _, b in sorted(rows)] == sorted(b for _, b in rows)  # order kept per queue


def test_route_helper_puts_each_queue_in_one_partition(spark, store_root: str) -> None:
    with rmqlog.MessageStore.open(store_root) as ms:
        ms.create_topic("orders", 4)
    df = spark.range(200).select(
        F.format_string("%d", "id").alias("body"), F.array(F.format_string("order-%d", F.col("id") % 13)).alias("keys")
    )
    routed = spark_rmq.route(df, store_root, topic="orders", queue_selector="hash")
    placement = routed.select("queueId", F.spark_partition_id().alias("p")).distinct().collect()
    parts_per_queue: dict[int, set[int]] = {}
    for r in placement:
        parts_per_queue.setdefault(r.queueId, set()).add(r.p)
    assert all(len(p) == 1 for p in parts_per_queue.values())
    # route()'s SQL hash and the sink's vectorized hash agree (Java's String.hashCode)
    sample = routed.select("keys", "queueId").limit(30).collect()
    want = java_hash(pa.array([r["keys"][0] for r in sample]))
    assert [r.queueId for r in sample] == (abs(want) % 4).tolist()
    write(routed, store_root)
    msgs = all_messages(store_root, "orders")
    assert len(msgs) == 200
    rr = spark_rmq.route(df.limit(8), store_root, topic="orders")
    assert sorted(r.queueId for r in rr.collect()) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_route_sql_hash_is_java_hashcode_for_any_key(spark) -> None:
    """route()'s Spark SQL hash equals the sink's vectorized one and Java's String.hashCode,
    for non-ASCII keys too (surrogate pairs above U+FFFF, as a Java producer hashes them)."""
    from spark_rmq.routing import java_hash_column

    keys = ["order-1", "tópico", "日本語", "😀", "a😀b", "ü" * 30, "", None]
    df = spark.createDataFrame([(k,) for k in keys], "k string")
    got = [r.h for r in df.select(java_hash_column(F.col("k")).alias("h")).collect()]
    want = java_hash(pa.array(keys, pa.string())).tolist()
    assert got == [None if k is None else w for k, w in zip(keys, want, strict=True)]
    assert want[2:4] == [25921943, 1772899]


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ("body string, topic string, extra int", "field 'extra'"),
        ("topic string", "field 'body'"),
        ("body string", "field 'topic'"),
        ("body string, topic string, keys array<int>", "field 'keys'"),
    ],
)
def test_bad_columns_are_named(spark, store_root: str, columns: str, message: str) -> None:
    df = spark.createDataFrame([], columns)
    with pytest.raises(Exception, match=message):
        write(df, store_root)


def test_bad_row_fails_the_task_and_leaves_nothing(spark, store_root: str) -> None:
    rows = [(f"b{i}", "orders" if i != 7 else "bad topic!", None) for i in range(20)]
    df = spark.createDataFrame(rows, "body string, topic string, delayLevel int").coalesce(1)
    with pytest.raises(Exception, match=r"row 7, field 'topic'"):
        write(df, store_root)
    timed = spark.createDataFrame(
        [("b", "orders", None), ("c", "orders", datetime.datetime(2099, 1, 1))],
        "body string, topic string, deliverTime timestamp",
    )
    with pytest.raises(Exception, match=r"row 1, field 'deliverTime'.*timer_max_delay_sec"):  # beyond 3 days
        write(timed.coalesce(1), store_root)
    with rmqlog.MessageStore.open(store_root) as ms:
        assert ms.published_tail() == 0  # nothing of either task was appended


def test_stream_to_stream(spark, tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    fill(src, "in", 90, queues=3)
    q = (
        spark.readStream.format("rmqlog")
        .option("path", src)
        .option("topics", "in")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "40")
        .load()
        .select("body", "keys", F.lit("out").alias("topic"))
        .writeStream.format("rmqlog")
        .option("path", dst)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    # the sink's commit dispatched: readable right away
    with rmqlog.MessageStore.open(dst) as ms:
        got = [r for qid in range(4) for r in ms.read_queue("out", qid, 0, 1000).to_pylist()]
    assert bodies(got) == sorted(f"m{i}" for i in range(90))
    back = spark.read.format("rmqlog").option("path", dst).option("topics", "out").load().select("body", "keys")
    sent = spark.read.format("rmqlog").option("path", src).option("topics", "in").load().select("body", "keys")
    assert_df_equality(back, sent, ignore_row_order=True)


def test_hash_routing_of_non_nullable_keys_and_properties(spark, tmp_path: Path) -> None:
    """``array(col)`` of a non-nullable column reaches the sink as list<element: string not null>
    (and a map of non-null values as map<string, string not null>): the README's example."""
    df = spark.range(60).selectExpr(
        "'orders' AS topic",
        "CAST(id AS STRING) AS body",
        "array(substring(CAST(id AS STRING), -1, 1)) AS keys",  # the last digit
        "map('n', CAST(id AS STRING)) AS properties",
    )
    assert not df.schema["keys"].dataType.containsNull and not df.schema["properties"].dataType.valueContainsNull
    root = str(tmp_path / "batch")
    write(df.repartition(3), root, queueSelector="hash")
    stream_root = str(tmp_path / "stream")
    src = str(tmp_path / "src")
    fill(src, "in", 60, queues=3)
    sdf = (
        spark.readStream.format("rmqlog")
        .option("path", src)
        .option("topics", "in")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr(
            "'orders' AS topic",
            "CAST(body AS STRING) AS body",
            "array(coalesce(substring(CAST(body AS STRING), -1, 1), 'x')) AS keys",
        )
    )
    assert not sdf.schema["keys"].dataType.containsNull
    q = (
        sdf.writeStream.format("rmqlog")
        .option("path", stream_root)
        .option("queueSelector", "hash")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    for where, prefix in ((root, ""), (stream_root, "m")):
        got = all_messages(where, "orders")
        assert sorted(bytes(r["body"]).decode() for r in got) == sorted(f"{prefix}{i}" for i in range(60))
        for r in got:
            key = bytes(r["body"]).decode()[-1]
            assert r["keys"] == [key] and r["queueId"] == abs(int(java_hash(pa.array([key]))[0])) % 4
            if where == root:
                assert dict(r["properties"])["n"] == bytes(r["body"]).decode()


def test_a_task_past_its_buffer_writes_as_it_receives_once(spark, store_root: str) -> None:
    """``bufferBytes``: a task holds at most that many bytes of encoded records, then writes the
    rest as it arrives (``MessageStore.put_stream``): every row once, a rerun of the job with
    the same ``writerId`` adds nothing, a bad row late in a task leaves nothing of the task."""
    df = spark.range(6000, numPartitions=2).selectExpr("'orders' AS topic", "CAST(id AS STRING) AS body")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")  # many Arrow batches per task
    try:
        write(df, store_root, bufferBytes="2000", writerId="job-1")
        write(df, store_root, bufferBytes="2000", writerId="job-1")  # the same job again: a replay
        got = sorted(int(bytes(m["body"])) for m in all_messages(store_root, "orders"))
        assert got == list(range(6000))
        bad = spark.range(3000, numPartitions=1).selectExpr(
            "IF(id = 2900, 'bad topic!', 'orders') AS topic", "CAST(id AS STRING) AS body"
        )
        with rmqlog.MessageStore.open(store_root) as ms:
            tail = ms.published_tail()
        with pytest.raises(Exception, match=r"row 2900, field 'topic'"):
            write(bad, store_root, bufferBytes="1")
        with rmqlog.MessageStore.open(store_root) as ms:
            assert ms.published_tail() == tail
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    for value in ("0", "x", "-5"):
        with pytest.raises(Exception, match="bufferBytes"):
            write(df, store_root, bufferBytes=value)
