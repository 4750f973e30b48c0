"""The delivered copies of delayed and timed messages (RocketMQ's
``ScheduleMessageService.messageTimeup`` and ``TimerMessageStore.convertMessage``), a whole
batch at once, made from the stored records' raw columns (no message table).

From each stored message the copy takes the body, flag, born timestamp and properties string,
and goes to topic ``REAL_TOPIC``, queue ``REAL_QID``; its tagsCode is the tags hash again (a
normal dispatch). Properties, in their stored order:

- ``DELAY`` is removed (the copy is not delayed again), and whatever the caller drops (the
  timer: ``REAL_TOPIC`` / ``REAL_QID``; a delay level's copy keeps them, as RocketMQ's does);
- ``UNIQ_KEY`` stays: the copy has the client msgId of the message that was sent;
- every other entry (``TAGS``, ``KEYS``, RocketMQ's system names and the user's) is kept as
  it was stored, and the store's own ``RMQLOG_*`` markers are dropped (the copy is the
  scheduler's append, not the writer's);
- the caller's additions (the timer's ``TIMER_ENQUEUE_MS`` / ``TIMER_DEQUEUE_MS``) go last.

The copy is a new record (:mod:`store.log.encode.copies`): new commitlog offset and offset
msgId, new store time; its born host is the store's (a batch has one born host).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptRecordError
from ..log.decode import RecordColumns
from ..log.gather import gather_slices
from ..log.properties import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    STORE_PROPERTY_PREFIX,
    ParsedProperties,
    PropertySpans,
)


@dataclass
class StoredMessages:
    """What a copy takes from the stored messages: their raw columns, read per segment
    (:func:`store.queue.checked_read.read_unit_columns`), joined."""

    offsets: np.ndarray  # commitlog offsets
    flag: np.ndarray
    born: np.ndarray  # BORNTIMESTAMP, ms
    stored: np.ndarray  # STORETIMESTAMP, ms
    body: pa.BinaryArray
    properties: pa.Array

    @classmethod
    def of(cls, parts: list[RecordColumns]) -> StoredMessages:
        def join(arrays: list[pa.Array]) -> pa.Array:
            return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)

        def field(name: str) -> np.ndarray:
            return np.concatenate([p.header[name].astype(np.int64) for p in parts]) if parts else np.zeros(0, np.int64)

        return cls(
            np.concatenate([p.offsets for p in parts]) if parts else np.zeros(0, np.int64),
            field("flag"), field("bornTimestamp"), field("storeTimestamp"),
            join([p.body for p in parts]) if parts else pa.array([], pa.binary()),
            join([p.properties for p in parts]) if parts else pa.array([], pa.string()),
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
    messages: StoredMessages, *, drop: tuple[str, ...] = (), add: dict[str, pa.Array] | None = None,
) -> Copies:
    """The copies of ``messages`` (of ``SCHEDULE_TOPIC_XXXX`` or of the timer topic), in order.
    ``drop``: names the copy loses besides ``DELAY``; ``add``: names the copy gets at the end,
    a value per row (the timer's ``TIMER_DEQUEUE_MS``...).

    A stored message without ``REAL_TOPIC``, or whose ``REAL_QID`` is not a number, cannot be
    delivered: :class:`CorruptRecordError` naming its commitlog offset."""
    parsed = ParsedProperties(messages.properties)
    real_topic = parsed.column(PROPERTY_REAL_TOPIC)
    real_qid = parsed.column(PROPERTY_REAL_QID)
    qid_ok = pc.and_(pc.utf8_is_digit(real_qid), pc.less_equal(pc.utf8_length(real_qid), 9))
    bad = np.asarray(pc.or_(pc.is_null(real_topic), pc.invert(pc.fill_null(qid_ok, False))))
    if bad.any():
        offset = int(messages.offsets[int(np.flatnonzero(bad)[0])])
        raise CorruptRecordError(f"delayed message has no usable {PROPERTY_REAL_TOPIC}/{PROPERTY_REAL_QID}: it cannot be delivered",
                                 offset=offset)
    system = _kept_properties(parsed, pa.array([PROPERTY_DELAY, *drop, *(add or {})]))
    if add:
        pieces: list[object] = []
        for name, values in add.items():
            if isinstance(values, pa.ChunkedArray):
                values = values.combine_chunks()
            pieces += [name + "\x01", values.cast(pa.string()), "\x02"]
        system = pc.binary_join_element_wise(system, *pieces, "")
    return Copies(real_topic, np.asarray(real_qid.cast(pa.int32())), system.cast(pa.binary()))


def _kept_properties(parsed: ParsedProperties, dropped_names: pa.Array) -> pa.Array:
    """Every entry of each row but ``dropped_names`` and the store's ``RMQLOG_*`` markers, in
    stored order, joined per row (``name\x01value\x02``...). The copy gets them all as the
    store's own items: they were checked when first put (user names) or are RocketMQ's, so
    they are not checked again, and their order is kept."""
    n, keys = parsed.n, parsed.keys
    kept = ~np.asarray(pc.or_(pc.is_in(keys, dropped_names), pc.starts_with(keys, STORE_PROPERTY_PREFIX)))
    if parsed.spans is not None:
        joined = _kept_spans(parsed.spans, parsed.parent, kept, n)
        if joined is not None:
            return joined
    sel = pa.array(kept)
    pairs = pc.binary_join_element_wise(keys.filter(sel), "\x01", parsed.values.filter(sel), "\x02", "")
    row_offsets = np.concatenate([[0], np.cumsum(np.bincount(parsed.parent[kept], minlength=n))]).astype(np.int32)
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(row_offsets), pairs), "")
    return pc.fill_null(joined, "")


def _kept_spans(spans: PropertySpans, parent: np.ndarray, kept: np.ndarray, n: int) -> pa.Array | None:
    """:func:`_kept_properties` by copying each kept entry's bytes as stored: one gather, no
    join. Applies when every kept entry is stored as ``name\x01value\x02`` in one piece (what
    RocketMQ and this store write; the C parser found the name and value, so only the
    ``\x02`` after the value is checked); ``None`` (nothing made) otherwise."""
    start, end, rows = spans.key_start[kept], (spans.value_start + spans.value_len)[kept], parent[kept]
    raw = np.frombuffer(spans.data, np.uint8)
    row_end = spans.row_offsets[1:].astype(np.int64)[rows]
    if len(end) and not ((end < row_end).all() and (raw[end] == 2).all()):
        return None
    lengths = end + 1 - start
    row_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, weights=lengths, minlength=n).astype(np.int64), out=row_offsets[1:])
    if row_offsets[-1] >= 1 << 31:
        return None
    data = gather_slices(spans.data, start, lengths).buffers()[2] or pa.py_buffer(b"")
    # whole entries of valid UTF-8 strings (the read decoded them as such): valid UTF-8
    return pa.StringArray.from_buffers(n, pa.py_buffer(row_offsets.astype(np.int32)), data)
