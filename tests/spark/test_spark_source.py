"""The rmqlog source: batch and streaming reads, their options, pushdown, data loss."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
)

import rmqlog
from spark_rmq.errors import QueryDataLossError
from spark_rmq.options import SourceOptions
from spark_rmq.read import PackedRanges
from spark_rmq.schema import SPARK_SCHEMA
from spark_rmq.stream_reader import RmqLogStreamReader

from .spark_helpers import bodies, fill


def read(spark, root: str, **options: str):
    return spark.read.format("rmqlog").option("path", root).options(**options).load()


def test_batch_read_matches_the_store(spark, store_root: str) -> None:
    fill(store_root, "orders", 40, tags=["A", "B"])
    df = read(spark, store_root, topics="orders")
    assert df.schema == SPARK_SCHEMA
    with rmqlog.MessageStore.open(store_root) as ms:
        want = pa.concat_tables([ms.read_queue("orders", q, 0, 100) for q in range(4)])
    rows = want.to_pylist()
    for r in rows:
        r["properties"] = dict(r["properties"])
    expected = spark.createDataFrame(rows, SPARK_SCHEMA)
    assert_df_equality(df.orderBy("queueId", "queueOffset"), expected.orderBy("queueId", "queueOffset"))


def test_batch_offsets_timestamps_tags_and_partitions(spark, store_root: str) -> None:
    fill(store_root, "orders", 40, tags=["A", "B", "C"])
    df = read(
        spark,
        store_root,
        topics="orders",
        startingOffsets='{"orders/0": 8}',
        endingOffsets=json.dumps({"orders/0": 9, "orders/1": 2, "orders/2": -1}),
    )
    # orders/0: [8, 9); orders/1: [0, 2); orders/2: all 10; orders/3: earliest..latest
    assert sorted((r.queueId, r.queueOffset) for r in df.select("queueId", "queueOffset").collect()) == (
        [(0, 8), (1, 0), (1, 1)] + [(2, i) for i in range(10)] + [(3, i) for i in range(10)]
    )
    tagged = read(spark, store_root, topics="orders", tags="A || C").select("tags").collect()
    assert len(tagged) == 27 and {r.tags for r in tagged} == {"A", "C"}
    later = read(spark, store_root, topicPattern="ord.*", startingTimestamp=str(2**41 * 0 + 4_000_000_000_000))
    assert later.count() == 0
    split = read(spark, store_root, assign='{"orders": [1, 3]}', maxMessagesPerPartition="3")
    assert split.rdd.getNumPartitions() == 8  # two queues of 10, three messages per task
    assert split.count() == 20


def test_small_queues_share_a_task(spark, store_root: str) -> None:
    """Queues with fewer than ``packMessagesPerPartition`` messages in the read are packed into
    shared tasks (a task costs far more than reading a few messages); the rows are the same."""
    fill(store_root, "orders", 40, tags=["A", "B"])  # four queues of 10
    fill(store_root, "big", 30, queues=1)
    rows = sorted(
        (r.topic, r.queueId, r.queueOffset, r.body) for r in read(spark, store_root, topicPattern=".*").collect()
    )
    assert len(rows) == 70 and len(set(rows)) == 70
    for opts, tasks in (
        ({}, 1),
        ({"packMessagesPerPartition": "0"}, 5),
        ({"packMessagesPerPartition": "20"}, 3),
        ({"packMessagesPerPartition": "25"}, 3),
        ({"packMessagesPerPartition": "30"}, 3),
        ({"packMessagesPerPartition": "41"}, 2),
    ):
        df = read(spark, store_root, topicPattern=".*", **opts)
        assert df.rdd.getNumPartitions() == tasks, opts
        assert sorted((r.topic, r.queueId, r.queueOffset, r.body) for r in df.collect()) == rows, opts
    # a range cut by maxMessagesPerPartition is never packed back together
    assert read(spark, store_root, topics="orders", maxMessagesPerPartition="5").rdd.getNumPartitions() == 8


def residual_filters(df) -> list[str]:  # type: ignore[no-untyped-def]
    """The conditions of the Filter operators Spark still runs (attribute ids dropped)."""
    import re

    plan = df._jdf.queryExecution().executedPlan().toString()
    return [
        re.sub(r"#\d+L?", "", line.split("Filter ", 1)[1])
        for line in plan.splitlines()
        if re.search(r"\bFilter \(", line)
    ]


def test_batch_filter_pushdown(spark, store_root: str) -> None:
    fill(store_root, "orders", 40, tags=["A", "B"])
    fill(store_root, "other", 8, tags=["A"])
    df = read(spark, store_root, topicPattern=".*")
    where = "topic = 'orders' and queueId in (1, 2) and tags = 'A'"
    got = df.filter(where)
    # pushed: Spark keeps none of the three predicates (only its own null checks) ...
    assert residual_filters(got) == ["(isnotnull(topic) AND isnotnull(tags))"]
    # ... and the reader got them: one task per selected queue (orders/1, orders/2; unpacked) ...
    assert df.filter(where).rdd.getNumPartitions() == 1  # (small queues share a task)
    assert (
        read(spark, store_root, topicPattern=".*", packMessagesPerPartition="0").filter(where).rdd.getNumPartitions()
        == 2
    )
    # ... and filtered the tags itself (Spark no longer does): only tag A, exactly
    assert sorted(bodies(got.collect())) == sorted(f"m{i}" for i in range(40) if i % 4 in (1, 2) and i % 2 == 0)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:  # the same query without pushdown: Spark filters, over every queue
        plain = read(spark, store_root, topicPattern=".*", packMessagesPerPartition="0").filter(where)
        assert "queueId IN (1,2)" in residual_filters(plain)[0] and plain.rdd.getNumPartitions() == 8
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    with rmqlog.MessageStore.open(store_root) as ms:
        ts = ms.read_queue("orders", 0, 0, 1)["storeTimestamp"][0].as_py()
    assert df.filter(df.storeTimestamp >= ts).count() == 48
    assert df.filter(df.storeTimestamp < ts).count() == 0
    assert df.filter(df.queueId > 2).count() == 12  # 10 of orders/3, 2 of other/3


def test_batch_read_without_filter_pushdown(spark, store_root: str) -> None:
    fill(store_root, "orders", 12)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        assert read(spark, store_root, topics="orders").filter("queueId = 1").count() == 3
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def _small() -> rmqlog.StoreConfig:
    return rmqlog.StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=20 * 50)


def test_fail_on_data_loss(spark, store_root: str) -> None:
    fill(store_root, "orders", 200, queues=2, config=_small())
    oldest = sorted(Path(store_root, "commitlog").iterdir())[0]
    os.remove(oldest)  # what retention does: the oldest segment goes
    with pytest.raises(Exception, match="data loss on queue orders/0") as err:
        read(spark, store_root, topics="orders", startingOffsets='{"orders/0": 0, "orders/1": 0}').count()
    assert "failOnDataLoss" in str(err.value)
    kept = read(
        spark, store_root, topics="orders", startingOffsets='{"orders/0": 0, "orders/1": 0}', failOnDataLoss="false"
    ).count()
    assert 0 < kept < 200


def stream_reader(root: str, **options: str) -> RmqLogStreamReader:
    return RmqLogStreamReader(SourceOptions.parse({"path": root, **options}, streaming=True))


def rows_of(reader: RmqLogStreamReader, start: dict, end: dict) -> list[str]:
    out = []
    for p in reader.partitions(start, end):
        for b in reader.read(p):
            out.extend(x.decode() for x in b.column("body").to_pylist())
    return sorted(out)


def test_stream_reader_admission_control_and_new_queues(store_root: str) -> None:
    fill(store_root, "orders", 100, queues=2)
    r = stream_reader(store_root, topicPattern="ord.*", startingOffsets="earliest", maxMessagesPerTrigger="30")
    assert r.getDefaultReadLimit() == ReadMaxRows(30)
    start = r.initialOffset()
    assert start == {"orders/0": 0, "orders/1": 0}
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert end == {"orders/0": 15, "orders/1": 15}
    assert len(rows_of(r, start, end)) == 30
    assert r.latestOffset(start, ReadAllAvailable()) == {"orders/0": 50, "orders/1": 50}
    assert r.reportLatestOffset() == {"orders/0": 50, "orders/1": 50}
    # a topic created mid-stream is read from its first offset
    fill(store_root, "orders2", 3, queues=1)
    end2 = r.latestOffset(end, ReadAllAvailable())
    assert list(end2) == ["orders/0", "orders/1", "orders2/0"] and end2["orders2/0"] == 3
    # orders/0 and orders/1 from 15 to 50 (queue q, offset k holds m{2k+q}), and all of orders2
    assert rows_of(r, end, end2) == sorted([f"m{i}" for i in range(30, 100)] + ["m0", "m1", "m2"])
    # bytes: exact record sizes from the consume queue
    with rmqlog.MessageStore.open(store_root) as ms:
        size = int(ms.consume_queue("orders", 0).read(0, 1)["size"][0])
    rb = stream_reader(store_root, topics="orders", startingOffsets="earliest", maxBytesPerTrigger=str(size * 10))
    assert rb.getDefaultReadLimit() == ReadMaxBytes(size * 10)
    assert rb.latestOffset(rb.initialOffset(), rb.getDefaultReadLimit()) == {"orders/0": 5, "orders/1": 5}
    r.stop()
    rb.stop()


def test_stream_reader_min_messages_waits_up_to_max_trigger_delay(store_root: str) -> None:
    fill(store_root, "orders", 10, queues=2)
    r = stream_reader(
        store_root, topics="orders", startingOffsets="earliest", minMessagesPerTrigger="50", maxTriggerDelay="10s"
    )
    now = [100.0]
    r.clock = lambda: now[0]
    start = r.initialOffset()
    assert r.getDefaultReadLimit() == ReadMinRows(50)
    assert r.latestOffset(start, r.getDefaultReadLimit()) == start  # 10 < 50: wait
    now[0] += 5
    assert r.latestOffset(start, r.getDefaultReadLimit()) == start
    now[0] += 6  # past maxTriggerDelay: take what there is
    assert r.latestOffset(start, r.getDefaultReadLimit()) == {"orders/0": 5, "orders/1": 5}
    r.prepareForTriggerAvailableNow()  # AvailableNow never waits
    assert r.latestOffset(start, r.getDefaultReadLimit()) == {"orders/0": 5, "orders/1": 5}
    r.stop()


def test_stream_available_now_with_limits_group_and_timestamp(spark, store_root: str, tmp_path: Path) -> None:
    fill(store_root, "orders", 60, queues=3, tags=["A", "B"])
    q = (
        spark.readStream.format("rmqlog")
        .option("path", store_root)
        .option("topics", "orders")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "25")
        .option("group", "g1")
        .option("tags", "A")
        .load()
        .writeStream.format("memory")
        .queryName("avail_now")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    assert len(batches) == 3  # 60 messages, 25 per trigger (tags filter rows, not offsets)
    assert sorted(r.body.decode() for r in spark.sql("select body from avail_now").collect()) == sorted(
        f"m{i}" for i in range(0, 60, 2)
    )
    with rmqlog.MessageStore.open(store_root) as ms:
        assert [ms.committed_offset("g1", "orders", qid) for qid in range(3)] == [20, 20, 20]
    # a stream started at a timestamp reads exactly what was stored at or after it
    res = fill(store_root, "orders", 6, queues=3, start=1000)
    cut = res["storeTimestamp"][0].as_py()
    df = (
        spark.readStream.format("rmqlog")
        .option("path", store_root)
        .option("topics", "orders")
        .option("startingTimestamp", cut.isoformat())
        .load()
    )
    q = df.writeStream.format("memory").queryName("from_ts").trigger(availableNow=True).start()
    q.awaitTermination()
    got = spark.sql("select body, storeTimestamp from from_ts").collect()
    with rmqlog.MessageStore.open(store_root) as ms:
        want = [
            r
            for qid in range(3)
            for r in ms.read_queue("orders", qid, 0, 100).to_pylist()
            if r["storeTimestamp"] >= cut
        ]
    assert bodies(got) == bodies(want)
    assert {f"m{1000 + i}" for i in range(6)} <= set(bodies(got))


def test_pushed_filters_narrow_the_plan(store_root: str) -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, LessThanOrEqual

    from spark_rmq.batch_reader import RmqLogFilteringReader

    fill(store_root, "orders", 40, tags=["A", "B"])
    fill(store_root, "other", 8)
    with rmqlog.MessageStore.open(store_root) as ms:
        ts = ms.read_queue("orders", 1, 0, 100)["storeTimestamp"].to_pylist()
    reader = RmqLogFilteringReader(SourceOptions.parse({"path": store_root, "topicPattern": ".*"}, streaming=False))
    body = EqualTo(("body",), b"m1")
    naive = GreaterThan(("storeTimestamp",), dt.datetime(2020, 1, 1))  # no time zone: left to Spark
    left = list(
        reader.pushFilters(
            [
                EqualTo(("topic",), "orders"),
                In(("queueId",), (1, 2)),
                GreaterThan(("queueId",), 1),
                EqualTo(("tags",), "A"),
                LessThanOrEqual(("storeTimestamp",), ts[-1]),
                body,
                naive,
            ]
        )
    )
    assert left == [body, naive]
    parts = reader.partitions()
    assert [(p.topic, p.queue_id, p.start, p.end, p.tags) for p in parts] == [("orders", 2, 0, 10, ("A",))]
    assert bodies([r for p in parts for b in reader.read(p) for r in b.to_pylist()]) == sorted(
        f"m{i}" for i in range(2, 40, 4)
    )


def test_batch_read_of_a_missing_store_names_the_path(tmp_path: Path) -> None:
    from spark_rmq.batch_reader import RmqLogBatchReader

    reader = RmqLogBatchReader(SourceOptions.parse({"path": str(tmp_path / "none"), "topics": "t"}, streaming=False))
    with pytest.raises(rmqlog.StoreNotFoundError, match="no store here") as err:
        reader.partitions()
    assert err.value.path == str(tmp_path / "none")
    assert not (tmp_path / "none").exists()


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a folder)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("kind", ["missing", "empty folder", "other folder"])
def test_reads_where_there_is_no_store_fail_and_create_nothing(spark, tmp_path: Path, kind: str) -> None:
    path = tmp_path / "data"
    if kind != "missing":
        path.mkdir()
    if kind == "other folder":
        (path / "notes.txt").write_bytes(b"not a store\n")
        (path / "sub").mkdir()
    before = tree(tmp_path)
    message = f"no store here .*: {re.escape(str(path))}"
    batch = spark.read.format("rmqlog").option("path", str(path)).option("topics", "t").load()
    with pytest.raises(Exception, match=message):  # when the read is planned
        batch.count()
    q = (
        spark.readStream.format("rmqlog")
        .option("path", str(path))
        .option("topics", "t")
        .load()
        .writeStream.format("memory")
        .queryName(f"nostore_{kind.replace(' ', '_')}")
        .start()
    )
    with pytest.raises(Exception, match=message):  # when the stream plans its first batch
        q.awaitTermination(120)
    assert not q.isActive
    assert tree(tmp_path) == before  # byte for byte: nothing created, nothing changed


def test_stream_defaults_to_latest_and_fails_on_lost_ranges(store_root: str) -> None:
    fill(store_root, "orders", 200, queues=2, config=_small())
    r = stream_reader(store_root, topics="orders")
    assert r.initialOffset() == {"orders/0": 100, "orders/1": 100}  # streams start at the end
    os.remove(sorted(Path(store_root, "commitlog").iterdir())[0])  # retention
    with pytest.raises(QueryDataLossError, match="orders/0") as err:
        r.partitions({"orders/0": 0, "orders/1": 0}, {"orders/0": 100, "orders/1": 100})
    assert err.value.queue == "orders/0" and err.value.start == 0 and err.value.available > 0
    lenient = stream_reader(store_root, topics="orders", failOnDataLoss="false")
    parts = lenient.partitions({"orders/0": 0, "orders/1": 0}, {"orders/0": 100, "orders/1": 100})
    (packed,) = parts  # two small queues: one task
    assert isinstance(packed, PackedRanges) and [p.queue_id for p in packed.parts] == [0, 1]
    assert all(p.start > 0 for p in packed.parts)
    r.stop()
    lenient.stop()


@pytest.mark.parametrize("past", [50, 2**63 - 1])
def test_offsets_past_a_queues_end_are_clamped_not_damage(spark, store_root: str, past: int) -> None:
    """``endingOffsets`` past a healthy queue's end (50 on 5 messages, or
    2**63-1) reads to the end, and ``startingOffsets`` past it starts there (nothing to read
    in a batch; a stream reads what comes after the end), instead of reading units that do
    not exist and calling the queue damaged."""
    fill(store_root, "T", 5, queues=1)
    to_end = read(spark, store_root, topics="T", endingOffsets=json.dumps({"T/0": past}))
    assert sorted(r.queueOffset for r in to_end.select("queueOffset").collect()) == [0, 1, 2, 3, 4]
    assert (
        read(
            spark,
            store_root,
            topics="T",
            startingOffsets=json.dumps({"T/0": 3}),
            endingOffsets=json.dumps({"T/0": past}),
        ).count()
        == 2
    )
    assert read(spark, store_root, topics="T", startingOffsets=json.dumps({"T/0": past})).count() == 0
    with rmqlog.MessageStore.open(store_root) as ms:
        assert ms.verify().problems == []
    r = stream_reader(store_root, topics="T", startingOffsets=json.dumps({"T/0": past}))
    start = r.initialOffset()
    assert start == {"T/0": 5}
    fill(store_root, "T", 3, queues=1, start=5)
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"T/0": 8} and rows_of(r, start, end) == ["m5", "m6", "m7"]
    r.stop()
