"""A killed writer's leftovers: the bytes past the published tail that the next append clears.

What a killed writer can leave: its batch's writes run in log order from the tail, one after
the other (``WritePipeline``), each a ``pwrite`` that a kill cuts short at most, so the bytes it
leaves are a prefix of the batch, contiguous from the tail: the tail's segment, the blank that
ends it when the batch rolled over, and the start of the segments after it. The cost of the
clearing must follow what was left, measured here as bytes cleared (``scrubbed_bytes``) and
as the segment's allocated blocks, never as time.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import subprocess_env, walk

import rmqlog
import rmqlog.log.mapped_file as mf
import rmqlog.log.write_pipeline as wp

MiB = 1 << 20
PAGE = mmap.PAGESIZE


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def nonzero_past(root: Path, tail: int, segment: int) -> int:
    """Non-zero bytes at or past commitlog offset ``tail``, in every segment."""
    count = 0
    for f in (root / "commitlog").iterdir():
        if not f.name.isdigit():  # a killed writer's half-made segment (.<name>.<pid>...tmp)
            continue
        start = int(f.name)
        if start + segment <= tail:
            continue
        data = np.fromfile(f, np.uint8)
        count += int(np.count_nonzero(data[max(0, tail - start) :]))
    return count


def data_bytes(path: Path, frm: int) -> int:
    """Bytes of ``path`` from ``frm`` on that are data, not holes (SEEK_DATA/SEEK_HOLE)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size, total, pos = os.fstat(fd).st_size, 0, frm
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:  # ENXIO: no data past pos
                break
            pos = os.lseek(fd, start, os.SEEK_HOLE)
            total += pos - max(start, frm)
        return total
    finally:
        os.close(fd)


def segment_file(root: Path, start: int) -> Path:
    return root / "commitlog" / f"{start:020d}"


def one(body: bytes = b"n") -> pa.Table:
    return pa.table({"topic": ["S"], "body": [body]})


def test_leftovers_are_cleared_at_the_cost_of_their_size(tmp_path: Path) -> None:
    """1 MiB left past the tail of a 64 MiB segment: the next put clears that MiB, and the
    segment is as sparse as before (it used to write zeros over the whole rest of the
    segment: all 64 MiB allocated, 2.8 s for 256 MiB)."""
    root = tmp_path / "s"
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=64 * MiB)
    with rmqlog.MessageStore.open(root, cfg) as s:
        s.put_batch(pa.table({"topic": ["S"] * 100, "body": [b"a" * 1000] * 100}))
        tail = s.published_tail()
        seg = segment_file(root, 0)
        clean = allocated(seg)
        if clean > 4 * MiB:
            pytest.skip("this filesystem does not keep segments sparse")
        fd = os.open(seg, os.O_WRONLY)
        os.pwrite(fd, b"\xab" * MiB, tail)  # what a killed writer's 1 MiB partial batch leaves
        os.close(fd)
        res = s.put_batch(one())
        assert res["commitLogOffset"][0].as_py() == tail
        assert allocated(seg) <= clean + 2 * PAGE  # not a block more than before the kill
        assert MiB <= s.commitlog.scrubbed_bytes <= MiB + 2 * PAGE  # this process's first scrub
        new_tail = s.published_tail()
    assert nonzero_past(root, new_tail, 64 * MiB) == 0
    assert [r.body for r in walk(root)] == [b"a" * 1000] * 100 + [b"n"]


KILLED_WRITER = """
import os, signal, sys
import pyarrow as pa
import rmqlog
from rmqlog.log.append_state import AppendStateFile
# killed after its last write, before it publishes: the whole batch is left past the tail
AppendStateFile.publish = lambda self, state, durable=False: os.kill(os.getpid(), signal.SIGKILL)
cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=int(sys.argv[2]))
n = int(sys.argv[3])
with rmqlog.MessageStore.open(sys.argv[1], cfg) as s:
    s.put_batch(pa.table({"topic": ["K"] * n, "body": [b"k" * 1000] * n}))
"""


def test_leftovers_rolled_into_later_segments_are_cleared(tmp_path: Path) -> None:
    """A writer killed before publishing a 2.5 MiB batch that rolled over two 1 MiB segments:
    the next put (by another process that had the store open: no recovery) clears the later
    segments too. Before, only the tail's segment was scrubbed: the later ones kept the
    dead batch's records, which a rebuild of the state then took for the log."""
    root = tmp_path / "s"
    size = MiB
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=size)
    with rmqlog.MessageStore.open(root, cfg) as s:
        s.put_batch(pa.table({"topic": ["S"] * 50, "body": [b"a" * 1000] * 50}))
        tail = s.published_tail()
        child = subprocess.run(
            [sys.executable, "-c", KILLED_WRITER, str(root), str(size), "2500"],
            env=subprocess_env(),
            check=False,
        )
        assert child.returncode == -signal.SIGKILL
        assert s.published_tail() == tail
        later = [segment_file(root, size), segment_file(root, 2 * size)]
        assert all(allocated(p) > 0 for p in later)  # the dead batch reached them
        left = data_bytes(segment_file(root, 0), tail) + sum(data_bytes(p, 0) for p in later)
        assert s.put_batch(one())["commitLogOffset"][0].as_py() == tail
        assert all(allocated(p) <= PAGE for p in later)  # emptied (kept: another process may have them open)
        assert s.commitlog.scrubbed_bytes <= left  # what was there, nothing more
        new_tail = s.published_tail()
    assert nonzero_past(root, new_tail, size) == 0
    assert [r.body for r in walk(root)] == [b"a" * 1000] * 50 + [b"n"]
    (root / "append.state").unlink()  # a rebuild from the log finds no phantom records
    with rmqlog.MessageStore.open(root, cfg) as s:
        assert s.published_tail() == new_tail
        assert s.put_batch(one(b"m"))["commitLogOffset"][0].as_py() == new_tail


