"""A put written as its tables arrive (:func:`put_stream`, :meth:`rmqlog.MessageStore.put_stream`):
the tables are encoded one behind the other as :meth:`rmqlog.access.appender.Appender.put_tables`
does; past ``buffer_bytes`` of encoded records the append lock is taken and every further table
is written past the published tail, unseen, until the last one is published with the rest.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from .. import crash_points
from ..errors import DISK_FULL_ERRNOS, DiskFullError
from ..log.encode.batch import EncodedBatch
from .appender import Appender, Marker


def put_stream(
    appender: Appender,
    tables: Iterable[pa.Table | pa.RecordBatch],
    marker: Marker,
    *,
    dispatch: bool,
    buffer_bytes: int,
) -> int:
    """:meth:`rmqlog.access.appender.Appender.put_tables` holding at most ``buffer_bytes`` of
    encoded records (and the one table being encoded): past that, the append lock is taken and every further table is
    written as it arrives, past the published tail, unseen, until the last one is published
    with the rest (all or nothing still: a failure clears what was written, a killed
    process leaves it to recovery, which cuts what was never published). Other writers of
    the store wait for the lock meanwhile. No per-row results are kept: returns how many
    rows were appended (0: a replay of the writer's sequence)."""
    encoded: list[EncodedBatch] = []
    held = rows = 0
    streaming: _Streaming | None = None
    with appender.ahead() as announce:
        try:
            for batch, last in appender.encode_each(tables, marker, announce):
                rows += batch.n
                if streaming is not None:
                    streaming.write(batch)
                    continue
                encoded.append(batch)
                held += int(batch.lengths.sum())
                if held > buffer_bytes and not last:
                    streaming = _Streaming(appender, marker)
                    if streaming.replay:
                        streaming.end(publish=False)
                        return 0
                    for b in encoded:
                        streaming.write(b)
                    encoded = []
            if streaming is None:  # within the buffer: the usual append
                if not any(b.n for b in encoded):
                    return 0
                _, queue_ids = appender.append(encoded, marker, dispatch=dispatch, results=False)
                return rows if len(queue_ids) else 0  # (none: a replay)
            end = streaming.end(publish=True)
        except BaseException:
            if streaming is not None:
                streaming.end(publish=False)
            raise
    _after_streamed(appender, end, dispatch)
    return rows


def _after_streamed(appender: Appender, end: int, dispatch: bool) -> None:
    """Step 4 for a streamed append: the flush (SYNC_FLUSH), then a dispatch that reads the
    records back in bounded chunks (``dispatch``) or the background dispatcher woken."""
    try:
        if appender.sync_flush:
            appender.parts.flush_service.flush_to(end)
        if dispatch:
            appender.parts.dispatcher.dispatch()
        else:
            appender.wake_dispatcher()
    except OSError as exc:
        if exc.errno not in DISK_FULL_ERRNOS:
            raise
        raise DiskFullError(
            exc.errno,
            f"{exc.strerror}: the batch WAS appended (up to commitlog offset {end}, "
            "published), only its flush or dispatch failed",
            exc.filename,
            appended=True,
        ) from exc


class _Streaming:
    """An append written as its tables arrive (:func:`put_stream`): the append lock
    held from the first write to the publish (or the clearing of what was written)."""

    def __init__(self, appender: Appender, marker: Marker) -> None:
        self.appender = appender
        self.parts = parts = appender.parts
        self.lock = parts.append_lock
        self.lock.acquire()
        try:
            self.state = parts.state_file.load() or parts.rebuild_state()
            self.tail = self.state.tail
            self.replay = False
            if marker is not None:
                seq_s, name = marker[1].split(" ", 1)
                if int(self.state.writers.get(name, -1)) >= int(seq_s):
                    self.replay = True
                else:
                    self.state.writers[name] = int(seq_s)
        except BaseException:
            self.lock.release()
            raise
        self.open = True

    def write(self, batch: EncodedBatch) -> None:
        """Write one encoded table past the tail (nothing is published)."""
        if not batch.n:
            return
        self.appender.check_queue_ids([batch])
        self.appender.disk_guard.check()
        try:
            self.parts.commitlog.append_all([batch], self.state, None)
        except OSError as exc:
            if exc.errno in DISK_FULL_ERRNOS:
                raise DiskFullError(
                    exc.errno,
                    f"disk full while appending at commitlog offset {self.state.tail}: nothing was published",
                    exc.filename or str(self.parts.paths.commitlog_dir),
                ) from exc
            raise

    def end(self, *, publish: bool) -> int:
        """Publish what was written (``publish``), or clear it; release the lock. Returns the tail."""
        if not self.open:
            return self.state.tail
        self.open = False
        try:
            if publish:
                if crash_points.reached is not None:
                    crash_points.reached("append.written")
                self.parts.state_file.publish(self.state)
            elif self.state.tail != self.tail:
                self.appender.drop_unpublished(self.tail)
        except BaseException:
            self.appender.drop_unpublished(self.tail)
            raise
        finally:
            self.lock.release()
        return self.state.tail
