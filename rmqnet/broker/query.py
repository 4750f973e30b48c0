"""QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33): RocketMQ 4.9.8's ``QueryMessageProcessor``.

QUERY_MESSAGE: extFields ``topic, key, maxNum, beginTimestamp, endTimestamp`` (all required),
plus ``_UNIQUE_KEY_QUERY`` = ``"true"`` for a lookup by the client's msgId (``UNIQ_KEY``; then
``maxNum`` is ``defaultQueryMaxNum`` 32, as Java sets it). The store's index answers
(``query_by_key`` / ``query_by_unique_key``: hash collisions removed, at most
``maxMsgsNumBatch``); the body is the found records, byte-exact, concatenated (a list of
buffers, unjoined), oldest first; extFields ``indexLastUpdateTimestamp`` and
``indexLastUpdatePhyoffset``. Nothing found: ``QUERY_NOT_FOUND`` 22 ("can not find message,
maybe time range not correct"; also when the store keeps no index, saying so).

VIEW_MESSAGE_BY_ID: extField ``offset``, the commitlog offset (decoded by the client from an
offset msgId); the body is that one record, byte-exact (``MessageStore.wire.record_at``). No record
starts there (deleted, not yet published, inside another record): ``SYSTEM_ERROR`` "can not
find message by the offset, N", as Java. An offset from the network never returns bytes that
are not one whole record starting there, listed by its queue's unit (a body made to look like
a record is no queue's unit).

``indexLastUpdateTimestamp`` / ``indexLastUpdatePhyoffset``: the newest index file's end store
time and end commitlog offset (``MessageStore.wire.index_last_update``), as Java's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import rmqlog

from ..remoting import RemotingCommand, ResponseCode
from ..remoting.request_headers import QueryMessageHeader, ViewMessageHeader
from . import pull
from .peer import Peer

if TYPE_CHECKING:
    from .broker import Broker

#: MessageStoreConfig.defaultQueryMaxNum
DEFAULT_QUERY_MAX_NUM = 32
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"


def query_message(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    ext = req.ext_fields
    h = QueryMessageHeader.read(ext)
    topic, key, max_num, begin, end = h.topic, h.key, h.max_num, h.begin_timestamp, h.end_timestamp
    unique = str(ext.get(UNIQUE_MSG_QUERY_FLAG, "")).lower() == "true"
    store: rmqlog.MessageStore = broker.store
    try:
        if unique:
            found = store.query_by_unique_key(topic, key, raw=True)
            found = _first(found, DEFAULT_QUERY_MAX_NUM)
        else:
            found = store.query_by_key(topic, key, max_num, begin, end, raw=True)
        last_ms, last_offset = store.wire.index_last_update()
    except rmqlog.IndexDisabledError:
        return req.reply(
            ResponseCode.QUERY_NOT_FOUND,
            "can not find message: this broker keeps no message index (messageIndexEnable=false)",
        )
    except rmqlog.StoreError as exc:
        return pull.store_failure(req, exc)
    ext_out = {"indexLastUpdateTimestamp": last_ms, "indexLastUpdatePhyoffset": last_offset}
    if not len(found):
        return req.reply(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext_out)
    return req.reply(ResponseCode.SUCCESS, None, ext_out, [memoryview(found.data)])


def _first(records: rmqlog.StoredRecords, n: int) -> rmqlog.StoredRecords:
    """The first ``n`` of ``records``."""
    if len(records) <= n:
        return records
    return rmqlog.StoredRecords(
        records.array.slice(0, n), records.commit_log_offsets[:n], records.sizes[:n], records.queue_offsets[:n]
    )


def view_message_by_id(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    offset = ViewMessageHeader.read(req.ext_fields).offset
    store: rmqlog.MessageStore = broker.store
    not_found = req.reply(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
    try:
        found = store.wire.record_at(offset) if offset >= 0 else None
        if found is None or not len(found) or not _indexed_at(store, found, offset):
            return not_found
    except (rmqlog.CorruptRecordError, rmqlog.InvalidArgumentError):
        return not_found  # (what lies there is not a whole record starting there)
    except rmqlog.StoreError as exc:
        return pull.store_failure(req, exc)
    return req.reply(ResponseCode.SUCCESS, None, None, [memoryview(found.data)])


def _indexed_at(store: rmqlog.MessageStore, found: rmqlog.StoredRecords, offset: int) -> bool:
    """Whether the record read at ``offset`` is one its queue lists there: its consume-queue
    unit (named by the record's own topic, queue id and queue offset) points at ``offset``.
    Bytes inside a message body made to look like a record are no queue's unit, so an offset
    from the network never gets them back."""
    row = rmqlog.decode_record_rows(found.data)[0]  # one record: ~10 us, not the table's ~1 ms
    unit = store.read_window(row["topic"], row["queueId"], row["queueOffset"], max_count=1, raw=True)
    recs = unit.records
    return (
        unit.status == rmqlog.GetMessageStatus.FOUND
        and recs is not None
        and len(recs) == 1
        and int(recs.commit_log_offsets[0]) == offset
    )
