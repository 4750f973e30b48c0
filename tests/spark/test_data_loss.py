"""The source and retention: data loss is reported exactly when a query's next offsets fall
below a queue's new first offset (``failOnDataLoss=true`` fails naming the queue and range;
``false`` skips to the first offset still stored), through Spark, with segments deleted by
the store's own retention pass (``clean_expired``)."""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import rmqlog
from spark_rmq.errors import QueryDataLossError
from spark_rmq.options import SourceOptions
from spark_rmq.read import QueueRange, read_range
from spark_rmq.stream_reader import RmqLogStreamReader

SEG = 4096
BODY = 266  # 400-byte records: 10 per segment


def _cfg() -> rmqlog.StoreConfig:
    return rmqlog.StoreConfig(mapped_file_size_commit_log=SEG, mapped_file_size_consume_queue=20 * 50)


def put(root: str, n: int, *, first: int = 0, queues: int = 2) -> None:
    """Messages ``first..first+n`` of topic ``orders`` (body ``m<i>``), round robin over ``queues``."""
    with rmqlog.MessageStore.open(root, _cfg()) as ms:
        if "orders" not in ms.topics():
            ms.create_topic("orders", queues)
        ms.put_batch(
            pa.table(
                {
                    "topic": ["orders"] * n,
                    "body": [f"m{i}".encode().ljust(BODY, b".") for i in range(first, first + n)],
                    "queueId": pa.array([i % queues for i in range(first, first + n)], pa.int32()),
                }
            )
        )
        ms.dispatch()
        ms.flush()


def retain(root: str, segments: int, queues: int = 2) -> dict[str, int]:
    """Delete the ``segments`` oldest commitlog segments with a retention pass (their last
    write made old enough, at the hour of ``delete_when``); returns each queue's new first offset."""
    now = dt.datetime.now()
    at_4 = int(dt.datetime(now.year, now.month, now.day, 4, 0).timestamp() * 1000) + 24 * 3600 * 1000
    files = sorted(Path(root, "commitlog").iterdir())
    for i, path in enumerate(files):
        t = at_4 / 1000 - (100 if i < segments else 1) * 3600
        os.utime(path, (t, t))
    with rmqlog.MessageStore.open(root, _cfg().replace(delete_commit_log_files_max_num=1000)) as ms:
        ms.retention.disk_used = lambda path: 10.0
        report = ms.clean_expired(at_4)
        assert len(report.segments) == segments, report
        return {f"orders/{q}": ms.min_offset("orders", q) for q in range(queues)}


def bodies(rows: list) -> list[int]:
    return sorted(int(bytes(r["body"]).split(b".")[0][1:]) for r in rows)


def read(spark, root: str, **options: str):
    return spark.read.format("rmqlog").option("path", root).option("topics", "orders").options(**options).load()


def test_batch_reports_exactly_the_lost_range(spark, store_root: str) -> None:
    put(store_root, 200)
    first = retain(store_root, 6)  # messages 0..59: queue offsets 0..29
    assert first == {"orders/0": 30, "orders/1": 30}
    with pytest.raises(Exception, match=r"data loss on queue orders/0: offsets \[0, 30\)") as err:
        read(spark, store_root, startingOffsets='{"orders/0": 0, "orders/1": 30}').count()
    assert "failOnDataLoss" in str(err.value)
    with pytest.raises(Exception, match=r"data loss on queue orders/1: offsets \[29, 30\)"):
        read(spark, store_root, startingOffsets='{"orders/0": 30, "orders/1": 29}').count()
    exact = read(
        spark, store_root, startingOffsets='{"orders/0": 30, "orders/1": 30}'
    ).collect()  # the boundary: no loss
    assert bodies(exact) == list(range(60, 200))
    assert bodies(read(spark, store_root).collect()) == list(range(60, 200))  # earliest: from the first offset stored
    lenient = read(
        spark, store_root, startingOffsets='{"orders/0": 0, "orders/1": 0}', failOnDataLoss="false"
    ).collect()
    assert bodies(lenient) == list(range(60, 200))


def _stream(spark, root: str, out: Path, ck: Path, **options: str) -> None:
    q = (
        spark.readStream.format("rmqlog")
        .option("path", root)
        .option("topics", "orders")
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
        .select("queueId", "queueOffset", "body")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    try:
        q.awaitTermination(300)
    finally:
        q.stop()
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))


def test_stream_fails_then_skips_exactly_the_lost_range(spark, store_root: str, tmp_path: Path) -> None:
    out, ck = tmp_path / "out", tmp_path / "ck"
    put(store_root, 100)
    _stream(spark, store_root, out, ck)
    assert bodies(spark.read.parquet(str(out)).collect()) == list(range(100))  # next offsets: 50 per queue
    put(store_root, 200, first=100)
    assert retain(store_root, 5) == {"orders/0": 25, "orders/1": 25}  # only what the query already read
    _stream(spark, store_root, out, ck)  # no loss: nothing it still needed went
    assert bodies(spark.read.parquet(str(out)).collect()) == list(range(300))
    put(store_root, 100, first=300)  # queue offsets 150..199
    assert retain(store_root, 30) == {"orders/0": 175, "orders/1": 175}  # messages 0..349 gone: 300..349 unread
    with pytest.raises(Exception, match=r"data loss on queue orders/0: offsets \[150, 175\)"):
        _stream(spark, store_root, out, ck)
    _stream(spark, store_root, out, ck, failOnDataLoss="false")  # skips to the first offset stored
    assert bodies(spark.read.parquet(str(out)).collect()) == list(range(300)) + list(range(350, 400))


