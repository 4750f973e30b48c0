"""Replication's face of a store: ``store.replica``, a :class:`ReplicaCalls` (what
``rmqnet.ha``, RocketMQ's HA service, and a broker's failover use):

- ``replica_read`` / ``replica_end`` / ``replica_append``: the commitlog's stream from a master
  to its slaves (:mod:`rmqlog.access.replica`), with ``commit_log_min_offset`` and
  ``consumer_offset_table`` (what a slave copies);
- ``replica_truncate`` / ``record_boundary``: an old master come back as a slave cuts what its
  log holds past its new master's (:mod:`rmqlog.recovery.truncate`);
- ``replication_checkpoint`` / ``set_replication_checkpoint``: how far a slave acknowledged
  this store's log while it was a master (:mod:`rmqlog.durability.replication_checkpoint`);
- ``delay_offsets`` / ``set_delay_offsets``: ``config/delayOffset.json``, which a slave copies
  from its master (RocketMQ's ``GET_ALL_DELAY_OFFSET``) so that, promoted, it resumes the
  delay levels where the master was (:mod:`rmqlog.schedule.delay_offsets`).

Each checks the store is open (and writable for a change) and calls the part doing the work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..access.replica import ReplicaWriter, replica_read
from ..arguments import JAVA_LONG_MAX, int_arg, optional_int_arg
from ..durability.replication_checkpoint import ReplicationCheckpointFile
from ..errors import InvalidArgumentError, StoreBusyError, out_of_files_typed
from ..schedule.delay_offsets import FILE_NAME as DELAY_OFFSETS
from ..schedule.delay_offsets import load_delay_offsets, save_delay_offsets
from .truncate import record_boundary, truncate_log

if TYPE_CHECKING:
    from ..access.appender import Appender
    from ..durability.lock_file import StoreLockFile
    from ..parts import StoreParts
    from ..retention import Retention
    from ..schedule import DelayScheduler
    from ..service import ServiceLoop


@out_of_files_typed  # (as the store's own calls: running out of descriptors is a typed error)
class ReplicaCalls:
    """Replication's calls of a store, ``store.replica`` (see the module docstring)."""

    def __init__(
        self,
        parts: StoreParts,
        appender: Appender,
        services: ServiceLoop,
        scheduler: DelayScheduler,
        retention: Retention,
        check_open: Callable[..., None],
        owner: Callable[[], StoreLockFile | None],
    ) -> None:
        self._parts, self._appender, self._services = parts, appender, services
        self._scheduler, self._retention = scheduler, retention
        #: raises if the store is closed, or read-only for a call that writes (its name given)
        self._check_open = check_open
        self._owner = owner  # the store's ownership once opened (None: a read-only open)
        self._replica: ReplicaWriter | None = None

    def replica_read(self, offset: int, max_bytes: int) -> bytes:
        """A master's side of replication (RocketMQ's HA service): the published commitlog
        bytes from ``offset``, as stored, at most ``max_bytes``, never past the end of the
        segment holding ``offset`` nor past the published tail (``b""`` at the tail; a
        segment's end blank comes as its bytes). Raises
        :class:`rmqlog.errors.ReplicaOffsetError` for an offset below the commitlog's first
        offset or past the published tail (:mod:`rmqlog.access.replica`)."""
        self._check_open()
        return replica_read(self._parts, int_arg("offset", offset, 0), int_arg("max_bytes", max_bytes, 1))

    def commit_log_min_offset(self) -> int:
        """The commitlog's first offset: the start of its oldest segment (RocketMQ's
        ``getMinPhyOffset``; 0 until retention deleted a segment)."""
        self._check_open()
        return self._parts.commitlog.min_offset()

    def consumer_offset_table(self) -> dict[str, dict[int, int]]:
        """Every committed consumer offset, ``{"<topic>@<group>": {queue_id: offset}}``
        (``config/consumerOffset.json``, entries with valid names only): RocketMQ's
        ``GET_ALL_CONSUMER_OFFSET`` (43), what a slave copies from its master."""
        self._check_open()
        return self._parts.consumer_offsets.table()

    def replica_end(self) -> int:
        """A slave's end: the offset its next :meth:`replica_append` must start at (what a
        slave reports to its master): the published tail plus the bytes received past it."""
        self._check_open()
        return self._replica_writer().end()

    def replica_append(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """A slave's side of replication: write a master's commitlog bytes at ``offset``,
        which must be this store's end (:meth:`replica_end`), within one segment; publish
        the whole records that pass the checks (magic, lengths, body CRC, PHYSICALOFFSET where
        they land, QUEUEOFFSET continuing each queue, topic names), with next queue offsets,
        store time and idempotence markers taken from them; a partial record waits for the
        next call. Returns the new end. The slave's dispatcher builds its consume queues and
        index from the records. Raises :class:`rmqlog.errors.ReplicaOffsetError` (nothing
        written), :class:`rmqlog.errors.ReplicaStreamError` naming the first bad record (the
        ones before it published, nothing from it on),
        :class:`rmqlog.errors.DiskFullError` (:mod:`rmqlog.access.replica`)."""
        self._check_open("replica_append")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidArgumentError(f"data must be bytes, got {type(data).__name__}")
        return self._replica_writer().append(int_arg("offset", offset, 0), data)

    def _replica_writer(self) -> ReplicaWriter:
        if self._replica is None:
            self._replica = ReplicaWriter(self._parts, self._services, self._appender.disk_guard.check)
        return self._replica

    def replica_truncate(self, offset: int) -> int:
        """Cut the commitlog back to the last record boundary at or before ``offset`` (the whole
        records that end at or before it are kept, a segment's end blank counting as a record
        that ends at the segment's end); returns the new end (the published tail). Everything
        past it goes: records (bytes cleared, later segments deleted), consume-queue units,
        index entries, the dispatch position and ``flush.state`` past it; the append state is
        rebuilt from the kept log (next queue offsets, store time, idempotence markers: a
        marked put whose marker was cut is stored again), bytes received past the tail by
        :meth:`replica_append` are forgotten, the timer's index is rebuilt at its next pass
        (:mod:`rmqlog.recovery.truncate`). For a replication slave whose log went past its new
        master's (``rmqnet.ha``); consumer offsets are left as they are (as RocketMQ's).

        An offset equal to the published tail changes nothing. The store must be open by this
        process alone: :class:`rmqlog.errors.StoreBusyError` naming the holders otherwise (a
        read-only open elsewhere is not counted: it reads what is published); a read-only open
        raises :class:`rmqlog.errors.ReadOnlyStoreError`; an offset below the commitlog's first
        offset or past its published tail raises :class:`rmqlog.errors.ReplicaOffsetError`,
        and a log that cannot be walked up to the cut :class:`rmqlog.errors.CorruptStoreError`
        (nothing changed in these cases). A crash during the cut leaves a store the next open
        recovers, with the cut done or not done. It walks the whole log (the append state's
        rebuild)."""
        self._check_open("replica_truncate")
        offset = int_arg("offset", offset, 0)
        owner = self._owner()
        assert owner is not None  # (a writable open store has its ownership)
        with self._scheduler.paused(), self._retention.paused(), self._replica_writer().paused():
            report = truncate_log(self._parts, offset, owner)
            if report.dropped:
                self._scheduler.log_cut()
        return report.end

    def record_boundary(self, offset: int) -> int:
        """The end of the last whole record at or before ``offset`` in the published log (the
        published tail for an offset at or past it; the log's first offset for one below it):
        where :meth:`replica_truncate` would cut. Walks the records of ``offset``'s segment
        from its start."""
        self._check_open()
        return record_boundary(self._parts, int_arg("offset", offset, 0))

    def _replication_checkpoint_file(self) -> ReplicationCheckpointFile:
        parts = self._parts
        return ReplicationCheckpointFile(
            parts.paths.replication_checkpoint_json, parts.config_lock, parts.clock.wall_ms
        )

    def replication_checkpoint(self) -> int | None:
        """The offset a replication slave last acknowledged of this store's commitlog while it
        was a master (``config/replicationCheckpoint.json``), ``None`` when none is recorded.
        It may fall inside a record. Raises :class:`rmqlog.errors.CorruptStoreError` naming the
        file when neither it nor its ``.bak`` can be read."""
        self._check_open()
        return self._replication_checkpoint_file().read()

    def set_replication_checkpoint(self, offset: int | None) -> None:
        """Record ``offset`` (an int in ``[0, 2**63)``) as the offset a slave acknowledged, or
        clear it (``None``): a master's HA service records its slaves' acknowledgements, a
        slave that compared its log with its new master's clears it. Replaced atomically, the
        previous content kept as ``.bak``."""
        self._check_open("set_replication_checkpoint")
        self._replication_checkpoint_file().write(optional_int_arg("offset", offset, 0))

    def delay_offsets(self) -> dict[int, int]:
        """``config/delayOffset.json``: delay level -> the next ``SCHEDULE_TOPIC_XXXX`` queue
        offset the scheduler delivers (``{}`` without the file): RocketMQ's
        ``GET_ALL_DELAY_OFFSET`` answer. Raises :class:`rmqlog.errors.CorruptStoreError` naming
        the file when neither it nor its ``.bak`` can be read."""
        self._check_open()
        return load_delay_offsets(self._parts.paths.config_dir / DELAY_OFFSETS)

    def set_delay_offsets(self, offsets: Mapping[int, int]) -> None:
        """Replace ``config/delayOffset.json`` with ``offsets`` (level, an int in ``[1, 2**31)``
        -> offset, an int in ``[0, 2**63)``), as a replication slave copies its master's
        (RocketMQ's ``SlaveSynchronize.syncDelayOffset``), so that promoted it resumes each
        level there (the file is a hint the scheduler checks against the log:
        :mod:`rmqlog.schedule.scheduler`). Only for a store whose scheduler does not run: with
        the scheduler among the running services, :class:`rmqlog.errors.StoreBusyError`."""
        self._check_open("set_delay_offsets")
        if not isinstance(offsets, Mapping):
            raise InvalidArgumentError(f"offsets must be a mapping of level to offset, got {type(offsets).__name__}")
        table = {
            int_arg("delay level", level, 1, (1 << 31) - 1): int_arg("delay offset", offset, 0, JAVA_LONG_MAX)
            for level, offset in offsets.items()
        }
        if self._scheduler in self._services.services:
            raise StoreBusyError(
                "set_delay_offsets is for a store whose scheduler does not run (a slave's); this "
                "store's scheduler runs",
                path=str(self._parts.paths.root),
                holders=[],
            )
        with self._scheduler.paused():
            save_delay_offsets(self._parts.paths.config_dir / DELAY_OFFSETS, table)
