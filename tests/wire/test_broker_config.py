"""broker.conf read into BrokerConfig (and the store's keys into its StoreConfig), the
broker's topics at start, and the broker process's start and clean stop over a stand-in
transport (the asyncio server is built by its own engineer)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker import launch
from rmqnet.broker.config import BrokerConfig
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from rmqnet.transport import Limits
from wire.broker_helpers import FakePeer, RecordingStore, make_broker


def test_broker_conf_keys_go_to_the_broker_and_the_store(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerClusterName = C1\nbrokerName=broker-b\nbrokerId=0\nlistenPort=10999\n"
        "brokerIP1=127.0.0.2\nnamesrvAddr=127.0.0.1:9876;127.0.0.1:9877\nflushDiskType=SYNC_FLUSH\n"
        "autoCreateTopicEnable=false\nlongPollingEnable=false\nshortPollingTimeMills=200\n"
        "aclEnable=true\ndefaultTopicQueueNums=6\nmaxMessageSize=2048\nsyncFlushTimeout=100\n"
        "sendThreadPoolQueueCapacity=50\nregionId=R1\ntraceOn=false\n"
    )
    c = BrokerConfig.from_properties(conf)
    assert (c.broker_cluster_name, c.broker_name, c.broker_id, c.listen_port, c.broker_ip1) == (
        "C1",
        "broker-b",
        0,
        10999,
        "127.0.0.2",
    )
    assert c.namesrv_list() == ["127.0.0.1:9876", "127.0.0.1:9877"]
    assert (c.auto_create_topic_enable, c.long_polling_enable, c.short_polling_time_mills, c.acl_enable) == (
        False,
        False,
        200,
        True,
    )
    assert (c.default_topic_queue_nums, c.sync_flush_timeout, c.send_queue_capacity, c.region_id, c.trace_on) == (
        6,
        100,
        50,
        "R1",
        False,
    )
    assert c.sync_flush and c.max_message_size == 2048
    assert c.store.store_host == "127.0.0.2:10999" and c.store.default_topic_queue_nums == 6


def test_overrides_win_and_defaults_are_rocketmqs(tmp_path: Path) -> None:
    c = BrokerConfig.from_properties(None, namesrv_addr="127.0.0.1:1")
    assert c.broker_ip1 == "127.0.0.1" and c.listen_port == 10911 and c.default_topic_queue_nums == 8
    assert (
        c.auto_create_topic_enable
        and c.long_polling_enable
        and not c.acl_enable
        and c.namesrv_list() == ["127.0.0.1:1"]
    )


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("brokerId=x", "brokerId"),
        ("autoCreateTopicEnable=yes", "autoCreateTopicEnable"),
        ("listenPort=70000", "listenPort"),
        ("brokerIP1=not-an-ip", "brokerIP1"),
        ("flushDiskType=SOMETIMES", "flush_disk_type"),
        ("syncFlushTimeout=0", "sync_flush_timeout"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, line: str, named: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(line + "\n")
    with pytest.raises(rmqlog.ConfigError, match=named):
        BrokerConfig.from_properties(conf)


def test_missing_conf_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(rmqlog.ConfigError, match="cannot read"):
        BrokerConfig.from_properties(tmp_path / "nope.conf")


def test_system_topics_and_retry_topics(tmp_path: Path) -> None:
    s = rmqlog.MessageStore.open(tmp_path / "s", small_store_config())
    try:
        broker = make_broker(RecordingStore(s), broker_cluster_name="C1")
        topics = broker.topics.all()
        assert {"TBW102", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "C1", "broker-a", "C1_REPLY_TOPIC"} <= set(topics)
        assert topics["TBW102"].perm == 7 and "TBW102" not in s.topics()  # in memory, as RocketMQ keeps it
        version = broker.topics.data_version["counter"]
        tc = broker.topics.create_retry("G1")
        assert (tc.topic_name, tc.write_queue_nums, tc.perm) == ("%RETRY%G1", 1, 6)
        assert "%RETRY%G1" in s.topics() and broker.topics.data_version["counter"] == version + 1
        assert broker.topics.create_retry("G1") == tc  # the second heartbeat changes nothing
        with pytest.raises(rmqlog.InvalidTopicError):
            broker.topics.create_retry("bad/group")
    finally:
        s.close()


def test_parse_listen() -> None:
    assert launch.parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert launch.parse_listen("[::1]:10911") == ("::1", 10911)
    for bad in ("127.0.0.1", "h:x", "h:65536"):
        with pytest.raises(ValueError, match="--listen"):
            launch.parse_listen(bad)


def test_main_with_a_bad_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerId=minus\n")
    assert launch.main(str(tmp_path / "root"), str(conf), None, None) == 2
    assert "brokerId" in capsys.readouterr().err
    assert launch.main(str(tmp_path / "root"), None, "nohost", None) == 2


class _FakeServer:
    """The transport's ``RemotingServer`` contract: ``start()``, ``port``, ``stop(grace_s)``."""

    instances: list[_FakeServer] = []

    def __init__(self, handler: Any, *, host: str, port: int, limits: Any) -> None:
        self.handler, self.host, self.port, self.limits = handler, host, port or 45678, limits
        self.stopped: float | None = None
        _FakeServer.instances.append(self)

    async def start(self) -> None:
        pass

    async def stop(self, grace_s: float) -> None:
        self.stopped = grace_s


class _FakeTransport:
    RemotingServer = _FakeServer
    Limits = Limits


def test_process_start_serve_and_clean_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "_transport", lambda: _FakeTransport)
    root = tmp_path / "root"
    config = BrokerConfig(broker_name="b1", listen_port=0, store=small_store_config())

    async def main() -> None:
        proc = launch.BrokerProcess(root, config)
        address = await proc.start()
        assert address == "127.0.0.1:45678"
        assert proc.store is not None and proc.store.config.store_host == "127.0.0.1:45678"
        assert (root / "abort").exists()  # open for writing
        server = _FakeServer.instances[-1]
        req = RemotingCommand(RequestCode.GET_ALL_TOPIC_CONFIG, 3, 0, None, {})
        reply = server.handler(FakePeer(), req)  # the served handler is the broker's table
        assert reply.code == ResponseCode.SUCCESS and b"TBW102" in reply.body
        proc.request_stop()
        await proc.wait_stopped(grace_s=1.0)
        assert server.stopped == 1.0

    asyncio.run(main())
    assert not (root / "abort").exists()  # closed cleanly: the next open does no recovery
    s = rmqlog.MessageStore.open(root, small_store_config())
    s.close()
