"""``rmqlog`` through Spark Connect: the recipe of docs/spark.md ("Spark Connect"), run as
written: its ``sh`` block starts the server with bash, in a process
group of its own killed with it at the end whatever the outcome; its client block runs in a
process of its own (a Connect session and the suite's classic one do not share a process),
and prints what the page says. Filled in (:mod:`tests.spark.doc_blocks`): ``/path/to/python``
is this Python, ``15002`` a free port, ``/data/rmq`` a temporary folder. Neither process
has this checkout on its path: the server's Python workers import ``spark_rmq`` from the
installed package, as a user's would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import walk

import rmqlog

from .doc_blocks import blocks, expected_prints, is_connect, localize
from .processes import Processes, free_port, running

pytestmark = pytest.mark.slow


def test_the_spark_connect_recipe_runs_as_written(tmp_path: Path) -> None:
    server_sh, client_py = (b for b in blocks("docs/spark.md") if is_connect(b))
    assert (server_sh.lang, client_py.lang) == ("sh", "python")
    port = free_port()

    def fill_in(code: str) -> str:
        return localize(code, tmp_path).replace("/path/to/python", sys.executable).replace("15002", str(port))

    with running(tmp_path) as processes:
        printed = _run(fill_in(server_sh.code), fill_in(client_py.code), port, tmp_path, processes)
    assert printed == list(expected_prints(client_py.code).values()) == ["500", "1000"]
    # the server is gone: the store it wrote is checked by the independent decoder and the store
    root = tmp_path / "rmq"
    assert sorted(int(rec.body) for rec in walk(root)) == list(range(1000))
    with rmqlog.MessageStore.open(root, create=False) as ms:
        assert ms.verify().ok
        for q in range(ms.topics()["events"].write_queue_nums):  # dense queue offsets, the tags as written
            rows = ms.read_queue("events", q, 0, 1 << 40).to_pylist()
            assert [r["queueOffset"] for r in rows] == list(range(len(rows)))
            assert all(r["tags"] == ("even" if int(r["body"]) % 2 == 0 else "odd") for r in rows)


def _run(server: str, client: str, port: int, tmp_path: Path, processes: Processes) -> list[str]:
    """Start the server, run the client; returns the lines the client printed."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPARK_HOME", "PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    }
    proc = processes.start(
        "server", ["bash", "-c", server], env, cwd=tmp_path
    )  # not the checkout: nothing imported from it
    processes.wait_for("server", proc, f"Spark Connect server started at: [::]:{port}", timeout=300)
    (tmp_path / "client.py").write_text(client)
    run = subprocess.run(
        [sys.executable, "client.py"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600
    )
    assert run.returncode == 0, (
        f"client exit {run.returncode}:\n{run.stderr[-5000:]}\nserver:\n{processes.log('server')[-3000:]}"
    )
    return run.stdout.splitlines()
