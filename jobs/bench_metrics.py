"""What a scrape of ``/metrics`` costs the sends (the target: under 5% of their
throughput), in the same run, with and without scraping, beside each other.

    python jobs/bench_metrics.py [--root DIR] [--rounds R] [--json] [--requests N] [--groups G]
        [--interval-s S] [--forms thread,loop]

A broker (``rmqnet``'s ``launch.main`` in a process of its own, 127.0.0.1, port 0, ASYNC_FLUSH,
``metricsExporterType=PROM`` on a free port) is driven by ``jobs/broker_load.py``'s load:
SEND_MESSAGE_V2 of 100-byte bodies, 64 in flight over 4 connections (one per worker
process, 16 each). Before the rounds, ``--groups`` consumer groups commit an offset on each
of the topic's 4 queues, so that every scrape computes a real lag table (the lag is cached
for 5 s: a scrape every second recomputes it every fifth). Each round measures, back to back
and in alternating order, the load alone and the load while this process GETs ``/metrics``
every ``--interval-s`` seconds (1). Figures: medians of the rounds, msgs/s without and with
scraping and the cost in %; the broker's CPU per send (all its threads, ``/proc``) without and
with scraping, the figure a loaded machine disturbs least (the sends' rate moves with what
the other processes on the machine do); the scrapes made, their median time (ms), the page's
size, and the load average.

``--forms``: the endpoint on a thread of its own (the broker's form) and on the broker's
event loop (``MetricsEndpoint.on_loop``, the form it was measured against:
docs/decisions.md), each in a broker of its own. Run as ``bench_metrics.py serve ROOT CONF
[--on-loop]`` it is that broker.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import broker_load  # noqa: E402  (jobs/ is this script's directory)
from broker_load import HOST, Load, LoadPool, Wire, check_ok, rate  # noqa: E402
from broker_servers import CpuMeter  # noqa: E402
from harness import Bench  # noqa: E402

from rmqnet.remoting import RemotingCommand, RequestCode, encode_bytes  # noqa: E402

TOPIC = "bench_metrics"
CONNECTIONS, WINDOW = 4, 16


def _serve(root: str, conf: str, on_loop: bool) -> int:
    from rmqnet.broker import launch, metrics_export
    from rmqnet.metrics.exposition import MetricsEndpoint

    if on_loop:

        class OnLoop(MetricsEndpoint):
            on_loop = True

        metrics_export.MetricsEndpoint = OnLoop  # type: ignore[misc]
    return launch.main(root, conf, f"{HOST}:0", None)


class Broker:
    """A broker process of this job; :meth:`stop` by its PID."""

    def __init__(self, root: Path, on_loop: bool) -> None:
        root.mkdir(parents=True, exist_ok=True)
        conf = root / "broker.conf"
        conf.write_text(
            "brokerName=bench-metrics\nflushDiskType=ASYNC_FLUSH\nmetricsExporterType=PROM\nmetricsPromExporterPort=0\n"
        )
        argv = [sys.executable, __file__, "serve", str(root / "store"), str(conf)] + (["--on-loop"] if on_loop else [])
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        self.port = broker_load.parse_ready(self.proc.stdout.readline())
        line = self.proc.stdout.readline().strip()
        assert line.startswith("metrics at "), line
        self.metrics_url = line.split()[-1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _commit_groups(port: int, groups: int) -> None:
    """``groups`` groups commit offset 0 on each of the topic's 4 queues (UPDATE_CONSUMER_OFFSET)."""
    w = Wire(port)
    try:
        for g in range(groups):
            for q in range(4):
                cmd = RemotingCommand(
                    RequestCode.UPDATE_CONSUMER_OFFSET,
                    g * 4 + q + 1,
                    0,
                    None,
                    {"consumerGroup": f"bench_g{g}", "topic": TOPIC, "queueId": str(q), "commitOffset": "0"},
                )
                check_ok(w.call(encode_bytes(cmd)), "commit")
    finally:
        w.close()


class Scraper(threading.Thread):
    """GETs the page every ``interval_s`` until stopped; the time of each scrape (ms)."""

    def __init__(self, url: str, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.url, self.interval_s = url, interval_s
        self.stopped = threading.Event()
        self.times: list[float] = []
        self.size = 0

    def run(self) -> None:
        while not self.stopped.is_set():
            t0 = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=60) as r:
                self.size = len(r.read())
            self.times.append((time.perf_counter() - t0) * 1000)
            self.stopped.wait(self.interval_s)


