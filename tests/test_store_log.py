"""The commitlog and consume queues on disk: segments rolling, reopening, rebuilding after lost
state files, dispatch, removed segments (retention), damaged files, a writer that died.

Bytes written by the store are checked with the independent reference codec (refcodec).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import (
    SMALL_COMMITLOG,
    batch,
    read_queue_all,
    small_store_config,
    snapshot_files,
    units,
    walk,
)

import refcodec as rc
import rmqlog
from rmqlog import GetMessageStatus as S

# --------------------------------------------------------------------------- segments


def _segment_files(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def test_segments_roll_with_blank_records(ms: rmqlog.MessageStore, root: Path) -> None:
    out = ms.put_batch(batch(topic="R", body=[bytes([65 + i % 26]) * (100 + 7 * i) for i in range(60)]))
    recs = walk(root)
    assert len(recs) == 60
    assert [r.physical_offset for r in recs] == out.column("commitLogOffset").to_pylist()
    files = _segment_files(root)
    assert len(files) >= 4
    assert [f.name for f in files] == [f"{i * SMALL_COMMITLOG:020d}" for i in range(len(files))]
    assert all(f.stat().st_size == SMALL_COMMITLOG for f in files)
    for i, f in enumerate(files[:-1]):
        data = f.read_bytes()
        in_seg = [r for r in recs if r.physical_offset // SMALL_COMMITLOG == i]
        end = in_seg[-1].physical_offset + in_seg[-1].total_size - i * SMALL_COMMITLOG
        kind, size = rc.decode_record(data, end)
        assert kind == rc.KIND_BLANK and size == SMALL_COMMITLOG - end
        nxt = recs[recs.index(in_seg[-1]) + 1]
        assert nxt.physical_offset == (i + 1) * SMALL_COMMITLOG
        assert nxt.total_size + 8 > SMALL_COMMITLOG - end  # it really did not fit
    for r in recs:  # no record crosses a segment boundary
        assert r.physical_offset // SMALL_COMMITLOG == (r.physical_offset + r.total_size - 1) // SMALL_COMMITLOG


def test_batch_and_single_puts_lay_out_identically(root: Path) -> None:
    bodies = [bytes([48 + i % 10]) * (50 + 13 * i) for i in range(45)]
    with rmqlog.MessageStore.open(root / "a", small_store_config()) as a:
        a.put_batch(batch(topic="R", body=bodies, tags="t"))
    with rmqlog.MessageStore.open(root / "b", small_store_config()) as b:
        for body in bodies:
            b.put("R", body, tags="t")
    ra, rb = walk(root / "a"), walk(root / "b")
    assert [r.physical_offset for r in ra] == [r.physical_offset for r in rb]
    assert [r.body for r in ra] == [r.body for r in rb] == bodies


def test_exact_fit_and_largest_record(ms: rmqlog.MessageStore, root: Path) -> None:
    first = ms.put("F", b"x" * 100, queue_id=0)
    overhead = walk(root)[0].total_size - 100
    # a record leaving exactly 8 bytes stays in the segment ...
    fill = SMALL_COMMITLOG - first_size(root) - 8
    r2 = ms.put("F", b"y" * (fill - overhead), queue_id=0)
    assert r2.commit_log_offset == first_size(root)
    # ... the next one cannot: an 8-byte blank, then the next segment
    r3 = ms.put("F", b"z", queue_id=0)
    assert r3.commit_log_offset == SMALL_COMMITLOG
    seg0 = (root / "commitlog" / f"{0:020d}").read_bytes()
    assert rc.decode_record(seg0, SMALL_COMMITLOG - 8) == (rc.KIND_BLANK, 8)
    # a record leaving 7 bytes does not fit
    r4_body = SMALL_COMMITLOG - (walk(root)[-1].total_size) - 7 - overhead
    r4 = ms.put("F", b"w" * r4_body, queue_id=0)
    assert r4.commit_log_offset == 2 * SMALL_COMMITLOG
    # the largest record a segment takes is segment - 8 bytes
    big = ms.put("F", b"L" * (SMALL_COMMITLOG - 8 - overhead), queue_id=0)
    assert big.commit_log_offset == 3 * SMALL_COMMITLOG
    with pytest.raises(rmqlog.MessageTooLargeError):
        ms.put("F", b"L" * (SMALL_COMMITLOG - 7 - overhead), queue_id=0)
    recs = walk(root)
    assert [r.queue_offset for r in recs] == [0, 1, 2, 3, 4]
    assert recs[-1].total_size == SMALL_COMMITLOG - 8
    assert first.commit_log_offset == 0
    ms.dispatch()
    assert [r["queueOffset"] for r in read_queue_all(ms, "F", 0)] == [0, 1, 2, 3, 4]


def first_size(root: Path) -> int:
    return walk(root)[0].total_size


def test_consume_queue_segments_roll(ms: rmqlog.MessageStore, root: Path) -> None:
    ms.put_batch(
        batch(topic="CQ", body=[b"%d" % i for i in range(120)], tags="t", queueId=pa.array([2] * 120, pa.int32()))
    )
    assert ms.dispatch() == 120
    qdir = root / "consumequeue" / "CQ" / "2"
    assert sorted(p.name for p in qdir.iterdir()) == [f"{i * 1000:020d}" for i in range(3)]
    assert all(p.stat().st_size == 1000 for p in qdir.iterdir())
    recs = walk(root)
    assert units(root, "CQ", 2) == [(r.physical_offset, r.total_size, rc.java_string_hash("t")) for r in recs]
    assert ms.max_offset("CQ", 2) == 120
    assert [int(r["body"]) for r in read_queue_all(ms, "CQ", 2, max_count=32)] == list(range(120))


# --------------------------------------------------------------------------- reopen, recovery


def test_reopen_continues_offsets(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(batch(topic="RO", body=[b"a" * 300] * 30))
        s.dispatch()
    end = _log_end(root)
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        out = s.put_batch(batch(topic="RO", body=[b"b" * 300] * 30, queueId=pa.array([1] * 30, pa.int32()))).to_pylist()
        assert out[0]["commitLogOffset"] >= end
        assert out[0]["queueOffset"] == 8  # 30 round-robin messages gave queue 1 eight
        s.dispatch()
        for q in range(4):
            got = read_queue_all(s, "RO", q)
            assert [r["queueOffset"] for r in got] == list(range(len(got)))
        assert sum(s.max_offset("RO", q) for q in range(4)) == 60
    _assert_log_consistent(root)


def test_reopen_keeps_existing_segment_size(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(batch(topic="RO", body=[b"a" * 100] * 10))
    with rmqlog.MessageStore.open(root, small_store_config(mapped_file_size_commit_log=65536)) as s:
        s.put_batch(batch(topic="RO", body=[b"b" * 300] * 40))
    assert {f.stat().st_size for f in _segment_files(root)} == {SMALL_COMMITLOG}
    assert len(walk(root)) == 50


def test_lost_append_state_is_rebuilt(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(batch(topic="AS", body=[b"a" * 200] * 30))
        s.put_batch(batch(topic="AT", body=[b"a" * 10] * 3, queueId=pa.array([2, 2, 2], pa.int32())))
    (root / "append.state").unlink()
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        res = s.put("AT", b"next", queue_id=2)
        assert res.queue_offset == 3
        assert res.commit_log_offset == _log_end(root, exclude_last=True)
        res = s.put("AS", b"next", queue_id=0)
        assert res.queue_offset == 8
        s.dispatch()
        for t in ("AS", "AT"):
            for q in range(4):
                got = read_queue_all(s, t, q)
                assert [r["queueOffset"] for r in got] == list(range(len(got)))
    _assert_log_consistent(root)


def test_consume_queues_rebuilt_from_commitlog(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(
            batch(
                topic=["X", "Y"] * 60,
                body=[b"%d" % i for i in range(120)],
                tags=pa.array(["a", None] * 60, pa.string()),
            )
        )
        s.dispatch()
    before = {(t, q): units(root, t, q) for t in ("X", "Y") for q in range(4)}
    import shutil

    shutil.rmtree(root / "consumequeue")
    (root / "dispatch.state").unlink()
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.recovery is not None and s.recovery.redispatched == 120 and s.dispatch() == 0
    assert {(t, q): units(root, t, q) for t in ("X", "Y") for q in range(4)} == before


def _log_end(root: Path, *, exclude_last: bool = False) -> int:
    recs = walk(root)
    if exclude_last:
        recs = recs[:-1]
    last = recs[-1]
    end = last.physical_offset + last.total_size
    return end


def _assert_log_consistent(root: Path) -> None:
    """refcodec reads the whole log; per queue the offsets are dense and every unit points at its record."""
    recs = walk(root)
    by_queue: dict[tuple[str, int], list[rc.RefRecord]] = {}
    for r in recs:
        by_queue.setdefault((r.topic, r.queue_id), []).append(r)
    for (topic, qid), rs in by_queue.items():
        assert [r.queue_offset for r in rs] == list(range(len(rs))), (topic, qid)
        assert units(root, topic, qid) == [(r.physical_offset, r.total_size, r.tags_code) for r in rs]


# --------------------------------------------------------------------------- dispatch


def test_dispatch_is_idempotent(ms: rmqlog.MessageStore, root: Path) -> None:
    ms.put_batch(
        batch(
            topic=["I", "J"] * 50,
            body=[b"%d" % i for i in range(100)],
            tags=pa.array(["a", "b", None, "c"] * 25, pa.string()),
        )
    )
    assert ms.dispatch() == 100
    assert ms.dispatch() == 0
    snap = snapshot_files(root)
    all_units = {(t, q): units(root, t, q) for t in ("I", "J") for q in range(4)}
    assert sum(len(u) for u in all_units.values()) == 100
    # lost dispatch position: rebuilt from the consume queues, nothing changes or is added
    (root / "dispatch.state").unlink()
    assert ms.dispatch() == 0
    assert snapshot_files(root) == snap
    # a position from before every record: the records are walked again, the units stay as they are
    (root / "dispatch.state").write_text(json.dumps({"version": 1, "offset": 0}))
    ms.dispatch()
    assert snapshot_files(root) == snap
    assert {(t, q): units(root, t, q) for t in ("I", "J") for q in range(4)} == all_units
    # and a second store object on the same root agrees
    with rmqlog.MessageStore.open(root, small_store_config()) as other:
        assert other.dispatch() == 0
        assert sum(other.max_offset(t, q) for t in ("I", "J") for q in range(4)) == 100
    ms.put("I", b"new", queue_id=0)
    assert ms.dispatch() == 1
    assert len(units(root, "I", 0)) == len(all_units[("I", 0)]) + 1


def test_two_store_objects_same_root(root: Path) -> None:
    with (
        rmqlog.MessageStore.open(root, small_store_config()) as a,
        rmqlog.MessageStore.open(root, small_store_config()) as b,
    ):
        a.put_batch(batch(topic="S", body=[b"a%d" % i for i in range(10)], queueId=pa.array([0] * 10, pa.int32())))
        b.put_batch(batch(topic="S", body=[b"b%d" % i for i in range(10)], queueId=pa.array([0] * 10, pa.int32())))
        assert b.dispatch() == 20
        assert a.dispatch() == 0
        assert [r["queueOffset"] for r in read_queue_all(a, "S", 0)] == list(range(20))
        assert [r["body"] for r in read_queue_all(b, "S", 0)] == [b"a%d" % i for i in range(10)] + [
            b"b%d" % i for i in range(10)
        ]


# --------------------------------------------------------------------------- retention (segments removed)


def test_statuses_after_oldest_segment_removed(root: Path) -> None:
    """RocketMQ's retention deletes the oldest commitlog segments: min offset moves up."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        out = s.put_batch(batch(topic="RT", body=[b"r" * 200] * 60, queueId=pa.array([0] * 60, pa.int32()))).to_pylist()
        s.dispatch()
    (root / "commitlog" / f"{0:020d}").unlink()
    first_kept = next(o["queueOffset"] for o in out if o["commitLogOffset"] >= SMALL_COMMITLOG)
    assert first_kept > 0
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.min_offset("RT", 0) == first_kept
        assert s.max_offset("RT", 0) == 60
        small = s.get_messages("g", "RT", 0, 0)
        assert small.status is S.OFFSET_TOO_SMALL and small.next_begin_offset == first_kept
        assert (small.min_offset, small.max_offset) == (first_kept, 60)
        found = s.get_messages("g", "RT", 0, first_kept, max_count=5)
        assert found.status is S.FOUND
        assert found.messages["queueOffset"].to_pylist() == list(range(first_kept, first_kept + 5))
        badly = s.get_messages("g", "RT", 0, 61)
        assert badly.status is S.OFFSET_OVERFLOW_BADLY and badly.next_begin_offset == 60
        one = s.get_messages("g", "RT", 0, 60)
        assert one.status is S.OFFSET_OVERFLOW_ONE and one.next_begin_offset == 60
        assert s.message_by_offset(0) is None
        assert s.read_queue("RT", 0, 0, 60)["queueOffset"].to_pylist() == list(range(first_kept, 60))
        res = s.put("RT", b"after", queue_id=0)
        assert res.queue_offset == 60
        assert s.dispatch() == 1
        assert read_queue_all(s, "RT", 0)[-1]["body"] == b"after"
    assert [r.queue_offset for r in walk(root)] == list(range(first_kept, 61))


