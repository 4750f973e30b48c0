"""What each request code needs from the caller's account: the resources it names and the ones
it touches (:mod:`rmqnet.broker.acl` checks them before the handler runs). A group G is the
resource ``%RETRY%G``; a perm is ``PUB``, ``SUB`` or ``ANY`` (either).

:func:`named` reads the request's fields and body only (no I/O: it runs before the caller is
authenticated, as RocketMQ's ``PlainAccessValidator.parse``); :func:`touched` runs after the
signature is verified and reads what the request points at (the record at an offset, the topics
of a group's offsets) through the broker. Either raises :class:`AclRefusal` when what it needs
cannot be read (a missing or mistyped field, an unreadable body, no message at an offset), so a
request that cannot be authorized is refused rather than let through. The table is in
docs/access-control.md, "What each request needs".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import rmqlog

from ..remoting import FieldError, RemotingCommand, RequestCode, ext_int, ext_long, ext_str
from ..remoting.acl_sign import java_text
from ..remoting.heartbeat import HeartbeatData, HeartbeatError
from ..remoting.json_values import loads_body
from ..remoting.names import (
    DLQ_PREFIX,
    PROPERTY_INNER_MULTI_DISPATCH,
    RETRY_PREFIX,
    property_mark,
    retry_topic,
)
from .acl_files import ANY, PUB, SUB
from .acl_records import (
    CARRIER_TOPICS,
    PGROUP,
    REAL_TOPIC,
    RecordUnreadable,
    half_at,
    owner_topic,
    record_at,
)
from .pop_handle import normal_topic
from .send import parse_properties

#: ``Permission.ADMIN_CODE`` (UPDATE_AND_CREATE_TOPIC, UPDATE_BROKER_CONFIG,
#: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP, DELETE_TOPIC_IN_BROKER), and
#: ours: the reads of the whole broker (every topic's config, every group's offsets, the delay
#: levels' progress, the config, the runtime figures), which name no resource to check
ADMIN_CODES = frozenset(
    {
        17,
        25,
        200,
        207,
        215,
        RequestCode.GET_ALL_TOPIC_CONFIG,
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        RequestCode.GET_ALL_CONSUMER_OFFSET,
        RequestCode.GET_ALL_DELAY_OFFSET,
        RequestCode.GET_BROKER_CONFIG,
        RequestCode.GET_BROKER_RUNTIME_INFO,
    }
)
#: ``MixAll.CLIENT_INNER_PRODUCER_GROUP``: every Java-style client's heartbeat lists it; it
#: owns no half message, so it needs no perm
INNER_PRODUCER = "CLIENT_INNER_PRODUCER"


@dataclass(frozen=True, slots=True)
class Reach:
    """What :func:`touched` reads through: the broker's store and the topics of a group's
    committed offsets (``ConsumerOffsetTable.topics_of``)."""

    store: rmqlog.MessageStore
    group_topics: Callable[[str], list[str]]


class AclRefusal(Exception):
    """A request the ACL refuses; ``str()`` is RocketMQ's message (or ours, naming the field)."""


@dataclass(slots=True)
class Needs:
    """What a request needs: ``perms`` (resource -> perm, the strongest when named twice) and
    ``admin`` (why an admin account is needed, or ``None``)."""

    perms: dict[str, int] = field(default_factory=dict)
    admin: str | None = None

    def add(self, resource: str | None, perm: int) -> None:
        if resource is None:
            return
        self.perms[resource] = self.perms.get(resource, 0) | perm
        if resource in CARRIER_TOPICS and perm & SUB and self.admin is None:
            self.admin = f"topic:{resource} holds other topics' messages"


def group_resource(group: Any) -> str | None:
    """``%RETRY%G`` of a field's value (``None`` for a missing one)."""
    return None if group is None else retry_topic(java_text(group))


def _field(ext: Mapping[str, Any], name: str) -> str | None:
    v = ext.get(name)
    return None if v is None else java_text(v)


