"""The Spark part of the suite: one session for all of it (starting a JVM costs seconds).

``local[2,4]``: two cores, and up to four attempts per task (``local[N]`` alone never
retries a task, whatever ``spark.task.maxFailures`` says), so the exactly-once tests can
make attempts fail.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

import spark_rmq


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    session = spark_rmq.local_session(
        "spark-rmq-tests",
        master="local[2,4]",
        conf={
            "spark.task.maxFailures": "4",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.streaming.stopTimeout": "20s",
            # the JVM's heap, stated: the suite's largest Spark job needs far less, and with
            # `make test`'s two workers this session runs beside the JVMs other tests start
            # (the cluster, Connect, notebook and quickstart tests), all within a small VM
            "spark.driver.memory": "1g",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


#: Folders handed out in this process (see ``tmp_path`` below).
_FOLDERS = itertools.count()


@pytest.fixture
def tmp_path(tmp_path: Path) -> Path:
    """pytest's folder for the test, one level down in a folder never handed out before in
    this process. A passed test's folder is deleted at once (``tmp_path_retention_policy``)
    and its name given to the next test of the same name stem (the next parametrized case);
    the session's Spark Python workers keep the stores they opened, by path, for their life
    (``spark_rmq.stores``) and would take a new store in a reused folder for the old one
    replaced (a ``StoreError``)."""
    folder = tmp_path / f"t{next(_FOLDERS)}"
    folder.mkdir()
    return folder


@pytest.fixture
def store_root(tmp_path: Path) -> str:
    return str(tmp_path / "store")
