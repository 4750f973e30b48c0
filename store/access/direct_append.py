"""The append of a few records encoded by the direct path (:mod:`rmqlog.log.encode.direct`):
the same steps and guarantees as :meth:`rmqlog.access.appender.Appender.append`, done one
record at a time with ``struct`` and one ``pwrite`` per segment touched, and their dispatch
from the records' own fields (:meth:`rmqlog.queue.dispatcher.Dispatcher.dispatch_direct`).

Under ``append.lock``: the published state read (its changes only: :mod:`rmqlog.log.append_state`),
the idempotence check, the scrub check at the tail (one 8-byte read), each record's queue
offset from the ``topicQueueTable``, its position (a record that does not leave 8 bytes in
its segment goes to the next, after a blank: RocketMQ's rule, as
:func:`rmqlog.log.commitlog.plan_positions`), QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP
written into its bytes, the bytes written, the new state published. A failure before the
publish clears what was written past the old tail (as the vectorized append does).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import crash_points
from ..errors import DISK_FULL_ERRNOS, DiskFullError, QueueIdError
from ..index.index_keys import direct_keys
from ..log.append_state import AppendState
from ..log.encode.direct import (
    PHYSICAL_OFFSET_AT,
    QUEUE_OFFSET_AT,
    DirectRecord,
    WireMessage,
    encode_direct,
)
from ..log.msgid import offset_msg_id
from ..log.properties import WAITING_TOPICS
from ..log.record import BLANK_MAGIC, END_FILE_MIN_BLANK_LENGTH
from ..queue.direct_dispatch import dispatch_direct

if TYPE_CHECKING:
    from ..log.commitlog import CommitLog
    from ..parts import StoreParts
    from .appender import Appender

_LONG = struct.Struct(">q")
_BLANK = struct.Struct(">ii")


@dataclass(frozen=True, slots=True)
class PutRows:
    """The result of :meth:`rmqlog.MessageStore.put_messages`, one entry per message in order:
    ``commit_log_offsets``, ``queue_offsets``, ``msg_ids`` (the offset msgIds), and the
    ``store_timestamp`` (ms) they share; ``start``/``end``: the commitlog range appended (a
    blank that ended a segment included).
    Empty for a replay of an idempotent put (``duplicate``)."""

    commit_log_offsets: list[int]
    queue_offsets: list[int]
    msg_ids: list[str]
    store_timestamp: int
    start: int
    end: int
    duplicate: bool = False
    #: the dispatch a ``defer_dispatch`` put left to :meth:`rmqlog.MessageStore.dispatch_put`
    pending: _PendingDispatch | None = field(default=None, compare=False, repr=False)


def append_direct(appender: Appender, records: list[DirectRecord], marker: tuple[str, str] | None) -> PutRows:
    """Append ``records`` all or nothing (see the module docstring). Raises
    :class:`rmqlog.errors.QueueIdError` for a queue id past its topic's, checked first,
    :class:`rmqlog.errors.DiskFullError` on a full disk (nothing published)."""
    parts = appender.parts
    _check_queue_ids(parts, records)
    appender.disk_guard.check()
    with parts.append_lock.held():
        state = parts.state_file.load() or parts.rebuild_state()
        if marker is not None:
            seq_s, name = marker[1].split(" ", 1)
            if int(state.writers.get(name, -1)) >= int(seq_s):
                return PutRows([], [], [], 0, state.tail, state.tail, duplicate=True)
            state.writers[name] = int(seq_s)
        tail = state.tail
        try:
            positions, queue_offsets, store_ts = _write(parts, records, state)
            if crash_points.reached is not None:
                crash_points.reached("append.written")
            parts.state_file.publish(state)
            if crash_points.reached is not None:
                crash_points.reached("append.published")
        except BaseException as exc:
            appender.drop_unpublished(tail)
            if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
                raise DiskFullError(
                    exc.errno,
                    f"disk full while appending at commitlog offset {tail}: nothing was published",
                    exc.filename or str(parts.paths.commitlog_dir),
                ) from exc
            raise
    host = appender.store_host
    return PutRows(positions, queue_offsets, [offset_msg_id(host, p) for p in positions], store_ts, tail, state.tail)


def _check_queue_ids(parts: StoreParts, records: list[DirectRecord]) -> None:
    topics = list(dict.fromkeys(r.topic for r in records))
    counts = dict(zip(topics, parts.topic_config.write_queue_counts(topics), strict=True))
    for row, r in enumerate(records):
        if r.queue_id >= counts[r.topic]:  # (the vectorized path's words: columns.queue_id_column)
            raise QueueIdError(
                f"queue id {r.queue_id} is not below {r.topic!r}'s {counts[r.topic]} queues", row=row, field="queueId"
            )


def _write(parts: StoreParts, records: list[DirectRecord], state: AppendState) -> tuple[list[int], list[int], int]:
    """Place, complete and write ``records`` at the state's tail; advances the state (tail,
    store time, next queue offsets). The caller holds the append lock and publishes."""
    commitlog = parts.commitlog
    size = commitlog.segment_size
    queues = state.queues
    tail = state.tail
    _scrub(commitlog, tail)
    store_ts = max(parts.clock.wall_ms(), state.store_timestamp)
    pos = tail
    positions: list[int] = []
    queue_offsets: list[int] = []
    run_start, run = pos, bytearray()  # the bytes of the current segment's run, written at once
    for r in records:
        n = len(r.data)
        seg_end = (pos // size + 1) * size
        if pos + n + END_FILE_MIN_BLANK_LENGTH > seg_end:
            # the record starts the next segment; a blank fills the rest of this one (every
            # record leaves at least 8 bytes behind it, so there is room for the blank)
            run += _BLANK.pack(seg_end - pos, BLANK_MAGIC)
            _write_run(commitlog, run_start, run)
            pos = seg_end
            commitlog.scrub(pos)
            run_start, run = pos, bytearray()
        qoff = queues.get(r.queue_key, 0)
        queues[r.queue_key] = qoff + 1
        data = r.data
        _LONG.pack_into(data, QUEUE_OFFSET_AT, qoff)
        _LONG.pack_into(data, PHYSICAL_OFFSET_AT, pos)
        _LONG.pack_into(data, r.store_ts_at, store_ts)
        run += data
        positions.append(pos)
        queue_offsets.append(qoff)
        pos += n
    _write_run(commitlog, run_start, run)
    state.tail = pos
    state.store_timestamp = store_ts
    return positions, queue_offsets, store_ts


def _scrub(commitlog: CommitLog, tail: int) -> None:
    """:meth:`CommitLog.scrub`'s check (one 8-byte read at the tail: a killed writer's bytes
    past it?), through the segment's descriptor; the scrub itself only when there are some."""
    seg = commitlog.segments.for_offset(tail)
    if seg is None:
        return
    fd = seg.acquire_fd()
    try:
        left = any(os.pread(fd, 8, tail - seg.start))
    finally:
        seg.release_fd()
    if left:
        commitlog.scrub(tail)


