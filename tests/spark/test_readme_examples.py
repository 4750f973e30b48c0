"""Every code example of README.md runs.

The ```python blocks run in README order in one namespace (as a reader goes through them),
then every line of the ```bash blocks that invokes ``rmqlog`` (the other shell lines are the
``make`` set-up commands). Before that, the prelude gives the examples what they take as given:

- ``spark``: the suite's session (``spark_rmq.local_session()`` in an example returns it:
  ``getOrCreate``; the runtime settings it changes are restored afterwards);
- ``orders``: a streaming DataFrame of 30 order events, columns ``order_id`` (a non-nullable
  string, as a real order id column would be) and ``status``; ``orders_df``: the same as a
  batch DataFrame;
- paths: ``/data/rmq`` and ``/chk/...`` become folders under the test's tmp path.

A streaming query an example starts is run to the end of its input
(``processAllAvailable``) and stopped.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa

import rmqlog
from spark_rmq.routing import java_hash

from .spark_helpers import fill

REPO = Path(__file__).resolve().parents[2]
#: Runtime settings ``spark_rmq.local_session()`` sets on an existing session.
SESSION_SETTINGS = ("spark.sql.shuffle.partitions", "spark.sql.session.timeZone",
                    "spark.sql.python.filterPushdown.enabled", "spark.sql.execution.arrow.pyspark.enabled")


def readme_blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced block of README.md."""
    text = (REPO / "README.md").read_text()
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def localize(code: str, tmp: Path) -> str:
    return code.replace("/data/rmq", str(tmp / "rmq")).replace("/chk/", f"{tmp / 'chk'}/")


def prelude(spark, tmp: Path) -> dict:  # type: ignore[no-untyped-def]
    events = str(tmp / "events")
    fill(events, "events", 30, queues=2, tags=["created", "paid", "shipped"])
    orders = (spark.readStream.format("rmqlog").option("path", events).option("topics", "events")
              .option("startingOffsets", "earliest").load()
              .selectExpr("coalesce(concat('order-', substring(CAST(body AS STRING), -1, 1)), '') AS order_id",
                          "tags AS status"))
    assert not orders.schema["order_id"].nullable
    orders_df = spark.range(30).selectExpr("concat('order-', substring(CAST(id AS STRING), -1, 1)) AS order_id",
                                           "element_at(array('created', 'paid', 'shipped'), CAST(id % 3 + 1 AS INT)) AS status")
    return {"spark": spark, "orders": orders, "orders_df": orders_df}


def test_every_readme_example_runs(spark, tmp_path: Path) -> None:
    blocks = readme_blocks()
    assert {lang for lang, _ in blocks} <= {"python", "bash", ""}  # a new kind of example needs a runner here
    python = [code for lang, code in blocks if lang == "python"]
    rmqlog = [line for lang, code in blocks if lang == "bash" for line in code.splitlines() if line.startswith("rmqlog ")]
    assert python and rmqlog
    ns = prelude(spark, tmp_path)
    saved = {k: spark.conf.get(k) for k in SESSION_SETTINGS}
    out = io.StringIO()
    try:
        for i, code in enumerate(python):
            with contextlib.redirect_stdout(out):
                exec(compile(localize(code, tmp_path), f"README.md python block {i + 1}", "exec"), ns)
            for q in spark.streams.active:
                q.processAllAvailable()
                q.stop()
            if i == 0:  # the Spark example: its write stream, its reads, its routed batch write
                check_spark_example(spark, ns, tmp_path)
    finally:
        for k, v in saved.items():
            spark.conf.set(k, v)
    printed = out.getvalue().splitlines()  # get_messages' status and rows, recovery, verify's problems
    assert printed[0].startswith("GetMessageStatus.FOUND ") and printed[-1] == "[]", printed
    for line in rmqlog:
        args = shlex.split(localize(line, tmp_path))
        done = subprocess.run([sys.executable, "-m", "rmqlog.admin.cli", *args[1:]], capture_output=True, text=True,
                              cwd=REPO, timeout=120)
        assert done.returncode == 0 and done.stdout, (line, done.stderr)


def check_spark_example(spark, ns: dict, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = str(tmp_path / "rmq")
    # the filtered batch read: what the store holds that matches it (before the README's date)
    end_ms = 1_795_262_400_000  # 2026-11-21T12:00:00Z
    with rmqlog.MessageStore.open(root) as ms:
        want = sum(1 for q in (0, 1) for m in ms.read_queue("orders", q, 0, 1 << 40).to_pylist()
                   if m["tags"] == "paid" and m["storeTimestamp"].timestamp() * 1000 < end_ms)
    assert ns["batch"].count() == want
    q = ns["stream"].writeStream.format("memory").queryName("readme_stream").trigger(availableNow=True).start()
    q.awaitTermination()
    got = spark.table("readme_stream").selectExpr("CAST(body AS STRING) AS body", "keys[0] AS key", "queueId").collect()
    assert len(got) == 60  # 30 from the streaming write, 30 from the routed batch write
    assert Counter(r.key for r in got) == Counter({f"order-{d}": 6 for d in range(10)})
    for r in got:  # hash routing, in the sink (stream) and in route() (batch): one queue per key
        assert r.queueId == abs(int(java_hash(pa.array([r.key]))[0])) % 4
    with rmqlog.MessageStore.open(root) as ms:
        assert ms.topics()["orders"].write_queue_nums == 4
