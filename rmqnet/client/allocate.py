"""A consumer group's queues shared among its clients: RocketMQ 4.9.8's
``AllocateMessageQueueAveragely`` (``client/.../consumer/rebalance/``), and the list of a
topic's readable queues across brokers that a rebalance divides.

Every client of a group computes its own share from the same inputs, so all must order them
alike: the queues sorted (topic, broker name, queue id: ``MessageQueue.compareTo``) and the
client ids sorted as strings, as ``RebalanceImpl.rebalanceByTopic`` sorts both before it
calls the strategy. With ``n`` queues and ``c`` clients, client ``i`` (its index among the
sorted ids) takes a contiguous run of the sorted queues: ``n // c`` of them, one more for the
first ``n % c`` clients; with more clients than queues the last ones get nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..remoting.names import PERM_READ
from ..remoting.route import TopicRouteData
from .latency import QueueRef


def read_queues(topic: str, route: TopicRouteData) -> list[QueueRef]:
    """The readable queues of ``route`` (every broker with the read perm, queues
    ``0..readQueueNums-1``: ``topicRouteData2TopicSubscribeInfo``), sorted."""
    return sorted(
        QueueRef(topic, q.broker_name, i)
        for q in route.queue_datas
        if q.perm & PERM_READ
        for i in range(q.read_queue_nums)
    )


def allocate_averagely(
    group: str, current_cid: str, mq_all: Sequence[QueueRef], cid_all: Sequence[str]
) -> list[QueueRef]:
    """``current_cid``'s share of ``mq_all`` among ``cid_all`` (both already sorted, as the
    rebalance passes them). ``ValueError`` for an empty ``current_cid``, ``mq_all`` or
    ``cid_all`` (Java's ``IllegalArgumentException``); an empty share when ``current_cid`` is
    not among ``cid_all`` (Java logs it and allocates nothing)."""
    if not current_cid:
        raise ValueError(f"group {group!r}: currentCID is empty")
    if not mq_all:
        raise ValueError(f"group {group!r}: mqAll is null or mqAll empty")
    if not cid_all:
        raise ValueError(f"group {group!r}: cidAll is null or cidAll empty")
    if current_cid not in cid_all:
        return []
    n, c = len(mq_all), len(cid_all)
    index = list(cid_all).index(current_cid)
    mod = n % c
    if n <= c:
        average = 1
    elif mod > 0 and index < mod:
        average = n // c + 1
    else:
        average = n // c
    start = index * average if mod > 0 and index < mod else index * average + mod
    return [mq_all[(start + i) % n] for i in range(min(average, n - start))]
