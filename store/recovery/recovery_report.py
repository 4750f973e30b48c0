"""What recovery reports (:class:`RecoveryReport`, ``MessageStore.recovery``) and what its
walk found (:class:`Walked`: the records, their queues and queue offsets), shared by
:mod:`rmqlog.recovery.recovery` and :mod:`rmqlog.recovery.queue_repair`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..log.decode import RecordColumns
from ..log.record import is_consumable


@dataclass
class RecoveryReport:
    """What recovery found and did (``MessageStore.recovery``)."""

    abnormal: bool
    walk_start: int = 0
    log_end: int = 0  # W
    published: int | None = None  # P
    flushed: int | None = None  # F
    end: int = 0  # E
    dropped_bytes: int = 0
    redispatched: int = 0
    state_rebuilt: bool = False
    index_files_dropped: list[str] = field(default_factory=list)
    index_entries_cut: int = 0
    reindexed: int = 0  # records fed to the index before the dispatch went on
    problems: list[str] = field(default_factory=list)


@dataclass
class Walked:
    """The records the walk found: absolute offsets, TOTALSIZEs, whether each gets a unit, and
    its queue (an id in :attr:`queue_ids`) and QUEUEOFFSET."""

    positions: list[np.ndarray] = field(default_factory=list)
    sizes: list[np.ndarray] = field(default_factory=list)
    consumable: list[np.ndarray] = field(default_factory=list)
    queues: list[np.ndarray] = field(default_factory=list)
    queue_offsets: list[np.ndarray] = field(default_factory=list)
    queue_ids: dict[tuple[str, int], int] = field(default_factory=dict)

    def add(self, base: int, positions: np.ndarray, sizes: np.ndarray, cols: RecordColumns) -> None:
        """Note a run of records decoded at ``positions`` (relative to ``base``)."""
        h = cols.header
        enc = cols.topic.dictionary_encode()
        topics = enc.dictionary.to_pylist()
        key = (np.asarray(enc.indices, np.int64) << 32) | h["queueId"].astype(np.int64)
        uniq, inverse = np.unique(key, return_inverse=True)
        ids = np.array(
            [self.queue_ids.setdefault((topics[k >> 32], k & 0xFFFFFFFF), len(self.queue_ids)) for k in uniq.tolist()],
            np.int64,
        )  # one step per queue
        self.positions.append(positions.astype(np.int64) + base)
        self.sizes.append(sizes.astype(np.int64))
        self.consumable.append(np.asarray(is_consumable(h["sysFlag"]), bool))
        self.queues.append(ids[inverse] if len(ids) else np.zeros(0, np.int64))
        self.queue_offsets.append(h["queueOffset"].astype(np.int64))

    def arrays(self, end: int) -> tuple[np.ndarray, ...]:
        """(positions, sizes, consumable, queue ids, queue offsets) of the records below ``end``."""

        def cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dtype)

        pos, size = cat(self.positions, np.int64), cat(self.sizes, np.int64)
        keep = pos + size <= end
        return (
            pos[keep],
            size[keep],
            cat(self.consumable, bool)[keep],
            cat(self.queues, np.int64)[keep],
            cat(self.queue_offsets, np.int64)[keep],
        )
