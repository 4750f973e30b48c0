"""The source's ``readOnly`` option: a batch read, a key lookup and a stream over a store
change nothing in it (no dispatch, no delivery, no file created, on the driver or on the
executors); what is not dispatched yet is not read."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from conftest import snapshot_tree as snapshot

import rmqlog
from spark_rmq.errors import RmqLogOptionError
from spark_rmq.options import SourceOptions


def _fill(root: str) -> None:
    with rmqlog.MessageStore.open(root) as s:
        s.put_batch(
            pa.table(
                {
                    "topic": ["orders"] * 6,
                    "body": [b"o%d" % i for i in range(6)],
                    "keys": [[f"order-{i}"] for i in range(6)],
                    "queueId": [0, 1] * 3,
                }
            ),
            dispatch=True,
        )
        s.put_batch(pa.table({"topic": ["orders"] * 3, "body": [b"late"] * 3}))  # not dispatched


def test_batch_and_stream_reads_change_nothing(spark, store_root: str, tmp_path: Path) -> None:
    _fill(store_root)
    before = snapshot(Path(store_root))

    def reader():
        return (
            spark.read.format("rmqlog").option("path", store_root).option("topics", "orders").option("readOnly", "true")
        )

    assert sorted(bytes(r.body) for r in reader().load().select("body").collect()) == [b"o%d" % i for i in range(6)]
    assert [bytes(r.body) for r in reader().option("key", "order-4").load().collect()] == [b"o4"]
    q = (
        spark.readStream.format("rmqlog")
        .option("path", store_root)
        .option("topics", "orders")
        .option("startingOffsets", "earliest")
        .option("readOnly", "true")
        .load()
        .writeStream.format("memory")
        .queryName("read_only_stream")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        q.awaitTermination(120)
        assert spark.sql("select count(*) from read_only_stream").collect()[0][0] == 6
    finally:
        q.stop()
    assert snapshot(Path(store_root)) == before
    # without readOnly the read dispatches first: the three late messages are read too
    assert spark.read.format("rmqlog").option("path", store_root).option("topics", "orders").load().count() == 9


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"readOnly": "true", "group": "g"}, "group"),
        ({"readOnly": "true", "deliverDue": "true"}, "deliverDue"),
        ({"readOnly": "maybe"}, "readOnly"),
    ],
)
def test_read_only_option_is_checked(options: dict[str, str], name: str) -> None:
    with pytest.raises(RmqLogOptionError) as err:
        SourceOptions.parse({"path": "/x", "topics": "t", **{k.lower(): v for k, v in options.items()}}, streaming=True)
    assert err.value.option.lower() == name.lower()