def _write_run(commitlog: CommitLog, start: int, data: bytearray) -> None:
    if not data:
        return
    seg = commitlog.segments.for_offset(start, create=True)
    assert seg is not None
    seg.write(start - seg.start, data)


def put_direct(
    appender: Appender,
    messages: Sequence[WireMessage],
    *,
    cluster: str | None,
    system: bool,
    marker: tuple[str, str] | None,
    dispatch: bool,
    wait_flush: bool,
    not_allowed: frozenset[str],
    defer_dispatch: bool = False,
) -> PutRows | None:
    """A put of a few clean messages by the direct path (module docstring), ``None`` when the
    put is not one (the caller takes the vectorized path). After the publish: the group commit
    under SYNC_FLUSH (``wait_flush``), then the dispatch from the records' own fields when the
    dispatcher stands at the put; otherwise a full dispatch (``dispatch``) or the background
    dispatcher woken. ``defer_dispatch``: that dispatch is left to :func:`dispatch_put` (a
    broker answers first); the background dispatcher leaves the put to it for
    :data:`rmqlog.queue.dispatcher.DIRECT_GRACE_S` at most. ``not_allowed``: the topics no such put may name (the
    caller's rule)."""
    parts = appender.parts
    records = encode_direct(
        messages,
        cluster=cluster,
        system=system,
        store_host=appender.store_host,
        default_born_host=appender.born_host,
        uniq=appender.uniq,
        max_message_size=parts.config.max_message_size,
        max_record_size=parts.commitlog.segment_size - 8,
        not_allowed=not_allowed | WAITING_TOPICS,
        marker=marker,
    )
    if records is None:
        return None
    # the background dispatcher, woken by this put's publish, leaves its records to it (it
    # would read them back, and take the dispatch lock from under it)
    token = parts.dispatcher.expect_direct()
    try:
        rows = append_direct(appender, records, marker)
        if not rows.duplicate and appender.sync_flush and wait_flush:
            _after_publish(rows, "flush", lambda: parts.flush_service.flush_to(rows.end))
    except BaseException:
        parts.dispatcher.direct_done(token)
        appender.wake_dispatcher()
        raise
    if rows.duplicate:
        parts.dispatcher.direct_done(token)
        return rows
    pending = _PendingDispatch(appender, records, rows, parts.state_file.published_version, dispatch, token)
    if defer_dispatch:
        object.__setattr__(rows, "pending", pending)
    else:
        pending.run()
    return rows


