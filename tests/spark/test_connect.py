"""``rmqlog`` through Spark Connect (docs/spark.md): the ``connect`` extra on the client, a
Connect server started on 127.0.0.1, and through ``sc://localhost:PORT`` a batch write, a batch
read with a tag filter and a streaming read (``Trigger.AvailableNow``).

The server is pyspark's ``SparkConnectServer`` class (its jar ships in pyspark's ``jars/``),
started with ``spark-submit`` in a process group of its own and killed with it at the end,
whatever the outcome. The data source runs in the server's Python workers, so the server's
Python must import ``spark_rmq`` (here: this checkout on its ``PYTHONPATH``); the client
registers the source on its session (``spark_rmq.register(spark)``) and runs in a process of
its own (a Connect session and the suite's classic one do not share a process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import walk

import rmqlog

from .processes import REPO, Processes, free_port, running, spark_home

pytestmark = pytest.mark.slow

#: The client (argv: port, store root, checkpoint folder); prints one JSON line.
CLIENT = textwrap.dedent('''
    import json, sys

    from pyspark.sql import SparkSession

    import spark_rmq

    port, root, checkpoint = sys.argv[1:4]
    spark = SparkSession.builder.remote(f"sc://localhost:{port}").getOrCreate()
    spark_rmq.register(spark)
    n = 1000
    (spark.range(n, numPartitions=2)
     .selectExpr("'events' AS topic", "CAST(id AS STRING) AS body", "IF(id % 2 = 0, 'even', 'odd') AS tags")
     .write.format("rmqlog").option("path", root).mode("append").save())
    odd = (spark.read.format("rmqlog").option("path", root).option("topics", "events").option("tags", "odd").load()
           .selectExpr("CAST(body AS STRING) AS body").collect())
    query = (spark.readStream.format("rmqlog").option("path", root).option("topics", "events")
             .option("startingOffsets", "earliest").load()
             .selectExpr("CAST(body AS STRING) AS body", "tags", "queueId", "queueOffset")
             .writeStream.format("memory").queryName("events_back").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    streamed = [r.asDict() for r in spark.table("events_back").collect()]
    print(json.dumps({"session": type(spark).__module__, "odd": [r["body"] for r in odd], "streamed": streamed}))
    spark.stop()
''')


def test_write_batch_read_and_stream_through_spark_connect(tmp_path: Path) -> None:
    with running(tmp_path) as processes:
        _through_connect(tmp_path, processes)
    # the server is gone: the store it wrote is checked by the independent decoder and the store
    root = tmp_path / "store"
    assert sorted(int(rec.body) for rec in walk(root)) == list(range(1000))
    with rmqlog.MessageStore.open(root, create=False) as ms:
        assert ms.verify().ok


def _through_connect(tmp_path: Path, processes: Processes) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "SPARK_HOME"}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    server = processes.start("server", [
        str(spark_home() / "bin" / "spark-submit"),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[2]",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", f"spark.pyspark.python={sys.executable}",  # its Python workers run the data source
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=2",
    ], env)
    processes.wait_for("server", server, f"Spark Connect server started at: 127.0.0.1:{port}")

    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    root = tmp_path / "store"
    run = subprocess.run([sys.executable, str(client), str(port), str(root), str(tmp_path / "checkpoint")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, f"client exit {run.returncode}:\n{run.stderr[-5000:]}\nserver:\n{processes.log('server')[-3000:]}"
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["session"] == "pyspark.sql.connect.session", out["session"]
    assert sorted(int(b) for b in out["odd"]) == list(range(1, 1000, 2))
    streamed = out["streamed"]
    assert sorted(int(r["body"]) for r in streamed) == list(range(1000))
    assert all(r["tags"] == ("even" if int(r["body"]) % 2 == 0 else "odd") for r in streamed)
    per_queue: dict[int, list[int]] = {}
    for r in streamed:
        per_queue.setdefault(r["queueId"], []).append(r["queueOffset"])
    assert all(sorted(v) == list(range(len(v))) for v in per_queue.values()), "queue offsets not dense"
