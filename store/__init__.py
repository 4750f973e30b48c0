"""spark-rmq's message store: RocketMQ 4.9's commitlog, consume queues and dispatcher in Python.

No Spark import here: usable from plain Python, jobs, notebooks and the Spark data source.
"""

from .allocator import pin_malloc_thresholds
from .clock import Clock, ManualClock, SystemClock
from .config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from .config_files import TopicConfig
from .errors import (
    ConfigError,
    CorruptQueueError,
    CorruptRecordError,
    CorruptStoreError,
    DataLossError,
    DiskFullError,
    IndexDisabledError,
    InvalidArgumentError,
    InvalidGroupError,
    InvalidMessageError,
    InvalidTopicError,
    MessagesDeletedError,
    MessageTooLargeError,
    QueueIdError,
    ReadOnlyStoreError,
    StoreBusyError,
    StoreClosedError,
    StoreError,
    StoreNotFoundError,
    TooManyOpenFilesError,
    WrongFileTypeError,
)
from .message_store import MessageStore
from .results import GetMessageResult, GetMessageStatus, PutMessageResult, PutMessageStatus
from .schema import MESSAGE_SCHEMA, PUT_RESULT_SCHEMA

#: Whether glibc's malloc thresholds were pinned at import (see :mod:`rmqlog.allocator`).
MALLOC_PINNED = pin_malloc_thresholds()

__all__ = [
    "ASYNC_FLUSH", "SYNC_FLUSH", "StoreConfig", "TopicConfig", "MessageStore", "Clock", "ManualClock", "SystemClock",
    "StoreError", "ConfigError", "CorruptStoreError", "CorruptQueueError", "CorruptRecordError", "DataLossError", "DiskFullError", "IndexDisabledError", "InvalidGroupError", "InvalidMessageError", "InvalidArgumentError",
    "InvalidTopicError", "MessagesDeletedError", "MessageTooLargeError", "QueueIdError", "ReadOnlyStoreError", "StoreBusyError", "StoreClosedError", "StoreNotFoundError",
    "TooManyOpenFilesError", "WrongFileTypeError",
    "GetMessageResult", "GetMessageStatus", "PutMessageResult", "PutMessageStatus",
    "MESSAGE_SCHEMA", "PUT_RESULT_SCHEMA",
]
