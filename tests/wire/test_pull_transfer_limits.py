"""The pull's transfer limits: RocketMQ 4.9.8's four MessageStoreConfig keys and
``accessMessageInMemoryMaxRatio`` read from broker.conf (BrokerConfig), and applied unit by
unit as ``DefaultMessageStore.getMessage`` applies ``isTheBatchFull`` (each unit judged in
memory or on disk by ``maxOffsetPy - offsetPy > memory * ratio / 100``, filtered-out units
included), checked against a scalar transcription of that loop on random windows."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import rmqlog
from rmqlog.results import DiskLimits
from rmqnet.broker import pull
from rmqnet.broker.broker import Broker
from rmqnet.broker.config import BrokerConfig
from rmqnet.remoting import RequestCode, ResponseCode

from .brokerpull_support import FakePeer, open_store, request, segment_bytes

LIMIT_KEYS = (
    "maxTransferCountOnMessageInMemory",
    "maxTransferBytesOnMessageInMemory",
    "maxTransferCountOnMessageInDisk",
    "maxTransferBytesOnMessageInDisk",
)


def broker_with(tmp_path: Path, conf_text: str = "") -> Any:
    tmp_path.mkdir(parents=True, exist_ok=True)
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-a\n" + conf_text)
    clock = rmqlog.ManualClock(1_700_000_000_000)
    store = open_store(tmp_path / "store", clock)
    return Broker(store, BrokerConfig.from_properties(conf), clock=clock)


@contextlib.contextmanager
def opened(tmp_path: Path, conf_text: str = "") -> Iterator[Any]:
    """:func:`broker_with`, its store closed on the way out."""
    b = broker_with(tmp_path, conf_text)
    try:
        yield b
    finally:
        b.store.close()


def put(b: Any, n: int, *, tags: list[str | None] | None = None, body: bytes = b"y" * 40) -> pa.Table:
    if "T" not in b.store.topics():
        b.store.create_topic("T", 1)
    cols: dict[str, Any] = {"topic": ["T"] * n, "body": [body] * n, "queueId": [0] * n}
    if tags is not None:
        cols["tags"] = pa.array(tags, pa.string())
    return b.store.put_batch(pa.table(cols), dispatch=True)


def do_pull(b: Any, offset: int, max_nums: int, subscription: str = "*") -> Any:
    ext = {
        "consumerGroup": "G",
        "topic": "T",
        "queueId": "0",
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "15000",
        "subVersion": "0",
        "subscription": subscription,
    }
    res = b.table.process(b, FakePeer(), request(RequestCode.PULL_MESSAGE, ext))
    assert res is not None and not hasattr(res, "__await__")
    return res


def body_of(b: Any, results: pa.Table, rows: list[int]) -> bytes:
    offsets = results["commitLogOffset"].to_pylist()
    sizes = b.store.record_sizes("T", 0, 0, len(offsets))
    return b"".join(segment_bytes(b.store.paths.root, offsets[r], int(sizes[r])) for r in rows)


# ------------------------------------------------------------------ broker.conf
def test_the_five_keys_are_read_from_broker_conf(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "maxTransferCountOnMessageInMemory=1000\nmaxTransferBytesOnMessageInMemory=1048576\n"
        "maxTransferCountOnMessageInDisk=100\nmaxTransferBytesOnMessageInDisk=524288\n"
        "accessMessageInMemoryMaxRatio=25\n"
    )
    c = BrokerConfig.from_properties(conf)
    assert (
        c.max_transfer_count_on_message_in_memory,
        c.max_transfer_bytes_on_message_in_memory,
        c.max_transfer_count_on_message_in_disk,
        c.max_transfer_bytes_on_message_in_disk,
        c.access_message_in_memory_max_ratio,
    ) == (1000, 1 << 20, 100, 512 << 10, 25)
    d = BrokerConfig.from_properties(None)  # RocketMQ 4.9.8's MessageStoreConfig defaults
    assert (
        d.max_transfer_count_on_message_in_memory,
        d.max_transfer_bytes_on_message_in_memory,
        d.max_transfer_count_on_message_in_disk,
        d.max_transfer_bytes_on_message_in_disk,
        d.access_message_in_memory_max_ratio,
    ) == (32, 256 << 10, 8, 64 << 10, 40)


@pytest.mark.parametrize("key", LIMIT_KEYS)
@pytest.mark.parametrize("value", ["0", "-5", "2147483648", "many"])
def test_a_bad_limit_is_refused_naming_the_key(tmp_path: Path, key: str, value: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"{key}={value}\n")
    field = "".join("_" + ch.lower() if ch.isupper() else ch for ch in key)
    with pytest.raises(rmqlog.ConfigError, match=f"{key}|{field}"):
        BrokerConfig.from_properties(conf)


@pytest.mark.parametrize("value", ["-1", "101"])
def test_a_bad_ratio_is_refused(tmp_path: Path, value: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"accessMessageInMemoryMaxRatio={value}\n")
    with pytest.raises(rmqlog.ConfigError, match="access_message_in_memory_max_ratio"):
        BrokerConfig.from_properties(conf)


# ------------------------------------------------------------------- the pulls
def test_default_limits_answer_32_of_a_pull_at_1000(tmp_path: Path) -> None:
    with opened(tmp_path) as b:
        put(b, 100)
        res = do_pull(b, 0, 1000)
        assert res.code == ResponseCode.SUCCESS and res.ext_fields["nextBeginOffset"] in (32, "32")


def test_a_pull_at_1000_gets_the_configured_count(tmp_path: Path) -> None:
    with opened(tmp_path, "maxTransferCountOnMessageInMemory=1000\n") as b:
        results = put(b, 1200)
        res = do_pull(b, 0, 1000)
        assert res.code == ResponseCode.SUCCESS and int(res.ext_fields["nextBeginOffset"]) == 1000
        assert res.body_bytes() == body_of(b, results, list(range(1000)))
        res = do_pull(b, 1000, 1000)  # the rest: 200
        assert int(res.ext_fields["nextBeginOffset"]) == 1200
        assert res.body_bytes() == body_of(b, results, list(range(1000, 1200)))
        res = do_pull(b, 0, 700)  # maxMsgNums below the limit wins
        assert int(res.ext_fields["nextBeginOffset"]) == 700


def test_a_pull_at_1000_gets_the_configured_bytes(tmp_path: Path) -> None:
    with opened(tmp_path, "maxTransferCountOnMessageInMemory=1000\n") as b:
        put(b, 10)
        size = int(b.store.record_sizes("T", 0, 0, 1)[0])
    with opened(
        tmp_path / "again",
        f"maxTransferCountOnMessageInMemory=1000\nmaxTransferBytesOnMessageInMemory={size * 37 + 5}\n",
    ) as b:
        results = put(b, 500)
        res = do_pull(b, 0, 1000)
        assert int(res.ext_fields["nextBeginOffset"]) == 37  # a 38th would carry the bytes past the limit
        assert res.body_bytes() == body_of(b, results, list(range(37)))


def test_one_message_larger_than_the_bytes_limit_is_still_sent(tmp_path: Path) -> None:
    with opened(tmp_path, "maxTransferBytesOnMessageInMemory=1\nmaxTransferBytesOnMessageInDisk=1\n") as b:
        results = put(b, 3)
        res = do_pull(b, 0, 32)
        assert int(res.ext_fields["nextBeginOffset"]) == 1 and res.body_bytes() == body_of(b, results, [0])


def test_everything_on_disk_gets_the_disk_limits_even_above_the_memory_ones(tmp_path: Path) -> None:
    """Ratio 0: every record is behind the commitlog's end, so on disk (RocketMQ's strict >);
    a disk count above the memory count is honoured (the disk limits are not a cut of a
    memory-limited read)."""
    with opened(
        tmp_path,
        "accessMessageInMemoryMaxRatio=0\nmaxTransferCountOnMessageInMemory=5\nmaxTransferCountOnMessageInDisk=12\n",
    ) as b:
        results = put(b, 40)
        res = do_pull(b, 0, 1000)
        assert int(res.ext_fields["nextBeginOffset"]) == 12
        assert res.body_bytes() == body_of(b, results, list(range(12)))
        assert int(do_pull(b, 0, 7).ext_fields["nextBeginOffset"]) == 7  # maxMsgNums still caps it


def java_get_message(
    sizes: list[int],
    offsets: list[int],
    tags: list[str | None],
    wanted: set[str] | None,
    max_offset_py: int,
    memory: int,
    max_nums: int,
    mem: tuple[int, int],
    dsk: tuple[int, int],
) -> tuple[list[int], int]:
    """DefaultMessageStore.getMessage's loop (4.9.8) over one window, scalar: (queue offsets
    taken, units scanned). ``mem``/``dsk``: (count, bytes) limits."""
    taken: list[int] = []
    buffer_total = 0
    i = 0
    for i in range(len(sizes)):  # noqa: B007 (i is the units scanned when the loop breaks)
        in_disk = max_offset_py - offsets[i] > memory
        count_limit, bytes_limit = dsk if in_disk else mem
        full = bool(buffer_total and taken) and (
            max_nums <= len(taken) or buffer_total + sizes[i] > bytes_limit or len(taken) > count_limit - 1
        )
        if full:
            return taken, i
        if wanted is None or tags[i] in wanted:
            taken.append(i)
            buffer_total += sizes[i]
    return taken, len(sizes)


@pytest.mark.parametrize("seed", range(6))
def test_unit_by_unit_limits_match_rocketmqs_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Random record sizes, tags and memory thresholds (some records on disk, the rest in
    memory): every pull's messages and nextBeginOffset are those of Java's loop."""
    rnd = random.Random(seed)
    mem, dsk = (rnd.randint(3, 40), rnd.randint(2000, 20000)), (rnd.randint(1, 20), rnd.randint(800, 8000))
    with opened(
        tmp_path,
        f"maxTransferCountOnMessageInMemory={mem[0]}\nmaxTransferBytesOnMessageInMemory={mem[1]}\n"
        f"maxTransferCountOnMessageInDisk={dsk[0]}\nmaxTransferBytesOnMessageInDisk={dsk[1]}\n"
        "accessMessageInMemoryMaxRatio=50\n",
    ) as b:
        n = 300
        tags: list[str | None] = [rnd.choice(["a", "b", None]) for _ in range(n)]
        bodies = [bytes(rnd.randint(0, 600)) for _ in range(n)]
        b.store.create_topic("T", 1)
        results = b.store.put_batch(
            pa.table({"topic": ["T"] * n, "body": bodies, "queueId": [0] * n, "tags": pa.array(tags, pa.string())}),
            dispatch=True,
        )
        offsets = results["commitLogOffset"].to_pylist()
        sizes = [int(s) for s in b.store.record_sizes("T", 0, 0, n)]
        tail = b.store.published_tail()
        for _ in range(12):
            memory = rnd.randint(0, tail)
            monkeypatch.setattr(pull, "total_memory", lambda memory=memory: memory * 2)  # ratio 50: memory bytes
            start, nums = rnd.randint(0, n - 1), rnd.choice([1, 5, 32, 1000])
            sub = rnd.choice(["*", "a", "a || b"])
            wanted = None if sub == "*" else {t.strip() for t in sub.split("||")}
            window = min(n, start + max(800, nums))
            taken, scanned = java_get_message(
                sizes[start:window], offsets[start:window], tags[start:window], wanted, tail, memory, nums, mem, dsk
            )
            res = do_pull(b, start, nums, sub)
            if taken:
                assert res.code == ResponseCode.SUCCESS, (res.code, res.remark)
                assert res.body_bytes() == body_of(b, results, [start + t for t in taken])
            else:
                assert res.code == ResponseCode.PULL_RETRY_IMMEDIATELY
            assert int(res.ext_fields["nextBeginOffset"]) == start + scanned


