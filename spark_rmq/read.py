"""Executor side of the source: one queue range -> Arrow record batches.

A :class:`QueueRange` carries everything ``read()`` needs (store path, queue, offsets, tag
filter, data-loss policy), so readers hold no state between calls. Every partition of the
source reads itself (:class:`Readable`: these, and over the wire :mod:`spark_rmq.wire_read`'s),
so a reader hands any of them to its own ``read``. Each window of a range is
one :meth:`rmqlog.MessageStore.read_window`, the store's one read of a window of a queue
(units filtered on their tag hash before the commitlog is touched, the records decoded into
one Arrow table, filtered on the exact tag string, retention's deletions reported); this
module turns its statuses into the source's data-loss policy and cuts by store time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from rmqlog import CorruptStoreError, GetMessageStatus, compile_filter

from .offsets import check_data_loss, queue_key
from .stores import busy, using

TS_UNIT_PER_MS = 1000  # storeTimestamp is timestamp[us]; the store keeps milliseconds


@runtime_checkable
class Readable(Protocol):
    """A partition of the source: it reads its own messages on an executor."""

    def read(self) -> Iterator[pa.RecordBatch]: ...


def read_partition(part: InputPartition) -> Iterator[pa.RecordBatch]:
    """The Arrow batches of any of the source's partitions (each reads itself)."""
    assert isinstance(part, Readable), type(part)
    return part.read()


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
    sql92: str | None = None  # the ``sql92`` option: the store keeps only the matching messages
    columns: tuple[str, ...] | None = None  # the ``columns`` option: only these are made (None: all)

    @property
    def key(self) -> str:
        return queue_key(self.topic, self.queue_id)

    def read(self) -> Iterator[pa.RecordBatch]:
        return read_range(self)


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
    columns: tuple[str, ...] | None = None

    def read(self) -> Iterator[pa.RecordBatch]:
        return read_key_lookup(self)


@dataclass(frozen=True)
class PackedRanges(InputPartition):
    """Several queues' ranges read one after the other by one task (small batches:
    :func:`spark_rmq.offsets.pack_ranges`); each is a :class:`QueueRange` or, over the wire,
    a :class:`spark_rmq.wire_read.WireRange`."""

    parts: tuple[InputPartition, ...]

    def read(self) -> Iterator[pa.RecordBatch]:
        """The batches of each range in turn."""
        for one in self.parts:
            yield from read_partition(one)


def read_key_lookup(part: KeyLookup) -> Iterator[pa.RecordBatch]:
    """Yield the messages :meth:`rmqlog.MessageStore.query_by_key` (or ``query_by_unique_key``
    for ``unique``) finds in each topic, oldest first per topic (only ``part.columns``, if set)."""
    with using(part.path, create=False, read_only=part.read_only) as ms, busy():
        tables = [
            ms.query_by_unique_key(t, part.key, check_crc=part.check_crc)
            if part.unique
            else ms.query_by_key(t, part.key, max_count=ms.config.max_msgs_num_batch, check_crc=part.check_crc)
            for t in part.topics
        ]
    for table in tables:
        if table.num_rows:
            yield from (table.select(list(part.columns)) if part.columns else table).to_batches()


def read_range(part: QueueRange) -> Iterator[pa.RecordBatch]:
    """Yield the messages of ``part`` as record batches of the message schema, or of the
    columns ``part.columns`` names (only those are made: :meth:`rmqlog.MessageStore.read_window`).

    Each window is one :meth:`rmqlog.MessageStore.read_window` (at most ``part.batch_rows``
    units, the tag filter applied by the store), read inside :func:`spark_rmq.stores.busy`;
    the batches are yielded outside it. Raises :class:`spark_rmq.errors.QueryDataLossError`
    if retention deleted part of the range (before or while it is read: the window's
    ``OFFSET_TOO_SMALL``, ``OFFSET_FOUND_NULL`` or ``removed``) and ``part.fail_on_data_loss``,
    naming the queue and exactly the offsets lost; otherwise those messages are skipped with
    a warning. :class:`rmqlog.StoreNotFoundError` if there is no store at the path (nothing is
    created); :class:`rmqlog.CorruptStoreError` if the queue now ends below the range. Each
    message is checked against its consume-queue unit (and its body CRC with
    ``part.check_crc``): raises :class:`rmqlog.CorruptQueueError` or
    :class:`rmqlog.CorruptRecordError`.
    """
    if part.end <= part.start:
        return
    tags = " || ".join(part.tags) if part.tags else None
    # the SQL92 filter, compiled once per task, is evaluated by the store over each whole
    # window's properties column (never row by row): the window holds only the matches
    sql92 = compile_filter(part.sql92) if part.sql92 is not None else None
    columns = part.columns
    timed = part.ts_from_ms is not None or part.ts_until_ms is not None
    if columns is not None and timed and "storeTimestamp" not in columns:
        columns = (*columns, "storeTimestamp")  # for the time cut, dropped after it
    pos = part.start
    while pos < part.end:
        until = min(part.end, pos + part.batch_rows)
        with using(part.path, create=False, read_only=part.read_only) as ms:
            r = ms.read_window(
                part.topic,
                part.queue_id,
                pos,
                max_count=until - pos,
                tags=tags,
                until=until,
                check_crc=part.check_crc,
                sql92=sql92,
                columns=columns,
            )
        if r.status in _GONE:  # retention deleted where the range stood: the range's rest from the new start
            pos = check_data_loss(part.key, pos, r.next_begin_offset, part.fail_on_data_loss)
            continue
        if r.status not in _READ:  # the queue ends below the range (cut, or another store there)
            raise CorruptStoreError(
                f"queue {part.key} ends at offset {r.max_offset}, below offset {pos} of the range "
                f"being read ({r.status.value})"
            )
        if r.removed is not None:  # deleted while this window was read: skipped by the store
            check_data_loss(part.key, r.removed[0], r.removed[1], part.fail_on_data_loss)
        pos = r.next_begin_offset
        table = _time_cut(part, r.messages)
        if columns is not part.columns:
            table = table.select(list(part.columns or ()))
        if table.num_rows:
            yield from table.to_batches()


_GONE = (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_FOUND_NULL)
_READ = (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING)


def _time_cut(part: QueueRange, table: pa.Table) -> pa.Table:
    """The rows of ``table`` stored in ``[part.ts_from_ms, part.ts_until_ms)`` (batch filter pushdown)."""
    if part.ts_from_ms is None and part.ts_until_ms is None:
        return table
    ts = pc.cast(table["storeTimestamp"], pa.int64())
    keep = pa.array(np.ones(table.num_rows, bool))
    if part.ts_from_ms is not None:
        keep = pc.and_(keep, pc.greater_equal(ts, part.ts_from_ms * TS_UNIT_PER_MS))
    if part.ts_until_ms is not None:
        keep = pc.and_(keep, pc.less(ts, part.ts_until_ms * TS_UNIT_PER_MS))
    return table.filter(keep)
