"""Executor side of the source: one queue range -> Arrow record batches.

A :class:`QueueRange` carries everything ``read()`` needs (store path, queue, offsets, tag
filter, data-loss policy), so readers hold no state between calls. Reading is vectorized:
consume-queue units are read as one numpy slice per window, filtered on their tag hash
before the commitlog is touched, then the surviving records are decoded by the store's
gather into one Arrow table per window and filtered on the exact tag string.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from rmqlog import MESSAGE_SCHEMA, CorruptStoreError, MessagesDeletedError, MessageStore
from rmqlog.hashing import java_string_hash
from rmqlog.queue.checked_read import read_units
from rmqlog.queue.consume_queue import FILLER_SIZE

from .offsets import check_data_loss, queue_key
from .stores import busy, using

TS_UNIT_PER_MS = 1000  # storeTimestamp is timestamp[us]; the store keeps milliseconds


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """Messages ``[start, end)`` of one queue: the unit of work of one Spark task.

    ``ts_from_ms``/``ts_until_ms`` (inclusive/exclusive, batch filter pushdown) drop rows by
    store time; the offsets were already narrowed to them, this is the exact cut.
    ``check_crc`` (the ``checkCRC`` option): check each body's CRC.
    """

    path: str
    topic: str
    queue_id: int
    start: int
    end: int
    tags: tuple[str, ...] | None = None
    fail_on_data_loss: bool = True
    batch_rows: int = 65536
    ts_from_ms: int | None = None
    ts_until_ms: int | None = None
    check_crc: bool = True
    read_only: bool = False  # the ``readOnly`` option: the executor opens the store read-only

    @property
    def key(self) -> str:
        return queue_key(self.topic, self.queue_id)


def tag_codes(tags: tuple[str, ...]) -> np.ndarray:
    return np.array(sorted({java_string_hash(t) for t in tags}), np.int64)


@dataclass(frozen=True)
class KeyLookup(InputPartition):
    """The batch options ``key`` / ``msgId``: the messages of ``topics`` found through the
    index files (a few per topic: one task reads them all)."""

    path: str
    topics: tuple[str, ...]
    key: str
    unique: bool = False
    check_crc: bool = True
    read_only: bool = False


def read_key_lookup(part: KeyLookup, schema: pa.Schema = MESSAGE_SCHEMA) -> Iterator[pa.RecordBatch]:
    """Yield the messages :meth:`rmqlog.MessageStore.query_by_key` (or ``query_by_unique_key``
    for ``unique``) finds in each topic, oldest first per topic."""
    with using(part.path, create=False, read_only=part.read_only) as ms, busy():
        tables = [
            ms.query_by_unique_key(t, part.key, check_crc=part.check_crc) if part.unique
            else ms.query_by_key(t, part.key, max_count=ms.config.max_msgs_num_batch, check_crc=part.check_crc)
            for t in part.topics
        ]
    for table in tables:
        if table.num_rows:
            yield from (table if table.schema.equals(schema) else table.cast(schema)).to_batches()


def read_range(part: QueueRange, schema: pa.Schema = MESSAGE_SCHEMA) -> Iterator[pa.RecordBatch]:
    """Yield the messages of ``part`` as record batches of ``schema`` (the message schema).

    Raises :class:`spark_rmq.errors.QueryDataLossError` if retention deleted part of the range
    (before or while it is read) and ``part.fail_on_data_loss``, naming the queue and exactly
    the offsets lost (from the first one the range still needed to the queue's new first
    offset); otherwise those messages are skipped with a warning.
    :class:`rmqlog.StoreNotFoundError` if there is no store at the path (nothing is created).
    Each message is checked against its consume-queue unit (and its body CRC with
    ``part.check_crc``): raises :class:`rmqlog.CorruptQueueError` or
    :class:`rmqlog.CorruptRecordError` (see :mod:`rmqlog.queue.checked_read`). Each window is read
    inside :func:`spark_rmq.stores.busy`; the batches are yielded outside it.
    """
    if part.end <= part.start:
        return
    with using(part.path, create=False, read_only=part.read_only) as ms:
        # taken before the queue's first offset: every unit from there on points at or after
        # it, so a unit pointing below it is damaged (CorruptQueueError), not lost to retention
        floor = ms.commitlog.min_offset()
        first = ms.min_offset(part.topic, part.queue_id)
    pos = check_data_loss(part.key, part.start, first, part.fail_on_data_loss)
    while pos < part.end:
        n = min(part.batch_rows, part.end - pos)
        try:
            with busy():
                table = _read_window(ms, part, pos, n, floor, schema)
        except MessagesDeletedError as gone:  # retention overtook the read: the range's rest from its new start
            pos = check_data_loss(part.key, max(pos, gone.start), gone.end, part.fail_on_data_loss)
            continue
        pos += n
        if table is not None:
            yield from table.to_batches()


def _read_window(
    ms: MessageStore, part: QueueRange, pos: int, n: int, floor: int, schema: pa.Schema,
) -> pa.Table | None:
    """Messages ``[pos, pos + n)`` of the range that pass its filters (None if none do).

    Raises :class:`rmqlog.MessagesDeletedError` when retention deleted some of them since the
    range was planned (their consume-queue segment, or their records)."""
    cq = ms.consume_queue(part.topic, part.queue_id)
    units = cq.read(pos, n)
    offsets = units["offset"].astype(np.int64)
    real = units["size"] != FILLER_SIZE
    # units at or after the floor but below the commitlog's first offset now: retention
    # deleted their records while this task was reading
    low = ms.commitlog.min_offset()
    lost = np.flatnonzero(real & (offsets >= floor) & (offsets < low))
    if len(units) < n or len(lost):  # (a short read: the queue's segment went, too)
        start = pos + (int(lost[0]) if len(lost) else len(units))
        now_first = ms.min_offset(part.topic, part.queue_id)
        if now_first <= start and not len(lost):  # not retention: a segment missing inside the queue
            raise CorruptStoreError(f"consume-queue segment holding queue offset {start} is missing", path=str(cq.directory))
        end = now_first if now_first > start else pos + int(lost[-1]) + 1
        raise MessagesDeletedError(part.topic, part.queue_id, start, end)
    live = real.copy()
    if part.tags:
        live &= np.isin(units["tagsCode"].astype(np.int64), tag_codes(part.tags))
    rows = np.flatnonzero(live)
    if not len(rows):
        return None
    table = read_units(
        ms.commitlog, cq, units[rows], pos + rows.astype(np.int64), topic=part.topic, queue_id=part.queue_id,
        floor=floor, tail=ms.published_tail(), check_crc=part.check_crc,
    )
    if part.tags:  # the hash can collide: keep only the exact tags
        table = table.filter(pc.fill_null(pc.is_in(table["tags"], pa.array(sorted(part.tags))), False))
    if part.ts_from_ms is not None or part.ts_until_ms is not None:
        ts = pc.cast(table["storeTimestamp"], pa.int64())
        keep = pa.array(np.ones(table.num_rows, bool))
        if part.ts_from_ms is not None:
            keep = pc.and_(keep, pc.greater_equal(ts, part.ts_from_ms * TS_UNIT_PER_MS))
        if part.ts_until_ms is not None:
            keep = pc.and_(keep, pc.less(ts, part.ts_until_ms * TS_UNIT_PER_MS))
        table = table.filter(keep)
    if table.num_rows == 0:
        return None
    return table if table.schema.equals(schema) else table.cast(schema)