def test_the_store_rule_agrees_with_disk_limited(tmp_path: Path) -> None:
    """``pull.disk_limited`` (the rule stated over records) and the store's per-unit read agree
    when nothing is filtered."""
    clock = rmqlog.ManualClock(1_700_000_000_000)
    store = open_store(tmp_path / "s", clock)
    try:
        store.create_topic("T", 1)
        rnd = random.Random(7)
        results = store.put_batch(
            pa.table(
                {"topic": ["T"] * 200, "body": [bytes(rnd.randint(0, 3000)) for _ in range(200)], "queueId": [0] * 200}
            ),
            dispatch=True,
        )
        offsets = np.array(results["commitLogOffset"].to_pylist(), np.int64)
        sizes = store.record_sizes("T", 0, 0, 200).astype(np.int64)
        tail = store.published_tail()
        for memory in (0, int(tail - offsets[20]), int(tail - offsets[100]), tail):
            for start in (0, 10, 90):
                in_disk = tail - offsets[start:] > memory
                keep = pull.disk_limited(sizes[start:], in_disk, 32, 8, 20000, 9000)
                r = store.read_window(
                    "T", 0, start, max_count=32, max_bytes=20000, raw=True, disk=DiskLimits(memory, 8, 9000)
                )
                assert r.records is not None and r.records.queue_offsets.tolist() == list(range(start, start + keep))
    finally:
        store.close()


def test_bad_disk_limits_are_named(tmp_path: Path) -> None:
    clock = rmqlog.ManualClock(1_700_000_000_000)
    store = open_store(tmp_path / "s", clock)
    try:
        store.create_topic("T", 1)
        for disk, name in [
            (DiskLimits(-1, 8, 10), "disk.memory"),
            (DiskLimits(0, 0, 10), "disk.max_count"),
            (DiskLimits(0, 8, 0), "disk.max_bytes"),
            ("8", "disk"),
        ]:
            with pytest.raises(rmqlog.InvalidArgumentError, match=name):
                store.read_window("T", 0, 0, raw=True, disk=disk)  # type: ignore[arg-type]
    finally:
        store.close()
