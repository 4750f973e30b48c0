"""A gRPC ``Message`` as the remoting send it is served as, and answers back as gRPC statuses.

RocketMQ 5's proxy turns a ``SendMessageRequest``'s messages into RocketMQ messages
(``SendMessageActivity.buildMessageProperty``, ``buildSysFlag``) and checks them first
(``GrpcValidator``); this module does the same, sans-I/O:

- :func:`outgoing` checks one message and builds its properties string (RocketMQ's
  ``name\\x01value\\x02``): user properties (none of RocketMQ's system names nor the names
  set below, ``__SHARDINGKEY`` and ``TRACE_CONTEXT`` among them, nor the store's ``RMQLOG_``; no control
  characters, at most 128 of them and 16 KiB together), ``TAGS`` (the tag), ``KEYS`` (the keys,
  space-joined), ``UNIQ_KEY`` (the client's ``message_id``: the message's id everywhere),
  ``TRAN_MSG=true`` and ``CHECK_IMMUNITY_TIME_IN_SECONDS`` (a transactional message's
  ``orphaned_transaction_recovery_duration``, when set), ``TIMER_DELIVER_MS`` (the
  ``delivery_timestamp`` in ms), ``RECONSUME_TIME`` (``delivery_attempt``), ``PGROUP`` (the
  topic: the proxy's producer group of a gRPC producer), ``__SHARDINGKEY`` (the
  ``message_group``), ``TRACE_CONTEXT``; the sysFlag has ``COMPRESSED`` for a GZIP body and
  ``TRANSACTION_PREPARED`` for a transactional message. A refusal raises
  :class:`GrpcStatusError` with the proxy's code (``ILLEGAL_TOPIC``, ``ILLEGAL_MESSAGE_TAG``,
  ``ILLEGAL_MESSAGE_KEY``, ``ILLEGAL_MESSAGE_GROUP``, ``ILLEGAL_MESSAGE_PROPERTY_KEY``,
  ``MESSAGE_PROPERTIES_TOO_LARGE``, ``ILLEGAL_MESSAGE_ID``, ``MESSAGE_BODY_EMPTY``,
  ``MESSAGE_BODY_TOO_LARGE``, ``MESSAGE_PROPERTY_CONFLICT_WITH_TYPE``) and a message naming
  the field.
- :func:`status_of_reply` maps a remoting response code to the gRPC ``Code`` (the proxy's
  ``ResponseBuilder`` and ``SendMessageActivity`` mapping, plus the codes our broker answers
  that the proxy checks before reaching a broker), :func:`overall_code` the request's status
  from its entries' (the one code, or ``MULTIPLE_RESULTS``).
- :func:`transaction_id` / :func:`parse_transaction_id`: a half message's commitlog and queue
  offsets as the opaque ``transaction_id`` the client hands back in ``EndTransaction``.
- :func:`message_of`: a stored message (a decoded record's row) as the gRPC ``Message`` a
  client reads (the proxy's ``GrpcConverter.buildMessage``): ``message_id`` = ``UNIQ_KEY``,
  ``tag``, ``keys``, ``message_group`` (``__SHARDINGKEY``), ``delivery_timestamp``
  (``TIMER_DELIVER_MS``), ``delivery_attempt`` = reconsume times + 1, an MD5 body digest
  (upper-case hex, as the proxy sends it and every client checks it), user properties = every
  property that is not a system one.
- :func:`consistent_hash`: Guava's ``Hashing.consistentHash`` of Java's ``String.hashCode``,
  the proxy's queue for a message group (written from Guava's published algorithm).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..remoting import ResponseCode
from ..remoting.names import PROPERTY_SHARDING_KEY, properties_text
from .v2 import definition_pb2 as pb

Code = pb.Code

#: RocketMQ 5's ``MessageConst.STRING_HASH_SET``: names a user property may not have
SYSTEM_PROPERTIES = frozenset(
    (
        "TRACE_ON",
        "MSG_REGION",
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        "__BORNHOST",
        "BORN_TIMESTAMP",
    )
)
#: properties that are the message's system properties on the gRPC side, or the broker's own
#: (never handed to a client as user properties; the proxy's ``STRING_HASH_SET`` filter)
_NOT_USER = SYSTEM_PROPERTIES | {
    "__SHARDINGKEY",
    "TRACE_CONTEXT",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "TRANSACTION_CHECK_TIMES",
    "__transactionId__",
    "TRAN_END",
    "RMQLOG_WRITER",
}
#: the proxy's limits (``ProxyConfig``: userPropertyMaxNum, userPropertyMaxSize, maxMessageGroupSize)
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTIES_BYTES = 16 * 1024
MAX_MESSAGE_GROUP = 64
#: ``TopicValidator``: the name's characters and its longest length
_TOPIC = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")
#: Java's ``Character.isISOControl``: what no tag, key, group or property may hold (``\x01``
#: and ``\x02`` among them: the properties string's separators)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: RocketMQ's ``MessageSysFlag``
COMPRESSED_FLAG = 0x1
TRANSACTION_PREPARED_TYPE = 0x4
#: the producer group of a send (remoting header; the proxy's: the topic, below)
SHARDING_KEY = PROPERTY_SHARDING_KEY


class GrpcStatusError(Exception):
    """A request refused with a gRPC ``Code`` and a message naming the field."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One checked message, as the remoting send carries it."""

    topic: str
    body: bytes
    sys_flag: int
    properties: str
    message_id: str
    message_group: str
    transactional: bool
    reconsume_times: int


