"""Consumer offsets and queue positions: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
GET_EARLIEST_MSG_STORETIME (32): RocketMQ 4.9.8's ``ConsumerManageProcessor`` and
``AdminBrokerProcessor``, all through the store's public API.

Offsets live in the broker's table in memory (``broker.consumer_offsets``,
:mod:`rmqnet.broker.consumer_offsets`): a commit or a query costs the same at any number of
offsets; the table is merged with the store's ``config/consumerOffset.json`` (what the store
API, ``rmqlog lag`` and Spark consumer groups read) every ``flushConsumerOffsetInterval`` ms
and at a clean stop (:mod:`rmqnet.broker.state`).

(code: request extFields; response extFields)
- 14: ``consumerGroup, topic, queueId``; ``offset``; none stored: 0 when the queue's min offset is <= 0 and its first
  record is not "on disk" (Java's ``checkInDiskByConsumeOffset``: more than 40% of the memory behind the commitlog's
  end), else ``QUERY_NOT_FOUND`` 22 (the client then asks 30 or 29)
- 15: ``consumerGroup, topic, queueId, commitOffset``; none; a negative offset (ali-ons' "nothing yet") is not stored;
  oneway tolerated
- 29: ``topic, queueId, timestamp``; ``offset``: the first at or after the time (the store's rule; max offset if none)
- 30 / 31: ``topic, queueId``; ``offset``: max / min offset (0 for a queue that does not exist)
- 32: ``topic, queueId``; ``timestamp``: store time (ms) of the queue's first message, -1 if none

A field missing or mistyped is ``SYSTEM_ERROR`` naming it (the dispatch table); a name or
queue the store refuses is ``SYSTEM_ERROR`` with the store's message.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import rmqlog
from rmqlog.arguments import queue_id_arg
from rmqlog.paths import validate_group, validate_topic

from ..remoting import RemotingCommand, ResponseCode, ext_int, ext_long, ext_str
from . import pull
from .consumer_offsets import commit_offset
from .peer import Peer

if TYPE_CHECKING:
    from .broker import Broker

Handler = Callable[["Broker", Peer, RemotingCommand], RemotingCommand]


def _queue(req: RemotingCommand) -> tuple[str, int]:
    return ext_str(req.ext_fields, "topic"), ext_int(req.ext_fields, "queueId")


def _offset_reply(req: RemotingCommand, offset: int) -> RemotingCommand:
    return req.reply(ResponseCode.SUCCESS, None, {"offset": int(offset)})


def first_record_in_disk(broker: Broker, topic: str, queue_id: int, offset: int) -> bool:
    """Java's ``checkInDiskByConsumeOffset``: whether the record at ``offset`` of the queue is
    further behind the commitlog's end than ``accessMessageInMemoryMaxRatio`` of the memory
    (no such record: False)."""
    found = broker.store.read_window(topic, queue_id, offset, max_count=1, raw=True)
    records = found.records
    if found.status != rmqlog.GetMessageStatus.FOUND or records is None or not len(records):
        return False
    ratio = broker.config.access_message_in_memory_max_ratio
    behind = broker.store.published_tail() - int(records.commit_log_offsets[0])
    return behind > pull.total_memory() * ratio // 100


def _store_failures(handler: Handler) -> Handler:
    """``handler`` with a store refusal (:class:`rmqlog.StoreError`) answered as the pull path
    answers it (:func:`rmqnet.broker.pull.store_failure`: SYSTEM_ERROR with the store's message)."""

    @functools.wraps(handler)
    def guarded(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
        try:
            return handler(broker, peer, req)
        except rmqlog.StoreError as exc:
            return pull.store_failure(req, exc)

    return guarded


@_store_failures
def query_consumer_offset(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    group = ext_str(req.ext_fields, "consumerGroup")
    topic, queue_id = _queue(req)
    offset = broker.consumer_offsets.query(validate_group(group), validate_topic(topic), queue_id_arg(queue_id))
    if offset >= 0:
        return _offset_reply(req, offset)
    if broker.store.min_offset(topic, queue_id) <= 0 and not first_record_in_disk(broker, topic, queue_id, 0):
        return _offset_reply(req, 0)
    return req.reply(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")


@_store_failures
def update_consumer_offset(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    group = ext_str(req.ext_fields, "consumerGroup")
    topic, queue_id = _queue(req)
    offset = ext_long(req.ext_fields, "commitOffset")
    if offset >= 0:  # ali-ons sends -1 for a queue it never consumed: nothing to store
        commit_offset(broker, group, topic, queue_id, offset)
    return req.reply(ResponseCode.SUCCESS)


@_store_failures
def search_offset_by_timestamp(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    topic, queue_id = _queue(req)
    return _offset_reply(req, broker.store.offset_for_timestamp(topic, queue_id, ext_long(req.ext_fields, "timestamp")))


@_store_failures
def get_max_offset(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    return _offset_reply(req, broker.store.max_offset(*_queue(req)))


@_store_failures
def get_min_offset(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    return _offset_reply(req, broker.store.min_offset(*_queue(req)))


@_store_failures
def get_earliest_msg_storetime(broker: Broker, peer: Peer, req: RemotingCommand) -> RemotingCommand:
    return req.reply(ResponseCode.SUCCESS, None, {"timestamp": broker.store.earliest_store_time(*_queue(req))})
