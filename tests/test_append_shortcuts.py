"""The fixed cost of one small append (an append of one small message): what the shortcuts keep.

- ``append.state``'s descriptor is reused while the file keeps its link, so every append
  skips the path walk; a state published by another opener (in place, or rewritten into a
  new file) is still seen by the next load.
- Two stores on one root appending in turn: each sees the other's appends (dense queue
  offsets, no tail reused, every record readable).
- The wire fast path's exact check of screened property names, and the queue offsets of a
  batch for one queue: the same outcome as the general code.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

import rmqlog
from rmqlog.log.append_state import AppendState, AppendStateFile
from rmqlog.log.commitlog import assign_queue_offsets
from rmqlog.log.encode import wire_put
from rmqlog.log.encode.trailer import JoinedProperties


def test_state_published_by_another_opener_is_seen_in_place_and_after_a_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "append.state"
    a, b = AppendStateFile(path), AppendStateFile(path)
    a.publish(AppendState(tail=1, queues={"T/0": 1}))
    for tail in range(2, 8):  # in turn, in place: each sees the other's last publish
        me = a if tail % 2 else b
        s = me.load()
        assert s is not None and s.tail == tail - 1
        s.tail = tail
        me.publish(s)
    ino = path.stat().st_ino
    s = b.load()
    assert s is not None
    s.queues = {f"topic-{i}/{q}": i for i in range(3000) for q in range(4)}
    s.tail = 100
    b._rewrite(s, s.to_bytes(), durable=False)  # noqa: SLF001 - a new file (as for a first-format one)
    assert path.stat().st_ino != ino
    got = a.load()  # a's descriptor is on the old, unlinked file: it must reopen
    assert got is not None and got.tail == 100 and got.queues == s.queues
    got.tail = 101
    a.publish(got)
    again = b.load()
    assert again is not None and again.tail == 101


def test_a_removed_state_file_is_not_read_through_the_old_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "append.state"
    f = AppendStateFile(path)
    f.publish(AppendState(tail=5))
    assert f.load() is not None
    path.unlink()
    assert f.load() is None


def _rows(n: int, start: int) -> pa.Table:
    return pa.table(
        {
            "topic": ["T"] * n,
            "queueId": pa.array([0] * n, pa.int32()),
            "body": [f"m{start + i}".encode() for i in range(n)],
        }
    )


def test_two_stores_on_one_root_appending_in_turn_see_each_other(tmp_path: Path) -> None:
    root = tmp_path / "s"
    one = rmqlog.MessageStore.open(root)
    one.create_topic("T", 1)
    two = rmqlog.MessageStore.open(root)
    try:
        offsets: list[int] = []
        physical: list[int] = []
        for i in range(12):
            store = one if i % 2 == 0 else two
            res = store.put_batch(_rows(1 + i % 3, len(offsets)))
            offsets += res.column("queueOffset").to_pylist()
            physical += res.column("commitLogOffset").to_pylist()
        assert offsets == list(range(len(offsets)))  # dense, none given twice
        assert physical == sorted(set(physical))  # no tail reused
        one.dispatch()
        for store in (one, two):
            got = store.read_queue("T", 0, 0, len(offsets))
            assert got.column("body").to_pylist() == [f"m{i}".encode() for i in range(len(offsets))]
    finally:
        two.close()
        one.close()


# ---- the fast path's exact check of screened property names (numpy words, no Arrow kernel)
def _joined(props: list[str], cluster: str | None = None) -> JoinedProperties | None:
    return wire_put.joined_wire_properties(pa.array(props, pa.string()), len(props), cluster)


@pytest.mark.parametrize("name", sorted(wire_put._SLOW_NAMES) + ["RMQLOG_X", "RMQLOG_" + "Y" * 60])
def test_a_name_the_general_path_routes_or_refuses_leaves_the_fast_path(name: str) -> None:
    assert _joined(["A\x01b\x02", f"K\x01v\x02{name}\x011\x02Z\x01z\x02"]) is None


@pytest.mark.parametrize(
    "name",
    [
        "WAIX",
        "WAITT",
        "DELAX",
        "REAL_TOPIX",
        "RMQLOG",
        "RMQLOX_A",
        "R" * 31,
        "R" * 40,
        "TIMER_DELAY_SEC" + "X" * 20,
        "D" * 5,
    ],
)
def test_a_name_only_like_those_stays_on_the_fast_path_whole(name: str) -> None:
    props = ["A\x01b\x02", f"K\x01v\x02{name}\x011\x02Z\x01z\x02"]
    got = _joined(props)
    assert got is not None and got.items.to_pylist() == [p.encode() for p in props]


@pytest.mark.parametrize("cluster", [None, "C1"])
def test_dropped_names_are_found_exactly_among_screened_ones(cluster: str | None) -> None:
    props = ["WAIT\x01true\x02WAIX\x01a\x02", "CLUSTER\x01old\x02K\x01v\x02", "X\x01y\x02WAIT\x01false\x02"]
    got = _joined(props, cluster)
    assert got is not None
    kept = ["WAIX\x01a\x02", "K\x01v\x02" if cluster else "CLUSTER\x01old\x02K\x01v\x02", "X\x01y\x02"]
    assert got.items.to_pylist() == [k.encode() for k in kept]


@pytest.mark.parametrize("seed", range(8))
def test_screened_names_match_a_set_lookup_name_by_name(seed: int) -> None:
    """Names of the sets, the store's prefix, and near misses (a byte changed, added or cut),
    anywhere in the rows (the last item of the buffer too): the fast path's hashed word
    lookup decides as Python's set membership of each name does."""
    rng = random.Random(seed)
    cluster = rng.choice([None, "C1"])
    known = sorted(wire_put._SLOW_NAMES | wire_put._DROPPED_NAMES[True]) + ["RMQLOG_A", "UNIQ_KEY", "TAGS"]

    def near(name: str) -> str:
        i = rng.randrange(len(name))
        return rng.choice(
            [
                name,
                name,
                name[:i] + chr(ord(name[i]) ^ 1) + name[i + 1 :],
                name + "X",
                name[:-1] or "Q",
                name + "Y" * 30,
            ]
        )

    rows = [[(near(rng.choice(known)), f"v{rng.randrange(9)}") for _ in range(rng.randint(1, 4))] for _ in range(300)]
    props = ["".join(f"{k}\x01{v}\x02" for k, v in row) for row in rows]
    slow = wire_put._SLOW_NAMES
    dropped = wire_put._DROPPED_NAMES[cluster is not None]
    if any(k in slow or k.startswith("RMQLOG_") for row in rows for k, _ in row):
        assert _joined(props, cluster) is None
        rows = [[(k, v) for k, v in row if k not in slow and not k.startswith("RMQLOG_")] for row in rows]
        props = ["".join(f"{k}\x01{v}\x02" for k, v in row) for row in rows]
    got = _joined(props, cluster)
    assert got is not None
    assert got.items.to_pylist() == [
        "".join(f"{k}\x01{v}\x02" for k, v in row if k not in dropped).encode() for row in rows
    ]


