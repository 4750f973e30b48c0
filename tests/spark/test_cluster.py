"""``spark-submit`` of a job that uses ``rmqlog`` on a Spark standalone cluster (docs/spark.md).

The test starts a master and a worker on 127.0.0.1 with ``spark-class`` (pip's pyspark ships
``bin/spark-class``), zips the two packages (``rmqlog`` and ``spark_rmq``) as the job's
``--py-files``, and submits a job that writes 5,000 rows into a store with
``df.write.format("rmqlog")`` and reads them back. Checked: the rows (bodies, tags, dense
queue offsets), the store's files by the independent decoder, that the executors imported the
packages from the shipped zip (not from an installed copy) and so ran without the C helper
(an extension module cannot be imported from a zip: the pure-Python paths run), and that no
process of the cluster or the job is left, whatever the outcome.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import walk

import rmqlog

from .processes import Processes, bare_python, free_port, running, spark_home, zip_packages

pytestmark = pytest.mark.slow
#: The options of the cluster's JVMs (master, worker, executor), as of the suite's other JVMs
#: (tests/conftest.py, SPARK_SUBMIT_OPTS): the client compiler and the serial collector, since
#: these JVMs live for seconds and start-up is what costs.
JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: The job spark-submit runs (argv: store root, result file). It must not set a master.
JOB = textwrap.dedent("""
    import json, sys

    from pyspark.sql import SparkSession

    import spark_rmq

    root, result = sys.argv[1], sys.argv[2]
    spark = spark_rmq.register(SparkSession.builder.appName("rmq-cluster-job").getOrCreate())
    n = 5000
    (spark.range(n, numPartitions=4)
     .selectExpr("'events' AS topic", "CAST(id AS STRING) AS body", "IF(id % 2 = 0, 'even', 'odd') AS tags")
     .write.format("rmqlog").option("path", root).mode("append").save())
    back = spark.read.format("rmqlog").option("path", root).option("topics", "events").load()
    rows = [r.asDict() for r in back.selectExpr("CAST(body AS STRING) AS body", "tags", "queueId",
        "queueOffset").collect()]


    def where(_):
        import rmqlog, spark_rmq
        from rmqlog.log.encode import native
        yield rmqlog.__file__, spark_rmq.__file__, native.pack_records is not None


    executors = spark.sparkContext.parallelize(range(2), 2).mapPartitions(where).collect()
    with open(result, "w") as f:
        json.dump({"rows": rows, "executors": executors, "master": spark.sparkContext.master}, f)
    spark.stop()
""")


def test_spark_submit_on_a_standalone_cluster(tmp_path: Path) -> None:
    with running(tmp_path) as processes:
        _submit_on_a_cluster(tmp_path, processes)


def _submit_on_a_cluster(tmp_path: Path, processes: Processes) -> None:
    spark_class = spark_home() / "bin" / "spark-class"
    spark_submit = spark_home() / "bin" / "spark-submit"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    # the driver's and the workers' Python: the dependencies, not this project (the job ships it)
    python = bare_python(tmp_path / "venv")
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_DIRS=str(tmp_path / "local"),
        PYSPARK_PYTHON=str(python),
        SPARK_DAEMON_JAVA_OPTS=JAVA_OPTS,
    )  # the master's and the worker's JVMs
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    master = processes.start(
        "master",
        [
            str(spark_class),
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            "0",
        ],
        env,
    )
    worker = processes.start(
        "worker",
        [
            str(spark_class),
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--webui-port",
            "0",
            "--cores",
            "2",
            "--memory",
            "2g",
            "--work-dir",
            str(tmp_path / "work"),
            master_url,
        ],
        env,
    )
    processes.wait_for("master", master, f"Starting Spark master at {master_url}")
    processes.wait_for("worker", worker, "Successfully registered with master")

    py_files = zip_packages(tmp_path / "spark_rmq_pyfiles.zip")
    job = tmp_path / "job.py"
    job.write_text(JOB)
    root, result = tmp_path / "store", tmp_path / "result.json"
    submit = processes.start(
        "submit",
        [
            str(spark_submit),
            "--master",
            master_url,
            "--py-files",
            str(py_files),
            "--conf",
            f"spark.pyspark.python={python}",  # the workers' Python
            "--conf",
            f"spark.pyspark.driver.python={python}",
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--conf",
            "spark.executor.memory=1g",
            "--conf",
            f"spark.executor.extraJavaOptions={JAVA_OPTS}",  # (the driver's: SPARK_SUBMIT_OPTS, tests/conftest.py)
            "--conf",
            "spark.ui.enabled=false",
            str(job),
            str(root),
            str(result),
        ],
        env,
    )
    try:
        code = submit.wait(timeout=240)
    except subprocess.TimeoutExpired:
        code = None
    assert code == 0, f"spark-submit exit {code}:\n{processes.log('submit')[-5000:]}"

    out = json.loads(result.read_text())
    assert out["master"] == master_url
    rows = out["rows"]
    assert sorted(int(r["body"]) for r in rows) == list(range(5000))
    assert all(r["tags"] == ("even" if int(r["body"]) % 2 == 0 else "odd") for r in rows)
    per_queue: dict[int, list[int]] = {}
    for r in rows:
        per_queue.setdefault(r["queueId"], []).append(r["queueOffset"])
    assert all(sorted(v) == list(range(len(v))) for v in per_queue.values()), "queue offsets not dense"
    # the executors ran the shipped code, without the C helper (no extension module from a zip)
    assert out["executors"], "no executor answered"
    for store_file, spark_rmq_file, native in out["executors"]:
        assert str(py_files.name) in store_file and str(py_files.name) in spark_rmq_file, (store_file, spark_rmq_file)
        assert native is False
    # the store, read by the independent decoder and by the store
    assert sorted(int(rec.body) for rec in walk(root)) == list(range(5000))
    with rmqlog.MessageStore.open(root, create=False) as ms:
        assert ms.verify().ok
        assert sum(ms.max_offset("events", q) for q in per_queue) == 5000
