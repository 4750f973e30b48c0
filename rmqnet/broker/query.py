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
offset msgId); the body is that one record, byte-exact. No record starts there:
``SYSTEM_ERROR`` "can not find message by the offset, N", as Java.

Until the store offers raw reads by commitlog offset, each record is found through the
public API in two steps: the message (``message_by_offset``, or a row of a key query) names
its queue and queue offset, and the window read of that one unit (``read_window(...,
raw=True)``) gives its bytes; a record is sent only when the unit's commitlog offset is the
one asked for, so an offset from the network that points inside another record never
returns bytes. A per-record Python step, bounded by ``maxNum`` (at most 64): fine for a
single request; the store's raw query will replace it.

``indexLastUpdate*``: Java reports the index file's last update; the store does not expose
it, so these are the store time and commitlog offset of the newest record found (what
``MQAdminImpl`` compares them for: which broker's answer is the most recent).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

import rmqlog

from ..remoting import RemotingCommand, RequestCode, ResponseCode, ext_int, ext_long, ext_str
from . import pull
from .peer import Peer

#: MessageStoreConfig.defaultQueryMaxNum
DEFAULT_QUERY_MAX_NUM = 32
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"


def record_at(store: rmqlog.MessageStore, topic: str, queue_id: int, queue_offset: int,
              commit_log_offset: int) -> memoryview | None:
    """The stored bytes of the record the unit ``topic/queue_id/queue_offset`` points at, if
    that record starts at ``commit_log_offset``; else ``None``."""
    found = store.read_window(topic, queue_id, queue_offset, max_count=1, raw=True)
    recs = found.records
    if found.status != rmqlog.GetMessageStatus.FOUND or recs is None or not len(recs):
        return None
    if int(recs.commit_log_offsets[0]) != commit_log_offset or int(recs.queue_offsets[0]) != queue_offset:
        return None
    return memoryview(recs.data)


def _store_ms(value: Any) -> int:
    """A store timestamp (datetime or ms) as ms since the epoch."""
    if hasattr(value, "timestamp"):
        return int(round(value.timestamp() * 1000))
    return int(value)


def query_message(broker: Any, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    ext = req.ext_fields
    topic, key = ext_str(ext, "topic"), ext_str(ext, "key")
    max_num = ext_int(ext, "maxNum")
    begin, end = ext_long(ext, "beginTimestamp"), ext_long(ext, "endTimestamp")
    unique = str(ext.get(UNIQUE_MSG_QUERY_FLAG, "")).lower() == "true"
    store: rmqlog.MessageStore = broker.store
    try:
        if unique:
            table = store.query_by_unique_key(topic, key)
            table = table.slice(0, pull.conf(broker, "default_query_max_num", DEFAULT_QUERY_MAX_NUM))
        else:
            table = store.query_by_key(topic, key, max_num, begin, end)
        body, newest_ms, newest_offset = _records(store, table)
    except rmqlog.IndexDisabledError:
        return req.reply(ResponseCode.QUERY_NOT_FOUND, "can not find message: this broker keeps no message index "
                         "(messageIndexEnable=false)")
    except rmqlog.StoreError as exc:
        return pull.store_failure(req, exc)
    ext_out = {"indexLastUpdateTimestamp": newest_ms, "indexLastUpdatePhyoffset": newest_offset}
    if not body:
        return req.reply(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext_out)
    return req.reply(ResponseCode.SUCCESS, None, ext_out, body)


def _records(store: rmqlog.MessageStore, table: pa.Table) -> tuple[list[Any], int, int]:
    """The raw records of a query's rows (in its order), the newest store time and offset."""
    cols = table.select(["topic", "queueId", "queueOffset", "commitLogOffset", "storeTimestamp"]).to_pylist()
    body: list[Any] = []
    newest_ms = newest_offset = 0
    for row in cols:
        got = record_at(store, row["topic"], row["queueId"], row["queueOffset"], row["commitLogOffset"])
        if got is None:  # deleted by retention since the index was read: skipped, as Java skips it
            continue
        body.append(got)
        newest_ms = max(newest_ms, _store_ms(row["storeTimestamp"]))
        newest_offset = max(newest_offset, int(row["commitLogOffset"]))
    return body, newest_ms, newest_offset


def view_message_by_id(broker: Any, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    offset = ext_long(req.ext_fields, "offset")
    not_found = req.reply(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
    store: rmqlog.MessageStore = broker.store
    try:
        row = store.message_by_offset(offset) if offset >= 0 else None
        got = None if row is None else record_at(store, row["topic"], row["queueId"], row["queueOffset"], offset)
    except (rmqlog.CorruptRecordError, rmqlog.InvalidArgumentError):
        return not_found  # (no record starts there: what was read is not one)
    except rmqlog.StoreError as exc:
        return pull.store_failure(req, exc)
    if got is None:
        return not_found
    return req.reply(ResponseCode.SUCCESS, None, None, [got])


def install(broker: Any) -> None:
    broker.table.register(RequestCode.QUERY_MESSAGE, query_message)
    broker.table.register(RequestCode.VIEW_MESSAGE_BY_ID, view_message_by_id)
