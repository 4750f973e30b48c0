"""``append.state``: two CRC-checked slots overwritten in place (rmqlog.log.append_state)."""

from __future__ import annotations

import json
import struct
import threading
from pathlib import Path

import pytest

from rmqlog.log.append_base import DELTA_MAX_BYTES
from rmqlog.log.append_state import _HEADER, _SLOT_HEADER, MIN_SLOT, AppendState, AppendStateFile


def _state(tail: int, **queues: int) -> AppendState:
    return AppendState(tail=tail, store_timestamp=tail, queues=dict(queues))


def test_publish_alternates_slots_and_load_returns_the_newest(tmp_path: Path) -> None:
    f = AppendStateFile(tmp_path / "append.state")
    assert f.load() is None
    for tail in range(1, 6):
        s = f.load() or AppendState()
        s.tail = tail
        f.publish(s)
        got = f.load()
        assert got is not None and got.tail == tail and got.slot == (tail - 1) % 2
    assert (tmp_path / "append.state").stat().st_size == _HEADER.size + 2 * MIN_SLOT


def test_torn_newest_slot_falls_back_to_the_previous_state(tmp_path: Path) -> None:
    path = tmp_path / "append.state"
    f = AppendStateFile(path)
    f.publish(_state(10, **{"T/0": 3}))
    s = f.load()
    assert s is not None
    s.tail = 20
    f.publish(s)  # now in slot 1
    raw = bytearray(path.read_bytes())
    body_at = _HEADER.size + MIN_SLOT + _SLOT_HEADER.size
    raw[body_at + 3] ^= 0xFF  # a torn write of slot 1
    path.write_bytes(bytes(raw))
    g = AppendStateFile(path).load()
    assert g is not None and g.tail == 10 and g.queues == {"T/0": 3}
    # and the next publish overwrites the torn slot, not the good one
    g.tail = 30
    AppendStateFile(path).publish(g)
    h = AppendStateFile(path).load()
    assert h is not None and h.tail == 30 and h.slot == 1


@pytest.mark.parametrize("content", [b"", b"RMQASTv2" + bytes(8), b"\x00" * 200, b"{not json"])
def test_unreadable_file_loads_as_none(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "append.state").write_bytes(content)
    assert AppendStateFile(tmp_path / "append.state").load() is None


def test_first_format_plain_json_is_read_and_converted(tmp_path: Path) -> None:
    path = tmp_path / "append.state"
    path.write_text(
        json.dumps({"version": 1, "tail": 77, "storeTimestamp": 5, "queues": {"T/1": 2}, "writers": {"w": 4}})
    )
    f = AppendStateFile(path)
    s = f.load()
    assert s is not None and (s.tail, s.queues, s.writers) == (77, {"T/1": 2}, {"w": 4})
    s.tail = 88
    f.publish(s)
    assert path.read_bytes()[:8] == b"RMQASTv2"
    t = AppendStateFile(path).load()
    assert t is not None and t.tail == 88 and t.writers == {"w": 4}


def test_a_large_state_keeps_its_tables_in_a_base_and_publishes_only_changes(tmp_path: Path) -> None:
    path = tmp_path / "append.state"
    f = AppendStateFile(path)
    f.publish(_state(1))
    big = f.load()
    assert big is not None
    big.queues = {f"topic-{i}/{q}": i for i in range(3000) for q in range(4)}
    f.publish(big)
    _, size, _ = struct.unpack(">8sII", path.read_bytes()[:16])
    assert size == MIN_SLOT  # the tables went into a base, not into bigger slots
    bases = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("append.base."))
    assert bases == ["append.base.0000000000000001"]
    got = AppendStateFile(path).load()
    assert got is not None and got.queues == big.queues and got.base == 1
    got.tail = 2
    got.queues["topic-7/1"] = 99
    f.publish(got)
    slot = path.read_bytes()
    assert b"topic-7/1" in slot and b"topic-8/1" not in slot  # the slot holds the change alone
    again = AppendStateFile(path).load()
    assert again is not None and again.tail == 2 and again.queues["topic-7/1"] == 99
    assert again.queues == {**big.queues, "topic-7/1": 99}


