"""One open store's services wired on its parts (:class:`Assembly`): built by :func:`assemble`,
which opens the root as an owner (the first opener recovers it, :mod:`rmqlog.recovery.opening`)
or read-only, and closed by :meth:`Assembly.close`. :class:`rmqlog.MessageStore` holds one
and answers its calls from it; the broker's and replication's calls are its faces
(:class:`rmqlog.access.wire.WireCalls`, :class:`rmqlog.recovery.replication_calls.ReplicaCalls`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..access.appender import Appender
from ..access.reader import QueueReader
from ..access.wire import WireCalls
from ..catalog import Catalog
from ..durability.flush import AsyncFlusher
from ..durability.lock_file import StoreLockFile
from ..index.geometry import set_aside_geometry
from ..index.index_service import IndexConfig
from ..index.lookup import messages_by_key
from ..parts import StoreParts
from ..read_only import open_read_only
from ..retention import Retention
from ..schedule import DelayScheduler
from ..schedule import install as install_schedule
from ..schedule.delay_offsets import set_aside_if_unreadable_offsets
from ..service import ServiceLoop
from .opening import Ownership, open_as_owner, set_aside_unreadable_config, take_ownership
from .recovery import RecoveryReport
from .replication_calls import ReplicaCalls


@dataclass
class Assembly:
    """The services of one open store, on its parts."""

    parts: StoreParts
    #: the store's one background thread: the flusher (ASYNC_FLUSH), the preparer, the
    #: dispatcher and retention once started
    services: ServiceLoop
    appender: Appender
    reader: QueueReader
    catalog: Catalog
    retention: Retention
    #: delivers delayed messages once due (:mod:`rmqlog.schedule`)
    scheduler: DelayScheduler
    #: the broker's calls (``store.wire``) and replication's (``store.replica``)
    wire: WireCalls
    replica: ReplicaCalls
    #: what the first opener's recovery did (``None``: a later or read-only opener)
    recovery: RecoveryReport | None = None
    flusher: AsyncFlusher | None = None
    #: this process's ownership of the root (``None``: a read-only open)
    owner: StoreLockFile | None = None

    def close(self) -> None:
        """Flush and give the store up (the services stopped first by the caller): every close
        flushes the commitlog; the last owner also syncs the consume queues, writes the
        checkpoint and deletes ``abort``."""
        parts = self.parts
        if self.owner is None:  # read-only: nothing to flush, no ownership to give up
            parts.close_files()
            parts.release_locks()
            return
        flushed = False
        try:
            parts.flush_service.flush_to(parts.published_tail())
            flushed = True
        finally:  # a failed final flush (a full disk, EIO) leaves the store to crash recovery
            # append.state is not fsynced at the last close either: after a power loss a stale
            # one is below flush.state, and recovery keeps what flush.state covers
            self.owner.close(parts.flush_service.checkpoint, clean=flushed)
        parts.close_files()
        parts.release_locks()


def assemble(parts: StoreParts, *, repair: bool, read_only: bool, check_open: Callable[..., None]) -> Assembly:
    """Open the store of ``parts``: as an owner (the first opener surveys and recovers it), or
    read-only (nothing written); on failure every file and lock taken is given back.
    ``check_open``: the store's check that it is open (writable for a change), for its faces."""
    owned: Ownership | None = None
    built: Assembly | None = None
    try:
        if not read_only:  # the first opener surveys the files before any is opened
            owned = take_ownership(parts, repair=repair)
        first = owned is not None and owned.first
        set_aside = _set_aside(parts, repair, first)
        built = _wire(parts, repair, first, check_open)
        if owned is None:
            open_read_only(parts)
        else:
            _own(built, owned, repair, set_aside)
        return built
    except BaseException:
        if owned is not None and (built is None or built.owner is None):
            owned.owner.abandon()
        parts.close_files()
        parts.release_locks()
        raise


def _set_aside(parts: StoreParts, repair: bool, first: bool) -> list[Path]:
    """The config files set aside: those ``repair`` found unreadable and, for the ``first``
    opener (alone with the store), an index geometry that is unreadable or does not fit the
    index files (the index is derived: rebuilt from the log, nothing is lost)."""
    set_aside = (
        set_aside_unreadable_config(parts, lambda: set_aside_if_unreadable_offsets(parts.paths.config_dir))
        if repair
        else []
    )
    if first and not repair and parts.config.message_index_enable:
        with parts.config_lock.held():
            moved = set_aside_geometry(
                parts.paths.config_dir,
                IndexConfig(
                    parts.config.max_hash_slot_num, parts.config.max_index_num, parts.config.max_msgs_num_batch
                ),
            )
        set_aside += [moved] if moved else []
    return set_aside


def _wire(parts: StoreParts, repair: bool, first: bool, check_open: Callable[..., None]) -> Assembly:
    """Wire the parts, then the services on them."""
    parts.wire(repair=repair, first=first)
    services = ServiceLoop(clock=parts.clock.monotonic)
    appender = Appender(parts, services)
    reader = QueueReader(parts)
    scheduler = install_schedule(parts, appender, reader)
    if parts.index_service is not None:
        index = parts.index_service
        # confirms a delay level's progress that only delayOffset.json records (see the scheduler)
        scheduler.delivered_probe = lambda topic, key: (
            messages_by_key(
                index,
                parts.commitlog,
                parts.published_tail(),
                topic,
                key,
                max_count=1,
                begin_ms=0,
                end_ms=None,
                check_crc=False,
                unique=True,
            ).num_rows
            > 0
        )
    retention = Retention(parts)
    wire = WireCalls(parts, appender, reader, check_open)
    replica = ReplicaCalls(parts, appender, services, scheduler, retention, check_open, lambda: built.owner)
    built = Assembly(parts, services, appender, reader, Catalog(parts), retention, scheduler, wire, replica)
    return built


def _own(built: Assembly, owned: Ownership, repair: bool, set_aside: list[Path]) -> None:
    """Recover the store as its owner, then start the flusher of an ASYNC_FLUSH store."""
    parts = built.parts
    built.recovery = open_as_owner(parts, owned, repair=repair, set_aside=set_aside, topics=built.catalog.topics)
    built.owner = owned.owner
    if built.recovery is not None and (built.recovery.abnormal or repair) and built.scheduler.timer is not None:
        # after a crash its files were not synced; a repair trusts no derived file: the next
        # pass rebuilds the timer's index from the timer queue
        built.scheduler.timer.wheel.invalidate()
    if not built.appender.sync_flush:
        config = parts.config
        built.flusher = AsyncFlusher(
            parts.flush_service,
            interval_ms=config.flush_interval_commit_log,
            least_pages=config.flush_commit_log_least_pages,
            thorough_interval_ms=config.flush_commit_log_thorough_interval,
            clock=parts.clock.monotonic,
        )
        built.services.add(built.flusher)