def dispatch_put(rows: PutRows) -> bool:
    """The dispatch a put with ``defer_dispatch`` left (see :func:`put_direct`); returns whether
    its records are dispatched now (else the background dispatcher was woken for them). A
    second call, or one for a put that had none left, does nothing (True)."""
    pending = rows.pending
    if pending is None:
        return True
    object.__setattr__(rows, "pending", None)
    return pending.run()


class _PendingDispatch:
    """The dispatch of one direct put from its records' own fields (run once)."""

    def __init__(
        self, appender: Appender, records: list[DirectRecord], rows: PutRows, version: object, full: bool, token: object
    ) -> None:
        self.appender, self.records, self.rows, self.version, self.full, self.token = (
            appender,
            records,
            rows,
            version,
            full,
            token,
        )

    def run(self) -> bool:
        parts, rows, records = self.appender.parts, self.rows, self.records
        done = False
        try:
            units = [
                (r.topic, r.queue_id, q, p, len(r.data), r.tags_code)
                for r, q, p in zip(records, rows.queue_offsets, rows.commit_log_offsets, strict=True)
            ]

            def dispatch() -> None:
                nonlocal done
                done = dispatch_direct(
                    parts.dispatcher,
                    rows.start,
                    rows.end,
                    units,
                    rows.store_timestamp,
                    _index_call(parts, records, rows),
                    self.version,
                )
                if not done and self.full:
                    parts.dispatcher.dispatch()
                    done = True

            _after_publish(rows, "dispatch", dispatch)
        finally:
            parts.dispatcher.direct_done(self.token)
            if not done:  # (not dispatched, or failed part-way: the background dispatcher takes it)
                self.appender.wake_dispatcher()
        return done


def _after_publish(rows: PutRows, step: str, call: Callable[[], object]) -> None:
    """``call()``, a step after the publish: a full disk there is a :class:`DiskFullError`
    saying the batch was appended."""
    try:
        call()
    except OSError as exc:
        if exc.errno not in DISK_FULL_ERRNOS:
            raise
        raise DiskFullError(
            exc.errno,
            f"{exc.strerror}: the batch WAS appended (commitlog offsets {rows.start}..{rows.end}, "
            f"published), only its {step} failed",
            exc.filename,
            appended=True,
        ) from exc


def _index_call(parts: StoreParts, records: list[DirectRecord], rows: PutRows) -> Callable[[], object] | None:
    """The index entries of the records (UNIQ_KEY, then each KEYS token), as a call for the dispatch."""
    index = parts.index_service
    if index is None:
        return None

    def build() -> object:
        keys = direct_keys([(r.topic, r.uniq_key, r.keys) for r in records])
        offsets, stamp = rows.commit_log_offsets, rows.store_timestamp
        return index.add_direct([(h, ordinal, offsets[row], stamp) for row, ordinal, h in keys])

    return build