def test_changes_past_the_delta_bound_are_compacted_into_a_new_base(tmp_path: Path) -> None:
    path = tmp_path / "append.state"
    f = AppendStateFile(path)
    f.publish(_state(1, **{f"T{i}/0": i for i in range(2000)}))
    state = f.load()
    assert state is not None and state.base == 1
    for round_ in range(3):  # every queue changed, a few hundred per publish: compactions
        for lo in range(0, 2000, 300):
            state = f.load()
            assert state is not None
            for i in range(lo, min(lo + 300, 2000)):
                state.queues[f"T{i}/0"] = i + 1000 * (round_ + 1)
            f.publish(state)
            assert len(state.to_bytes()) <= DELTA_MAX_BYTES + 64
    got = AppendStateFile(path).load()
    assert got is not None and got.queues == {f"T{i}/0": i + 3000 for i in range(2000)}
    gens = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("append.base."))
    assert len(gens) <= 2 and got.base > 2  # older bases removed once no slot names them


def test_a_lost_base_makes_the_state_unreadable_not_wrong(tmp_path: Path) -> None:
    path = tmp_path / "append.state"
    f = AppendStateFile(path)
    f.publish(_state(5, **{f"T{i}/0": i for i in range(2000)}))
    for p in tmp_path.iterdir():
        if p.name.startswith("append.base."):
            p.write_bytes(p.read_bytes()[:-3] + b"999")  # damaged: fails its CRC
    assert AppendStateFile(path).load() is None  # rebuilt from the commitlog by the store
    for p in tmp_path.iterdir():
        if p.name.startswith("append.base."):
            p.unlink()
    assert AppendStateFile(path).load() is None


def test_lock_free_readers_never_see_a_torn_or_missing_state(tmp_path: Path) -> None:
    path = tmp_path / "append.state"
    writer = AppendStateFile(path)
    writer.publish(_state(0, **{"T/0": 0}))
    stop = threading.Event()
    bad: list[object] = []

    def read() -> None:
        r = AppendStateFile(path)
        while not stop.is_set():
            s = r.load()
            if s is None or s.queues.get("T/0") != s.tail:
                bad.append(s)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    s = writer.load()
    assert s is not None
    for tail in range(1, 3000):
        s.tail = tail
        s.queues = {"T/0": tail, **{f"pad/{i}": tail for i in range(tail % 50)}}  # varying sizes
        writer.publish(s)
    stop.set()
    for t in readers:
        t.join()
    assert bad == []