def add_send(needs: Needs, topic: str | None) -> None:
    """A send's topic: PUB; a ``%RETRY%G`` or ``%DLQ%G`` topic is G's (SUB on its group, not
    on the request's producerGroup: RocketMQ 4.9.8 checks the latter, which any account names
    as it likes)."""
    if topic is None:
        return
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix):
            needs.add(RETRY_PREFIX + topic[len(prefix) :], SUB)
            return
    needs.add(topic, PUB)


def consumed_topic(topic: str, group: str) -> str:
    """The topic resource a consumer of ``group`` reads when it names ``topic``: its own POP
    retry topic (``%RETRY%<group>_<t>``, ``KeyBuilder.parseNormalTopic``) is ``t``'s. Another
    group's retry topic is refused: its name would otherwise be checked as a group nobody
    has (``%RETRY%H_T`` as the group ``H_T``, open to any account whose default group
    permission reads), and only its own group consumes it."""
    normal = normal_topic(topic, group)
    if normal == topic and topic.startswith(RETRY_PREFIX) and topic != retry_topic(group):
        raise AclRefusal(f"{topic} is another consumer group's retry topic: only that group consumes it, not {group}")
    return normal


#: ``MessageConst.PROPERTY_INNER_MULTI_DISPATCH``: the light message queues a send also writes
#: into (``enableLmq``/``enableMultiDispatch``), ``,``-separated
INNER_MULTI_DISPATCH = PROPERTY_INNER_MULTI_DISPATCH
_LMQ_MARK = property_mark(INNER_MULTI_DISPATCH)


def _lmqs(needs: Needs, req: RemotingCommand, properties: str | None) -> None:
    """The light message queues a send names (its properties, a batch's each message's): PUB on
    each, as a topic (a send writes into them; RocketMQ 4.9.8 checks the send's topic alone).
    A batch body is decoded only when its bytes hold the name."""
    if req.code == RequestCode.SEND_BATCH_MESSAGE:
        body = req.body_bytes()
        if _LMQ_MARK.encode() not in body:
            return
        try:
            texts = rmqlog.decode_message_batch(body, "").column("properties").to_pylist()
        except rmqlog.StoreError as exc:
            raise AclRefusal(f"the batch body cannot be read: {exc}") from None
    elif not properties or _LMQ_MARK not in properties:
        return
    else:
        texts = [properties]
    for text in texts:
        add_lmqs(needs, parse_properties(text or "").get(INNER_MULTI_DISPATCH))


def add_lmqs(needs: Needs, value: str | None) -> None:
    """PUB on each light message queue of an ``INNER_MULTI_DISPATCH`` value (blank: none, as
    the store reads it)."""
    if value is not None and value.strip():
        for name in value.split(","):
            needs.add(name or None, PUB)


def _producer_groups(needs: Needs, groups: Sequence[str | None]) -> None:
    """Producer groups registered or unregistered (ours): ANY perm on each, since the broker
    sends a group's producers the check-backs of its half messages. ``CLIENT_INNER_PRODUCER``,
    which every Java-style client lists beside its own group, needs none when the request
    names another group (that group's perm is the check); alone it is a group like any."""
    named_other = bool(needs.perms) or any(g and g != INNER_PRODUCER for g in groups)
    for g in groups:
        if g and (g != INNER_PRODUCER or not named_other):
            needs.add(retry_topic(g), ANY)


def _json_body(req: RemotingCommand, what: str) -> dict[str, Any]:
    try:  # (the one bounded body parser: depth and lone surrogates refused before json reads it)
        data = loads_body(req.body_bytes(), what) if req.body else None
    except FieldError as exc:
        raise AclRefusal(str(exc)) from None
    if not isinstance(data, dict):
        raise AclRefusal(f"the body is not a {what} object")
    return data


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AclRefusal(f"{what} is not a list")
    return value


