"""What the source's readers ask of where the queues are: the queue-source interface, and the
one place that picks its implementation from the options.

Two implementations answer it: a store's files (option ``path``,
:class:`spark_rmq.store_queues.StoreQueues`) and the brokers of name servers (option
``nameServer``, :class:`spark_rmq.wire_source.BrokerQueues`, through :mod:`rmqnet.client`).
The readers (:mod:`spark_rmq.batch_reader`, :mod:`spark_rmq.stream_reader`) plan, admit and
commit over either the same way; the partitions a source makes read themselves on the
executors (:class:`spark_rmq.read.Readable`), so no reader knows which kind it holds.

Queues are named as the planning functions of :mod:`spark_rmq.offsets` key them: a pair
``(name, queueId)`` whose name starts with the topic (``"topic"`` in a store,
``"topic/brokerName"`` over the wire, :func:`spark_rmq.offsets.topic_of`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pyspark.sql.datasource import InputPartition

from .offsets import QueueOffsets
from .options import SourceOptions
from .store_queues import StoreQueues


class QueueSource(QueueOffsets, Protocol):
    """Where a query's queues are, as planning on the driver needs them (one per planning call
    of a batch read, one for a stream's life; :meth:`close` ends it)."""

    def refresh(self, *, deliver: bool) -> None:
        """Make what was written readable before planning (a store: deliver what is due when
        ``deliver``, then dispatch, unless ``readOnly``; brokers do both by themselves)."""

    def queues(self) -> list[tuple[str, int]]:
        """The queues the query reads now (topics and queues may appear later)."""

    def reachable_bounds(self, queues: list[tuple[str, int]]) -> dict[str, tuple[int, int]]:
        """(first, end) of each queue that can be asked now (over the wire: a broker out of
        reach leaves its queues out, warned; a stream leaves them where they stand)."""

    def commit_offset(self, group: str, name: str, queue_id: int, offset: int) -> None:
        """Publish ``group``'s offset on a queue (for RocketMQ's lag tools)."""

    def partitions(self, opts: SourceOptions, ranges: list[tuple[str, int, int]], **kw: Any) -> list[InputPartition]:
        """One partition per planned range (``kw``: the batch's store-time cut)."""

    def key_lookup(self, topics: tuple[str, ...]) -> InputPartition:
        """The one partition of the batch options ``key`` / ``msgId`` over ``topics``."""

    def empty_partition(self) -> InputPartition:
        """A partition that reads nothing (a batch with no range: Spark wants one)."""

    def close(self) -> None: ...


def backend_for(opts: SourceOptions) -> Callable[[SourceOptions], QueueSource]:
    """The queue source the options name: a store's files (``path``) or brokers
    (``nameServer``, whose refused options are refused here). Picked once, when a reader is
    made; a class, so a reader that travels to the executors carries it by reference.

    The network side is imported only for brokers: executors given the ``--py-files`` zip
    (``rmqlog`` and ``spark_rmq``: :mod:`spark_rmq.shipping`) read a store's files without it."""
    if opts.name_server is None:
        return StoreQueues
    from .wire_source import BrokerQueues, refuse_wire_options

    refuse_wire_options(opts)
    return BrokerQueues
