"""Segments prepared ahead of the writer (rmqlog.log.allocate): created beside the segments and
taken into place atomically when a writer rolls, never mistaken for a segment; their pages
warmed (faulted into the page cache, reading only) before the writer gets there.

The preparer is driven here by calling its ``run_once`` (no thread, no sleep): the store's
loop thread runs it only once a process has put, every second or when a large batch is
announced, so in these tests it is also stopped first where it could race the assertions.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import REPO_ROOT, batch, small_store_config, subprocess_env

import refcodec as rc
import rmqlog
import rmqlog.log.allocate as allocate
from rmqlog.config import StoreConfig

SEG = 1 << 20  # 1 MiB commitlog segments: warm steps of 64 KiB below
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident(path: Path, lo: int, hi: int) -> float:
    """The share of the file's pages in ``[lo, hi)`` that are in the page cache (mincore)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        mm = mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    try:
        view = np.frombuffer(mm, np.uint8)
        pages = (hi - lo) // mmap.PAGESIZE
        vec = (ctypes.c_ubyte * pages)()
        assert _libc.mincore(view.ctypes.data + lo, hi - lo, vec) == 0, ctypes.get_errno()
        del view
        return sum(v & 1 for v in vec) / pages
    finally:
        mm.close()


def cfg(**changes: object) -> StoreConfig:
    return small_store_config(mapped_file_size_commit_log=SEG, flush_least_pages_when_warm_mapped_file=16, **changes)


def settle(ms: rmqlog.MessageStore) -> int:
    """Run the preparer's rounds until it has nothing left to do; returns how many."""
    rounds = 0
    while ms.preparer.run_once(0.0):
        rounds += 1
        assert rounds < 10_000
    return rounds


def put(ms: rmqlog.MessageStore, n: int, body: int = 1000) -> pa.Table:
    return ms.put_batch(
        batch(topic="P", body=[bytes([65 + i % 26]) * body for i in range(n)], queueId=pa.array([0] * n, pa.int32()))
    )


def quiet(ms: rmqlog.MessageStore) -> rmqlog.MessageStore:
    """The store's loop never runs the preparer (the tests run its rounds themselves)."""
    ms.appender.preparing = True  # (as if started: a put does not add it to the loop)
    ms.services.remove(ms.preparer)
    return ms


# --------------------------------------------------------------------------- preallocation


def test_next_segment_prepared_beside_and_taken_into_place(root: Path) -> None:
    with rmqlog.MessageStore.open(root, cfg(warm_mapped_file_enable=False)) as ms:
        quiet(ms)
        put(ms, 10)
        settle(ms)
        prepared = root / "commitlog.prealloc" / f"{SEG:020d}"
        assert not prepared.exists()  # the tail is not past half of its segment yet
        put(ms, 600)
        settle(ms)
        assert prepared.stat().st_size == SEG and not any(prepared.read_bytes())
        assert ms.commitlog.segments.segment_starts() == [0]  # not a segment to anyone who lists them
        assert sorted(p.name for p in (root / "commitlog").iterdir()) == [f"{0:020d}"]
        inode = prepared.stat().st_ino
        out = put(ms, 600)  # rolls into it
        assert (root / "commitlog" / f"{SEG:020d}").stat().st_ino == inode and not prepared.exists()
        assert ms.preparer.prepared_segments == 1
        recs = rc.walk_commitlog(str(root / "commitlog"))
        assert [r.physical_offset for r in recs][-600:] == out["commitLogOffset"].to_pylist()
        assert ms.verify().ok


def test_new_store_first_segment_prepared_before_the_first_append(root: Path) -> None:
    with rmqlog.MessageStore.open(root, cfg()) as ms:
        quiet(ms)
        ms.preparer.expect(300_000)  # what put_batches does as the first table is encoded
        settle(ms)
        prepared = root / "commitlog.prealloc" / f"{0:020d}"
        assert prepared.exists() and not (root / "commitlog").exists()
        assert resident(prepared, 0, 256 << 10) == 1.0  # warmed from the tail, before any write
        inode = prepared.stat().st_ino
        ms.preparer.settle(300_000)
        put(ms, 200)
        assert (root / "commitlog" / f"{0:020d}").stat().st_ino == inode and not prepared.exists()
        assert [r.body[:1] for r in rc.walk_commitlog(str(root / "commitlog"))][:3] == [b"A", b"B", b"C"]


def test_a_prepared_file_of_another_size_is_not_taken(root: Path) -> None:
    with rmqlog.MessageStore.open(root, cfg(warm_mapped_file_enable=False)) as ms:
        quiet(ms)
        put(ms, 10)
        (root / "commitlog.prealloc").mkdir()
        (root / "commitlog.prealloc" / f"{SEG:020d}").write_bytes(b"\x01" * 4096)  # not a segment of this store
        put(ms, 1100)
        assert (root / "commitlog" / f"{SEG:020d}").stat().st_size == SEG
        assert not (root / "commitlog.prealloc" / f"{SEG:020d}").exists()
        assert ms.verify().ok and len(rc.walk_commitlog(str(root / "commitlog"))) == 1110


