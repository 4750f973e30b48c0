"""The job the Spark host tests submit (:mod:`.spark_hosts`): ``spark-submit spark_job.py
SPEC.json`` runs the spec's steps in order on one session, against the brokers of the spec's
``namesrv`` (option ``nameServer``), and rewrites the spec's ``result`` file (JSON, one entry
per step done, by its ``name``) after each step, so the test sees how far it got.

Steps (``op``):

- ``write`` {topic, n, start, partitions, extra}: ``df.write`` of rows ``start .. start+n-1``
  (body ``row-<i>``, key ``k<i>``) in ``partitions`` tasks; ``extra``: more sink options;
- ``read`` {topic}: ``spark.read`` of the topic; its rows ``[body, brokerName, queueId,
  queueOffset]`` (the broker name is the queue's: ``msgId``'s store host differs per group);
- ``read_stream`` {topic, checkpoint, max_per_trigger}: ``readStream`` from earliest with
  ``Trigger.AvailableNow`` into a memory table; its bodies;
- ``follow`` {topic, checkpoint, n, max_per_trigger, sign, killed, timeout_s, idle_s}: ``readStream``
  from earliest into a memory table, a trigger every 0.5 s, until ``n`` rows arrived, or none
  for ``idle_s`` (10) once rows came, or ``timeout_s`` (120); the file ``sign`` is made once the first
  micro-batch is in; the bodies, whether all came, the query's error, the last micro-batch's end
  offsets (``end``) and, once the file ``killed`` exists (the test made it after a kill), the rows and
  end offsets of the micro-batches done when this loop first saw it (``at_kill``: at least what was
  read when the kill came);
- ``stream_write`` {input, checkpoint, topic, trigger, files_per_trigger, extra}: JSON files
  matching ``input`` (a glob; ``{"id": i}`` lines; ``files_per_trigger`` of them per micro-batch, 2 by default,
  each file a task of its own: a replayed micro-batch brings the same rows in the same order)
  written with ``writeStream`` as rows ``row-<id>``; ``trigger``: ``"available"``
  (``AvailableNow``) or a processing time (``"500 milliseconds"``), which runs until the driver
  is killed;
- ``touch`` {path}; ``wait_file`` {path, timeout_s}: signs to and from the test.

It must not set a master (spark-submit gives it) and imports only pyspark and spark_rmq.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

import spark_rmq

ROWS = "CONCAT('row-', CAST(id AS STRING)) AS body"


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    result = Path(spec["result"])
    spark = spark_rmq.register(SparkSession.builder.appName("rmq-spark-hosts").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    out: dict[str, Any] = {}
    for i, step in enumerate(spec["steps"]):
        out[step.get("name", f"{i}:{step['op']}")] = STEPS[step["op"]](spark, spec["namesrv"], step)
        tmp = result.with_suffix(".tmp")
        tmp.write_text(json.dumps(out))
        tmp.replace(result)
    spark.stop()


def write(spark: SparkSession, namesrv: str, s: dict[str, Any]) -> int:
    start, n = int(s.get("start", 0)), int(s["n"])
    df = spark.range(start, start + n, numPartitions=int(s.get("partitions", 2))).selectExpr(
        ROWS, "CONCAT('k', CAST(id AS STRING)) AS keys"
    )
    df.write.format("rmqlog").option("nameServer", namesrv).option("topic", s["topic"]).options(
        **s.get("extra", {})
    ).mode("append").save()
    return n


def read(spark: SparkSession, namesrv: str, s: dict[str, Any]) -> list[list[Any]]:
    df = spark.read.format("rmqlog").option("nameServer", namesrv).option("topics", s["topic"]).load()
    rows = df.selectExpr("CAST(body AS STRING) AS body", "msgId", "queueId", "queueOffset", "storeHost").collect()
    return [[r.body, r.storeHost, r.queueId, r.queueOffset] for r in rows]


def _stream(spark: SparkSession, namesrv: str, s: dict[str, Any]) -> Any:
    reader = (
        spark.readStream.format("rmqlog")
        .option("nameServer", namesrv)
        .option("topics", s["topic"])
        .option("startingOffsets", "earliest")
    )
    if s.get("max_per_trigger"):
        reader = reader.option("maxMessagesPerTrigger", str(s["max_per_trigger"]))
    return reader.load().selectExpr("CAST(body AS STRING) AS body")


def read_stream(spark: SparkSession, namesrv: str, s: dict[str, Any]) -> list[str]:
    table = f"t{abs(hash(s['checkpoint']))}"
    query = (
        _stream(spark, namesrv, s)
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", s["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return [r.body for r in spark.table(table).collect()]


def follow(spark: SparkSession, namesrv: str, s: dict[str, Any]) -> dict[str, Any]:
    table = f"t{abs(hash(s['checkpoint']))}"
    query = (
        _stream(spark, namesrv, s)
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", s["checkpoint"])
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    deadline = time.monotonic() + float(s.get("timeout_s", 120))
    count = 0
    moved = time.monotonic()
    at_kill: dict[str, Any] | None = None
    killed = s.get("killed")
    # idle only counts once rows came: a first trigger on a loaded machine may take longer
    while time.monotonic() < deadline and (not count or time.monotonic() - moved < float(s.get("idle_s", 10))):
        if query.exception() is not None:
            break
        # (the progress reports, not a job on the table: the executors may be busy with the stream)
        progress = query.recentProgress
        now = sum(int(p["numInputRows"]) for p in progress)
        if killed and at_kill is None and Path(killed).exists():
            at_kill = {"count": now, "end": _end_offsets(progress)}
        if now > count:
            count, moved = now, time.monotonic()
        if count and not Path(s["sign"]).exists():
            Path(s["sign"]).touch()
        if count >= int(s["n"]):
            break
        time.sleep(0.5)  # (waits for the stream)
    error = query.exception()
    query.stop()
    return {
        "bodies": [r.body for r in spark.table(table).collect()],
        "in_time": count >= int(s["n"]),
        "error": None if error is None else str(error)[:2000],
        "end": _end_offsets(query.recentProgress),
        "at_kill": at_kill,
    }


def _end_offsets(progress: Any) -> dict[str, int]:
    """The end offsets (queue key -> offset) of the last micro-batch in ``progress`` that read rows
    (``{}`` before any)."""
    for p in reversed(progress):
        for src in p["sources"]:
            end = src.get("endOffset")
            if end:
                return {k: int(v) for k, v in (json.loads(end) if isinstance(end, str) else end).items()}
    return {}


def stream_write(spark: SparkSession, namesrv: str, s: dict[str, Any]) -> bool:
    spark.conf.set("spark.sql.files.openCostInBytes", str(128 << 20))  # each file a partition of its own
    rows = (
        spark.readStream.schema("id LONG")
        .option("maxFilesPerTrigger", int(s.get("files_per_trigger", 2)))
        .json(s["input"])
        .selectExpr(ROWS, "CONCAT('k', CAST(id AS STRING)) AS keys")
    )
    writer = (
        rows.writeStream.format("rmqlog")
        .option("nameServer", namesrv)
        .option("topic", s["topic"])
        .options(**s.get("extra", {}))
        .option("checkpointLocation", s["checkpoint"])
    )
    trigger = s.get("trigger", "available")
    query = (
        writer.trigger(availableNow=True).start()
        if trigger == "available"
        else writer.trigger(processingTime=trigger).start()
    )
    query.awaitTermination()
    return True


def touch(spark: SparkSession, namesrv: str, s: dict[str, Any]) -> bool:
    Path(s["path"]).touch()
    return True


def wait_file(spark: SparkSession, namesrv: str, s: dict[str, Any]) -> bool:
    deadline = time.monotonic() + float(s.get("timeout_s", 60))
    while not Path(s["path"]).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{s['path']} did not appear")
        time.sleep(0.1)  # (waits for the test)
    return True


STEPS = {
    "write": write,
    "read": read,
    "read_stream": read_stream,
    "follow": follow,
    "stream_write": stream_write,
    "touch": touch,
    "wait_file": wait_file,
}

if __name__ == "__main__":
    main()