def _heartbeat(needs: Needs, req: RemotingCommand) -> None:
    """34: each consumer's group and topics SUB, each producer group (as the handler reads the
    body: a body it refuses is refused here with the same words)."""
    try:
        data = HeartbeatData.decode(req.body_bytes())
    except HeartbeatError as exc:
        raise AclRefusal(str(exc)) from None
    for c in data.consumers:
        needs.add(group_resource(c.group), SUB)
        for sub in c.subscriptions:
            needs.add(sub.topic, SUB)
    _producer_groups(needs, data.producer_groups)


def _lock(needs: Needs, req: RemotingCommand) -> None:
    """41/42: the group whose queues are locked or unlocked, and each queue's topic."""
    data = _json_body(req, "LockBatchRequestBody")
    group = data.get("consumerGroup")
    if not isinstance(group, str):
        raise AclRefusal("the lock body's consumerGroup is not a string")
    needs.add(retry_topic(group), SUB)
    for mq in _list(data.get("mqSet"), "the lock body's mqSet"):
        if not isinstance(mq, dict) or not isinstance(mq.get("topic"), str):
            raise AclRefusal("a queue of the lock body has no topic string")
        needs.add(mq["topic"], SUB)


def named(req: RemotingCommand) -> Needs:
    """What ``req`` needs by what it names (the table in docs/access-control.md). No I/O. Raises
    :class:`AclRefusal` when a field or body they are read from is unreadable."""
    ext, code, needs = req.ext_fields, req.code, Needs()
    if code in ADMIN_CODES:
        needs.admin = f"request code={code}"
    try:
        if code == RequestCode.SEND_MESSAGE:
            add_send(needs, _field(ext, "topic"))
            _lmqs(needs, req, _field(ext, "properties"))
        elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            add_send(needs, _field(ext, "b"))
            _lmqs(needs, req, _field(ext, "i"))
        elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
            needs.add(retry_topic(ext_str(ext, "group")), SUB)
            ext_long(ext, "offset")
        elif code == RequestCode.PULL_MESSAGE:
            topic, group = _field(ext, "topic"), _field(ext, "consumerGroup")
            needs.add(consumed_topic(topic, group) if topic is not None and group is not None else topic, SUB)
            needs.add(group_resource(group), SUB)
        elif code in (
            RequestCode.QUERY_MESSAGE,
            RequestCode.GET_TOPIC_STATS_INFO,
            RequestCode.GET_MAX_OFFSET,
            RequestCode.GET_MIN_OFFSET,
            RequestCode.GET_EARLIEST_MSG_STORETIME,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        ):
            needs.add(_field(ext, "topic"), SUB)  # (missing: the handler refuses it, naming it)
        elif code == RequestCode.VIEW_MESSAGE_BY_ID:
            ext_long(ext, "offset")
        elif code == RequestCode.HEART_BEAT:
            _heartbeat(needs, req)
        elif code == RequestCode.UNREGISTER_CLIENT:
            ext_str(ext, "clientID")  # @CFNotNull, read by Java's header decoder here
            consumer = _field(ext, "consumerGroup")
            if consumer:  # (an empty one unregisters nothing)
                needs.add(retry_topic(consumer), SUB)
            _producer_groups(needs, [_field(ext, "producerGroup")])
        elif code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            needs.add(retry_topic(ext_str(ext, "consumerGroup")), SUB)
        elif code == RequestCode.GET_CONSUMER_CONNECTION_LIST:
            needs.add(group_resource(ext.get("consumerGroup")), SUB)
        elif code in (RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET):
            needs.add(retry_topic(ext_str(ext, "consumerGroup")), SUB)
            needs.add(ext_str(ext, "topic"), SUB)
            ext_int(ext, "queueId")
            if code == RequestCode.UPDATE_CONSUMER_OFFSET:
                ext_long(ext, "commitOffset")
        elif code == RequestCode.GET_CONSUME_STATS:
            needs.add(group_resource(ext.get("consumerGroup")), SUB)
            topic = _field(ext, "topic")
            if topic is not None and topic.strip():
                needs.add(topic, SUB)
        elif code == RequestCode.END_TRANSACTION:
            ext_str(ext, "producerGroup")
            ext_long(ext, "commitLogOffset")
            ext_long(ext, "tranStateTableOffset")
        elif code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
            _lock(needs, req)
        elif code in (RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.CHANGE_MESSAGE_INVISIBLETIME):
            # RocketMQ 5's PlainAccessResource: the topic and the group, SUB; an ack names the
            # topic read, the group's POP retry topic for a retried message: its topic's
            group = ext_str(ext, "consumerGroup")
            needs.add(consumed_topic(ext_str(ext, "topic"), group), SUB)
            needs.add(retry_topic(group), SUB)
        elif code == RequestCode.GET_POP_INFLIGHT:  # ours: what a pop of the topic by the group reads
            needs.add(ext_str(ext, "topic"), SUB)
            needs.add(retry_topic(ext_str(ext, "consumerGroup")), SUB)
    except FieldError as exc:
        raise AclRefusal(str(exc)) from None
    return needs


