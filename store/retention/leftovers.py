"""What a retention pass cut short leaves behind, and how it is completed.

A pass (:mod:`rmqlog.retention.cleaner`) writes ``retention.state`` (the new commitlog start)
durably, then moves each doomed segment from ``commitlog/`` into ``commitlog.deleted/``
(:attr:`rmqlog.paths.StorePaths.deleted_segments_dir`), syncs the folder, and unlinks the
moved files. Cut at any instant (a kill, a power loss), it leaves:

- files in ``commitlog.deleted/``: no reader, no recovery and no tool that lists the
  segments looks there; removed by the next pass that deletes, or at the next open;
- segments below the recorded start that were not moved yet (or whose move a power loss
  undid): the log then starts at one of them, still a whole prefix of what it was, so the
  store reads correctly; they are removed at the next open by its first opener
  (:func:`finish_at_open`, from recovery, before anything reads the log) or by the next pass.

So the log never has a hole: recovery, which refuses a log whose segments do not follow each
other, never meets one made by retention.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from .. import safe_open
from ..fileio import fsync_dir
from ..paths import parse_segment_name, segment_name
from .marker import RetentionStateFile, completion_doubt

if TYPE_CHECKING:
    from ..parts import StoreParts

log = logging.getLogger(__name__)


def remove_deleted(directory: Path) -> int:
    """Unlink the segments in ``directory`` (``commitlog.deleted/``; only files named as
    segments: a folder of that name is left alone, set aside by the next open's survey, see
    :mod:`rmqlog.recovery.survey`); returns the disk space they held (allocated blocks)."""
    freed = 0
    for name, found in safe_open.entries(directory):
        if parse_segment_name(name) is None or found == safe_open.FOLDER:
            continue
        path = directory / name
        try:
            freed += safe_open.lstat(path).st_blocks * 512
            safe_open.unlink(path)  # (a link is removed itself: its target is never touched)
        except FileNotFoundError:
            continue  # another process's pass removed it first
    return freed


def finish_at_open(parts: StoreParts) -> list[str]:
    """Complete a pass cut short, at open (the first opener's recovery, before the log is
    read): unlink what ``commitlog.deleted/`` holds, and remove the segments wholly below
    ``retention.state``'s start (never the last segment), but only when the file agrees with
    the log (:func:`rmqlog.retention.marker.completion_doubt`): otherwise nothing is removed
    and the doubt is reported. Returns what it did, for the recovery report."""
    directory = parts.paths.commitlog_dir
    problems: list[str] = []
    if remove_deleted(parts.paths.deleted_segments_dir):
        problems.append(f"retention: unlinked the segments a pass left in {parts.paths.deleted_segments_dir}")
    state = RetentionStateFile(parts.paths.retention_state, directory).read()
    if state is None:
        return problems
    segs = parts.commitlog.segments
    starts = segs.segment_starts()
    stale = [s for s in starts[:-1] if s + segs.size <= state.log_start]
    if not stale:
        return problems
    flushed = parts.flush_service.state_file.read()
    doubt = completion_doubt(
        state, starts[0], segs.size, parts.published_tail(), flushed.offset if flushed is not None else None, directory
    )
    if doubt is not None:
        msg = (
            f"retention: {parts.paths.retention_state} says the commitlog starts at {state.log_start}, but {doubt}; "
            f"the {len(stale)} segment(s) below it are kept"
        )
        log.warning(msg)
        problems.append(msg)
        return problems
    for start in stale:
        segs.forget(start)
        segs.odd.pop(start, None)
        safe_open.unlink(directory / segment_name(start))
    if stale:
        fsync_dir(directory)
        msg = (
            f"retention: {len(stale)} commitlog segment(s) below the start {state.log_start} a pass recorded were "
            f"left by a pass cut short; removed"
        )
        log.warning(msg)
        problems.append(msg)
    return problems
