"""Durability units: checkpoint/abort/lock files, flush modes, recovery paths, verify, full disk.

Crash scenarios with killed processes are in test_crash.py.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import (
    batch,
    read_queue_all,
    small_store_config,
    units,
    wait_until,
    walk,
)

import rmqlog
from rmqlog.durability.checkpoint import CHECKPOINT_SIZE, Checkpoint, CheckpointFile
from rmqlog.durability.flush import AsyncFlusher
from rmqlog.log.append_state import AppendStateFile

SYNC = small_store_config(flush_disk_type=rmqlog.SYNC_FLUSH)


def _fill(s: rmqlog.MessageStore, n: int = 30, topic: str = "D", size: int = 200, queue: int = 0) -> list[dict]:
    return s.put_batch(
        batch(topic=topic, body=[b"d" * size] * n, queueId=pa.array([queue] * n, pa.int32()))
    ).to_pylist()


def _snapshot_open_store(root: Path, dest: Path) -> None:
    """Copy a store while it is open: what a kill -9 at this instant leaves (abort present)."""
    shutil.copytree(root, dest)


# --------------------------------------------------------------------------- checkpoint, abort, lock


def test_checkpoint_reads_rocketmq_fixture(fixture_dir: Path) -> None:
    cp = CheckpointFile(fixture_dir / "broker-4.4-store" / "checkpoint").read()
    assert cp == Checkpoint(1551626238066, 1551626238066, 0)
    assert cp.safe_timestamp() == 1551626238066 - 3000


def test_checkpoint_write_layout_and_never_goes_back(tmp_path: Path) -> None:
    f = CheckpointFile(tmp_path / "checkpoint")
    f.write(Checkpoint(200, 100, 0))
    raw = (tmp_path / "checkpoint").read_bytes()
    assert len(raw) == CHECKPOINT_SIZE == 4096
    assert raw[:24] == (200).to_bytes(8, "big") + (100).to_bytes(8, "big") + bytes(8)
    assert raw[24:] == bytes(4096 - 24)
    assert f.write(Checkpoint(150, 300, 0)) == Checkpoint(200, 300, 0)
    assert f.read() == Checkpoint(200, 300, 0)
    (tmp_path / "checkpoint").write_bytes(b"short")
    with pytest.raises(rmqlog.CorruptStoreError):
        f.read()


def test_abort_exists_while_open_and_lock_holds_lock(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert (root / "abort").exists() and (root / "abort").read_bytes() == b""
        assert (root / "lock").read_bytes() == b"lock"
        with rmqlog.MessageStore.open(root, small_store_config()) as s2:  # a second store object
            assert s2.recovery is None  # the root was already open: no recovery
        assert (root / "abort").exists()  # still open through s
        _fill(s, 3)
        assert s.recovery is not None and not s.recovery.abnormal
    assert not (root / "abort").exists()
    cp = CheckpointFile(root / "checkpoint").read()
    assert cp is not None and cp.physic_msg_timestamp > 0


def test_rocketmq_broker_cannot_lock_an_open_store(root: Path) -> None:
    """RocketMQ's broker takes an exclusive lock on byte 0 of ``lock``: it must fail while we are open."""
    probe = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)\n    print('locked')\n"
        "except OSError:\n    print('busy')\n"
    )
    with rmqlog.MessageStore.open(root, small_store_config()):
        out = subprocess.run(
            [sys.executable, "-c", probe, str(root / "lock")], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "busy"
    out = subprocess.run([sys.executable, "-c", probe, str(root / "lock")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "locked"


# --------------------------------------------------------------------------- flush modes


def test_sync_flush_put_returns_flushed(root: Path) -> None:
    with rmqlog.MessageStore.open(root, SYNC) as s:
        res = s.put("S", b"one", queue_id=0)
        assert s.flushed_offset() >= res.commit_log_offset + 1
        out = _fill(s, 40, "S")
        assert s.flushed_offset() == s.published_tail() > out[-1]["commitLogOffset"]


def test_sync_flush_group_commit_shares_one_sync(root: Path) -> None:
    """Writers queued behind a flush find their batch covered: one sync for all of them."""
    with rmqlog.MessageStore.open(root, SYNC) as s:
        s.put("G", b"warm", queue_id=0)
        before = s.flush_service.syncs
        n = 6
        errors: list[BaseException] = []

        def writer(i: int) -> None:
            try:
                _fill(s, 5, "G", 50, i % 4)
            except BaseException as exc:
                errors.append(exc)

        with s.flush_service.lock.held():  # the "current flusher" is busy: everybody queues
            threads = [threading.Thread(target=writer, args=(i,)) for i in range(n)]
            for t in threads:
                t.start()
            # every batch published (they now wait for the flush lock)
            assert wait_until(
                lambda: sum(v for k, v in s.append_state().queues.items() if k.startswith("G/")) == 1 + 5 * n
            )
        for t in threads:
            t.join()
        assert not errors
        assert s.flush_service.syncs - before == 1
        assert s.flushed_offset() == s.published_tail()


def test_async_flusher_policy_with_a_fake_clock(root: Path) -> None:
    cfg = small_store_config(mapped_file_size_commit_log=1 << 20, flush_interval_commit_log=3_600_000)
    with rmqlog.MessageStore.open(root, cfg) as s:
        now = [1000.0]
        fl = AsyncFlusher(
            s.flush_service, interval_ms=500, least_pages=4, thorough_interval_ms=10_000, clock=lambda: now[0]
        )
        base = s.flushed_offset()
        _fill(s, 10, size=100)  # < 4 pages
        now[0] += 0.5
        assert fl.run_once() is False and s.flushed_offset() == base
        _fill(s, 100, size=200)  # > 4 pages unflushed now
        now[0] += 0.5
        assert fl.run_once() is True and s.flushed_offset() == s.published_tail()
        last = _fill(s, 1, size=10)
        now[0] += 0.5
        assert fl.run_once() is False  # a few bytes: wait for more, or for the thorough interval
        now[0] += 10
        assert fl.run_once() is True and s.flushed_offset() == s.published_tail()
        cp = CheckpointFile(root / "checkpoint").read()
        assert cp is not None and cp.physic_msg_timestamp == int(last[0]["storeTimestamp"].timestamp() * 1000)


def test_close_flushes_everything(root: Path) -> None:
    cfg = small_store_config(flush_interval_commit_log=3_600_000)
    with rmqlog.MessageStore.open(root, cfg) as s:
        _fill(s, 5)
        tail = s.published_tail()
    with rmqlog.MessageStore.open(root, cfg) as s:
        assert s.flushed_offset() == tail and s.recovery is not None and not s.recovery.abnormal


# --------------------------------------------------------------------------- recovery


def test_recover_abnormal_exit_redispatches_and_keeps_published(root: Path, tmp_path: Path) -> None:
    crashed = tmp_path / "crashed"
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        out = _fill(s, 40)
        s.dispatch()
        _fill(s, 7)  # published, not dispatched, maybe not flushed
        tail = s.published_tail()
        _snapshot_open_store(root, crashed)
    shutil.rmtree(crashed / "consumequeue")  # lost consume queues are rebuilt by the re-dispatch
    with rmqlog.MessageStore.open(crashed, small_store_config()) as s:
        rep = s.recovery
        assert rep is not None and rep.abnormal and rep.end == tail
        assert rep.redispatched == 47
        assert [r["queueOffset"] for r in read_queue_all(s, "D", 0)] == list(range(47))
        res = s.put("D", b"next", queue_id=0)
        assert (res.commit_log_offset, res.queue_offset) == (rep.end, 47)
        assert s.verify().ok
    assert len(out) == 40


def test_recover_abnormal_exit_walks_from_the_checkpoint_safe_point(root: Path, tmp_path: Path) -> None:
    crashed = tmp_path / "crashed"
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        _fill(s, 60)  # several segments
        s.dispatch()
        last_seg = s.commitlog.segments.segment_starts()[-1]
        future = int(__import__("time").time() * 1000) + 60_000  # everything is older than the safe point
        CheckpointFile(root / "checkpoint").write(Checkpoint(future, future, 0))
        _snapshot_open_store(root, crashed)
    with rmqlog.MessageStore.open(crashed, small_store_config()) as s:
        rep = s.recovery
        assert rep is not None and rep.abnormal and rep.walk_start == last_seg > 0
        assert rep.redispatched == 0  # the units past the safe point match the log
        assert s.verify().ok and s.max_offset("D", 0) == 60


def test_recover_cuts_a_killed_writers_unpublished_batch(root: Path, tmp_path: Path) -> None:
    """Bytes past the published tail are a batch nobody acknowledged: cut, even when whole."""
    crashed = tmp_path / "crashed"
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        _fill(s, 10)
        tail = s.published_tail()
        state = (root / "append.state").read_bytes()
        _fill(s, 5)  # whole records, but pretend the writer died before publishing them
        _snapshot_open_store(root, crashed)
    (crashed / "append.state").write_bytes(state)
    with rmqlog.MessageStore.open(crashed, small_store_config()) as s:
        assert s.recovery is not None and s.recovery.end == tail and s.recovery.dropped_bytes > 0
        assert s.published_tail() == tail
        assert s.put("D", b"x", queue_id=0).queue_offset == 10
        s.dispatch()
        assert s.verify().ok


def test_recover_crc_damage_below_flushed_fails_unless_repair(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        out = _fill(s, 30)
    victim = out[3]["commitLogOffset"]
    seg_start = victim - victim % 4096
    seg = root / "commitlog" / f"{seg_start:020d}"
    data = bytearray(seg.read_bytes())
    data[victim - seg_start + 100] ^= 0xFF  # a body byte: only the CRC can tell
    seg.write_bytes(bytes(data))
    with pytest.raises(rmqlog.DataLossError) as ei:
        rmqlog.MessageStore.open(root, small_store_config())
    assert ei.value.offset == victim and str(seg) in str(ei.value)
    assert seg.read_bytes() == bytes(data)  # the failed open changed nothing
    with rmqlog.MessageStore.open(root, small_store_config(), repair=True) as s:
        assert s.recovery is not None and s.recovery.end == victim and s.recovery.problems
        assert s.published_tail() == victim
        s.dispatch()
        assert s.max_offset("D", 0) == 3
        assert s.verify().ok


def test_recover_rocketmq_store_stops_at_damage_followed_by_data(root: Path) -> None:
    """Without our state files (a RocketMQ store), a bad record with later segments after it is not a torn tail."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        _fill(s, 60)  # several segments
    for name in ("append.state", "flush.state", "dispatch.state", "checkpoint"):
        (root / name).unlink(missing_ok=True)
    shutil.rmtree(root / "consumequeue", ignore_errors=True)
    seg = root / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[150] ^= 0xFF  # a body byte of the first record
    seg.write_bytes(bytes(data))
    with pytest.raises(rmqlog.DataLossError):
        rmqlog.MessageStore.open(root, small_store_config())


def test_recover_torn_tail_and_half_rolled_segment_past_flushed_are_cut(root: Path) -> None:
    """A power loss past the flushed position: a torn record, then a later segment with data
    (a roll whose first segment's tail never reached the disk). Nothing acknowledged: cut, no error."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        _fill(s, 25)
        while s.published_tail() % 4096 > 3000:  # leave room after the tail in its segment
            _fill(s, 1)
        s.flush()
        flushed = s.flushed_offset()
        starts = s.commitlog.segments.segment_starts()
    last = root / "commitlog" / f"{starts[-1]:020d}"
    data = bytearray(last.read_bytes())
    rel = flushed - starts[-1]
    data[rel : rel + 8] = (300).to_bytes(4, "big") + (0xDAA320A7).to_bytes(4, "big")  # torn: a header only
    last.write_bytes(bytes(data))
    later = root / "commitlog" / f"{starts[-1] + 4096:020d}"
    later.write_bytes((root / "commitlog" / f"{starts[0]:020d}").read_bytes())  # a segment full of records
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.recovery is not None and s.recovery.end == flushed and s.recovery.dropped_bytes > 0
        assert not later.exists()
        assert s.put("D", b"next", queue_id=0).commit_log_offset == flushed
        s.dispatch()
        assert s.verify().ok


def test_verify_reports_offset_and_segment(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        out = _fill(s, 12)
        s.dispatch()
        assert s.verify().ok and s.verify().records == 12 and s.verify().units == 12
        victim = out[5]["commitLogOffset"]
        seg = s.commitlog.segments.for_offset(victim)
        assert seg is not None
        seg.array()[victim - seg.start + 100] ^= 0xFF
        rep = s.verify()
        assert not rep.ok and rep.problems[0].offset == victim and rep.problems[0].path == str(seg.path)
        assert "CRC" in rep.problems[0].detail
        seg.array()[victim - seg.start + 100] ^= 0xFF


def test_fixture_commitlog_opens_via_normal_recovery(root: Path) -> None:
    from conftest import FIXTURE_COMMITLOG, copy_file

    copy_file(FIXTURE_COMMITLOG, root / "commitlog" / f"{0:020d}")
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.recovery is not None and s.recovery.end == 8084 + 108 and s.recovery.state_rebuilt
        assert s.recovery.redispatched == 47 and s.dispatch() == 0  # dispatched at open, as a broker does
        assert s.verify().ok


# --------------------------------------------------------------------------- full disk


def test_enospc_fails_typed_and_leaves_store_readable(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rmqlog.log.mapped_file as mf

    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        _fill(s, 8)
        s.dispatch()
        tail = s.published_tail()
        real = os.pwrite

        def full(fd: int, data: object, offset: int) -> int:
            n = real(fd, memoryview(data)[:100], offset)  # type: ignore[arg-type]
            if n:  # a partial write first, then no space
                monkeypatch.setattr(
                    mf.os, "pwrite", lambda *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device"))
                )
            return n

        monkeypatch.setattr(mf.os, "pwrite", full)
        with pytest.raises(rmqlog.DiskFullError):
            _fill(s, 20)
        monkeypatch.setattr(mf.os, "pwrite", real)
        assert s.published_tail() == tail
        assert len(read_queue_all(s, "D", 0)) == 8
        res = s.put("D", b"after", queue_id=0)  # space is back
        assert (res.commit_log_offset, res.queue_offset) == (tail, 8)
        s.dispatch()
        assert s.verify().ok
    assert [r.queue_offset for r in walk(root)] == list(range(9))
    assert units(root, "D", 0)[-1][0] == tail


def test_appends_refused_above_disk_warning_ratio(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rmqlog.log.disk_guard as msm

    monkeypatch.setattr(msm, "DISK_CHECK_INTERVAL_S", 0.0)  # every put checks
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        _fill(s, 2)
        monkeypatch.setattr(msm, "disk_used_percent", lambda path: 95.0)
        with pytest.raises(rmqlog.DiskFullError, match="95.0% full"):
            s.put("D", b"refused", queue_id=0)
        assert len(walk(root)) == 2
        monkeypatch.setattr(msm, "disk_used_percent", lambda path: 50.0)
        assert s.put("D", b"accepted", queue_id=0).queue_offset == 2
    cfg = small_store_config(disk_space_warning_level_ratio=99)
    monkeypatch.setattr(msm, "disk_used_percent", lambda path: 95.0)
    with rmqlog.MessageStore.open(root, cfg) as s:
        assert s.put("D", b"configurable", queue_id=0).queue_offset == 3


def test_a_disk_below_the_level_is_rechecked_after_an_interval(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One ``statvfs`` per interval while the disk is below the level; every put while above."""
    import rmqlog.log.disk_guard as msm

    clock = rmqlog.ManualClock()
    used = {"pct": 50.0, "calls": 0}

    def fake_used(path: Path) -> float:
        used["calls"] += 1
        return used["pct"]

    monkeypatch.setattr(msm, "disk_used_percent", fake_used)
    with rmqlog.MessageStore.open(root, small_store_config(), clock=clock) as s:
        for _ in range(3):
            s.put("D", b"x", queue_id=0)
        assert used["calls"] == 1
        used["pct"] = 95.0
        s.put("D", b"within the interval", queue_id=0)  # the last check still holds
        clock.advance(round(msm.DISK_CHECK_INTERVAL_S * 1000))
        for _ in range(2):
            with pytest.raises(rmqlog.DiskFullError):
                s.put("D", b"refused", queue_id=0)
        assert used["calls"] == 3  # checked on every put while above the level
        used["pct"] = 50.0
        assert s.put("D", b"resumed", queue_id=0).queue_offset == 4
        assert used["calls"] == 4
    assert [r.body for r in walk(root)][-2:] == [b"within the interval", b"resumed"]


SYNC_CHILD = """
import sys
import pyarrow as pa
import rmqlog
cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=1000,
                        flush_disk_type=rmqlog.SYNC_FLUSH)
with rmqlog.MessageStore.open(sys.argv[1], cfg) as s:
    s.put_batch(pa.table({"topic": ["P"] * 3, "body": [b"p" * 50] * 3}))
    print(s.flush_service.syncs, s.flushed_offset() >= s.published_tail(), flush=True)
"""


def test_sync_flush_group_commit_across_processes(root: Path) -> None:
    """Three SYNC writer processes whose batches are published while the flush lock is busy
    return after one sync in total: the first to get the lock syncs for all."""
    from conftest import subprocess_env

    from rmqlog.fileio import InterProcessLock

    with rmqlog.MessageStore.open(root, SYNC) as s:
        s.create_topic("P", 4)
    lock = InterProcessLock(root / "flush.lock")
    with lock.held():
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", SYNC_CHILD, str(root)],
                env=subprocess_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]

        def published() -> int:  # read the file: a store opened here would share (and drop) our POSIX lock
            try:
                state = AppendStateFile(root / "append.state").load()
            except OSError:
                return 0
            queues = state.queues if state is not None else {}
            return sum(v for k, v in queues.items() if k.startswith("P/"))

        assert wait_until(lambda: published() == 9, timeout=60)
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    syncs = [int(o[0].split()[0]) for o in outs]
    assert sum(syncs) == 1 and all(o[0].split()[1] == "True" for o in outs)
    lock.close()


@pytest.mark.parametrize("chunk", [700, 1000, 4096, 4100])
def test_state_rebuild_in_bounded_windows_matches_the_published_state(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    chunk: int,
) -> None:
    import rmqlog.log.state_rebuild as msm

    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(pa.table({"topic": ["T"] * 200, "body": [b"x" * (i % 300) for i in range(200)]}))
        published = s.append_state()
        monkeypatch.setattr(msm, "REBUILD_CHUNK", chunk)
        rebuilt = s.parts.rebuild_state()
        assert (rebuilt.tail, rebuilt.queues) == (published.tail, published.queues)


def test_recover_after_a_power_loss_that_kept_only_later_segments_keeps_no_torn_batch(
    root: Path, tmp_path: Path
) -> None:
    """Nothing flushed yet, then a power loss that lost the first segments' names but kept a
    later segment: the log must not restart in the middle of a batch (found by test_crash)."""
    cfg = small_store_config(flush_interval_commit_log=60_000, flush_commit_log_thorough_interval=600_000)
    s = rmqlog.MessageStore.open(root, cfg)
    try:
        for b in range(12):
            s.put_batch(batch(topic="P", body=[b"%d:%d:" % (b, i) + b"p" * 250 for i in range(7)]))
        assert s.flushed_offset() == 0
        copy = tmp_path / "after-power-loss"
        _snapshot_open_store(root, copy)
    finally:
        s.close()
    segs = sorted((copy / "commitlog").iterdir())
    assert len(segs) >= 4
    for seg in segs[:2]:  # created first, but their names never reached the disk
        seg.unlink()
    (copy / "append.state").unlink()
    with rmqlog.MessageStore.open(copy, cfg) as s:
        assert s.recovery is not None and s.recovery.abnormal
        assert s.commitlog.min_offset() == int(segs[2].name) and s.published_tail() == s.commitlog.min_offset()
    batches: dict[bytes, list[bytes]] = {}
    for r in walk(copy):
        b, i = r.body.split(b":")[:2]
        batches.setdefault(b, []).append(i)
    assert all(len(rows) == 7 for rows in batches.values()), batches  # whole or absent


@pytest.mark.parametrize("bit", [62, 50, 45])
def test_a_checkpoint_from_the_future_is_not_trusted(root: Path, tmp_path: Path, bit: int) -> None:
    """The checkpoint (no checksum, as in RocketMQ) with a flipped high bit: its times lie
    years ahead. After a crash the walk started at the last segment, so damage below it went
    unseen (the matrix's outcome is ``DataLossError``), and every later checkpoint kept the
    bad time (they merge by maximum). It is ignored (a walk from the first segment) and never
    merged into the next one."""
    crashed = tmp_path / "crashed"
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        out = _fill(s, 60)
        s.dispatch()
        s.flush()  # acknowledged and on disk: damage there is data loss, never a torn tail
        now = int(__import__("time").time() * 1000)
        (root / "checkpoint").write_bytes(((now | (1 << bit)).to_bytes(8, "big") * 3).ljust(CHECKPOINT_SIZE, b"\0"))
        _snapshot_open_store(root, crashed)
    victim = out[3]["commitLogOffset"]  # a body byte in the first segment
    seg = crashed / "commitlog" / f"{victim - victim % 4096:020d}"
    raw = bytearray(seg.read_bytes())
    raw[raw.index(b"d" * 200, victim % 4096) + 100] ^= 0xFF
    seg.write_bytes(bytes(raw))
    with pytest.raises(rmqlog.DataLossError):
        rmqlog.MessageStore.open(crashed, small_store_config())
    # the file is not trusted by a write either: the next checkpoint holds sane times
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.flush()
    cp = CheckpointFile(root / "checkpoint").read()
    assert cp is not None and cp.physic_msg_timestamp < now + 3_600_000
