"""The delivered copies of delayed and timed messages (RocketMQ's
``ScheduleMessageService.messageTimeup`` and ``TimerMessageStore.convertMessage``), a whole
batch at once, made from the stored records' raw columns (no message table).

From each stored message the copy takes the body, flag, born timestamp and properties string,
and goes to topic ``REAL_TOPIC``, queue ``REAL_QID``; its tagsCode is the tags hash again (a
normal dispatch). Properties, in their stored order:

- ``DELAY`` is removed (the copy is not delayed again), and whatever the caller drops (the
  timer: ``REAL_TOPIC`` / ``REAL_QID``; a delay level's copy keeps them, as RocketMQ's does);
- ``UNIQ_KEY`` stays: the copy has the client msgId of the message that was sent;
- SYSFLAG's client bits (compressed, multi tags, transaction) and RECONSUMETIMES are kept
  (the host bits are the copy's own layout's);
- every other entry (``TAGS``, ``KEYS``, RocketMQ's system names and the user's) is kept as
  it was stored, and the store's own ``RMQLOG_*`` markers are dropped (the copy is the
  scheduler's append, not the writer's);
- the caller's additions (the timer's ``TIMER_ENQUEUE_MS`` / ``TIMER_DEQUEUE_MS``) go last.

The copy is a new record (:mod:`rmqlog.log.encode.copies`): new commitlog offset and offset
msgId, new store time, this store's host; it keeps the born host it was sent with (but
where any message of a delivery batch was born on an IPv6 host, that batch's copies get
the store's: a batch's records share one header layout).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptRecordError
from ..log.decode import RecordColumns
from ..log.gather import gather_slices, to_binary
from ..log.properties import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    STORE_PROPERTY_PREFIX,
    ParsedProperties,
)
from ..log.record import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from ..native import (
    copy_properties as _native_copy,  # the C helper's (None without it: the parsed map below)
)


@dataclass
class StoredMessages:
    """What a copy takes from the stored messages: their raw columns, read per segment
    (:func:`rmqlog.queue.checked_read.read_unit_columns`), joined."""

    offsets: np.ndarray  # commitlog offsets
    flag: np.ndarray
    born: np.ndarray  # BORNTIMESTAMP, ms
    stored: np.ndarray  # STORETIMESTAMP, ms
    body: pa.BinaryArray
    properties: pa.Array
    #: BORNHOST per row, (n, 8) bytes, when every one is IPv4; ``None`` otherwise (the copies
    #: then get the store's: a batch's records share one header layout)
    born_host: np.ndarray | None = None
    #: SYSFLAG and RECONSUMETIMES as stored (``None``: 0); a copy keeps both, as RocketMQ's
    #: ``messageTimeup`` and ``convertMessage`` do (a compressed body stays readable, a
    #: retried message's count of deliveries survives its delay)
    sys_flag: np.ndarray | None = None
    reconsume_times: np.ndarray | None = None

    @classmethod
    def of(cls, parts: list[RecordColumns]) -> StoredMessages:
        def join(arrays: list[pa.Array]) -> pa.Array:
            return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)

        def field(name: str) -> np.ndarray:
            return np.concatenate([p.header[name].astype(np.int64) for p in parts]) if parts else np.zeros(0, np.int64)

        return cls(
            np.concatenate([p.offsets for p in parts]) if parts else np.zeros(0, np.int64),
            field("flag"),
            field("bornTimestamp"),
            field("storeTimestamp"),
            join([p.body for p in parts]) if parts else pa.array([], pa.binary()),
            join([p.properties for p in parts]) if parts else pa.array([], pa.string()),
            np.concatenate([p.born_host_raw for p in parts])
            if parts and all(p.born_host_raw.dtype == np.uint8 for p in parts)
            else None,
            field("sysFlag") if parts else None,
            field("reconsumeTimes") if parts else None,
        )

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass
class Copies:
    """Where each copy goes and the properties it carries (pre-joined, binary)."""

    topic: pa.Array
    queue_id: np.ndarray
    properties: pa.Array


def delivered_copies(
    messages: StoredMessages,
    *,
    drop: tuple[str, ...] = (),
    add: dict[str, pa.Array] | None = None,
) -> Copies:
    """The copies of ``messages`` (of ``SCHEDULE_TOPIC_XXXX`` or of the timer topic), in order.
    ``drop``: names the copy loses besides ``DELAY``; ``add``: names the copy gets at the end,
    a value per row (the timer's ``TIMER_DEQUEUE_MS``...).

    A stored message without ``REAL_TOPIC``, or whose ``REAL_QID`` is not a number of at most
    9 digits, cannot be delivered: :class:`CorruptRecordError` naming its commitlog offset.

    The copy keeps every other (name, value) pair of the stored properties, in stored order,
    as the store's own items (``name\x01value\x02``..., joined per row), but the store's
    ``RMQLOG_*`` markers: they were checked when first put (user names) or are RocketMQ's, so
    they are not checked again. With the C helper that is one pass over the bytes
    (:func:`_copied`); without it, through the parsed map (:func:`_from_parsed`), with the
    same result (Java's parsing rules either way).
    """
    dropped = (PROPERTY_DELAY, *drop, *(add or {}))
    made = _copied(messages, dropped)
    topic, queue_id, system = made if made is not None else _from_parsed(messages, dropped)
    if add:
        pieces: list[object] = []
        for name, values in add.items():
            if isinstance(values, pa.ChunkedArray):
                values = values.combine_chunks()
            pieces += [name + NAME_VALUE_SEPARATOR, values.cast(pa.string()), PROPERTY_SEPARATOR]
        system = pc.binary_join_element_wise(system, *pieces, "")
    return Copies(topic, queue_id, system.cast(pa.binary()))


def _undeliverable(messages: StoredMessages, bad: np.ndarray) -> CorruptRecordError:
    offset = int(messages.offsets[int(np.flatnonzero(bad)[0])])
    return CorruptRecordError(
        f"delayed message has no usable {PROPERTY_REAL_TOPIC}/{PROPERTY_REAL_QID}: it cannot be delivered",
        offset=offset,
    )


def _queue_ids(messages: StoredMessages, real_topic: pa.Array, real_qid: pa.Array) -> np.ndarray:
    """The real queue ids: ``REAL_QID`` must be 1 to 9 ASCII digits, ``REAL_TOPIC`` present."""
    qid_ok = pc.and_(pc.ascii_is_decimal(real_qid), pc.less_equal(pc.binary_length(real_qid), 9))
    bad = np.asarray(pc.or_(pc.is_null(real_topic), pc.invert(pc.fill_null(qid_ok, False))))
    if bad.any():
        raise _undeliverable(messages, bad)
    return np.asarray(real_qid.cast(pa.int64()))


def _copied(messages: StoredMessages, dropped: tuple[str, ...]) -> tuple[pa.Array, np.ndarray, pa.Array] | None:
    """(real topics, real queue ids, kept properties joined per row) by the C helper's
    ``copy_properties``: one pass over the bytes, Java's parsing rules; ``None`` without it."""
    props = messages.properties
    if _native_copy is None or props.null_count:
        return None
    n = len(props)
    off = np.frombuffer(props.buffers()[1], np.int32, n + 1, props.offset * 4)
    data = props.buffers()[2] or pa.py_buffer(b"")
    out = np.empty(data.size + n, np.uint8)
    row_offsets = np.empty(n + 1, np.int64)
    found_start, found_len = np.empty(2 * n, np.int64), np.empty(2 * n, np.int64)
    _native_copy(
        data,
        off,
        tuple(name.encode() for name in dropped),
        (STORE_PROPERTY_PREFIX.encode(),),
        (PROPERTY_REAL_TOPIC.encode(), PROPERTY_REAL_QID.encode()),
        out,
        row_offsets,
        found_start,
        found_len,
    )
    if row_offsets[-1] >= 1 << 31:
        return None

    def found(k: int) -> pa.Array:
        start, length = found_start[k * n : (k + 1) * n], found_len[k * n : (k + 1) * n]
        values = to_binary(gather_slices(data, np.maximum(start, 0), length)).view(pa.string())
        return values if (start >= 0).all() else pc.if_else(pa.array(start >= 0), values, pa.scalar(None, pa.string()))

    real_topic, real_qid = found(0), found(1)
    queue_id = _queue_ids(messages, real_topic, real_qid)
    # whole (name, value) pairs of valid UTF-8 strings, cut at ASCII separators: valid UTF-8
    kept = pa.StringArray.from_buffers(
        n, pa.py_buffer(row_offsets.astype(np.int32)), pa.py_buffer(out[: row_offsets[-1]])
    )
    return real_topic, queue_id, kept


def _from_parsed(messages: StoredMessages, dropped: tuple[str, ...]) -> tuple[pa.Array, np.ndarray, pa.Array]:
    """:func:`_copied` through the parsed map (without the C helper)."""
    parsed = ParsedProperties(messages.properties)
    real_topic = parsed.column(PROPERTY_REAL_TOPIC)
    real_qid = parsed.column(PROPERTY_REAL_QID)
    queue_id = _queue_ids(messages, real_topic, real_qid)
    n, keys = parsed.n, parsed.keys
    kept = ~np.asarray(pc.or_(pc.is_in(keys, pa.array(dropped)), pc.starts_with(keys, STORE_PROPERTY_PREFIX)))
    sel = pa.array(kept)
    pairs = pc.binary_join_element_wise(
        keys.filter(sel), NAME_VALUE_SEPARATOR, parsed.values.filter(sel), PROPERTY_SEPARATOR, ""
    )
    row_offsets = np.concatenate([[0], np.cumsum(np.bincount(parsed.parent[kept], minlength=n))]).astype(np.int32)
    joined = pc.fill_null(pc.binary_join(pa.ListArray.from_arrays(pa.array(row_offsets), pairs), ""), "")
    return real_topic, queue_id, joined
