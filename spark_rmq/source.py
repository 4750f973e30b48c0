"""The ``rmqlog`` data source: the class Spark registers (``format("rmqlog")``), which makes the
readers (:mod:`spark_rmq.batch_reader`, :mod:`spark_rmq.stream_reader`, over the queue source
the options name: :mod:`spark_rmq.queue_source`; :mod:`spark_rmq.pop_source` for
``consumeMode=pop``) and the writers (:mod:`spark_rmq.sink`).

A Spark Connect client sends this class to the server by reference: the server imports
``spark_rmq.source``.

**Reads change no layout**: a path without a store (missing, empty, or another kind of
folder) fails the read when it is planned with :class:`rmqlog.StoreNotFoundError` naming the
path (the CLI's error), and nothing is created.
"""

from __future__ import annotations

import sys

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .batch_reader import RmqLogBatchReader, RmqLogFilteringReader
from .options import SourceOptions, parse_columns
from .schema import SPARK_SCHEMA, spark_schema
from .sink import RmqLogArrowWriter, RmqLogStreamArrowWriter
from .stream_reader import RmqLogStreamReader

FORMAT_NAME = "rmqlog"


class RmqLogDataSource(DataSource):
    """``format("rmqlog")``: read and write a spark-rmq store (see README for the options)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        # the ``columns`` option's columns, or the whole message schema (other options are
        # checked when the reader is made)
        return spark_schema(list(columns)) if (columns := parse_columns(self.options)) else SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = SourceOptions.parse(self.options, streaming=False)
        return RmqLogFilteringReader(opts) if _filter_pushdown_enabled() else RmqLogBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = SourceOptions.parse(self.options, streaming=True)
        if opts.consume_mode == "pop":  # a group's POP, acked at commit (spark_rmq.pop_source)
            from .pop_source import RmqLogPopStreamReader  # (the network side: only when asked for)

            return RmqLogPopStreamReader(opts)
        return RmqLogStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return RmqLogArrowWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return RmqLogStreamArrowWriter(self.options, schema, overwrite)


def _filter_pushdown_enabled() -> bool:
    """Whether Spark will push filters into this reader.

    Spark (4.1+) refuses a reader that implements ``pushFilters`` when
    ``spark.sql.python.filterPushdown.enabled`` is false, and ``DataSource.reader()`` is not
    told the setting. The planner worker that calls us has it as a local variable
    (``enable_pushdown`` in ``plan_data_source_read._main``); the pushdown worker only runs
    when it is enabled. So: look for that frame; absent it, pushdown is on.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_main" and "enable_pushdown" in frame.f_locals:
            return bool(frame.f_locals["enable_pushdown"])
        frame = frame.f_back  # type: ignore[assignment]
    return True
