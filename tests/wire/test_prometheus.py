"""A real Prometheus (Debian's ``prometheus``, installed by ``make prometheus``) scrapes a broker
process (``metricsExporterType=PROM``) every second; its HTTP API then answers
``rocketmq_messages_in_total``, ``rocketmq_rpc_latency`` and a consumer lag query with the
messages sent and the group's committed offsets.

Prometheus runs on 127.0.0.1 on a free port with its storage in the test's folder and is
stopped by its PID. The waits are for Prometheus to hold the expected value (it scrapes every
second, the broker recomputes lag every 5 s): a bounded poll that fails with what the query
last answered, not a timing assertion.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmqnet.client import Producer, PullConsumer
from tests.conftest import subprocess_env
from tests.wire.broker_helpers import read_until
from tests.wire.real_clients import free_port

#: how long a query may take to reach its value (a failing test must fail, not hang)
HANG_GUARD_S = 120
SENT = 25
TOPIC = "PromT"


def prometheus_binary() -> str:
    """Debian's prometheus: the test fails without it (the suite's set-up installs it)."""
    found = shutil.which("prometheus")
    assert found is not None, "Debian's prometheus is not installed: run `make prometheus` (apt-get install prometheus)"
    return found


@pytest.fixture
def broker(tmp_path: Path, namesrv: tuple[subprocess.Popen[str], str]) -> Iterator[tuple[str, str, str]]:
    """A broker process with /metrics on a free port: (its address, its metrics address, the name server's)."""
    ns_proc, ns_addr = namesrv
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerClusterName=PromCluster\nbrokerName=broker-p\nmetricsExporterType=PROM\nmetricsPromExporterPort=0\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rmqnet",
            "broker",
            str(tmp_path / "store"),
            "-c",
            str(conf),
            "--listen",
            "127.0.0.1:0",
            "--namesrv",
            ns_addr,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert " ready at 127.0.0.1:" in line, line
        address = line.split()[-1]
        metrics = _line(proc.stdout)
        assert metrics.startswith("metrics at http://127.0.0.1:") and metrics.endswith("/metrics"), metrics
        assert ns_proc.stderr is not None
        read_until(ns_proc.stderr, f"broker registered: broker-p id 0 at {address}")
        yield address, metrics.split("//")[1].split("/")[0], ns_addr
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=HANG_GUARD_S) == 0
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def prometheus(tmp_path: Path, broker: tuple[str, str, str]) -> Iterator[str]:
    """Prometheus scraping the broker every second: its HTTP address."""
    binary = prometheus_binary()
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
        f"  - job_name: rocketmq\n    static_configs:\n      - targets: ['{broker[1]}']\n"
    )
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _until(lambda: _get(f"{url}/-/ready") is not None, "Prometheus never became ready", tmp_path)
        yield url
    finally:
        proc.terminate()  # by its PID
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _line(stream: Any) -> str:
    """The next line of ``stream``, or "" after :data:`HANG_GUARD_S` (a broker that never says
    where its metrics are fails the test instead of hanging it)."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(HANG_GUARD_S)
    return got[0].strip() if got else ""


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return bytes(r.read())
    except OSError:
        return None


def _query(url: str, promql: str) -> float | None:
    """The value of an instant query's single result, None while it has none."""
    body = _get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    if body is None:
        return None
    data = json.loads(body)
    assert data["status"] == "success", data
    result = data["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def _until(check: Any, what: Any, tmp_path: Path | None = None) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    tail = (tmp_path / "prometheus.log").read_text()[-3000:] if tmp_path is not None else ""
    raise AssertionError(f"{what() if callable(what) else what}\n{tail}")


def _converges(url: str, promql: str, expected: float) -> None:
    seen: list[float | None] = []

    def check() -> bool:
        seen.append(_query(url, promql))
        return seen[-1] == expected

    _until(check, lambda: f"{promql} never answered {expected}: last answers {seen[-5:]}")


def test_prometheus_scrapes_the_sends_and_the_lag(prometheus: str, broker: tuple[str, str, str]) -> None:
    address, _, ns_addr = broker
    producer = Producer("PG", ns_addr)
    try:
        results = [producer.send(TOPIC, b"m%03d" % i) for i in range(SENT)]
    finally:
        producer.close()
    assert {r.status for r in results} == {"SEND_OK"}
    per_queue: dict[int, int] = {}
    for r in results:
        per_queue[r.queue_id] = per_queue.get(r.queue_id, 0) + 1
    consumer = PullConsumer("PromG", ns_addr)
    try:
        pulled = 0
        for qid in per_queue:
            pulled += len(consumer.pull(TOPIC, qid, 0, 32).rows)
        committed = {qid: n // 2 for qid, n in per_queue.items()}  # half of each queue committed
        for qid, offset in committed.items():
            consumer.commit(TOPIC, qid, offset)
    finally:
        consumer.close()
    assert pulled == SENT

    node = 'cluster="PromCluster",node_type="broker",node_id="broker-p"'
    _converges(prometheus, f'sum(rocketmq_messages_in_total{{{node},topic="{TOPIC}",message_type="normal"}})', SENT)
    _converges(prometheus, f'sum(rocketmq_messages_out_total{{{node},topic="{TOPIC}",consumer_group="PromG"}})', SENT)
    _converges(
        prometheus,
        f'sum(rocketmq_consumer_lag_messages{{{node},topic="{TOPIC}",consumer_group="PromG"}})',
        SENT - sum(committed.values()),
    )
    _converges(
        prometheus,
        f'sum(rocketmq_consumer_inflight_messages{{{node},topic="{TOPIC}",consumer_group="PromG"}})',
        SENT - sum(committed.values()),
    )
    _converges(
        prometheus,
        f'sum(rocketmq_rpc_latency_count{{{node},request_code="send_message_v2",response_code="success"}})',
        SENT,
    )
    assert (_query(prometheus, f"rocketmq_storage_size{{{node}}}") or 0) > 0
