"""The request headers of the name server's and the broker's other requests (queries, offsets,
clients, admin), declared as field tables (:mod:`.header_table`) with RocketMQ 4.9.8's Java
names: the broker and name server read them, our client and the admin commands write them."""

from __future__ import annotations

from dataclasses import dataclass

from .header_table import BOOL, INT, LONG, STR, Header, header, java


@header
@dataclass(slots=True, kw_only=True)
class TopicHeader(Header):
    """A request naming one topic: ``GetRouteInfoRequestHeader`` (GET_ROUTEINFO_BY_TOPIC),
    ``DeleteTopicRequestHeader`` (DELETE_TOPIC_IN_BROKER), ``GetTopicStatsInfoRequestHeader``."""

    topic: str = java("topic", STR)


@header
@dataclass(slots=True, kw_only=True)
class DeleteTopicFromNamesrvHeader(Header):
    """``DeleteTopicFromNamesrvRequestHeader`` (DELETE_TOPIC_IN_NAMESRV); ``clusterName`` empty:
    every cluster."""

    topic: str = java("topic", STR)
    cluster_name: str = java("clusterName", STR, "")


@header
@dataclass(slots=True, kw_only=True)
class GetKVConfigHeader(Header):
    """``GetKVConfigRequestHeader`` (GET_KV_CONFIG)."""

    namespace: str = java("namespace", STR)
    key: str = java("key", STR)


@header
@dataclass(slots=True, kw_only=True)
class QueueHeader(Header):
    """One queue of a topic: ``GetMaxOffsetRequestHeader``, ``GetMinOffsetRequestHeader``,
    ``GetEarliestMsgStoretimeRequestHeader``."""

    topic: str = java("topic", STR)
    queue_id: int = java("queueId", INT)


@header
@dataclass(slots=True, kw_only=True)
class SearchOffsetHeader(Header):
    """``SearchOffsetRequestHeader`` (SEARCH_OFFSET_BY_TIMESTAMP)."""

    topic: str = java("topic", STR)
    queue_id: int = java("queueId", INT)
    timestamp: int = java("timestamp", LONG)


@header
@dataclass(slots=True, kw_only=True)
class QueryConsumerOffsetHeader(Header):
    """``QueryConsumerOffsetRequestHeader`` (QUERY_CONSUMER_OFFSET)."""

    consumer_group: str = java("consumerGroup", STR)
    topic: str = java("topic", STR)
    queue_id: int = java("queueId", INT)


@header
@dataclass(slots=True, kw_only=True)
class UpdateConsumerOffsetHeader(Header):
    """``UpdateConsumerOffsetRequestHeader`` (UPDATE_CONSUMER_OFFSET)."""

    consumer_group: str = java("consumerGroup", STR)
    topic: str = java("topic", STR)
    queue_id: int = java("queueId", INT)
    commit_offset: int = java("commitOffset", LONG)


@header
@dataclass(slots=True, kw_only=True)
class QueryMessageHeader(Header):
    """``QueryMessageRequestHeader`` (QUERY_MESSAGE); a query by unique key also carries the
    ``_UNIQUE_KEY_QUERY`` field, which Java reads beside the header."""

    topic: str = java("topic", STR)
    key: str = java("key", STR)
    max_num: int = java("maxNum", INT)
    begin_timestamp: int = java("beginTimestamp", LONG)
    end_timestamp: int = java("endTimestamp", LONG)


@header
@dataclass(slots=True, kw_only=True)
class ViewMessageHeader(Header):
    """``ViewMessageRequestHeader`` (VIEW_MESSAGE_BY_ID): a message by commitlog offset."""

    offset: int = java("offset", LONG)


@header
@dataclass(slots=True, kw_only=True)
class ConsumerGroupHeader(Header):
    """A request naming one consumer group: ``GetConsumerListByGroupRequestHeader``,
    ``GetConsumerConnectionListRequestHeader``, ``NotifyConsumerIdsChangedRequestHeader``."""

    consumer_group: str = java("consumerGroup", STR)


@header
@dataclass(slots=True, kw_only=True)
class ConsumeStatsHeader(Header):
    """``GetConsumeStatsRequestHeader`` (GET_CONSUME_STATS); ``topic`` absent or blank: every
    topic of the group."""

    consumer_group: str = java("consumerGroup", STR)
    topic: str | None = java("topic", STR, None)


@header
@dataclass(slots=True, kw_only=True)
class PopInflightHeader(Header):
    """GET_POP_INFLIGHT's header (ours): the group and topic, ``maxNum`` (``None``: the
    broker's default)."""

    consumer_group: str = java("consumerGroup", STR)
    topic: str = java("topic", STR)
    max_num: int | None = java("maxNum", INT, None)


@header
@dataclass(slots=True, kw_only=True)
class UnregisterClientHeader(Header):
    """``UnregisterClientRequestHeader`` (UNREGISTER_CLIENT): ``clientID`` required, the
    groups the client leaves (empty or absent: none)."""

    client_id: str = java("clientID", STR)
    producer_group: str | None = java("producerGroup", STR, None)
    consumer_group: str | None = java("consumerGroup", STR, None)


@header
@dataclass(slots=True, kw_only=True)
class CreateTopicHeader(Header):
    """``CreateTopicRequestHeader`` (UPDATE_AND_CREATE_TOPIC); ``defaultTopic`` is required by
    Java and not used."""

    topic: str = java("topic", STR)
    default_topic: str = java("defaultTopic", STR)
    read_queue_nums: int = java("readQueueNums", INT)
    write_queue_nums: int = java("writeQueueNums", INT)
    perm: int = java("perm", INT)
    topic_filter_type: str = java("topicFilterType", STR)
    topic_sys_flag: int = java("topicSysFlag", INT, 0)
    order: bool = java("order", BOOL, False)


@header
@dataclass(slots=True, kw_only=True)
class DeleteSubscriptionGroupHeader(Header):
    """``DeleteSubscriptionGroupRequestHeader`` (DELETE_SUBSCRIPTIONGROUP)."""

    group_name: str = java("groupName", STR)
    remove_offset: bool = java("removeOffset", BOOL, False)
