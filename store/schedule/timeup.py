"""The delivered copy of delayed messages (RocketMQ's ``ScheduleMessageService.messageTimeup``),
a whole batch at once.

From each stored message (its decoded row of the message table) the copy takes the body,
tags, keys, flag, born timestamp and properties, and goes to topic ``REAL_TOPIC``, queue
``REAL_QID``; its tagsCode is the tags hash again (a normal dispatch). Properties:

- ``DELAY`` is removed (the copy is not delayed again);
- ``REAL_TOPIC`` / ``REAL_QID`` stay, as RocketMQ leaves them on the copy;
- ``UNIQ_KEY`` stays: the copy has the client msgId of the message that was sent;
- every other entry (RocketMQ's system names and the user's) is kept as it was stored, in its
  order, and the store's own ``RMQLOG_*`` markers are dropped (the copy is the scheduler's
  append, not the writer's).

The copy is a new record: new commitlog offset and offset msgId, new store time; its born
host is the store's (the put path has no per-row born host).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..log.properties import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    STORE_PROPERTY_PREFIX,
)

#: names the copy gets from its columns (KEYS, TAGS) or not at all (DELAY)
_FROM_COLUMNS_OR_DROPPED = (PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_DELAY)


def delivered_copies(
    messages: pa.Table, *, drop: tuple[str, ...] = (), add: dict[str, pa.Array] | None = None,
) -> tuple[pa.Table, pa.Array]:
    """(the put table of the copies, their system properties pre-joined per row) for the
    messages of ``messages`` (message-table rows of ``SCHEDULE_TOPIC_XXXX`` or of the timer
    topic), in order. ``drop``: system names the copy loses besides ``DELAY``; ``add``: system
    names the copy gets, a string value per row (the timer's ``TIMER_DEQUEUE_MS``...).

    A row without ``REAL_TOPIC`` or with a ``REAL_QID`` that is not a number cannot be
    delivered: :class:`ValueError` naming its commitlog offset (the caller decides)."""
    props = messages.column("properties").combine_chunks()
    real_topic = pc.map_lookup(props, PROPERTY_REAL_TOPIC, "last")
    real_qid = pc.map_lookup(props, PROPERTY_REAL_QID, "last")
    qid_ok = pc.and_(pc.utf8_is_digit(real_qid), pc.less_equal(pc.utf8_length(real_qid), 9))
    bad = pc.or_(pc.is_null(real_topic), pc.invert(pc.fill_null(qid_ok, False)))
    if pc.any(bad).as_py():
        i = int(np.flatnonzero(np.asarray(bad))[0])
        offset = messages.column("commitLogOffset")[i].as_py()
        raise ValueError(f"delayed message at commitlog offset {offset} has no usable REAL_TOPIC/REAL_QID")
    system = _kept_properties(props, pa.array([*_FROM_COLUMNS_OR_DROPPED, *drop, *(add or {})]))
    if add:
        pieces: list[object] = []
        for name, values in add.items():
            if isinstance(values, pa.ChunkedArray):
                values = values.combine_chunks()
            pieces += [name + "\x01", values.cast(pa.string()), "\x02"]
        system = pc.binary_join_element_wise(system, *pieces, "")
    table = pa.table({
        "topic": real_topic,
        "queueId": real_qid.cast(pa.int32()),
        "body": messages.column("body"),
        "tags": messages.column("tags"),
        "keys": messages.column("keys"),
        "flag": messages.column("flag"),
        "bornTimestamp": messages.column("bornTimestamp"),
    })
    return table, system.cast(pa.binary())


def _kept_properties(props: pa.MapArray, dropped_names: pa.Array) -> pa.Array:
    """Every entry of each row but ``dropped_names`` and the store's ``RMQLOG_*`` markers, in
    stored order, joined per row (``name\x01value\x02``...). The copy gets them all as the
    store's own items: they were checked when first put (user names) or are RocketMQ's, so
    they are not checked again, and their order is kept."""
    n = len(props)
    offsets = np.asarray(props.offsets, np.int64)
    base, count = int(offsets[0]), int(offsets[-1] - offsets[0])
    keys = props.keys.slice(base, count).cast(pa.string())
    items = props.items.slice(base, count).cast(pa.string())
    parent = np.repeat(np.arange(n), np.diff(offsets))
    kept = ~np.asarray(pc.or_(pc.is_in(keys, dropped_names), pc.starts_with(keys, STORE_PROPERTY_PREFIX)))
    sel = pa.array(kept)
    pairs = pc.binary_join_element_wise(keys.filter(sel), "\x01", items.filter(sel), "\x02", "")
    row_offsets = np.concatenate([[0], np.cumsum(np.bincount(parent[kept], minlength=n))]).astype(np.int32)
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(row_offsets), pairs), "")
    return pc.fill_null(joined, "")
