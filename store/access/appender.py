"""The put path: validate and encode a batch (no lock), then append it under the append lock
and publish it, all or nothing.

Steps of one append (:meth:`Appender.append`):

1. **encode** (:func:`rmqlog.log.encode.prepare.prepare_batch`), outside any lock: typed
   errors name the row and field of the first bad row; nothing is written then;
2. **check** the queue ids against the topics (a topic resized meanwhile is re-checked) and
   the volume's fill level (:class:`rmqlog.log.disk_guard.DiskGuard`);
3. **append** under ``append.lock``: the idempotence check (``writer``/``sequence``: a batch
   whose sequence the store already recorded for its writer is a no-op), then the records go
   into the commitlog (:meth:`rmqlog.log.commitlog.CommitLog.append_all`) and the new
   :class:`~rmqlog.log.append_state.AppendState` is published in one atomic replace of
   ``append.state``. A failure before the publish clears what was written past the old tail;
4. **after the publish**: SYNC_FLUSH waits for the group commit covering the batch, and
   ``dispatch=True`` writes its consume-queue units from the batch's own fields (without it,
   the background dispatcher, when started, is woken to take the batch at once). A full disk
   here raises :class:`rmqlog.errors.DiskFullError` with ``appended=True``: the batch is in
   the log.

The segment preparer (:mod:`rmqlog.log.allocate`) is told of each encoded batch so it creates
and warms the segments the append will need while the rest of the batch is encoded.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import crash_points
from ..config import SYNC_FLUSH
from ..errors import DISK_FULL_ERRNOS, DiskFullError, InvalidMessageError, QueueIdError
from ..hosts import host_bytes
from ..log.allocate import SegmentPreparer
from ..log.disk_guard import DiskGuard
from ..log.encode.arrays import int64_array, int64_filled
from ..log.encode.batch import EncodedBatch
from ..log.encode.copies import prepare_copies
from ..log.encode.prepare import prepare_batch
from ..log.encode.wire_put import WireHeader
from ..log.msgid import UniqKeyGenerator, offset_msg_ids
from ..log.properties import SCHEDULE_TOPIC, WAITING_TOPICS
from ..results import PutMessageResult, PutMessageStatus
from ..schema import PUT_RESULT_SCHEMA, TS
from ..service import ServiceLoop
from .lmq import LmqRows, lmq_batch, lmq_rows, refuse_routed

if TYPE_CHECKING:
    from ..log.append_state import AppendState
    from ..log.commitlog import AppendResult
    from ..parts import StoreParts

log = logging.getLogger(__name__)

Marker = tuple[str, str] | None


class Appender:
    """Appends batches to the store of ``parts``; ``services`` runs its segment preparer."""

    def __init__(self, parts: StoreParts, services: ServiceLoop) -> None:
        self.parts = parts
        config = parts.config
        self.store_host = host_bytes(config.store_host)
        self.born_host = host_bytes(config.born_host or config.store_host)
        self.uniq = UniqKeyGenerator(
            self.store_host[:4] if len(self.store_host) == 8 else b"\x7f\x00\x00\x01", wall_ms=parts.clock.wall_ms
        )
        self.disk_guard = DiskGuard(parts.paths.root, config.disk_space_warning_level_ratio, parts.clock.monotonic)
        self.sync_flush = config.flush_disk_type == SYNC_FLUSH
        self._rr: dict[str, int] = {}
        self._rr_lock = threading.Lock()
        self._services = services
        #: creates and warms segments ahead of this process's writers (added at its first put)
        self.preparer = SegmentPreparer(
            parts.commitlog.segments,
            parts.published_tail,
            warm=config.warm_mapped_file_enable,
            step_pages=config.flush_least_pages_when_warm_mapped_file,
            wake=services.wake,
        )
        self.preparing = False
        #: moves delayed rows to the schedule topic before encoding (set by the store's parts:
        #: :func:`rmqlog.schedule.routing.route_delays`); returns the table and the store's own
        #: properties per row (``None``: none)
        self.router: Callable[[pa.Table], tuple[pa.Table, pa.Array | None]] | None = None
        #: light message queues on (:mod:`rmqlog.access.lmq`): a table's rows naming them are put there
        self.lmq = parts.lmq

    # ----------------------------------------------------------- entry points
    def put_table(
        self,
        table: pa.Table | pa.RecordBatch,
        marker: Marker = None,
        *,
        dispatch: bool = False,
        system: pa.Array | None = None,
        wire: WireHeader | None = None,
        wait_flush: bool = True,
    ) -> tuple[pa.Table, np.ndarray]:
        """Append one table; returns the result rows and the queue id of each row. ``system``:
        the store's own properties per row, ``wire``: a wire put's header fields (see :meth:`encode`)."""
        if self.lmq and system is None:
            rows = lmq_rows(table)
            if rows:
                return self._put_lmq(table, rows, marker, dispatch=dispatch, wire=wire, wait_flush=wait_flush)
        return self.put_encoded(
            self.encode(table, marker, system=system, wire=wire), marker, dispatch=dispatch, wait_flush=wait_flush
        )

    def put_row(self, row: pa.Table) -> PutMessageResult:
        """Append one message (:meth:`rmqlog.MessageStore.put`'s row); its result."""
        table, queue_ids = self.put_table(row)
        res = table.to_pylist()[0]
        return PutMessageResult(
            PutMessageStatus.PUT_OK,
            res["commitLogOffset"],
            res["queueOffset"],
            res["msgId"],
            res["storeTimestamp"],
            int(queue_ids[0]),
        )

    def _put_lmq(
        self,
        table: pa.Table | pa.RecordBatch,
        rows: LmqRows,
        marker: Marker,
        *,
        dispatch: bool,
        wire: WireHeader | None,
        wait_flush: bool,
    ) -> tuple[pa.Table, np.ndarray]:
        """:meth:`put_table` of a table whose ``rows`` name light message queues
        (:mod:`rmqlog.access.lmq`): encoded once for its checks, again under the lock with
        their offsets."""
        first = self.encode(table, marker, wire=wire)
        refuse_routed(first, rows)
        limit = self.parts.config.max_lmq_consume_queue_num

        def under_lock(state: AppendState) -> list[EncodedBatch]:
            return lmq_batch(
                state, rows, limit, first.n, lambda items: self.encode(table, marker, system=items, wire=wire)
            )

        with self.ahead() as announce:
            announce(first)
            return self.append([first], marker, dispatch=dispatch, wait_flush=wait_flush, under_lock=under_lock)

    def put_encoded(
        self,
        batch: EncodedBatch,
        marker: Marker = None,
        *,
        dispatch: bool = False,
        results: bool = True,
        wait_flush: bool = True,
    ) -> tuple[pa.Table, np.ndarray]:
        """Append one encoded batch (:meth:`encode`, or :meth:`encode_copies`); see :meth:`put_table`
        and :meth:`append` (``results``, ``wait_flush``)."""
        with self.ahead() as announce:
            announce(batch)
            return self.append([batch], marker, dispatch=dispatch, results=results, wait_flush=wait_flush)

    def encode_copies(
        self,
        topic: pa.Array,
        queue_id: np.ndarray,
        body: pa.BinaryArray,
        flag: np.ndarray,
        born: np.ndarray,
        properties: pa.Array,
        marker: Marker,
        born_hosts: np.ndarray | None = None,
        *,
        sys_flags: np.ndarray | None = None,
        reconsume_times: np.ndarray | None = None,
    ) -> EncodedBatch:
        """The scheduler's delivered copies of stored messages, encoded from their stored
        fields (:func:`rmqlog.log.encode.copies.prepare_copies`): this store's host, and the
        born hosts they were sent with (``born_hosts``, (n, 8) bytes; ``None``: this store's);
        the stored SYSFLAG's client bits and RECONSUMETIMES (``None``: 0)."""
        return prepare_copies(
            topic,
            queue_id,
            body,
            flag,
            born,
            properties,
            marker=marker,
            store_host=self.store_host,
            born_host=self.born_host if born_hosts is None else born_hosts,
            uniq_keys=self.uniq,
            max_record_size=self.parts.commitlog.segment_size - 8,
            sys_flags=sys_flags,
            reconsume_times=reconsume_times,
        )

    def encode_each(
        self,
        tables: Iterable[pa.Table | pa.RecordBatch],
        marker: Marker,
        announce: Callable[[EncodedBatch], None],
    ) -> Iterator[tuple[EncodedBatch, bool]]:
        """(encoded batch, whether it is the last) per non-empty table, each encoded as it
        arrives, one behind (so that the last one can carry the marker), announced to the
        segment preparer; rows are numbered across tables in errors."""
        rows = 0
        pending: pa.Table | pa.RecordBatch | None = None
        for table in itertools.chain(tables, [None]):  # (None: the end, where the last one is encoded)
            if table is not None:
                if not isinstance(table, pa.Table | pa.RecordBatch):
                    raise InvalidMessageError(
                        f"put_batches takes pyarrow Tables or RecordBatches, not {type(table).__name__}",
                        row=None,
                        field="*",
                    )
                if table.num_rows == 0:
                    continue
            if pending is not None:
                last = table is None
                batch = self.encode(
                    pending, marker if last else None, rows, plain=False
                )  # packed under the lock, chunk by chunk
                announce(batch)
                rows += batch.n
                yield batch, last
            pending = table

    def put_tables(
        self, tables: Iterable[pa.Table | pa.RecordBatch], marker: Marker, *, dispatch: bool = False
    ) -> pa.Table:
        """Append several tables as one all-or-nothing batch, encoding each as it arrives (one
        behind, so that the last one can carry the marker); rows are numbered across tables."""
        with self.ahead() as announce:  # the segment preparer warms pages while the rest arrives
            encoded = [batch for batch, _ in self.encode_each(tables, marker, announce)]
            return self.append(encoded, marker, dispatch=dispatch)[0]

    def wake_dispatcher(self) -> None:
        """Have the background dispatcher (when started) take what was published, now."""
        self._services.wake(self.parts.dispatcher)

    # ---------------------------------------------------------------- encode
    def round_robin(self, topic: str, queues: int, n: int) -> int:
        """The first queue of ``n`` rows spread over ``queues`` (this process's rotation)."""
        with self._rr_lock:
            first = self._rr.get(topic, 0)
            self._rr[topic] = (first + n) % queues
        return first % queues

    def encode(
        self,
        table: pa.Table | pa.RecordBatch,
        marker: Marker,
        row_base: int = 0,
        *,
        plain: bool = True,
        system: pa.Array | None = None,
        wire: WireHeader | None = None,
    ) -> EncodedBatch:
        """Validate and encode one table (no lock); errors name rows counted from ``row_base``.
        ``plain``: see :func:`rmqlog.log.encode.prepare.prepare_batch`. ``system``: the store's
        own properties per row (the scheduler's delivered copies); the router adds those of
        delayed rows. ``wire``: the header fields of a wire put (:mod:`rmqlog.log.encode.wire_put`)."""
        parts = self.parts
        try:
            if self.router is not None:
                if isinstance(table, pa.RecordBatch):
                    table = pa.Table.from_batches([table])
                if isinstance(table, pa.Table):  # (anything else: prepare_batch names it)
                    table, routed = self.router(table)
                    if routed is not None:  # (both: a put's LMQ offsets, rmqlog.access.lmq)
                        system = routed if system is None else pc.binary_join_element_wise(routed, system, b"")
            encoded = prepare_batch(
                table,
                queue_counts=lambda topics: parts.topic_config.planned_queue_counts(topics, unknown=-1),
                max_message_size=parts.config.max_message_size,
                max_record_size=parts.commitlog.segment_size - 8,
                store_host=self.store_host,
                born_host=self.born_host,
                uniq_keys=self.uniq,
                round_robin=self.round_robin,
                born_ms=parts.clock.wall_ms(),
                last_row_property=marker,
                plain=plain and wire is None,
                system_properties=system,
                wire=wire,
            )
            waiting = WAITING_TOPICS.intersection(encoded.topics) if system is None else ()
            for name in waiting:
                # only the delay and timer routing write there (their rows carry its items)
                row = int(np.flatnonzero(encoded.topic_index == encoded.topics.index(name))[0])
                what = (
                    "delayed messages: give a delayLevel"
                    if name == SCHEDULE_TOPIC
                    else "timed messages: give a deliverTime"
                )
                raise InvalidMessageError(f"{name} is the store's topic for {what} instead", row=row, field="topic")
            return encoded
        except InvalidMessageError as exc:
            if row_base and exc.row is not None:
                exc.row += row_base
                exc.args = (f"row {exc.row}, field {exc.field!r}: {exc.reason}",)
            raise

    @contextlib.contextmanager
    def ahead(self) -> Iterator[Callable[[EncodedBatch], None]]:
        """Announce encoded batches to the segment preparer until the append is over; the
        first one starts it in this process (a writer)."""
        total = 0

        def announce(batch: EncodedBatch) -> None:
            nonlocal total
            n = int(batch.lengths.sum())
            total += n
            if not self.preparing:
                self.preparing = True
                self._services.add(self.preparer)
            self.preparer.expect(n)

        try:
            yield announce
        finally:
            if total:
                self.preparer.settle(total)

    # ---------------------------------------------------------------- append
    def append(
        self,
        batches: list[EncodedBatch],
        marker: Marker,
        *,
        dispatch: bool = False,
        results: bool = True,
        wait_flush: bool = True,
        under_lock: Callable[[AppendState], list[EncodedBatch]] | None = None,
    ) -> tuple[pa.Table, np.ndarray]:
        """Append encoded batches, in order, under one lock hold; publish once (steps 2-4 of
        the module docstring). Returns the result rows (none when ``results`` is false: a
        caller that reads none, the scheduler) and each row's queue id. ``wait_flush=False``:
        no SYNC_FLUSH wait here (the caller waits for the group commit itself). ``under_lock``:
        the batches to write instead, made under the lock from the state read there (a put
        naming light message queues: :mod:`rmqlog.access.lmq`)."""
        batches = [b for b in batches if b.n]
        if not batches:
            return PUT_RESULT_SCHEMA.empty_table(), np.zeros(0, np.int32)
        self.check_queue_ids(batches)
        self.disk_guard.check()
        if (
            under_lock is None
            and len(batches) == 1
            and batches[0].packable
            and batches[0].chunks == 1
            and batches[0].packed is None
        ):
            # a put of one chunk: nothing to overlap its write with, so it is packed whole
            # before the lock and only patched under it (every writer process waits for that
            # lock: ~40% less hold time for a 100-message put)
            batches[0].prepack()
        appended = self._append_locked(batches, marker, results, under_lock)
        if appended is None:
            return PUT_RESULT_SCHEMA.empty_table(), np.zeros(0, np.int32)  # a replay
        if not dispatch:
            # the background dispatcher (if started) takes the batch now, not at its next
            # interval: a held pull waiting for it is answered at once
            self._services.wake(self.parts.dispatcher)
        self._after_publish(batches, appended, dispatch, wait_flush)
        queue_ids = batches[0].queue_id if len(batches) == 1 else np.concatenate([b.queue_id for b in batches])
        if not results:
            return PUT_RESULT_SCHEMA.empty_table(), queue_ids
        tables = [
            r.overlapped
            if r.overlapped is not None
            else self.result_table(r.physical_offsets, r.queue_offsets, r.store_timestamp)
            for r in appended
        ]
        # one chunk per table: a sink task appends ~100 tables and reads only num_rows; a
        # combine would copy ~56 bytes per row (~50 ms per million rows)
        return (tables[0] if len(tables) == 1 else pa.concat_tables(tables)), queue_ids

    def check_queue_ids(self, batches: list[EncodedBatch]) -> None:
        """Only a fully valid batch creates its topics; a topic resized meanwhile is re-checked."""
        base = 0
        for batch in batches:
            counts = self.parts.topic_config.write_queue_counts(batch.topics)
            if len(counts) == 1:  # one topic (the usual case): its largest queue id suffices
                over = batch.queue_id >= counts[0] if int(batch.queue_id.max()) >= counts[0] else None
            else:
                over = batch.queue_id >= np.asarray(counts)[batch.topic_index]
            if over is not None and over.any():
                raise QueueIdError(
                    "queue id is not below the topic's queue count",
                    row=base + int(np.flatnonzero(over)[0]),
                    field="queueId",
                )
            base += batch.n

    def _append_locked(
        self,
        batches: list[EncodedBatch],
        marker: Marker,
        results: bool = True,
        under_lock: Callable[[AppendState], list[EncodedBatch]] | None = None,
    ) -> list[AppendResult] | None:
        """Step 3: under the append lock; ``None`` for a replay of an idempotent batch.
        ``under_lock``: replaces ``batches`` (in place) once the state is read."""
        parts = self.parts
        with parts.append_lock.held():
            state = parts.state_file.load() or parts.rebuild_state()
            if marker is not None:
                seq_s, name = marker[1].split(" ", 1)
                if int(state.writers.get(name, -1)) >= int(seq_s):
                    return None
                state.writers[name] = int(seq_s)
            if under_lock is not None:
                batches[:] = under_lock(state)
            tail = state.tail
            try:
                # the per-row results (msgIds...) are made while the last chunks are written
                appended = parts.commitlog.append_all(batches, state, self.result_table if results else None)
                if crash_points.reached is not None:
                    crash_points.reached("append.written")
                parts.state_file.publish(state)
                if crash_points.reached is not None:
                    crash_points.reached("append.published")
            except BaseException as exc:
                self.drop_unpublished(tail)
                if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
                    raise DiskFullError(
                        exc.errno,
                        f"disk full while appending at commitlog offset {tail}: nothing was published",
                        exc.filename or str(parts.paths.commitlog_dir),
                    ) from exc
                raise
        return appended

    def _after_publish(
        self, batches: list[EncodedBatch], results: list[AppendResult], dispatch: bool, wait_flush: bool = True
    ) -> None:
        """Step 4: the flush (SYNC_FLUSH) and the dispatch (``dispatch=True``) of a published batch."""
        step = "flush"
        try:
            if self.sync_flush and wait_flush:
                self.parts.flush_service.flush_to(results[-1].end)  # group commit: may be covered by another's sync
            step = "dispatch"
            if dispatch:
                self._dispatch(batches, results)
        except OSError as exc:
            if exc.errno not in DISK_FULL_ERRNOS:
                raise
            # the batch is in the log (published) and readable by offset: a retry would append
            # it again, so the error says so (``appended``)
            raise DiskFullError(
                exc.errno,
                f"{exc.strerror}: the batch WAS appended (commitlog offsets {results[0].start}..{results[-1].end}, "
                f"published), only its {step} failed",
                exc.filename,
                appended=True,
            ) from exc

    def _dispatch(self, batches: list[EncodedBatch], results: list[AppendResult]) -> None:
        dispatcher = self.parts.dispatcher
        # TAGS given as a user property, or delayed or timed messages (their units' tagsCode
        # is the delivery time, made from the record): let the dispatcher read them
        # (light message queues: their units come from the records' properties too)
        if any(b.tags_codes is None or b.lmq or not WAITING_TOPICS.isdisjoint(b.topics) for b in batches):
            dispatcher.dispatch()
            return
        names: dict[str, int] = {}  # one dispatch for all the tables: one position update
        for b in batches:
            for t in b.topics:
                names.setdefault(t, len(names))
        tidx = np.concatenate([np.array([names[t] for t in b.topics], np.int64)[b.topic_index] for b in batches])
        physical = np.concatenate([r.physical_offsets for r in results])
        dispatcher.dispatch_appended(
            results[0].start,
            results[-1].end,
            list(names),
            tidx,
            np.concatenate([b.queue_id for b in batches]),
            np.concatenate([r.queue_offsets for r in results]),
            physical,
            np.concatenate([b.lengths for b in batches]),
            np.concatenate([b.tags_codes for b in batches]),
            results[-1].store_timestamp,
            index=self._index_from(batches, results, list(names), tidx, physical),
        )

    def _index_from(
        self,
        batches: list[EncodedBatch],
        results: list[AppendResult],
        names: list[str],
        tidx: np.ndarray,
        physical: np.ndarray,
    ) -> Callable[[], object] | None:
        """The index entries of an appended batch made from its own fields (topics, the ids its
        encoding made, its KEYS column, offsets and store times), as a call for the dispatch;
        ``None`` without an index, or when a batch cannot say (the dispatch then reads the
        records back, as :mod:`rmqlog.index.feed` does)."""
        index = self.parts.index_service
        if index is None:
            return None
        ids = [b.index_ids() for b in batches]
        if any(i is None for i in ids) or any(not isinstance(b.header.sys_flag, int) for b in batches):
            return None
        keys = [b.keys if b.keys is not None else pa.nulls(b.n, pa.string()) for b in batches]
        topics = pa.DictionaryArray.from_arrays(pa.array(tidx.astype(np.int32)), pa.array(names, pa.string()))
        stamps = np.concatenate([int64_filled(b.n, r.store_timestamp) for b, r in zip(batches, results, strict=True)])

        def build() -> object:
            return index.build(topics, physical, stamps, pa.chunked_array(ids), pa.chunked_array(keys))

        return build

    def result_table(self, physical_offsets: np.ndarray, queue_offsets: np.ndarray, store_ts: int) -> pa.Table:
        """``put_batch``'s result rows: commitLogOffset, queueOffset, msgId, storeTimestamp."""
        n = len(physical_offsets)
        ts = pa.Array.from_buffers(TS, n, [None, pa.py_buffer(int64_filled(n, store_ts * 1000))])
        return pa.Table.from_arrays(
            # (wrapped, not copied: the append's offsets are not changed after it)
            [
                int64_array(physical_offsets),
                int64_array(queue_offsets),
                offset_msg_ids(self.store_host, physical_offsets),
                ts,
            ],
            schema=PUT_RESULT_SCHEMA,
        )

    def drop_unpublished(self, tail: int) -> None:
        """After a failed append (caller holds the append lock): clear what it wrote past the
        published ``tail`` (punching holes needs no space on a full disk). Best effort: if
        this fails too, the next append's scrub does it. Nothing is cleared if the state was
        published after all (a failure after the publish itself)."""
        try:
            current = self.parts.state_file.load()
            if current is None or current.tail == tail:
                self.parts.commitlog.scrub(tail, force=True)
        except Exception:  # noqa: BLE001 - the append's own error is the one to raise
            log.warning(
                "could not clear an unpublished append past commitlog offset %d; the next append will",
                tail,
                exc_info=True,
            )
