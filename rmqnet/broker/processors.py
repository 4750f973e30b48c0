"""The processor modules a :class:`~rmqnet.broker.broker.Broker` installs, in order.

Each module has ``install(broker)``: it registers its request codes with
``broker.table.register(code, handler)`` and may add attributes and services to the broker
(RocketMQ's ``BrokerController.registerProcessor``, one module per request family). A module
added here is installed by every broker; two modules registering one code is an error at
start.
"""

from __future__ import annotations

#: module names under ``rmqnet.broker``, installed in this order
PROCESSOR_MODULES: tuple[str, ...] = (
    "send",   # SEND_MESSAGE 10, SEND_MESSAGE_V2 310, SEND_BATCH_MESSAGE 320
    "send_back",  # CONSUMER_SEND_MSG_BACK 36: retries and dead letters
    "transactions",  # END_TRANSACTION 37; half messages (with send)
    "transaction_check",  # no codes: the check-back service (CHECK_TRANSACTION_STATE 39 sent to producers)
    "admin",  # UPDATE_AND_CREATE_TOPIC 17, GET_ALL_TOPIC_CONFIG 21, GET_BROKER_RUNTIME_INFO 28, 45, DELETE_TOPIC 215
    "admin_stats",   # GET_TOPIC_STATS_INFO 202, GET_CONSUMER_CONNECTION_LIST 203, GET_CONSUME_STATS 208
    "admin_config",  # UPDATE_BROKER_CONFIG 25, GET_BROKER_CONFIG 26
    "consumers",  # HEART_BEAT 34, UNREGISTER_CLIENT 35, GET_CONSUMER_LIST_BY_GROUP 38 (+ NOTIFY 40 sent)
    "pull",       # PULL_MESSAGE 11, the long-polling hold service
    "offsets",    # QUERY/UPDATE_CONSUMER_OFFSET 14/15, SEARCH_OFFSET_BY_TIMESTAMP 29, GET_MAX/MIN_OFFSET 30/31, 32
    "query",      # QUERY_MESSAGE 12, VIEW_MESSAGE_BY_ID 33
    "locks",      # LOCK_BATCH_MQ 41, UNLOCK_BATCH_MQ 42 (orderly consumption)
    "acl",        # no codes: with aclEnable, RocketMQ's plain ACL checked before every handler
    "replication",  # no codes: brokerRole, the HA service (master or slave), SYNC_MASTER waits
    "slave_sync",   # GET_ALL_CONSUMER_OFFSET 43; a SLAVE copies its master's topics, offsets and delay offsets
)