def test_preparing_on_a_full_disk_leaves_the_roll_to_the_writer(root: Path, monkeypatch, caplog) -> None:
    with rmqlog.MessageStore.open(root, cfg(warm_mapped_file_enable=False)) as ms:
        quiet(ms)
        put(ms, 600)

        def full(path: Path, start: int) -> None:
            raise rmqlog.DiskFullError(errno.ENOSPC, "disk full while creating a segment", str(path))

        monkeypatch.setattr(ms.commitlog.segments, "create_file", full)
        assert ms.preparer.run_once(0.0) is False
        assert "could not prepare commitlog segment" in caplog.text
        monkeypatch.undo()
        put(ms, 600)
        assert ms.commitlog.segments.segment_starts() == [0, SEG] and ms.verify().ok


@pytest.mark.parametrize("clean", [True, False], ids=["clean-close", "after-a-kill"])
def test_prepared_files_are_removed_by_recovery(root: Path, clean: bool) -> None:
    with rmqlog.MessageStore.open(root, cfg()) as ms:
        quiet(ms)
        put(ms, 700)
        settle(ms)
        assert list((root / "commitlog.prealloc").iterdir())
    if not clean:
        (root / "abort").touch()  # as a kill leaves it (the other files of the store stay as they are)
    with rmqlog.MessageStore.open(root, cfg()) as ms:
        assert ms.recovery is not None and ms.recovery.abnormal is not clean
        assert list((root / "commitlog.prealloc").iterdir()) == []
        assert ms.recovery.problems == [] and ms.verify().ok
        assert ms.commitlog.segments.segment_starts() == [0]


# --------------------------------------------------------------------------- warm-up


