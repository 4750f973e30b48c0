"""The broker's consumer offsets (RocketMQ 4.9.8's ``ConsumerOffsetManager``): a table in
memory, ``"<topic>@<group>" -> {queueId: offset}``, that QUERY_CONSUMER_OFFSET (14),
UPDATE_CONSUMER_OFFSET (15), a pull's commit flag (11), GET_ALL_CONSUMER_OFFSET (43), the
consume stats (208), the transaction check's progress and a slave's sync read and write.

Costs: a commit or a query is a few dict operations and the names' checks, whatever the
table's size; the topics a group has offsets of are indexed by group (208). Nothing is
written per request: :meth:`ConsumerOffsetTable.persist` (the broker's
:class:`~rmqnet.broker.state.StatePersistService`, every ``flushConsumerOffsetInterval`` ms
and at a clean stop) merges the entries committed since the last persist with the store's
``config/consumerOffset.json`` (:meth:`rmqlog.MessageStore.merge_consumer_offsets`, the rule
of :mod:`rmqlog.config_tables`): the file is read again only if another process wrote it
since (its other entries are then taken into this table: a Spark query's or the ``rmqlog``
command's commits), the broker's changes win, the file is written only when there are some.

A persist runs off the event loop (the broker process's persist rounds run in a thread of
their own) and never holds the table's lock while it reads or writes the file: it takes the
changes and the table as they are, and commits go on meanwhile (they are in the next
persist). Only a topic's delete waits for a persist in flight (:meth:`ConsumerOffsetTable.persist_held`),
so that a persist cannot write back offsets the delete removed from the file.

What a crash (``kill -9``, a power loss) between two persists loses: the offsets committed
since the last persist; those consumers read the messages after them again (at least once,
never a message lost; RocketMQ's broker loses the same window).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from rmqlog import FileStamp, InvalidArgumentError, MessageStore, TableMerge
from rmqlog.arguments import offset_arg, queue_id_arg
from rmqlog.paths import validate_group, validate_topic

if TYPE_CHECKING:
    from .broker import Broker


class ConsumerOffsetTable:
    """Committed offsets by ``<topic>@<group>`` and queue id (see the module docstring).
    Thread-safe. Built from the store's ``consumerOffset.json`` (read once)."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._lock = threading.RLock()
        self._persist_lock = threading.Lock()  # one persist at a time; a topic's delete waits for it
        merged = store.merge_consumer_offsets({})
        self._table: dict[str, dict[int, int]] = merged.table
        self._stamp: FileStamp | None = merged.stamp
        #: entries committed since the last persist: what wins over the file at the next one
        self._changed: dict[str, dict[int, int]] = {}
        self._by_group: dict[str, set[str]] = {}
        self._index()
        #: persists that wrote the file, and that read it again (another process wrote it)
        self.writes = 0
        self.rereads = 0

    def _index(self) -> None:
        by_group: dict[str, set[str]] = {}
        for key in self._table:
            topic, _, group = key.partition("@")
            by_group.setdefault(group, set()).add(topic)
        self._by_group = by_group

    # ------------------------------------------------------------------ reads
    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group has none for that queue (RocketMQ's answer)."""
        per_queue = self._table.get(f"{topic}@{group}")
        return -1 if per_queue is None else per_queue.get(queue_id, -1)

    def topics_of(self, group: str) -> list[str]:
        """The topics ``group`` has committed offsets of (``whichTopicByConsumer``), sorted."""
        return sorted(self._by_group.get(group, ()))

    def table(self) -> Mapping[str, Mapping[int, int]]:
        """Every entry, read-only (no copy: serialize it before the next change)."""
        return MappingProxyType(self._table)

    def __len__(self) -> int:
        """How many ``<topic>@<group>`` entries."""
        return len(self._table)

    @property
    def pending(self) -> int:
        """Entries committed since the last persist."""
        return len(self._changed)

    # ---------------------------------------------------------------- changes
    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` for ``group`` on the queue (in memory; written by the next
        :meth:`persist`). Raises the store's typed errors: :class:`rmqlog.InvalidGroupError`,
        :class:`rmqlog.InvalidTopicError`, :class:`rmqlog.InvalidArgumentError` (a queue id
        outside ``[0, 2**31)``, an offset outside ``[0, 2**63)``); nothing changes then."""
        validate_group(group)
        validate_topic(topic)
        queue_id, offset = queue_id_arg(queue_id), offset_arg(offset)
        key = f"{topic}@{group}"
        with self._lock:
            per_queue = self._table.get(key)
            if per_queue is None:
                per_queue = self._table[key] = {}
                self._by_group.setdefault(group, set()).add(topic)
            per_queue[queue_id] = offset
            self._changed.setdefault(key, {})[queue_id] = offset

    def check_queue(self, topic: str, queue_id: int, read_queues: int, write_queues: int) -> None:
        """The store's rule for a commit on a known topic (:meth:`rmqlog.MessageStore.commit_offset`):
        a queue id past both queue counts is refused unless the queue has units (a topic whose
        queue counts shrank); :class:`rmqlog.InvalidArgumentError` naming it."""
        if queue_id >= max(read_queues, write_queues) and self.store.max_offset(topic, queue_id) <= 0:
            raise InvalidArgumentError(
                f"queue_id {queue_id} is not a queue of topic {topic!r} "
                f"({read_queues} read / {write_queues} write queues)"
            )

    def remove_topic(self, topic: str) -> int:
        """Forget every group's offsets of ``topic`` (its delete: the store removed them from
        the file already); how many entries. Walks the table (a delete is rare)."""
        with self._lock:
            gone = [k for k in self._table if k.partition("@")[0] == topic]
            for key in gone:
                del self._table[key]
                self._changed.pop(key, None)
                group = key.partition("@")[2]
                topics = self._by_group.get(group)
                if topics is not None:
                    topics.discard(topic)
                    if not topics:
                        del self._by_group[group]
        return len(gone)

    def persist_held(self) -> threading.Lock:
        """The lock a persist holds from start to end (``with table.persist_held(): ...``
        runs between two persists)."""
        return self._persist_lock

    def persist(self) -> bool:
        """Merge the entries committed since the last persist with ``consumerOffset.json``
        (the module docstring's rule); returns whether the file was written. Safe from any
        thread while commits go on (the table's lock is held only to take the changes and to
        install a table read again). On an error (:class:`rmqlog.DiskFullError`,
        :class:`rmqlog.CorruptStoreError`) the changes stay for the next persist (a commit
        made meanwhile wins over them) and the error is raised."""
        with self._persist_lock:
            with self._lock:
                changes, self._changed = self._changed, {}
                base, since = self._table, self._stamp
            try:
                # (``applied``: ``base`` holds every change; the merge only serializes it)
                merged = self.store.merge_consumer_offsets(changes, base=base, since=since, applied=True)
            except BaseException:
                with self._lock:
                    for key, per_queue in changes.items():
                        kept = self._changed.setdefault(key, {})
                        for queue_id, offset in per_queue.items():
                            kept.setdefault(queue_id, offset)
                raise
            return self._adopt(merged)

    def _adopt(self, merged: TableMerge[dict[int, int]]) -> bool:
        """A merge's outcome taken in: its stamp; a table read again (another process wrote
        the file) with every commit made since the merge began over it."""
        with self._lock:
            self._stamp = merged.stamp
            if merged.reread:
                self.rereads += 1
                table = merged.table
                for key, per_queue in self._changed.items():
                    table.setdefault(key, {}).update(per_queue)
                self._table = table
                self._index()
            self.writes += merged.written
            return merged.written

    def remove_group(self, group: str) -> int:
        """Every offset of ``group`` removed, from the table and from ``consumerOffset.json``
        at once (DELETE_SUBSCRIPTIONGROUP with ``removeOffset``: RocketMQ's
        ``ConsumerOffsetManager.removeOffset``); after a persist in flight. Returns how many
        ``<topic>@<group>`` entries went. Raises the store's errors (nothing removed from the
        file then; the table has forgotten them, and a later persist writes it without them)."""
        with self._persist_lock:
            with self._lock:
                keys = [f"{topic}@{group}" for topic in self._by_group.pop(group, ())]
                for key in keys:
                    self._table.pop(key, None)
                    self._changed.pop(key, None)
                base, since = self._table, self._stamp
            if not keys:
                return 0
            self._adopt(self.store.merge_consumer_offsets(dict.fromkeys(keys), base=base, since=since, applied=True))
            return len(keys)


def commit_offset(broker: Broker, group: str, topic: str, queue_id: int, offset: int) -> None:
    """A commit from the wire (15, a pull's commit flag) into the broker's table, with the
    store's rule for a known topic's queue ids (:meth:`ConsumerOffsetTable.check_queue`).
    Raises the store's typed errors; nothing changes then."""
    table = broker.consumer_offsets
    tc = broker.topics.get(topic)
    if tc is not None:
        table.check_queue(topic, queue_id_arg(queue_id), tc.read_queue_nums, tc.write_queue_nums)
    table.commit(group, topic, queue_id, offset)


__all__ = ["ConsumerOffsetTable", "commit_offset"]
