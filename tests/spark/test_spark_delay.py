"""Delayed messages written through the Spark sink (column ``delayLevel``) reach their real
queue only once due; the streaming source runs a scheduler pass before planning each
micro-batch (option ``deliverDue``), so a stream sees them then, exactly once."""

from __future__ import annotations

import time

import store


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
    with store.MessageStore.open(store_root) as ms:
        ms.dispatch()
        assert ms.max_offset("SCHEDULE_TOPIC_XXXX", 0) == 1  # level 1 waits in queue 0
    assert _stream_bodies(spark, store_root, "delay_before") in ([b"now-1", b"now-2"], [b"later", b"now-1", b"now-2"])
    time.sleep(max(0.0, written + 1.2 - time.time()))  # level 1 is one second (the source uses the wall clock)
    assert _stream_bodies(spark, store_root, "delay_after") == [b"later", b"now-1", b"now-2"]
    assert _stream_bodies(spark, store_root, "delay_again") == [b"later", b"now-1", b"now-2"]  # once
