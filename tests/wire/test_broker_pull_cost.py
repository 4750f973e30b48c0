"""What a pull and the small per-queue requests cost the broker, counted (never timed): a
PULL_MESSAGE (11), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31) and QUERY_CONSUMER_OFFSET (14)
list no folder once the store's listings are kept, however many queues and segments the
store holds; a pull of 32 is read by the small window's direct path; the pull's config values
are taken once per BrokerConfig object, and an UPDATE_BROKER_CONFIG (which replaces it)
takes effect at the next pull."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import rmqlog
import rmqlog.access.window as window
from rmqlog import safe_open
from rmqnet.broker import pull
from rmqnet.broker.broker import Broker
from rmqnet.broker.config import BrokerConfig
from rmqnet.remoting import RequestCode, ResponseCode

from .brokerpull_support import FakePeer, open_store, request

CLOCK_MS = 1_700_000_000_000


def make(tmp_path: Path, **changes: Any) -> Broker:
    store = open_store(tmp_path / "store", rmqlog.ManualClock(CLOCK_MS), mapped_file_size_consume_queue=20 * 50)
    config = BrokerConfig(broker_name="broker-a", store=store.config).replace(**changes)
    return Broker(store, config, clock=rmqlog.ManualClock(CLOCK_MS))


def pull_req(offset: int, queue_id: int = 0, nums: int = 32) -> Any:
    return request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "CG",
            "topic": "T",
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": nums,
            "sysFlag": 4,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subscription": "*",
            "subVersion": 0,
        },
    )


def queue_req(code: int, queue_id: int = 0, **ext: Any) -> Any:
    return request(code, {"topic": "T", "queueId": queue_id, **ext})


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    b = make(tmp_path)
    b.store.create_topic("T", 4)
    for q in range(4):  # 120 messages a queue: three consume-queue files each
        b.store.put_batch(
            pa.table({"topic": ["T"] * 120, "queueId": pa.array([q] * 120, pa.int32()), "body": [b"m" * 50] * 120}),
            dispatch=True,
        )
    yield b
    b.store.close()


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every folder reached by its path from now on (every listing starts so)."""
    seen: list[str] = []
    real = safe_open.open_folder

    def counting(path: safe_open.PathLike) -> int:
        seen.append(str(path))
        return real(path)

    monkeypatch.setattr(safe_open, "open_folder", counting)
    return seen


def _requests(b: Broker, peer: FakePeer) -> None:
    for q in range(4):
        for offset in (0, 32, 50, 100, 118):
            res = b.table.process(b, peer, pull_req(offset, q))
            assert res.code == ResponseCode.SUCCESS and int(res.ext_fields["maxOffset"]) == 120
        assert b.table.process(b, peer, queue_req(RequestCode.GET_MAX_OFFSET, q)).ext_fields["offset"] == 120
        assert b.table.process(b, peer, queue_req(RequestCode.GET_MIN_OFFSET, q)).ext_fields["offset"] == 0
        got = b.table.process(b, peer, queue_req(RequestCode.QUERY_CONSUMER_OFFSET, q, consumerGroup="none"))
        assert (got.code, got.ext_fields["offset"]) == (ResponseCode.SUCCESS, 0)  # none stored, min 0: from 0
        # at the end: nothing past it, and nothing listed to know it
        assert b.table.process(b, peer, pull_req(120, q)).code == ResponseCode.PULL_NOT_FOUND


def test_pulls_and_queue_requests_list_no_folder(broker: Broker, listings: list[str]) -> None:
    peer = FakePeer()
    _requests(broker, peer)  # (the first look at each queue lists it)
    listings.clear()
    for _ in range(3):
        _requests(broker, peer)
    assert listings == []


def test_a_pull_of_32_is_read_by_the_direct_path(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    answered: list[bool] = []
    real = window.read_small

    def spy(*a: Any, **k: Any) -> Any:
        got = real(*a, **k)
        answered.append(got is not None)
        return got

    monkeypatch.setattr(window, "read_small", spy)
    peer = FakePeer()
    offset = 0
    while offset < 120:
        res = broker.table.process(broker, peer, pull_req(offset))
        assert res.code == ResponseCode.SUCCESS
        offset = int(res.ext_fields["nextBeginOffset"])
    assert answered == [True] * 5  # windows of 32 cut at each file's end (50 units): 32, 18, 32, 18, 20


def test_the_pull_settings_are_taken_once_per_config_object(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[object] = []
    real = pull.PullSettings.of

    def counting(b: Any) -> pull.PullSettings:
        taken.append(b.config)
        return real(b)

    monkeypatch.setattr(pull.PullSettings, "of", counting)
    monkeypatch.setattr(pull, "_settings", None)
    peer = FakePeer()
    for _ in range(5):
        assert len(broker.table.process(broker, peer, pull_req(0)).body_bytes()) > 0
    assert taken == [broker.config]
    # UPDATE_BROKER_CONFIG replaces the config: the next pull takes the new one's values
    res = broker.table.process(
        broker, peer, request(RequestCode.UPDATE_BROKER_CONFIG, {}, b"maxTransferCountOnMessageInMemory=5\n")
    )
    assert res.code == ResponseCode.SUCCESS, res.remark
    got = broker.table.process(broker, peer, pull_req(0))
    assert (got.code, got.ext_fields["nextBeginOffset"]) == (ResponseCode.SUCCESS, 5)
    assert taken == [taken[0], broker.config] and taken[0] is not broker.config


def test_a_pull_checks_two_names_whatever_the_store_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per pull, one name checked for the commitlog's first segment and one for the queue's
    first, with 1 queue of 1 file or 40 queues of 3 files each."""
    checks: list[str] = []
    real = safe_open.inode_at
    monkeypatch.setattr(safe_open, "inode_at", lambda fd, name: checks.append(name) or real(fd, name))
    per_pull = []
    for queues, n in ((1, 10), (40, 120)):
        b = make(tmp_path / f"q{queues}")
        try:
            b.store.create_topic("T", queues)
            for q in range(queues):
                b.store.put_batch(
                    pa.table({"topic": ["T"] * n, "queueId": pa.array([q] * n, pa.int32()), "body": [b"m" * 50] * n}),
                    dispatch=True,
                )
            peer = FakePeer()
            b.table.process(b, peer, pull_req(0, queues - 1))  # (its first look lists)
            checks.clear()
            for _ in range(10):
                assert b.table.process(b, peer, pull_req(0, queues - 1)).code == ResponseCode.SUCCESS
            per_pull.append(len(checks) / 10)
        finally:
            b.store.close()
    assert per_pull == [2, 2]
