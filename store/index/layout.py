"""The layout of a RocketMQ index file (see :mod:`rmqlog.index.index_file`): the header,
slot and entry sizes, the entry's and the header's byte forms, and the write intent."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = 40
SLOT_SIZE = 4
ENTRY_SIZE = 20
ENTRY = struct.Struct(">iqii")
#: One entry: keyHash, phyOffset, timeDiff (seconds), prevIndex; 20 bytes, packed, big-endian.
ENTRY_DTYPE = np.dtype([("keyHash", ">i4"), ("phyOffset", ">i8"), ("timeDiff", ">i4"), ("prevIndex", ">i4")])
INVALID_INDEX = 0
INT_MAX = 0x7FFFFFFF
#: Entry 0 while a batch is being written: ``int INTENT_MAGIC ('IXWR'), long old indexCount,
#: int new indexCount, int 0``; all zero otherwise (RocketMQ never reads entry 0).
INTENT_MAGIC = 0x49585752
ZERO_ENTRY = bytes(ENTRY_SIZE)


def file_size(hash_slot_num: int, index_num: int) -> int:
    """Bytes of an index file with these counts: ``40 + 4*slots + 20*entries``."""
    return HEADER_SIZE + SLOT_SIZE * hash_slot_num + ENTRY_SIZE * index_num


@dataclass(frozen=True)
class IndexHeader:
    """The 40-byte header, as stored (``index_count`` 0 already read as 1)."""

    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int

    def pack(self) -> bytes:
        return HEADER.pack(
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def time_matched(self, begin: int, end: int) -> bool:
        """RocketMQ's ``IndexFile.isTimeMatched``: the file's time span meets ``[begin, end]``."""
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)
