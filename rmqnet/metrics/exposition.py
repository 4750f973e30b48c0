"""``/metrics`` in Prometheus's text format: a server's figures through ``prometheus_client``.

A server builds ``prometheus_client`` metric families (``CounterMetricFamily``,
``GaugeMetricFamily``, ``HistogramMetricFamily``) from its own figures when a scrape asks (a
custom collector: nothing is copied into the library's own counters on the request path), and
``prometheus_client`` renders them (:func:`render`: ``generate_latest``, with names,
``# HELP``/``# TYPE``, label escaping, histogram ``_bucket``, ``_sum`` and ``_count``). A page
may join pieces rendered at different times (the broker renders its lag figures once per
computation, not once per scrape): each family appears in one piece.

:class:`MetricsEndpoint` serves ``GET /metrics`` (and ``/``) on a thread of its own (the
standard library's ``ThreadingHTTPServer``), on ``host`` (127.0.0.1 by default) and ``port``
(0: any free port, read :attr:`MetricsEndpoint.port`); a page that fails to render is a 500
naming the error (logged), never a traceback on the page. A scrape never runs on the event
loop (docs/decisions.md, "gRPC, metrics and the console": the loop form measured against
it, kept as :attr:`MetricsEndpoint.on_loop` for that measurement).
:meth:`MetricsEndpoint.start` raises ``OSError`` when the address cannot be bound.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

log = logging.getLogger(__name__)

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
    """``/metrics`` of ``page`` on ``host:port`` (see the module docstring). ``page()``
    returns one scrape's body (:func:`render` of the server's families, or pieces of it
    rendered at different times: each family must appear once)."""

    #: serve on the running event loop instead of a thread (the form measured against the
    #: thread, docs/decisions.md; ``jobs/bench_metrics.py --forms loop``): a scrape then
    #: renders between two turns of the loop
    on_loop = False

    def __init__(self, page: Callable[[], bytes], host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.requested_port = port
        self.page = page
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._loop_server: asyncio.Server | None = None
        #: scrapes answered (either form)
        self.scrapes = 0

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._loop_server is not None:
            return int(self._loop_server.sockets[0].getsockname()[1])
        assert self._server is not None, "the endpoint is not started"
        return int(self._server.server_address[1])

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def _body(self, path: str) -> tuple[int, bytes]:
        if path.split("?")[0] not in ("/metrics", "/"):
            return 404, b"not found\n"
        body = self.page()
        self.scrapes += 1
        return 200, body

    def start(self) -> None:
        """Listen and serve on a daemon thread; ``OSError`` when the address cannot be bound."""
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                try:
                    status, body = endpoint._body(self.path)
                except Exception as exc:  # a figure that failed: said, never a traceback on the page
                    if isinstance(exc, OSError) or type(exc).__module__.startswith("rmqlog"):
                        log.error("rendering /metrics failed: %s: %s", type(exc).__name__, exc)  # (typed: no traceback)
                    else:
                        log.exception("rendering /metrics failed")
                    status, body = 500, f"{type(exc).__name__}: {exc}\n".encode()
                self.send_response(status)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
                pass  # (no line per scrape on stderr)

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        server_class = type("Server", (ThreadingHTTPServer,), {"address_family": family, "daemon_threads": True})
        self._server = server_class((self.host, self.requested_port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="rmq-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket (a scrape in progress finishes first)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    async def serve(self) -> None:
        """Start in the form :attr:`on_loop` says (the thread by default); ``OSError`` when the
        address cannot be bound."""
        if not self.on_loop:
            self.start()
            return
        self._loop_server = await asyncio.start_server(self._answer, self.host, self.requested_port)

    async def close(self) -> None:
        """Stop either form."""
        if self._loop_server is not None:
            self._loop_server.close()
            await self._loop_server.wait_closed()
            self._loop_server = None
        self.stop()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One HTTP/1.1 request on the loop: ``GET /metrics`` (or ``/``) rendered, else 404."""
        try:
            line = await reader.readline()
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            parts = line.split()
            status, body = self._body(parts[1].decode("latin-1") if len(parts) > 1 else "")
            writer.write(
                f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\nContent-Type: "
                f"{CONTENT_TYPE_LATEST}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


# ---------------------------------------------------------------- family builders
def counter(name: str, doc: str, labels: Sequence[str], rows: Iterable[tuple[Sequence[str], float]]) -> Metric:
    """A counter family ``name`` (exposed as ``name_total``; give it without ``_total``)."""
    family = CounterMetricFamily(name, doc, labels=list(labels))
    for values, value in rows:
        family.add_metric(list(values), value)
    return family


def gauge(
    name: str, doc: str, labels: Sequence[str], rows: Iterable[tuple[Sequence[str], float]], unit: str = ""
) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=list(labels), unit=unit)
    for values, value in rows:
        family.add_metric(list(values), value)
    return family


def histogram(
    name: str,
    doc: str,
    labels: Sequence[str],
    bounds: Sequence[float],
    rows: Iterable[tuple[Sequence[str], Sequence[float], float]],
) -> Metric:
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
