"""Queue offsets of an encoded batch (QUEUEOFFSET per row), assigned under the append lock
from the published ``topicQueueTable``: each queue's next offset plus the row's rank within its
queue, computed per distinct queue (never per row); a batch of one queue takes a range, a
round-robin batch its cycle.
"""

from __future__ import annotations

from collections.abc import MutableMapping

import numpy as np

from .encode.batch import EncodedBatch


def assign_queue_offsets(batch: EncodedBatch, queues: MutableMapping[str, int]) -> np.ndarray:
    """QUEUEOFFSET per row: each queue's next offset plus the row's rank within its queue.

    Updates ``queues`` (the shared ``topicQueueTable``). Loops over the distinct queues of the
    batch, not over rows.
    """
    if batch.round_robin is not None:
        return _round_robin_offsets(batch, queues, batch.round_robin[1])
    if len(batch.topics) == 1 and batch.n and (batch.queue_id == batch.queue_id[0]).all():
        # one queue (a synchronous send, a client's batch): the rows take the next offsets in
        # order, no grouping (its ~15 numpy calls were half this function's cost under the lock)
        name = f"{batch.topics[0]}/{int(batch.queue_id[0])}"
        first_offset = queues.get(name, 0)
        queues[name] = first_offset + batch.n
        return np.arange(first_offset, first_offset + batch.n, dtype=np.int64)
    qid = batch.queue_id.astype(np.int64)
    span = int(qid.max()) + 1 if batch.n else 1
    if len(batch.topics) * span <= 1 << 16:  # dense keys: group with a bincount, no sort
        dense = batch.topic_index.astype(np.int64) * span + qid
        all_counts = np.bincount(dense, minlength=len(batch.topics) * span)
        groups = np.flatnonzero(all_counts)
        lookup = np.zeros(len(all_counts), np.int64)
        lookup[groups] = np.arange(len(groups))
        inverse = lookup[dense]
        counts = all_counts[groups]
        uniq = ((groups // span) << 32) | (groups % span)
    else:
        key = (batch.topic_index.astype(np.int64) << 32) | qid
        uniq, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    rank = np.empty(batch.n, np.int64)
    if len(uniq) <= 16:  # few queues (the usual case): a running count per queue, no sort
        for g in range(len(uniq)):
            mask = inverse == g
            rank[mask] = np.arange(int(counts[g]))
    else:
        order = np.argsort(inverse, kind="stable")
        group_start = np.zeros(len(uniq), np.int64)
        np.cumsum(counts[:-1], out=group_start[1:])
        rank[order] = np.arange(batch.n) - np.repeat(group_start, counts)
    base = np.empty(len(uniq), np.int64)
    for g, k in enumerate(uniq.tolist()):
        name = f"{batch.topics[k >> 32]}/{k & 0xFFFFFFFF}"
        base[g] = queues.get(name, 0)
        queues[name] = int(base[g] + counts[g])
    return base[inverse] + rank


def _round_robin_offsets(batch: EncodedBatch, queues: MutableMapping[str, int], count: int) -> np.ndarray:
    """:func:`assign_queue_offsets` for one topic whose rows cycle through its ``count`` queues.

    Row ``i`` is in the queue of row ``i % count`` and is the ``i // count``-th row of that
    queue, so its offset is that queue's next offset plus ``i // count``: one broadcast add
    over a (cycles, queues) grid, no grouping (~8x cheaper; it runs under the append lock).
    """
    n, topic = batch.n, batch.topics[0]
    base = []  # per queue of the cycle that has rows
    for k, q in enumerate(batch.queue_id[: min(n, count)].tolist()):
        name = f"{topic}/{q}"
        b = queues.get(name, 0)
        base.append(b)
        queues[name] = b + (n - k + count - 1) // count  # rows k, k+count, ...
    cycles = -(-n // count)  # (one cycle of fewer than count queues when n < count)
    return (np.arange(cycles, dtype=np.int64)[:, None] + np.array(base, np.int64)).ravel()[:n]


#: The thread the commitlog's writes run on while the appending thread encodes the next
#: chunk (CRCs, trailer join, iovecs): both the write syscalls and most of the encoding run
#: without the GIL, so on two cores the copy into the page cache and the encoding overlap.
#: With the C helper, packed chunks go to a :class:`rmqlog._native.ChunkWriter` instead (a
#: thread of its own per pipeline that never takes the GIL: ~17 us less per hand-off).
