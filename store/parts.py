"""The parts of one open store, wired together: what services and maintenance code receive.

:class:`StoreParts` builds, for a store root, the commitlog, the consume queues, the append
state, the dispatcher, the flush service, the checkpoint and the config files, and holds the
store's inter-process locks. Recovery (:mod:`rmqlog.recovery.recovery`), verify
(:mod:`rmqlog.recovery.verify`), retention (:mod:`rmqlog.retention`), the put path
(:mod:`rmqlog.access.appender`) and the read path (:mod:`rmqlog.access.reader`) take a
``StoreParts``, never the facade (:class:`rmqlog.MessageStore`), which only wires them: so no
module imports the facade, and each can be tested against the parts alone.

Locks (one object per lock file per process, see :class:`rmqlog.fileio.LockRegistry`):
``append.lock`` serializes appends, ``dispatch.lock`` dispatching (shared by readers taking
a queue's bounds), ``config.lock`` config-file changes, ``flush.lock`` flushes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import safe_open, segment_sizes
from .clock import SYSTEM_CLOCK, Clock
from .config import StoreConfig
from .config_files import SUBSCRIPTION_GROUPS, ConsumerOffsetManager, TopicConfigManager
from .config_tables import TableFile
from .deleted_topics import DeletedTopics
from .durability.checkpoint import CheckpointFile
from .durability.flush import FlushService, FlushStateFile
from .fileio import LockRegistry
from .index.feed import index_records
from .index.geometry import store_index_config
from .index.index_service import IndexConfig, IndexService
from .log.append_state import AppendState, AppendStateFile
from .log.commitlog import CommitLog
from .log.open_files import OpenFiles
from .log.state_rebuild import rebuild_state
from .paths import StorePaths
from .queue.consume_queue import ConsumeQueue
from .queue.dispatcher import Dispatcher
from .queue.queues import ConsumeQueues, segment_size_found
from .segment_sizes import SegmentSizes


class StoreParts:
    """The wired parts of the store at ``paths`` (see the module docstring).

    Constructed with the store's locks already taken from :class:`LockRegistry` (the facade
    releases them if opening fails); :meth:`close_files` unmaps and closes every file.
    """

    def __init__(
        self,
        config: StoreConfig,
        paths: StorePaths,
        *,
        read_only: bool = False,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self.paths = paths
        #: the store's clock (:mod:`rmqlog.clock`): every part that reads the time reads it
        self.clock = clock
        safe_open.register_root(paths.root)  # below it no link is followed (released with the locks)
        #: every file is opened read-only and none is created (see :mod:`rmqlog.read_only`)
        self.read_only = read_only
        self.lock_paths = (paths.append_lock, paths.dispatch_lock, paths.root / "config.lock", paths.flush_lock)
        self.append_lock, self.dispatch_lock, self.config_lock, self.flush_lock = (
            LockRegistry.get(p, read_only=read_only) for p in self.lock_paths
        )
        #: a read-only store whose ``append.state`` is missing or unreadable reads up to the
        #: state rebuilt in memory from the log at open (set by :func:`rmqlog.read_only.open_read_only`)
        self.fixed_state: AppendState | None = None

    def wire(self, *, repair: bool = False, first: bool = False) -> None:
        """Open the files and build the parts (separate from ``__init__`` so that a failure
        here still lets the caller release the locks). ``repair``, or ``first`` (the store's
        first opener, alone with it: the index is derived, so rebuilding it loses nothing): a
        damaged index file is set aside (and rebuilt by recovery) instead of raising."""
        config, paths, read_only = self.config, self.paths, self.read_only
        self.topic_config = TopicConfigManager(
            paths.topics_json,
            self.config_lock,
            default_queues=config.default_topic_queue_nums,
            auto_create=config.auto_create_topic_enable,
            wall_ms=self.clock.wall_ms,
        )
        self.consumer_offsets = ConsumerOffsetManager(paths.consumer_offset_json, self.config_lock)
        #: ``subscriptionGroup.json``: only a broker reads and writes it (its table, merged)
        self.subscription_groups = TableFile(
            paths.subscription_group_json, self.config_lock, SUBSCRIPTION_GROUPS, wall_ms=self.clock.wall_ms
        )
        #: the topics deleted, whose records below the delete never get units again
        self.deleted_topics = DeletedTopics(paths.deleted_topics_json, self.config_lock)
        #: the commitlog segments and consume-queue files held open, at most
        #: ``max_open_mapped_files`` of them (see :mod:`rmqlog.log.open_files`)
        self.open_files = OpenFiles(config.max_open_mapped_files)
        # the store's segment sizes, whatever this opener's config says (:mod:`rmqlog.segment_sizes`)
        sizes_configured = SegmentSizes(config.mapped_file_size_commit_log, config.mapped_file_size_consume_queue)
        with self.config_lock.held(shared=read_only):
            sizes, cl_provisional, cq_provisional = segment_sizes.resolve(
                paths.config_dir,
                sizes_configured,
                segment_sizes.commit_log_found(paths.commitlog_dir),
                segment_size_found(paths, config.mapped_file_size_consume_queue),
                read_only=read_only,
            )
        self.commitlog = CommitLog(
            paths.commitlog_dir,
            sizes.commit_log,
            read_only=read_only,
            open_files=self.open_files,
            clock=self.clock,
            settle=segment_sizes.settler(paths.config_dir, lambda r: r.commit_log) if cl_provisional else None,
        )
        self.queues = ConsumeQueues(
            paths,
            sizes.consume_queue,
            read_only=read_only,
            open_files=self.open_files,
            settle=segment_sizes.settler(paths.config_dir, lambda r: r.consume_queue) if cq_provisional else None,
        )
        if sizes != sizes_configured:  # what ``MessageStore.config`` says: the store's sizes
            self.config = config = dataclasses.replace(
                config, mapped_file_size_commit_log=sizes.commit_log, mapped_file_size_consume_queue=sizes.consume_queue
            )
        self.topic_config.queues_on_disk = self.queues.count_on_disk
        self.state_file = AppendStateFile(paths.append_state, read_only=read_only)
        self.dispatcher = Dispatcher(
            self.commitlog,
            self.queues.get,
            self.queues.all,
            self.published_tail,
            paths.dispatch_state,
            self.dispatch_lock,
            config.reput_interval_ms,
            tail_version=self.state_file.version,
            own_version=lambda: self.state_file.published_version,
            own_publishing=lambda: self.state_file.publishing,
            watch_path=None if read_only else paths.append_state,
            published_queues=lambda: self.append_state().queues,
        )
        #: light message queues on (``enable_lmq`` and ``enable_multi_dispatch``): the dispatcher
        #: writes their units, the rebuilt append state has their offsets (:mod:`rmqlog.log.lmq`)
        self.lmq = self.dispatcher.lmq = config.enable_lmq and config.enable_multi_dispatch
        self.checkpoint_file = CheckpointFile(paths.checkpoint, self.clock.wall_ms)
        self.flush_service = FlushService(
            self.commitlog,
            self.append_state,
            self.flush_lock,
            FlushStateFile(paths.flush_state, read_only=read_only),
            self.checkpoint_file,
            paths.consumequeue_dir,
            self.dispatcher.dispatched,
            self.dispatch_lock,
        )
        #: the index files (``None`` when ``message_index_enable`` is off); built by the
        #: dispatcher, synced by the checkpoint, cut by recovery and retention
        self.index_service: IndexService | None = None
        if config.message_index_enable:
            configured = IndexConfig(config.max_hash_slot_num, config.max_index_num, config.max_msgs_num_batch)
            with self.config_lock.held(shared=read_only):
                index_config = store_index_config(paths.config_dir, configured, read_only=read_only)
            self.index_service = index = IndexService.open(
                paths.root,
                index_config,
                writable=not read_only,
                repair=(repair or first) and not read_only,
                now_ms=self.clock.wall_ms,
            )
            self.dispatcher.index_hook = lambda cols, parsed: index_records(index, cols, parsed)
            self.flush_service.index_flush = index.flush

    def release_locks(self) -> None:
        for path in self.lock_paths:
            LockRegistry.release(path)
        safe_open.release_root(self.paths.root)

    # ------------------------------------------------------------ positions
    def published_tail(self) -> int:
        """The commitlog offset below which every record is whole and readable."""
        state = self.state_file.load(copy=False)
        if state is None:
            state = self.fixed_state
        return state.tail if state is not None else 0

    def published_state(self) -> AppendState | None:
        """The published append state as this process keeps it (not a copy: never change it),
        ``None`` before the first publish."""
        state = self.state_file.load(copy=False)
        return state if state is not None else self.fixed_state

    def append_state(self) -> AppendState:
        """The published append state (an empty one before the first append)."""
        state = self.state_file.load()
        if state is None:
            state = self.fixed_state
        return state if state is not None else AppendState()

    def flushed_offset(self) -> int:
        """The commitlog offset below which everything is on disk (a published tail)."""
        return self.flush_service.flushed().offset

    def rebuild_state(self, end: int | None = None, *, check_crc: bool | None = None) -> AppendState:
        """The append state recovered from the commitlog itself (:mod:`rmqlog.log.state_rebuild`);
        ``check_crc`` defaults to ``check_crc_on_recover``."""
        crc = self.config.check_crc_on_recover if check_crc is None else check_crc
        return rebuild_state(self.commitlog, end, check_crc=crc, lmq=self.lmq)

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The consume queue of (topic, queue id) (no file is created until a unit is written)."""
        return self.queues.get(topic, queue_id)

    def close_files(self) -> None:
        """Unmap and close every segment and state file these parts opened."""
        for closer in (
            getattr(self, "commitlog", None),
            getattr(self, "state_file", None),
            getattr(self, "queues", None),
            getattr(self, "index_service", None),
            getattr(self, "dispatcher", None),
            getattr(self, "topic_config", None),
            getattr(self, "consumer_offsets", None),
            getattr(self, "subscription_groups", None),
        ):
            if closer is not None:
                closer.close()
        flush: Any = getattr(self, "flush_service", None)
        if flush is not None:
            flush.state_file.close()
