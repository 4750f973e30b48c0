"""The broker's ``/metrics`` (``metricsExporterType=PROM``): its figures
(:class:`rmqnet.broker.metrics.BrokerMetrics`) as RocketMQ 5's metric families, and the
endpoint on ``metricsPromExporterHost:metricsPromExporterPort``.

Every series carries RocketMQ 5's common labels ``cluster``, ``node_type`` (``broker``) and
``node_id`` (the broker's name). Names, labels and meanings: docs/metrics.md. A scrape reads
copies of the counters and the figures cached for a few seconds (:meth:`BrokerMetrics.lag`,
:meth:`BrokerMetrics.store_figures`); it never waits for the event loop, which keeps serving
while it renders.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric

from ..metrics import RPC_BUCKETS_MS, code_name
from ..metrics.exposition import MetricsEndpoint, counter, gauge, histogram, render
from ..remoting import RequestCode
from ..remoting.names import is_retry_topic
from .metrics import MESSAGE_SIZE_BUCKETS, Lag, StoreFigures

if TYPE_CHECKING:
    from .broker import Broker


class BrokerPage:
    """The body of the broker's ``/metrics``: the counters rendered at every scrape, the
    figures computed at read time (:meth:`BrokerMetrics.lag`, :meth:`BrokerMetrics.store_figures`)
    rendered once per computation and kept with it (with thousands of groups their rendering
    is most of a scrape's cost)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._made_of: tuple[object, object] | None = None
        self._cached = b""
        #: renderings of the read-time figures (a test counts them)
        self.renders = 0

    def __call__(self) -> bytes:
        m = self.broker.metrics
        lag, store = m.lag(), m.store_figures()
        if self._made_of is None or self._made_of[0] is not lag or self._made_of[1] is not store:
            self._cached = render(lambda: read_time_families(self.broker, lag, store))
            self._made_of = (lag, store)
            self.renders += 1
        return render(lambda: counter_families(self.broker)) + self._cached


def families(broker: Broker) -> Iterator[Metric]:
    """Every family of ``broker`` (see docs/metrics.md)."""
    m = broker.metrics
    yield from counter_families(broker)
    yield from read_time_families(broker, m.lag(), m.store_figures())


def counter_families(broker: Broker) -> Iterator[Metric]:
    """The families counted on the request path, and the small gauges read from memory."""
    m = broker.metrics
    cfg = broker.config
    base = ["cluster", "node_type", "node_id"]
    node = [cfg.broker_cluster_name, "broker", cfg.broker_name]
    sends = m.sends.copy()
    pulls = m.pulls.copy()
    in_labels = [*base, "topic", "message_type", "is_system"]
    in_rows = [([*node, t, k, _b(m.is_system(t))], c) for (t, k), c in sorted(sends.items())]
    yield counter(
        "rocketmq_messages_in",
        "Messages stored by sends (retry and DLQ topics excluded)",
        in_labels,
        ((v, c[0]) for v, c in in_rows),
    )
    yield counter("rocketmq_throughput_in", "Body bytes stored by sends", in_labels, ((v, c[1]) for v, c in in_rows))
    yield histogram(
        "rocketmq_message_size",
        "Message size (bytes): a send request's average body size",
        in_labels,
        MESSAGE_SIZE_BUCKETS,
        ((v, c[2:-1], c[-1]) for v, c in in_rows),
    )
    out_labels = [*base, "topic", "consumer_group", "is_system"]
    out_rows = [([*node, t, g, _b(m.is_system(t))], c) for (t, g), c in sorted(pulls.items())]
    yield counter("rocketmq_messages_out", "Messages pulled by consumers", out_labels, ((v, c[0]) for v, c in out_rows))
    yield counter(
        "rocketmq_throughput_out", "Record bytes pulled by consumers", out_labels, ((v, c[1]) for v, c in out_rows)
    )

    rpc_labels = [*base, "protocol_type", "request_code", "response_code", "is_long_polling", "result"]
    yield histogram(
        "rocketmq_rpc_latency",
        "Time from a request's read to its answer (ms)",
        rpc_labels,
        RPC_BUCKETS_MS,
        (
            ([*node, "remoting", code_name(c), code_name(r, response=True), _b(held), "success"], cell[:-1], cell[-1])
            for (c, r, held), cell in sorted(m.rpc.series(_HELD_CODES).items())
        ),
    )
    yield from _clients(broker, base, node)
    yield gauge(
        "rocketmq_processor_watermark",
        "Requests waiting for their processor",
        [*base, "processor"],
        [([*node, "send"], broker.sender.waiting)],
    )
    yield gauge("rocketmq_pull_held_requests", "Pulls held by long polling (ours)", base, [(node, len(broker.holds))])
    connections = broker.connection_count
    yield gauge(
        "rocketmq_connections",
        "Open client connections (ours)",
        base,
        [(node, connections() if connections is not None else 0)],
    )
    yield gauge("rocketmq_topic_number", "Topics of this broker", base, [(node, broker.topics.count())])
    yield gauge(
        "rocketmq_consumer_group_number",
        "Subscription groups of this broker",
        base,
        [(node, len(broker.subscription_groups))],
    )
    yield gauge(
        "rocketmq_broker_permission", "The broker's permission (4 read, 2 write)", base, [(node, cfg.broker_permission)]
    )


def read_time_families(broker: Broker, lag: Lag, store: StoreFigures) -> Iterator[Metric]:
    """The families of the figures computed at read time (``lag``, ``store``)."""
    cfg = broker.config
    base = ["cluster", "node_type", "node_id"]
    node = [cfg.broker_cluster_name, "broker", cfg.broker_name]
    lag_labels = [*base, "topic", "consumer_group", "is_retry", "is_system"]
    lag_rows = [
        ([*node, t, g, _b(is_retry_topic(t)), _b(lag.system[(t, g)])], r) for (t, g), r in sorted(lag.rows.items())
    ]
    yield gauge(
        "rocketmq_consumer_lag_messages",
        "Messages not yet committed by the group",
        lag_labels,
        ((v, r[0]) for v, r in lag_rows),
    )
    yield gauge(
        "rocketmq_consumer_inflight_messages",
        "Messages pulled and not yet committed",
        lag_labels,
        ((v, r[1]) for v, r in lag_rows),
    )
    yield gauge(
        "rocketmq_consumer_ready_messages", "Messages not yet pulled", lag_labels, ((v, r[2]) for v, r in lag_rows)
    )
    yield gauge(
        "rocketmq_consumer_lag_latency",
        "Now minus the store time of the oldest message not committed (ms)",
        lag_labels,
        ((v, r[3]) for v, r in lag_rows),
    )
    yield gauge(
        "rocketmq_consumer_lag_series_dropped",
        "(topic, group) pairs left out of the lag figures (more than the cap)",
        base,
        [(node, lag.dropped)],
    )

    storage = [*base, "storage_type", "storage_medium"]
    where = [*node, "local", "disk"]
    yield gauge("rocketmq_storage_size", "Bytes used on the store's volume", storage, [(where, store.storage_size)])
    yield gauge(
        "rocketmq_storage_flush_behind_bytes",
        "Bytes published and not yet flushed",
        storage,
        [(where, store.flush_behind)],
    )
    yield gauge(
        "rocketmq_storage_dispatch_behind_bytes",
        "Bytes published and not yet dispatched to the consume queues",
        storage,
        [(where, store.dispatch_behind)],
    )


def _clients(broker: Broker, base: list[str], node: list[str]) -> Iterator[Metric]:
    """RocketMQ 5's connection gauges, from the client registry (one pass over its clients)."""
    registry = broker.consumers
    producers: dict[tuple[str, str], int] = {}
    for clients in list(registry.producer_groups.values()):
        for c in list(clients.values()):
            key = (c.language, str(c.version))
            producers[key] = producers.get(key, 0) + 1
    consumers: dict[tuple[str, str, str, str, str], int] = {}
    for group, info in list(registry.consumer_groups.items()):
        mode = "push" if info.consume_type == "CONSUME_PASSIVELY" else "pull"
        for c in list(info.clients.values()):
            key2 = (group, c.language, str(c.version), mode, _b(group.startswith("CID_RMQ_SYS_")))
            consumers[key2] = consumers.get(key2, 0) + 1
    yield gauge(
        "rocketmq_producer_connections",
        "Producer connections",
        [*base, "language", "version", "protocol_type"],
        (([*node, lang, ver, "remoting"], n) for (lang, ver), n in sorted(producers.items())),
    )
    yield gauge(
        "rocketmq_consumer_connections",
        "Consumer connections",
        [*base, "consumer_group", "language", "version", "consume_mode", "is_system", "protocol_type"],
        (([*node, *k, "remoting"], n) for k, n in sorted(consumers.items())),
    )


#: the codes whose awaited answers are long polling (``is_long_polling``): a held pull
_HELD_CODES = frozenset({int(RequestCode.PULL_MESSAGE)})


def _b(flag: bool) -> str:
    return "true" if flag else "false"


def endpoint(broker: Broker, host: str | None = None, port: int | None = None) -> MetricsEndpoint:
    """The broker's ``/metrics`` endpoint on ``metricsPromExporterHost:metricsPromExporterPort``
    (or ``host``/``port``), not started."""
    cfg = broker.config
    return MetricsEndpoint(
        BrokerPage(broker),
        cfg.metrics_prom_exporter_host if host is None else host,
        cfg.metrics_prom_exporter_port if port is None else port,
    )
