"""``MessageStore.replica.replica_truncate``: an open store's commitlog cut back to a record boundary
(the old master come back as a slave drops what its new master's log does not hold), and the
failover calls beside it: the replication checkpoint and the delay offsets.

After every cut: the log holds exactly the whole records that end at or before the offset
asked (the reference codec walks the files), ``verify()`` reports nothing, reads and queries
past the cut find nothing, appends continue at the right queue offsets, an idempotent put
whose marker was cut is stored again, and a reopen recovers nothing more. A kill at each of
the cut's crash points leaves a store that opens consistently, cut or not cut.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import kill_at_crash_point, subprocess_env

import refcodec as rc
import rmqlog

SEG = 4096
CFG = dict(mapped_file_size_commit_log=SEG, mapped_file_size_consume_queue=20 * 64, max_message_size=1024)


def _config() -> rmqlog.StoreConfig:
    return rmqlog.StoreConfig(**CFG)


def _fill(s: rmqlog.MessageStore, n: int = 60, start: int = 0) -> list[tuple[int, int]]:
    """``n`` messages over two topics and three queues, each with a key; (offset, size) of each."""
    out = []
    for i in range(start, start + n):
        r = s.put("AB"[i % 2], b"m%03d-" % i + bytes([i % 251]) * (60 + 7 * (i % 11)), queue_id=i % 3, keys=[f"k{i}"])
        rec = s.wire.record_at(r.commit_log_offset)
        assert rec is not None
        out.append((r.commit_log_offset, int(rec.sizes[0])))
    return out


def _records(root: Path) -> list[rc.RefRecord]:
    return rc.walk_commitlog(str(root / "commitlog"), SEG)


def _queue_offsets(records: list[rc.RefRecord]) -> dict[tuple[str, int], int]:
    nxt: dict[tuple[str, int], int] = {}
    for r in records:
        nxt[(r.topic, r.queue_id)] = max(nxt.get((r.topic, r.queue_id), 0), r.queue_offset + 1)
    return nxt


def _check_cut(root: Path, s: rmqlog.MessageStore, before: list[rc.RefRecord], end: int) -> None:
    """The store holds exactly the records of ``before`` that end at or before ``end``."""
    kept = [r for r in before if r.physical_offset + r.total_size <= end]
    assert s.published_tail() == end
    s.dispatch()
    assert s.verify().problems == []
    after = _records(root)
    assert [(r.physical_offset, r.body) for r in after] == [(r.physical_offset, r.body) for r in kept]
    want = _queue_offsets(kept)
    for topic in "AB":
        for q in range(3):
            assert s.max_offset(topic, q) == want.get((topic, q), 0)
    gone = [r for r in before if r.physical_offset + r.total_size > end]
    for r in gone[:5]:
        assert s.message_by_offset(r.physical_offset) is None
        assert s.wire.record_at(r.physical_offset) is None
        if "KEYS" in r.properties:
            assert s.query_by_key(r.topic, r.properties["KEYS"]).num_rows == 0
    for r in [r for r in kept if "KEYS" in r.properties][-3:]:
        assert s.query_by_key(r.topic, r.properties["KEYS"]).num_rows == 1


def _continue(s: rmqlog.MessageStore) -> None:
    """Puts after the cut land at each queue's next offset."""
    want = {(t, q): s.max_offset(t, q) for t in "AB" for q in range(3)}
    for t in "AB":
        for q in range(3):
            assert s.put(t, b"after", queue_id=q).queue_offset == want[(t, q)]
    s.dispatch()
    assert s.verify().problems == []


