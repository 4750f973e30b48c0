"""The header fields each served request code defines (RocketMQ 4.9.8's ``CommandCustomHeader``
classes), for the ACL's binding of a 4.x signature to its code (:mod:`rmqnet.broker.acl`).

RocketMQ's 4.x signature covers the values of the extFields, not their names and not the
request code: a signed PULL_MESSAGE (11) sent again as UPDATE_CONSUMER_OFFSET (15) keeps its
signature. A request signed in that form and carrying a field its code does not define is
refused (:func:`undefined_fields`), so a request replayed under another code is refused as
soon as the two codes' headers differ (a PULL has ``queueOffset``, ``maxMsgNums``... which 15
does not define). A request signed in the bound form (``SignatureForm: bound-1``,
:mod:`rmqnet.remoting.acl_sign`) binds the code and the names itself and is not checked here.

Every code may also carry the session fields (:data:`SESSION_FIELDS`). A code not in
:data:`DEFINED_FIELDS` is not served here (the dispatch answers REQUEST_CODE_NOT_SUPPORTED)
and is not checked.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..remoting import RequestCode
from ..remoting.acl_sign import (
    ACCESS_KEY,
    SECURITY_TOKEN,
    SIGNATURE,
    SIGNATURE_FORM,
    UNIQUE_KEY_QUERY,
)
from ..remoting.headers import SEQUENCE_FIELD, WRITER_FIELD

#: what any request may carry besides its header: the credentials (``SessionCredentials``),
#: the signature's form, and ``OnsChannel``, which the C++ client and ali-ons send and sign
#: with every request. The unique-key flag (``MixAll.UNIQUE_MSG_QUERY_FLAG``) is QUERY_MESSAGE's
#: only: the broker leaves it out of the 4.x content, so anyone may add it to a signed request
SESSION_FIELDS = frozenset({ACCESS_KEY, SIGNATURE, SECURITY_TOKEN, SIGNATURE_FORM, "OnsChannel"})

_SEND = (
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "unitMode",
    "batch",
    "maxReconsumeTimes",
    "brokerName",
    WRITER_FIELD,
    SEQUENCE_FIELD,
)  # SendMessageRequestHeader; V2's ``n`` by its name, which
# our send reads; our idempotence marker
_SEND_V2 = (
    "a",
    "b",
    "c",
    "d",
    "e",
    "f",
    "g",
    "h",
    "i",
    "j",
    "k",
    "l",
    "m",
    "n",
    WRITER_FIELD,
    SEQUENCE_FIELD,
)  # SendMessageRequestHeaderV2, and our idempotence marker
_QUEUE = ("topic", "queueId")  # GetMaxOffset/GetMinOffset/GetEarliestMsgStoretimeRequestHeader
_RPC = ("namespace", "namespaced", "brokerName", "oneway", "lo")  # RocketMQ 5's RpcRequestHeader

#: code -> the names its 4.9.8 header class defines (the session fields left out)
DEFINED_FIELDS: dict[int, frozenset[str]] = {
    code: frozenset(names)
    for code, names in {
        RequestCode.SEND_MESSAGE: _SEND,
        RequestCode.SEND_MESSAGE_V2: _SEND_V2,
        RequestCode.SEND_BATCH_MESSAGE: _SEND_V2,
        RequestCode.CONSUMER_SEND_MSG_BACK: (
            "offset",
            "group",
            "delayLevel",
            "originMsgId",
            "originTopic",
            "unitMode",
            "maxReconsumeTimes",
        ),
        RequestCode.PULL_MESSAGE: (
            "consumerGroup",
            "topic",
            "queueId",
            "queueOffset",
            "maxMsgNums",
            "sysFlag",
            "commitOffset",
            "suspendTimeoutMillis",
            "subscription",
            "subVersion",
            "expressionType",
        ),
        RequestCode.QUERY_MESSAGE: ("topic", "key", "maxNum", "beginTimestamp", "endTimestamp", UNIQUE_KEY_QUERY),
        RequestCode.VIEW_MESSAGE_BY_ID: ("offset",),
        RequestCode.HEART_BEAT: (),
        RequestCode.UNREGISTER_CLIENT: ("clientID", "producerGroup", "consumerGroup"),
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: ("consumerGroup",),
        RequestCode.QUERY_CONSUMER_OFFSET: ("consumerGroup", "topic", "queueId"),
        RequestCode.UPDATE_CONSUMER_OFFSET: ("consumerGroup", "topic", "queueId", "commitOffset"),
        RequestCode.END_TRANSACTION: (
            "producerGroup",
            "tranStateTableOffset",
            "commitLogOffset",
            "commitOrRollback",
            "fromTransactionCheck",
            "msgId",
            "transactionId",
        ),
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: ("topic", "queueId", "timestamp"),
        RequestCode.GET_MAX_OFFSET: _QUEUE,
        RequestCode.GET_MIN_OFFSET: _QUEUE,
        RequestCode.GET_EARLIEST_MSG_STORETIME: _QUEUE,
        RequestCode.UPDATE_AND_CREATE_TOPIC: (
            "topic",
            "defaultTopic",
            "readQueueNums",
            "writeQueueNums",
            "perm",
            "topicFilterType",
            "topicSysFlag",
            "order",
        ),
        RequestCode.GET_ALL_TOPIC_CONFIG: (),
        RequestCode.GET_BROKER_RUNTIME_INFO: (),
        RequestCode.GET_ALL_DELAY_OFFSET: (),
        RequestCode.DELETE_TOPIC_IN_BROKER: ("topic",),
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: (),  # (the config is the body)
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: (),
        RequestCode.DELETE_SUBSCRIPTIONGROUP: ("groupName", "removeOffset"),
        RequestCode.GET_TOPIC_STATS_INFO: ("topic",),
        RequestCode.GET_CONSUMER_CONNECTION_LIST: ("consumerGroup",),
        RequestCode.GET_CONSUME_STATS: ("consumerGroup", "topic"),
        RequestCode.UPDATE_BROKER_CONFIG: (),
        RequestCode.GET_BROKER_CONFIG: (),
        RequestCode.LOCK_BATCH_MQ: (),
        RequestCode.UNLOCK_BATCH_MQ: (),
        RequestCode.GET_ALL_CONSUMER_OFFSET: (),
        # RocketMQ 5's PopMessageRequestHeader, AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader
        # (their RpcRequestHeader's fields too: what RocketMQ's proxy sends)
        RequestCode.POP_MESSAGE: (
            "consumerGroup",
            "topic",
            "queueId",
            "maxMsgNums",
            "invisibleTime",
            "pollTime",
            "bornTime",
            "initMode",
            "expType",
            "exp",
            "order",
            "attemptId",
            *_RPC,
        ),
        RequestCode.ACK_MESSAGE: ("consumerGroup", "topic", "queueId", "extraInfo", "offset", *_RPC),
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME: (
            "consumerGroup",
            "topic",
            "queueId",
            "extraInfo",
            "offset",
            "invisibleTime",
            *_RPC,
        ),
        RequestCode.GET_POP_INFLIGHT: ("consumerGroup", "topic", "maxNum"),  # ours
    }.items()
}


def undefined_fields(code: int, names: Iterable[str]) -> list[str]:
    """The names among ``names`` that ``code``'s header does not define and that are no
    session field, sorted; empty for a code not in :data:`DEFINED_FIELDS`. Never raises."""
    defined = DEFINED_FIELDS.get(code)
    if defined is None:
        return []
    return sorted(n for n in names if n not in defined and n not in SESSION_FIELDS)


__all__ = ["DEFINED_FIELDS", "SESSION_FIELDS", "undefined_fields"]
