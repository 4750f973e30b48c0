"""Exactly-once of the sink: a killed and restarted query, and failing task attempts.

Both end with every input row exactly once in the log (no duplicate, no loss).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark import cloudpickle
from pyspark.sql import functions as F

import rmqlog
from spark_rmq.sink import RmqLogArrowWriter, RmqLogStreamArrowWriter
from spark_rmq.source import RmqLogDataSource

from .spark_helpers import fill

HERE = Path(__file__).resolve().parent
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # executors cannot import tests/


def out_bodies(root: str, topic: str = "out") -> Counter:
    with rmqlog.MessageStore.open(root) as ms:
        ms.dispatch()
        if topic not in ms.topics():
            return Counter()
        n = ms.topics()[topic].read_queue_nums
        return Counter(
            bytes(b).decode() for q in range(n) for b in ms.read_queue(topic, q, 0, 1 << 40)["body"].to_pylist()
        )


def test_killed_stream_restarted_from_checkpoint_writes_each_row_once(spark, tmp_path: Path) -> None:
    src, dst, ck, marker = (str(tmp_path / n) for n in ("src", "dst", "ck", "marker"))
    fill(src, "in", 240, queues=4)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE)])}
    job = subprocess.Popen(
        [sys.executable, str(HERE / "rmq_kill_job.py"), src, dst, ck, marker],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        while not os.path.exists(marker):  # waiting for the subprocess to reach the kill point
            if job.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the streaming job ended (rc={job.returncode}) before batch 1 appended")
            time.sleep(0.2)  # (waits for the Spark job's process)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the driver JVM, its Python workers, everything
        job.wait()
    before = out_bodies(dst)
    assert 0 < sum(before.values()) < 240  # batch 0 and part of batch 1 made it
    assert max(before.values()) == 1

    q = (
        spark.readStream.format("rmqlog")
        .option("path", src)
        .option("topics", "in")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "60")
        .load()
        .selectExpr("body", "keys", "'out' AS topic")
        .writeStream.format("rmqlog")
        .option("path", dst)
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    after = out_bodies(dst)
    assert after == Counter({f"m{i}": 1 for i in range(240)})


class FlakyWriter(RmqLogArrowWriter):
    """Appends, then fails the first attempt of every task: the retry must be a no-op."""

    def write(self, iterator):  # type: ignore[no-untyped-def]
        from pyspark import TaskContext

        msg = self._append(iterator)
        if TaskContext.get().attemptNumber() == 0:
            raise RuntimeError(f"injected failure after appending {msg}")
        return msg


class FlakyStreamWriter(RmqLogStreamArrowWriter):
    def write(self, iterator):  # type: ignore[no-untyped-def]
        from pyspark import TaskContext

        msg = self._append(iterator)
        if TaskContext.get().attemptNumber() == 0:
            raise RuntimeError(f"injected failure after appending {msg}")
        return msg


class FlakySource(RmqLogDataSource):
    @classmethod
    def name(cls) -> str:
        return "rmqlog_flaky"

    def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
        return FlakyWriter(self.options, schema, overwrite)

    def streamWriter(self, schema, overwrite):  # type: ignore[no-untyped-def]
        return FlakyStreamWriter(self.options, schema, overwrite)


def test_failed_task_attempts_write_each_row_once(spark, tmp_path: Path) -> None:
    assert spark.conf.get("spark.task.maxFailures") == "4"
    spark.dataSource.register(FlakySource)
    dst = str(tmp_path / "dst")
    df = spark.range(300).select(F.format_string("m%d", "id").alias("body"), F.lit("out").alias("topic")).repartition(3)
    df.write.format("rmqlog_flaky").option("path", dst).mode("append").save()
    assert out_bodies(dst) == Counter({f"m{i}": 1 for i in range(300)})

    src = str(tmp_path / "src")
    fill(src, "in", 120, queues=3)
    q = (
        spark.readStream.format("rmqlog")
        .option("path", src)
        .option("topics", "in")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "50")
        .load()
        .selectExpr("body", "'out' AS topic")
        .writeStream.format("rmqlog_flaky")
        .option("path", dst)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    want = Counter({f"m{i}": 1 for i in range(300)})
    want.update(f"m{i}" for i in range(120))
    assert out_bodies(dst) == want  # m0..m119 twice: once from each write, never more
