"""Result types of the store's read and write calls (RocketMQ's status names)."""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass

import pyarrow as pa


class GetMessageStatus(enum.Enum):
    """RocketMQ's ``GetMessageStatus``; the docstring of each says which next offset comes with it."""

    FOUND = "FOUND"  # offset + units scanned
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # only filtered-out units: offset + units scanned
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"  # commitlog already deleted: offset + units scanned
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"  # offset > max: max (min when min is 0)
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # offset == max: offset
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # offset < min: min
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"  # no such queue: 0
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"  # empty queue: 0


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"


@dataclass(frozen=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: pa.Table

    def __len__(self) -> int:
        return self.messages.num_rows


@dataclass(frozen=True)
class PutMessageResult:
    status: PutMessageStatus
    commit_log_offset: int
    queue_offset: int
    msg_id: str
    store_timestamp: dt.datetime
    queue_id: int
