"""Result types of the store's read and write calls (RocketMQ's status names)."""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass

import numpy as np
import pyarrow as pa


class GetMessageStatus(enum.Enum):
    """RocketMQ's ``GetMessageStatus``; the docstring of each says which next offset comes with it."""

    FOUND = "FOUND"  # offset + units scanned
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # only filtered-out units: offset + units scanned
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"  # commitlog already deleted: offset + units scanned
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"  # its consume-queue file went meanwhile: the queue's first offset now
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"  # offset > max: max (RocketMQ 4.9.4 on)
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # offset == max: offset
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # offset < min: min
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"  # no such queue: 0
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"  # empty queue: 0


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"


@dataclass(frozen=True)
class RecordHead:
    """Where a stored record belongs (:meth:`rmqlog.access.wire.WireCalls.record_head`): its topic,
    queue id and queue offset, and its properties (name -> value, Java's parsing rules)."""

    topic: str
    queue_id: int
    queue_offset: int
    properties: dict[str, str]


@dataclass(frozen=True)
class StoredRecords:
    """Records as they lie in the commitlog, byte-exact: what RocketMQ's pull and query
    responses carry (its ``GetMessageResult`` buffers), one record after the other.

    ``array`` holds one element per record (a ``large_binary`` array whose value offsets start
    at 0), so :attr:`data` is the concatenation with no copy; ``commit_log_offsets``,
    ``sizes`` (each record's TOTALSIZE: its element's length) and ``queue_offsets`` are int64
    numpy arrays of the same length, in queue order.
    """

    array: pa.LargeBinaryArray
    commit_log_offsets: np.ndarray
    sizes: np.ndarray
    queue_offsets: np.ndarray

    @property
    def data(self) -> pa.Buffer:
        """The records' bytes, concatenated (a view of ``array``'s data buffer)."""
        if not len(self.array):
            return pa.py_buffer(b"")
        return self.array.buffers()[2].slice(0, int(self.sizes.sum()))

    def __len__(self) -> int:
        return len(self.array)

    @staticmethod
    def empty() -> StoredRecords:
        none = np.zeros(0, np.int64)
        return StoredRecords(pa.array([], pa.large_binary()), none, none, none)


@dataclass(frozen=True)
class DiskLimits:
    """RocketMQ's transfer limits for the records it would read from disk
    (``DefaultMessageStore.isTheBatchFull`` with ``isInDisk``), for
    :meth:`rmqlog.MessageStore.read_window`'s ``disk``.

    A record lies "on disk" when it starts more than ``memory`` bytes behind the commitlog's
    published end (RocketMQ's ``maxOffsetPy - offsetPy > totalPhysicalMemory *
    accessMessageInMemoryMaxRatio / 100``). Before such a unit, the batch is full once
    ``max_count`` messages are taken or when its size would carry the bytes taken past
    ``max_bytes``; every other unit is judged by the read's own ``max_count`` and
    ``max_bytes``. ``memory`` >= 0, the limits >= 1 (:class:`rmqlog.errors.InvalidArgumentError`
    naming the field otherwise).
    """

    memory: int
    max_count: int
    max_bytes: int


@dataclass(frozen=True)
class GetMessageResult:
    """What a read of a window of a queue gives (RocketMQ's ``GetMessageResult``).

    ``messages``: the messages as the message table (empty when the read asked for the stored
    records); ``records``: the stored records byte-exact (:class:`StoredRecords`; ``None``
    unless asked for). ``removed``: the queue offsets ``[start, end)`` of the window whose
    records retention deleted while the read was under way (skipped; RocketMQ skips them
    too), else ``None``.
    """

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: pa.Table
    records: StoredRecords | None = None
    removed: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self.records) if self.records is not None else self.messages.num_rows


@dataclass(frozen=True)
class PutMessageResult:
    status: PutMessageStatus
    commit_log_offset: int
    queue_offset: int
    msg_id: str
    store_timestamp: dt.datetime
    queue_id: int