LOOPING_WRITER = """
import sys
import pyarrow as pa
import rmqlog
cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=int(sys.argv[2]))
with rmqlog.MessageStore.open(sys.argv[1], cfg) as s:
    print("open", flush=True)
    i = 0
    while True:
        n = 300 + 97 * (i % 11)
        s.put_batch(pa.table({"topic": ["K"] * n, "body": [b"%d:" % i + b"k" * 3000] * n}))
        i += 1
"""


@pytest.mark.parametrize("seed", range(3))
def test_a_writer_killed_at_any_instant_leaves_nothing_the_next_put_keeps(tmp_path: Path, seed: int) -> None:
    """SIGKILL at a random instant of a loop of multi-segment puts: whatever it left, the
    next put of another process lands at the tail and nothing is left past the new tail."""
    root = tmp_path / "s"
    size = MiB
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=size)
    rng = random.Random(seed)
    with rmqlog.MessageStore.open(root, cfg) as s:
        s.put_batch(one(b"first"))
        child = subprocess.Popen(
            [sys.executable, "-c", LOOPING_WRITER, str(root), str(size)],
            env=subprocess_env(),
            stdout=subprocess.PIPE,
        )
        try:
            assert child.stdout is not None and child.stdout.readline() == b"open\n"
            time.sleep(rng.uniform(0.05, 0.6))  # (the writer process runs a random while, then is killed)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        tail = s.published_tail()
        assert s.put_batch(one(b"last"))["commitLogOffset"][0].as_py() == tail
        new_tail = s.published_tail()
        assert s.verify().ok
    assert nonzero_past(root, new_tail, size) == 0
    bodies = [r.body for r in walk(root)]
    assert bodies[0] == b"first" and bodies[-1] == b"last"


def test_a_clean_put_checks_with_one_read_per_append(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing to scrub: one 8-byte pread at the tail per append, however many tables it has
    (each table of ``put_batches`` read the tail again before)."""
    reads: list[int] = []
    real = mf.MappedFile.read

    def counted(self: mf.MappedFile, rel: int, length: int) -> bytes:
        reads.append(length)
        return real(self, rel, length)

    with rmqlog.MessageStore.open(tmp_path / "s") as s:
        s.put_batch(one())
        monkeypatch.setattr(mf.MappedFile, "read", counted)
        s.put_batch(one())
        assert reads == [8]
        reads.clear()
        s.put_batches([pa.table({"topic": ["S"] * 5, "body": [b"t%d" % i] * 5}) for i in range(4)])
        assert reads == [8]
        assert s.commitlog.scrubbed_bytes == 0


def test_clearing_without_hole_punching_zeroes_only_non_zero_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``fallocate(PUNCH_HOLE)`` is not supported the leftovers are overwritten with zeros,
    only where they are non-zero (not the whole rest of the segment)."""

    def no_punch(fd: int, mode: int, offset: int, length: int) -> int:
        if mode & mf.FALLOC_FL_PUNCH_HOLE:
            ctypes.set_errno(errno.EOPNOTSUPP)
            return -1
        return 0

    monkeypatch.setattr(mf, "_fallocate", no_punch)
    written: list[int] = []
    real = mf.MappedFile.write

    def counted(self: mf.MappedFile, rel: int, data: memoryview | bytes) -> None:
        written.append(len(memoryview(data).cast("B")))
        real(self, rel, data)

    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, rmqlog.StoreConfig(mapped_file_size_commit_log=16 * MiB)) as s:
        s.put(topic="S", body=b"a")
        tail = s.published_tail()
        fd = os.open(segment_file(root, 0), os.O_WRONLY)
        os.pwrite(fd, b"\x01" * 5000 + bytes(3 * MiB) + b"\x02" * 3000, tail)  # two runs, 3 MiB of zeros between
        os.close(fd)
        monkeypatch.setattr(mf.MappedFile, "write", counted)
        assert s.put_batch(one())["commitLogOffset"][0].as_py() == tail
        assert sum(written) < 16 << 10  # the 8,000 non-zero bytes (and the new record), not 3 MiB of zeros
        new_tail = s.published_tail()
    assert nonzero_past(root, new_tail, 16 * MiB) == 0


@pytest.mark.skipif(wp._ChunkWriter is None, reason="rmqlog._native is not built")
def test_the_pipeline_is_one_ordered_stream(tmp_path: Path) -> None:
    """A write handed to the thread pool after one handed to the native writer starts only
    once that one is done (a batch of large bodies after a packed one, in one append): so a
    killed append leaves a prefix of its writes, never a later one without an earlier one."""
    path = tmp_path / "seg"
    size = 64 * MiB
    with open(path, "wb") as f:
        f.truncate(size)
    seg = mf.MappedFile(path, 0, size)
    seen: list[bytes] = []
    big = np.full(size - PAGE, 7, np.uint8)

    def look() -> None:
        seen.append(seg.read(size - PAGE - 1, 1))  # the last byte of the native write

    with wp.WritePipeline(99) as pipe:
        pipe.write(seg, 0, big)  # native, ~10 ms or more
        pipe.submit(look)
    seg.close()
    assert seen == [b"\x07"]
