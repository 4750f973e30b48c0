"""``<root>/retention.state`` (ours; RocketMQ tooling ignores it): where the commitlog starts
since retention last deleted segments, and how far the consume queues were cleaned after it.

JSON, replaced atomically (``<path>.tmp`` + rename), durably (file and folder fsynced)::

    {"version": 1, "logStart": 2147483648, "queuesCleaned": 1073741824}

- ``logStart``: every commitlog segment wholly below it was deleted by retention, or is being
  deleted: the file is written *before* a pass removes any segment. A segment found below it
  later is the leftover of a pass cut short (a kill, or a power loss that undid an unlink),
  and is removed when the store is next opened by its first opener, or by the next pass; so
  a pass cut at any instant leaves a log that starts at a segment boundary, without a gap.
- ``queuesCleaned``: the commitlog start the consume queues (and index files) were last
  cleaned against. While it is below ``logStart`` a pass cleans them; otherwise a pass that
  deletes nothing walks no queue folder (what keeps it under a millisecond).

Absent: retention never deleted anything here (a store whose oldest segments were removed by
hand, or by RocketMQ, simply starts at its first segment). Unreadable or malformed: treated
as absent, with a warning (it only completes deletions; it is never needed to read the log).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from .. import safe_open
from ..errors import DiskFullError
from ..fileio import replace_file, rewrite_in_place

log = logging.getLogger(__name__)

VERSION = 1
#: The file's size: the JSON padded with spaces (a rewrite in place never needs a new block).
FILE_SIZE = 128


@dataclass(frozen=True)
class RetentionState:
    log_start: int = 0
    queues_cleaned: int = 0


class RetentionStateFile:
    """Read and durably replace ``retention.state``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> RetentionState | None:
        """The state, or ``None`` when absent or unreadable (logged)."""
        try:
            raw = safe_open.read_bytes(self.path)
        except FileNotFoundError:
            return None
        try:
            d = json.loads(raw)
            start, cleaned = d["logStart"], d.get("queuesCleaned", 0)
            if d.get("version") != VERSION or not all(type(v) is int and 0 <= v < 1 << 63 for v in (start, cleaned)):
                raise ValueError("unexpected fields")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring unreadable %s (%s)", self.path, exc)
            return None
        return RetentionState(start, min(cleaned, start))

    def write(self, state: RetentionState) -> None:
        """Replace the file durably. On a full disk (when retention is needed most) an existing
        file is rewritten in place instead: always :data:`FILE_SIZE` bytes (JSON padded with
        spaces), so its block is reused; a write torn by a crash then reads as unreadable,
        which only means a pass cut short is not completed at open. Raises
        :class:`rmqlog.errors.DiskFullError` if there is no file yet and no room for one."""
        body = json.dumps({"version": VERSION, "logStart": state.log_start, "queuesCleaned": state.queues_cleaned})
        data = body.encode().ljust(FILE_SIZE)
        try:
            replace_file(self.path, data, durable=True)
        except DiskFullError:
            if safe_open.kind(self.path) is None:
                raise
            rewrite_in_place(self.path, data)
            fd = safe_open.open_file(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
