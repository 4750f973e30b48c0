"""The broker's metrics (``metricsExporterType=PROM``, docs/metrics.md): exact values after
known sends and pulls, RocketMQ 5's labels, a page that Prometheus's own parser reads, the
endpoint on 127.0.0.1 by default, bad keys refused at start, and the cost bounds of the lag
(a capped number of pairs, a capped number of reads)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import rmqlog
from rmqlog import ConfigError
from rmqnet.broker import launch, metrics
from rmqnet.broker.config import BrokerConfig
from rmqnet.broker.metrics_export import BrokerPage, endpoint, families
from rmqnet.metrics import RpcLatency
from rmqnet.metrics.exposition import render
from rmqnet.remoting import RequestCode, ResponseCode

from .broker_helpers import encode_batch, make_broker, run, send_header, send_request
from .brokerpull_support import FakePeer, open_store, request

NODE = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Any]:
    clock = rmqlog.ManualClock(1_700_000_000_000)
    store = open_store(tmp_path / "store", clock)
    store.create_topic("T", 4)
    b = make_broker(store, clock)
    yield b
    store.close()


def scrape(broker: Any) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The page parsed by prometheus_client's parser: sample name -> labels -> value."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(render(lambda: families(broker)).decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def value(page: dict[str, Any], name: str, **labels: str) -> float:
    key = tuple(sorted({**NODE, **labels}.items()))
    assert key in page.get(name, {}), f"{name}{labels} not on the page: {sorted(page.get(name, {}))[:5]}"
    return float(page[name][key])


def _pull(broker: Any, offset: int, group: str = "G", queue_id: int = 0) -> Any:
    ext = {
        "consumerGroup": group,
        "topic": "T",
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "15000",
        "subVersion": "0",
        "subscription": "*",
    }
    res = broker.table.process(broker, FakePeer(), request(RequestCode.PULL_MESSAGE, ext))
    assert res.code == ResponseCode.SUCCESS, res.remark
    return res


def test_sends_and_pulls_counted_exactly_with_rocketmq_5_labels(broker: Any) -> None:
    peer = FakePeer()
    bodies = [b"a" * 10, b"b" * 2000, b"c" * 5000]
    run(broker, peer, *[send_request(send_header("T"), b, opaque=i) for i, b in enumerate(bodies)])
    batch = encode_batch([(b"d" * 100, 0, {}) for _ in range(4)])
    run(broker, peer, send_request(send_header("T", batch=True), batch, code=RequestCode.SEND_BATCH_MESSAGE, opaque=9))
    run(broker, peer, send_request(send_header("T", props="DELAY\x012\x02"), b"e" * 7, opaque=10))
    broker.store.dispatch()
    page = scrape(broker)
    normal = {"topic": "T", "message_type": "normal", "is_system": "false"}
    assert value(page, "rocketmq_messages_in_total", **normal) == 7
    assert value(page, "rocketmq_throughput_in_total", **normal) == 10 + 2000 + 5000 + 400
    assert value(page, "rocketmq_messages_in_total", topic="T", message_type="delay", is_system="false") == 1
    # one observation per request: its average body size (RocketMQ 5's messageSize.record)
    assert value(page, "rocketmq_message_size_bucket", **normal, le="1024.0") == 2  # 10 and the batch's 100
    assert value(page, "rocketmq_message_size_bucket", **normal, le="4096.0") == 3
    assert value(page, "rocketmq_message_size_bucket", **normal, le="524288.0") == 4
    assert value(page, "rocketmq_message_size_count", **normal) == 4
    assert value(page, "rocketmq_message_size_sum", **normal) == 10 + 2000 + 5000 + 100

    stored = {qid: broker.store.max_offset("T", qid) for qid in range(4)}
    assert sum(stored.values()) == 7  # (the delayed one waits in SCHEDULE_TOPIC_XXXX)
    res = _pull(broker, 0, queue_id=0)
    page = scrape(broker)
    out = {"topic": "T", "consumer_group": "G", "is_system": "false"}
    assert value(page, "rocketmq_messages_out_total", **out) == stored[0]
    assert value(page, "rocketmq_throughput_out_total", **out) == sum(len(b) for b in res.body)


def test_lag_inflight_ready_and_latency_from_the_groups_offsets(broker: Any) -> None:
    clock = broker.clock
    peer = FakePeer()
    run(broker, peer, *[send_request(send_header("T", queue_id=1), b"x" * 20, opaque=i) for i in range(6)])
    broker.store.dispatch()
    stored_at = clock.wall_ms()
    _pull(broker, 0, queue_id=1)  # pulled to 6
    broker.consumer_offsets.commit("G", "T", 1, 2)  # committed 2
    clock.advance(7000)
    page = scrape(broker)
    labels = {"topic": "T", "consumer_group": "G", "is_retry": "false", "is_system": "false"}
    assert value(page, "rocketmq_consumer_lag_messages", **labels) == 4
    assert value(page, "rocketmq_consumer_inflight_messages", **labels) == 4
    assert value(page, "rocketmq_consumer_ready_messages", **labels) == 0
    assert value(page, "rocketmq_consumer_lag_latency", **labels) == clock.wall_ms() - stored_at
    # cached on the broker's clock: a commit shows at the next computation, not before
    broker.consumer_offsets.commit("G", "T", 1, 6)
    assert value(scrape(broker), "rocketmq_consumer_lag_messages", **labels) == 4
    clock.advance(metrics.CACHE_MS)
    page = scrape(broker)
    assert value(page, "rocketmq_consumer_lag_messages", **labels) == 0
    assert value(page, "rocketmq_consumer_lag_latency", **labels) == 0


def test_lag_cost_is_bounded_pairs_and_reads(broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    run(broker, FakePeer(), *[send_request(send_header("T", queue_id=0), b"x", opaque=i) for i in range(6)])
    broker.store.dispatch()
    for i in range(5):  # each group at an offset of its own (groups at one offset share a read)
        broker.consumer_offsets.commit(f"G{i}", "T", 0, i)
    broker.consumer_offsets.commit("H", "T", 0, 0)
    monkeypatch.setattr(metrics, "LAG_MAX_SERIES", 3)
    monkeypatch.setattr(metrics, "LATENCY_MAX_READS", 2)
    reads: list[int] = []
    real = metrics._store_time
    monkeypatch.setattr(metrics, "_store_time", lambda *a: reads.append(1) or real(*a))
    ends: list[str] = []
    real_max = broker.store.max_offset
    monkeypatch.setattr(broker.store, "max_offset", lambda t, q: ends.append(t) or real_max(t, q))
    lag = broker.metrics.lag()
    assert sorted(lag.rows) == [("T", "G0"), ("T", "G1"), ("T", "G2")] and lag.dropped == 3
    assert len(reads) == 2 and lag.latency_skipped == 1
    assert len(ends) == 4  # each queue's end read once for every group of the topic
    assert value(scrape(broker), "rocketmq_consumer_lag_series_dropped") == 3


def test_every_series_carries_the_common_labels_and_the_storage_figures(broker: Any) -> None:
    run(broker, FakePeer(), send_request(send_header("T"), b"x" * 30))
    page = scrape(broker)
    for name, series in page.items():
        for labels in series:
            assert set(NODE.items()) <= set(labels), (name, labels)
    disk = {"storage_type": "local", "storage_medium": "disk"}
    assert value(page, "rocketmq_storage_size", **disk) > 0
    tail = broker.store.published_tail()
    assert value(page, "rocketmq_storage_dispatch_behind_bytes", **disk) == tail - broker.store.wire.dispatched_offset()
    assert value(page, "rocketmq_storage_flush_behind_bytes", **disk) == tail - broker.store.flushed_offset()
    assert value(page, "rocketmq_processor_watermark", processor="send") == 0


def test_the_page_renders_the_read_time_figures_once_per_computation(broker: Any) -> None:
    page = BrokerPage(broker)
    labels = {"topic": "T", "message_type": "normal", "is_system": "false"}

    def parsed() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for family in text_string_to_metric_families(page().decode()):
            for s in family.samples:
                out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
        return out

    run(broker, FakePeer(), send_request(send_header("T"), b"x" * 30, opaque=1))
    assert value(parsed(), "rocketmq_messages_in_total", **labels) == 1
    run(broker, FakePeer(), send_request(send_header("T"), b"x" * 30, opaque=2))
    first = parsed()
    assert value(first, "rocketmq_messages_in_total", **labels) == 2  # the counters: live at every scrape
    assert page.renders == 1  # the lag and storage figures: rendered once, kept with their computation
    assert set(first) >= {"rocketmq_consumer_lag_series_dropped", "rocketmq_storage_size"}
    broker.clock.advance(metrics.CACHE_MS)
    parsed()
    assert page.renders == 2


def test_rpc_latency_by_request_and_response_code() -> None:
    rpc = RpcLatency()
    rpc.observe(RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS, 0.002)
    rpc.observe(RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS, 0.0005)
    rpc.observe(RequestCode.PULL_MESSAGE, ResponseCode.PULL_NOT_FOUND, 5.0, True)
    cells = rpc.snapshot()
    send = cells[(RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS, False)]
    assert send[:2] == [1, 1] and send[-1] == pytest.approx(2.5)
    held = cells[(RequestCode.PULL_MESSAGE, ResponseCode.PULL_NOT_FOUND, True)]
    assert held[len(held) - 2] == 1  # past 3000 ms: the +Inf bucket
    assert rpc.count(RequestCode.SEND_MESSAGE_V2) == 2
    # an awaited send and a refused (answered at once) one are one series: only a pull is long polling
    rpc.observe(RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS, 0.002, True)
    series = rpc.series(frozenset({RequestCode.PULL_MESSAGE}))
    assert series[(RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS, False)][:2] == [1, 2]
    assert (RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS, True) not in series
    assert series[(RequestCode.PULL_MESSAGE, ResponseCode.PULL_NOT_FOUND, True)][-1] == 5000.0


def test_the_endpoint_listens_on_127_0_0_1_by_default(broker: Any) -> None:
    config = BrokerConfig()
    assert (config.metrics_exporter_type, config.metrics_prom_exporter_host, config.metrics_prom_exporter_port) == (
        "DISABLE",
        "127.0.0.1",
        5557,
    )
    ep = endpoint(broker, port=0)
    ep.start()
    try:
        assert ep._server.server_address[0] == "127.0.0.1"
        with urllib.request.urlopen(f"http://{ep.address}/metrics", timeout=30) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
            text = r.read().decode()
        assert "rocketmq_messages_in_total" in text or "# TYPE rocketmq_messages_in counter" in text
    finally:
        ep.stop()


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("metricsExporterType=OTLP_GRPC", "metrics_exporter_type"),
        ("metricsExporterType=prometheus", "metrics_exporter_type"),
        ("metricsPromExporterPort=70000", "metrics_prom_exporter_port"),
        ("metricsPromExporterPort=x", "metricsPromExporterPort"),
        ("metricsPromExporterHost=localhost", "metrics_prom_exporter_host"),
    ],
)
def test_bad_metrics_keys_are_refused_at_start(
    tmp_path: Path, line: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b\n{line}\n")
    with pytest.raises(ConfigError, match=named):
        BrokerConfig.from_properties(conf)
    assert launch.main(str(tmp_path / "store"), str(conf), "127.0.0.1:0", None) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert not (tmp_path / "store").exists()  # refused before the store was opened


def test_the_name_server_serves_its_own_metrics(tmp_path: Path) -> None:
    """``rmqlog namesrv --metrics-listen``: its answers by code, the brokers registered by
    cluster, the topics routed; off without the option (and then no prometheus_client)."""
    import asyncio

    from rmqnet.namesrv.process import NameServerProcess
    from rmqnet.remoting import RemotingCommand as Cmd
    from rmqnet.transport import ClientConnection

    async def main() -> tuple[str, bool]:
        ns = NameServerProcess("127.0.0.1", 0, metrics_listen=("127.0.0.1", 0))
        plain = NameServerProcess("127.0.0.1", 0)
        await ns.start()
        await plain.start()
        try:
            conn = await ClientConnection.connect("127.0.0.1", ns.port)
            for _ in range(3):
                res = await conn.invoke(Cmd(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "NoSuch"}))
                assert res.code == ResponseCode.TOPIC_NOT_EXIST
            conn.close()
            assert ns.metrics._server.server_address[0] == "127.0.0.1"
            text = await asyncio.to_thread(
                lambda: urllib.request.urlopen(f"http://{ns.metrics.address}/metrics", timeout=30).read().decode()
            )
            return text, plain.metrics is None
        finally:
            await ns.stop(1)
            await plain.stop(1)

    text, plain_off = asyncio.run(main())
    assert plain_off
    page = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            page[(s.name, tuple(sorted(s.labels.items())))] = s.value
    route = [
        v
        for (name, labels), v in page.items()
        if name == "rocketmq_rpc_latency_count" and dict(labels)["request_code"] == "get_routeinfo_by_topic"
    ]
    assert route == [3]
    assert all(dict(labels)["node_type"] == "nameserver" for _, labels in page)
    assert [v for (name, _), v in page.items() if name == "rocketmq_topic_number"] == [0]


def test_the_transport_tells_the_observer_of_every_answer_once() -> None:
    """Answered at once, answered later (an awaitable), oneway (no answer: not told)."""
    import asyncio

    from rmqnet.remoting import RemotingCommand as Cmd
    from rmqnet.transport import ClientConnection, RemotingServer

    seen: list[tuple[int, int, bool]] = []

    def handler(conn: Any, req: Cmd) -> Any:
        if req.code == RequestCode.PULL_MESSAGE:

            async def later() -> Cmd:
                await asyncio.sleep(0)
                return req.reply(ResponseCode.PULL_NOT_FOUND)

            return later()
        return req.reply(ResponseCode.SUCCESS)

    async def main() -> None:
        server = RemotingServer(handler)
        server.observer = lambda code, rcode, elapsed, waited: (
            seen.append((code, rcode, waited)) if elapsed >= 0 else None
        )
        await server.start()
        conn = await ClientConnection.connect("127.0.0.1", server.port)
        try:
            assert (await conn.invoke(Cmd(RequestCode.GET_MAX_OFFSET, ext_fields={}))).code == ResponseCode.SUCCESS
            assert (await conn.invoke(Cmd(RequestCode.PULL_MESSAGE, ext_fields={}))).code == ResponseCode.PULL_NOT_FOUND
            conn.send_oneway(Cmd(RequestCode.HEART_BEAT, ext_fields={}))
            assert (await conn.invoke(Cmd(RequestCode.GET_MIN_OFFSET, ext_fields={}))).code == ResponseCode.SUCCESS
        finally:
            conn.close()
            await server.stop(1)

    asyncio.run(main())
    assert seen == [
        (RequestCode.GET_MAX_OFFSET, ResponseCode.SUCCESS, False),
        (RequestCode.PULL_MESSAGE, ResponseCode.PULL_NOT_FOUND, True),
        (RequestCode.GET_MIN_OFFSET, ResponseCode.SUCCESS, False),
    ]


def test_rmqlog_namesrv_metrics_listen_prints_and_serves_its_address() -> None:
    import subprocess
    import sys

    from tests.conftest import subprocess_env

    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqnet", "namesrv", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("listening on 127.0.0.1:")
        line = proc.stdout.readline().strip()
        assert line.startswith("metrics at http://127.0.0.1:") and line.endswith("/metrics"), line
        with urllib.request.urlopen(line.split()[-1], timeout=30) as r:
            names = {f.name for f in text_string_to_metric_families(r.read().decode())}
        assert {"rocketmq_rpc_latency", "rocketmq_namesrv_brokers", "rocketmq_topic_number"} <= names
    finally:
        proc.terminate()  # by its PID
        assert proc.wait(timeout=60) == 0
        if proc.stdout is not None:
            proc.stdout.close()


def test_the_endpoint_answers_404_elsewhere_and_500_naming_a_failed_render() -> None:
    import urllib.error

    from rmqnet.metrics.exposition import MetricsEndpoint

    def failing() -> bytes:
        raise rmqlog.StoreClosedError("the store is closed")

    for page, path, status, text in (
        (lambda: b"x 1\n", "/other", 404, "not found"),
        (failing, "/metrics", 500, "StoreClosedError: the store is closed"),
    ):
        ep = MetricsEndpoint(page)
        ep.start()
        try:
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(f"http://{ep.address}{path}", timeout=30)
            assert err.value.code == status and text in err.value.read().decode()
        finally:
            ep.stop()
