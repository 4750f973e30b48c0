"""``append.state``: two CRC-checked slots overwritten in place (rmqlog.log.append_state)."""

from __future__ import annotations

import json
import struct
import threading
from pathlib import Path

import pytest

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
    path.write_text(json.dumps({"version": 1, "tail": 77, "storeTimestamp": 5, "queues": {"T/1": 2}, "writers": {"w": 4}}))
    f = AppendStateFile(path)
    s = f.load()
    assert s is not None and (s.tail, s.queues, s.writers) == (77, {"T/1": 2}, {"w": 4})
    s.tail = 88
    f.publish(s)
    assert path.read_bytes()[:8] == b"RMQASTv2"
    t = AppendStateFile(path).load()
    assert t is not None and t.tail == 88 and t.writers == {"w": 4}


def test_state_outgrowing_the_slots_is_rewritten_bigger(tmp_path: Path) -> None:
    path = tmp_path / "append.state"
    f = AppendStateFile(path)
    f.publish(_state(1))
    big = f.load()
    assert big is not None
    big.queues = {f"topic-{i}/{q}": i for i in range(3000) for q in range(4)}
    f.publish(big)
    _, size, _ = struct.unpack(">8sII", path.read_bytes()[:16])
    assert size > MIN_SLOT
    got = AppendStateFile(path).load()
    assert got is not None and got.queues == big.queues
    got.tail = 2
    f.publish(got)  # and in place again afterwards
    again = AppendStateFile(path).load()
    assert again is not None and again.tail == 2 and again.queues == big.queues


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
