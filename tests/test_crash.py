"""Crash scenarios: writer processes killed with SIGKILL at random points, and simulated power loss.

Each trial starts writer processes that append random batches to one store (tiny segments,
so kills land in segment rolls too) and log, to an append-only file, every batch they start
and every batch whose ``put_batch`` returned, plus the store's flushed position. The parent
kills them at a random instant, optionally simulates a power loss (everything past the
store's durable flushed position is zeroed or torn, later segments deleted or torn, the
unsynced state files dropped or emptied, sometimes the consume queues lost),
reopens the store and checks:

- every acknowledged batch is present exactly once (SYNC_FLUSH: its put returned;
  ASYNC_FLUSH: after a power loss only what was reported flushed, after a kill everything
  published), and every batch present is whole (no torn batch, no phantom record);
- the reference codec walks the log to the published tail without error;
- queue offsets are dense and unique per queue, and the consume queues agree with the log;
- appends continue at the right commitlog and queue offsets; ``verify`` finds nothing.

A few trials run in the normal suite; ``RMQ_OPTIN=1`` runs 64 more.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from conftest import subprocess_env, units, walk

import rmqlog
from rmqlog.durability.flush import FlushStateFile
from rmqlog.log.append_state import AppendStateFile

SEGMENT = 4096
CQ_SEGMENT = 20 * 50
QUEUES = 4

WRITER = f"""
import os, random, sys
import pyarrow as pa
import rmqlog
root, mode, wid, log_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
cfg = rmqlog.StoreConfig(mapped_file_size_commit_log={SEGMENT}, mapped_file_size_consume_queue={CQ_SEGMENT},
                        flush_disk_type=mode, flush_interval_commit_log=5, flush_commit_log_least_pages=1)
rng = random.Random(seed)
log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
with rmqlog.MessageStore.open(root, cfg) as s:
    os.write(log, b"open\\n")
    for b in range(100000):
        n = rng.randint(1, 12)
        bodies = [("%d:%d:%d:" % (wid, b, i)).encode() + b"x" * rng.randint(0, 400) for i in range(n)]
        table = pa.table({{"topic": ["K"] * n, "body": pa.array(bodies, pa.binary()),
                          "queueId": pa.array([rng.randrange({QUEUES}) for _ in range(n)], pa.int32())}})
        os.write(log, b"begin %d %d %d\\n" % (wid, b, n))
        out = s.put_batch(table)
        last = out["commitLogOffset"][-1].as_py()
        os.write(log, b"put %d %d %d %d %d\\n" % (wid, b, n, last, s.flushed_offset()))
        if rng.random() < 0.2:
            s.dispatch()