@pytest.mark.parametrize("where", ["inside", "boundary", "segment_start", "blank", "tail"])
def test_a_cut_keeps_the_whole_records_before_the_offset(tmp_path: Path, where: str) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, _config()) as s:
        s.start_services()
        placed = _fill(s)
        before = _records(root)
        tail = s.published_tail()
        assert tail > 3 * SEG  # several segments
        off, size = placed[25]
        seg1 = (off // SEG) * SEG
        last_in_seg = max(o + z for o, z in placed if o + z <= seg1 + SEG and o >= seg1)
        offset, end = {
            "inside": (off + size // 2, off),  # a partial record goes
            "boundary": (off + size, off + size),
            "segment_start": (seg1, seg1),
            "blank": (seg1 + SEG - 3, last_in_seg),  # inside a segment's end blank: the blank goes
            "tail": (tail, tail),
        }[where]
        assert s.replica.record_boundary(offset) == end
        assert s.replica.replica_truncate(offset) == end
        _check_cut(root, s, before, end)
        if end < tail:  # segments wholly past the cut are deleted
            assert (
                max(start for start, _ in rc.list_segments(str(root / "commitlog"))) == (end - 1) // SEG * SEG
                or end % SEG == 0
            )
        _continue(s)
    with rmqlog.MessageStore.open(root, _config()) as s:  # a clean reopen recovers nothing more
        assert s.recovery is not None and s.recovery.dropped_bytes == 0 and s.recovery.problems == []
        assert s.verify().problems == []


def test_across_segments_and_back_to_the_first(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, _config()) as s:
        placed = _fill(s)
        before = _records(root)
        second = next((o, z) for o, z in placed if o >= SEG)
        end = s.replica.replica_truncate(second[0] + second[1] + 3)  # from the 4th segment back into the 2nd
        assert end == second[0] + second[1]
        assert [start for start, _ in rc.list_segments(str(root / "commitlog"))] == [0, SEG]
        _check_cut(root, s, before, end)
        assert s.replica.replica_truncate(0) == 0  # everything: the first segment is kept, emptied
        assert [start for start, _ in rc.list_segments(str(root / "commitlog"))] == [0]
        _check_cut(root, s, before, 0)
        _continue(s)


def test_an_idempotence_marker_cut_is_taken_again(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, _config()) as s:
        s.put_batch(pa.table({"topic": ["A"], "body": [b"one"]}), writer="sink/0", sequence=1)
        _fill(s, 10)
        cut_at = s.published_tail()
        s.put_batch(pa.table({"topic": ["A"], "body": [b"two"]}), writer="sink/0", sequence=2)
        s.put_batch(pa.table({"topic": ["A"], "body": [b"other"]}), writer="sink/1", sequence=7)
        assert s.writer_sequence("sink/0") == 2
        assert s.replica.replica_truncate(cut_at) == cut_at
        assert s.writer_sequence("sink/0") == 1 and s.writer_sequence("sink/1") is None
        assert s.put_batch(pa.table({"topic": ["A"], "body": [b"one"]}), writer="sink/0", sequence=1).num_rows == 0
        again = s.put_batch(pa.table({"topic": ["A"], "body": [b"two"]}), writer="sink/0", sequence=2)
        assert again.num_rows == 1 and again["commitLogOffset"][0].as_py() == cut_at
        assert s.writer_sequence("sink/0") == 2


def test_a_slave_cut_forgets_a_partial_record_received_and_goes_on(tmp_path: Path) -> None:
    """A slave's store: a partial record received past the tail is forgotten with the cut, and
    replication resumes at the new end."""
    m = rmqlog.MessageStore.open(tmp_path / "m", _config())
    s = rmqlog.MessageStore.open(tmp_path / "s", _config())
    try:
        placed = _fill(m, 20)
        off, size = placed[15]
        data = m.replica.replica_read(0, off + size // 2)
        assert s.replica.replica_append(0, data) == off + size // 2  # 15 whole records and half of the 16th
        assert s.published_tail() == off
        assert s.replica.replica_truncate(placed[10][0] + 3) == placed[10][0]
        assert s.replica.replica_end() == placed[10][0]
        end = placed[10][0]
        while end < m.published_tail():
            end = s.replica.replica_append(end, m.replica.replica_read(end, 1 << 20))
        assert s.published_tail() == m.published_tail()
        s.dispatch()
        assert s.verify().problems == []
        tail = m.published_tail()
        assert (tmp_path / "s" / "commitlog" / f"{0:020d}").read_bytes()[: min(tail, SEG)] == (
            tmp_path / "m" / "commitlog" / f"{0:020d}"
        ).read_bytes()[: min(tail, SEG)]
    finally:
        m.close()
        s.close()


HOLD = r"""
import sys, time, rmqlog
s = rmqlog.MessageStore.open(sys.argv[1], rmqlog.StoreConfig(**eval(sys.argv[2])))
print("open", flush=True)
sys.stdin.readline()
s.close()
"""


def test_refusals(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, _config()) as s:
        _fill(s, 10)
        tail = s.published_tail()
        with pytest.raises(rmqlog.ReplicaOffsetError):
            s.replica.replica_truncate(tail + 1)
        with pytest.raises(rmqlog.InvalidArgumentError):
            s.replica.replica_truncate(-1)
        # another store of this process has it open
        with rmqlog.MessageStore.open(root, _config()) as other:
            with pytest.raises(rmqlog.StoreBusyError, match="replica_truncate needs the store to itself"):
                s.replica.replica_truncate(10)
            assert other.published_tail() == tail
        # a read-only open elsewhere is not counted; a read-only store refuses
        with rmqlog.MessageStore.open(root, _config(), read_only=True) as ro:
            with pytest.raises(rmqlog.ReadOnlyStoreError):
                ro.replica.replica_truncate(10)
            with pytest.raises(rmqlog.ReadOnlyStoreError):
                ro.replica.set_replication_checkpoint(5)
        assert s.published_tail() == tail
        # another process has it open
        child = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(root), repr(CFG)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
        )
        try:
            assert child.stdout is not None and child.stdout.readline() == "open\n"
            with pytest.raises(rmqlog.StoreBusyError, match=f"pid {child.pid}"):
                s.replica.replica_truncate(10)
        finally:
            assert child.stdin is not None
            child.stdin.write("\n")
            child.stdin.close()
            assert child.wait(60) == 0
            child.stdout.close()  # type: ignore[union-attr]
        assert s.published_tail() == tail
        assert s.replica.replica_truncate(10) == 0  # alone again: the first record ends past 10
        assert not (root / "recovering").exists()


def test_a_process_opening_meanwhile_waits_for_the_cut(tmp_path: Path) -> None:
    """A process that opens the store while it is being cut waits for the cut, then sees it."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, _config()) as s:
        _fill(s, 30)
        tail = s.published_tail()
        owner = s._assembly.owner
        assert owner is not None
        with owner.alone("a test"):
            assert (root / "recovering").exists()
            child = subprocess.Popen(
                [sys.executable, "-c", HOLD, str(root), repr(CFG)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=subprocess_env(),
            )
            try:
                with pytest.raises(subprocess.TimeoutExpired):
                    child.wait(1.0)  # waiting for the lock
            except BaseException:
                child.kill()
                raise
        assert child.stdout is not None and child.stdout.readline() == "open\n"
        assert child.stdin is not None
        child.stdin.write("\n")
        child.stdin.close()
        assert child.wait(60) == 0
        child.stdout.close()
        assert s.published_tail() == tail


CUT = r"""
import sys, rmqlog
cfg = rmqlog.StoreConfig(**eval(sys.argv[2]))
s = rmqlog.MessageStore.open(sys.argv[1], cfg)
s.start_services()
s.replica.replica_truncate(int(sys.argv[3]))
print("cut", flush=True)
s.close()
"""


@pytest.mark.parametrize("point", ["truncate.flushed", "truncate.published", "truncate.queues", "truncate.cut"])
def test_a_kill_during_a_cut_leaves_a_consistent_store(tmp_path: Path, point: str) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, _config()) as s:
        s.put_batch(pa.table({"topic": ["A"], "body": [b"one"]}), writer="w", sequence=1)
        placed = _fill(s)
        s.put_batch(pa.table({"topic": ["A"], "body": [b"two"]}), writer="w", sequence=2)
        s.flush()
        before = _records(root)
        tail = s.published_tail()
    off, _ = placed[20]
    assert kill_at_crash_point(["-c", CUT, str(root), repr(CFG), str(off)], point, 1, tmp=tmp_path) == []
    with rmqlog.MessageStore.open(root, _config()) as s:
        assert s.recovery is not None and s.recovery.abnormal
        end = tail if point == "truncate.flushed" else off  # cut from the published state on
        _check_cut(root, s, before, end)
        assert s.writer_sequence("w") == (2 if end == tail else 1)
        _continue(s)
        if end < tail:  # the cut can be made again, or finished by hand: nothing left to cut
            assert s.replica.replica_truncate(off) == off


def test_the_replication_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "s"
    path = root / "config" / "replicationCheckpoint.json"
    with rmqlog.MessageStore.open(root, _config()) as s:
        assert s.replica.replication_checkpoint() is None
        s.replica.set_replication_checkpoint(1234)
        assert s.replica.replication_checkpoint() == 1234
        assert '"slaveAckOffset": 1234' in path.read_text()
        s.replica.set_replication_checkpoint(99)
        assert s.replica.replication_checkpoint() == 99
        path.write_text("{torn")  # unreadable: its .bak (the previous value) is read
        assert s.replica.replication_checkpoint() == 1234
        s.replica.set_replication_checkpoint(None)
        assert s.replica.replication_checkpoint() is None
        with pytest.raises(rmqlog.InvalidArgumentError):
            s.replica.set_replication_checkpoint(-1)
        path.write_text("{torn")
        path.with_name(path.name + ".bak").write_text('{"slaveAckOffset": "x"}')
        with pytest.raises(rmqlog.CorruptStoreError, match="replicationCheckpoint.json"):
            s.replica.replication_checkpoint()


def test_delay_offsets_read_and_set(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, _config()) as s:
        assert s.replica.delay_offsets() == {}
        s.replica.set_delay_offsets({1: 5, 3: 0})
        assert s.replica.delay_offsets() == {1: 5, 3: 0}
        # RocketMQ's layout: tab-indented, level keys bare
        assert (
            root / "config" / "delayOffset.json"
        ).read_text() == '{\n\t"offsetTable": {\n\t\t1: 5,\n\t\t3: 0\n\t}\n}'
        with pytest.raises(rmqlog.InvalidArgumentError):
            s.replica.set_delay_offsets({0: 1})
        with pytest.raises(rmqlog.InvalidArgumentError):
            s.replica.set_delay_offsets({1: -1})
        s.start_services()  # the scheduler runs: its progress is its own
        with pytest.raises(rmqlog.StoreBusyError, match="scheduler"):
            s.replica.set_delay_offsets({1: 6})
        assert s.replica.delay_offsets() == {1: 5, 3: 0}


def test_a_cut_store_rebuilds_its_timer_index(tmp_path: Path) -> None:
    """Timed messages delivered past the cut: the delivery copies go with the cut, the timer's
    progress is the kept log's marker, and the next pass delivers them again (once)."""
    clock = rmqlog.ManualClock(1_800_000_000_000)
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, _config(), clock=clock) as s:
        due = clock.wall_ms() + 5_000
        for i in range(3):
            s.put("T", b"timed-%d" % i, deliver_time_ms=due + i)
        cut_at = s.published_tail()
        clock.advance(10_000)
        assert s.deliver_due() == 3
        s.dispatch()
        assert sum(s.max_offset("T", q) for q in range(4)) == 3
        assert s.replica.replica_truncate(cut_at) == cut_at
        assert sum(s.max_offset("T", q) for q in range(4)) == 0
        assert s.deliver_due() == 3
        assert s.deliver_due() == 0
        s.dispatch()
        assert sorted(sum((s.read_queue("T", q, 0, 10)["body"].to_pylist() for q in range(4)), [])) == [
            b"timed-0",
            b"timed-1",
            b"timed-2",
        ]
        assert s.verify().problems == []
