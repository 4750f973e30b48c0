"""RocketMQ's retention rules (``CleanCommitLogService``), as pure functions of their inputs.

- **Time** (``isTimeToDelete``): a pass deletes at the hours of ``delete_when`` (local time,
  ``"04"`` or ``"04;16"``), or at any hour when asked to (``force``: RocketMQ's manual
  deletion, ``executeDeleteFilesManually``).
- **Space** (``isSpaceToDelete``): past ``disk_max_used_space_ratio`` (clamped to 10..95, as
  RocketMQ's getter does) a pass deletes at any hour; past ``disk_space_clean_forcibly_ratio``
  (or the warning level) with ``clean_file_forcibly_enable``, it deletes *whatever the age*
  (RocketMQ's ``cleanImmediately``).
- **Which segments** (``MappedFileQueue.deleteExpiredFileByTime``): the oldest first, each
  whose last write (mtime) is at least ``file_reserved_time`` hours old (or any, when
  cleaning immediately); the first that is not stops the pass (never a hole in the middle);
  at most ``delete_commit_log_files_max_num`` per pass; never the last segment.

Ours on top (:func:`deletable_below`): never a segment holding or following the published
tail (the segment being written), nor bytes not yet flushed or not yet dispatched into the
consume queues.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..config import StoreConfig, delete_hours

HOUR_MS = 3600 * 1000


@dataclass(frozen=True)
class Due:
    """Whether a pass deletes commitlog segments now, and by which rule."""

    time_up: bool  # the hour is in delete_when
    space_full: bool  # disk use past disk_max_used_space_ratio
    at_once: bool  # past the forced ratio: whatever the age
    manual: bool = False  # asked for (force): at any hour

    @property
    def any(self) -> bool:
        return self.time_up or self.space_full or self.at_once or self.manual

    @property
    def reason(self) -> str | None:
        """Why a pass deletes: ``"forced"``, ``"space"``, ``"time"``, ``"manual"`` (first that applies), or ``None``."""
        for name, on in (
            ("forced", self.at_once),
            ("space", self.space_full),
            ("time", self.time_up),
            ("manual", self.manual),
        ):
            if on:
                return name
        return None


def is_time_to_delete(delete_when: str, now_ms: int) -> bool:
    """Whether the local hour of ``now_ms`` is one of ``delete_when``'s (RocketMQ's ``isItTimeToDo``)."""
    return time.localtime(now_ms / 1000).tm_hour in delete_hours(delete_when)


def max_used_ratio(config: StoreConfig) -> int:
    """``disk_max_used_space_ratio`` as RocketMQ reads it: clamped to 10..95."""
    return min(95, max(10, config.disk_max_used_space_ratio))


def due(config: StoreConfig, now_ms: int, used_percent: float, *, force: bool = False) -> Due:
    """What a pass at ``now_ms`` with the disk ``used_percent`` full may delete (see the module docstring)."""
    forcibly = config.clean_file_forcibly_enable and (
        used_percent > config.disk_space_clean_forcibly_ratio or used_percent > config.disk_space_warning_level_ratio
    )
    return Due(
        time_up=is_time_to_delete(config.delete_when, now_ms),
        space_full=used_percent > max_used_ratio(config),
        at_once=forcibly,
        manual=force,
    )


def deletable_below(segment_size: int, tail: int, flushed: int, dispatched: int) -> int:
    """Segments must end at or below this offset to be deleted: not the segment holding the
    published ``tail`` (the one being written) nor any after it, and no byte that is not yet
    flushed (acknowledged data recovery relies on) or not yet dispatched."""
    return min(tail - tail % segment_size, flushed, dispatched)


def expired_prefix(
    first: int,
    last_write_ms: Callable[[int], int | None],
    segment_size: int,
    limit: int,
    now_ms: int,
    reserved_hours: int,
    *,
    at_once: bool,
    max_num: int,
) -> list[int]:
    """The start offsets of the segments a pass deletes, oldest first, from the log's
    ``first`` segment on (segments follow each other: ``first + k * segment_size``).

    ``last_write_ms(start)``: the segment's mtime in ms, ``None`` if there is no such segment.
    Each must be expired (``now_ms >= mtime + reserved``) unless ``at_once``; the first that
    is not, or that does not end at or below ``limit``, ends the list; never the last segment
    (the one after it must exist); at most ``max_num``. Only the segments looked at are asked
    for their mtime (no listing of the folder).
    """
    out: list[int] = []
    reserved_ms = reserved_hours * HOUR_MS
    start = first
    mtime = last_write_ms(start)
    while mtime is not None and len(out) < max_num and start + segment_size <= limit:
        after = last_write_ms(start + segment_size)
        if after is None:
            break  # the last segment
        if not at_once and now_ms < mtime + reserved_ms:
            break  # RocketMQ: "avoid deleting files in the middle"
        out.append(start)
        start, mtime = start + segment_size, after
    return out
