"""The broker's processor table: every request code it serves and its handler, in one place
(RocketMQ's ``BrokerController.registerProcessor``, grouped by its processors).

A handler is ``handler(broker, peer, request)`` (:data:`rmqnet.broker.dispatch.Handler`): a
module's function, or the ``handle`` of the broker's service for a family that batches its
requests (sends, send-backs, END_TRANSACTION). A code given two handlers raises ``ValueError``
when the table is built (the broker does not start). Codes the broker sends but does not serve
(NOTIFY_CONSUMER_IDS_CHANGED 40, CHECK_TRANSACTION_STATE 39) are not here; every other code
is answered REQUEST_CODE_NOT_SUPPORTED (:mod:`rmqnet.broker.dispatch`). docs/broker.md,
"Request codes served", lists the same codes (a test holds the two equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..remoting import RequestCode
from . import (
    admin,
    admin_config,
    admin_groups,
    admin_stats,
    consumers,
    locks,
    offsets,
    pop_inflight,
    pop_remoting,
    pull,
    query,
    slave_sync,
)
from .dispatch import BeforeHook, Handler, ProcessorTable

if TYPE_CHECKING:
    from .broker import Broker


def processor_table(broker: Broker) -> ProcessorTable:
    """The table of ``broker`` (its services built): code -> handler, and the hooks run before
    every handler. Raises ``ValueError`` naming a code listed twice."""
    handlers: list[tuple[int, Handler]] = [
        # SendMessageProcessor: sends, batched per turn of the event loop (rmqnet.broker.send)
        (RequestCode.SEND_MESSAGE, broker.sender.handle),
        (RequestCode.SEND_MESSAGE_V2, broker.sender.handle),
        (RequestCode.SEND_BATCH_MESSAGE, broker.sender.handle),
        # ... and its send-back: retries and dead letters (rmqnet.broker.send_back)
        (RequestCode.CONSUMER_SEND_MSG_BACK, broker.send_back.handle),
        # PullMessageProcessor: pulls, held by long polling (rmqnet.broker.pull, rmqnet.broker.holds)
        (RequestCode.PULL_MESSAGE, pull.pull_message),
        # RocketMQ 5's PopMessageProcessor, AckMessageProcessor, ChangeInvisibleTimeProcessor
        # (rmqnet.broker.pop_remoting over rmqnet.broker.pop; held pops: broker.pop_holds)
        (RequestCode.POP_MESSAGE, pop_remoting.pop_message),
        (RequestCode.ACK_MESSAGE, pop_remoting.ack_message),
        (RequestCode.CHANGE_MESSAGE_INVISIBLETIME, pop_remoting.change_invisible_time),
        # ours: a POP group's messages in flight (rmqnet.broker.pop_inflight)
        (RequestCode.GET_POP_INFLIGHT, pop_inflight.get_pop_inflight),
        # QueryMessageProcessor (rmqnet.broker.query)
        (RequestCode.QUERY_MESSAGE, query.query_message),
        (RequestCode.VIEW_MESSAGE_BY_ID, query.view_message_by_id),
        # ClientManageProcessor: the client registry (rmqnet.broker.consumers)
        (RequestCode.HEART_BEAT, consumers.heart_beat),
        (RequestCode.UNREGISTER_CLIENT, consumers.unregister_client),
        # ConsumerManageProcessor: a group's consumers, its offsets (rmqnet.broker.offsets)
        (RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumers.get_consumer_list_by_group),
        (RequestCode.QUERY_CONSUMER_OFFSET, offsets.query_consumer_offset),
        (RequestCode.UPDATE_CONSUMER_OFFSET, offsets.update_consumer_offset),
        # EndTransactionProcessor: commit or roll back a half message (rmqnet.broker.transactions)
        (RequestCode.END_TRANSACTION, broker.transactions.handle),
        # AdminBrokerProcessor: queue positions (rmqnet.broker.offsets)
        (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, offsets.search_offset_by_timestamp),
        (RequestCode.GET_MAX_OFFSET, offsets.get_max_offset),
        (RequestCode.GET_MIN_OFFSET, offsets.get_min_offset),
        (RequestCode.GET_EARLIEST_MSG_STORETIME, offsets.get_earliest_msg_storetime),
        # ... topics, runtime info, delay offsets (rmqnet.broker.admin)
        (RequestCode.UPDATE_AND_CREATE_TOPIC, admin.update_and_create_topic),
        (RequestCode.GET_ALL_TOPIC_CONFIG, admin.get_all_topic_config),
        (RequestCode.GET_BROKER_RUNTIME_INFO, admin.get_broker_runtime_info),
        (RequestCode.GET_ALL_DELAY_OFFSET, admin.get_all_delay_offset),
        (RequestCode.DELETE_TOPIC_IN_BROKER, admin.delete_topic),
        # ... subscription groups (rmqnet.broker.admin_groups)
        (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, admin_groups.update_and_create_subscription_group),
        (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, admin_groups.get_all_subscription_group),
        (RequestCode.DELETE_SUBSCRIPTIONGROUP, admin_groups.delete_subscription_group),
        # ... stats and connections (rmqnet.broker.admin_stats)
        (RequestCode.GET_TOPIC_STATS_INFO, admin_stats.get_topic_stats_info),
        (RequestCode.GET_CONSUMER_CONNECTION_LIST, admin_stats.get_consumer_connection_list),
        (RequestCode.GET_CONSUME_STATS, admin_stats.get_consume_stats),
        # ... the broker's config (rmqnet.broker.admin_config)
        (RequestCode.UPDATE_BROKER_CONFIG, admin_config.update_broker_config),
        (RequestCode.GET_BROKER_CONFIG, admin_config.get_broker_config),
        # ... queue locks of orderly consumption (rmqnet.broker.locks)
        (RequestCode.LOCK_BATCH_MQ, locks.lock_batch_mq),
        (RequestCode.UNLOCK_BATCH_MQ, locks.unlock_batch_mq),
        # ... every committed offset, what a slave copies (rmqnet.broker.slave_sync)
        (RequestCode.GET_ALL_CONSUMER_OFFSET, slave_sync.get_all_consumer_offset),
    ]
    # RocketMQ's RPC hooks: with aclEnable, the plain ACL before every handler (rmqnet.broker.acl)
    before: list[BeforeHook] = [broker.acl.check] if broker.acl is not None else []
    return ProcessorTable(handlers, before)
