"""Several OS processes appending to one store root at once.

Four writer processes (``python -c``) each append 20 batches of 50 messages; meanwhile a fifth
process dispatches in a loop and a sixth reads every queue as it grows (and keeps opening
fresh store objects). Afterwards: every message is in the log exactly once, each batch is
contiguous (nothing interleaved or torn), queue offsets are dense per queue, UNIQ_KEYs are
unique across processes, and the reference codec walks a clean log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import REPO_ROOT, read_queue_all, subprocess_env, units, wait_until, walk

import rmqlog
from rmqlog.log.allocate import SegmentPreparer

WRITERS = 4
BATCHES = 20
BATCH_SIZE = 50
TOPICS = ("C0", "C1")
QUEUES = 4
CL_SEG = 16384
CQ_SEG = 1000

_PRELUDE = f"""
import os, sys, time, traceback
import pyarrow as pa
import rmqlog
CFG = rmqlog.StoreConfig(mapped_file_size_commit_log={CL_SEG}, mapped_file_size_consume_queue={CQ_SEG})
root, go, done = sys.argv[1], sys.argv[2], sys.argv[3]
def ready_and_wait():
    # announce readiness, then wait for the common start signal
    open(go + ".ready.%d" % os.getpid(), "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            sys.exit("no go signal")
        time.sleep(0.002)  # (waits for the test's go signal)
"""

WRITER = (
    _PRELUDE
    + f"""
wid = int(sys.argv[4])
with rmqlog.MessageStore.open(root, CFG) as s:
    ready_and_wait()
    for b in range({BATCHES}):
        n = {BATCH_SIZE}
        seqs = [b * n + i for i in range(n)]
        s.put_batch(pa.table({{
            "topic": pa.array(["C%d" % ((wid + q) % 2) for q in seqs]),
            "body": pa.array([(f"{{wid}}:{{q}}:" + "p" * ((q * 37 + wid * 11) % 200)).encode() for q in seqs],
                pa.binary()),
            "queueId": pa.array([None if q % 3 else (q // 3) % {QUEUES} for q in seqs], pa.int32()),
            "tags": pa.array(["w%d" % wid if q % 2 else None for q in seqs]),
            "keys": pa.array([["k%d" % wid, "s%d" % q] for q in seqs], pa.list_(pa.string())),
        }}))
"""
)

DISPATCHER = (
    _PRELUDE
    + """
runs = dispatched = 0
with rmqlog.MessageStore.open(root, CFG) as s:
    ready_and_wait()
    while True:
        finished = os.path.exists(done)
        dispatched += s.dispatch()
        runs += 1
        if finished:
            break
        time.sleep(0.01)  # (paces the dispatches while the writer processes run)
print(runs, dispatched)
"""
)

READER = (
    _PRELUDE
    + """
pos = {}
read = calls = opens = 0
def check(rows, t, q, start):
    for i, r in enumerate(rows):
        assert r["topic"] == t and r["queueId"] == q, r
        assert r["queueOffset"] == start + i, (r["queueOffset"], start, i)
        wid, seq, pad = r["body"].decode().split(":")
        assert r["keys"] == ["k" + wid, "s" + seq], r["keys"]
s = rmqlog.MessageStore.open(root, CFG)
ready_and_wait()
try:
    while True:
        finished = os.path.exists(done)
        for t in ("C0", "C1"):
            for q in range(4):
                start = pos.get((t, q), 0)
                res = s.get_messages("reader", t, q, start, max_count=64)
                calls += 1
                assert res.max_offset >= res.min_offset >= 0
                if res.status is rmqlog.GetMessageStatus.FOUND:
                    rows = res.messages.to_pylist()
                    check(rows, t, q, start)
                    again = s.message_by_offset(rows[0]["commitLogOffset"])
                    assert again == rows[0], (again, rows[0])
                    assert s.read_queue(t, q, start, start + 3).to_pylist() == rows[:3]
                    read += len(rows)
                    pos[(t, q)] = res.next_begin_offset
                else:
                    assert res.status in (rmqlog.GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                                          rmqlog.GetMessageStatus.OFFSET_OVERFLOW_ONE,
                                          rmqlog.GetMessageStatus.NO_MATCHED_LOGIC_QUEUE), res.status
        if calls % 40 == 0:  # a fresh store object, opened in the middle of the writes
            with rmqlog.MessageStore.open(root, CFG) as fresh:
                for t in ("C0", "C1"):
                    for q in range(4):
                        fresh.max_offset(t, q)
            opens += 1
        if finished:  # the writers are done: read on until every queue's end
            s.dispatch()
            if all(pos.get((t, q), 0) == s.max_offset(t, q) for t in ("C0", "C1") for q in range(4)):
                break
        time.sleep(0.002)  # (paces the reads while the writer processes run)
finally:
    s.close()
print(read, calls, opens)
"""
)


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=str(REPO_ROOT),
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(p: subprocess.Popen[str], name: str, timeout: float) -> str:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"{name} did not finish in time\n{err[-3000:]}")
    assert p.returncode == 0, f"{name} exited with {p.returncode}:\n{err[-3000:]}"
    return out


@pytest.mark.slow
def test_concurrent_writers(tmp_path: Path) -> None:
    root = tmp_path / "shared-store"
    go, done = tmp_path / "go", tmp_path / "done"
    common = (str(root), str(go), str(done))
    rmqlog.MessageStore.open(
        root, rmqlog.StoreConfig(mapped_file_size_commit_log=CL_SEG, mapped_file_size_consume_queue=CQ_SEG)
    ).close()
    writers = [_spawn(WRITER, *common, str(w)) for w in range(WRITERS)]
    helpers = {"dispatcher": _spawn(DISPATCHER, *common), "reader": _spawn(READER, *common)}
    started = time.monotonic()
    procs = [*writers, *helpers.values()]
    # start together: once every process has opened the store and is waiting (or one died)
    wait_until(
        lambda: len(list(tmp_path.glob("go.ready.*"))) == len(procs) or any(p.poll() is not None for p in procs),
        timeout=60,
    )
    go.touch()
    try:
        for w, p in enumerate(writers):
            _finish(p, f"writer {w}", timeout=max(5.0, 90 - (time.monotonic() - started)))
    finally:
        done.touch()
    disp_out = _finish(helpers["dispatcher"], "dispatcher", timeout=60)
    read_out = _finish(helpers["reader"], "reader", timeout=60)
    runs, concurrently_dispatched = map(int, disp_out.split())
    read, calls, _opens = map(int, read_out.split())
    total = WRITERS * BATCHES * BATCH_SIZE
    # the reader, reading while the writers wrote, met every message exactly once
    assert runs >= 1 and calls >= 1 and read == total

    # ---- the log, walked by the reference codec: clean, every message exactly once
    recs = walk(root)
    assert len(recs) == total
    ids = [tuple(r.body.split(b":")[:2]) for r in recs]
    assert len(set(ids)) == total
    assert set(ids) == {(b"%d" % w, b"%d" % q) for w in range(WRITERS) for q in range(BATCHES * BATCH_SIZE)}
    position = {i: n for n, i in enumerate(ids)}
    for w in range(WRITERS):
        for b in range(BATCHES):
            where = [position[(b"%d" % w, b"%d" % (b * BATCH_SIZE + i))] for i in range(BATCH_SIZE)]
            # a batch is one contiguous run of records: nothing of another writer inside it
            assert where == list(range(where[0], where[0] + BATCH_SIZE)), (w, b)
        seqs = [int(r.body.split(b":")[1]) for r in recs if r.body.startswith(b"%d:" % w)]
        assert seqs == list(range(BATCHES * BATCH_SIZE))  # each writer's order is kept
    uniq = [r.properties["UNIQ_KEY"] for r in recs]
    assert len(set(uniq)) == total
    for r in recs:
        w, q, _ = r.body.decode().split(":")
        assert r.properties["KEYS"] == f"k{w} s{q}"
        assert r.topic == f"C{(int(w) + int(q)) % 2}"
        if int(q) % 3 == 0:
            assert r.queue_id == (int(q) // 3) % QUEUES

    # ---- queue offsets dense and unique per queue, in log order
    by_queue: dict[tuple[str, int], list] = {}
    for r in recs:
        by_queue.setdefault((r.topic, r.queue_id), []).append(r)
    assert sum(len(v) for v in by_queue.values()) == total
    for key, rs in by_queue.items():
        assert [r.queue_offset for r in rs] == list(range(len(rs))), key

    # ---- dispatch finishes what the concurrent dispatcher left, and everything reads back
    with rmqlog.MessageStore.open(root) as s:
        left = s.dispatch()
        assert concurrently_dispatched + left == total
        assert s.dispatch() == 0
        for (topic, qid), rs in by_queue.items():
            assert units(root, topic, qid) == [(r.physical_offset, r.total_size, r.tags_code) for r in rs]
            got = read_queue_all(s, topic, qid, max_count=100)
            assert [g["commitLogOffset"] for g in got] == [r.physical_offset for r in rs]
            assert [g["body"] for g in got] == [r.body for r in rs]
        last = recs[-1]
        assert s.append_state().tail == last.physical_offset + last.total_size
    assert sorted(os.listdir(root / "consumequeue")) == list(TOPICS)


# --------------------------------------------------------------------------- threads of one process


@pytest.mark.slow
def test_threads_share_one_store(tmp_path: Path) -> None:
    root = tmp_path / "threads"
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=CL_SEG, mapped_file_size_consume_queue=CQ_SEG)
    errors: list[BaseException] = []
    with rmqlog.MessageStore.open(root, cfg) as s:
        s.start_services()

        def work(w: int) -> None:
            try:
                for b in range(10):
                    s.put_batch(
                        pa.table({"topic": ["TH"] * 30, "body": [b"%d:%d" % (w, b * 30 + i) for i in range(30)]})
                    )
                    s.put("TH", b"%d:single%d" % (w, b))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        total = 4 * 10 * 31
        assert wait_until(lambda: sum(s.max_offset("TH", q) for q in range(QUEUES)) == total, timeout=30)
        s.stop_services()
        assert s.dispatch() == 0
        bodies = [r["body"] for q in range(QUEUES) for r in read_queue_all(s, "TH", q)]
    assert len(bodies) == len(set(bodies)) == total
    recs = walk(root)
    assert len(recs) == total
    for q in range(QUEUES):
        rs = [r for r in recs if r.queue_id == q]
        assert [r.queue_offset for r in rs] == list(range(len(rs)))
        assert units(root, "TH", q) == [(r.physical_offset, r.total_size, 0) for r in rs]


# --------------------------------------------------------------------------- segment creation races
#
# A new segment is sized with os.ftruncate(). Before 2be997b it was created under its final name
# first, so another process listing the directory in between saw a 0-byte segment:
# MessageStore.open and a store object's first use of a queue (MappedFileQueue.__init__ stats
# every segment, with no lock) raised CorruptStoreError ('segments of different sizes [0, N]' /
# 'empty segment file'), and a store opened then kept consume-queue size 0 (ZeroDivisionError on
# its next dispatch). These tests pause one thread inside os.ftruncate and let another store
# object open the root or touch a queue for the first time, exactly what a second process does.


class _PausedCreation:
    """Pauses the thread named ``writer`` in its first os.ftruncate until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.created = threading.Event()
        self.release = threading.Event()
        real = os.ftruncate

        def ftruncate(fd: int, size: int) -> None:
            if threading.current_thread().name == "writer" and not self.created.is_set():
                self.created.set()
                self.release.wait(10)
            real(fd, size)

        monkeypatch.setattr(os, "ftruncate", ftruncate)
        # the writer must create the segment itself: a segment the preparer made ahead (the
        # background thread, whenever it runs first on a loaded machine) is linked into place
        # whole, and the writer would then never reach os.ftruncate
        monkeypatch.setattr(SegmentPreparer, "_prepare", lambda self, start: False)

    def run_during(self, writer: Callable[[], object], other: Callable[[], object]) -> list[BaseException]:
        """Run ``writer`` until it has created a file, then ``other`` in a third thread; their errors."""
        errors: list[BaseException] = []

        def guarded(fn: Callable[[], object]) -> Callable[[], None]:
            def run() -> None:
                try:
                    fn()
                except BaseException as exc:  # noqa: BLE001 - reported by the caller
                    errors.append(exc)

            return run

        w = threading.Thread(target=guarded(writer), name="writer")
        w.start()
        try:
            assert self.created.wait(10), "the writer never created a segment"
            o = threading.Thread(target=guarded(other), name="other")
            o.start()
            o.join(0.5)  # a store that raises does so at once; one that waits for the writer's lock blocks
        finally:
            self.release.set()
        o.join(20)
        w.join(20)
        return errors


def _cfg() -> rmqlog.StoreConfig:
    return rmqlog.StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=CQ_SEG)


def test_open_while_a_writer_creates_a_commitlog_segment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "race"
    s = rmqlog.MessageStore.open(root, _cfg())
    s.put("T", b"x" * 100, queue_id=0)
    paused = _PausedCreation(monkeypatch)

    def open_and_read() -> None:
        with rmqlog.MessageStore.open(root, _cfg()) as other:
            other.max_offset("T", 0)

    errors = paused.run_during(lambda: s.put("T", b"y" * 3800, queue_id=0), open_and_read)
    s.close()
    assert errors == []
    assert [r.physical_offset for r in walk(root)][1] == 4096


def test_first_read_of_a_queue_while_its_segment_is_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "race"
    s = rmqlog.MessageStore.open(root, _cfg())
    reader = rmqlog.MessageStore.open(root, _cfg())
    s.put("T", b"x", queue_id=0)
    paused = _PausedCreation(monkeypatch)
    errors = paused.run_during(s.dispatch, lambda: reader.max_offset("T", 0))
    try:
        assert errors == []
        assert reader.max_offset("T", 0) == 1
    finally:
        reader.close()
        s.close()


def test_store_opened_while_first_consume_queue_is_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "race"
    s = rmqlog.MessageStore.open(root, _cfg())
    s.put("T", b"x", queue_id=0)
    paused = _PausedCreation(monkeypatch)
    opened: list[rmqlog.MessageStore] = []
    errors = paused.run_during(s.dispatch, lambda: opened.append(rmqlog.MessageStore.open(root, _cfg())))
    s.close()
    assert errors == [] and len(opened) == 1
    with opened[0] as late:
        late.put("U", b"y", queue_id=1)
        assert late.dispatch() == 1
        assert late.get_messages("g", "U", 1, 0).status is rmqlog.GetMessageStatus.FOUND


def test_lock_free_state_readers_never_make_a_writer_reuse_a_tail(tmp_path: Path) -> None:
    """Regression: a state load compared the cached slot header and then read the cached
    state in two steps; a lock-free reader replacing the cache in between handed a writer an
    older tail, and its batch overwrote the one before."""
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=CL_SEG, mapped_file_size_consume_queue=CQ_SEG)
    errors: list[BaseException] = []
    stop = threading.Event()
    with rmqlog.MessageStore.open(tmp_path, cfg) as s:

        def reader() -> None:
            while not stop.is_set():
                s.published_tail()  # loads the state without the append lock

        def work(w: int) -> None:
            try:
                for b in range(60):
                    s.put_batch(pa.table({"topic": ["RS"] * 3, "body": [b"%d:%d:%d" % (w, b, i) for i in range(3)]}))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        readers = [threading.Thread(target=reader) for _ in range(2)]
        writers = [threading.Thread(target=work, args=(w,)) for w in range(3)]
        for t in readers + writers:
            t.start()
        for t in writers:
            t.join(60)
        stop.set()
        for t in readers:
            t.join(10)
        assert errors == []
    recs = walk(tmp_path)
    assert len(recs) == 3 * 60 * 3
    assert len({r.body for r in recs}) == len(recs)
