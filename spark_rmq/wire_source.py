"""The ``rmqlog`` source over the wire (option ``nameServer``): the driver's side.

With ``nameServer`` in place of ``path``, the driver plans from the brokers instead of a
store's files: the queues of a topic are those of its route (every broker group of the route
with the read perm and an address, master or slave: queues ``0 .. readQueueNums-1``), their
first and end offsets are asked of each queue's broker group (``GET_MIN_OFFSET`` 31,
``GET_MAX_OFFSET`` 30), ``startingTimestamp`` / ``endingTimestamp`` resolve through
``SEARCH_OFFSET_BY_TIMESTAMP`` (29), and ``group`` commits through ``UPDATE_CONSUMER_OFFSET``
(15). A group is asked by its broker name (:class:`rmqnet.client.Admin`): its master, else
(gone, or out of reach) its slave, whose commitlog and queue offsets are the master's, so a
group whose master was killed keeps its queues and their offsets. Executors pull their ranges
(:mod:`spark_rmq.wire_read`), from the slave too.

**Queue keys.** A queue over the wire is RocketMQ's ``MessageQueue``: topic, broker name and
queue id. Offsets (the checkpoint, ``startingOffsets`` JSON) are keyed
``"topic/brokerName/queueId"``. Inside the planner a queue is the pair
``("topic/brokerName", queueId)``, so the planning functions of :mod:`spark_rmq.offsets`
(which key a queue as ``f"{name}/{queueId}"``) serve both kinds of source unchanged:
:class:`BrokerQueues` answers them as a store does. Broker names come from the network and
are checked (:func:`spark_rmq.options.broker_name_problem`) before they become part of a key.

What differs from a store's files: no dispatch or delivery by the driver (each broker runs
its own), ``maxBytesPerTrigger`` is refused (RocketMQ has no request for the record sizes of a
range of a consume queue), and a broker that cannot be reached fails the planning call with
the client's error (Spark then fails or retries the trigger as for any source error), once
every address of its group failed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
from pyspark.sql.datasource import InputPartition

from rmqlog import WAITING_TOPICS
from rmqnet.client import AUTO_CREATE_TOPIC, PERM_READ, Admin, NoRouteError, TopicNotFoundError, TopicRouteData

from .errors import RmqLogOptionError
from .offsets import queue_key, split_key
from .options import SourceOptions, broker_name_problem
from .wire_read import WireKeyLookup, WireRange

log = logging.getLogger(__name__)


def wire_queue(topic: str, broker: str, queue_id: int) -> tuple[str, int]:
    """The planner's name of a queue over the wire (module docstring)."""
    return f"{topic}/{broker}", int(queue_id)


def split_wire_name(name: str) -> tuple[str, str]:
    """``"topic/brokerName"`` -> ``(topic, brokerName)``."""
    topic, _, broker = name.partition("/")
    return topic, broker


def split_wire_key(key: str) -> tuple[str, str, int]:
    """``"topic/brokerName/queueId"`` -> ``(topic, brokerName, queueId)``."""
    name, qid = split_key(key)
    topic, broker = split_wire_name(name)
    return topic, broker, qid


