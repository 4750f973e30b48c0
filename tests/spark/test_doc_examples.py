"""Every code example of README.md and docs/*.md runs as written.

Per page, in a temporary working folder: the ```python blocks run in page order in one
namespace (as a reader goes through them), then every line of its ```bash / ```sh blocks
that runs the ``rmqlog`` command (with bash, the venv's ``bin`` first on ``PATH``; the other
shell lines are set-up commands: ``make``, ``pip``, Spark's launchers), with the sample
broker.conf of docs/operations.md in the working folder (``--config broker.conf``). The only change to an
example's text is its paths (:mod:`tests.spark.doc_blocks`); a ``prints:`` comment is checked
against what its line printed. The Spark Connect recipe is run by ``test_connect.py``.

The README's Spark example takes two inputs as given, and the prelude makes them:
``orders``, a streaming DataFrame of 30 order events (``order_id``, a non-nullable string as a
real order id column would be, and ``status``), and ``orders_df``, the same as a batch
DataFrame. ``spark_rmq.local_session()`` and ``getOrCreate()`` in an example return the
suite's session; the runtime settings ``local_session`` changes are restored afterwards. A
streaming query an example starts is run to the end of its input and stopped.

Examples of the wire name the name server ``127.0.0.1:9876`` (RocketMQ's port), or
``10.0.0.1:9876`` (the first name server of docs/cluster.md's deployment): for a page with
such an example, a name server and a broker are started on free ports over a store of their
own (``tests/wire/real_clients.py``) and the address is pointed at them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import SPARK_GROUP
from wire.real_clients import cluster

import rmqlog
from spark_rmq.routing import java_hash

from .doc_blocks import (
    PAGES,
    REPO,
    blocks,
    broker_conf,
    check_prints,
    holds_commands,
    is_connect,
    localize,
    not_run_reason,
    print_recorder,
    rmqlog_lines,
)

#: The name servers the examples of the wire dial (pointed at the test's own)
NAMESRV = "127.0.0.1:9876"
DEPLOYMENT_NAMESRV = "10.0.0.1:9876"

#: Runtime settings ``spark_rmq.local_session()`` sets on an existing session.
SESSION_SETTINGS = (
    "spark.sql.shuffle.partitions",
    "spark.sql.session.timeZone",
    "spark.sql.python.filterPushdown.enabled",
    "spark.sql.execution.arrow.pyspark.enabled",
)
#: The pages whose examples run (the others have none: only layout sketches)
RUNNABLE = [
    "README.md",
    "docs/broker.md",
    "docs/clients.md",
    "docs/cluster.md",
    "docs/operations.md",
    "docs/spark.md",
    "docs/store-api.md",
]


def test_every_page_with_examples_is_run() -> None:
    """A page that gains an example, or a new kind of block, needs a runner here."""
    found = sorted({b.page for p in PAGES for b in blocks(p) if b.lang == "python" or rmqlog_lines(b)})
    assert found == RUNNABLE
    assert {b.lang for p in PAGES for b in blocks(p)} <= {"python", "bash", "sh", "properties", "yaml", "text", "js"}


def test_every_block_is_run_or_says_why_not() -> None:
    """A block is labelled: python, bash/sh (its rmqlog lines), properties and yaml run here, js
    (the README's ali-ons snippet) in tests/wire/test_readme_ali_ons.py; ``text`` is a sketch or
    an output, and one holding commands says in its first line why it is not run."""
    unlabelled = [b.name for p in PAGES for b in blocks(p) if not b.lang]
    assert unlabelled == [], "blocks without a language (run them, or make them text): " + ", ".join(unlabelled)
    silent = [
        b.name for p in PAGES for b in blocks(p) if b.lang == "text" and holds_commands(b) and not not_run_reason(b)
    ]
    assert silent == [], "text blocks of commands that do not say why they are not run: " + ", ".join(silent)
    assert [b.name for p in PAGES for b in blocks(p) if b.lang == "js"] == [f"README.md:{js_line()}"]


def js_line() -> int:
    (b,) = [b for b in blocks("README.md") if b.lang == "js"]
    return b.line


def _is_scrape_config(b: Any) -> bool:
    return "scrape_configs:" in b.code


def test_every_acl_file_example_is_read_by_the_broker(tmp_path: Path) -> None:
    """A ```yaml block is a plain_acl.yml (docs/access-control.md): the broker's
    loader reads it as written, every account and pattern of it (a Prometheus scrape config
    is the next test's)."""
    from rmqnet.broker.acl_files import load_files

    samples = [b for p in PAGES for b in blocks(p) if b.lang == "yaml" and not _is_scrape_config(b)]
    assert samples, "no ACL file example"
    for b in samples:
        path = tmp_path / "plain_acl.yml"
        path.write_text(b.code)
        config = load_files([path])
        assert config.accounts, b.name


def test_every_prometheus_scrape_config_is_valid(tmp_path: Path) -> None:
    """A ```yaml block with ``scrape_configs`` (docs/metrics.md) is a Prometheus config that
    Debian's promtool (installed with prometheus for the suite) checks as valid."""
    samples = [b for p in PAGES for b in blocks(p) if b.lang == "yaml" and _is_scrape_config(b)]
    assert samples, "no scrape config example"
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is not installed (make prometheus installs Debian's prometheus)"
    for b in samples:
        path = tmp_path / "prometheus.yml"
        path.write_text(b.code)
        res = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, (b.name, res.stdout, res.stderr)


@pytest.mark.xdist_group(SPARK_GROUP)  # asks for the session by name (not every page uses it)
@pytest.mark.parametrize("page", RUNNABLE)
def test_every_example_runs_as_written(
    page: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    page_blocks = [b for b in blocks(page) if not is_connect(b)]
    python = [b for b in page_blocks if b.lang == "python"]
    uses_spark = any("spark" in b.code for b in python)
    spark = request.getfixturevalue("spark") if uses_spark else None
    ns: dict = {"__name__": f"doc:{page}"}
    monkeypatch.chdir(tmp_path)
    saved = {k: spark.conf.get(k) for k in SESSION_SETTINGS} if spark is not None else {}
    servers = contextlib.ExitStack()
    namesrv = NAMESRV
    if any(NAMESRV in b.code or DEPLOYMENT_NAMESRV in b.code for b in python):  # examples of the wire: a name
        # server and a broker to talk to
        namesrv = servers.enter_context(cluster(tmp_path / "wire")).client_namesrv_addr
    try:
        for block in python:
            printed: list[tuple[int, str]] = []
            ns["print"] = print_recorder(block.name, printed)
            code = localize(block.code, tmp_path).replace(NAMESRV, namesrv).replace(DEPLOYMENT_NAMESRV, namesrv)
            exec(compile(code, block.name, "exec"), ns)
            if spark is not None:
                for q in spark.streams.active:
                    q.processAllAvailable()
                    q.stop()
            check_prints(block, printed)
            if page == "README.md" and "readStream" in block.code:
                check_readme_spark_example(spark, ns, tmp_path)
    finally:
        servers.close()
        for k, v in saved.items():
            spark.conf.set(k, v)  # type: ignore[union-attr]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    (tmp_path / "broker.conf").write_text(broker_conf())  # what `--config broker.conf` reads
    for line in (line for b in page_blocks for line in rmqlog_lines(b)):
        done = subprocess.run(
            ["bash", "-c", localize(line, tmp_path)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
        )
        assert done.returncode == 0 and done.stdout, (page, line, done.stderr)


def check_readme_spark_example(spark, ns: dict, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """What the README's Spark example did: its filtered read, its stream, its writes."""
    root = str(tmp_path / "rmq")
    since_ms = int(dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
    with rmqlog.MessageStore.open(root) as ms:
        stored = [m for q in range(4) for m in ms.read_queue("orders", q, 0, 1 << 40).to_pylist()]
    want = sum(
        1
        for m in stored
        if m["tags"] == "paid" and m["queueId"] in (0, 1) and m["storeTimestamp"].timestamp() * 1000 >= since_ms
    )
    assert 0 < want < len(stored)  # the filters leave some rows and not all: a source ignoring them fails
    assert ns["batch"].count() == want
    q = ns["stream"].writeStream.format("memory").queryName("readme_stream").trigger(availableNow=True).start()
    q.awaitTermination()
    got = (
        spark.table("readme_stream")
        .selectExpr("CAST(body AS STRING) AS body", "keys[0] AS key", "queueId", "map_keys(properties) AS names")
        .collect()
    )
    assert len(got) == 60  # 30 from the streaming write, 30 from the routed batch write
    assert Counter(r.key for r in got) == Counter({f"order-{d}": 6 for d in range(10)})
    for r in got:  # hash routing, in the sink (stream) and in route() (batch): one queue per key
        assert r.queueId == abs(int(java_hash(pa.array([r.key]))[0])) % 4
    # the sink's idempotence markers stay in the log, out of the message table
    assert not [n for r in got for n in r.names if n.startswith("RMQLOG_")]
    with rmqlog.MessageStore.open(root) as ms:
        assert ms.topics()["orders"].write_queue_nums == 4


def test_the_paths_examples_use_are_the_ones_localized() -> None:
    """Examples name the store ``/data/rmq`` (and checkpoints ``/chk/``): any other absolute
    data path would be written for real by the suite."""
    for page in PAGES:
        for b in blocks(page):
            if b.lang == "python" or rmqlog_lines(b):
                code = localize(b.code, Path("/tmp/x"))
                assert "/data/" not in code and '"/chk' not in code, b.name
    assert (REPO / "README.md").read_text().count("/data/rmq") > 0
