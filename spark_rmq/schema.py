"""The source's Spark schema: the store's message table schema, same names and types."""

from __future__ import annotations

from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from rmqlog import MESSAGE_SCHEMA

#: ``topic string, queueId int, queueOffset bigint, commitLogOffset bigint, msgId string,
#: body binary, tags string, keys array<string>, properties map<string,string>,
#: bornTimestamp timestamp, storeTimestamp timestamp, bornHost string, storeHost string,
#: flag int, sysFlag int, reconsumeTimes int, bodyCRC int``
SPARK_SCHEMA: StructType = from_arrow_schema(MESSAGE_SCHEMA)


def spark_schema(columns: list[str] | None = None) -> StructType:
    """The source's schema: the message schema, or only ``columns`` of it in the order given
    (the ``columns`` option; names checked by :class:`spark_rmq.options.SourceOptions`)."""
    if not columns:
        return SPARK_SCHEMA
    return StructType([SPARK_SCHEMA[name] for name in columns])
