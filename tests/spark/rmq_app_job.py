"""Subprocess of test_spark_app_end: a whole Spark application on stores, then ``spark.stop()``.

    python rmq_app_job.py ROOT CHECKPOINTS MODE [ROOT CHECKPOINTS MODE ...]

Its own local session (``local[2,4]``: task attempts are retried). On each store in turn it
writes 200 messages with ``df.write`` (hash routing), reads them back with a batch read, a
stream stopped with ``query.stop()`` and an AvailableNow stream into a second topic, and runs
a plain Python UDF job (the workers that held the store run a task that does not use it);
then it stops Spark.

MODE ``kill``: the first attempt of the write's partition 0 appends, writes its pid to
``CHECKPOINTS/victim`` and waits to be killed; the test SIGKILLs that worker alone and the
application carries on (the retried attempt is a replay, a no-op). MODE ``clean``: nothing
is killed. A ``kill`` store comes first (at most one): a ``clean`` store is then only ever
opened by processes alive when the application ends (the victim died before it was touched).
"""

from __future__ import annotations

import os
import sys
import time

import spark_rmq
from spark_rmq.sink import RmqLogArrowWriter
from spark_rmq.source import RmqLogDataSource


class VictimWriter(RmqLogArrowWriter):
    def write(self, iterator):  # type: ignore[no-untyped-def]
        from pyspark import TaskContext

        msg = self._append(iterator)
        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            victim = os.path.join(os.environ["RMQ_APP_CHECKPOINTS"], "victim")
            with open(victim + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(victim + ".tmp", victim)
            time.sleep(3600)  # (hangs the task until the test kills its process)
        return msg


class VictimSource(RmqLogDataSource):
    @classmethod
    def name(cls) -> str:
        return "rmqlog_victim"

    def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
        return VictimWriter(self.options, schema, overwrite)


def run(spark, root: str, checkpoints: str, mode: str) -> None:  # type: ignore[no-untyped-def]
    """The application's jobs on one store (MODE ``kill`` or ``clean``)."""
    os.makedirs(checkpoints, exist_ok=True)
    fmt = "rmqlog_victim" if mode == "kill" else "rmqlog"
    (
        spark.range(200, numPartitions=2)
        .selectExpr("'orders' AS topic", "CAST(id AS STRING) AS body", "array(CAST(id % 7 AS STRING)) AS keys")
        .write.format(fmt)
        .option("path", root)
        .option("queueSelector", "hash")
        .mode("append")
        .save()
    )
    n = spark.read.format("rmqlog").option("path", root).option("topics", "orders").load().count()
    assert n == 200, n
    back = f"back_{mode}"
    q = (
        spark.readStream.format("rmqlog")
        .option("path", root)
        .option("topics", "orders")
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("memory")
        .queryName(back)
        .option("checkpointLocation", f"{checkpoints}/back")
        .start()
    )
    q.processAllAvailable()
    q.stop()
    assert spark.table(back).count() == 200
    q = (
        spark.readStream.format("rmqlog")
        .option("path", root)
        .option("topics", "orders")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("body", "'copy' AS topic")
        .writeStream.format("rmqlog")
        .option("path", root)
        .option("checkpointLocation", f"{checkpoints}/copy")
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    from pyspark.sql.functions import udf

    plus_one = udf(lambda x: x + 1, "long")
    assert spark.range(100, numPartitions=4).select(plus_one("id").alias("x")).groupBy().sum("x").first()[0] == 5050


def main() -> None:
    args = sys.argv[1:]
    parts = [tuple(args[i : i + 3]) for i in range(0, len(args), 3)]
    modes = [mode for _, _, mode in parts]
    assert parts and all(len(p) == 3 for p in parts) and set(modes) <= {"kill", "clean"}, args
    assert modes.count("kill") <= 1 and "kill" not in modes[1:], "a kill store comes first"
    victim_checkpoints = parts[0][1]  # (where the victim writes its pid, in MODE kill)
    os.environ["RMQ_APP_CHECKPOINTS"] = victim_checkpoints
    spark = spark_rmq.local_session(
        "rmq-app",
        master="local[2,4]",
        conf={
            "spark.task.maxFailures": "4",
            "spark.sql.shuffle.partitions": "2",
            "spark.executorEnv.RMQ_APP_CHECKPOINTS": victim_checkpoints,
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(VictimSource)
    for root, checkpoints, mode in parts:
        run(spark, root, checkpoints, mode)
    spark.stop()
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