# ---- queue offsets: the one-queue case against a reference count, any batch size
def _reference_offsets(
    topics: list[str], topic_index: np.ndarray, queue_id: np.ndarray, queues: dict[str, int]
) -> np.ndarray:
    out = np.empty(len(queue_id), np.int64)
    for i, (t, q) in enumerate(zip(topic_index.tolist(), queue_id.tolist(), strict=True)):
        name = f"{topics[t]}/{q}"
        out[i] = queues.get(name, 0)
        queues[name] = out[i] + 1
    return out


@pytest.mark.parametrize("seed", range(6))
def test_queue_offsets_of_one_queue_and_of_many_match_a_row_by_row_count(seed: int) -> None:
    rng = np.random.default_rng(seed)
    queues = {"A/0": 7, "A/3": 2, "B/1": 40}
    expected = dict(queues)
    for _ in range(40):
        n = int(rng.integers(1, 6))
        topics = ["A"] if rng.random() < 0.6 else ["A", "B"]
        qid = (
            np.full(n, int(rng.integers(0, 4)), np.int32)
            if rng.random() < 0.6
            else rng.integers(0, 4, n).astype(np.int32)
        )
        tidx = rng.integers(0, len(topics), n).astype(np.int32)
        batch = SimpleNamespace(round_robin=None, topics=topics, topic_index=tidx, queue_id=qid, n=n)
        got = assign_queue_offsets(batch, queues)  # type: ignore[arg-type]
        assert got.dtype == np.int64
        assert got.tolist() == _reference_offsets(topics, tidx, qid, expected).tolist()
        assert queues == expected


def test_int64_array_equals_pa_array_of_any_integer_input() -> None:
    from rmqlog.log.encode.arrays import int64_array

    base = np.array([5, -3, 1 << 40, 0, 7], np.int64)
    for values in (base, base[::2], base.astype(np.int32)[:3], np.zeros(0, np.int64), base.reshape(5, 1)[:, 0]):
        got = int64_array(values)
        assert got.type == pa.int64() and got.null_count == 0
        assert got.equals(pa.array(np.asarray(values, np.int64)))


def test_put_results_are_the_appended_offsets(tmp_path: Path) -> None:
    store = rmqlog.MessageStore.open(tmp_path / "s")
    try:
        store.create_topic("T", 1)
        first = store.put_batch(_rows(3, 0))
        second = store.put_batch(_rows(2, 3))
        assert first.schema.field("commitLogOffset").type == pa.int64()
        assert first.column("queueOffset").to_pylist() == [0, 1, 2]
        assert second.column("queueOffset").to_pylist() == [3, 4]
        phys = first.column("commitLogOffset").to_pylist() + second.column("commitLogOffset").to_pylist()
        for offset, i in zip(phys, range(5), strict=True):
            got = store.message_by_offset(offset)
            assert got is not None and got["body"] == f"m{i}".encode()
    finally:
        store.close()