def test_a_rewrite_is_seen_even_when_the_old_file_keeps_another_link(tmp_path: Path) -> None:
    """Two openers of one root (two processes); the file is hard-linked (a ``cp -al``
    snapshot), then one opener rewrites the file (a new file renamed over the path, as for a
    file of the first format, or one whose slots are too small). The old inode keeps a link, so ``st_nlink`` cannot
    tell: both openers
    must read the new file, or the other's next append would scrub and overwrite the log
    past its stale tail (found by review: 5,000 acknowledged messages lost)."""
    path = tmp_path / "append.state"
    a, b = AppendStateFile(path), AppendStateFile(path)
    a.publish(_state(10, **{"T/0": 1}))
    assert a.load() is not None and b.load() is not None  # both hold a descriptor
    (tmp_path / "snapshot").mkdir()
    (tmp_path / "snapshot" / "append.state").hardlink_to(path)
    big = b.load()
    assert big is not None
    big.tail = 999
    big.queues = {f"topic-{i}/0": i for i in range(MIN_SLOT // 16)}
    b._rewrite(big, big.to_bytes(), durable=False)  # noqa: SLF001 - the rewrite itself
    assert (tmp_path / "snapshot" / "append.state").stat().st_nlink == 1  # the old file, still linked
    for opener in (a, b):
        got = opener.load()
        assert got is not None and got.tail == 999 and len(got.queues) == MIN_SLOT // 16
    old = AppendStateFile(tmp_path / "snapshot" / "append.state").load()
    assert old is not None and old.tail == 10  # the snapshot keeps what it had
    a.close()
    b.close()


def test_the_idle_token_names_only_a_state_this_process_loaded(tmp_path: Path) -> None:
    """``version()`` is for "has anything been published since I loaded?": while the newest
    slot's header is there but its JSON is not (a publish caught mid-``pwrite``: ``load()``
    falls back to the previous state), or another opener published since, it is ``None``,
    so a dispatcher never records a token for a state it did not see (found by review: the
    next rounds were skipped for up to a second)."""
    path = tmp_path / "append.state"
    w, r = AppendStateFile(path), AppendStateFile(path)
    w.publish(_state(10))
    assert r.version() is None  # nothing loaded yet
    loaded = r.load()
    assert loaded is not None and loaded.tail == 10
    token = r.version()
    assert token is not None and r.version() == token  # stable while nothing is published
    s = w.load()
    assert s is not None
    s.tail = 20
    before = path.read_bytes()
    w.publish(s)
    after = path.read_bytes()
    assert r.version() is None  # published since r loaded
    # mid-pwrite: the new slot's header in place, its JSON not yet
    size = _HEADER.unpack_from(after)[1]
    slot_at = next(at for at in (_HEADER.size, _HEADER.size + size) if before[at : at + 16] != after[at : at + 16])
    path.write_bytes(
        before[:slot_at] + after[slot_at : slot_at + _SLOT_HEADER.size] + before[slot_at + _SLOT_HEADER.size :]
    )
    r2 = AppendStateFile(path)
    got = r2.load()
    assert got is not None and got.tail == 10  # the torn slot fails its CRC: the previous state
    assert r2.version() is None  # the header newer than the state loaded: no token
    path.write_bytes(after)  # the write completes
    got = r2.load()
    assert got is not None and got.tail == 20 and r2.version() is not None
    for f in (w, r, r2):
        f.close()


def test_a_store_of_many_queues_publishes_small_slots_and_survives_a_lost_base(tmp_path: Path) -> None:
    """900 queues: the tables go into a base file, every later publish writes only what changed
    (the per-put cost no longer grows with the store's queues); reopened, and with its base
    damaged, the store has the same next offsets (rebuilt from the log)."""
    import pyarrow as pa
    from conftest import small_store_config

    import rmqlog
    from rmqlog import WireMessage

    root = tmp_path / "s"
    n = 900
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(
            pa.table(
                {"topic": [f"T{i}" for i in range(n)], "body": [b"x"] * n, "queueId": pa.array([0] * n, pa.int32())}
            )
        )
        state = s.parts.state_file.load()
        assert state is not None and state.base >= 1 and len(state.queues) == n
        for i in range(50):
            s.put_messages([WireMessage(f"T{i}", 0, b"y")])
            assert len(s.parts.state_file.load().to_bytes()) <= DELTA_MAX_BYTES  # type: ignore[union-attr]
        want = dict(s.parts.state_file.load().queues)  # type: ignore[union-attr]
    assert [p.name for p in root.iterdir() if p.name.startswith("append.base.")]
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert dict(s.parts.state_file.load().queues) == want  # type: ignore[union-attr]
        assert s.verify().problems == []
    for p in root.iterdir():
        if p.name.startswith("append.base."):
            p.write_bytes(b"damaged")
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert dict(s.append_state().queues) == want  # rebuilt from the log
        assert s.put_messages([WireMessage("T7", 0, b"z")]).queue_offsets == [want["T7/0"]]
        assert s.verify().problems == []