"""


class WriterLog:
    """What one writer process logged: batches begun (with their size), batches whose put
    returned (with the commitlog offset of their last record), flushed offsets it was told."""

    def __init__(self, path: Path) -> None:
        self.begun: dict[int, int] = {}
        self.put: dict[int, int] = {}
        self.max_flushed = 0
        text = path.read_text() if path.exists() else ""
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "begin":
                self.begun[int(parts[2])] = int(parts[3])
            elif len(parts) == 6 and parts[0] == "put":
                self.put[int(parts[2])] = int(parts[4])
                self.max_flushed = max(self.max_flushed, int(parts[5]))


def _simulate_power_loss(root: Path, rng: random.Random) -> int:
    """Drop everything that was not made durable; returns the durable flushed offset kept."""
    pos = FlushStateFile(root / "flush.state").read()
    flushed = pos.offset if pos is not None else 0
    cl = root / "commitlog"
    for seg in sorted(cl.iterdir()) if cl.is_dir() else []:
        if not seg.name.isdigit():
            seg.unlink()  # a killed writer's half-created segment (temporary name)
            continue
        start = int(seg.name)
        if start >= flushed:
            if rng.random() < 0.7:
                seg.unlink()  # created after the last sync (its name was never synced)
            else:  # or its name and some of its pages did reach the disk
                data = bytearray(seg.read_bytes())
                keep = rng.randint(0, len(data))
                data[keep:] = bytes(len(data) - keep)
                seg.write_bytes(bytes(data))
        elif start + SEGMENT > flushed:
            data = bytearray(seg.read_bytes())
            cut = flushed - start
            if rng.random() < 0.5:
                data[cut:] = bytes(len(data) - cut)  # unsynced pages lost
            else:  # or only some of them: a torn tail of random length
                keep = rng.randint(0, len(data) - cut)
                data[cut + keep :] = bytes(len(data) - cut - keep)
            seg.write_bytes(bytes(data))
    # state files replaced without a sync: a power loss may leave them absent, empty or stale
    choice = rng.randrange(3)
    if choice == 0:
        (root / "append.state").unlink(missing_ok=True)
    elif choice == 1:
        (root / "append.state").write_bytes(b"")
    (root / "dispatch.state").unlink(missing_ok=True)
    if rng.random() < 0.5:  # consume-queue pages written after the last checkpoint: maybe lost
        import shutil

        shutil.rmtree(root / "consumequeue", ignore_errors=True)
    return flushed


def _run_trial(tmp_path: Path, mode: str, writers: int, power_loss: bool, seed: int) -> None:
    rng = random.Random(seed)
    root = tmp_path / "store"
    logs = [tmp_path / f"w{w}.log" for w in range(writers)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), mode, str(w), str(logs[w]), str(seed * 100 + w)],
            env=subprocess_env(),
            stderr=subprocess.PIPE,
        )
        for w in range(writers)
    ]
    try:
        target = rng.randint(1, 25)  # kill after this many acknowledged batches (in total) ...
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = sum(len(WriterLog(p).put) for p in logs)
            if done >= target or any(p.poll() is not None for p in procs):
                break
            time.sleep(0.002)  # (waits for the writer processes)
        time.sleep(rng.random() * 0.03)  # ... plus a random moment
        for p in procs:
            p.send_signal(signal.SIGKILL)
    finally:
        for p in procs:
            p.kill()
            _, err = p.communicate()
            assert p.returncode == -signal.SIGKILL, err.decode()[-3000:]
    assert (root / "abort").exists()  # the killed owners never closed the store

    if power_loss:
        _simulate_power_loss(root, rng)
    cfg = rmqlog.StoreConfig(
        mapped_file_size_commit_log=SEGMENT, mapped_file_size_consume_queue=CQ_SEGMENT, flush_disk_type=mode
    )
    with rmqlog.MessageStore.open(root, cfg) as s:
        assert s.recovery is not None and s.recovery.abnormal
        _check_store(s, root, logs, mode, power_loss)


def _check_store(s: rmqlog.MessageStore, root: Path, logs: list[Path], mode: str, power_loss: bool) -> None:
    tail = s.published_tail()
    recs = walk(root)  # the reference codec raises on any torn or malformed record
    # (a power loss before any flush may leave only later segments: the log then starts there)
    end = recs[-1].physical_offset + recs[-1].total_size if recs else s.commitlog.min_offset()
    assert end <= tail and tail - end < SEGMENT  # only a blank (end of segment) may follow
    seen: dict[tuple[int, int], list[int]] = {}
    for r in recs:
        w, b, i = (int(x) for x in r.body.split(b":", 3)[:3])
        seen.setdefault((w, b), []).append(i)
    wlogs = [WriterLog(p) for p in logs]
    reported_flushed = max(wl.max_flushed for wl in wlogs)
    for (w, b), idx in seen.items():  # every batch present: begun by a writer, whole, each message once
        assert b in wlogs[w].begun, f"phantom batch {(w, b)}"
        assert sorted(idx) == list(range(wlogs[w].begun[b])), f"batch {(w, b)} torn or duplicated: {sorted(idx)}"
    for w, wl in enumerate(wlogs):
        if power_loss and mode == rmqlog.ASYNC_FLUSH:
            # acknowledged = below a flushed offset the store reported (a batch boundary)
            acked = {b for b, last in wl.put.items() if last < reported_flushed}
        else:
            acked = set(wl.put)  # SYNC: put returned = on disk; a kill keeps all that was published
        missing = sorted(b for b in acked if (w, b) not in seen)
        assert not missing, f"writer {w}: acknowledged batches lost: {missing[:5]}"
    # queues: dense, unique, and the consume queues agree with the log
    s.dispatch()
    by_queue: dict[int, list] = {}
    for r in recs:
        by_queue.setdefault(r.queue_id, []).append(r)
    for q, rs in by_queue.items():
        assert [r.queue_offset for r in rs] == list(range(len(rs))), q
        assert units(root, "K", q) == [(r.physical_offset, r.total_size, r.tags_code) for r in rs]
    report = s.verify()
    assert report.ok, report.problems
    # appends continue at the right offsets
    before = s.max_offset("K", 0)
    if s.commitlog.min_offset() == 0:
        assert before == len(by_queue.get(0, []))
    # (a log that lost its first segments: the queue goes on after its units, never back)
    res = s.put("K", b"after-recovery", queue_id=0)
    assert res.queue_offset == before
    assert res.commit_log_offset == tail or (res.commit_log_offset % SEGMENT == 0 and res.commit_log_offset > tail)


SCENARIOS = [
    (rmqlog.SYNC_FLUSH, 1, False),
    (rmqlog.ASYNC_FLUSH, 1, False),
    (rmqlog.SYNC_FLUSH, 1, True),
    (rmqlog.ASYNC_FLUSH, 1, True),
    (rmqlog.SYNC_FLUSH, 3, False),
    (rmqlog.ASYNC_FLUSH, 3, True),
]


def _id(sc: tuple[str, int, bool]) -> str:
    mode, writers, power = sc
    return f"{mode.split('_')[0].lower()}-{writers}w-{'powerloss' if power else 'kill'}"


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS, ids=_id)
def test_recover_after_kill_at_a_random_point(tmp_path: Path, scenario: tuple[str, int, bool]) -> None:
    mode, writers, power = scenario
    _run_trial(tmp_path, mode, writers, power, seed=zlib.crc32(_id(scenario).encode()) % 10_000)


@pytest.mark.optin
@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(
    "scenario", SCENARIOS + [(rmqlog.SYNC_FLUSH, 3, True), (rmqlog.ASYNC_FLUSH, 3, False)], ids=_id
)
def test_recover_after_kill_many_trials(tmp_path: Path, scenario: tuple[str, int, bool], seed: int) -> None:
    mode, writers, power = scenario
    _run_trial(tmp_path, mode, writers, power, seed=1000 + seed * 7 + len(_id(scenario)))


@pytest.mark.slow
def test_recover_concurrent_process_test_store_killed_midway(tmp_path: Path) -> None:
    """The store of test_concurrency.py (4 writers, a dispatcher, 2 topics, 4 queues), killed
    mid-way: after recovery queue offsets are dense and unique, every batch is whole, each
    writer's batches are a prefix of what it sent, and the consume queues agree with the log."""
    import test_concurrency as tc

    root, go, done = tmp_path / "store", str(tmp_path / "go"), str(tmp_path / "done")
    procs = [tc._spawn(tc.WRITER, str(root), go, done, str(w)) for w in range(tc.WRITERS)]
    procs.append(tc._spawn(tc.DISPATCHER, str(root), go, done))
    try:
        assert tc.wait_until(lambda: len(list(tmp_path.glob("go.ready.*"))) == len(procs), timeout=60)
        Path(go).touch()
        # kill once a random amount of data is published (a few batches in, far from the end)
        want = random.Random(7).randint(2, 8) * tc.BATCH_SIZE

        def published() -> int:
            try:
                state = AppendStateFile(root / "append.state").load()
                return sum(state.queues.values()) if state is not None else 0
            except OSError:
                return 0

        tc.wait_until(lambda: published() >= want, timeout=60, interval=0.001)
        for p in procs:
            p.send_signal(signal.SIGKILL)
    finally:
        for p in procs:
            p.kill()
            p.communicate()
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=tc.CL_SEG, mapped_file_size_consume_queue=tc.CQ_SEG)
    with rmqlog.MessageStore.open(root, cfg) as s:
        assert s.recovery is not None and s.recovery.abnormal
        s.dispatch()
        recs = walk(root)
        per_writer: dict[int, list[int]] = {}
        by_queue: dict[tuple[str, int], list] = {}
        for r in recs:
            wid, seq, _ = r.body.decode().split(":")
            per_writer.setdefault(int(wid), []).append(int(seq))
            by_queue.setdefault((r.topic, r.queue_id), []).append(r)
        for wid, seqs in per_writer.items():
            assert sorted(seqs) == list(range(len(seqs))) and len(seqs) % tc.BATCH_SIZE == 0, wid
        for (topic, q), rs in by_queue.items():
            assert [r.queue_offset for r in rs] == list(range(len(rs))), (topic, q)
            assert units(root, topic, q) == [(r.physical_offset, r.total_size, r.tags_code) for r in rs]
        assert s.verify().ok
        assert 0 < len(recs) < tc.WRITERS * tc.BATCHES * tc.BATCH_SIZE  # killed mid-way
        res = s.put("C0", b"after", queue_id=1)
        assert res.queue_offset == len(by_queue.get(("C0", 1), []))
