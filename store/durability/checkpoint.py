"""The ``checkpoint`` file (RocketMQ's StoreCheckpoint): how far the flushed data reaches, in time.

``<root>/checkpoint`` is exactly 4096 bytes (one page), big-endian:

(offset: field; meaning)
- 0: physicMsgTimestamp; long: STORETIMESTAMP (ms) of the last commitlog record flushed
- 8: logicsMsgTimestamp; long: store time of the last record whose consume-queue unit was flushed
- 16: indexMsgTimestamp; long: endTimestamp of the newest full index file synced (0: none; see rmqlog.index)
- 24..: zero; RocketMQ 5.x puts masterFlushedOffset/confirmPhyOffset at 24/32; this store leaves them 0

Recovery after an abnormal exit trusts everything stored up to
``min(physic, logics) - 3000 ms`` (:meth:`Checkpoint.safe_timestamp`): it starts its walk at
the newest commitlog segment whose first record is older than that.

Nothing is checksummed (as in RocketMQ), so the values are bounded before they are trusted:
a time more than a day (:data:`FUTURE_SLACK_MS`, clocks that went back) later than both the
newest record's store time and the wall clock (:meth:`Checkpoint.plausible`) cannot be a
flushed record's (a flipped high bit gives such times), and such a checkpoint is treated as absent (a walk
from the first segment; every index file rebuilt), and never merged into a new one. The
file is rewritten in place (one ``pwrite`` of the
24 bytes inside one page, then ``fdatasync``): a crash leaves the old or the new values, as
the write never crosses a sector. Timestamps never go back: a writer stores the maximum of
the file's values and its own (several processes may checkpoint the same store).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import safe_open
from ..clock import SYSTEM_CLOCK
from ..errors import CorruptStoreError, raise_if_disk_full

CHECKPOINT_SIZE = 4096
_FIELDS = struct.Struct(">qqq")  # physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp
#: RocketMQ subtracts 3 s from the checkpoint's times before trusting them (clock skew between
#: the flush services that write them).
SAFE_MARGIN_MS = 3000
#: How far past the newest store time and the wall clock a checkpoint time may be (a clock
#: that went back) before the checkpoint is taken for damaged.
FUTURE_SLACK_MS = 86_400_000


@dataclass(frozen=True)
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0

    def safe_timestamp(self) -> int:
        """RocketMQ's ``getMinTimestamp``: data stored up to this time (ms) is on disk."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - SAFE_MARGIN_MS)

    def plausible(self, ceiling_ms: int) -> bool:
        """Whether every time is at most :data:`FUTURE_SLACK_MS` past ``ceiling_ms`` (the newest
        store time known, or the wall clock if later): no flushed record or index file is newer."""
        newest = max(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp)
        return newest <= ceiling_ms + FUTURE_SLACK_MS

    def merged(self, other: Checkpoint) -> Checkpoint:
        """Field-wise maximum (timestamps never go back)."""
        return Checkpoint(
            max(self.physic_msg_timestamp, other.physic_msg_timestamp),
            max(self.logics_msg_timestamp, other.logics_msg_timestamp),
            max(self.index_msg_timestamp, other.index_msg_timestamp),
        )


class CheckpointFile:
    """Read and durably write ``<root>/checkpoint``."""

    def __init__(self, path: Path, wall_ms: Callable[[], int] = SYSTEM_CLOCK.wall_ms) -> None:
        self.path = path
        self.wall_ms = wall_ms  # the store's clock: the ceiling of a plausible checkpoint

    def read(self) -> Checkpoint | None:
        """The checkpoint, or ``None`` when there is no file.

        Raises :class:`CorruptStoreError` when the file is shorter than its 24 bytes of fields.
        """
        try:
            raw = safe_open.read_bytes(self.path)
        except FileNotFoundError:
            return None
        if len(raw) < _FIELDS.size:
            raise CorruptStoreError(f"checkpoint is {len(raw)} bytes, expected {CHECKPOINT_SIZE}", path=str(self.path))
        return Checkpoint(*_FIELDS.unpack_from(raw, 0))

    def write(self, cp: Checkpoint) -> Checkpoint:
        """Store ``cp`` merged with what the file holds, durably; returns what was written.

        The caller serializes writers (the store's flush lock).
        """
        try:
            current = self.read()
        except CorruptStoreError:
            current = None
        ceiling = max(cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp, self.wall_ms())
        if current is not None and not current.plausible(ceiling):
            current = None  # from the future (damaged): never kept by a merge
        if current is not None:
            cp = cp.merged(current)
            if cp == current:
                return cp  # nothing new: no write, no sync
        try:
            fd = safe_open.open_file(self.path, os.O_RDWR | os.O_CREAT)
            try:
                if os.fstat(fd).st_size != CHECKPOINT_SIZE:
                    os.ftruncate(fd, CHECKPOINT_SIZE)
                os.pwrite(fd, _FIELDS.pack(cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp), 0)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:  # the first write needs a block: on a full disk, typed
            raise_if_disk_full(exc, self.path, "writing the checkpoint")
            raise
        return cp
