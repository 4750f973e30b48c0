"""The facade: :class:`MessageStore` ties the commitlog, consume queues, dispatcher and config
files of one store root together, and is what other code (the Spark source/sink, jobs, the
CLI, notebooks) uses.

Concurrency: any number of processes may open the same root and call any method. Appends
are serialized by ``append.lock`` and published atomically (``append.state``), dispatching
by ``dispatch.lock``, config changes by ``config.lock``. Readers never read past what was
published.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .admin.verify import VerifyReport, verify
from .arguments import int_arg, offset_arg, queue_id_arg
from .config import SYNC_FLUSH, StoreConfig
from .config_files import (
    ConsumerOffsetManager,
    TopicConfig,
    TopicConfigManager,
    set_aside_if_unreadable,
)
from .durability.checkpoint import CheckpointFile
from .durability.flush import AsyncFlusher, FlushService, FlushStateFile
from .durability.lock_file import StoreLockFile
from .durability.recovery import RecoveryReport, recover
from .errors import (
    DISK_FULL_ERRNOS,
    CorruptRecordError,
    CorruptStoreError,
    DiskFullError,
    InvalidArgumentError,
    InvalidMessageError,
    MessagesDeletedError,
    StoreClosedError,
)
from .hashing import java_string_hash
from .hosts import host_bytes
from .log.allocate import SegmentPreparer
from .log.append_state import AppendState, AppendStateFile
from .log.commitlog import CommitLog
from .log.decode import BadRecordError, RecordCheck, empty_message_table
from .log.encode.arrays import int64_filled
from .log.encode.batch import EncodedBatch
from .log.encode.prepare import prepare_batch
from .log.msgid import UniqKeyGenerator, offset_msg_ids, parse_offset_msg_id
from .log.properties import PROPERTY_WRITER, ParsedProperties
from .log.record import ScanKind, is_consumable
from .log.scan import QueueDensity, SegmentScan, StopReason
from .paths import (
    StorePaths,
    parse_queue_dir_name,
    parse_segment_name,
    topic_problem,
    validate_topic,
)
from .queue.checked_read import read_units, unit_store_timestamp
from .queue.consume_queue import CQ_UNIT_SIZE, FILLER_SIZE, ConsumeQueue
from .queue.dispatcher import Dispatcher
from .results import GetMessageResult, GetMessageStatus, PutMessageResult, PutMessageStatus
from .retention import CleanReport, Retention
from .schema import PUT_RESULT_SCHEMA, TS
from .service import ServiceLoop

log = logging.getLogger(__name__)

#: Bytes of commitlog walked per step when rebuilding the append state (bounds memory).
REBUILD_CHUNK = 64 << 20


def validate_writer(writer: object, sequence: object) -> None:
    """Check an idempotence (writer, sequence) pair; raises :class:`InvalidMessageError`."""
    if not isinstance(writer, str) or not writer or len(writer.encode()) > 1024 or any(c in writer for c in "\x00\x01\x02"):
        raise InvalidMessageError("writer must be a non-empty string of at most 1024 bytes without \\x00-\\x02", row=None, field="writer")
    if not isinstance(sequence, int) or isinstance(sequence, bool) or not 0 <= sequence < 1 << 63:
        raise InvalidMessageError("sequence must be an int in [0, 2**63)", row=None, field="sequence")


def writer_marker(writer: object, sequence: object) -> tuple[str, str] | None:
    """The ``RMQLOG_WRITER`` property of an idempotent batch, ``None`` for a plain one."""
    if writer is None and sequence is None:
        return None
    validate_writer(writer, sequence)
    return (PROPERTY_WRITER, f"{sequence} {writer}")


def writer_markers(properties: pa.Array) -> list[tuple[str, int]]:
    """The ``RMQLOG_WRITER`` markers in a run of properties strings, in order (few rows carry one).

    Only a property *named* ``RMQLOG_WRITER`` counts (the properties are parsed with Java's
    rules: a value, a key or tags holding that text is not one; the store refuses user
    properties of that name, and values cannot hold the separators), and only a value of the
    form the store writes: ``"<sequence> <writer>"``, the sequence ASCII digits below 2**63,
    the writer as :func:`validate_writer` accepts it. Anything else (a foreign record) is ignored.
    """
    hits = pc.match_substring(properties, PROPERTY_WRITER + "\x01")
    rows = properties.filter(hits)
    if not len(rows):
        return []
    out = []
    for value in ParsedProperties(rows).column(PROPERTY_WRITER).to_pylist():  # one per batch, not per message
        if value:
            seq, _, name = value.partition(" ")
            if seq.isascii() and seq.isdigit() and len(seq) <= 19 and int(seq) < 1 << 63 and _valid_writer(name):
                out.append((name, int(seq)))
    return out


def _valid_writer(name: str) -> bool:
    try:
        validate_writer(name, 0)
    except InvalidMessageError:
        return False
    return True


def parse_tag_filter(tags: str | None) -> set[str] | None:
    """``"A || B"`` -> {"A", "B"}; ``"*"``, ``""`` or ``None`` -> None (everything)."""
    if tags is None:
        return None
    parts = {t.strip() for t in tags.split("||")}
    parts.discard("")
    if not parts or "*" in parts:
        return None
    return parts


class MessageStore:
    """A RocketMQ-compatible message store rooted at a directory.

    Open with :meth:`open`; use as a context manager or call :meth:`close`.
    """

    def __init__(
        self, root: str | os.PathLike[str], config: StoreConfig | None = None, *, repair: bool = False,
        create: bool = True,
    ) -> None:
        self.config = config or StoreConfig()
        self.paths = StorePaths(Path(root))
        if not create and not self.paths.holds_store():
            from .errors import StoreNotFoundError

            raise StoreNotFoundError("no store here (no commitlog/, consumequeue/ or config/ folder)", path=str(root))
        self.paths.root.mkdir(parents=True, exist_ok=True)
        self.paths.config_dir.mkdir(exist_ok=True)
        self._closed = False
        self._lock_paths = (self.paths.append_lock, self.paths.dispatch_lock, self.paths.root / "config.lock",
                            self.paths.flush_lock)
        self._append_lock, self._dispatch_lock, self._config_lock, flush_lock = map(
            InterProcessLockFactory.get, self._lock_paths)
        try:
            self._setup(repair, flush_lock)
        except BaseException:
            self._release_locks()
            raise

    def _release_locks(self) -> None:
        for path in self._lock_paths:
            InterProcessLockFactory.release(path)

    def _setup(self, repair: bool, flush_lock: Any) -> None:
        """The rest of opening (see :meth:`open`), once the store's locks are held."""
        set_aside: list[Path] = []
        if repair:  # config files nothing can read: set aside, rebuilt from the log below
            with self._config_lock.held():
                set_aside = [p for p in map(set_aside_if_unreadable, (self.paths.topics_json, self.paths.consumer_offset_json)) if p]
        self.topic_config = TopicConfigManager(
            self.paths.topics_json, self._config_lock,
            default_queues=self.config.default_topic_queue_nums,
            auto_create=self.config.auto_create_topic_enable,
        )
        self.topic_config.queues_on_disk = self._queues_on_disk
        self.consumer_offsets = ConsumerOffsetManager(self.paths.consumer_offset_json, self._config_lock)
        self.commitlog = CommitLog(self.paths.commitlog_dir, self.config.mapped_file_size_commit_log)
        self._cq_size = self._consume_queue_segment_size()
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._queues_lock = threading.Lock()
        self._state_file = AppendStateFile(self.paths.append_state)
        self._store_host = host_bytes(self.config.store_host)
        self._born_host = host_bytes(self.config.born_host or self.config.store_host)
        self._uniq = UniqKeyGenerator(self._store_host[:4] if len(self._store_host) == 8 else b"\x7f\x00\x00\x01")
        self._rr: dict[str, int] = {}
        self._rr_lock = threading.Lock()
        self._disk_ok_until = 0.0  # monotonic time until which the last disk check holds
        #: the store's one background thread: the flusher (ASYNC_FLUSH), the dispatcher once started
        self.services = ServiceLoop()
        self.dispatcher = Dispatcher(
            self.commitlog, self.consume_queue, self._all_queues, self.published_tail,
            self.paths.dispatch_state, self._dispatch_lock, self.config.reput_interval_ms,
        )
        self.checkpoint_file = CheckpointFile(self.paths.checkpoint)
        self.retention = Retention(self)
        #: creates and warms segments ahead of this process's writers (added at its first put)
        self.preparer = SegmentPreparer(
            self.commitlog.segments, self.published_tail, warm=self.config.warm_mapped_file_enable,
            step_pages=self.config.flush_least_pages_when_warm_mapped_file, wake=self.services.wake,
        )
        self._preparing = False
        self.flush_service = FlushService(
            self.commitlog, self.append_state, flush_lock,
            FlushStateFile(self.paths.flush_state), self.checkpoint_file, self.paths.consumequeue_dir,
            self.dispatcher.dispatched, self._dispatch_lock,
        )
        self._sync_flush = self.config.flush_disk_type == SYNC_FLUSH
        self.recovery: RecoveryReport | None = None
        self._owner = StoreLockFile.for_root(self.paths.lock, self.paths.abort)
        first = self._owner.open()
        try:
            with self._append_lock.held():
                if first:
                    self.recovery = recover(self, abnormal=self._owner.abort_exists(), repair=repair)
                    for path in set_aside:
                        self.recovery.problems.append(f"unreadable {path.name.split('.damaged')[0]} set aside as {path.name}")
                    if any(p.name.startswith("topics.json") for p in set_aside):
                        for tc in self.topics().values():  # as many queues as the log has
                            self.topic_config.put(tc)
                else:
                    self.commitlog.segments.check_sizes()  # only a first opener may repair
                if not first and self._state_file.load() is None:
                    self._state_file.publish(self._rebuild_state())
        except BaseException:
            self._owner.abandon()
            self._close_files()
            raise
        self._owner.opened()
        self.flusher: AsyncFlusher | None = None
        if not self._sync_flush:
            self.flusher = AsyncFlusher(
                self.flush_service,
                interval_ms=self.config.flush_interval_commit_log,
                least_pages=self.config.flush_commit_log_least_pages,
                thorough_interval_ms=self.config.flush_commit_log_thorough_interval,
            )
            self.services.add(self.flusher)

    @classmethod
    def open(
        cls, root: str | os.PathLike[str], config: StoreConfig | None = None, *, repair: bool = False,
        create: bool = True,
    ) -> MessageStore:
        """Open (creating if needed) the store at ``root``.

        The first process to open a store recovers it (see :mod:`store.durability.recovery`): after a
        clean close it checks the last segments, after an abnormal exit it walks from the
        checkpoint, re-dispatches and cuts what is torn. ``MessageStore.recovery`` says what
        it did. Segment sizes of an existing store are taken from its files.

        Raises :class:`store.errors.DataLossError` when flushed (acknowledged) data is damaged,
        unless ``repair`` is true (then the log is cut at the damage), and
        :class:`store.errors.CorruptStoreError` if the files are not a valid store. With
        ``create=False`` (readers, the CLI) a root that holds no store raises
        :class:`store.errors.StoreNotFoundError` and nothing is created.
        """
        return cls(root, config, repair=repair, create=create)

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------- internals
    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed")

    def _consume_queue_segment_size(self) -> int:
        """The consume-queue segment size of this store's files, else the configured one.

        The configured size if the first segments of up to 16 queues (folders that are not
        queues ignored) include it, else the most common of their sizes (multiples of a unit):
        one file truncated by a crash does not decide it. A queue's
        segments of another size are then dropped and rebuilt at open (see store.durability.recovery).
        """
        sizes: dict[int, int] = {}
        seen = 0
        for _, _, cq in self._queue_dirs():
            first = min((f for f in cq.iterdir() if parse_segment_name(f.name) is not None), default=None)
            if first is not None and (n := first.stat().st_size) > 0 and n % CQ_UNIT_SIZE == 0:
                sizes[n] = sizes.get(n, 0) + 1
                seen += 1
                if seen >= 16:
                    break
        if not sizes or self.config.mapped_file_size_consume_queue in sizes:
            return self.config.mapped_file_size_consume_queue
        return max(sizes, key=lambda n: (sizes[n], n))

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The consume queue of (topic, queue id) (no file is created until a unit is written)."""
        key = (topic, int(queue_id))
        cq = self._queues.get(key)
        if cq is None:
            with self._queues_lock:
                cq = self._queues.get(key)
                if cq is None:
                    cq = ConsumeQueue(self.paths.queue_dir(topic, queue_id), self._cq_size)
                    self._queues[key] = cq
        return cq

    def _queue_dirs(self) -> Iterator[tuple[str, int, Path]]:
        """(topic, queue id, folder) of every consume queue on disk; folders not named as the
        store names them (a topic name that is not valid, a queue id not in canonical decimal)
        are not queues, and their names are never used."""

        root = self.paths.consumequeue_dir
        if not root.is_dir():
            return
        for topic_dir in sorted(root.iterdir()):
            if not topic_dir.is_dir():
                continue
            if topic_problem(topic_dir.name) is not None:
                log.warning("ignoring %s: not a valid topic name", topic_dir)
                continue
            for qdir in sorted(topic_dir.iterdir()):
                qid = parse_queue_dir_name(qdir.name)
                if qid is not None and qdir.is_dir():
                    yield topic_dir.name, qid, qdir

    def _queues_on_disk(self, topic: str) -> int:
        """The highest queue folder of ``topic`` plus one (0 if none, or not a valid name)."""
        if topic_problem(topic) is not None:
            return 0
        tdir = self.paths.consumequeue_dir / topic
        if not tdir.is_dir():
            return 0
        ids = [parse_queue_dir_name(q.name) for q in tdir.iterdir()]
        return max((q + 1 for q in ids if q is not None), default=0)

    def _all_queues(self) -> list[ConsumeQueue]:
        """Every consume queue on disk (see :meth:`_queue_dirs`)."""
        return [self.consume_queue(topic, qid) for topic, qid, _ in self._queue_dirs()]

    def _rebuild_state(self, end: int | None = None, *, check_crc: bool | None = None) -> AppendState:
        """The append state recovered from the commitlog itself, up to ``end`` (default: its end).

        ``check_crc`` defaults to ``check_crc_on_recover``; recovery turns it off when its own
        walk already checked every record below ``end``.
        """
        state = AppendState()
        start = self.commitlog.min_offset()
        state.tail = start
        starts = self.commitlog.segments.segment_starts()
        if not starts:
            return state
        limit = starts[-1] + self.commitlog.segment_size if end is None else end
        crc = self.config.check_crc_on_recover if check_crc is None else check_crc
        density = QueueDensity(from_log_start=start == 0)
        for seg, scan in self._rebuild_walk(start, limit, crc):
            if len(scan.positions):
                from .log.decode import read_columns

                cols = read_columns(seg.buffer(), seg.start, scan.positions, with_body=False)
                h = cols.header
                keep = np.asarray(is_consumable(h["sysFlag"]), bool)
                enc = cols.topic.dictionary_encode()
                names = enc.dictionary.to_pylist()
                tidx = np.asarray(enc.indices, np.int64)
                cut, why = density.first_break(names, tidx, h["queueId"], h["queueOffset"], keep)
                if cut < len(scan.positions):  # damage: the log ends at that record
                    scan = SegmentScan(scan.positions[:cut], scan.sizes[:cut], int(scan.positions[cut]), StopReason.CORRUPT, why)
                    h = {k: v[:cut] for k, v in h.items()}
                    keep, tidx = keep[:cut], tidx[:cut]
                    cols.properties = cols.properties.slice(0, cut)
                key = (tidx[keep] << 32) | h["queueId"][keep].astype(np.int64)
                qoff = h["queueOffset"][keep].astype(np.int64)
                uniq, inverse = np.unique(key, return_inverse=True)
                best = np.full(len(uniq), -1, np.int64)
                np.maximum.at(best, inverse, qoff)  # per queue: the largest offset seen
                for k, o in zip(uniq.tolist(), best.tolist(), strict=True):  # one step per queue
                    name = f"{names[k >> 32]}/{k & 0xFFFFFFFF}"
                    state.queues[name] = max(state.queues.get(name, 0), o + 1)
                if len(h["storeTimestamp"]):
                    state.store_timestamp = max(state.store_timestamp, int(h["storeTimestamp"].max()))
                for name, seq in writer_markers(cols.properties):  # in log order: the last wins
                    state.writers[name] = seq
            state.tail = seg.start + scan.end
            if scan.reason is StopReason.BLANK:
                state.tail = seg.end
            elif scan.reason is StopReason.CORRUPT:
                log.warning("commitlog: %s at offset %d of %s; the log ends there", scan.detail, state.tail, seg.path)
                break
        return state

    def _rebuild_walk(self, start: int, limit: int, check_crc: bool) -> Iterator[tuple[Any, Any]]:
        """``commitlog.scan`` in windows of ``REBUILD_CHUNK`` bytes, so memory stays bounded."""
        pos = start
        while pos < limit:
            stop = min(limit, pos + REBUILD_CHUNK)
            last = None
            for seg, scan in self.commitlog.scan(pos, stop, check_crc=check_crc):
                yield seg, scan
                last = (seg, scan)
            if last is None:
                return
            seg, scan = last
            new = seg.end if scan.reason is StopReason.BLANK else seg.start + scan.end
            if scan.reason not in (StopReason.LIMIT, StopReason.BLANK) or new <= pos or stop >= limit:
                return  # end of data, a bad record, or the caller's limit
            pos = new

    def _check_disk_space(self) -> None:
        """Refuse appends while the commitlog's volume is fuller than the warning level (RocketMQ: 90%).

        A volume found below the level is not checked again for :data:`DISK_CHECK_INTERVAL_S`
        (a ``statvfs`` per put was ~5% of a small put's CPU; RocketMQ's clean-up service checks
        it every ``cleanResourceInterval``, 10 s); one above it is checked on every put, so
        appends resume as soon as space is freed. A disk that fills up in between still fails
        safely: the write gets ``ENOSPC``, which raises :class:`DiskFullError` with nothing
        published.
        """
        now = time.monotonic()
        if now < self._disk_ok_until:
            return
        used = disk_used_percent(self.paths.root)
        if used <= self.config.disk_space_warning_level_ratio:
            self._disk_ok_until = now + DISK_CHECK_INTERVAL_S
        else:
            raise DiskFullError(
                errno.ENOSPC,
                f"disk {used:.1f}% full, above disk_space_warning_level_ratio "
                f"{self.config.disk_space_warning_level_ratio}%: appends refused until space is freed",
            )

    def verify(self) -> VerifyReport:
        """Walk every record (CRCs included) and consume-queue unit; see :mod:`store.admin.verify`."""
        self._check_open()
        return verify(self)

    def flushed_offset(self) -> int:
        """The commitlog offset below which everything is on disk (survives a power loss).

        Always a published tail, so a batch is either wholly below it or wholly above.
        """
        return self.flush_service.flushed().offset

    def published_tail(self) -> int:
        """The commitlog offset below which every record is whole and readable."""
        state = self._state_file.load()
        return state.tail if state is not None else 0

    def append_state(self) -> AppendState:
        state = self._state_file.load()
        return state if state is not None else AppendState()

    def _round_robin(self, topic: str, queues: int, n: int) -> int:
        with self._rr_lock:
            first = self._rr.get(topic, 0)
            self._rr[topic] = (first + n) % queues
        return first % queues

    # ------------------------------------------------------------------- put
    def put_batch(
        self, table: pa.Table | pa.RecordBatch, *, writer: str | None = None, sequence: int | None = None,
        dispatch: bool = False,
    ) -> pa.Table:
        """Append every row of ``table`` as one message; all or nothing.

        Idempotent appends: with ``writer`` (a name, e.g. ``"<query id>/<partition>"``) and
        ``sequence`` (an int >= 0, increasing per writer), the batch is appended only if the
        store has not yet recorded ``sequence`` (or a later one) for ``writer``; otherwise
        nothing is written and an empty result is returned. The writer's new sequence is
        published atomically with the batch (same ``append.state`` replace) and also stored
        in the commitlog, as property ``RMQLOG_WRITER`` = ``"<sequence> <writer>"`` on the
        batch's last record, so a rebuild of the state after a crash recovers it. A retried
        or replayed batch with the same (writer, sequence) is therefore a no-op.

        Columns: ``topic`` (string) and ``body`` (binary or string) required; optional
        ``queueId`` (int; null or absent = round robin), ``tags`` (string), ``keys``
        (list<string>), ``properties`` (map<string,string>; not RocketMQ's system names nor
        ``RMQLOG_*``, see :func:`store.log.properties.reserved_name_problem`), ``flag`` (int32),
        ``bornTimestamp`` (timestamp, truncated to ms, or int64 ms; 1970-01-01 to 9999-12-31).
        Each column at most once. Returns, per input row and in input order,
        ``commitLogOffset``, ``queueOffset``, ``msgId``, ``storeTimestamp``.

        With ``dispatch=True`` the batch is also readable through the consume queues when
        the call returns: if the dispatcher has reached the batch's start, its units are
        written from the batch's own fields (no re-read of the commitlog); otherwise a normal
        :meth:`dispatch` runs.

        Raises :class:`store.errors.InvalidMessageError` (or a subclass) naming the row and
        field of the first bad row; nothing of the batch is written then.
        """
        return self._put_batch(table, writer_marker(writer, sequence), dispatch=dispatch)[0]

    def writer_sequence(self, writer: str) -> int | None:
        """The last sequence appended by ``writer`` (see :meth:`put_batch`), or ``None``."""
        value = self.append_state().writers.get(writer)
        return None if value is None else int(value)

    def put_batches(
        self, tables: Iterable[pa.Table | pa.RecordBatch], *, writer: str | None = None,
        sequence: int | None = None, dispatch: bool = False,
    ) -> pa.Table:
        """Append the rows of several tables as one all-or-nothing batch, encoding as they come.

        For producers whose rows arrive in pieces (a Spark task receives Arrow batches): each
        table is validated and encoded when the iterator yields it (so encoding overlaps the
        arrival of the next one), and all of them are appended under one hold of the append
        lock and published once. Rows are numbered across the tables in errors (row ``r`` of
        the second table of 100 rows is row ``100 + r``); a bad row anywhere means nothing is
        written. ``writer``/``sequence``/``dispatch`` as in :meth:`put_batch` (the marker goes
        on the last record of the last non-empty table). Returns one result table.
        """
        marker = writer_marker(writer, sequence)
        self._check_open()
        encoded: list[EncodedBatch] = []
        rows = 0
        pending: pa.Table | pa.RecordBatch | None = None
        with self._ahead() as announce:  # the segment preparer warms pages while the rest arrives
            for table in tables:  # encode one behind, so that the last one can carry the marker
                if not isinstance(table, pa.Table | pa.RecordBatch):
                    raise InvalidMessageError(f"put_batches takes pyarrow Tables or RecordBatches, not {type(table).__name__}", row=None, field="*")
                if table.num_rows == 0:
                    continue
                if pending is not None:
                    encoded.append(self._prepare(pending, None, rows, plain=False))  # packed under the lock, chunk by chunk
                    announce(encoded[-1])
                    rows += encoded[-1].n
                pending = table
            if pending is not None:
                encoded.append(self._prepare(pending, marker, rows, plain=False))
                announce(encoded[-1])
            return self._append_encoded(encoded, marker, dispatch=dispatch)[0]

    @contextlib.contextmanager
    def _ahead(self) -> Iterator[Callable[[EncodedBatch], None]]:
        """Announce encoded batches to the segment preparer (:mod:`store.log.allocate`) until
        the append is over; the first one starts it in this process (a writer)."""
        total = 0

        def announce(batch: EncodedBatch) -> None:
            nonlocal total
            n = int(batch.lengths.sum())
            total += n
            if not self._preparing:
                self._preparing = True
                self.services.add(self.preparer)
            self.preparer.expect(n)

        try:
            yield announce
        finally:
            if total:
                self.preparer.settle(total)

    def _prepare(
        self, table: pa.Table | pa.RecordBatch, marker: tuple[str, str] | None, row_base: int = 0, *, plain: bool = True,
    ) -> EncodedBatch:
        """Validate and encode one table (no lock); errors name rows counted from ``row_base``.

        ``plain``: see :func:`store.log.encode.prepare_batch`."""
        try:
            return prepare_batch(
                table,
                queue_counts=lambda topics: self.topic_config.planned_queue_counts(topics, unknown=-1),
                max_message_size=self.config.max_message_size,
                max_record_size=self.commitlog.segment_size - 8,
                store_host=self._store_host,
                born_host=self._born_host,
                uniq_keys=self._uniq,
                round_robin=self._round_robin,
                last_row_property=marker,
                plain=plain,
            )
        except InvalidMessageError as exc:
            if row_base and exc.row is not None:
                exc.row += row_base
                exc.args = (f"row {exc.row}, field {exc.field!r}: {exc.reason}",)
            raise

    def _result_table(self, physical_offsets: np.ndarray, queue_offsets: np.ndarray, store_ts: int) -> pa.Table:
        """``put_batch``'s result rows: commitLogOffset, queueOffset, msgId, storeTimestamp."""
        n = len(physical_offsets)
        ts = pa.Array.from_buffers(TS, n, [None, pa.py_buffer(int64_filled(n, store_ts * 1000))])
        return pa.Table.from_arrays(
            [pa.array(physical_offsets), pa.array(queue_offsets), offset_msg_ids(self._store_host, physical_offsets), ts],
            schema=PUT_RESULT_SCHEMA,
        )

    def _drop_unpublished(self, tail: int) -> None:
        """After a failed append (caller holds the append lock): clear what it wrote past the
        published ``tail`` (punching holes needs no space on a full disk). Best effort: if
        this fails too, the next append's scrub does it. Nothing is cleared if the state was
        published after all (a failure after the publish itself)."""
        try:
            current = self._state_file.load()
            if current is None or current.tail == tail:
                self.commitlog.scrub(tail, force=True)
        except Exception:  # noqa: BLE001 - the append's own error is the one to raise
            log.warning("could not clear an unpublished append past commitlog offset %d; the next append will", tail, exc_info=True)

    def _put_batch(
        self, table: pa.Table | pa.RecordBatch, marker: tuple[str, str] | None = None, *, dispatch: bool = False,
    ) -> tuple[pa.Table, np.ndarray]:
        self._check_open()
        batch = self._prepare(table, marker)
        with self._ahead() as announce:
            announce(batch)
            return self._append_encoded([batch], marker, dispatch=dispatch)

    def _append_encoded(
        self, batches: list[EncodedBatch], marker: tuple[str, str] | None, *, dispatch: bool = False,
    ) -> tuple[pa.Table, np.ndarray]:
        """Append encoded batches, in order, under one lock hold; publish once."""
        batches = [b for b in batches if b.n]
        if not batches:
            return PUT_RESULT_SCHEMA.empty_table(), np.zeros(0, np.int32)
        # only a fully valid batch creates its topics; a topic resized meanwhile is re-checked
        base = 0
        for batch in batches:
            counts = self.topic_config.write_queue_counts(batch.topics)
            if len(counts) == 1:  # one topic (the usual case): its largest queue id suffices
                over = batch.queue_id >= counts[0] if int(batch.queue_id.max()) >= counts[0] else None
            else:
                over = batch.queue_id >= np.asarray(counts)[batch.topic_index]
            if over is not None and over.any():
                from .errors import QueueIdError

                raise QueueIdError("queue id is not below the topic's queue count", row=base + int(np.flatnonzero(over)[0]), field="queueId")
            base += batch.n
        self._check_disk_space()
        if len(batches) == 1 and batches[0].packable and batches[0].chunks == 1 and batches[0].packed is None:
            # a put of one chunk: nothing to overlap its write with, so it is packed whole
            # before the lock and only patched under it (every writer process waits for that
            # lock: ~40% less hold time for a 100-message put)
            batches[0].prepack()
        with self._append_lock.held():
            state = self._state_file.load() or self._rebuild_state()
            if marker is not None:
                seq_s, name = marker[1].split(" ", 1)
                if int(state.writers.get(name, -1)) >= int(seq_s):
                    return PUT_RESULT_SCHEMA.empty_table(), np.zeros(0, np.int32)  # a replay
                state.writers[name] = int(seq_s)
            tail = state.tail
            try:
                # the per-row results (msgIds...) are made while the last chunks are written
                results = self.commitlog.append_all(batches, state, self._result_table)
                self._state_file.publish(state)
            except BaseException as exc:
                self._drop_unpublished(tail)
                if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
                    raise DiskFullError(
                        exc.errno, f"disk full while appending at commitlog offset {tail}: nothing was published",
                        exc.filename or str(self.paths.commitlog_dir),
                    ) from exc
                raise
        step = "flush"
        try:
            if self._sync_flush:
                self.flush_service.flush_to(results[-1].end)  # group commit: may be covered by another's sync
            step = "dispatch"
            if dispatch:
                if any(b.tags_codes is None for b in batches):  # TAGS given as a user property: let the dispatcher read them
                    self.dispatcher.dispatch()
                else:  # one dispatch for all the tables: one position update
                    names: dict[str, int] = {}
                    for b in batches:
                        for t in b.topics:
                            names.setdefault(t, len(names))
                    tidx = np.concatenate([np.array([names[t] for t in b.topics], np.int64)[b.topic_index] for b in batches])
                    self.dispatcher.dispatch_appended(
                        results[0].start, results[-1].end, list(names), tidx,
                        np.concatenate([b.queue_id for b in batches]),
                        np.concatenate([r.queue_offsets for r in results]),
                        np.concatenate([r.physical_offsets for r in results]),
                        np.concatenate([b.lengths for b in batches]),
                        np.concatenate([b.tags_codes for b in batches]),
                        results[-1].store_timestamp,
                    )
        except OSError as exc:
            if exc.errno not in DISK_FULL_ERRNOS:
                raise
            # the batch is in the log (published) and readable by offset: a retry would append
            # it again, so the error says so (``appended``)
            raise DiskFullError(
                exc.errno, f"{exc.strerror}: the batch WAS appended (commitlog offsets {results[0].start}..{results[-1].end}, "
                f"published), only its {step} failed", exc.filename, appended=True,
            ) from exc
        tables = [
            r.overlapped if r.overlapped is not None else self._result_table(r.physical_offsets, r.queue_offsets, r.store_timestamp)
            for r in results
        ]
        # one chunk per table: a sink task appends ~100 tables and reads only num_rows; a
        # combine would copy ~56 bytes per row (~50 ms per million rows)
        out = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        return out, batches[0].queue_id if len(batches) == 1 else np.concatenate([b.queue_id for b in batches])

    def put(
        self,
        topic: str,
        body: bytes | str,
        *,
        queue_id: int | None = None,
        tags: str | None = None,
        keys: Iterable[str] | str = (),
        properties: Mapping[str, str] | None = None,
        flag: int = 0,
    ) -> PutMessageResult:
        """Append one message; see :meth:`put_batch` for the fields and errors."""
        if isinstance(keys, str):
            keys = [k for k in keys.split(" ") if k]
        if not isinstance(body, bytes | bytearray | memoryview | str):
            raise InvalidMessageError(f"body must be bytes or str, got {type(body).__name__}", row=0, field="body")
        checks = (
            ("tags", tags is None or isinstance(tags, str)),
            ("keys", all(isinstance(k, str) for k in keys)),
            ("properties", properties is None or all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items())),
            ("flag", isinstance(flag, int) and not isinstance(flag, bool)),
            ("queueId", queue_id is None or (isinstance(queue_id, int) and not isinstance(queue_id, bool))),
        )
        for name, ok in checks:
            if not ok:
                raise InvalidMessageError("has a value of the wrong type", row=0, field=name)
        if queue_id is not None and not 0 <= queue_id < 1 << 31:  # the batch path names the topic's limit
            from .errors import QueueIdError

            raise QueueIdError(f"queue id {queue_id} is out of range [0, 2**31)", row=0, field="queueId")
        if not -(1 << 31) <= flag < 1 << 31:
            raise InvalidMessageError("flag does not fit in 32 bits", row=0, field="flag")
        cols: dict[str, pa.Array] = {
            "topic": pa.array([topic], pa.string()),
            "body": pa.array([body.encode() if isinstance(body, str) else bytes(body)], pa.binary()),
            "queueId": pa.array([queue_id], pa.int32()),
            "tags": pa.array([tags], pa.string()),
            "keys": pa.array([list(keys)], pa.list_(pa.string())),
            "flag": pa.array([flag], pa.int64()),
        }
        if properties:
            cols["properties"] = pa.array([list(properties.items())], pa.map_(pa.string(), pa.string()))
        table, queue_ids = self._put_batch(pa.table(cols))
        res = table.to_pylist()[0]
        return PutMessageResult(
            PutMessageStatus.PUT_OK, res["commitLogOffset"], res["queueOffset"], res["msgId"],
            res["storeTimestamp"], int(queue_ids[0]),
        )

    # -------------------------------------------------------------- dispatch
    def dispatch(self) -> int:
        """Build consume-queue units for every published record not yet dispatched; returns how many."""
        self._check_open()
        return self.dispatcher.dispatch()

    def start_dispatcher(self) -> None:
        """Dispatch continuously in the background (every ``reput_interval_ms`` while idle;
        a second start is a no-op), and run retention passes (:meth:`clean_expired`, every
        ``clean_resource_interval`` ms). A failed round is logged and kept in
        ``dispatcher.last_error`` / ``retention.last_error``; both keep running."""
        self._check_open()
        self.services.add(self.dispatcher)
        self.services.add(self.retention)

    def stop_dispatcher(self) -> None:
        """Stop the background dispatcher and retention; returns once their rounds in progress have finished."""
        self.services.remove(self.retention)
        self.services.remove(self.dispatcher)

    def clean_expired(self, now_ms: int | None = None, *, force: bool = False) -> CleanReport:
        """One retention pass (RocketMQ's clean services); see :mod:`store.retention.cleaner`."""
        self._check_open()
        return self.retention.clean(now_ms, force=force)

    # ------------------------------------------------------------------ read
    def _queue_exists(self, topic: str, queue_id: int) -> bool:
        tc = self.topic_config.get(topic)
        if tc is None:
            self.topic_config.reload()
            tc = self.topic_config.get(topic)
        if tc is not None:
            return 0 <= queue_id < max(tc.read_queue_nums, tc.write_queue_nums) or self.paths.queue_dir(topic, queue_id).is_dir()
        return self.paths.queue_dir(topic, queue_id).is_dir()

    def _bounds(self, cq: ConsumeQueue) -> tuple[int, int]:
        with self._dispatch_lock.held(shared=True):
            return cq.min_offset(self.commitlog.min_offset()), cq.max_offset()

    def min_offset(self, topic: str, queue_id: int) -> int:
        """Logical offset of the oldest message still in the queue."""
        self._check_open()
        validate_topic(topic)
        queue_id = queue_id_arg(queue_id)
        return self._bounds(self.consume_queue(topic, queue_id))[0]

    def max_offset(self, topic: str, queue_id: int) -> int:
        """Logical offset after the newest dispatched message of the queue (0 if empty)."""
        self._check_open()
        validate_topic(topic)
        queue_id = queue_id_arg(queue_id)
        return self._bounds(self.consume_queue(topic, queue_id))[1]

    def _read_bounds(self, cq: ConsumeQueue) -> tuple[int, int, int]:
        """(first live offset, end) of a queue and the commitlog's first offset they were taken
        against: every unit from the first live one on points at or after it (see
        :mod:`store.queue.checked_read`)."""
        with self._dispatch_lock.held(shared=True):
            floor = self.commitlog.min_offset()
            return cq.min_offset(floor), cq.max_offset(), floor

    def _check_crc(self, check_crc: bool | None) -> bool:
        return self.config.check_crc_on_read if check_crc is None else bool(check_crc)

    def get_messages(
        self, group: str, topic: str, queue_id: int, offset: int, max_count: int = 32, tags: str | None = "*",
        *, check_crc: bool | None = None,
    ) -> GetMessageResult:
        """Read up to ``max_count`` messages of a queue from ``offset`` (RocketMQ's ``getMessage``).

        ``tags`` is a subscription (``"*"`` or ``"A || B"``): units are filtered on their tag
        hash first, then the decoded messages on the exact TAGS string. ``group`` names the
        consumer (validated; reading does not commit anything). The status and
        ``next_begin_offset`` follow RocketMQ (see :class:`GetMessageStatus`).

        Every message is checked against its consume-queue unit, and its body CRC unless
        ``check_crc`` (default: the config's ``check_crc_on_read``) is false. Raises
        :class:`CorruptQueueError` (a unit that does not match its record) or
        :class:`CorruptRecordError` (a damaged record); see :mod:`store.queue.checked_read`.
        """
        self._check_open()
        from .paths import validate_group

        validate_group(group)
        validate_topic(topic)
        queue_id, offset, max_count = int_arg("queue_id", queue_id), int_arg("offset", offset), int_arg("max_count", max_count)
        if max_count <= 0:  # RocketMQ answers nothing useful either; say so instead
            raise InvalidArgumentError(f"max_count must be positive, got {max_count}")
        empty = empty_message_table()
        if queue_id < 0 or not self._queue_exists(topic, queue_id):
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0, empty)
        cq = self.consume_queue(topic, queue_id)
        lo, hi, floor = self._read_bounds(cq)
        if hi == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi, empty)
        if offset < lo:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, lo, lo, hi, empty)
        if offset == hi:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi, empty)
        if offset > hi:
            nxt = lo if lo == 0 else hi  # RocketMQ: back to 0 when the queue starts at 0
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, nxt, lo, hi, empty)
        wanted = parse_tag_filter(tags)
        window = max_count if wanted is None else max(800, max_count)
        units = cq.read(offset, min(window, hi - offset))
        if not len(units):  # its consume-queue segment went meanwhile (retention): from the new start
            return GetMessageResult(GetMessageStatus.MESSAGE_WAS_REMOVING, max(offset, self.min_offset(topic, queue_id)),
                                    lo, hi, empty)
        # units below the commitlog's first offset are not skipped here: from the queue's
        # first live offset on, such a unit is damaged, and the read reports it
        real = units["size"] != FILLER_SIZE
        match = real
        if wanted is not None:
            codes = np.array([java_string_hash(t) for t in wanted], np.int64)
            match = real & np.isin(units["tagsCode"].astype(np.int64), codes)
        hits = np.flatnonzero(match)
        if len(hits) >= max_count:
            hits = hits[:max_count]
            scanned = int(hits[-1]) + 1
        else:
            scanned = len(units)
        if len(hits) == 0:
            status = GetMessageStatus.MESSAGE_WAS_REMOVING if not real.any() else GetMessageStatus.NO_MATCHED_MESSAGE
            return GetMessageResult(status, offset + scanned, lo, hi, empty)
        try:
            table = self._read_units(cq, topic, queue_id, offset, units, hits, floor, check_crc)
        except MessagesDeletedError as gone:  # retention overtook the read: RocketMQ's status for it
            return GetMessageResult(GetMessageStatus.MESSAGE_WAS_REMOVING, gone.end, lo, hi, empty)
        if wanted is not None:
            import pyarrow.compute as pc

            table = table.filter(pc.fill_null(pc.is_in(table["tags"], pa.array(sorted(wanted))), False))
        status = GetMessageStatus.FOUND if table.num_rows else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, offset + scanned, lo, hi, table)

    def _read_units(
        self, cq: ConsumeQueue, topic: str, queue_id: int, first: int, units: np.ndarray, rows: np.ndarray,
        floor: int, check_crc: bool | None,
    ) -> pa.Table:
        """The messages of ``units[rows]`` (units read from queue offset ``first``), checked."""
        if len(rows) == len(units):  # every unit (the usual case): no copy of them
            sel, logical = units, np.arange(first, first + len(units), dtype=np.int64)
        else:
            sel, logical = units[rows], first + rows.astype(np.int64)
        return read_units(self.commitlog, cq, sel, logical, topic=topic, queue_id=queue_id, floor=floor,
                          tail=self.published_tail(), check_crc=self._check_crc(check_crc))

    def read_queue(self, topic: str, queue_id: int, start: int, end: int, *, check_crc: bool | None = None) -> pa.Table:
        """Every message of a queue in ``[start, end)`` (clamped to what exists), as one table.

        Checked as :meth:`get_messages` says (``check_crc``, the errors). A read that retention
        overtook is clamped again (what exists once the deletion is done).
        """
        self._check_open()
        validate_topic(topic)
        queue_id, start, end = queue_id_arg(queue_id), int_arg("start", start), int_arg("end", end)
        cq = self.consume_queue(topic, queue_id)
        while True:
            lo, hi, floor = self._read_bounds(cq)
            first, last = max(start, lo), min(end, hi)
            if last <= first:
                return empty_message_table()
            units = cq.read(first, last - first)
            if len(units) < last - first and (now_first := self.min_offset(topic, queue_id)) > first:
                start = now_first  # its first segments went while it read: clamp again
                continue
            try:
                return self._read_units(cq, topic, queue_id, first, units, np.flatnonzero(units["size"] != FILLER_SIZE),
                                        floor, check_crc)
            except MessagesDeletedError as gone:
                start = gone.end

    def offset_for_timestamp(self, topic: str, queue_id: int, ts_ms: int) -> int:
        """The first queue offset whose store time is at or after ``ts_ms`` (max offset if none).

        Store times never go back in this store, so a binary search over the queue is exact.
        (RocketMQ's own lookup returns the nearest message instead; see docs/format.md.)
        Each unit looked at is checked against its record (not the body CRC: only the store
        time is used); raises :class:`CorruptQueueError` or :class:`CorruptRecordError`.
        """
        self._check_open()
        validate_topic(topic)
        queue_id, ts_ms = queue_id_arg(queue_id), int_arg("ts_ms", ts_ms)
        cq = self.consume_queue(topic, queue_id)
        lo, hi, floor = self._read_bounds(cq)
        tail = self.published_tail()
        left, right = lo, hi
        while left < right:
            mid = (left + right) // 2
            unit = cq.read(mid, 1)
            if not len(unit):
                raise CorruptStoreError(f"consume-queue segment holding queue offset {mid} is missing", path=str(cq.directory))
            if unit["size"][0] == FILLER_SIZE:
                left = mid + 1
                continue
            store_ts = unit_store_timestamp(self.commitlog, cq, unit, mid, topic=topic, queue_id=queue_id, floor=floor, tail=tail)
            if store_ts < ts_ms:
                left = mid + 1
            else:
                right = mid
        return left

    def message_by_offset(self, commit_log_offset: int) -> dict[str, Any] | None:
        """The message whose record starts at this commitlog offset, as a dict row; ``None`` if none.

        Its body CRC is checked when ``check_crc_on_read`` is on: a mismatch, or lengths that
        do not add up, raise :class:`CorruptRecordError`.
        """
        self._check_open()
        commit_log_offset = int_arg("commit_log_offset", commit_log_offset)
        if commit_log_offset < self.commitlog.min_offset():
            return None
        tail = self.published_tail()
        rec = self.commitlog.record_at(int(commit_log_offset), tail)
        if rec is None or rec.kind is not ScanKind.RECORD:
            return None
        try:
            table = self.commitlog.read_messages(
                np.array([commit_log_offset], np.int64), check=RecordCheck(crc=self.config.check_crc_on_read), tail=tail,
            )
        except BadRecordError as e:
            raise CorruptRecordError(f"damaged commitlog record: {e.reason}", path=e.path, offset=e.offset) from None
        rows = table.to_pylist()
        return rows[0] if rows else None

    def message_by_id(self, msg_id: str) -> dict[str, Any] | None:
        """The message with this offset msgId (store host + commitlog offset); ``None`` if none.

        Raises as :meth:`message_by_offset`.
        """
        parsed = parse_offset_msg_id(msg_id)
        if parsed is None:
            return None
        _host, offset = parsed
        row = self.message_by_offset(offset)
        # the decoded record's own msgId carries its store host: a foreign host does not match
        if row is None or row["msgId"] != msg_id.upper():
            return None
        return row

    # --------------------------------------------------------- offsets, topics
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``group``'s progress on a queue in ``config/consumerOffset.json``.

        ``queue_id`` is an int in ``[0, 2**31)``, and a queue of the topic when the topic is in
        ``topics.json`` (below its read/write queue counts, or a queue folder that exists);
        ``offset`` an int in ``[0, 2**63)`` (a Java long; like RocketMQ's broker, any such
        offset is stored, also one past the queue's end). Otherwise
        :class:`store.errors.InvalidArgumentError` naming the argument; a bad name raises
        :class:`store.errors.InvalidGroupError` / :class:`store.errors.InvalidTopicError`.
        """
        self._check_open()
        from .paths import validate_group

        validate_group(group)
        validate_topic(topic)
        queue_id, offset = queue_id_arg(queue_id), offset_arg(offset)
        tc = self.topic_config.get(topic)
        if tc is None:
            self.topic_config.reload()
            tc = self.topic_config.get(topic)
        if tc is not None and queue_id >= max(tc.read_queue_nums, tc.write_queue_nums) and not self.paths.queue_dir(topic, queue_id).is_dir():
            raise InvalidArgumentError(
                f"queue_id {queue_id} is not a queue of topic {topic!r} "
                f"({tc.read_queue_nums} read / {tc.write_queue_nums} write queues)"
            )
        self.consumer_offsets.commit(group, topic, queue_id, offset)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """``group``'s committed offset on a queue, or -1 if it has none.

        ``queue_id``: an int in ``[0, 2**31)``, else :class:`store.errors.InvalidArgumentError`.
        An unreadable ``consumerOffset.json`` (and ``.bak``) raises
        :class:`store.errors.CorruptStoreError` naming it.
        """
        self._check_open()
        return self.consumer_offsets.committed(group, topic, queue_id)

    def create_topic(self, topic: str, queues: int | None = None, *, read_queues: int | None = None) -> TopicConfig:
        """Create or resize a topic in ``config/topics.json``.

        ``queues`` (write queues; ``None``: ``default_topic_queue_nums``) and ``read_queues``
        (``None``: as many as write queues) are ints in ``[1, 65535]``, else
        :class:`store.errors.InvalidArgumentError` naming the argument.
        """
        self._check_open()
        name = validate_topic(topic)
        n = self.config.default_topic_queue_nums if queues is None else int_arg("queues", queues, 1, 65535)
        r = n if read_queues is None else int_arg("read_queues", read_queues, 1, 65535)
        tc = TopicConfig(name, r, n)
        self.topic_config.put(tc)
        return tc

    def topics(self) -> dict[str, TopicConfig]:
        """Every topic: those of ``config/topics.json`` (re-read), and those only the log has (a
        store written by RocketMQ without its config, or a config file lost): found by their
        consume queues, with as many queues as their highest queue folder says (a topic of
        ``topics.json`` keeps its configured counts). Nothing is written. An entry of
        ``topics.json`` whose key is not a valid topic name, or whose ``topicName`` differs from
        its key, is never listed (it is logged and kept in the file as it is)."""
        self._check_open()
        self.topic_config.reload()
        out = self.topic_config.topics()
        found: dict[str, int] = {}
        for topic, qid, _ in self._queue_dirs():
            if topic not in out:
                found[topic] = min(65535, max(found.get(topic, 0), qid + 1))  # a topic has at most 65535
        out.update({topic: TopicConfig(topic, n, n) for topic, n in found.items()})
        return out

    # ------------------------------------------------------------------ close
    def flush(self) -> int:
        """Force everything published to disk: commitlog, consume queues, checkpoint.

        Returns the flushed commitlog offset.
        """
        self._check_open()
        self.flush_service.checkpoint()
        return self.flushed_offset()

    def close(self) -> None:
        """Stop the dispatcher and flusher, flush, unmap everything. Idempotent.

        Every close flushes the commitlog (ASYNC_FLUSH's final flush). The last process to
        close the store also syncs the consume queues, writes the checkpoint and deletes
        ``abort``: the next open takes the normal recovery path.
        """
        if self._closed:
            return
        self.services.stop()
        self._closed = True
        flushed = False
        try:
            self.flush_service.flush_to(self.published_tail())
            flushed = True
        finally:  # a failed final flush (a full disk, EIO) leaves the store to crash recovery
            self._owner.close(self._last_close, clean=flushed)
        self._close_files()
        self._release_locks()

    def _close_files(self) -> None:
        """Unmap and close every segment and state file this object opened."""
        self.commitlog.close()
        self._state_file.close()
        self.flush_service.state_file.close()
        for cq in self._queues.values():
            cq.close()


    def _last_close(self) -> None:
        # append.state is not fsynced here either: after a power loss a stale one is below
        # flush.state, and recovery keeps what flush.state covers
        self.flush_service.checkpoint()


#: How long a disk found below the warning level is not checked again (seconds).
DISK_CHECK_INTERVAL_S = 0.1


def disk_used_percent(path: Path) -> float:
    """How full the volume holding ``path`` is, in percent (what ``df`` shows)."""
    st = os.statvfs(path)
    if st.f_blocks == 0:
        return 0.0
    return 100.0 * (st.f_blocks - st.f_bavail) / st.f_blocks


class InterProcessLockFactory:
    """One :class:`InterProcessLock` per lock file per process.

    POSIX record locks are per process: two lock objects on one file in the same process
    would not exclude each other (and closing either fd drops both), so stores opened twice
    in one process share their lock objects.
    """

    _locks: dict[str, Any] = {}
    _refs: dict[str, int] = {}
    _mutex = threading.Lock()

    @classmethod
    def get(cls, path: Path) -> Any:
        """The lock of ``path``, counted: every ``get`` is paired with a :meth:`release`."""
        from .fileio import InterProcessLock

        key = os.path.realpath(path)
        with cls._mutex:
            lock = cls._locks.get(key)
            if lock is None or os.getpid() != getattr(lock, "_pid", None):  # (a forked child: its own)
                lock = InterProcessLock(path)
                lock._pid = os.getpid()  # type: ignore[attr-defined]
                cls._locks[key] = lock
                cls._refs[key] = 0
            cls._refs[key] += 1
            return lock

    @classmethod
    def release(cls, path: Path) -> None:
        """Drop one use of ``path``'s lock; the last closes its descriptor (a process that opens
        many stores one after another keeps no descriptor of those it closed)."""
        key = os.path.realpath(path)
        with cls._mutex:
            lock = cls._locks.get(key)
            if lock is None or os.getpid() != getattr(lock, "_pid", None):
                return
            cls._refs[key] -= 1
            if cls._refs[key] <= 0:
                del cls._locks[key], cls._refs[key]
                lock.close()

