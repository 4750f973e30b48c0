"""The store's configuration, its opening and closing, and its background services."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from conftest import (
    batch,
    read_queue_all,
    small_store_config,
    wait_until,
)

import refcodec as rc
import rmqlog

DEFAULT_HOST = "127.0.0.1:10911"


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize("host", ["nohost", "1.2.3.4", "1.2.3.4:x", "300.1.1.1:80", ""])
def test_bad_store_host(host: str) -> None:
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(store_host=host)


def test_config_validation() -> None:
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(mapped_file_size_consume_queue=1001)
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(mapped_file_size_consume_queue=0)
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(mapped_file_size_commit_log=100)
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(max_message_size=0)
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(default_topic_queue_nums=0)
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig(flush_disk_type="SOMETIMES")
    cfg = rmqlog.StoreConfig()
    with pytest.raises(Exception):  # frozen  # noqa: B017
        cfg.max_message_size = 1  # type: ignore[misc]
    assert cfg.replace(max_message_size=5).max_message_size == 5


def test_config_from_properties(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# RocketMQ broker config\n"
        "brokerClusterName=DefaultCluster\n"
        "brokerName=broker-a\n"
        "brokerIP1=10.1.2.3\n"
        "listenPort=10000\n"
        "storePathRootDir=/tmp/ignored\n"
        "mappedFileSizeCommitLog=8192\n"
        "mappedFileSizeConsumeQueue=1000\n"
        "maxMessageSize = 1024\n"
        "defaultTopicQueueNums=2\n"
        "autoCreateTopicEnable=false\n"
        "flushDiskType=SYNC_FLUSH\n"
        "fileReservedTime=48\n"
        "deleteWhen=04;16\n",
        "utf-8",
    )
    cfg = rmqlog.StoreConfig.from_properties(conf)
    assert cfg.store_host == "10.1.2.3:10000"
    assert cfg.mapped_file_size_commit_log == 8192
    assert cfg.mapped_file_size_consume_queue == 1000
    assert cfg.max_message_size == 1024
    assert cfg.default_topic_queue_nums == 2
    assert cfg.auto_create_topic_enable is False
    assert cfg.flush_disk_type == rmqlog.SYNC_FLUSH
    assert cfg.file_reserved_time == 48
    assert cfg.delete_when == "04;16"
    bad = tmp_path / "bad.conf"
    bad.write_text("defaultTopicQueueNums=many\n", "utf-8")
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig.from_properties(bad)
    bad.write_text("autoCreateTopicEnable=yes\n", "utf-8")
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig.from_properties(bad)
    bad.write_text("mappedFileSizeConsumeQueue=1001\n", "utf-8")
    with pytest.raises(rmqlog.ConfigError):
        rmqlog.StoreConfig.from_properties(bad)


# RocketMQ's key is 'checkCRCOnRecover' (a regex camel->snake split made it check_c_r_c_...; fixed in 0a51de4)
def test_config_from_properties_check_crc(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("checkCRCOnRecover=false\nflushCommitLogThoroughInterval=2000\n", "utf-8")
    cfg = rmqlog.StoreConfig.from_properties(conf)
    assert cfg.check_crc_on_recover is False
    assert cfg.flush_commit_log_thorough_interval == 2000


# --------------------------------------------------------------------------- closed store


def _closed_calls():
    return {
        "put": lambda s: s.put("T", b"x"),
        "put_batch": lambda s: s.put_batch(batch(topic="T", body=[b"x"])),
        "dispatch": lambda s: s.dispatch(),
        "get_messages": lambda s: s.get_messages("g", "T", 0, 0),
        "message_by_offset": lambda s: s.message_by_offset(0),
        "message_by_id": lambda s: s.message_by_id(rc.offset_msg_id(DEFAULT_HOST, 0)),
        "start_services": lambda s: s.start_services(),
        "min_offset": lambda s: s.min_offset("T", 0),
        "max_offset": lambda s: s.max_offset("T", 0),
        "offset_for_timestamp": lambda s: s.offset_for_timestamp("T", 0, 0),
        "read_queue": lambda s: s.read_queue("T", 0, 0, 10),
        "commit_offset": lambda s: s.commit_offset("g", "T", 0, 1),
        "committed_offset": lambda s: s.committed_offset("g", "T", 0),
        "create_topic": lambda s: s.create_topic("T2", 2),
        "delete_topic": lambda s: s.delete_topic("T2"),
        "topics": lambda s: s.topics(),
    }


# (min_offset .. topics did not check before commit 0a51de4; these cases pin that fix)
@pytest.mark.parametrize("name", list(_closed_calls()))
def test_closed_store_raises(root: Path, name: str) -> None:
    s = rmqlog.MessageStore.open(root, small_store_config())
    s.put("T", b"x", queue_id=0)
    s.dispatch()
    s.close()
    s.close()  # idempotent
    with pytest.raises(rmqlog.StoreClosedError):
        _closed_calls()[name](s)


def test_context_manager_closes(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"x")
    with pytest.raises(rmqlog.StoreClosedError):
        s.put("T", b"y")


# --------------------------------------------------------------------------- background services


def test_background_dispatcher(ms: rmqlog.MessageStore) -> None:
    ms.start_services()
    ms.start_services()  # a second start is a no-op
    try:
        total = 0
        for i in range(8):
            ms.put_batch(batch(topic="BG", body=[b"%d-%d" % (i, j) for j in range(25)]))
            total += 25
        ok = wait_until(lambda: sum(ms.max_offset("BG", q) for q in range(4)) == total, timeout=20)
        assert ok, [ms.max_offset("BG", q) for q in range(4)]
        ms.put("BG", b"late", queue_id=3)
        assert wait_until(lambda: ms.max_offset("BG", 3) == total // 4 + 1, timeout=20)
    finally:
        ms.stop_services()
    assert ms.dispatch() == 0
    bodies = sorted(r["body"] for q in range(4) for r in read_queue_all(ms, "BG", q))
    assert bodies == sorted([b"%d-%d" % (i, j) for i in range(8) for j in range(25)] + [b"late"])


def test_close_stops_background_dispatcher(root: Path) -> None:
    def dispatcher_threads() -> int:  # the dispatcher runs in the store's one service thread
        return sum(1 for t in threading.enumerate() if t.name == "rmq-services")

    before = dispatcher_threads()
    s = rmqlog.MessageStore.open(root, small_store_config())
    s.start_services()
    s.put("T", b"x")
    assert wait_until(lambda: sum(s.max_offset("T", q) for q in range(4)) == 1)
    s.close()
    assert dispatcher_threads() == before
    s.stop_services()  # harmless after close


# --------------------------------------------------------------------------- descriptors


def test_opening_and_closing_many_stores_keeps_no_descriptor(tmp_path: Path) -> None:
    """A process that opens store after store (a notebook, the fuzz test, a service) must not
    run out of descriptors: the locks of a closed store, and of an open that failed, are released."""

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    with rmqlog.MessageStore.open(tmp_path / "warm"):
        pass
    before = fds()
    for i in range(20):
        with rmqlog.MessageStore.open(tmp_path / f"s{i}", small_store_config()) as s:
            s.put("t", b"x")
        (tmp_path / f"s{i}" / "config" / "topics.json").write_bytes(b"{")
        (tmp_path / f"s{i}" / "config" / "topics.json.bak").write_bytes(b"{")
        with pytest.raises(rmqlog.CorruptStoreError):
            rmqlog.MessageStore.open(tmp_path / f"s{i}", small_store_config())
    assert fds() == before
