"""Delayed and timed messages written through the Spark sink (columns ``delayLevel`` and
``deliverTime``) reach their real queue only once due; the streaming source runs a scheduler pass before planning each
micro-batch (option ``deliverDue``), so a stream sees them then, exactly once."""

from __future__ import annotations

import datetime
import time

import rmqlog


def _stream_bodies(spark, root: str, name: str) -> list[bytes]:  # type: ignore[no-untyped-def]
    q = (spark.readStream.format("rmqlog").option("path", root).option("topics", "orders")
         .option("startingOffsets", "earliest").load()
         .writeStream.format("memory").queryName(name).trigger(availableNow=True).start())
    q.awaitTermination()
    return sorted(bytes(r.body) for r in spark.table(name).select("body").collect())


def test_delayed_rows_from_the_sink_are_streamed_once_due(spark, store_root: str) -> None:
    rows = [("now-1", "orders", None), ("later", "orders", 1), ("now-2", "orders", 0)]
    df = spark.createDataFrame(rows, "body string, topic string, delayLevel int").coalesce(1)
    df.write.format("rmqlog").option("path", store_root).mode("append").save()
    written = time.time()
    with rmqlog.MessageStore.open(store_root) as ms:
        ms.dispatch()
        assert ms.max_offset("SCHEDULE_TOPIC_XXXX", 0) == 1  # level 1 waits in queue 0
    assert _stream_bodies(spark, store_root, "delay_before") in ([b"now-1", b"now-2"], [b"later", b"now-1", b"now-2"])
    time.sleep(max(0.0, written + 1.2 - time.time()))  # level 1 is one second (the source uses the wall clock)
    assert _stream_bodies(spark, store_root, "delay_after") == [b"later", b"now-1", b"now-2"]
    assert _stream_bodies(spark, store_root, "delay_again") == [b"later", b"now-1", b"now-2"]  # once


def test_timed_rows_from_the_sink_are_streamed_once_due(spark, store_root: str) -> None:
    at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1.5)
    rows = [("now", "orders", None), ("timed", "orders", at), ("past", "orders", at - datetime.timedelta(hours=1))]
    df = spark.createDataFrame(rows, "body string, topic string, deliverTime timestamp").coalesce(1)
    df.write.format("rmqlog").option("path", store_root).mode("append").save()
    with rmqlog.MessageStore.open(store_root) as ms:
        ms.dispatch()
        assert ms.max_offset("rmq_sys_wheel_timer", 0) == 1  # only the one ahead waits
    assert _stream_bodies(spark, store_root, "timer_before") in ([b"now", b"past"], [b"now", b"past", b"timed"])
    time.sleep(max(0.0, at.timestamp() + 1.2 - time.time()))  # due within the timer's precision (1 s)
    assert _stream_bodies(spark, store_root, "timer_after") == [b"now", b"past", b"timed"]
    assert _stream_bodies(spark, store_root, "timer_again") == [b"now", b"past", b"timed"]  # once
