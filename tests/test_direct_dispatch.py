"""``put_batch(..., dispatch=True)``: units written from the batch's own fields.

They must be exactly what the dispatcher writes by reading the commitlog back: same files,
byte for byte (checked with the independent reader), same dispatch position.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from conftest import SMALL_COMMITLOG, SMALL_CQ

import refcodec as rc
import rmqlog

MAP = pa.map_(pa.string(), pa.string())


def _batches() -> list[pa.Table]:
    out = []
    for i in range(6):
        n = 30 + i
        out.append(
            pa.table(
                {
                    "topic": ["A", "B", "A"] * (n // 3) + ["A"] * (n % 3),
                    "body": [bytes([i]) * (20 + j % 40) for j in range(n)],
                    "tags": [None if j % 5 == 0 else ("x", "y", "")[j % 3] for j in range(n)],
                }
            )
        )
    # TAGS given in the properties map: the batch falls back to the reading dispatcher
    out.append(
        pa.table(
            {"topic": ["A", "A"], "body": [b"p", b"q"], "properties": pa.array([[("TAGS", "z")], [("k", "v")]], MAP)}
        )
    )
    return out


def _queue_files(root: Path) -> dict[str, list[tuple[int, int, int]]]:
    out = {}
    for qdir in sorted((root / "consumequeue").glob("*/*")):
        out[f"{qdir.parent.name}/{qdir.name}"] = rc.read_consume_queue(str(qdir))
    return out


def test_direct_dispatch_writes_what_the_dispatcher_would(tmp_path: Path) -> None:
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=SMALL_COMMITLOG, mapped_file_size_consume_queue=SMALL_CQ)
    a, b = tmp_path / "direct", tmp_path / "scanned"
    with rmqlog.MessageStore.open(a, cfg) as sa, rmqlog.MessageStore.open(b, cfg) as sb:
        for t in _batches():
            sa.put_batch(t, dispatch=True)
            sb.put_batch(t)
        assert sb.dispatch() > 0
        assert sa.dispatch() == 0  # nothing left over
        assert sa.dispatcher.position() == sb.dispatcher.position() == sa.published_tail()
        for topic in ("A", "B"):
            for q in range(4):
                assert sa.max_offset(topic, q) == sb.max_offset(topic, q)
                assert (
                    sa.read_queue(topic, q, 0, 1000)
                    .drop_columns(["msgId", "properties", "bornTimestamp", "storeTimestamp"])
                    .equals(
                        sb.read_queue(topic, q, 0, 1000).drop_columns(
                            ["msgId", "properties", "bornTimestamp", "storeTimestamp"]
                        )
                    )
                )
    assert len(list((a / "commitlog").iterdir())) > 2  # the log rolled
    assert _queue_files(a) == _queue_files(b)
    assert any(u[2] == 0 for units in _queue_files(a).values() for u in units)  # untagged rows: tagsCode 0


def test_direct_dispatch_falls_back_when_the_dispatcher_is_behind(tmp_path: Path) -> None:
    with rmqlog.MessageStore.open(tmp_path) as s:
        s.put_batch(
            pa.table({"topic": ["T"] * 3, "body": [b"1", b"2", b"3"], "queueId": pa.array([0] * 3, pa.int32())})
        )
        s.put_batch(
            pa.table({"topic": ["T"] * 2, "body": [b"4", b"5"], "queueId": pa.array([0] * 2, pa.int32())}),
            dispatch=True,
        )
        assert s.max_offset("T", 0) == 5  # the earlier, undispatched batch too
        assert s.read_queue("T", 0, 0, 5)["body"].to_pylist() == [b"1", b"2", b"3", b"4", b"5"]
        assert s.dispatch() == 0


def test_replayed_idempotent_batch_with_dispatch_writes_nothing(tmp_path: Path) -> None:
    with rmqlog.MessageStore.open(tmp_path) as s:
        t = pa.table({"topic": ["T"] * 2, "body": [b"a", b"b"]})
        assert s.put_batch(t, writer="w", sequence=1, dispatch=True).num_rows == 2
        assert s.put_batch(t, writer="w", sequence=1, dispatch=True).num_rows == 0
        assert sum(s.max_offset("T", q) for q in range(4)) == 2


def test_the_saved_position_is_rewritten_in_place_and_checked(tmp_path: Path) -> None:
    """dispatch.state: rewritten in place (one inode, no temporary file), with a CRC; a file
    whose CRC fails (a torn write) is ignored and the position derived from the queues, one
    without a CRC (an older store's) is read as it is."""
    import json

    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        s.put_batch(pa.table({"topic": ["P"] * 3, "body": [b"x"] * 3}))
        s.dispatch()
        state = root / "dispatch.state"
        inode, first = state.stat().st_ino, json.loads(state.read_bytes())
        s.put_batch(pa.table({"topic": ["P"] * 2, "body": [b"y"] * 2}))
        s.dispatch()
        saved = json.loads(state.read_bytes())
        assert state.stat().st_ino == inode and not (root / "dispatch.state.tmp").exists()
        assert saved["offset"] == s.published_tail() > first["offset"] and "crc" in saved
        state.write_text(json.dumps({**saved, "offset": first["offset"]}))  # a mix: old offset, new CRC
        assert s.dispatcher.position() == s.published_tail()  # derived, not the stale offset
        state.write_text(json.dumps({"version": 1, "offset": first["offset"], "storeTimestamp": 0}))
        assert s.dispatcher.position() == first["offset"]  # no CRC: read as it is
        assert s.dispatch() == 2 and s.dispatcher.position() == s.published_tail()  # walked again, nothing doubled
        assert sum(s.max_offset("P", q) for q in range(s.topics()["P"].write_queue_nums)) == 5
