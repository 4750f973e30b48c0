"""PULL_MESSAGE (11) against a real store: bodies byte-exact with the segment files, RocketMQ
4.9.8's statuses and next offsets, transfer limits, permission and subscription checks,
commitOffset stored through the store's consumerOffset.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import rmqlog
from rmqnet.broker import pull
from rmqnet.remoting import RequestCode, ResponseCode

from .broker_helpers import make_broker
from .brokerpull_support import FakePeer, open_store, request, segment_bytes


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    clock = rmqlog.ManualClock(1_700_000_000_000)
    store = open_store(tmp_path / "store", clock)
    b = make_broker(store, clock)
    yield b
    store.close()


def put(
    broker: Any, n: int, *, topic: str = "T", queue_id: int = 0, tags: list[str] | None = None, body: bytes = b"x" * 50
) -> pa.Table:
    if topic not in broker.store.topics():
        broker.store.create_topic(topic, 4)
    cols: dict[str, Any] = {"topic": [topic] * n, "body": [body] * n, "queueId": [queue_id] * n}
    if tags is not None:
        cols["tags"] = tags
    return broker.store.put_batch(pa.table(cols), dispatch=True)


def pull_req(
    offset: int = 0,
    *,
    topic: str = "T",
    queue_id: int = 0,
    max_nums: int = 32,
    sys_flag: int = 4,
    subscription: str | None = "*",
    **extra: Any,
) -> Any:
    ext: dict[str, Any] = {
        "consumerGroup": "G",
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": str(sys_flag),
        "commitOffset": "0",
        "suspendTimeoutMillis": "15000",
        "subVersion": "0",
    }
    if subscription is not None:
        ext["subscription"] = subscription
    ext.update({k: str(v) for k, v in extra.items()})
    return request(RequestCode.PULL_MESSAGE, ext)


def do_pull(broker: Any, req: Any, peer: Any = None) -> Any:
    res = broker.table.process(broker, peer or FakePeer(), req)
    assert res is not None and not hasattr(res, "__await__"), "a non-suspending pull is answered at once"
    return res


def expected_body(broker: Any, results: pa.Table, rows: list[int]) -> bytes:
    root = broker.store.paths.root
    offsets = results["commitLogOffset"].to_pylist()
    qo = results["queueOffset"].to_pylist()
    sizes = broker.store.record_sizes("T", 0, 0, max(qo) + 1)
    return b"".join(segment_bytes(root, offsets[r], int(sizes[qo[r]])) for r in rows)


def ext_ints(res: Any) -> dict[str, int]:
    return {k: int(v) for k, v in res.ext_fields.items()}


# ------------------------------------------------------------------------- found
def test_found_body_is_the_segment_bytes(broker: Any) -> None:
    results = put(broker, 5)
    res = do_pull(broker, pull_req(0))
    assert res.code == ResponseCode.SUCCESS and res.remark == "FOUND"
    assert ext_ints(res) == {"suggestWhichBrokerId": 0, "nextBeginOffset": 5, "minOffset": 0, "maxOffset": 5}
    assert isinstance(res.body, list), "the records are handed over unjoined"
    assert res.body_bytes() == expected_body(broker, results, [0, 1, 2, 3, 4])


def test_max_msg_nums_and_the_count_limit(broker: Any) -> None:
    results = put(broker, 40)
    res = do_pull(broker, pull_req(3, max_nums=2))
    assert ext_ints(res)["nextBeginOffset"] == 5
    assert res.body_bytes() == expected_body(broker, results, [3, 4])
    res = do_pull(broker, pull_req(0, max_nums=1000))  # maxTransferCountOnMessageInMemory: 32
    assert ext_ints(res)["nextBeginOffset"] == 32
    assert res.body_bytes() == expected_body(broker, results, list(range(32)))
    res = do_pull(broker, pull_req(0, max_nums=0))  # Java's isTheBatchFull takes the first anyway
    assert ext_ints(res)["nextBeginOffset"] == 1


def test_byte_limit_256k_after_the_first(broker: Any) -> None:
    results = put(broker, 4, body=b"b" * 100_000)
    res = do_pull(broker, pull_req(0))
    assert ext_ints(res)["nextBeginOffset"] == 2
    assert res.body_bytes() == expected_body(broker, results, [0, 1])


def test_tag_filter_keeps_the_exact_records(broker: Any) -> None:
    results = put(broker, 6, tags=["A", "B", "A", "C", "B", "A"])
    res = do_pull(broker, pull_req(0, subscription="A || C"))
    assert res.code == ResponseCode.SUCCESS
    assert res.body_bytes() == expected_body(broker, results, [0, 2, 3, 5])
    assert ext_ints(res)["nextBeginOffset"] == 6


def test_nothing_matching_is_retry_immediately_past_the_scan(broker: Any) -> None:
    put(broker, 3, tags=["B", "B", "B"])
    res = do_pull(broker, pull_req(0, subscription="A"))
    assert (res.code, res.remark) == (ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE")
    assert ext_ints(res)["nextBeginOffset"] == 3 and res.body_bytes() == b""


# ---------------------------------------------------------------------- statuses
@pytest.mark.parametrize(
    ("stored", "offset", "code", "remark", "next_offset"),
    [
        (0, 0, ResponseCode.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE", 0),
        (0, 7, ResponseCode.PULL_OFFSET_MOVED, "NO_MESSAGE_IN_QUEUE", 0),
        (3, 3, ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", 3),
        (3, 9, ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", 3),
        (3, -1, ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", 0),
    ],
)
def test_statuses_as_java_maps_them(
    broker: Any, stored: int, offset: int, code: int, remark: str, next_offset: int
) -> None:
    broker.store.create_topic("T", 4)
    if stored:
        put(broker, stored)
    res = do_pull(broker, pull_req(offset))
    assert (res.code, res.remark) == (code, remark)
    ext = ext_ints(res)
    assert ext["nextBeginOffset"] == next_offset and ext["maxOffset"] == stored and ext["suggestWhichBrokerId"] == 0
    assert "minOffset" in ext and res.body_bytes() == b""


def test_a_queue_with_no_folder_is_not_found_at_zero_and_moved_elsewhere(broker: Any) -> None:
    put(broker, 1, queue_id=0)
    assert do_pull(broker, pull_req(0, queue_id=2)).code == ResponseCode.PULL_NOT_FOUND
    assert do_pull(broker, pull_req(4, queue_id=2)).code == ResponseCode.PULL_OFFSET_MOVED


# ------------------------------------------------------------------------ checks
def test_unknown_topic(broker: Any) -> None:
    res = do_pull(broker, pull_req(0, topic="Nope"))
    assert res.code == ResponseCode.TOPIC_NOT_EXIST and "Nope" in res.remark


def test_broker_not_readable(broker: Any) -> None:
    put(broker, 1)
    broker.config = broker.config.replace(broker_permission=2)
    res = do_pull(broker, pull_req(0))
    assert res.code == ResponseCode.NO_PERMISSION and "pulling message is forbidden" in res.remark


class _Topics:
    def __init__(self, configs: dict[str, rmqlog.TopicConfig]) -> None:
        self.configs = configs

    def get(self, topic: str) -> rmqlog.TopicConfig | None:
        return self.configs.get(topic)


def test_topic_not_readable_through_the_topic_manager(broker: Any) -> None:
    put(broker, 1)
    broker.topics = _Topics({"T": rmqlog.TopicConfig("T", 4, 4, perm=2)})
    res = do_pull(broker, pull_req(0))
    assert res.code == ResponseCode.NO_PERMISSION and "topic[T]" in res.remark
    broker.topics = _Topics({})
    assert do_pull(broker, pull_req(0)).code == ResponseCode.TOPIC_NOT_EXIST


@pytest.mark.parametrize("queue_id", [-1, 4, 1000])
def test_queue_id_outside_read_queues(broker: Any, queue_id: int) -> None:
    put(broker, 1)
    res = do_pull(broker, pull_req(0, queue_id=queue_id))
    assert res.code == ResponseCode.SYSTEM_ERROR and f"queueId[{queue_id}] is illegal" in res.remark


def test_sql92_is_refused_as_without_property_filter(broker: Any) -> None:
    put(broker, 1)
    res = do_pull(broker, pull_req(0, subscription="a > 1", expressionType="SQL92"))
    assert res.code == ResponseCode.SYSTEM_ERROR and "SQL92" in res.remark


def test_missing_field_is_system_error_naming_it(broker: Any) -> None:
    req = pull_req(0)
    del req.ext_fields["queueOffset"]
    res = do_pull(broker, req)
    assert res.code == ResponseCode.SYSTEM_ERROR and "queueOffset" in res.remark
    req = pull_req(0, maxMsgNums="lots")
    assert do_pull(broker, req).code == ResponseCode.SYSTEM_ERROR


def test_without_subscription_flag_the_group_must_be_registered(broker: Any) -> None:
    put(broker, 1)
    res = do_pull(broker, pull_req(0, sys_flag=0, subscription=None))
    assert res.code == ResponseCode.SUBSCRIPTION_NOT_EXIST


# ----------------------------------------------------------------- commit offset
def test_commit_offset_stored_when_flag_set(broker: Any) -> None:
    put(broker, 3)
    do_pull(broker, pull_req(0, sys_flag=4, commitOffset=2))
    assert broker.consumer_offsets.query("G", "T", 0) == -1
    do_pull(broker, pull_req(0, sys_flag=5, commitOffset=2))
    assert broker.consumer_offsets.query("G", "T", 0) == 2
    do_pull(broker, pull_req(0, sys_flag=5, commitOffset=-1))  # ali-ons' "nothing yet": ignored
    assert broker.consumer_offsets.query("G", "T", 0) == 2
    assert broker.store.committed_offset("G", "T", 0) == -1  # the file: at the broker's next persist
    broker.consumer_offsets.persist()
    assert broker.store.committed_offset("G", "T", 0) == 2


def test_commit_offset_even_when_nothing_found(broker: Any) -> None:
    put(broker, 3)
    res = do_pull(broker, pull_req(3, sys_flag=5, commitOffset=3))
    assert res.code == ResponseCode.PULL_NOT_FOUND
    assert broker.consumer_offsets.query("G", "T", 0) == 3


def test_store_closed_is_service_not_available(broker: Any) -> None:
    put(broker, 1)
    broker.store.close()
    res = do_pull(broker, pull_req(0))
    assert res.code == ResponseCode.SERVICE_NOT_AVAILABLE, res.remark


# ------------------------------------------------------------------- disk limits
def test_disk_limited_judges_each_record_by_its_place() -> None:
    sizes = np.full(20, 1000, np.int64)
    nowhere = np.zeros(20, bool)
    assert pull.disk_limited(sizes, nowhere, 32, 8, 256 << 10, 64 << 10) == 20
    everywhere = np.ones(20, bool)
    assert pull.disk_limited(sizes, everywhere, 32, 8, 256 << 10, 64 << 10) == 8
    big = np.full(5, 40_000, np.int64)
    assert pull.disk_limited(big, np.ones(5, bool), 32, 8, 256 << 10, 64 << 10) == 1  # 80,000 > 64 KiB
    assert pull.disk_limited(big, np.zeros(5, bool), 32, 8, 256 << 10, 64 << 10) == 5
    first_only = np.array([True] + [False] * 19)
    assert pull.disk_limited(sizes, first_only, 32, 8, 256 << 10, 64 << 10) == 20


def test_records_far_behind_get_the_disk_limits(broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    results = put(broker, 20)
    monkeypatch.setattr(pull, "total_memory", lambda: 100)  # every record is "on disk"
    res = do_pull(broker, pull_req(0))
    assert ext_ints(res)["nextBeginOffset"] == 8
    assert res.body_bytes() == expected_body(broker, results, list(range(8)))


def test_pulls_across_a_segment_roll_are_the_segment_bytes(broker: Any) -> None:
    """Records on both sides of a 1 MiB segment roll: every pull body, followed from offset 0
    to the end by nextBeginOffset, is those records read from their own segment files."""
    results = put(broker, 24, body=b"r" * 90_000)  # ~2.1 MiB: two rolls
    offsets = results["commitLogOffset"].to_pylist()
    assert offsets[-1] // (1 << 20) >= 2, "the records must span segments"
    offset, pulled = 0, b""
    while offset < 24:
        res = do_pull(broker, pull_req(offset))
        assert res.code == ResponseCode.SUCCESS
        nxt = ext_ints(res)["nextBeginOffset"]
        assert res.body_bytes() == expected_body(broker, results, list(range(offset, nxt)))
        pulled += res.body_bytes()
        offset = nxt
    assert pulled == expected_body(broker, results, list(range(24)))


def test_body_decodes_to_the_messages_put(broker: Any) -> None:
    put(broker, 4, tags=["A", "B", "A", "B"])
    res = do_pull(broker, pull_req(0, subscription="B"))
    table = rmqlog.decode_records(res.body_bytes())
    assert table["tags"].to_pylist() == ["B", "B"]
    assert table["queueOffset"].to_pylist() == [1, 3]
    assert table.to_pylist() == broker.store.read_window("T", 0, 0, tags="B").messages.to_pylist()
