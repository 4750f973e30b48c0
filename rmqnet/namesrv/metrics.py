"""The name server's ``/metrics`` (``rmqlog namesrv --metrics-listen HOST:PORT``; RocketMQ 5's
name server has none, so the figures and the option are ours, in RocketMQ 5's naming).

Every series carries ``node_type`` (``nameserver``) and ``node_id`` (the address it listens
on). Figures: ``rocketmq_rpc_latency`` (its answers by request and response code, as the
broker's), ``rocketmq_namesrv_brokers`` (live registered brokers by cluster),
``rocketmq_topic_number`` (topics routed) and ``rocketmq_connections`` (open connections).
All are read from memory when a scrape asks; the request path only counts its answers
(:class:`rmqnet.metrics.RpcLatency`). ``prometheus_client`` is imported only when the option
is given (the name server's footprint: ``tests/wire/test_namesrv_footprint.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from ..metrics import RPC_BUCKETS_MS, code_name
from ..metrics.exposition import MetricsEndpoint, gauge, histogram, render

if TYPE_CHECKING:
    from .process import NameServerProcess


def families(proc: NameServerProcess) -> Iterator[Metric]:
    """One scrape's families of the name server ``proc``."""
    base = ["node_type", "node_id"]
    node = ["nameserver", proc.address]
    yield histogram(
        "rocketmq_rpc_latency",
        "Time from a request's read to its answer (ms)",
        [*base, "protocol_type", "request_code", "response_code", "is_long_polling", "result"],
        RPC_BUCKETS_MS,
        (
            ([*node, "remoting", code_name(c), code_name(r, response=True), "false", "success"], cell[:-1], cell[-1])
            for (c, r, _), cell in sorted(proc.rpc.series().items())
        ),
    )
    routes = proc.server.routes
    cluster_of = {addr: data.cluster for data in list(routes.brokers.values()) for addr in data.broker_addrs.values()}
    per_cluster: dict[str, int] = dict.fromkeys(list(routes.clusters), 0)
    for addr in list(routes.live):
        cluster = cluster_of.get(addr)
        if cluster is not None:
            per_cluster[cluster] = per_cluster.get(cluster, 0) + 1
    yield gauge(
        "rocketmq_namesrv_brokers",
        "Live registered brokers (ours)",
        [*base, "cluster"],
        (([*node, c], n) for c, n in sorted(per_cluster.items())),
    )
    yield gauge("rocketmq_topic_number", "Topics routed", base, [(node, len(routes.topics))])
    yield gauge("rocketmq_connections", "Open connections (ours)", base, [(node, len(proc.remoting.connections))])


def endpoint(proc: NameServerProcess, host: str, port: int) -> MetricsEndpoint:
    """The name server's ``/metrics`` on ``host:port``, not started."""
    return MetricsEndpoint(lambda: render(lambda: families(proc)), host, port)
