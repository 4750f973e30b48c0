"""``spark.read.format("rmqlog")`` with ``key`` / ``msgId``: messages found through the
index files, as a batch DataFrame; options checked before any work."""

from __future__ import annotations

import pyarrow as pa
import pytest

import rmqlog
from spark_rmq.errors import RmqLogOptionError
from spark_rmq.options import SourceOptions


def _fill(root: str) -> str:
    with rmqlog.MessageStore.open(root) as s:
        s.put_batch(
            pa.table(
                {
                    "topic": ["orders"] * 6 + ["other"] * 2,
                    "body": [f"o{i}".encode() for i in range(6)] + [b"x0", b"x1"],
                    "keys": [[f"order-{i % 3}"] for i in range(6)] + [["order-1"], ["order-1"]],
                }
            )
        )
        s.dispatch()
        return dict(s.read_queue("orders", 0, 0, 1).to_pylist()[0]["properties"])["UNIQ_KEY"]


def test_batch_read_by_key_and_by_msgid(spark, store_root: str) -> None:
    uniq = _fill(store_root)

    def reader():  # a DataFrameReader keeps its options: a new one per read
        return spark.read.format("rmqlog").option("path", store_root)

    by_key = reader().option("topics", "orders").option("key", "order-1").load()
    assert sorted(bytes(r.body) for r in by_key.select("body").collect()) == [b"o1", b"o4"]
    both = reader().option("topics", "orders,other").option("key", "order-1").load()
    assert both.filter("topic = 'other'").count() == 2 and both.count() == 4  # Spark's own filter applies
    one = reader().option("topics", "orders").option("msgId", uniq).load().collect()
    assert len(one) == 1 and bytes(one[0].body).startswith(b"o")


@pytest.mark.parametrize(
    ("options", "name", "reason"),
    [
        ({"topicPattern": "t.*", "key": "k"}, "key", "needs the topics option"),
        ({"topics": "t", "key": "k", "msgId": "0" * 32}, "msgId", "cannot be combined with key"),
        ({"topics": "t", "msgId": "xyz"}, "msgId", "not a client msgId"),
        ({"topics": "t", "key": "k", "startingOffsets": "earliest"}, "key", "cannot be combined with startingOffsets"),
        ({"topics": "t", "key": ""}, "key", "must not be empty"),
    ],
)
def test_key_options_are_checked(options: dict[str, str], name: str, reason: str) -> None:
    with pytest.raises(RmqLogOptionError, match=reason) as err:
        SourceOptions.parse({"path": "/x", **{k.lower(): v for k, v in options.items()}}, streaming=False)
    assert err.value.option.lower() == name.lower()


def test_key_is_for_batch_reads_only() -> None:
    with pytest.raises(RmqLogOptionError, match="batch"):
        SourceOptions.parse({"path": "/x", "topics": "t", "key": "k"}, streaming=True)
