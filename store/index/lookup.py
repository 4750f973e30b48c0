"""Messages by key: an index query, then the records read and checked, then the hash
collisions removed (RocketMQ's ``queryMessage`` and its client's key filter in one).

The index returns the commitlog offsets of every entry whose key hash matches, newest first
(:meth:`rmqlog.index.index_service.IndexService.query`). Each offset is taken only if the log
still holds a whole record starting there (retention may have deleted it; a damaged index
may point anywhere): the record is decoded one by one (at most 64: the scalar codec's
lengths and header checks, then the body CRC when asked; :mod:`rmqlog.log.point_read`), and
kept only if its topic is the one asked and it really carries the key, as a ``KEYS`` token
or as its ``UNIQ_KEY`` (``unique=True``: as its ``UNIQ_KEY`` only). A damaged index can
therefore cost a message, never return another one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..errors import CorruptRecordError
from ..log.decode import BadRecordError, RecordCheck, empty_message_table
from ..log.point_read import java_properties, records_table
from ..log.properties import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_UNIQ_KEY
from ..log.record import Record, ScanKind
from ..log.wire import stored_records
from ..results import StoredRecords

if TYPE_CHECKING:
    from ..log.commitlog import CommitLog
    from .index_service import IndexService


def messages_by_key(
    index: IndexService,
    commitlog: CommitLog,
    tail: int,
    topic: str,
    key: str,
    *,
    max_count: int,
    begin_ms: int,
    end_ms: int | None,
    check_crc: bool,
    unique: bool = False,
) -> pa.Table:
    """The messages of ``topic`` carrying ``key``, stored in ``[begin_ms, end_ms]``, oldest
    first, at most ``max_count`` (and the index's ``max_msgs_num_batch``). ``tail``: the
    published tail (nothing at or past it is read). Raises :class:`CorruptRecordError` for
    a record that fails its checks."""
    found = _found(index, commitlog, tail, topic, key, max_count, begin_ms, end_ms, unique)
    if not found:
        return empty_message_table()
    return records_table(found, check_crc=check_crc, path=str(commitlog.segments.directory))


def records_by_key(
    index: IndexService,
    commitlog: CommitLog,
    tail: int,
    topic: str,
    key: str,
    *,
    max_count: int,
    begin_ms: int,
    end_ms: int | None,
    check_crc: bool,
    unique: bool = False,
) -> StoredRecords:
    """:func:`messages_by_key`'s records byte-exact (``QUERY_MESSAGE``'s body), oldest first;
    each checked (lengths, and its body CRC with ``check_crc``) before it is copied."""
    found = _found(index, commitlog, tail, topic, key, max_count, begin_ms, end_ms, unique)
    if not found:
        return StoredRecords.empty()
    offsets = np.array([o for o, _ in found], np.int64)
    try:
        parts = commitlog.read_stored_records(offsets, check=RecordCheck(crc=check_crc), tail=tail)
    except BadRecordError as e:
        raise CorruptRecordError(f"damaged commitlog record: {e.reason}", path=e.path, offset=e.offset) from None
    return stored_records(parts)


def _found(
    index: IndexService,
    commitlog: CommitLog,
    tail: int,
    topic: str,
    key: str,
    max_count: int,
    begin_ms: int,
    end_ms: int | None,
    unique: bool,
) -> list[tuple[int, Record]]:
    """(offset, record) of each whole record the index points at that really carries ``key``."""
    offsets = index.query(topic, key, max_count, begin_ms, end_ms)
    low = commitlog.min_offset()
    found = []
    for o in sorted(set(offsets)):  # at most max_msgs_num_batch (64) candidates
        if low <= o < tail:
            at = commitlog.record_at(o, tail)
            if (
                at is not None
                and at.kind is ScanKind.RECORD
                and at.record is not None
                and _carries(at.record, topic, key, unique)
            ):
                found.append((o, at.record))
    return found


def _carries(record: Record, topic: str, key: str, unique: bool) -> bool:
    """Whether a record of ``topic`` really carries ``key`` (its UNIQ_KEY; with ``unique``
    false also a KEYS token): what removes the other keys' messages (hash collisions)."""
    if record.topic != topic:
        return False
    props = dict(java_properties(record.properties))
    if props.get(PROPERTY_UNIQ_KEY) == key:
        return True
    return not unique and key in props.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR)