def test_warm_up_faults_in_what_the_writer_will_write(root: Path) -> None:
    with rmqlog.MessageStore.open(root, cfg()) as ms:
        quiet(ms)
        put(ms, 5)
        seg = root / "commitlog" / f"{0:020d}"
        assert resident(seg, SEG // 2, SEG) == 0.0  # nothing read or written there yet
        ms.preparer.expect(SEG)  # a writer of this process will append ~1 MiB
        settle(ms)
        assert resident(seg, SEG // 2, SEG) == 1.0  # as far as twice that: the rest of this segment ...
        nxt = root / "commitlog.prealloc" / f"{SEG:020d}"
        assert resident(nxt, 0, SEG // 2) == 1.0  # ... and the next one, prepared
        assert ms.preparer.warmed_bytes >= SEG + SEG // 2
        ms.preparer.settle(SEG)
        put(ms, 1100)
        assert ms.verify().ok


def test_warm_up_off_only_preallocates(root: Path) -> None:
    with rmqlog.MessageStore.open(root, cfg(warm_mapped_file_enable=False)) as ms:
        quiet(ms)
        put(ms, 5)
        ms.preparer.expect(SEG)
        settle(ms)
        assert ms.preparer.warmed_bytes == 0 and resident(root / "commitlog" / f"{0:020d}", SEG // 2, SEG) == 0.0
        assert (root / "commitlog.prealloc" / f"{SEG:020d}").exists()  # twice the announced bytes reach into it


def test_warm_up_without_madv_populate_reads_the_pages(root: Path, monkeypatch) -> None:
    monkeypatch.setattr(allocate, "_populate_ok", False)  # a kernel before 5.14: the pread fallback
    with rmqlog.MessageStore.open(root, cfg()) as ms:
        quiet(ms)
        put(ms, 5)
        ms.preparer.expect(SEG // 2)
        settle(ms)
        assert resident(root / "commitlog" / f"{0:020d}", SEG // 2, SEG) == 1.0


def test_warm_up_never_changes_a_byte_even_under_a_writer(root: Path) -> None:
    """The warm-up only reads: run over the live segment while another thread appends into
    it (and rolls), every record is what was put."""
    with rmqlog.MessageStore.open(root, cfg()) as ms:
        quiet(ms)
        put(ms, 5)
        stop = threading.Event()

        def warm_forever() -> None:
            while not stop.is_set():
                for start in (0, SEG, 2 * SEG):
                    for path in (root / "commitlog" / f"{start:020d}", root / "commitlog.prealloc" / f"{start:020d}"):
                        allocate.populate(path, 0, SEG)
                ms.preparer.expect(0)
                ms.preparer.run_once(0.0)

        t = threading.Thread(target=warm_forever)
        t.start()
        try:
            outs = [put(ms, 100, body=997) for _ in range(25)]
        finally:
            stop.set()
            t.join()
        recs = rc.walk_commitlog(str(root / "commitlog"))
        want = [o for out in outs for o in out["commitLogOffset"].to_pylist()]
        assert [r.physical_offset for r in recs][5:] == want
        assert all(r.body == bytes([65 + (i % 100) % 26]) * 997 for i, r in enumerate(recs[5:]))
        assert ms.verify().ok


def test_no_warm_up_on_tmpfs(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or not allocate.MappedFileQueue(shm / "x-never-made", SEG).bounded_reads:
        pytest.skip("no tmpfs at /dev/shm")
    root = Path(os.environ.get("RMQ_SHM_DIR", "/dev/shm")) / f"rmq-prealloc-{os.getpid()}"
    try:
        with rmqlog.MessageStore.open(root, cfg()) as ms:
            assert ms.preparer.warm is False  # a read of a hole allocates the page for good there
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- processes, config

WRITER = """
import sys
import pyarrow as pa
import rmqlog
root, name = sys.argv[1], sys.argv[2]
cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=20 * 1000,
                        flush_least_pages_when_warm_mapped_file=16)
with rmqlog.MessageStore.open(root, cfg) as ms:
    for k in range(40):  # 3000 x ~1 KiB per put: announced past WAKE_BYTES, the loop prepares meanwhile
        n = 3000
        ms.put_batch(pa.table({"topic": ["M"] * n, "body": [f"{name}:{k}:{i}".encode().ljust(900, b".") for i in
            range(n)],
                               "queueId": pa.array([0] * n, pa.int32())}))
    print(ms.preparer.prepared_segments, ms.preparer.warmed_bytes)
"""


def test_writers_of_several_processes_with_preparers(root: Path) -> None:
    """Two processes appending, each preparing and warming segments ahead: every record whole,
    queue offsets dense, whichever process rolled into whichever prepared segment."""
    with rmqlog.MessageStore.open(root, cfg()) as ms:
        ms.create_topic("M", 1)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), name],
            cwd=str(REPO_ROOT),
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        outs.append(out.split())
    assert sum(int(o[0]) for o in outs) > 0  # segments were prepared ahead, and taken
    with rmqlog.MessageStore.open(root, cfg()) as ms:
        assert ms.verify().ok
        ms.dispatch()
        assert ms.max_offset("M", 0) == 2 * 40 * 3000
        recs = rc.walk_commitlog(str(root / "commitlog"))
        assert sorted(r.queue_offset for r in recs) == list(range(2 * 40 * 3000))
        seen = {r.body.split(b".")[0] for r in recs}
        assert len(seen) == 2 * 40 * 3000
        assert list((root / "commitlog.prealloc").iterdir()) == []


def test_a_writer_killed_with_a_segment_prepared(root: Path) -> None:
    code = WRITER.replace(
        "    print(ms.preparer", "    import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n    print(ms.preparer"
    )
    with rmqlog.MessageStore.open(root, cfg()) as ms:
        ms.create_topic("M", 1)
    p = subprocess.run(
        [sys.executable, "-c", code, str(root), "k"],
        cwd=str(REPO_ROOT),
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    with rmqlog.MessageStore.open(root, cfg()) as ms:
        assert ms.recovery is not None and ms.recovery.abnormal and ms.verify().ok
        assert ms.max_offset("M", 0) == 40 * 3000
        assert list((root / "commitlog.prealloc").iterdir()) == []


def test_config_keys_from_broker_conf(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("warmMapedFileEnable=false\nflushLeastPagesWhenWarmMapedFile=1024\n")
    c = StoreConfig.from_properties(conf)
    assert c.warm_mapped_file_enable is False and c.flush_least_pages_when_warm_mapped_file == 1024
    d = StoreConfig()
    assert d.warm_mapped_file_enable is True and d.flush_least_pages_when_warm_mapped_file == 4096
    with pytest.raises(rmqlog.ConfigError, match="flush_least_pages_when_warm_mapped_file"):
        StoreConfig(flush_least_pages_when_warm_mapped_file=0)


def test_a_reader_prepares_nothing(root: Path) -> None:
    with rmqlog.MessageStore.open(root, cfg()) as ms:
        put(ms, 700)
    rmqlog.MessageStore.open(root, cfg()).close()  # (recovery removes what the writer prepared)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    with rmqlog.MessageStore.open(root, cfg(), create=False) as ms:
        assert len(ms.read_queue("P", 0, 0, 1000)) == 700
        assert ms.preparer not in ms.services.services
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before


def test_a_large_announcement_wakes_the_preparer(root: Path) -> None:
    """Small puts leave the preparer to its idle rounds; a batch of a MiB or more makes it
    due at once (ServiceLoop.wake), so the warm-up runs while the batch is encoded."""
    from rmqlog.service import ServiceLoop

    now = [0.0]
    loop = ServiceLoop(clock=lambda: now[0], threaded=False)
    with rmqlog.MessageStore.open(root, cfg()) as ms:
        quiet(ms)
        prep = allocate.SegmentPreparer(
            ms.commitlog.segments, ms.published_tail, warm=True, step_pages=16, wake=loop.wake
        )
        prep.wait_first = True  # (so that being due at 0 shows the wake, not the first round)
        loop.add(prep)
        prep.expect(1000)
        assert loop.run_due(0.0) == prep.interval_s and prep.warmed_bytes == 0  # not due: an idle round later
        prep.expect(allocate.WAKE_BYTES)
        rounds = 0
        while loop.run_due(0.0) == 0.0:  # due now; each round that did work is followed by the next at once
            rounds += 1
            assert rounds < 1000
        assert rounds >= 2 and prep.prepared_segments == 2  # the first segment and the next (twice the bytes reach it)
        assert prep.warmed_bytes >= 2 * allocate.WAKE_BYTES
        loop.stop()
