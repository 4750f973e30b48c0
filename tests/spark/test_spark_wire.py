"""Spark over the wire (option ``nameServer``): the source planning from brokers and pulling on
executors, the sink sending 320 batches with its idempotence marker. A name server and brokers
run on 127.0.0.1 in this process (``wire_servers``); Spark's Python workers reach them over TCP."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyspark import cloudpickle
from pyspark.sql import functions as F

from rmqnet.client import Admin, Producer
from spark_rmq.errors import RmqLogOptionError
from spark_rmq.options import SinkOptions, SourceOptions
from spark_rmq.sink import RmqLogArrowWriter, RmqLogStreamArrowWriter
from spark_rmq.source import RmqLogDataSource
from spark_rmq.stream_reader import RmqLogStreamReader
from spark_rmq.wire_read import WireRange, read_wire_range

from .wire_servers import WireServers, wire_servers

BROKER = "broker-a"
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # executors cannot import tests/


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[WireServers]:
    """(Asks for ``tmp_path`` so that its brokers stop before their folders are deleted.)"""
    with wire_servers() as s:
        yield s


def produce(
    servers: WireServers,
    topic: str,
    per_queue: int,
    queues: int = 4,
    *,
    start: int = 0,
    tags: list[str] | None = None,
    broker: str = BROKER,
) -> None:
    """``per_queue`` messages ``m<queue>-<i>`` into each queue, then dispatched."""
    with Producer("PG", servers.namesrv) as p:
        for q in range(queues):
            rows = {"body": [f"m{q}-{i}".encode() for i in range(start, start + per_queue)]}
            if tags:
                rows["tags"] = [tags[i % len(tags)] for i in range(start, start + per_queue)]  # type: ignore[misc]
            p.send_batch(topic, rows, queue_id=q, broker_name=broker)
    servers.dispatched(broker)


def wanted(per_queue: int, queues: int = 4, start: int = 0) -> list[str]:
    return sorted(f"m{q}-{i}" for q in range(queues) for i in range(start, start + per_queue))


def bodies(rows) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(bytes(r["body"] if isinstance(r, dict) else r.body).decode() for r in rows)


# ------------------------------------------------------------------ options


def test_options_over_the_wire_and_the_ones_refused() -> None:
    opts = SourceOptions.parse({"nameServer": " 127.0.0.1:9876 ; 127.0.0.1:9877", "topics": "T"}, streaming=True)
    assert opts.name_server == "127.0.0.1:9876;127.0.0.1:9877" and opts.path == ""
    assert SinkOptions.parse({"nameServer": "127.0.0.1:9876", "topic": "T"}).name_server == "127.0.0.1:9876"
    ok = SourceOptions.parse(
        {"nameServer": "h:1", "topics": "T", "startingOffsets": '{"T/broker-a/2": 5}'}, streaming=True
    )
    assert ok.starting == {"T/broker-a/2": 5}
    refused = [
        ({"nameServer": "h:1", "path": "/tmp/x", "topics": "T"}, "nameServer", "cannot be combined with path"),
        ({"nameServer": "h", "topics": "T"}, "nameServer", "not host:port"),
        ({"nameServer": "h:0", "topics": "T"}, "nameServer", "not host:port"),
        ({"nameServer": " ; ", "topics": "T"}, "nameServer", "item 1 of .* is empty"),
        ({"nameServer": "h:1", "topics": "T", "readOnly": "true"}, "readOnly", "only applies to a store"),
        ({"nameServer": "h:1", "topics": "T", "deliverDue": "false"}, "deliverDue", "only applies to a store"),
        ({"nameServer": "h:1", "topics": "T", "checkCRC": "false"}, "checkCRC", "only applies to a store"),
        (
            {"nameServer": "h:1", "topics": "T", "startingOffsets": '{"T/0": 5}'},
            "startingOffsets",
            "topic/brokerName/queueId",
        ),
        (
            {"nameServer": "h:1", "topics": "T", "startingOffsets": '{"T/a/b/0": 5}'},
            "startingOffsets",
            "topic/brokerName",
        ),
        ({"topics": "T"}, "path", "or nameServer"),
    ]
    for options, name, text in refused:
        with pytest.raises(RmqLogOptionError, match=text) as err:
            SourceOptions.parse(options, streaming=True)
        assert err.value.option == name, options
    with pytest.raises(RmqLogOptionError, match="maxBytesPerTrigger"):
        RmqLogStreamReader(
            SourceOptions.parse({"nameServer": "h:1", "topics": "T", "maxBytesPerTrigger": "100"}, streaming=True)
        )


def test_sink_columns_become_rocketmq_properties_and_bad_rows_are_named() -> None:
    import datetime as dt

    import rmqlog
    from spark_rmq.wire_sink import message_columns, queue_index

    opts = SinkOptions.parse({"nameServer": "h:1", "topic": "T"})
    table = pa.table(
        {
            "body": pa.array(["a", "b", "c"], pa.string()),
            "topic": pa.array([None, "U", None], pa.string()),
            "tags": pa.array(["x", None, ""], pa.string()),
            "keys": pa.array([["k1", "k2"], [], None], pa.list_(pa.string())),
            "properties": pa.array([[("p", "1")], None, [("q", "2"), ("r", "3")]], pa.map_(pa.string(), pa.string())),
            "delayLevel": pa.array([0, 3, None], pa.int32()),
            "deliverTime": pa.array([None, None, dt.datetime(2030, 1, 1, tzinfo=dt.UTC)], pa.timestamp("us", "UTC")),
            "flag": pa.array([1, None, 7], pa.int32()),
        }
    )
    topic, body, props, flag = message_columns(table.slice(0), opts)
    assert topic.to_pylist() == ["T", "U", "T"] and body.to_pylist() == [b"a", b"b", b"c"]
    assert flag.tolist() == [1, 0, 7]
    assert props.to_pylist() == [
        "TAGS\x01x\x02KEYS\x01k1 k2\x02p\x011\x02WAIT\x01true\x02",
        "DELAY\x013\x02WAIT\x01true\x02",
        "q\x012\x02r\x013\x02TIMER_DELIVER_MS\x011893456000000\x02WAIT\x01true\x02",
    ]
    # a slice of the rows gives the slice of the answers (map and list children are whole arrays)
    assert message_columns(table.slice(1, 2), opts)[2].to_pylist() == props.to_pylist()[1:]
    refused = [
        (table.set_column(0, "body", pa.array(["a", None, "c"])), 1, "body"),
        (table.set_column(2, "tags", pa.array(["x", "y", "bad\x01"])), 2, "tags"),
        (
            table.set_column(4, "properties", pa.array([None, None, [("UNIQ_KEY", "1")]], table["properties"].type)),
            2,
            "properties",
        ),
        (
            table.set_column(4, "properties", pa.array([None, [("a", "b\x02")], None], table["properties"].type)),
            1,
            "properties",
        ),
        (table.set_column(5, "delayLevel", pa.array([0, -1, 0], pa.int32())), 1, "delayLevel"),
    ]
    for bad, row, field in refused:
        with pytest.raises(rmqlog.InvalidMessageError) as err:
            message_columns(bad, opts)
        assert (err.value.row, err.value.field) == (row, field)
    # round robin from the task's partition and row number; a queueId column wins; out of range is named
    counts = np.full(3, 4)
    plain = pa.table({"body": ["a", "b", "c"]})
    assert queue_index(plain, opts, counts, 0, 1).tolist() == [1, 2, 3]
    assert queue_index(plain, opts, counts, 6, 1).tolist() == [3, 0, 1]
    given = plain.append_column("queueId", pa.array([None, 2, None], pa.int32()))
    assert queue_index(given, opts, counts, 0, 0).tolist() == [0, 2, 2]
    with pytest.raises(rmqlog.InvalidMessageError, match="writable queues") as err:
        queue_index(plain.append_column("queueId", pa.array([0, 4, 0])), opts, counts, 0, 0)
    assert (err.value.row, err.value.field) == (1, "queueId")


def test_sink_chunks_stay_under_the_cap_and_decode_to_the_rows() -> None:
    import rmqlog
    from spark_rmq import wire_sink

    rng = np.random.default_rng(7)
    sizes = rng.integers(0, 300_000, 60)
    body = pa.array([bytes([i % 251]) * int(n) for i, n in enumerate(sizes)], pa.binary())
    props = pa.array([f"TAGS\x01t{i}\x02" for i in range(60)], pa.string())
    flag = np.arange(60, dtype=np.int32)
    chunks = list(wire_sink._chunks("T", ("b", 0, "h:1"), False, body, props, flag))
    assert len(chunks) >= 3 and all(len(c.body) <= wire_sink.CHUNK_BYTES for c in chunks)
    decoded = pa.concat_tables([rmqlog.decode_message_batch(c.body) for c in chunks])
    assert decoded["body"].to_pylist() == body.to_pylist()
    assert decoded["properties"].to_pylist() == props.to_pylist() and decoded["flag"].to_pylist() == flag.tolist()
    assert sum(c.rows for c in chunks) == 60
    big = pa.array([b"x" * (wire_sink.CHUNK_BYTES + 1)], pa.binary())  # one message over the cap: a chunk of its own
    assert [c.rows for c in wire_sink._chunks("T", ("b", 0, "h:1"), False, big, props[:1], flag[:1])] == [1]


# ------------------------------------------------------------- source, no Spark


def test_a_range_is_pulled_and_filtered_exactly(servers: WireServers, tmp_path: Path) -> None:
    servers.start_broker(BROKER, tmp_path / "a", topics={"T": 2})
    produce(servers, "T", 50, queues=2, tags=["x", "y"])
    ns = servers.namesrv
    got = pa.Table.from_batches(list(read_wire_range(WireRange(ns, "T", BROKER, 1, 5, 45, batch_rows=7))))
    assert got["queueOffset"].to_pylist() == list(range(5, 45))
    assert got["body"].to_pylist() == [f"m1-{i}".encode() for i in range(5, 45)]
    tagged = pa.Table.from_batches(list(read_wire_range(WireRange(ns, "T", BROKER, 1, 5, 45, ("y",), batch_rows=7))))
    assert tagged["queueOffset"].to_pylist() == list(range(5, 45, 2))[0:0] + [i for i in range(5, 45) if i % 2]
    with pytest.raises(Exception, match="ends at offset 50, below offset 50"):
        list(read_wire_range(WireRange(ns, "T", BROKER, 0, 0, 60)))
    # the columns option: the tag filter still applies, the rows are cut to the columns
    cut = pa.Table.from_batches(
        list(read_wire_range(WireRange(ns, "T", BROKER, 1, 5, 45, ("y",), batch_rows=7, columns=("body",))))
    )
    assert cut.column_names == ["body"] and cut["body"].to_pylist() == tagged["body"].to_pylist()


def test_stream_reader_plans_from_the_brokers_and_commits_the_group(servers: WireServers, tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    servers.start_broker(BROKER, tmp_path / "a", topics={"T": 2})
    produce(servers, "T", 30, queues=2)
    r = RmqLogStreamReader(
        SourceOptions.parse(
            {
                "nameServer": servers.namesrv,
                "topics": "T",
                "startingOffsets": "earliest",
                "maxMessagesPerTrigger": "20",
                "group": "g1",
            },
            streaming=True,
        )
    )
    start = r.initialOffset()
    assert start == {"T/broker-a/0": 0, "T/broker-a/1": 0}
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert end == {"T/broker-a/0": 10, "T/broker-a/1": 10}
    rows = [b for p in r.partitions(start, end) for b in r.read(p)]
    assert bodies(pa.Table.from_batches(rows).to_pylist()) == wanted(10, 2)
    assert r.latestOffset(end, ReadAllAvailable()) == {"T/broker-a/0": 30, "T/broker-a/1": 30}
    r.commit(end)  # the group's progress, on the broker
    with Admin(servers.namesrv) as admin:
        addr = admin.route("T").broker_datas[0].master_addr()
        assert [admin.query_offset(addr, "g1", "T", q) for q in (0, 1)] == [10, 10]
    r.stop()


def test_stream_reader_waits_for_a_broker_that_is_down(servers: WireServers, tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    servers.start_broker(BROKER, tmp_path / "a", topics={"T": 2})
    servers.start_broker("broker-b", tmp_path / "b", topics={"T": 1})
    produce(servers, "T", 5, queues=2)
    produce(servers, "T", 3, queues=1, broker="broker-b")
    r = RmqLogStreamReader(
        SourceOptions.parse(
            {"nameServer": servers.namesrv, "topics": "T", "startingOffsets": "earliest"}, streaming=True
        )
    )
    start = r.initialOffset()
    assert start == {"T/broker-a/0": 0, "T/broker-a/1": 0, "T/broker-b/0": 0}
    port = servers.port(BROKER)
    servers.stop_broker(BROKER)  # mid-stream: a trigger comes while broker-a is away
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"T/broker-a/0": 0, "T/broker-a/1": 0, "T/broker-b/0": 3}  # its queues wait, the others go on
    rows = [b for p in r.partitions(start, end) for b in r.read(p)]
    assert bodies(pa.Table.from_batches(rows).to_pylist()) == ["m0-0", "m0-1", "m0-2"]
    servers.start_broker(BROKER, tmp_path / "a", port=port)
    produce(servers, "T", 2, queues=2, start=5)
    later = r.latestOffset(end, ReadAllAvailable())
    assert later == {"T/broker-a/0": 7, "T/broker-a/1": 7, "T/broker-b/0": 3}
    rows = [b for p in r.partitions(end, later) for b in r.read(p)]
    assert bodies(pa.Table.from_batches(rows).to_pylist()) == wanted(7, 2)
    r.stop()


# ------------------------------------------------------------------- Spark


def read(spark, servers: WireServers, **options: str):  # type: ignore[no-untyped-def]
    return spark.read.format("rmqlog").option("nameServer", servers.namesrv).options(**options).load()


def test_batch_read_over_the_wire(spark, servers: WireServers, tmp_path: Path) -> None:
    servers.start_broker(BROKER, tmp_path / "a", topics={"T": 4, "U": 1})
    produce(servers, "T", 25, tags=["A", "B"])
    produce(servers, "U", 3, queues=1)
    assert bodies(read(spark, servers, topics="T").collect()) == wanted(25)
    assert bodies(read(spark, servers, topicPattern="[TU]").collect()) == sorted(wanted(25) + wanted(3, 1))
    tagged = read(spark, servers, topics="T", tags="B").collect()
    assert len(tagged) == 48 and {r.tags for r in tagged} == {"B"}
    part = read(
        spark,
        servers,
        topics="T",
        startingOffsets=json.dumps({"T/broker-a/0": 20}),
        endingOffsets=json.dumps({"T/broker-a/1": 2, "T/broker-a/2": 0, "T/broker-a/3": 0}),
    )
    assert bodies(part.collect()) == sorted([f"m0-{i}" for i in range(20, 25)] + ["m1-0", "m1-1"])
    pushed = read(spark, servers, topicPattern=".*").filter("topic = 'T' and queueId = 3")
    assert bodies(pushed.collect()) == [f"m3-{i}" for i in sorted(range(25), key=str)]
    split = read(spark, servers, topics="T", maxMessagesPerPartition="10")
    assert split.rdd.getNumPartitions() == 12 and split.count() == 100
    with Producer("PG", servers.namesrv) as p:  # key lookups: QUERY_MESSAGE on the topic's brokers
        sent = p.send("U", b"keyed", keys=["k-1", "k-2"])
        p.send("U", b"other", keys=["k-3"])
    servers.dispatched(BROKER)
    assert bodies(read(spark, servers, topics="U", key="k-2").collect()) == ["keyed"]
    assert bodies(read(spark, servers, topics="U", msgId=sent.msg_id).collect()) == ["keyed"]
    assert read(spark, servers, topics="U", key="k-9").count() == 0
    assert read(spark, servers, topics="U", key="k-2", columns="keys").collect()[0].keys == ["k-1", "k-2"]
    assert read(spark, servers, topics="T", columns="queueId").columns == ["queueId"]


def test_stream_over_the_wire_with_a_group_and_a_restarted_broker(spark, servers: WireServers, tmp_path: Path) -> None:
    servers.start_broker(BROKER, tmp_path / "a", topics={"T": 2})
    produce(servers, "T", 30, queues=2)
    ck = str(tmp_path / "ck")

    out = str(tmp_path / "out")

    def run() -> list[str]:
        q = (
            spark.readStream.format("rmqlog")
            .option("nameServer", servers.namesrv)
            .option("topics", "T")
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", "25")
            .option("group", "g1")
            .load()
            .select("body")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", ck)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        return [bytes(r.body).decode() for r in spark.read.parquet(out).collect()]

    assert sorted(run()) == wanted(30, 2)
    # the broker restarts on its port between two runs of the query: the checkpoint's offsets
    # (keyed by broker) go on where they stood, nothing read twice, nothing skipped
    port = servers.port(BROKER)
    servers.stop_broker(BROKER)
    servers.start_broker(BROKER, tmp_path / "a", port=port)
    produce(servers, "T", 10, queues=2, start=30)
    assert sorted(run()) == wanted(40, 2)
    with Admin(servers.namesrv) as admin:
        addr = admin.route("T").broker_datas[0].master_addr()
        assert [admin.query_offset(addr, "g1", "T", q) for q in (0, 1)] == [40, 40]


def test_starting_timestamp_over_the_wire(spark, servers: WireServers, tmp_path: Path) -> None:
    servers.start_broker(BROKER, tmp_path / "a", topics={"T": 2})
    produce(servers, "T", 5, queues=2)
    produce(servers, "T", 5, queues=2, start=5)
    everything = read(spark, servers, topics="T").collect()
    cut = min(r.storeTimestamp for r in everything if bytes(r.body) == b"m0-5")
    cut_ms = round(cut.timestamp() * 1000)
    want = bodies(r for r in everything if r.storeTimestamp >= cut)
    assert set(wanted(5, 1, start=5)) <= set(want)  # (queue 1's second batch may share queue 0's ms or not)
    assert bodies(read(spark, servers, topics="T", startingTimestamp=str(cut_ms)).collect()) == want
    q = (
        spark.readStream.format("rmqlog")
        .option("nameServer", servers.namesrv)
        .option("topics", "T")
        .option("startingTimestamp", str(cut_ms))
        .load()
        .writeStream.format("memory")
        .queryName("wire_ts")
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert bodies(spark.sql("select body from wire_ts").collect()) == want


def test_fail_on_data_loss_over_the_wire(spark, servers: WireServers, tmp_path: Path) -> None:
    root = tmp_path / "a"
    servers.start_broker(BROKER, root, topics={"T": 2}, store={"mapped_file_size_commit_log": 64 * 1024})
    produce(servers, "T", 300, queues=2)
    port = servers.port(BROKER)
    servers.stop_broker(BROKER)
    os.remove(sorted((root / "commitlog").iterdir())[0])  # what retention does: the oldest segment goes
    servers.start_broker(BROKER, root, port=port, store={"mapped_file_size_commit_log": 64 * 1024})
    start = json.dumps({"T/broker-a/0": 0, "T/broker-a/1": 0})
    with pytest.raises(Exception, match="data loss on queue T/broker-a/0") as err:
        read(spark, servers, topics="T", startingOffsets=start).count()
    assert "failOnDataLoss" in str(err.value)
    kept = read(spark, servers, topics="T", startingOffsets=start, failOnDataLoss="false").count()
    assert 0 < kept < 600


def test_bad_options_fail_the_read(spark, servers: WireServers, tmp_path: Path) -> None:
    servers.start_broker(BROKER, tmp_path / "a", topics={"T": 1})
    with pytest.raises(Exception, match="readOnly"):
        read(spark, servers, topics="T", readOnly="true").count()
    with pytest.raises(Exception, match="names queues the query does not read: T/broker-b/0"):
        read(spark, servers, topics="T", startingOffsets='{"T/broker-b/0": 1}').count()


# -------------------------------------------------------------------- sink


class FlakyWireWriter(RmqLogArrowWriter):
    """Sends, then fails the first attempt of every task: the retry's sends are duplicates."""

    def write(self, iterator):  # type: ignore[no-untyped-def]
        from pyspark import TaskContext

        msg = self._append(iterator)
        if TaskContext.get().attemptNumber() == 0:
            raise RuntimeError(f"injected failure after sending {msg}")
        return msg


