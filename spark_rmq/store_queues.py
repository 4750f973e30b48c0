"""A store's files as the source's queue source (option ``path``): the driver's open store.

**Reads change no layout**: the store is opened with ``create=False`` (read-only with
``readOnly``); a path without a store fails planning with :class:`rmqlog.StoreNotFoundError`
naming it. **Everything written is readable**: :meth:`StoreQueues.refresh` runs the
dispatcher before planning (and a scheduler pass with ``deliverDue``), unless ``readOnly``.
The store is tracked (:mod:`spark_rmq.stores`) so that Spark ending the process closes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pyspark.sql.datasource import InputPartition

from rmqlog import MessageStore

from .offsets import bounds, discover_queues, split_key
from .options import SourceOptions
from .read import KeyLookup, QueueRange
from .stores import track, untrack


class StoreQueues:
    """The queue source of a store's files (:class:`spark_rmq.queue_source.QueueSource`);
    queue names are topics."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.store = MessageStore.open(opts.path, create=False, read_only=opts.read_only)
        track(self.store)

    def close(self) -> None:
        untrack(self.store)
        self.store.close()

    def refresh(self, *, deliver: bool) -> None:
        """Deliver what is due (a delayed message enters its queue once due, and only then),
        then make every published record readable; ``readOnly`` plans over what is dispatched."""
        if deliver:
            self.store.deliver_due()
        if not self.opts.read_only:
            self.store.dispatch()

    def queues(self) -> list[tuple[str, int]]:
        return discover_queues(self.store, self.opts)

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.store.min_offset(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.store.max_offset(topic, queue_id)

    def offset_for_timestamp(self, topic: str, queue_id: int, ts_ms: int) -> int:
        return self.store.offset_for_timestamp(topic, queue_id, ts_ms)

    def record_sizes(self, topic: str, queue_id: int, start: int, end: int) -> np.ndarray:
        return self.store.record_sizes(topic, queue_id, start, end)

    def reachable_bounds(self, queues: list[tuple[str, int]]) -> dict[str, tuple[int, int]]:
        return bounds(self, queues)  # (a store's queues are always there to ask)

    def commit_offset(self, group: str, name: str, queue_id: int, offset: int) -> None:
        self.store.commit_offset(group, name, queue_id, offset)

    def partitions(self, opts: SourceOptions, ranges: list[tuple[str, int, int]], **kw: Any) -> list[InputPartition]:
        tags = tuple(sorted(opts.tags)) if opts.tags else None
        parts: list[InputPartition] = []
        for key, a, b in ranges:
            topic, qid = split_key(key)
            parts.append(
                QueueRange(
                    opts.path,
                    topic,
                    qid,
                    a,
                    b,
                    tags,
                    opts.fail_on_data_loss,
                    opts.read_batch_rows,
                    check_crc=opts.check_crc,
                    read_only=opts.read_only,
                    sql92=opts.sql92,
                    columns=opts.columns,
                    **kw,
                )
            )
        return parts

    def key_lookup(self, topics: tuple[str, ...]) -> InputPartition:
        opts = self.opts
        return KeyLookup(
            opts.path,
            topics,
            opts.msg_id or opts.key or "",
            opts.msg_id is not None,
            opts.check_crc,
            opts.read_only,
            opts.columns,
        )

    def empty_partition(self) -> InputPartition:
        return QueueRange(self.opts.path, "", 0, 0, 0, columns=self.opts.columns)
