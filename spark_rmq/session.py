"""Registering the data source on a session, and a local session builder."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> SparkSession:
    """Register ``format("rmqlog")`` on ``spark`` (idempotent); returns ``spark``."""
    from .source import RmqLogDataSource

    spark.dataSource.register(RmqLogDataSource)
    return spark


def local_session(
    app_name: str = "spark-rmq", master: str = "local[2]", *, conf: dict[str, str] | None = None
) -> SparkSession:
    """A local SparkSession with ``rmqlog`` registered.

    Sets the workers' Python to this interpreter (``spark.pyspark.python``; Spark would
    otherwise start whatever ``python3`` is on the PATH, without this project installed),
    UTC session time, Python filter pushdown on, small shuffles for a laptop, and the Python
    daemon that forks workers with this package already loaded (:mod:`spark_rmq.daemon`).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.daemon.module", "spark_rmq.daemon")
    )
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    return register(builder.getOrCreate())
