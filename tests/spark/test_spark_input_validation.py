"""The rmqlog sink passes the store's input validation through: a reserved property name or an
out-of-range queue id / flag fails the task with the store's typed error, nothing appended."""

from __future__ import annotations

import pyarrow as pa
import pytest

import rmqlog
from spark_rmq.options import SinkOptions
from spark_rmq.sink import to_put_table


def write(df, root: str, **options: str) -> None:
    df.write.format("rmqlog").option("path", root).options(**options).mode("append").save()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("RMQLOG_WRITER", r"row 3, field 'properties'.*RMQLOG_WRITER.*reserved for the store"),
        ("TIMER_DELIVER_MS", r"row 3, field 'properties'.*TIMER_DELIVER_MS is '999 evil', not a number"),
        ("TIMER_OUT_MS", r"row 3, field 'properties'.*set by the store's timer"),
        ("DELAY", r"row 3, field 'properties'.*not a delay level"),
        ("TRAN_MSG", r"row 3, field 'properties'.*'TRAN_MSG' is a RocketMQ system property"),
    ],
)
def test_a_reserved_property_fails_the_task(spark, store_root: str, name: str, message: str) -> None:
    rows = [(f"b{i}", "orders", {name if i == 3 else "p": "999 evil"}) for i in range(6)]
    df = spark.createDataFrame(rows, "body string, topic string, properties map<string,string>").coalesce(1)
    with pytest.raises(Exception, match=message):
        write(df, store_root)
    with rmqlog.MessageStore.open(store_root) as ms:
        assert ms.published_tail() == 0


def test_a_long_queue_id_or_flag_is_named(spark, store_root: str) -> None:
    df = spark.createDataFrame(
        [("a", "orders", 0, 1), ("b", "orders", 2**31, 1)], "body string, topic string, queueId long, flag long"
    )
    with pytest.raises(Exception, match=r"row 1, field 'queueId'"):
        write(df.coalesce(1), store_root)
    df = spark.createDataFrame([("a", "orders", 2**40)], "body string, topic string, flag long")
    with pytest.raises(Exception, match=r"row 0, field 'flag'"):
        write(df.coalesce(1), store_root)
    with rmqlog.MessageStore.open(store_root) as ms:
        assert ms.published_tail() == 0


def test_to_put_table_leaves_wide_integers_to_the_store(tmp_path) -> None:
    """No narrowing cast in the sink (it raised an untyped ArrowInvalid): the store names the row."""
    opts = SinkOptions.parse({"path": str(tmp_path)})
    tbl = pa.table(
        {
            "topic": ["T", "T"],
            "body": ["a", "b"],
            "queueId": pa.array([0, 2**31], pa.int64()),
            "flag": pa.array([1, 2**33], pa.int64()),
        }
    )
    with rmqlog.MessageStore.open(tmp_path) as ms:
        put = to_put_table(tbl, opts, ms)
        with pytest.raises(rmqlog.QueueIdError) as info:
            ms.put_batches([put])
        assert (info.value.row, info.value.field) == (1, "queueId")
        with pytest.raises(rmqlog.InvalidMessageError) as info2:
            ms.put_batches([to_put_table(tbl.drop_columns(["queueId"]), opts, ms)])
        assert (info2.value.row, info2.value.field) == (1, "flag")
        assert ms.published_tail() == 0


def test_discovery_ignores_folders_that_are_not_topics_or_queues(tmp_path) -> None:
    from spark_rmq.offsets import discover_queues
    from spark_rmq.options import SourceOptions

    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as ms:
        ms.create_topic("T", 2)
        ms.put("T", b"x", queue_id=0)
        ms.dispatch()
    for stray in ("bad name/0", "T/\u0663", "T/007", "T/5"):
        (root / "consumequeue" / stray).mkdir(parents=True)
    opts = SourceOptions.parse({"path": str(root), "topicPattern": ".*"}, streaming=False)
    with rmqlog.MessageStore.open(root) as ms:
        assert discover_queues(ms, opts) == [("T", 0), ("T", 1), ("T", 5)]


def test_offsets_option_queue_ids_are_ascii_digits() -> None:
    from spark_rmq.errors import RmqLogOptionError
    from spark_rmq.options import parse_offsets_json

    assert parse_offsets_json("startingOffsets", '{"T/3": 5}') == {"T/3": 5}
    with pytest.raises(RmqLogOptionError, match="topic/queueId"):
        parse_offsets_json("startingOffsets", '{"T/\\u0663": 5}')


def test_a_flag_option_not_exactly_true_or_false_fails_the_read(spark, store_root: str) -> None:
    # "yes" was once read as true: a value not exactly valid is refused, named
    reader = spark.read.format("rmqlog").option("path", store_root).option("topics", "orders")
    with pytest.raises(Exception, match=r"failOnDataLoss.*not a boolean \(true or false\), got 'yes'"):
        reader.option("failOnDataLoss", "yes").load().collect()