class BrokerQueues:
    """The brokers of a name server as the queue source
    (:class:`spark_rmq.queue_source.QueueSource`), answering the planner's questions as a store
    does (``min_offset``, ``max_offset``, ``offset_for_timestamp``, ``commit_offset``, over
    queue names ``"topic/brokerName"``); one :class:`rmqnet.client.Admin` (its connections are
    made on first use and made again after a broker restarts; its down-marks keep a dead
    master out of the questions that follow)."""

    def __init__(self, opts: SourceOptions) -> None:
        assert opts.name_server is not None
        self.opts = opts
        self.name_server = opts.name_server
        self.admin = Admin(opts.name_server)

    def close(self) -> None:
        self.admin.close()

    def refresh(self, *, deliver: bool) -> None:
        """Nothing: each broker dispatches and delivers by itself."""

    # ---- discovery ---------------------------------------------------------------------

    def topics(self) -> list[str]:
        """The topics the query reads now: ``topics``, ``assign``'s, or the name server's topic
        list (206) matched by ``topicPattern`` (TBW102 and the store's waiting topics never)."""
        opts = self.opts
        if opts.assign is not None:
            return [t for t, _ in opts.assign]
        if opts.topics is not None:
            return list(opts.topics)
        pattern = re.compile(opts.topic_pattern or "")
        # (every topic the name servers know: GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 206)
        return sorted(
            t
            for t in self.admin.topic_list()
            if pattern.fullmatch(t) and t not in WAITING_TOPICS and t != AUTO_CREATE_TOPIC  # (a template topic)
        )

    def queues(self) -> list[tuple[str, int]]:
        """The queues (planner names) of the query now: every readable queue of each topic's
        route; a topic the name servers do not know has none yet (it may appear later)."""
        opts = self.opts
        wanted = dict(opts.assign) if opts.assign is not None else None
        out: list[tuple[str, int]] = []
        for topic in self.topics():
            try:
                route = self.admin.route(topic)
            except TopicNotFoundError:
                continue
            for broker, count in self._readable(topic, route):
                qids: Iterable[int] = range(count)
                if wanted is not None:
                    qids = [q for q in wanted[topic] if q < count]
                out.extend(wire_queue(topic, broker, q) for q in qids)
        return sorted(out)

    @staticmethod
    def _readable(topic: str, route: TopicRouteData) -> list[tuple[str, int]]:
        """(broker name, read queues) of every group of ``route`` that can be read: the read
        perm and an address (its master, or only a slave: a group whose master is gone)."""
        addressed = {b.broker_name for b in route.broker_datas if b.broker_addrs}
        out = []
        for q in route.queue_datas:
            problem = broker_name_problem(q.broker_name)
            if problem is not None:
                log.warning("rmqlog: topic %s: a route names a broker that cannot be read: %s", topic, problem)
                continue
            if q.perm & PERM_READ and q.broker_name in addressed:
                out.append((q.broker_name, q.read_queue_nums))
        return out

    def reachable_bounds(self, queues: list[tuple[str, int]]) -> dict[str, tuple[int, int]]:
        """(first, end) of each queue whose broker answers; a broker out of reach (refused,
        timed out, gone from the route: a restart, a failure) is skipped with a warning, and
        not asked again for its other queues in this call. The stream then leaves its queues
        where they stand until it is back."""
        out: dict[str, tuple[int, int]] = {}
        down: set[str] = set()
        for name, qid in queues:
            broker = split_wire_name(name)[1]
            if broker in down:
                continue
            try:
                out[queue_key(name, qid)] = (self.min_offset(name, qid), self.max_offset(name, qid))
            except (OSError, NoRouteError, TopicNotFoundError) as exc:  # the transport's errors are OSErrors
                down.add(broker)  # (every address of the group failed: master and slaves)
                log.warning(
                    "rmqlog: broker %s is out of reach (%s: %s); its queues wait", broker, type(exc).__name__, exc
                )
        return out

    # ---- what the planner asks (as rmqlog.MessageStore) --------------------------------

    def min_offset(self, name: str, queue_id: int) -> int:
        topic, broker = split_wire_name(name)
        return self.admin.min_offset(broker, topic, queue_id)

    def max_offset(self, name: str, queue_id: int) -> int:
        topic, broker = split_wire_name(name)
        return self.admin.max_offset(broker, topic, queue_id)

    def offset_for_timestamp(self, name: str, queue_id: int, ts_ms: int) -> int:
        topic, broker = split_wire_name(name)
        return self.admin.search_offset(broker, topic, queue_id, ts_ms)

    def record_sizes(self, name: str, queue_id: int, start: int, end: int) -> np.ndarray:
        raise RmqLogOptionError(
            "maxBytesPerTrigger",
            "is not available with nameServer (RocketMQ has no request "
            "for the record sizes of a consume queue's range)",
        )

    def commit_offset(self, group: str, name: str, queue_id: int, offset: int) -> None:
        """The group's offset on the queue's broker group: its master, else its slave."""
        topic, broker = split_wire_name(name)
        self.admin.update_offset(broker, group, topic, queue_id, offset)

    # ---- the partitions: pulled by the executors (spark_rmq.wire_read) -------------------

    def partitions(self, opts: SourceOptions, ranges: list[tuple[str, int, int]], **kw: Any) -> list[InputPartition]:
        """One :class:`~spark_rmq.wire_read.WireRange` per planned range."""
        tags = tuple(sorted(opts.tags)) if opts.tags else None
        parts: list[InputPartition] = []
        for key, a, b in ranges:
            topic, broker, qid = split_wire_key(key)
            parts.append(
                WireRange(
                    self.name_server,
                    topic,
                    broker,
                    qid,
                    a,
                    b,
                    tags,
                    opts.fail_on_data_loss,
                    opts.read_batch_rows,
                    sql92=opts.sql92,
                    columns=opts.columns,
                    **kw,
                )
            )
        return parts

    def key_lookup(self, topics: tuple[str, ...]) -> InputPartition:
        opts = self.opts
        return WireKeyLookup(
            self.name_server, topics, opts.msg_id or opts.key or "", opts.msg_id is not None, opts.columns
        )

    def empty_partition(self) -> InputPartition:
        return WireRange(self.name_server, "", "", 0, 0, 0, columns=self.opts.columns)


def refuse_wire_options(opts: SourceOptions) -> None:
    """Options the wire cannot honour, refused when the reader is made
    (:func:`spark_rmq.queue_source.backend_for`)."""
    if opts.max_bytes is not None:
        raise RmqLogOptionError(
            "maxBytesPerTrigger",
            "is not available with nameServer (RocketMQ has no request "
            "for the record sizes of a consume queue's range)",
        )