class FlakyWireStreamWriter(RmqLogStreamArrowWriter):
    def write(self, iterator):  # type: ignore[no-untyped-def]
        from pyspark import TaskContext

        msg = self._append(iterator)
        if TaskContext.get().attemptNumber() == 0:
            raise RuntimeError(f"injected failure after sending {msg}")
        return msg


class FlakyWireSource(RmqLogDataSource):
    @classmethod
    def name(cls) -> str:
        return "rmqlog_wire_flaky"

    def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
        return FlakyWireWriter(self.options, schema, overwrite)

    def streamWriter(self, schema, overwrite):  # type: ignore[no-untyped-def]
        return FlakyWireStreamWriter(self.options, schema, overwrite)


def out_bodies(servers: WireServers, topic: str = "out", broker: str = BROKER) -> Counter:
    """Every body of ``topic`` in the broker's store (read from its files, not through the source)."""
    servers.dispatched(broker)
    store = servers.store(broker)
    n = store.topics()[topic].read_queue_nums
    return Counter(
        bytes(b).decode() for q in range(n) for b in store.read_queue(topic, q, 0, 1 << 40)["body"].to_pylist()
    )


def test_sink_over_the_wire_with_failing_attempts_then_read_back_once(
    spark, servers: WireServers, tmp_path: Path
) -> None:
    servers.start_broker(BROKER, tmp_path / "a", topics={"in": 3, "out": 4})
    spark.dataSource.register(FlakyWireSource)
    df = (
        spark.range(300)
        .select(F.format_string("m%d", "id").alias("body"), F.lit("out").alias("topic"), F.lit("A").alias("tags"))
        .repartition(3)
    )
    df.write.format("rmqlog_wire_flaky").option("nameServer", servers.namesrv).mode("append").save()
    assert out_bodies(servers) == Counter({f"m{i}": 1 for i in range(300)})
    back = read(spark, servers, topics="out").collect()  # the source over the wire reads each once
    assert Counter(bytes(r.body).decode() for r in back) == Counter({f"m{i}": 1 for i in range(300)})
    assert {r.tags for r in back} == {"A"}

    produce(servers, "in", 40, queues=3)
    q = (
        spark.readStream.format("rmqlog")
        .option("nameServer", servers.namesrv)
        .option("topics", "in")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "50")
        .load()
        .selectExpr("body", "'out' AS topic")
        .writeStream.format("rmqlog_wire_flaky")
        .option("nameServer", servers.namesrv)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    want = Counter({f"m{i}": 1 for i in range(300)})
    want.update(wanted(40, 3))
    assert out_bodies(servers) == want


