"""spark-rmq's message store: RocketMQ 4.9's commitlog, consume queues and dispatcher in Python.

No Spark import here: usable from plain Python, jobs, notebooks and the Spark data source.

The public API (what code outside the store, the Spark source and the network side to come,
may import; docs/store-api.md): the names of :data:`__all__`, and the modules named in
:data:`PUBLIC_MODULES`. Every other module is the store's inside and may change with it
(tests/test_layout.py checks that the Spark side imports nothing else).
"""

from .access.direct_append import PutRows
from .access.window_request import parse_tag_filter
from .allocator import pin_malloc_thresholds
from .clock import Clock, ManualClock, SystemClock
from .config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from .config_files import SubscriptionGroupConfig, TopicConfig
from .config_tables import FileStamp, TableMerge
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
    LmqLimitError,
    MessagesDeletedError,
    MessageTooLargeError,
    QueueIdError,
    ReadOnlyStoreError,
    ReplicaOffsetError,
    ReplicaStreamError,
    StoreBusyError,
    StoreClosedError,
    StoreError,
    StoreNotFoundError,
    TooManyOpenFilesError,
    WrongFileTypeError,
)
from .filter import FilterParseError, Sql92Filter, compile_filter
from .log.batch_body import decode_message_batch, encode_message_batch
from .log.decode import MIN_RECORD_SIZE
from .log.encode.columns import check_utf8_column
from .log.encode.direct import WireMessage
from .log.msgid import is_uniq_key
from .log.properties import WAITING_TOPICS
from .log.rows import decode_record_rows
from .log.send_back import send_back_table
from .log.wire import decode_records
from .message_store import MessageStore
from .pop_log import PopLog
from .results import (
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    RecordHead,
    StoredRecords,
)
from .schema import MESSAGE_SCHEMA, PUT_RESULT_SCHEMA

#: Modules of the public API, beside the names of :data:`__all__`: the error family, result
#: types, the message schema, the config, argument checks that raise the typed errors, store
#: paths and name rules, time parsing, and file calls that never follow links.
PUBLIC_MODULES = (
    "rmqlog.errors",
    "rmqlog.results",
    "rmqlog.schema",
    "rmqlog.config",
    "rmqlog.arguments",
    "rmqlog.paths",
    "rmqlog.times",
    "rmqlog.safe_open",
    "rmqlog.values",
)

#: Whether glibc's malloc thresholds were pinned at import (see :mod:`rmqlog.allocator`).
MALLOC_PINNED = pin_malloc_thresholds()

__all__ = [
    "ASYNC_FLUSH",
    "SYNC_FLUSH",
    "StoreConfig",
    "TopicConfig",
    "SubscriptionGroupConfig",
    "FileStamp",
    "TableMerge",
    "MessageStore",
    "Clock",
    "ManualClock",
    "SystemClock",
    "StoreError",
    "ConfigError",
    "CorruptStoreError",
    "CorruptQueueError",
    "CorruptRecordError",
    "DataLossError",
    "DiskFullError",
    "IndexDisabledError",
    "InvalidGroupError",
    "InvalidMessageError",
    "InvalidArgumentError",
    "InvalidTopicError",
    "LmqLimitError",
    "MessagesDeletedError",
    "MessageTooLargeError",
    "QueueIdError",
    "ReadOnlyStoreError",
    "ReplicaOffsetError",
    "ReplicaStreamError",
    "StoreBusyError",
    "StoreClosedError",
    "StoreNotFoundError",
    "TooManyOpenFilesError",
    "WrongFileTypeError",
    "GetMessageResult",
    "GetMessageStatus",
    "PutMessageResult",
    "PutMessageStatus",
    "RecordHead",
    "StoredRecords",
    "parse_tag_filter",
    "FilterParseError",
    "Sql92Filter",
    "compile_filter",
    "MESSAGE_SCHEMA",
    "PUT_RESULT_SCHEMA",
    "MIN_RECORD_SIZE",
    "WAITING_TOPICS",
    "is_uniq_key",
    "check_utf8_column",
    "PUBLIC_MODULES",
    "decode_message_batch",
    "encode_message_batch",
    "decode_record_rows",
    "decode_records",
    "send_back_table",
    "WireMessage",
    "PutRows",
    "PopLog",
]
