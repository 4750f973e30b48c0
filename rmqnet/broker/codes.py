"""Store errors as RocketMQ's response codes (``SendMessageProcessor.handlePutMessageResult``).

(store error: code; remark)
- :class:`rmqlog.InvalidMessageError` (bad row, too large, bad topic, bad queue id): MESSAGE_ILLEGAL 13; the store's
  message (it names the field)
- :class:`rmqlog.DiskFullError`, :class:`rmqlog.StoreClosedError`, :class:`rmqlog.ReadOnlyStoreError`:
  SERVICE_NOT_AVAILABLE 14; RocketMQ's "service not available now..." and the cause
- :class:`rmqlog.StoreBusyError`: SYSTEM_BUSY 2; the cause
- :class:`rmqlog.TooManyOpenFilesError`: SYSTEM_ERROR 1; RocketMQ's "create mapped file failed..." and the cause
- :class:`rmqlog.LmqLimitError`: SYSTEM_ERROR 1; RocketMQ's "[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]..." and the cause
- any other :class:`rmqlog.StoreError` or ``OSError``: SYSTEM_ERROR 1; the error's type and message

Nothing else is mapped: an exception of another type is a bug of ours and propagates (the
transport logs it and answers SYSTEM_ERROR).
"""

from __future__ import annotations

from rmqlog import (
    DiskFullError,
    InvalidMessageError,
    LmqLimitError,
    ReadOnlyStoreError,
    StoreBusyError,
    StoreClosedError,
    StoreError,
    TooManyOpenFilesError,
)

from ..remoting import ResponseCode

#: RocketMQ's remark of SERVICE_NOT_AVAILABLE (its disk-use figure left out)
SERVICE_NOT_AVAILABLE_REMARK = (
    "service not available now. It may be caused by one of the following reasons: "
    "the broker's disk is full, messages are put to the slave, message store has been shut down, etc."
)
#: RocketMQ's remark of a send refused while its send queue is full (``NettyRemotingAbstract``)
SYSTEM_BUSY_REMARK = "[OVERLOAD]system busy, start flow control for a while"
#: RocketMQ's remark of a send to a broker that is shutting down (``preSend``/``isShutdown``)
STOPPING_REMARK = "the broker is shutting down; " + SERVICE_NOT_AVAILABLE_REMARK


#: RocketMQ's remark of a put refused past ``maxLmqConsumeQueueNum`` (LMQ_CONSUME_QUEUE_NUM_EXCEEDED)
LMQ_EXCEEDED_REMARK = (
    "[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]broker config enableLmq and enableMultiDispatch, lmq consumeQueue "
    "num exceed maxLmqConsumeQueueNum config num, default limit 2w."
)


def illegal_remark(max_message_size: int, detail: str) -> str:
    """RocketMQ's MESSAGE_ILLEGAL remark, followed by what the store found."""
    return (
        "the message is illegal, maybe msg body or properties length not matched. "
        f"msg body length limit {max_message_size}B, msg properties length limit 32KB. ({detail})"
    )


def store_error_code(exc: BaseException, max_message_size: int) -> tuple[int, str]:
    """(response code, remark) for an error of a put; raises ``exc`` again when it is neither
    a store error nor an ``OSError``."""
    if isinstance(exc, InvalidMessageError):
        return ResponseCode.MESSAGE_ILLEGAL, illegal_remark(max_message_size, str(exc))
    if isinstance(exc, DiskFullError | StoreClosedError | ReadOnlyStoreError):
        return ResponseCode.SERVICE_NOT_AVAILABLE, f"{SERVICE_NOT_AVAILABLE_REMARK} ({type(exc).__name__}: {exc})"
    if isinstance(exc, StoreBusyError):
        return ResponseCode.SYSTEM_BUSY, f"{SYSTEM_BUSY_REMARK} ({exc})"
    if isinstance(exc, LmqLimitError):
        return ResponseCode.SYSTEM_ERROR, f"{LMQ_EXCEEDED_REMARK} ({exc})"
    if isinstance(exc, TooManyOpenFilesError):
        return ResponseCode.SYSTEM_ERROR, f"create mapped file failed, server is busy or broken. ({exc})"
    if isinstance(exc, StoreError | OSError):
        return ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"
    raise exc
