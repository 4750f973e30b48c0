"""One retention pass over a store, and the service that runs passes in the background.

A pass (:meth:`Retention.clean`, ``MessageStore.clean_expired``) is RocketMQ's
``CleanCommitLogService`` then ``CleanConsumeQueueService``:

1. **Commitlog.** When :func:`rmqlog.retention.policy.due` says so, the oldest segments that
   :func:`~rmqlog.retention.policy.expired_prefix` picks are deleted. First
   ``retention.state`` records the new start (durably, *before* anything is removed); then,
   under the append lock (so no rebuild of the append state walks the log meanwhile; held
   for the renames only, tens of microseconds a segment, no sync), oldest first, each is
   held exclusively (:func:`rmqlog.log.pins.hold_exclusive`; a segment a reader holds stops
   the pass there, unless it has been held for longer than
   ``destroy_mapped_file_interval_forcibly``) and moved into ``commitlog.deleted/`` (no
   reader, recovery or tool that lists the segments sees it again); then the folder is
   synced and the moved files are unlinked (an unlink of a large file can take milliseconds). Deletion is always a
   prefix
   of the log: a pass cut at any instant leaves a log that starts at a segment boundary at
   or below the recorded start, and the next open or pass completes it
   (:mod:`rmqlog.retention.leftovers`).
2. **Consume queues and index files**, when the commitlog start moved past what they were
   last cleaned against (``retention.state``'s ``queuesCleaned``; never past the first
   segment still there, one a reader held included): in every queue, the
   segments whose last unit points below the new start (wholly below it; never a queue's
   last segment, never one a reader holds) are deleted, oldest first. Queue minimum offsets
   follow by themselves (:meth:`rmqlog.queue.consume_queue.ConsumeQueue.min_offset`, RocketMQ's
   ``correctMinOffset``). Then the index hook (see :meth:`Retention._clean_index`).

A pass with nothing to do reads the clock, ``statvfs``, ``retention.state`` and the commitlog
folder's names: no queue folder is walked (well under a millisecond; see
``jobs/bench_retention.py``).

Only files inside the store root are ever removed, found by listing the store's own folders
(names parsed as segment names, queue folders validated as the store names them, symbolic
links to folders skipped); no path is ever taken from a file's content.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import safe_open
from ..errors import WrongFileTypeError
from ..fileio import disk_used_percent, fsync_dir
from ..log.pins import hold_exclusive
from ..paths import parse_segment_name, segment_name
from ..queue.consume_queue import CQ_UNIT_SIZE, FILLER_SIZE
from . import policy
from .leftovers import remove_deleted
from .marker import RetentionState, RetentionStateFile, completion_doubt

if TYPE_CHECKING:
    from ..parts import StoreParts

log = logging.getLogger(__name__)

_UNIT = struct.Struct(">qiq")


@dataclass
class CleanReport:
    """What one pass did (``MessageStore.clean_expired``; ``rmqlog clean --json`` prints it)."""

    #: why commitlog segments were due: "forced", "space", "time", "manual", or None
    reason: str | None = None
    #: the volume's use when the pass started, percent
    disk_used_percent: float = 0.0
    #: files deleted: commitlog segments, consume-queue segments, index files
    segments: list[str] = field(default_factory=list)
    consume_queue_files: list[str] = field(default_factory=list)
    index_files: list[str] = field(default_factory=list)
    #: disk space the deleted files held (allocated blocks)
    bytes: int = 0
    #: the commitlog's first offset before and after the pass
    log_start_before: int = 0
    log_start: int = 0
    #: files a reader held, which stopped the pass (deleted by a later pass)
    busy: list[str] = field(default_factory=list)

    @property
    def deleted(self) -> int:
        """How many files the pass deleted."""
        return len(self.segments) + len(self.consume_queue_files) + len(self.index_files)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Retention:
    """Retention of one open store: :meth:`clean` runs a pass; as a service of the store's
    loop (:mod:`rmqlog.service`, added by ``start_services``) a pass runs every
    ``clean_resource_interval`` parts.

    ``disk_used(path) -> percent`` and ``wall_ms() -> ms`` (default: the store's clock,
    :mod:`rmqlog.clock`) are injectable (tests drive them); the loop's ``now`` (monotonic) only
    schedules the passes, the rules use the wall clock.
    """

    name = "rmq-retention"
    repeat_when_busy = False
    wait_first = True  # RocketMQ's clean service starts a while after the broker, too

    def __init__(
        self,
        parts: StoreParts,
        *,
        disk_used: Callable[[Path], float] | None = None,
        wall_ms: Callable[[], int] | None = None,
    ) -> None:
        self.parts = parts
        self.interval_s = parts.config.clean_resource_interval / 1000.0
        self.last_error: BaseException | None = None
        self.disk_used = disk_used or disk_used_percent
        self.wall_ms = wall_ms or parts.clock.wall_ms
        self.state_file = RetentionStateFile(parts.paths.retention_state, parts.paths.commitlog_dir)
        self._busy_since: dict[int, int] = {}  # segment start -> when a pass first found it held
        self._lock = threading.Lock()  # one pass at a time in this process (other processes: the append lock)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No pass of this process runs while held (a replica truncation cuts the log's end:
        a pass must not delete by a tail it read before the cut)."""
        with self._lock:
            yield

    # ----------------------------------------------------------- service
    def run_once(self, now: float) -> bool:
        """One pass (see :mod:`rmqlog.service`); returns whether it deleted anything."""
        return self.clean().deleted > 0

    # -------------------------------------------------------------- pass
    def clean(self, now_ms: int | None = None, *, force: bool = False) -> CleanReport:
        """Run one pass as of ``now_ms`` (default: now); ``force``: delete expired segments at
        any hour (RocketMQ's manual deletion; age and the other limits still apply).

        Raises :class:`rmqlog.errors.DiskFullError` if ``retention.state`` cannot be written
        (then nothing was deleted), ``OSError`` for other filesystem errors.
        """
        with self._lock:
            now = self.wall_ms() if now_ms is None else int(now_ms)
            parts = self.parts
            dirs = [d for d in (parts.paths.commitlog_dir, parts.paths.consumequeue_dir) if safe_open.is_folder(d)]
            used = max((self.disk_used(d) for d in dirs), default=0.0)
            due = policy.due(parts.config, now, used, force=force)
            report = CleanReport(disk_used_percent=used)
            state = self.state_file.read()
            first, leftovers = self._first_segment(state)
            if first is None:
                return report
            report.log_start_before = report.log_start = first
            if state is not None and first < state.log_start:
                state = self._checked_completion(state, first)
            if due.any or (state is not None and first < state.log_start):  # (or a pass cut short to complete)
                report.reason = due.reason
                state = self._delete_segments(now, due, state, first, report)
            if leftovers or report.segments:
                report.bytes += remove_deleted(parts.paths.deleted_segments_dir)
            if state is None or first > state.log_start:  # the first pass, or segments removed by hand:
                # the queues are cleaned against where the log starts (once; RocketMQ's clean
                # service starts from offset 0 too). From the first pass on, retention.state and
                # commitlog.deleted/ exist: a pass on a full disk needs no new block for them
                safe_open.make_folder(parts.paths.deleted_segments_dir)
                state = RetentionState(first, state.queues_cleaned if state is not None else 0)
                self.state_file.write(state)
            # never past where the commitlog really starts (a segment a reader held is still there)
            target = min(state.log_start, report.log_start)
            if state.queues_cleaned < target and self._clean_queues(target, report):
                self.state_file.write(RetentionState(state.log_start, target, state.from_))
            if report.segments:
                log.info(
                    "retention (%s): deleted %d commitlog segment(s), %d consume-queue file(s), %d index file(s), "
                    "%d bytes; the commitlog starts at %d",
                    report.reason,
                    len(report.segments),
                    len(report.consume_queue_files),
                    len(report.index_files),
                    report.bytes,
                    report.log_start,
                )
            return report

    def _first_segment(self, state: RetentionState | None) -> tuple[int | None, bool]:
        """(the commitlog's first segment, whether moved segments of an earlier pass may be
        left in ``commitlog.deleted/``). Two ``stat`` calls when ``retention.state`` says where
        the log starts and a segment is there with none right below it (the usual case), else
        a listing of the folders (a first pass, a pass cut short, segments removed by hand)."""
        directory = self.parts.paths.commitlog_dir
        size = self.parts.commitlog.segment_size
        if (
            state is not None
            and state.checked
            and safe_open.kind(directory / segment_name(state.log_start)) is not None
            and (state.log_start < size or safe_open.kind(directory / segment_name(state.log_start - size)) is None)
        ):
            return state.log_start, False
        names = _listdir(directory)
        # 20 zero-padded digits sort as the numbers they are: no parse of every name
        seg_names = [n for n in names if len(n) == 20 and n.isdigit() and n.isascii()]
        leftovers = any(not safe_open.is_set_aside(n) for n in _listdir(self.parts.paths.deleted_segments_dir))
        return (int(min(seg_names)) if seg_names else None), leftovers

    def _checked_completion(self, state: RetentionState, first: int) -> RetentionState:
        """``retention.state`` says the log starts above its first segment (a pass cut short):
        the state when it agrees with the log (:func:`rmqlog.retention.marker.completion_doubt`),
        else the log's own start, recorded (nothing is deleted for the file's sake; the
        segments go by the usual rules)."""
        parts = self.parts
        flushed = parts.flush_service.state_file.read()
        doubt = completion_doubt(
            state,
            first,
            parts.commitlog.segment_size,
            parts.published_tail(),
            flushed.offset if flushed is not None else None,
            parts.paths.commitlog_dir,
        )
        if doubt is None:
            return state
        log.warning(
            "retention: %s says the commitlog starts at %d, but %s; the segments from %d are kept",
            parts.paths.retention_state,
            state.log_start,
            doubt,
            first,
        )
        state = RetentionState(first, min(state.queues_cleaned, first))
        self.state_file.write(state)
        return state

    def _delete_segments(
        self,
        now: int,
        due: policy.Due,
        state: RetentionState | None,
        first: int,
        report: CleanReport,
    ) -> RetentionState | None:
        """Step 1 of the module docstring; returns the state as it now is."""
        parts = self.parts
        cl = parts.commitlog
        size = cl.segment_size
        with parts.dispatcher.lock.held(shared=True):
            dispatched = parts.dispatcher.dispatched()[0]
        tail, flushed = parts.published_tail(), parts.flushed_offset()
        if due.any and dispatched < policy.deletable_below(size, tail, flushed, flushed) and first + size > dispatched:
            # records not dispatched yet would never get their units: dispatch them first
            # (a store nobody dispatches, a dispatcher behind), then delete
            parts.dispatcher.dispatch()
            with parts.dispatcher.lock.held(shared=True):
                dispatched = parts.dispatcher.dispatched()[0]
        limit = policy.deletable_below(size, tail, flushed, dispatched)
        directory = parts.paths.commitlog_dir

        def last_write_ms(start: int) -> int | None:
            return _mtime_ms(directory / segment_name(start))

        # a pass cut short is completed whatever the hour and the age: what lies below the
        # recorded start goes (still never the last segment, never past the limit)
        complete = state is not None and first < state.log_start
        doomed = (
            policy.expired_prefix(
                first,
                last_write_ms,
                size,
                min(limit, state.log_start) if complete and state is not None else limit,
                now,
                parts.config.file_reserved_time,
                at_once=complete,
                max_num=1 << 62,
            )
            if complete
            else []
        )
        if due.any:
            expired = policy.expired_prefix(
                first,
                last_write_ms,
                size,
                limit,
                now,
                parts.config.file_reserved_time,
                at_once=due.at_once,
                max_num=parts.config.delete_commit_log_files_max_num,
            )
            doomed = max(doomed, expired, key=len)
        if not doomed:
            return state
        intended = doomed[-1] + size
        if state is None or state.log_start < intended:  # recorded, durably, before anything is removed
            state = RetentionState(intended, min(state.queues_cleaned if state is not None else 0, intended), first)
            self.state_file.write(state)
        held: list[tuple[int, Path, int | None]] = []
        trash_dir = parts.paths.deleted_segments_dir
        trash: Path | None = trash_dir
        try:
            safe_open.make_folder(trash_dir)  # (made by the first pass, while there was room)
        except (OSError, WrongFileTypeError) as exc:  # a full disk: no room for a folder; unlinked in place instead
            log.warning("retention: cannot make %s (%s); segments are unlinked in place", trash_dir, exc)
            trash = None
        try:
            # under the append lock only the renames (no rebuild of the append state walks
            # the log meanwhile): tens of microseconds per segment, no sync
            with parts.append_lock.held():
                for start in doomed:
                    path = directory / segment_name(start)
                    try:
                        fd = hold_exclusive(path)
                    except FileNotFoundError:
                        continue  # another process's pass took it (always a prefix: the rest is ours)
                    if fd is None and not self._held_too_long(start, now, path):
                        report.busy.append(str(path))
                        break
                    held.append((start, path, fd))
                    self._busy_since.pop(start, None)
                    if trash is not None:  # held: no read of it is under way
                        safe_open.rename(path, trash / path.name)
                    else:
                        safe_open.unlink(path)
        finally:
            for _, _, fd in held:
                if fd is not None:
                    os.close(fd)
        if held:
            fsync_dir(directory)  # (a rename a power loss undoes brings back a segment below the
            # recorded start: removed at the next open)
            cl.segments.drop_below(held[-1][0] + size)
            report.segments = [str(path) for _, path, _ in held]
            report.log_start = held[-1][0] + size
        return state

    def _held_too_long(self, start: int, now: int, path: Path) -> bool:
        """Whether a segment readers hold has been held for ``destroy_mapped_file_interval_forcibly``
        ms since a pass first found it held (then it is deleted anyway, as RocketMQ's
        ``MappedFile.destroy(intervalForcibly)`` does: on a local filesystem the readers'
        mappings keep its data)."""
        first = self._busy_since.setdefault(start, now)
        if now - first < self.parts.config.destroy_mapped_file_interval_forcibly:
            return False
        log.warning("retention: %s has been held by a reader for %d ms; deleting it anyway", path, now - first)
        return True

    def _clean_queues(self, log_start: int, report: CleanReport) -> bool:
        """Step 2 of the module docstring; returns whether every queue (and the index) is done."""
        parts = self.parts
        complete = True
        for topic, qid, qdir in parts.queues.dirs():  # (real folders only: never a link)
            cq = parts.consume_queue(topic, qid)
            starts = sorted(s for s in map(parse_segment_name, _listdir(qdir)) if s is not None)
            kept = 0
            for start in starts[:-1]:  # never a queue's last segment: it holds the queue's end
                path = qdir / segment_name(start)
                verdict = _delete_if_below(path, cq.segments.size, log_start)
                if verdict is None:
                    break
                if verdict == _BUSY:  # a reader holds it: the next pass
                    report.busy.append(str(path))
                    complete = False
                    break
                if verdict != _GONE:  # (_GONE: another process's pass was first)
                    report.consume_queue_files.append(str(path))
                    report.bytes += verdict
                kept = start + cq.segments.size
            cq.segments.drop_below(kept)
        return self._clean_index(log_start, report) and complete

    def _clean_index(self, log_start: int, report: CleanReport) -> bool:
        """The seam for index files: the store's ``index_service``, when it has one, deletes its
        files wholly below ``log_start`` with ``delete_below(log_start)``, which returns the
        files it deleted (paths, or ``(path, bytes)`` pairs) or ``None``. Without an index
        service there is nothing to do. Returns whether it is done (an exception is logged
        and the index is cleaned again by the next pass)."""
        index = getattr(self.parts, "index_service", None)
        delete_below = getattr(index, "delete_below", None)
        if delete_below is None:
            return True
        try:
            with self.parts.dispatch_lock.held():  # the index's writers hold it (rmqlog.index.index_service)
                deleted: Iterable[Any] | None = delete_below(log_start)
        except Exception:  # noqa: BLE001 - the commitlog and queues are done; the index waits
            log.warning(
                "retention: deleting index files below %d failed; the next pass tries again", log_start, exc_info=True
            )
            return False
        for item in deleted or ():
            path, nbytes = item if isinstance(item, tuple) else (item, 0)
            report.index_files.append(str(path))
            report.bytes += int(nbytes)
        return True


