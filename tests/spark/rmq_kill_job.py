"""Subprocess of test_spark_exactly_once: a stream rmqlog -> rmqlog that stops mid-batch.

    python rmq_kill_job.py SRC DST CHECKPOINT MARKER

Batch 1's task for partition 0 appends its rows, then writes MARKER and hangs (as if the
machine froze right after the append, before Spark could record the batch as committed).
The test kills this whole process group with SIGKILL when MARKER appears.
"""

from __future__ import annotations

import os
import sys
import time

import spark_rmq
from spark_rmq.sink import RmqLogStreamArrowWriter
from spark_rmq.source import RmqLogDataSource


class HangingWriter(RmqLogStreamArrowWriter):
    def write(self, iterator):  # type: ignore[no-untyped-def]
        from pyspark import TaskContext

        msg = self._append(iterator)
        ctx = TaskContext.get()
        if ctx.getLocalProperty("streaming.sql.batchId") == "1" and ctx.partitionId() == 0:
            with open(os.environ["RMQ_KILL_MARKER"], "w") as f:
                f.write(str(msg))
            time.sleep(3600)  # (hangs the task until the test kills its process)
        return msg


class HangingSource(RmqLogDataSource):
    @classmethod
    def name(cls) -> str:
        return "rmqlog_hang"

    def streamWriter(self, schema, overwrite):  # type: ignore[no-untyped-def]
        return HangingWriter(self.options, schema, overwrite)


def main() -> None:
    src, dst, checkpoint, marker = sys.argv[1:5]
    os.environ["RMQ_KILL_MARKER"] = marker
    spark = spark_rmq.local_session("rmq-kill-job", conf={"spark.executorEnv.RMQ_KILL_MARKER": marker})
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(HangingSource)
    q = (
        spark.readStream.format("rmqlog")
        .option("path", src)
        .option("topics", "in")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "60")
        .load()
        .selectExpr("body", "keys", "'out' AS topic")
        .writeStream.format("rmqlog_hang")
        .option("path", dst)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")
        .start()
    )
    q.awaitTermination()


if __name__ == "__main__":
    main()
