"""Spark's Python daemon (``pyspark.daemon``) with this package loaded before it forks.

Spark forks every Python worker from a daemon process (``spark.python.daemon.module``), and
each Python data source call (planning a write, a micro-batch's reads and writes, a commit)
runs in a worker that unpickles the data source: with the stock daemon each new worker
imports ``spark_rmq``, ``rmqlog``, pyarrow and pandas again, ~1 s of CPU, paid several times
per micro-batch. Forked from this daemon, they start with them loaded (copy-on-write pages).
:func:`spark_rmq.session.local_session` sets it; on a cluster set
``spark.python.daemon.module=spark_rmq.daemon`` (the package must be importable by the
executors' Python, as it must be anyway).
"""

from __future__ import annotations

import pyarrow.compute  # noqa: F401  (loaded for the forks)
import pyspark.daemon
import pyspark.sql.datasource  # noqa: F401
import pyspark.sql.worker.write_into_data_source  # noqa: F401  (a sink task's write function)
import pyspark.worker  # noqa: F401  (every task's entry)

import spark_rmq.sink  # noqa: F401
import spark_rmq.source  # noqa: F401

if __name__ == "__main__":
    pyspark.daemon.manager()
