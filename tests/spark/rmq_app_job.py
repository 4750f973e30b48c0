"""Subprocess of test_spark_app_end: a whole Spark application on a store, then ``spark.stop()``.

    python rmq_app_job.py ROOT CHECKPOINTS MODE

Its own local session (``local[2,4]``: task attempts are retried). It writes 200 messages
with ``df.write`` (hash routing), reads them back with a batch read, a stream stopped with
``query.stop()`` and an AvailableNow stream into a second topic, runs a plain Python UDF job
(the workers that held the store run a task that does not use it), and stops Spark.

MODE ``kill``: the first attempt of the write's partition 0 appends, writes its pid to
``CHECKPOINTS/victim`` and waits to be killed; the test SIGKILLs that worker alone and the
application carries on (the retried attempt is a replay, a no-op).
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


def main() -> None:
    root, checkpoints, mode = sys.argv[1:4]
    os.environ["RMQ_APP_CHECKPOINTS"] = checkpoints
    os.makedirs(checkpoints, exist_ok=True)
    spark = spark_rmq.local_session("rmq-app", master="local[2,4]", conf={
        "spark.task.maxFailures": "4", "spark.sql.shuffle.partitions": "2",
        "spark.executorEnv.RMQ_APP_CHECKPOINTS": checkpoints,
    })
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(VictimSource)
    fmt = "rmqlog_victim" if mode == "kill" else "rmqlog"
    (spark.range(200, numPartitions=2)
     .selectExpr("'orders' AS topic", "CAST(id AS STRING) AS body", "array(CAST(id % 7 AS STRING)) AS keys")
     .write.format(fmt).option("path", root).option("queueSelector", "hash").mode("append").save())
    n = spark.read.format("rmqlog").option("path", root).option("topics", "orders").load().count()
    assert n == 200, n
    q = (spark.readStream.format("rmqlog").option("path", root).option("topics", "orders")
         .option("startingOffsets", "earliest").load()
         .writeStream.format("memory").queryName("back").option("checkpointLocation", f"{checkpoints}/back").start())
    q.processAllAvailable()
    q.stop()
    assert spark.table("back").count() == 200
    q = (spark.readStream.format("rmqlog").option("path", root).option("topics", "orders")
         .option("startingOffsets", "earliest").load().selectExpr("body", "'copy' AS topic")
         .writeStream.format("rmqlog").option("path", root).option("checkpointLocation", f"{checkpoints}/copy")
         .trigger(availableNow=True).start())
    q.awaitTermination()
    from pyspark.sql.functions import udf

    plus_one = udf(lambda x: x + 1, "long")
    assert spark.range(100, numPartitions=4).select(plus_one("id").alias("x")).groupBy().sum("x").first()[0] == 5050
    spark.stop()
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
