"""Every consume queue of one store (RocketMQ's ``consumeQueueTable``): found on disk under
``<root>/consumequeue/<topic>/<queueId>/``, opened on first use, shared by the dispatcher,
readers, recovery and verify of one open store.

A folder counts as a queue only when named as the store names them: a valid topic name, and
a queue id in canonical decimal (:func:`rmqlog.paths.parse_queue_dir_name`); any other name is
never used (a topic folder that is not a valid name is logged and skipped), and neither is a
link or a file with such a name (set aside at open by :mod:`rmqlog.recovery.survey`; one
that appears later is refused, typed, when the queue is used).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from .. import safe_open
from ..log import mapped_file
from ..log.open_files import OpenFiles
from ..paths import StorePaths, parse_queue_dir_name, parse_segment_name, topic_problem
from .consume_queue import CQ_UNIT_SIZE, ConsumeQueue

log = logging.getLogger(__name__)


class ConsumeQueues:
    """The consume queues of the store at ``paths``; ``configured_size``: the store's segment
    size (:mod:`rmqlog.segment_sizes`: its record, else what its files say,
    :func:`segment_size_found`, else the config); ``open_files``: the store's bound on open files, which
    every queue's files share (see :mod:`rmqlog.log.open_files`): a queue object costs no
    descriptor, its files are opened on use and closed when least recently used."""

    def __init__(
        self,
        paths: StorePaths,
        configured_size: int,
        *,
        read_only: bool = False,
        open_files: OpenFiles | None = None,
        settle: Callable[[], int | None] | None = None,
    ) -> None:
        self.paths = paths
        self.read_only = read_only
        self.open_files = open_files
        #: every queue's files are on the volume of ``consumequeue/`` (see :mod:`rmqlog.log.mapped_file`)
        self.bounded_reads = mapped_file.hole_reads_allocate(paths.consumequeue_dir)
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()
        # (the store's size: its record, else what its files say, else the config: rmqlog.segment_sizes)
        self.segment_size = configured_size
        #: a provisional size's settler (:mod:`rmqlog.segment_sizes`: a reader that found
        #: neither the store's record nor a consume-queue file): each queue settles at its
        #: first use once the record or its own files say the size
        self._settle = settle

    def _settled(self) -> int | None:
        settle = self._settle
        size = settle() if settle is not None else None
        if size is not None:
            self.segment_size, self._settle = size, None
        return size

    def get(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The consume queue of (topic, queue id) (no file is created until a unit is written)."""
        key = (topic, int(queue_id))
        cq = self._queues.get(key)
        if cq is None:
            with self._lock:
                cq = self._queues.get(key)
                if cq is None:
                    if self._settle is not None:
                        self._settled()
                    cq = ConsumeQueue(
                        self.paths.queue_dir(topic, queue_id),
                        self.segment_size,
                        read_only=self.read_only,
                        open_files=self.open_files,
                        bounded_reads=self.bounded_reads,
                        settle=self._settled if self._settle is not None else None,
                    )
                    self._queues[key] = cq
        return cq

    def dirs(self) -> Iterator[tuple[str, int, Path]]:
        """(topic, queue id, folder) of every consume queue on disk, sorted (see the module docstring)."""
        return queue_dirs(self.paths)

    def all(self) -> list[ConsumeQueue]:
        """Every consume queue on disk (see :meth:`dirs`)."""
        return [self.get(topic, qid) for topic, qid, _ in self.dirs()]

    def queue_ids(self, topic: str) -> list[int]:
        """The queue ids of ``topic``'s folders on disk, sorted (none if not a valid name)."""
        if topic_problem(topic) is not None:
            return []
        tdir = self.paths.consumequeue_dir / topic
        if not safe_open.is_folder(tdir):
            return []
        ids = [parse_queue_dir_name(name) for name, found in safe_open.entries(tdir) if found == safe_open.FOLDER]
        return sorted(q for q in ids if q is not None)

    def count_on_disk(self, topic: str) -> int:
        """The highest queue folder of ``topic`` plus one (0 if none, or not a valid name)."""
        return max((q + 1 for q in self.queue_ids(topic)), default=0)

    def close(self) -> None:
        """Unmap and close every queue opened through this object."""
        for cq in self._queues.values():
            cq.close()


def queue_dirs(paths: StorePaths) -> Iterator[tuple[str, int, Path]]:
    """(topic, queue id, folder) of every consume queue on disk of the store at ``paths``,
    sorted (see the module docstring)."""
    root = paths.consumequeue_dir
    if not safe_open.is_folder(root):
        return
    for topic, found in safe_open.entries(root):
        if found != safe_open.FOLDER or safe_open.is_set_aside(topic):
            continue
        if topic_problem(topic) is not None:
            log.warning("ignoring %s: not a valid topic name", root / topic)
            continue
        for name, qfound in safe_open.entries(root / topic):
            qid = parse_queue_dir_name(name)
            if qid is not None and qfound == safe_open.FOLDER:
                yield topic, qid, root / topic / name


def segment_size_found(paths: StorePaths, configured: int = 0) -> int | None:
    """The consume-queue segment size the files of the store at ``paths`` say, ``None`` when
    no queue has a file.

    ``configured`` if the first segments of up to 16 queues (folders that are not
    queues ignored) include it, else the most common of their sizes (multiples of a unit):
    one file truncated by a crash does not decide it. A queue's segments of another size
    are then dropped and rebuilt at open (see :mod:`rmqlog.recovery.recovery`).
    """
    sizes: dict[int, int] = {}
    seen = 0
    for _, _, cq in queue_dirs(paths):
        first = min(
            (
                name
                for name, found in safe_open.entries(cq)
                if found == safe_open.FILE and parse_segment_name(name) is not None
            ),
            default=None,
        )
        if first is not None and (n := safe_open.lstat(cq / first).st_size) > 0 and n % CQ_UNIT_SIZE == 0:
            sizes[n] = sizes.get(n, 0) + 1
            seen += 1
            if seen >= 16:
                break
    if not sizes:
        return None
    return configured if configured in sizes else max(sizes, key=lambda n: (sizes[n], n))
