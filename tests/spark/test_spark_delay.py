"""Delayed and timed messages written through the Spark sink (columns ``delayLevel`` and
``deliverTime``) reach their real queue only once due; the streaming source runs a scheduler pass before planning each
micro-batch (option ``deliverDue``), so a stream sees them then, exactly once.

Never early, checked exactly: a message due in hours is never streamed, and every delivered
copy a stream reads was stored (delivered) at or after the time it was due, whenever the
stream happened to run. The source's passes go by the wall clock of Spark's driver-side
Python worker, a process of its own: a clock object of the test's process cannot reach it
(a pickled copy would not move when the test moves it). So nothing waits for the one-second
message to fall due: the test delivers it through the store API, a pass by a store whose
clock (:class:`rmqlog.ManualClock`) is set past its due time, and the next stream reads it.
"""

from __future__ import annotations

import datetime
import time

import rmqlog

S = "SCHEDULE_TOPIC_XXXX"


def _stream(spark, root: str, name: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """body -> store time (ms) of what an AvailableNow stream of ``orders`` reads."""
    q = (
        spark.readStream.format("rmqlog")
        .option("path", root)
        .option("topics", "orders")
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    rows = (
        spark.table(name).selectExpr("CAST(body AS STRING) AS body", "unix_millis(storeTimestamp) AS stored").collect()
    )
    got = {r.body: r.stored for r in rows}
    assert len(got) == len(rows), rows  # once
    return got


def _deliver_at(root: str, ms: int) -> None:
    """A scheduler pass as of ``ms`` (ahead of the machine's clock): what is due by then is
    delivered now, by a store whose clock reads ``ms``."""
    with rmqlog.MessageStore.open(root, clock=rmqlog.ManualClock(ms)) as s:
        s.deliver_due()


def test_delayed_rows_from_the_sink_are_streamed_once_due(spark, store_root: str) -> None:
    rows = [("now-1", "orders", None), ("later", "orders", 1), ("now-2", "orders", 0), ("hours", "orders", 18)]
    df = spark.createDataFrame(rows, "body string, topic string, delayLevel int").coalesce(1)
    df.write.format("rmqlog").option("path", store_root).mode("append").save()
    with rmqlog.MessageStore.open(store_root) as ms:
        ms.dispatch()
        assert (ms.max_offset(S, 0), ms.max_offset(S, 17)) == (1, 1)  # level 1 waits in queue 0, level 18 in 17
        due = int(ms.consume_queue(S, 0).read(0, 1)["tagsCode"][0])  # the unit's tagsCode: when it is due
    before = _stream(spark, store_root, "delay_before")
    assert {"now-1", "now-2"} <= set(before) <= {"now-1", "now-2", "later"}  # never the two-hour one
    assert before.get("later", due) >= due  # streamed before it was due only if delivered at or after due
    _deliver_at(store_root, due + 200)  # (the source's own passes run on Spark's wall clock)
    after = _stream(spark, store_root, "delay_after")
    assert set(after) == {"later", "now-1", "now-2"} and after["later"] >= due
    assert _stream(spark, store_root, "delay_again") == after  # once


def test_timed_rows_from_the_sink_are_streamed_once_due(spark, store_root: str) -> None:
    now = datetime.datetime.now(datetime.UTC)
    hours = now + datetime.timedelta(hours=2)
    rows = [("now", "orders", None), ("past", "orders", now - datetime.timedelta(hours=1)), ("hours", "orders", hours)]
    df = spark.createDataFrame(rows, "body string, topic string, deliverTime timestamp").coalesce(1)
    df.write.format("rmqlog").option("path", store_root).mode("append").save()
    with rmqlog.MessageStore.open(store_root) as ms:
        ms.dispatch()
        [waiting] = ms.read_queue("rmq_sys_wheel_timer", 0, 0, 10).to_pylist()  # only the one ahead waits
        assert waiting["body"] == b"hours"
        assert dict(waiting["properties"])["TIMER_DELIVER_MS"] == str(int(hours.timestamp() * 1000))
        # one due in 1.5 s, put directly: a Spark write on a loaded machine can take longer than that
        due = int(time.time() * 1000) + 1500
        ms.put("orders", b"timed", deliver_time_ms=due)
    before = _stream(spark, store_root, "timer_before")
    assert {"now", "past"} <= set(before) <= {"now", "past", "timed"}  # never the one due in two hours
    assert before.get("timed", due) >= due  # to the millisecond asked for, never early
    _deliver_at(store_root, due + 1200)  # (the timer's precision is 1 s)
    after = _stream(spark, store_root, "timer_after")
    assert set(after) == {"now", "past", "timed"} and after["timed"] >= due
    assert _stream(spark, store_root, "timer_again") == after  # once