def test_retention_of_whole_consume_queue_segment(root: Path) -> None:
    """Oldest commitlog segments and the consume-queue segment wholly below them are gone (RocketMQ retention)."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        body = b"r" * 266  # 400-byte records: 10 per commitlog segment, 50 per consume-queue segment
        out = s.put_batch(batch(topic="RQ", body=[body] * 120, queueId=pa.array([0] * 120, pa.int32()))).to_pylist()
        assert s.dispatch() == 120
    assert out[50]["commitLogOffset"] == 5 * SMALL_COMMITLOG and out[49]["commitLogOffset"] < 5 * SMALL_COMMITLOG
    for i in range(5):
        (root / "commitlog" / f"{i * SMALL_COMMITLOG:020d}").unlink()
    (root / "consumequeue" / "RQ" / "0" / f"{0:020d}").unlink()
    (root / "dispatch.state").unlink()
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert (s.min_offset("RQ", 0), s.max_offset("RQ", 0)) == (50, 120)
        assert s.dispatch() == 0
        small = s.get_messages("g", "RQ", 0, 10)
        assert small.status is S.OFFSET_TOO_SMALL and small.next_begin_offset == 50
        found = s.get_messages("g", "RQ", 0, 50, max_count=3)
        assert found.status is S.FOUND and found.messages["queueOffset"].to_pylist() == [50, 51, 52]
        assert s.get_messages("g", "RQ", 0, 500).next_begin_offset == 120
        assert s.offset_for_timestamp("RQ", 0, 0) == 50
        assert s.read_queue("RQ", 0, 0, 1000)["queueOffset"].to_pylist() == list(range(50, 120))
        assert [r["queueOffset"] for r in read_queue_all(s, "RQ", 0, max_count=16)] == list(range(50, 120))
        assert s.put("RQ", b"new", queue_id=0).queue_offset == 120
        assert s.dispatch() == 1
        assert s.max_offset("RQ", 0) == 121
    assert rc.consume_queue_start(str(root / "consumequeue" / "RQ" / "0")) == 50
    assert [u[0] for u in units(root, "RQ", 0)] == [o["commitLogOffset"] for o in out[50:]] + [
        walk(root)[-1].physical_offset
    ]


# --------------------------------------------------------------------------- damaged files


def test_corrupt_record_stops_dispatch(ms: rmqlog.MessageStore, root: Path) -> None:
    out = ms.put_batch(batch(topic="D", body=[b"abc"] * 5, queueId=pa.array([0] * 5, pa.int32()))).to_pylist()
    at = out[3]["commitLogOffset"]
    seg = root / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[at + 4 : at + 8] = b"\x00\x00\x00\x01"  # bad magic
    seg.write_bytes(bytes(data))
    with pytest.raises(rmqlog.CorruptStoreError):
        ms.dispatch()
    assert ms.max_offset("D", 0) <= 3
    assert ms.message_by_offset(at) is None
    assert ms.message_by_offset(out[2]["commitLogOffset"])["body"] == b"abc"


def test_segments_of_different_sizes(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"x")
    (root / "commitlog" / f"{SMALL_COMMITLOG:020d}").write_bytes(bytes(100))
    with pytest.raises(rmqlog.CorruptStoreError):
        rmqlog.MessageStore.open(root, small_store_config())


@pytest.mark.parametrize("content", [b"", b"not json", b'{"version": 1, "tail": '])
def test_unreadable_append_state_is_rebuilt(root: Path, content: bytes) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(batch(topic="T", body=[b"x" * 300] * 20, queueId=pa.array([1] * 20, pa.int32())))
    end = _log_end(root)
    (root / "append.state").write_bytes(content)
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        res = s.put("T", b"next", queue_id=1)
        assert (res.commit_log_offset, res.queue_offset) == (end, 20)
        assert s.recovery is not None and s.recovery.redispatched == 20 and s.dispatch() == 1
    _assert_log_consistent(root)


def test_config_file_falls_back_to_backup(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.commit_offset("g", "T", 0, 5)
        s.commit_offset("g", "T", 0, 6)
    (root / "config" / "consumerOffset.json").write_text("{garbage")
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.committed_offset("g", "T", 0) == 5  # the .bak holds the state before the last commit
        s.commit_offset("g", "T", 1, 9)
    data = rc.parse_fastjson((root / "config" / "consumerOffset.json").read_text("utf-8"))
    assert data["offsetTable"]["T@g"] == {"0": 5, "1": 9}
    (root / "config" / "topics.json").write_text("[")
    with pytest.raises(rmqlog.CorruptStoreError):
        rmqlog.MessageStore.open(root, small_store_config())


# --------------------------------------------------------------------------- a writer that died


def _dead_writer_bytes(root: Path, dead: Path, bodies: list[bytes]) -> int:
    """Leave in ``root``'s segments what a writer killed before publishing would leave there.

    The writer's batch is appended to a copy of the store; its bytes past the published tail
    are copied back into ``root``'s segment files, ``root``'s append.state is untouched.
    Returns the published tail.
    """
    import shutil

    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        tail = s.append_state().tail
    shutil.copytree(root, dead)
    with rmqlog.MessageStore.open(dead, small_store_config()) as d:
        d.put_batch(batch(topic="T", body=bodies, queueId=pa.array([0] * len(bodies), pa.int32())))
    for f in sorted((dead / "commitlog").iterdir()):
        start = int(f.name)
        if start + SMALL_COMMITLOG <= tail:
            continue
        mine = root / "commitlog" / f.name
        data = bytearray(mine.read_bytes() if mine.exists() else bytes(SMALL_COMMITLOG))
        cut = max(0, tail - start)
        data[cut:] = f.read_bytes()[cut:]
        mine.write_bytes(bytes(data))
    return tail


def test_dead_writer_bytes_are_not_part_of_the_log(root: Path, tmp_path: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        for _ in range(3):
            s.put("T", b"a" * 200, queue_id=0)
    tail = _dead_writer_bytes(root, tmp_path / "dead", [b"D" * 500, b"E" * 20])
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.message_by_offset(tail) is None  # not published
        assert s.dispatch() == 0 and s.max_offset("T", 0) == 3  # (dispatched by an earlier open)
        res = s.put("T", b"S" * 10, queue_id=0)
        assert (res.commit_log_offset, res.queue_offset) == (tail, 3)
        s.dispatch()
        assert [r["body"] for r in read_queue_all(s, "T", 0)][-1] == b"S" * 10
    assert [r.body[:1] for r in walk(root)] == [b"a", b"a", b"a", b"S"]


def test_dead_writer_bytes_in_next_segment_are_scrubbed(root: Path, tmp_path: Path) -> None:
    # Before 70ed813 CommitLog.append scrubbed a new segment only for rows after the batch's first
    # ('if a > 0'): when the FIRST record rolled, a dead writer's records after it survived, read
    # by RocketMQ/refcodec as part of the log and by the rebuild when append.state was lost.
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        for _ in range(11):
            s.put("T", b"a" * 200, queue_id=0)  # 11 x 334 bytes: 422 left in segment 0
    tail = _dead_writer_bytes(root, tmp_path / "dead", [b"D" * 300, b"E" * 300])
    assert tail > SMALL_COMMITLOG - 500
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        res = s.put("T", b"S" * 300, queue_id=0)  # does not fit: goes to the next segment
        assert res.commit_log_offset == SMALL_COMMITLOG
    assert [r.body[:1] for r in walk(root)] == [b"a"] * 11 + [b"S"]
    (root / "append.state").unlink()
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.put("T", b"N", queue_id=0).queue_offset == 12


# --------------------------------------------------------------------------- rebuilding after a torn or lost end


def test_rebuild_stops_at_a_torn_record(root: Path) -> None:
    """No append.state and a half-written record at the end of the log: the log ends before it."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        out = s.put_batch(batch(topic="TR", body=[b"w" * 100] * 4, queueId=pa.array([0] * 4, pa.int32()))).to_pylist()
    seg = root / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    end = out[-1]["commitLogOffset"]
    torn = bytes(data[end : end + 60])  # the first 60 bytes of the last record, as a killed writer leaves them
    data[end:] = bytes(len(data) - end)
    data[end : end + 60] = torn
    seg.write_bytes(bytes(data))
    (root / "append.state").unlink()
    (root / "flush.state").unlink()  # a flushed position never covers an unpublished record
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.append_state().tail == end
        assert s.message_by_offset(end) is None
        res = s.put("TR", b"after", queue_id=0)
        assert (res.commit_log_offset, res.queue_offset) == (end, 3)
        assert s.recovery is not None and s.recovery.redispatched == 3 and s.dispatch() == 1
        assert [r["body"] for r in read_queue_all(s, "TR", 0)] == [b"w" * 100] * 3 + [b"after"]
    assert [r.body for r in walk(root)] == [b"w" * 100] * 3 + [b"after"]