def _load(pool: LoadPool, broker: Broker, requests: int) -> tuple[float, float]:
    """msgs/s of one measurement, and the broker's CPU per message (us, all its threads)."""
    loads = [Load(broker.port, "send", 1, WINDOW, requests, TOPIC) for _ in range(CONNECTIONS)]
    cpu = CpuMeter(broker.proc.pid).start()
    out = pool.run(loads)
    used = cpu.stop()
    if out.errors:
        raise RuntimeError(f"the load had errors: {out.codes}")
    return rate(out), used / max(out.messages, 1) * 1e6


def measure(form: str, root: Path, pool: LoadPool, args: argparse.Namespace) -> dict[str, Any]:
    broker = Broker(root / form, form == "loop")
    try:
        _load(pool, broker, 200)  # the topic created, the broker warm
        _commit_groups(broker.port, args.groups)
        plain: list[tuple[float, float]] = []
        scraped: list[tuple[float, float]] = []
        times: list[float] = []
        size = 0
        for r in range(args.rounds):
            for with_scrape in (False, True) if r % 2 == 0 else (True, False):
                if not with_scrape:
                    plain.append(_load(pool, broker, args.requests))
                    continue
                s = Scraper(broker.metrics_url, args.interval_s)
                s.start()
                try:
                    scraped.append(_load(pool, broker, args.requests))
                finally:
                    s.stopped.set()
                    s.join()
                times += s.times
                size = s.size
        a, b = statistics.median(x for x, _ in plain), statistics.median(x for x, _ in scraped)
        ca, cb = statistics.median(c for _, c in plain), statistics.median(c for _, c in scraped)
        return {
            "form": form,
            "without": a,
            "with": b,
            "cost_pct": (a - b) / a * 100,
            "cpu_us_without": ca,
            "cpu_us_with": cb,
            "cpu_cost_pct": (cb - ca) / ca * 100,
            "scrapes": len(times),
            "scrape_ms_p50": statistics.median(times) if times else 0.0,
            "page_bytes": size,
            "groups": args.groups,
            "rounds": args.rounds,
            "load_avg": os.getloadavg()[0],
        }
    finally:
        broker.stop()


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        sys.exit(_serve(sys.argv[2], sys.argv[3], "--on-loop" in sys.argv[4:]))
    bench = Bench("bench_metrics", __doc__, rounds=3, rounds_help="rounds of the two measurements per form (medians)")
    bench.add_argument("--requests", type=int, default=20_000, help="sends per connection per measurement")
    bench.add_argument("--groups", type=int, default=1000, help="consumer groups with committed offsets")
    bench.add_argument("--interval-s", type=float, default=1.0, help="seconds between two scrapes")
    bench.add_argument("--forms", default="thread,loop", help="thread (the broker's), loop (measured against it)")
    with bench.run() as root:
        args = bench.args
        pool = LoadPool()
        try:
            for form in args.forms.split(","):
                fig = measure(form, root, pool, args)
                print(
                    f"/metrics on the {form:6s}: sends without scraping {fig['without']:8.0f} msgs/s  "
                    f"with a scrape every {args.interval_s:g} s {fig['with']:8.0f} msgs/s  "
                    f"({fig['cost_pct']:+.1f}%);  broker CPU per send {fig['cpu_us_without']:.1f} us  "
                    f"{fig['cpu_us_with']:.1f} us ({fig['cpu_cost_pct']:+.1f}%);  {fig['scrapes']} scrapes, "
                    f"p50 {fig['scrape_ms_p50']:.1f} ms, {fig['page_bytes']} bytes, {fig['groups']} groups, "
                    f"load average {fig['load_avg']:.1f}",
                    flush=True,
                )
                bench.figure(
                    f"sends, 64 in flight, a scrape every {args.interval_s:g} s ({form})",
                    fig["with"],
                    "msgs/s",
                    peer="the same sends without scraping",
                    peer_value=fig["without"],
                )
                bench.figure(
                    f"broker CPU per send, a scrape every {args.interval_s:g} s ({form})",
                    fig["cpu_us_with"],
                    "us",
                    peer="the same sends without scraping",
                    peer_value=fig["cpu_us_without"],
                )
        finally:
            pool.close()


if __name__ == "__main__":
    main()
