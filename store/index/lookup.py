"""Messages by key: an index query, then the records read and checked, then the hash
collisions removed (RocketMQ's ``queryMessage`` and its client's key filter in one).

The index returns the commitlog offsets of every entry whose key hash matches, newest first
(:meth:`store.index.index_service.IndexService.query`). Each offset is taken only if the log
still holds a whole record starting there (retention may have deleted it; a damaged index
may point anywhere): the record is read with the store's checks (body CRC when asked), and
kept only if its topic is the one asked and it really carries the key, as a ``KEYS`` token
or as its ``UNIQ_KEY`` (``unique=True``: as its ``UNIQ_KEY`` only). A damaged index can
therefore cost a message, never return another one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptRecordError
from ..log.decode import BadRecordError, RecordCheck, empty_message_table
from ..log.properties import PROPERTY_UNIQ_KEY
from ..log.record import ScanKind
from .index_keys import key_matches

if TYPE_CHECKING:
    from ..log.commitlog import CommitLog
    from .index_service import IndexService


def messages_by_key(
    index: IndexService, commitlog: CommitLog, tail: int, topic: str, key: str, *, max_count: int,
    begin_ms: int, end_ms: int | None, check_crc: bool, unique: bool = False,
) -> pa.Table:
    """The messages of ``topic`` carrying ``key``, stored in ``[begin_ms, end_ms]``, oldest
    first, at most ``max_count`` (and the index's ``max_msgs_num_batch``). ``tail``: the
    published tail (nothing at or past it is read). Raises :class:`CorruptRecordError` for
    a record that fails its checks."""
    offsets = index.query(topic, key, max_count, begin_ms, end_ms)
    low = commitlog.min_offset()
    found = sorted({o for o in offsets if low <= o < tail and _is_record(commitlog, o, tail)})
    if not found:
        return empty_message_table()
    try:
        table = commitlog.read_messages(np.array(found, np.int64), check=RecordCheck(crc=check_crc), tail=tail)
    except BadRecordError as e:
        raise CorruptRecordError(f"damaged commitlog record: {e.reason}", path=e.path, offset=e.offset) from None
    if unique:
        uniq = pc.map_lookup(table.column("properties"), PROPERTY_UNIQ_KEY, "last")
        same = pc.and_(pc.equal(table.column("topic"), topic), pc.equal(uniq, key))
        return table.filter(pc.fill_null(same, False))
    return table.filter(pa.array(key_matches(table, topic, key)))


def _is_record(commitlog: CommitLog, offset: int, tail: int) -> bool:
    found = commitlog.record_at(offset, tail)
    return found is not None and found.kind is ScanKind.RECORD
