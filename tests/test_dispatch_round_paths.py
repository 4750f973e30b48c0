"""The fixed cost of a dispatch round: its fast paths against the general ones.

- Properties: TAGS, UNIQ_KEY and KEYS found in one pass (``ParsedProperties(names=...)``).
- ``to_binary``: offsets narrowed by numpy instead of an Arrow cast.
- The index's topic prefix hashes remembered per topic.
- ``dispatch.state`` read through a descriptor kept open (re-opened when the file is removed).

Each is pinned to the general path: the same store bytes (commitlog, units, index files,
``dispatch.state``) for random puts across topics and queues, with two store objects (as two
processes: each its own dispatcher) putting and dispatching in turn.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import SMALL_COMMITLOG, SMALL_CQ

import rmqlog
import rmqlog.index.index_keys as index_keys_mod
import rmqlog.log.gather as gather_mod
import rmqlog.queue.dispatcher as dispatcher_mod
from rmqlog import safe_open
from rmqlog.log.gather import gather_slices, to_binary
from rmqlog.log.properties import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, ParsedProperties
from rmqlog.queue.dispatch_position import DispatchPositionFile
from rmqnet.broker.send import WIRE_SCHEMA

T0 = 1_700_000_000_000
TOPICS = ("A", "B", "C")


def _cfg() -> rmqlog.StoreConfig:
    # small segments: the commitlog rolls, queues cross segment boundaries, index files fill
    return rmqlog.StoreConfig(
        mapped_file_size_commit_log=SMALL_COMMITLOG * 4,
        mapped_file_size_consume_queue=SMALL_CQ,
        max_hash_slot_num=64,
        max_index_num=90,
    )


def _batch(rng: random.Random, serial: list[int]) -> pa.Table:
    n = rng.randint(1, 25)
    props = []
    for _ in range(n):
        serial[0] += 1
        items = [f"UNIQ_KEY\x01{serial[0]:032X}"]
        if rng.random() < 0.7:
            items.append("TAGS\x01" + rng.choice(["a", "b", "tag-x", ""]))
        if rng.random() < 0.4:
            items.append(
                "KEYS\x01" + " ".join(rng.choice(["k1", "k2", "order-7", ""]) for _ in range(rng.randint(1, 3)))
            )
        if rng.random() < 0.3:
            items.append("u\x01v")
        rng.shuffle(items)
        props.append("".join(f"{it}\x02" for it in items))
    return pa.table(
        {
            "topic": [rng.choice(TOPICS) for _ in range(n)],
            "queueId": [rng.randrange(4) for _ in range(n)],
            "body": [bytes([rng.randrange(256)]) * rng.randint(1, 60) for _ in range(n)],
            "flag": [0] * n,
            "sysFlag": [0] * n,
            "bornTimestamp": [T0] * n,
            "bornHost": ["127.0.0.1:5555"] * n,
            "properties": props,
            "reconsumeTimes": [0] * n,
        },
        schema=WIRE_SCHEMA,
    )


def _run(root: Path, seed: int) -> dict[str, int]:
    """Random puts by two store objects on ``root`` and dispatches by either; returns how
    many rounds each kind of step took (to check the test covers what it means to)."""
    rng = random.Random(seed)
    clock = rmqlog.ManualClock(T0)
    serial = [0]
    steps = {"dispatch": 0, "other": 0}
    first = rmqlog.MessageStore(root, _cfg(), clock=clock)
    for t in TOPICS:
        first.create_topic(t, 4)
    second = rmqlog.MessageStore(root, _cfg(), clock=clock)
    stores = [first, second]
    try:
        last = 0
        for _ in range(60):
            who = rng.randrange(2)
            stores[who].put_wire(_batch(rng, serial))
            clock.advance(rng.choice([0, 1, 7]))
            if rng.random() < 0.7:
                d = rng.randrange(2)
                stores[d].dispatch()
                steps["dispatch" if d == last else "other"] += 1
                last = d
        stores[0].dispatch()
    finally:
        second.close()
        first.close()
    return steps


def _files(root: Path) -> dict[str, bytes]:
    out = {}
    for sub in ("commitlog", "consumequeue", "index"):
        for p in sorted((root / sub).rglob("*")):
            if p.is_file():
                out[str(p.relative_to(root))] = p.read_bytes()
    out["dispatch.state"] = (root / "dispatch.state").read_bytes()
    return out


@contextmanager
def _general_paths(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with monkeypatch.context() as m:
        m.setattr(dispatcher_mod, "_INDEXED_NAMES", ())  # one pass per property name
        m.setattr(gather_mod, "_INT32_MAX", -1)  # to_binary casts
        m.setattr(index_keys_mod, "_PREFIX_MEMO_TOPICS", 0)  # topic hashes computed
        m.setattr(DispatchPositionFile, "_read", lambda self: safe_open.read_bytes(self.path))
        yield


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rounds_write_the_same_bytes_as_the_general_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    with _general_paths(monkeypatch):
        _run(tmp_path / "general", seed)
    steps = _run(tmp_path / "fast", seed)
    general, fast = _files(tmp_path / "general"), _files(tmp_path / "fast")
    assert sorted(general) == sorted(fast)
    for name in general:
        assert general[name] == fast[name], name
    assert steps["other"] > 0  # and the other store dispatched in between
    assert any(name.startswith("index/") for name in fast)
    assert sum(name.startswith("consumequeue/A/0/") for name in fast) > 1  # a queue crossed a segment


def test_the_state_read_through_a_kept_descriptor_follows_the_file(tmp_path: Path) -> None:
    with rmqlog.MessageStore(tmp_path, _cfg()) as a, rmqlog.MessageStore(tmp_path, _cfg()) as b:
        a.create_topic("A", 4)
        row = {"topic": ["A"], "queueId": [0], "body": [b"x"], "properties": ["TAGS\x01t\x02"]}
        t = pa.table(row, schema=pa.schema([WIRE_SCHEMA.field(c) for c in row]))
        a.put_wire(t)
        assert a.dispatch() == 1
        path = tmp_path / "dispatch.state"
        assert a.dispatcher.position_file._read() == path.read_bytes()
        b.put_wire(t)
        assert b.dispatch() == 1  # written in place by the other: the same descriptor reads it
        assert a.dispatcher.position_file._read() == path.read_bytes()
        assert a.dispatch() == 0 and a.dispatcher.position() == b.dispatcher.position()
        # removed and written again (recovery, a full disk): opened again by its path
        kept = path.read_bytes()
        path.unlink()
        assert a.dispatcher.position() == b.dispatcher.position()  # derived from the queues
        path.write_bytes(kept)
        assert a.dispatcher.position_file._read() == kept
        path.unlink()
        with pytest.raises(FileNotFoundError):
            a.dispatcher.position_file._read()
        a.put_wire(t)
        assert a.dispatch() == 1 and a.max_offset("A", 0) == 3
        a.dispatcher.close()
        assert a.dispatcher.position_file._file is None
        assert a.dispatcher.position_file._read() == path.read_bytes()  # used again: opened again


PROPS = [
    "",
    "TAGS\x01a\x02",
    "TAGS\x01a\x02TAGS\x01b\x02",
    "KEYS\x01k1 k2\x02UNIQ_KEY\x01U\x02",
    "x\x01y",
    "TAGS\x01\x02KEYS",
    "UNIQ_KEY\x01a\x01b\x02",
    "\x02\x02TAGS\x01é\x02",
    "KEYS\x01k\x02TAGS\x01t\x02UNIQ_KEY\x01u\x02",
]


@pytest.mark.parametrize("seed", range(5))
def test_properties_found_together_are_those_found_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    props = pa.array([rng.choice(PROPS) + rng.choice(PROPS) for _ in range(rng.randint(0, 40))], pa.string())
    names = (PROPERTY_TAGS, PROPERTY_UNIQ_KEY, PROPERTY_KEYS)
    together = ParsedProperties(props, names=names)
    for name in (*names, "x"):
        alone = ParsedProperties(props).column(name)
        got = together.column(name)
        assert got.equals(alone), name
        assert got.validate(full=True) is None
    parsed = ParsedProperties(props, names=names)
    parsed.column(PROPERTY_TAGS)
    assert parsed.map_array().equals(ParsedProperties(props).map_array())  # the map is unaffected


@pytest.mark.parametrize("seed", range(5))
def test_to_binary_is_the_cast(seed: int) -> None:
    rng = np.random.default_rng(seed)
    data = pa.py_buffer(rng.integers(0, 256, 500, dtype=np.uint8).tobytes())
    n = int(rng.integers(1, 30))
    starts = np.sort(rng.integers(0, 400, n))
    lengths = rng.integers(0, 20, n)
    arr = gather_slices(data, starts, lengths)
    got = to_binary(arr)
    assert got.type == pa.binary() and got.equals(arr.cast(pa.binary()))
    got.validate(full=True)
    with_nulls = pa.array([None if i % 3 == 0 else bytes([i]) * i for i in range(n)], pa.large_binary())
    assert to_binary(with_nulls).equals(with_nulls.cast(pa.binary()))
    to_binary(with_nulls).validate(full=True)
    sliced = arr.slice(1)
    assert to_binary(sliced).equals(sliced.cast(pa.binary()))
    empty_values = pa.array([b""] * n, pa.large_binary())
    assert to_binary(empty_values).equals(empty_values.cast(pa.binary()))


@pytest.mark.parametrize("column_type", [pa.string(), pa.large_string(), pa.binary()])
def test_topic_prefix_memo_gives_the_computed_hashes(monkeypatch: pytest.MonkeyPatch, column_type: pa.DataType) -> None:
    import rmqlog.index.index_keys as ik

    rows = ["A", "topic-é", "A", "%RETRY%g", "", "A"]
    topics = pa.array([r.encode() for r in rows] if pa.types.is_binary(column_type) else rows, column_type)
    monkeypatch.setattr(ik, "_PREFIX_MEMO", {})
    computed = ik._topic_prefix_hashes(topics, len(rows))
    assert len(ik._PREFIX_MEMO) == 4
    remembered = ik._topic_prefix_hashes(topics, len(rows))
    assert computed.tolist() == remembered.tolist()
    monkeypatch.setattr(ik, "_PREFIX_MEMO_TOPICS", 0)  # the memo off: the Arrow path alone
    assert ik._topic_prefix_hashes(topics, len(rows)).tolist() == computed.tolist()
    assert ik._topic_prefix_hashes(topics.dictionary_encode(), len(rows)).tolist() == computed.tolist()
    java = [_java_hash(r + "#") for r in rows]
    assert computed.tolist() == java


def _java_hash(s: str) -> int:
    h = 0
    for unit in np.frombuffer(s.encode("utf-16-be"), ">u2").tolist():
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h