def _listdir(path: Path) -> list[str]:
    return safe_open.listdir_or_empty(path)


def _mtime_ms(path: Path) -> int | None:
    try:
        return int(safe_open.lstat(path).st_mtime * 1000)
    except FileNotFoundError:
        return None


_BUSY, _GONE = -1, -2


def _delete_if_below(path: Path, size: int, log_start: int) -> int | None:
    """Delete the consume-queue segment ``path`` if it is full and its last unit points below
    ``log_start``: returns the bytes it held; ``None`` if it is not to be deleted (nor any
    later one); ``_BUSY`` if a reader holds it, ``_GONE`` if it is not there any more."""
    try:
        fd = hold_exclusive(path)
    except FileNotFoundError:
        return _GONE
    if fd is None:
        return _BUSY
    try:
        st = os.fstat(fd)
        if st.st_size != size:
            return None  # not a segment of this queue's size: recovery's business
        offset, unit_size, _ = _UNIT.unpack(os.pread(fd, CQ_UNIT_SIZE, size - CQ_UNIT_SIZE))
        if unit_size == 0 or (unit_size != FILLER_SIZE and offset >= log_start):
            return None  # not full, or a unit whose record is still stored
        safe_open.unlink(path)
        return st.st_blocks * 512
    finally:
        os.close(fd)


__all__ = ["CleanReport", "Retention"]