def test_a_replayed_micro_batch_adds_nothing(spark, servers: WireServers, tmp_path: Path) -> None:
    servers.start_broker(BROKER, tmp_path / "a", topics={"in": 2, "out": 4})
    produce(servers, "in", 30, queues=2)
    ck = tmp_path / "ck"

    def run() -> int:
        q = (
            spark.readStream.format("rmqlog")
            .option("nameServer", servers.namesrv)
            .option("topics", "in")
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", "20")
            .load()
            .selectExpr("body", "keys", "'out' AS topic")
            .writeStream.format("rmqlog")
            .option("nameServer", servers.namesrv)
            .option("queueSelector", "hash")
            .option("checkpointLocation", str(ck))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        return sum(p["numInputRows"] for p in q.recentProgress)

    assert run() == 60
    once = Counter({b: 1 for b in wanted(30, 2)})
    assert out_bodies(servers) == once
    # forget that the last micro-batch was committed: the restarted query runs it again
    last = max(int(p.name) for p in (ck / "commits").iterdir() if p.name.isdigit())
    assert last >= 1  # (30 + 30 messages, 20 per trigger)
    for name in (str(last), f".{last}.crc"):
        (ck / "commits" / name).unlink(missing_ok=True)
    before = servers.store(BROKER).max_offset("out", 0)
    assert run() == 20  # the last batch's 20 rows read and sent again ...
    assert out_bodies(servers) == once  # the brokers answered every replayed send as a duplicate
    assert servers.store(BROKER).max_offset("out", 0) == before


def test_hash_routing_and_bad_rows_over_the_wire(spark, servers: WireServers, tmp_path: Path) -> None:
    from spark_rmq.routing import java_hash

    servers.start_broker(BROKER, tmp_path / "a", topics={"out": 4})
    keys = [f"key-{i}" for i in range(40)]
    df = spark.createDataFrame([(f"m{i}", k) for i, k in enumerate(keys)], "body string, keys string")
    (
        df.write.format("rmqlog")
        .option("nameServer", servers.namesrv)
        .option("topic", "out")
        .option("queueSelector", "hash")
        .mode("append")
        .save()
    )
    got = {bytes(r.body).decode(): r.queueId for r in read(spark, servers, topics="out").collect()}
    expect = abs(java_hash(pa.array(keys)).astype("int64")) % 4  # SelectMessageQueueByHash
    assert got == {f"m{i}": int(expect[i]) for i in range(40)}
    bad = spark.createDataFrame([("x", 9)], "body string, queueId int")
    with pytest.raises(Exception, match="queueId") as err:
        bad.write.format("rmqlog").option("nameServer", servers.namesrv).option("topic", "out").mode("append").save()
    assert "writable queues" in str(err.value)
    with pytest.raises(Exception, match="cannot be combined with path"):
        (
            df.write.format("rmqlog")
            .option("nameServer", servers.namesrv)
            .option("path", str(tmp_path / "p"))
            .option("topic", "out")
            .mode("append")
            .save()
        )


def test_sink_and_source_across_two_brokers(spark, servers: WireServers, tmp_path: Path) -> None:
    servers.start_broker(BROKER, tmp_path / "a", topics={"out": 4})
    servers.start_broker("broker-b", tmp_path / "b", topics={"out": 2})
    spark.dataSource.register(FlakyWireSource)  # every first attempt fails after sending
    df = spark.range(600).select(F.format_string("m%d", "id").alias("body")).repartition(3)
    df.write.format("rmqlog_wire_flaky").option("nameServer", servers.namesrv).option("topic", "out").mode(
        "append"
    ).save()
    a, b = out_bodies(servers), out_bodies(servers, broker="broker-b")
    assert sum(a.values()) + sum(b.values()) == 600 and not set(a) & set(b)
    assert 150 < sum(b.values()) < 250  # round robin over the six queues: about a third on broker-b's two
    back = read(spark, servers, topics="out").select("body", "queueId", "storeHost").collect()
    assert Counter(bytes(r.body).decode() for r in back) == Counter({f"m{i}": 1 for i in range(600)})
    held = servers.store("broker-b").max_offset("out", 1)
    assert held > 90
    offsets = read(spark, servers, topics="out", startingOffsets=json.dumps({"out/broker-b/1": 90})).count()
    assert offsets == 600 - 90