def check_topic(name: str) -> None:
    """``ILLEGAL_TOPIC`` for a name RocketMQ's ``TopicValidator`` refuses."""
    if not _TOPIC.fullmatch(name):
        raise GrpcStatusError(
            Code.ILLEGAL_TOPIC,
            f"topic {name[:200]!r} is empty, longer than 127 characters or holds characters outside ^[%|a-zA-Z0-9_-]+$",
        )


def outgoing(msg: pb.Message, *, topic: str, max_body_size: int) -> Outgoing:
    """``msg`` checked and converted (the module docstring); raises :class:`GrpcStatusError`."""
    if msg.topic.name != topic:
        raise GrpcStatusError(Code.MESSAGE_CORRUPTED, "topic in message is not same")
    check_topic(topic)
    sp = msg.system_properties
    props: dict[str, str] = {}
    user = msg.user_properties
    if len(user) > MAX_USER_PROPERTIES:
        raise GrpcStatusError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE, f"too many user properties: {len(user)} > {MAX_USER_PROPERTIES}"
        )
    size = 0
    for key, value in user.items():
        if key in _NOT_USER or key.startswith("RMQLOG_"):  # (RocketMQ's system names, and those set here)
            raise GrpcStatusError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}")
        if not key or _CONTROL.search(key) or _CONTROL.search(value):
            raise GrpcStatusError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {key[:100]!r} is empty or holds a control character"
            )
        size += len(key.encode()) + len(value.encode())
    if size > MAX_USER_PROPERTIES_BYTES:
        raise GrpcStatusError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE, f"user properties of {size} bytes > {MAX_USER_PROPERTIES_BYTES}"
        )
    props.update(user)
    if sp.HasField("tag"):
        tag = sp.tag
        if not tag.strip() or "|" in tag or _CONTROL.search(tag):
            raise GrpcStatusError(
                Code.ILLEGAL_MESSAGE_TAG, f"tag {tag[:100]!r} is blank or holds '|' or a control character"
            )
        props["TAGS"] = tag
    if sp.keys:
        for key in sp.keys:
            if not key.strip() or _CONTROL.search(key):
                raise GrpcStatusError(
                    Code.ILLEGAL_MESSAGE_KEY, f"key {key[:100]!r} is blank or holds a control character"
                )
        props["KEYS"] = " ".join(sp.keys)
    if not sp.message_id:
        raise GrpcStatusError(Code.ILLEGAL_MESSAGE_ID, "message id is empty")
    if _CONTROL.search(sp.message_id) or " " in sp.message_id:
        raise GrpcStatusError(
            Code.ILLEGAL_MESSAGE_ID, f"message id {sp.message_id[:100]!r} holds a space or a control character"
        )
    props["UNIQ_KEY"] = sp.message_id
    transactional = sp.message_type == pb.TRANSACTION
    if transactional:
        if sp.HasField("delivery_timestamp"):
            raise GrpcStatusError(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a transactional message cannot have a delivery_timestamp"
            )
        props["TRAN_MSG"] = "true"
        recovery = sp.orphaned_transaction_recovery_duration.seconds
        if recovery > 0:
            props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(recovery)
    if sp.HasField("delivery_timestamp"):
        ts = sp.delivery_timestamp
        props["TIMER_DELIVER_MS"] = str(ts.seconds * 1000 + ts.nanos // 1_000_000)
    props["RECONSUME_TIME"] = str(sp.delivery_attempt)
    props["PGROUP"] = topic
    group = sp.message_group
    if sp.HasField("message_group"):
        if not group.strip() or len(group) > MAX_MESSAGE_GROUP or _CONTROL.search(group):
            raise GrpcStatusError(
                Code.ILLEGAL_MESSAGE_GROUP,
                f"message group {group[:100]!r} is blank, longer than {MAX_MESSAGE_GROUP} or holds a control character",
            )
        props[SHARDING_KEY] = group
    if sp.trace_context:
        if _CONTROL.search(sp.trace_context):
            raise GrpcStatusError(Code.BAD_REQUEST, "trace_context holds a control character")
        props["TRACE_CONTEXT"] = sp.trace_context
    body = msg.body
    if not body:
        raise GrpcStatusError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(body) > max_body_size:
        raise GrpcStatusError(
            Code.MESSAGE_BODY_TOO_LARGE, f"message body of {len(body)} bytes exceeds the maximum {max_body_size}"
        )
    sys_flag = (COMPRESSED_FLAG if sp.body_encoding == pb.GZIP else 0) | (
        TRANSACTION_PREPARED_TYPE if transactional else 0
    )
    text = properties_text(props)
    return Outgoing(topic, body, sys_flag, text, sp.message_id, group, transactional, sp.delivery_attempt)


#: remoting response code -> gRPC code (anything else: INTERNAL_SERVER_ERROR, as the proxy)
_BY_REPLY: dict[int, int] = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: Code.NOT_IMPLEMENTED,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
}


