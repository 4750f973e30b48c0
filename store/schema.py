"""The Arrow schema of decoded messages (also the Spark source's schema)."""

from __future__ import annotations

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")

MESSAGE_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("queueId", pa.int32()),
        pa.field("queueOffset", pa.int64()),
        pa.field("commitLogOffset", pa.int64()),
        pa.field("msgId", pa.string()),
        pa.field("body", pa.binary()),
        pa.field("tags", pa.string()),
        pa.field("keys", pa.list_(pa.string())),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
        pa.field("bornTimestamp", TS),
        pa.field("storeTimestamp", TS),
        pa.field("bornHost", pa.string()),
        pa.field("storeHost", pa.string()),
        pa.field("flag", pa.int32()),
        pa.field("sysFlag", pa.int32()),
        pa.field("reconsumeTimes", pa.int32()),
        pa.field("bodyCRC", pa.int32()),
    ]
)

#: Columns accepted by ``put_batch``; ``topic`` and ``body`` are required.
PUT_COLUMNS = ("topic", "body", "queueId", "tags", "keys", "properties", "flag", "bornTimestamp")

#: What ``put_batch`` returns per input row.
PUT_RESULT_SCHEMA = pa.schema(
    [
        pa.field("commitLogOffset", pa.int64()),
        pa.field("queueOffset", pa.int64()),
        pa.field("msgId", pa.string()),
        pa.field("storeTimestamp", TS),
    ]
)

#: a stored record's columns as a wire put takes them (bornHost as the record's bytes): the
#: first columns of the store's tables of stored rows, sent-back rows and wire records
WIRE_PUT_FIELDS = (
    pa.field("topic", pa.string()),
    pa.field("queueId", pa.int32()),
    pa.field("body", pa.binary()),
    pa.field("flag", pa.int32()),
    pa.field("sysFlag", pa.int32()),
    pa.field("bornTimestamp", pa.int64()),
    pa.field("bornHost", pa.binary()),
    pa.field("properties", pa.string()),
    pa.field("reconsumeTimes", pa.int32()),
)
