"""A few records read one by one into the message table: point lookups (a query by key, a
message by id), where the batch decoder's fixed cost (~0.7 ms for one row: a gather per
column, the vectorized properties parser) would dominate.

Each record is decoded by the scalar codec (:func:`rmqlog.log.record.decode_at`, which checks
its lengths and header values) at an offset the caller found; its properties are parsed with
Java's rules (:func:`java_properties`, the rules of the batch parser), and the table is built
from the values of the few records. A row here equals the batch decoder's row for the same
record (a test compares them). Meant for at most a few dozen records: a query returns at most
``max_msgs_num_batch`` (64).
"""

from __future__ import annotations

import pyarrow as pa

from ..errors import CorruptRecordError
from ..hosts import format_host
from ..schema import MESSAGE_SCHEMA, TS
from .msgid import offset_msg_id
from .properties import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, STORE_PROPERTY_PREFIX
from .record import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, Record, body_crc


def java_properties(raw: bytes) -> list[tuple[str, str]]:
    """A properties string's (name, value) items in order, by Java's ``string2messageProperties``
    rules as the batch parser applies them: split on \\x02, each item on \\x01, trailing empty
    tokens dropped, an item kept only when exactly (name, value) remain."""
    out = []
    for item in raw.decode("utf-8", "replace").split(PROPERTY_SEPARATOR):
        tokens = item.split(NAME_VALUE_SEPARATOR)
        while tokens and not tokens[-1]:
            tokens.pop()
        if len(tokens) == 2:
            out.append((tokens[0], tokens[1]))
    return out


def records_table(found: list[tuple[int, Record]], *, check_crc: bool, path: str | None = None) -> pa.Table:
    """The message table of ``(commitlog offset, record)`` pairs, in their order. With
    ``check_crc`` a body whose CRC differs raises :class:`CorruptRecordError` naming the
    offset (``path``: the commitlog folder, for the message)."""
    cols: dict[str, list] = {f.name: [] for f in MESSAGE_SCHEMA}
    for offset, r in found:
        if check_crc and body_crc(r.body) != r.body_crc:
            raise CorruptRecordError("damaged commitlog record: body CRC mismatch", path=path, offset=offset)
        props = java_properties(r.properties)
        last = dict(props)  # the last of a name wins, as in a Java map
        cols["topic"].append(r.topic)
        cols["queueId"].append(r.queue_id)
        cols["queueOffset"].append(r.queue_offset)
        cols["commitLogOffset"].append(offset)
        cols["msgId"].append(offset_msg_id(r.store_host, offset))
        cols["body"].append(r.body)
        cols["tags"].append(last.get(PROPERTY_TAGS))
        cols["keys"].append([k for k in last.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if k])
        cols["properties"].append(
            [(k, v) for k, v in props if not k.startswith(STORE_PROPERTY_PREFIX)]
        )  # not the user's
        cols["bornTimestamp"].append(r.born_timestamp * 1000)
        cols["storeTimestamp"].append(r.store_timestamp * 1000)
        cols["bornHost"].append(format_host(r.born_host))
        cols["storeHost"].append(format_host(r.store_host))
        cols["flag"].append(r.flag)
        cols["sysFlag"].append(r.sys_flag)
        cols["reconsumeTimes"].append(r.reconsume_times)
        cols["bodyCRC"].append(r.body_crc)
    arrays = [
        pa.array(cols[f.name], pa.int64()).view(TS) if f.type == TS else pa.array(cols[f.name], f.type)
        for f in MESSAGE_SCHEMA
    ]
    return pa.Table.from_arrays(arrays, schema=MESSAGE_SCHEMA)
