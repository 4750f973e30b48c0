"""The source's ``columns`` option: the schema follows it, only those columns are made by the
store (``read_window(columns=...)``) and handed to Spark, with every other option keeping its
meaning (tags, sql92, time pushdown, key lookups, streams, over the wire); a bad name is the
option error naming ``columns``."""

from __future__ import annotations

import pyarrow as pa
import pytest

import rmqlog
from spark_rmq.errors import RmqLogOptionError
from spark_rmq.options import SourceOptions
from spark_rmq.read import KeyLookup, QueueRange, read_key_lookup, read_range

COLUMNS = "body, keys,queueOffset"


def _fill(root: str, n: int = 120) -> None:
    with rmqlog.MessageStore.open(root) as ms:
        ms.create_topic("t", 2)
        ms.put_batch(
            pa.table(
                {
                    "topic": ["t"] * n,
                    "body": [f"b{i}".encode() for i in range(n)],
                    "queueId": [i % 2 for i in range(n)],
                    "tags": ["A" if i % 3 else "B" for i in range(n)],
                    "keys": [[f"k{i}", "all"] for i in range(n)],
                    "properties": pa.array([[("n", str(i))] for i in range(n)], pa.map_(pa.string(), pa.string())),
                }
            ),
            dispatch=True,
        )


def read(spark, root: str, **options: str):
    return spark.read.format("rmqlog").option("path", root).option("topics", "t").options(**options).load()


def _rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def test_the_schema_follows_the_option_and_the_rows_are_the_full_reads(spark, store_root: str) -> None:
    _fill(store_root)
    df = read(spark, store_root, columns=COLUMNS)
    assert df.columns == ["body", "keys", "queueOffset"]
    assert [f.dataType.simpleString() for f in df.schema] == ["binary", "array<string>", "bigint"]
    full = read(spark, store_root).select("body", "keys", "queueOffset")
    assert _rows(df) == _rows(full) and len(_rows(df)) == 120
    # with the tags filter (the store needs the tags column to filter on, not handed out)
    tagged = read(spark, store_root, columns="queueOffset", tags="B")
    assert tagged.columns == ["queueOffset"]
    assert _rows(tagged) == _rows(read(spark, store_root, tags="B").select("queueOffset"))
    # and sql92
    assert _rows(read(spark, store_root, columns="body", sql92="n < 4")) == [(b"b0",), (b"b1",), (b"b2",), (b"b3",)]


def test_time_pushdown_and_key_lookup_keep_their_meaning(spark, store_root: str) -> None:
    _fill(store_root)
    # the time cut (the filter pushdown of storeTimestamp) reads the store time, not handed out
    part = QueueRange(store_root, "t", 0, 0, 60, columns=("body",), ts_from_ms=0, ts_until_ms=2**50)
    got = pa.Table.from_batches(list(read_range(part)))
    assert got.column_names == ["body"] and got.num_rows == 60
    part = QueueRange(store_root, "t", 0, 0, 60, columns=("body",), ts_until_ms=0)
    assert list(read_range(part)) == []
    keyed = read(spark, store_root, columns="body,keys", key="k7")
    assert _rows(keyed) == [(b"b7", ["k7", "all"])]
    got = pa.Table.from_batches(list(read_key_lookup(KeyLookup(store_root, ("t",), "k8", columns=("queueOffset",)))))
    assert got.to_pylist() == [{"queueOffset": 4}]


def test_a_stream_reads_the_columns(spark, store_root: str, tmp_path) -> None:
    _fill(store_root, 10)
    out: list[tuple] = []
    q = (
        spark.readStream.format("rmqlog")
        .option("path", store_root)
        .option("topics", "t")
        .option("startingOffsets", "earliest")
        .option("columns", "queueId,body")
        .load()
        .writeStream.foreachBatch(lambda df, _: out.extend(tuple(r) for r in df.collect()))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert sorted(out) == sorted((i % 2, f"b{i}".encode()) for i in range(10))


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("", "is empty"),
        (" , ", "is empty"),
        ("body,nope", "'nope' is not a column"),
        ("body,body", "'body' is named twice"),
        ("Body", "'Body' is not a column"),
    ],
)
def test_a_bad_columns_option_is_the_option_error(spark, store_root: str, value: str, says: str) -> None:
    _fill(store_root, 2)
    with pytest.raises(RmqLogOptionError) as info:
        SourceOptions.parse({"path": store_root, "topics": "t", "columns": value}, streaming=False)
    assert info.value.option == "columns" and says in str(info.value)
    with pytest.raises(Exception, match="columns"):
        read(spark, store_root, columns=value).collect()


def test_read_window_makes_only_the_columns_asked_for(tmp_path) -> None:
    root = str(tmp_path / "s")
    _fill(root, 8)
    with rmqlog.MessageStore.open(root) as ms:
        full = ms.read_window("t", 0, 0, max_count=8).messages
        for cols in (["msgId"], ["properties", "topic"], ["bornHost", "storeHost", "bodyCRC"]):
            r = ms.read_window("t", 0, 0, max_count=8, columns=cols)
            assert r.messages.column_names == cols and r.messages.equals(full.select(cols))
        r = ms.read_window("t", 0, 0, max_count=8, columns=("body",), tags="B")
        assert r.messages.column_names == ["body"] and r.messages["body"].to_pylist() == [b"b0", b"b6"]
        empty = ms.read_window("t", 0, 4, max_count=8, columns=["body"])
        assert empty.messages.column_names == ["body"] and empty.messages.num_rows == 0
        for bad in (["nope"], ["body", "body"], [], "body", [1]):
            with pytest.raises(rmqlog.InvalidArgumentError, match="columns"):
                ms.read_window("t", 0, 0, columns=bad)
