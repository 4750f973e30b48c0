"""``/metrics`` in Prometheus's text format: a server's figures through ``prometheus_client``.

A server hands :class:`MetricsEndpoint` a function that yields ``prometheus_client`` metric
families (``CounterMetricFamily``, ``GaugeMetricFamily``, ``HistogramMetricFamily``) built
from its own figures at the moment of the scrape (a custom collector: nothing is copied into
the library's own counters on the request path). ``prometheus_client`` renders them
(``generate_latest``: names, ``# HELP``/``# TYPE``, label escaping, histogram ``_bucket``,
``_sum`` and ``_count``).

The endpoint serves ``GET /metrics`` (and ``/``) on a thread of its own: ``prometheus_client``'s
own HTTP server (``start_http_server``: a ``ThreadingHTTPServer`` of the standard library), on
``host`` (127.0.0.1 by default) and ``port`` (0: any free port, read :attr:`MetricsEndpoint.port`).
A scrape never runs on the event loop: the loop keeps serving requests while the scrape
renders (docs/decisions.md, "Metrics: a thread of its own": the loop form measured against it).
:meth:`MetricsEndpoint.start` raises ``OSError`` when the address cannot be bound.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

#: what a server gives the endpoint: the families of one scrape
Families = Callable[[], Iterable[Metric]]


class _Collector:
    """``prometheus_client``'s collector protocol over a :data:`Families` function."""

    def __init__(self, families: Families) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families()

    def describe(self) -> list[Metric]:
        return []  # (no families at registration: they are made per scrape)


def registry_of(families: Families) -> CollectorRegistry:
    """A registry holding only ``families`` (no process or platform collectors: every series
    on the page is the server's)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(families))
    return registry


def render(families: Families) -> bytes:
    """One scrape's page, as ``/metrics`` serves it."""
    return bytes(generate_latest(registry_of(families)))


class MetricsEndpoint:
    """``/metrics`` of ``families`` on ``host:port`` (see the module docstring)."""

    def __init__(self, families: Families, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.requested_port = port
        self.registry = registry_of(families)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        assert self._server is not None, "the endpoint is not started"
        return int(self._server.server_address[1])

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> None:
        """Listen and serve on a daemon thread; ``OSError`` when the address cannot be bound."""
        self._server, self._thread = start_http_server(self.requested_port, addr=self.host, registry=self.registry)

    def stop(self) -> None:
        """Stop serving and close the socket (a scrape in progress finishes first)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


# ---------------------------------------------------------------- family builders
def counter(name: str, doc: str, labels: Sequence[str], rows: Iterable[tuple[Sequence[str], float]]) -> Metric:
    """A counter family ``name`` (exposed as ``name_total``; give it without ``_total``)."""
    family = CounterMetricFamily(name, doc, labels=list(labels))
    for values, value in rows:
        family.add_metric(list(values), value)
    return family


def gauge(name: str, doc: str, labels: Sequence[str], rows: Iterable[tuple[Sequence[str], float]],
          unit: str = "") -> Metric:
    family = GaugeMetricFamily(name, doc, labels=list(labels), unit=unit)
    for values, value in rows:
        family.add_metric(list(values), value)
    return family


def histogram(name: str, doc: str, labels: Sequence[str], bounds: Sequence[float],
              rows: Iterable[tuple[Sequence[str], Sequence[float], float]]) -> Metric:
    """A histogram family from per-bucket counts (not cumulative: ``len(bounds) + 1`` of them,
    the last past every bound) and the sum; cumulated here, as the format wants."""
    family = HistogramMetricFamily(name, doc, labels=list(labels))
    for values, counts, total in rows:
        buckets: list[tuple[str, float]] = []
        running = 0.0
        for bound, n in zip([*map(_bound, bounds), "+Inf"], counts, strict=True):
            running += n
            buckets.append((bound, running))
        family.add_metric(list(values), buckets, total)
    return family


def _bound(value: float) -> str:
    return str(float(value))


def common(labels: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The names and values of the labels every series of a server carries."""
    return list(labels), list(labels.values())
