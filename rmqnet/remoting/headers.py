"""The request headers of the hot paths, each one declared structure read from extFields
(RocketMQ 4.9.8's ``SendMessageRequestHeader`` and its abbreviated ``...V2``,
``PullMessageRequestHeader``). Required fields (``@CFNotNull`` in Java) raise
:class:`~rmqnet.remoting.errors.FieldError` when missing; the rest take Java's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import FieldError
from .fields import ext_long, ext_str
from .header_table import BOOL, INT, LONG, STR, Header, header, java

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


@header
@dataclass(slots=True, kw_only=True)
class SendMessageHeader(Header):
    producer_group: str = java("producerGroup", STR)
    topic: str = java("topic", STR)
    default_topic: str = java("defaultTopic", STR)
    default_topic_queue_nums: int = java("defaultTopicQueueNums", INT)
    queue_id: int = java("queueId", INT)
    sys_flag: int = java("sysFlag", INT)
    born_timestamp: int = java("bornTimestamp", LONG)
    flag: int = java("flag", INT)
    properties: str = java("properties", STR, "")
    reconsume_times: int = java("reconsumeTimes", INT, 0)
    unit_mode: bool = java("unitMode", BOOL, False)
    batch: bool = java("batch", BOOL, False)
    max_reconsume_times: int | None = java("maxReconsumeTimes", INT, None)
    broker_name: str | None = java("brokerName", STR, None)

    @staticmethod
    def read(ext: Mapping[str, Any], v2: bool = False) -> SendMessageHeader:
        """The header of SEND_MESSAGE (``v2=False``), or of SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE
        (``v2=True``: the one-letter names)."""
        return _SEND_V2.read(ext) if v2 else SendMessageHeader.TABLE.read(ext)

    def to_ext(self, v2: bool = False) -> dict[str, str]:
        """extFields of this header (for our client), one-letter names when ``v2``."""
        return (_SEND_V2 if v2 else self.TABLE).to_ext(self)


_SEND_V2 = SendMessageHeader.TABLE.renamed(SEND_V2_NAMES)


@header
@dataclass(slots=True, kw_only=True)
class PullMessageHeader(Header):
    consumer_group: str = java("consumerGroup", STR)
    topic: str = java("topic", STR)
    queue_id: int = java("queueId", INT)
    queue_offset: int = java("queueOffset", LONG)
    max_msg_nums: int = java("maxMsgNums", INT)
    sys_flag: int = java("sysFlag", INT)
    commit_offset: int = java("commitOffset", LONG)
    suspend_timeout_millis: int = java("suspendTimeoutMillis", LONG)
    subscription: str | None = java("subscription", STR, None)
    sub_version: int = java("subVersion", LONG)
    expression_type: str | None = java("expressionType", STR, None)


@header
@dataclass(slots=True, kw_only=True)
class ConsumerSendMsgBackHeader(Header):
    """``ConsumerSendMsgBackRequestHeader`` (CONSUMER_SEND_MSG_BACK, 36): ``offset`` (the
    message's commitlog offset), ``group`` and ``delayLevel`` required; ``originMsgId``,
    ``originTopic`` (read, not used by the broker, as in Java), ``unitMode``,
    ``maxReconsumeTimes`` (``None``: the group's, 16)."""

    offset: int = java("offset", LONG)
    group: str = java("group", STR)
    delay_level: int = java("delayLevel", INT)
    origin_msg_id: str | None = java("originMsgId", STR, None)
    origin_topic: str | None = java("originTopic", STR, None)
    unit_mode: bool = java("unitMode", BOOL, False)
    max_reconsume_times: int | None = java("maxReconsumeTimes", INT, None)


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


@header
@dataclass(slots=True, kw_only=True)
class EndTransactionHeader(Header):
    """END_TRANSACTION (37)'s ``EndTransactionRequestHeader``: the half message by its queue
    offset (``tranStateTableOffset``) and commitlog offset, the outcome (0 unknown, 8 commit,
    12 rollback), whether it answers a check-back; ``msgId``/``transactionId`` (the client's
    UNIQ_KEY) for the logs."""

    producer_group: str = java("producerGroup", STR)
    tran_state_table_offset: int = java("tranStateTableOffset", LONG)
    commit_log_offset: int = java("commitLogOffset", LONG)
    commit_or_rollback: int = java("commitOrRollback", INT)
    from_transaction_check: bool = java("fromTransactionCheck", BOOL, False)
    msg_id: str = java("msgId", STR)
    transaction_id: str | None = java("transactionId", STR, None)

    @classmethod
    def read(cls, ext: Mapping[str, Any]) -> EndTransactionHeader:
        h: EndTransactionHeader = cls.TABLE.read(ext)
        if h.commit_or_rollback not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            # Java's checkFields: "commitOrRollback field wrong"
            raise FieldError("commitOrRollback", f"is {h.commit_or_rollback}, not 0, 8 or 12")
        return h


@header
@dataclass(slots=True, kw_only=True)
class CheckTransactionStateHeader(Header):
    """CHECK_TRANSACTION_STATE (39)'s ``CheckTransactionStateRequestHeader``, sent by the broker
    to a producer of the half message's group (oneway; the body is the half message encoded
    with its real topic and queue)."""

    tran_state_table_offset: int = java("tranStateTableOffset", LONG)
    commit_log_offset: int = java("commitLogOffset", LONG)
    msg_id: str | None = java("msgId", STR, None)
    transaction_id: str | None = java("transactionId", STR, None)
    offset_msg_id: str | None = java("offsetMsgId", STR, None)