def test_read_overtaken_by_retention_names_the_range(store_root: str) -> None:
    """An executor's read that retention overtook between two windows (its queue's segment and
    records gone): the error names the range from where it stood to the queue's new first
    offset; with failOnDataLoss=false it goes on from there, missing nothing still stored."""
    put(store_root, 300, queues=1)
    for fail in (True, False):
        root = f"{store_root}-{fail}"
        shutil.copytree(store_root, root)
        part = QueueRange(root, "orders", 0, 0, 300, fail_on_data_loss=fail, batch_rows=50)
        batches = read_range(part)
        first = next(batches)
        assert first.column("queueOffset").to_pylist() == list(range(50))
        assert retain(root, 12, queues=1) == {"orders/0": 120}  # queue files 0..99 and records 0..119 gone
        if fail:
            with pytest.raises(QueryDataLossError) as err:
                next(batches)
            assert (err.value.queue, err.value.start, err.value.available) == ("orders/0", 50, 120)
            assert isinstance(err.value, rmqlog.MessagesDeletedError) and err.value.end == 120
        else:
            rest = [o for b in batches for o in b.column("queueOffset").to_pylist()]
            assert rest == list(range(120, 300))


def test_lenient_stream_skips_a_deleted_range_in_one_step(
    spark, store_root: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With failOnDataLoss=false and maxMessagesPerTrigger, a stream whose
    next offsets retention deleted (600 of them) skips to the queue's first offset in one step:
    its first micro-batch has data and the skip is one warning, not one empty micro-batch and
    one warning per 100 deleted offsets."""
    put(store_root, 1000, queues=1)
    opts = {
        "path": store_root,
        "topics": "orders",
        "startingOffsets": '{"orders/0": 0}',
        "failOnDataLoss": "false",
        "maxMessagesPerTrigger": "100",
    }
    reader = RmqLogStreamReader(SourceOptions.parse(opts, streaming=True))
    start = reader.initialOffset()
    assert start == {"orders/0": 0}
    assert retain(store_root, 60, queues=1) == {"orders/0": 600}
    with caplog.at_level(logging.WARNING, logger="spark_rmq"):
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert end == {"orders/0": 700}
        rows = [r for p in reader.partitions(start, end) for b in reader.read(p) for r in b.to_pylist()]
        assert bodies(rows) == list(range(600, 700))
        assert reader.latestOffset(start, reader.getDefaultReadLimit()) == end  # planned again: no new warning
    skips = [r.getMessage() for r in caplog.records if "retention" in r.getMessage()]
    assert skips == ["rmqlog: queue orders/0 lost offsets [0, 600) to retention; skipping them (failOnDataLoss=false)"]
    reader.stop()

    q = (
        spark.readStream.format("rmqlog")
        .options(**opts)
        .load()
        .select("body")
        .writeStream.format("memory")
        .queryName("lenient_skip")
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    assert q.exception() is None
    batches = [p["numInputRows"] for p in q.recentProgress]
    assert batches == [100, 100, 100, 100]  # the first micro-batch has data; none is empty
    assert bodies(spark.table("lenient_skip").collect()) == list(range(600, 1000))


@pytest.mark.parametrize("fail", [True, False], ids=["fail", "lenient"])
def test_a_queue_that_now_ends_below_the_query_is_reported_not_skipped(
    store_root: str, fail: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A stream read a queue to offset 10 and stopped; then its log was cut (a repair) or the
    store replaced, and the query restarted from its checkpoint: the queue now ends at 3, and
    the offsets from there on name new messages. The source used to wait at 10, skipping every
    new message below it without a word. failOnDataLoss=true fails naming the queue and both
    offsets; false goes on from the queue's end (one warning), so the new messages are read."""
    put(store_root, 10, queues=1)
    opts = {
        "path": store_root,
        "topics": "orders",
        "startingOffsets": '{"orders/0": 0}',
        "failOnDataLoss": str(fail).lower(),
    }
    first = RmqLogStreamReader(SourceOptions.parse(opts, streaming=True))
    read_to = first.latestOffset(first.initialOffset(), first.getDefaultReadLimit())
    assert read_to == {"orders/0": 10}
    first.stop()
    shutil.rmtree(store_root)
    put(store_root, 3, queues=1)  # the replaced store: offsets 0..2
    reader = RmqLogStreamReader(SourceOptions.parse(opts, streaming=True))  # restarted from the checkpoint
    with caplog.at_level(logging.WARNING, logger="spark_rmq"):
        if fail:
            with pytest.raises(QueryDataLossError, match=r"queue orders/0: it now ends at offset 3, below offset 10"):
                reader.latestOffset(read_to, reader.getDefaultReadLimit())
            reader.stop()
            return
        end = reader.latestOffset(read_to, reader.getDefaultReadLimit())
        assert end == {"orders/0": 3}
        assert reader.latestOffset(read_to, reader.getDefaultReadLimit()) == end  # planned again: one warning
        assert [b for p in reader.partitions(read_to, end) for b in reader.read(p) if b.num_rows] == []
        put(store_root, 4, first=3, queues=1)  # new messages, offsets 3..6
        later = reader.latestOffset(end, reader.getDefaultReadLimit())
        assert later == {"orders/0": 7}
        rows = [r for p in reader.partitions(end, later) for b in reader.read(p) for r in b.to_pylist()]
        assert bodies(rows) == [3, 4, 5, 6]
    reader.stop()
    assert [r.getMessage() for r in caplog.records if "now ends at" in r.getMessage()] == [
        "rmqlog: queue orders/0 now ends at 3, below offset 10 the query had read to (the log was cut or the store "
        "replaced); going on from 3 (failOnDataLoss=false)"
    ]