def _record(reach: Reach | None, offset: int) -> rmqlog.RecordHead:
    if reach is None:
        raise AclRefusal(f"the message at the offset {offset} cannot be checked without the broker's store")
    try:
        return record_at(reach.store, offset)
    except RecordUnreadable as exc:
        raise AclRefusal(str(exc)) from None


def _read_record(needs: Needs, reach: Reach | None, offset: int) -> None:
    """The record at ``offset`` is read (33) or copied (36): its topic SUB, a carrier's real
    topic SUB (a carrier's record of no topic: the broker's own, admin only)."""
    facts = _record(reach, offset)
    owner = owner_topic(facts)
    if owner is None:
        needs.admin = needs.admin or f"the message at the offset {offset} is the broker's own ({facts.topic})"
    needs.add(owner, SUB)  # (a %RETRY%G topic is the resource of its group G)


def touched(req: RemotingCommand, reach: Reach | None, needs: Needs) -> None:
    """Add to ``needs`` what ``req`` reaches beyond what it names, read through ``reach``
    (``None``: nothing can be read, and a code that needs a read is refused). Raises
    :class:`AclRefusal` when that cannot be read, or (END_TRANSACTION) when the half message
    is another producer group's."""
    ext, code = req.ext_fields, req.code
    try:
        if code in (RequestCode.VIEW_MESSAGE_BY_ID, RequestCode.CONSUMER_SEND_MSG_BACK):
            _read_record(needs, reach, ext_long(ext, "offset"))
        elif code == RequestCode.END_TRANSACTION:
            offset, group = ext_long(ext, "commitLogOffset"), ext_str(ext, "producerGroup")
            if reach is None:
                raise AclRefusal(
                    f"the half message at the commitLogOffset {offset} cannot be checked without the broker"
                )
            try:
                facts = half_at(reach.store, offset, ext_long(ext, "tranStateTableOffset"))
            except RecordUnreadable as exc:
                raise AclRefusal(str(exc)) from None
            if facts.properties.get(PGROUP) != group:
                shown = group.encode("utf-8", "backslashreplace").decode("utf-8")  # (a lone surrogate: escaped)
                raise AclRefusal(f"the half message at the commitLogOffset {offset} is not the producerGroup {shown}'s")
            real = facts.properties.get(REAL_TOPIC)
            if not real:
                raise AclRefusal(f"the half message at the commitLogOffset {offset} names no REAL_TOPIC")
            needs.add(real, PUB)
        elif (
            code == RequestCode.GET_CONSUME_STATS
            and ext.get("consumerGroup") is not None
            and not (_field(ext, "topic") or "").strip()
        ):
            if reach is None:
                raise AclRefusal("the group's topics cannot be checked without the broker")
            for topic in reach.group_topics(java_text(ext["consumerGroup"])):
                needs.add(topic, SUB)  # the group's every topic is read
    except FieldError as exc:
        raise AclRefusal(str(exc)) from None


__all__ = [
    "ADMIN_CODES",
    "INNER_PRODUCER",
    "AclRefusal",
    "Needs",
    "Reach",
    "add_send",
    "group_resource",
    "named",
    "touched",
]