def test_recovery_truncates_consume_queues_past_the_log_end(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        out = s.put_batch(batch(topic="TR", body=[b"w" * 100] * 4, queueId=pa.array([0] * 4, pa.int32()))).to_pylist()
        assert s.dispatch() == 4
    # power loss: the commitlog page holding the last record never reached the disk, and
    # neither did the state files; the consume queue's page did
    seg = root / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    lost = out[-1]["commitLogOffset"]
    data[lost:] = bytes(len(data) - lost)
    seg.write_bytes(bytes(data))
    (root / "append.state").unlink()
    (root / "dispatch.state").unlink()
    # the durable flushed position and the checkpoint are written after the data they cover
    # is on disk: with that record's page lost, their last versions were never written
    (root / "flush.state").unlink()
    (root / "checkpoint").unlink()
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.max_offset("TR", 0) == 3  # the unit of the lost record is gone
        res = s.put("TR", b"after", queue_id=0)
        assert (res.commit_log_offset, res.queue_offset) == (lost, 3)
        assert s.dispatch() == 1
        for _ in range(3):
            s.put("TR", b"more", queue_id=0)
        assert s.dispatch() == 3
        assert [r["body"] for r in read_queue_all(s, "TR", 0)] == [b"w" * 100] * 3 + [b"after"] + [b"more"] * 3
    _assert_log_consistent(root)
