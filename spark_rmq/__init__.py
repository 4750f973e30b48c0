"""spark-rmq's Spark data source ``rmqlog``: stream and batch reads and writes of a store.

    import spark_rmq
    spark = spark_rmq.local_session()          # or spark_rmq.register(existing_session)
    spark.readStream.format("rmqlog").option("path", root).option("topics", "orders").load()

Imports :mod:`rmqlog`; the store never imports Spark.
"""

from .errors import QueryDataLossError, RmqLogOptionError, UnsupportedFieldError
from .routing import route
from .session import local_session, register

FORMAT = "rmqlog"

__all__ = [
    "FORMAT",
    "register",
    "local_session",
    "route",
    "QueryDataLossError",
    "RmqLogOptionError",
    "UnsupportedFieldError",
]