def message_of(row: dict[str, Any], *, message_type: int = pb.NORMAL) -> pb.Message:
    """A stored message (a row of ``rmqlog.decode_record_rows``: ``MESSAGE_SCHEMA``'s names) as
    the gRPC ``Message`` a client reads (the module docstring)."""
    props = dict(row.get("properties") or ())
    body = bytes(row.get("body") or b"")
    sp = pb.SystemProperties(
        message_id=props.get("UNIQ_KEY", row.get("msgId") or ""),
        message_type=message_type,  # type: ignore[arg-type]
        born_host=row.get("bornHost") or "",
        store_host=row.get("storeHost") or "",
        queue_id=int(row.get("queueId") or 0),
        delivery_attempt=int(row.get("reconsumeTimes") or 0) + 1,
        body_encoding=pb.GZIP if int(row.get("sysFlag") or 0) & COMPRESSED_FLAG else pb.IDENTITY,
    )
    sp.body_digest.type = pb.MD5
    sp.body_digest.checksum = hashlib.md5(body).hexdigest().upper()
    tag = props.get("TAGS")
    if tag:
        sp.tag = tag
    keys = props.get("KEYS")
    if keys:
        sp.keys.extend(k for k in keys.split(" ") if k)
    if props.get(SHARDING_KEY):
        sp.message_group = props[SHARDING_KEY]
    if props.get("TRACE_CONTEXT"):
        sp.trace_context = props["TRACE_CONTEXT"]
    if (deliver := props.get("TIMER_DELIVER_MS", "")).isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(deliver))
    for name, field in (("bornTimestamp", sp.born_timestamp), ("storeTimestamp", sp.store_timestamp)):
        ts = row.get(name)
        if isinstance(ts, datetime):
            field.FromDatetime(ts)
    if row.get("queueOffset") is not None:
        sp.queue_offset = int(row["queueOffset"])
    user = {k: v for k, v in props.items() if k not in _NOT_USER and not k.startswith("RMQLOG_")}
    return pb.Message(
        topic=pb.Resource(name=row.get("topic") or ""), user_properties=user, system_properties=sp, body=body
    )


def status_of_reply(code: int) -> int:
    """The gRPC ``Code`` of a remoting response code."""
    return _BY_REPLY.get(code, Code.INTERNAL_SERVER_ERROR)


def overall_code(codes: list[int]) -> int:
    """A request's status from its entries' codes: the one code, ``MULTIPLE_RESULTS`` for
    several, ``INTERNAL_SERVER_ERROR`` for none (the proxy's rule)."""
    distinct = set(codes)
    if len(distinct) == 1:
        return distinct.pop()
    return Code.MULTIPLE_RESULTS if distinct else Code.INTERNAL_SERVER_ERROR


def status(code: int, message: str | None = None) -> pb.Status:
    """A ``Status``; its message defaults to the code's name (as the proxy writes it)."""
    return pb.Status(code=code, message=Code.Name(code) if message is None else message)  # type: ignore[arg-type]


def transaction_id(commit_log_offset: int, queue_offset: int) -> str:
    """The ``transaction_id`` of a half message stored at these offsets: 32 hex digits."""
    return f"{commit_log_offset:016X}{queue_offset:016X}"


def parse_transaction_id(text: str) -> tuple[int, int]:
    """``(commit_log_offset, queue_offset)`` of :func:`transaction_id`'s text;
    ``INVALID_TRANSACTION_ID`` for anything else."""
    if not re.fullmatch(r"[0-9A-F]{32}", text):
        raise GrpcStatusError(
            Code.INVALID_TRANSACTION_ID, f"transaction id {text[:100]!r} is not one this broker issued"
        )
    return int(text[:16], 16), int(text[16:], 16)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, as a signed 32-bit int)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def consistent_hash(key: str, buckets: int) -> int:
    """Guava's ``Hashing.consistentHash(key.hashCode(), buckets)``: a bucket in ``0..buckets-1``
    that moves for only ``1/n`` of the keys when the count grows to ``n``."""
    if buckets <= 0:
        raise ValueError("buckets must be positive")
    state = java_string_hash(key) & 0xFFFFFFFFFFFFFFFF  # (the int, sign-extended to a long)
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        # Guava's LinearCongruentialGenerator.nextDouble: ((int) (state >>> 33) + 1) / 2^31
        # (the shift leaves 31 bits: the int cast keeps the value)
        nxt = int((candidate + 1) / (((state >> 33) + 1) / 2.0**31))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate
