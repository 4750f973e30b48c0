"""The request headers of the hot paths, each one declared structure read from extFields
(RocketMQ 4.9.8's ``SendMessageRequestHeader`` and its abbreviated ``...V2``,
``PullMessageRequestHeader``). Required fields (``@CFNotNull`` in Java) raise
:class:`~rmqnet.remoting.errors.FieldError` when missing; the rest take Java's defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import FieldError
from .fields import ext_bool, ext_int, ext_long, ext_str

#: SEND_MESSAGE_V2's one-letter names (``SendMessageRequestHeaderV2``), by V1 name
SEND_V2_NAMES = {
    "producerGroup": "a",
    "topic": "b",
    "defaultTopic": "c",
    "defaultTopicQueueNums": "d",
    "queueId": "e",
    "sysFlag": "f",
    "bornTimestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsumeTimes": "j",
    "unitMode": "k",
    "maxReconsumeTimes": "l",
    "batch": "m",
    "brokerName": "n",
}
_SEND_V1_NAMES = {k: k for k in SEND_V2_NAMES}


@dataclass(slots=True)
class SendMessageHeader:
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    unit_mode: bool
    batch: bool
    max_reconsume_times: int | None
    broker_name: str | None

    @staticmethod
    def read(ext: dict[str, Any], v2: bool) -> SendMessageHeader:
        """The header of SEND_MESSAGE (``v2=False``), or of SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE
        (``v2=True``: the one-letter names)."""
        n = SEND_V2_NAMES if v2 else _SEND_V1_NAMES
        return SendMessageHeader(
            producer_group=ext_str(ext, n["producerGroup"]),
            topic=ext_str(ext, n["topic"]),
            default_topic=ext_str(ext, n["defaultTopic"]),
            default_topic_queue_nums=ext_int(ext, n["defaultTopicQueueNums"]),
            queue_id=ext_int(ext, n["queueId"]),
            sys_flag=ext_int(ext, n["sysFlag"]),
            born_timestamp=ext_long(ext, n["bornTimestamp"]),
            flag=ext_int(ext, n["flag"]),
            properties=ext_str(ext, n["properties"], ""),
            reconsume_times=ext_int(ext, n["reconsumeTimes"], 0),
            unit_mode=ext_bool(ext, n["unitMode"], False),
            batch=ext_bool(ext, n["batch"], False),
            max_reconsume_times=ext_int(ext, n["maxReconsumeTimes"], None),
            broker_name=ext_str(ext, n["brokerName"], None),
        )

    def to_ext(self, v2: bool) -> dict[str, Any]:
        """extFields of this header (for our client), one-letter names when ``v2``."""
        values = {
            "producerGroup": self.producer_group,
            "topic": self.topic,
            "defaultTopic": self.default_topic,
            "defaultTopicQueueNums": self.default_topic_queue_nums,
            "queueId": self.queue_id,
            "sysFlag": self.sys_flag,
            "bornTimestamp": self.born_timestamp,
            "flag": self.flag,
            "properties": self.properties,
            "reconsumeTimes": self.reconsume_times,
            "unitMode": self.unit_mode,
            "batch": self.batch,
            "maxReconsumeTimes": self.max_reconsume_times,
            "brokerName": self.broker_name,
        }
        return {(SEND_V2_NAMES[k] if v2 else k): v for k, v in values.items() if v is not None}


@dataclass(slots=True)
class PullMessageHeader:
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    subscription: str | None
    sub_version: int
    expression_type: str | None

    @staticmethod
    def read(ext: dict[str, Any]) -> PullMessageHeader:
        return PullMessageHeader(
            consumer_group=ext_str(ext, "consumerGroup"),
            topic=ext_str(ext, "topic"),
            queue_id=ext_int(ext, "queueId"),
            queue_offset=ext_long(ext, "queueOffset"),
            max_msg_nums=ext_int(ext, "maxMsgNums"),
            sys_flag=ext_int(ext, "sysFlag"),
            commit_offset=ext_long(ext, "commitOffset"),
            suspend_timeout_millis=ext_long(ext, "suspendTimeoutMillis"),
            subscription=ext_str(ext, "subscription", None),
            sub_version=ext_long(ext, "subVersion"),
            expression_type=ext_str(ext, "expressionType", None),
        )

    def to_ext(self) -> dict[str, Any]:
        return {
            "consumerGroup": self.consumer_group,
            "topic": self.topic,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "maxMsgNums": self.max_msg_nums,
            "sysFlag": self.sys_flag,
            "commitOffset": self.commit_offset,
            "suspendTimeoutMillis": self.suspend_timeout_millis,
            **({"subscription": self.subscription} if self.subscription is not None else {}),
            "subVersion": self.sub_version,
            **({"expressionType": self.expression_type} if self.expression_type is not None else {}),
        }


@dataclass(slots=True)
class ConsumerSendMsgBackHeader:
    """``ConsumerSendMsgBackRequestHeader`` (CONSUMER_SEND_MSG_BACK, 36): ``offset`` (the
    message's commitlog offset), ``group`` and ``delayLevel`` required; ``originMsgId``,
    ``originTopic`` (read, not used by the broker, as in Java), ``unitMode``,
    ``maxReconsumeTimes`` (``None``: the group's, 16)."""

    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None

    @staticmethod
    def read(ext: dict[str, Any]) -> ConsumerSendMsgBackHeader:
        return ConsumerSendMsgBackHeader(
            offset=ext_long(ext, "offset"),
            group=ext_str(ext, "group"),
            delay_level=ext_int(ext, "delayLevel"),
            origin_msg_id=ext_str(ext, "originMsgId", None),
            origin_topic=ext_str(ext, "originTopic", None),
            unit_mode=ext_bool(ext, "unitMode", False),
            max_reconsume_times=ext_int(ext, "maxReconsumeTimes", None),
        )

    def to_ext(self) -> dict[str, Any]:
        values = {
            "offset": self.offset,
            "group": self.group,
            "delayLevel": self.delay_level,
            "originMsgId": self.origin_msg_id,
            "originTopic": self.origin_topic,
            "unitMode": self.unit_mode,
            "maxReconsumeTimes": self.max_reconsume_times,
        }
        return {k: v for k, v in values.items() if v is not None}


#: PullSysFlag bits (``PullSysFlag``)
PULL_COMMIT_OFFSET = 1
PULL_SUSPEND = 2
PULL_SUBSCRIPTION = 4
PULL_CLASS_FILTER = 8
PULL_LITE = 16


#: The idempotence marker of a send (our brokers' extension, :class:`IdempotenceMarker`): two
#: request fields beside the send header's, in the same names for 10, 310 and 320.
WRITER_FIELD = "rmqlogWriter"
SEQUENCE_FIELD = "rmqlogSequence"
#: the answer's field saying a send was a replay (nothing stored again)
DUPLICATE_FIELD = "rmqlogDuplicate"


@dataclass(frozen=True, slots=True)
class IdempotenceMarker:
    """``rmqlogWriter`` (a writer's name) and ``rmqlogSequence`` (an int >= 0, increasing per
    writer): the broker appends the send only if its store has not yet recorded that sequence
    (or a later one) for the writer, atomically with the data (the store's idempotent put,
    ``writer``/``sequence``); a replay stores nothing and is answered SUCCESS with
    ``rmqlogDuplicate=true``. Apache RocketMQ's brokers ignore both fields (a replay is stored
    again there). The Spark sink sends them (writer: its task, sequence: its micro-batch and
    chunk)."""

    writer: str
    sequence: int

    @staticmethod
    def read(ext: dict[str, Any]) -> IdempotenceMarker | None:
        """The marker of a request, ``None`` when it has neither field; :class:`FieldError` for
        one without the other, a sequence that is not a Java long >= 0 (the writer's name is
        the store's to check)."""
        writer = ext_str(ext, WRITER_FIELD, None)
        sequence = ext_long(ext, SEQUENCE_FIELD, None)
        if writer is None and sequence is None:
            return None
        if writer is None:
            raise FieldError(WRITER_FIELD, f"is missing (a send with {SEQUENCE_FIELD} names its writer)")
        if sequence is None:
            raise FieldError(SEQUENCE_FIELD, f"is missing (a send with {WRITER_FIELD} carries its sequence)")
        if sequence < 0:
            raise FieldError(SEQUENCE_FIELD, f"is {sequence}, not >= 0")
        return IdempotenceMarker(writer, sequence)

    def to_ext(self) -> dict[str, str]:
        return {WRITER_FIELD: self.writer, SEQUENCE_FIELD: str(self.sequence)}


#: MessageSysFlag's transaction types, END_TRANSACTION's ``commitOrRollback``
TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE = 0, 8, 12


@dataclass(slots=True)
class EndTransactionHeader:
    """END_TRANSACTION (37)'s ``EndTransactionRequestHeader``: the half message by its queue
    offset (``tranStateTableOffset``) and commitlog offset, the outcome (0 unknown, 8 commit,
    12 rollback), whether it answers a check-back; ``msgId``/``transactionId`` (the client's
    UNIQ_KEY) for the logs."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    from_transaction_check: bool
    msg_id: str
    transaction_id: str | None

    @staticmethod
    def read(ext: dict[str, Any]) -> EndTransactionHeader:
        h = EndTransactionHeader(
            producer_group=ext_str(ext, "producerGroup"),
            tran_state_table_offset=ext_long(ext, "tranStateTableOffset"),
            commit_log_offset=ext_long(ext, "commitLogOffset"),
            commit_or_rollback=ext_int(ext, "commitOrRollback"),
            from_transaction_check=ext_bool(ext, "fromTransactionCheck", False),
            msg_id=ext_str(ext, "msgId"),
            transaction_id=ext_str(ext, "transactionId", None),
        )
        if h.commit_or_rollback not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            # Java's checkFields: "commitOrRollback field wrong"
            raise FieldError("commitOrRollback", f"is {h.commit_or_rollback}, not 0, 8 or 12")
        return h

    def to_ext(self) -> dict[str, Any]:
        return {
            "producerGroup": self.producer_group,
            "tranStateTableOffset": self.tran_state_table_offset,
            "commitLogOffset": self.commit_log_offset,
            "commitOrRollback": self.commit_or_rollback,
            "fromTransactionCheck": self.from_transaction_check,
            "msgId": self.msg_id,
            **({"transactionId": self.transaction_id} if self.transaction_id is not None else {}),
        }


@dataclass(slots=True)
class CheckTransactionStateHeader:
    """CHECK_TRANSACTION_STATE (39)'s ``CheckTransactionStateRequestHeader``, sent by the broker
    to a producer of the half message's group (oneway; the body is the half message encoded
    with its real topic and queue)."""

    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None
    transaction_id: str | None
    offset_msg_id: str | None

    @staticmethod
    def read(ext: dict[str, Any]) -> CheckTransactionStateHeader:
        return CheckTransactionStateHeader(
            tran_state_table_offset=ext_long(ext, "tranStateTableOffset"),
            commit_log_offset=ext_long(ext, "commitLogOffset"),
            msg_id=ext_str(ext, "msgId", None),
            transaction_id=ext_str(ext, "transactionId", None),
            offset_msg_id=ext_str(ext, "offsetMsgId", None),
        )

    def to_ext(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tranStateTableOffset": self.tran_state_table_offset,
            "commitLogOffset": self.commit_log_offset,
        }
        for key, value in (
            ("msgId", self.msg_id),
            ("transactionId", self.transaction_id),
            ("offsetMsgId", self.offset_msg_id),
        ):
            if value is not None:
                out[key] = value
        return out
