"""The fixed cost of one small append (issue 29, "fastappend"): what the shortcuts keep.

- ``append.state``'s descriptor is reused while the file keeps its link, so every append
  skips the path walk; a state published by another opener (in place, or rewritten into a
  new file) is still seen by the next load.
- Two stores on one root appending in turn: each sees the other's appends (dense queue
  offsets, no tail reused, every record readable).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import rmqlog
from rmqlog.log.append_state import AppendState, AppendStateFile


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
    s.queues = {f"topic-{i}/{q}": i for i in range(3000) for q in range(4)}  # outgrows the slots: a new file
    s.tail = 100
    b.publish(s)
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
    return pa.table({"topic": ["T"] * n, "queueId": pa.array([0] * n, pa.int32()),
                     "body": [f"m{start + i}".encode() for i in range(n)]})


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
