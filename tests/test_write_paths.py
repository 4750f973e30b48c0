"""The ways a batch reaches its segment, checked with the independent decoder.

- with the C helper (``rmqlog._native.pack_records``): each chunk of records packed into one
  buffer, the body CRCs computed on the way (carry-less multiply) or taken from the
  background thread (without it), one ``pwrite`` per chunk on the write thread;
- without it, small bodies: header, body and trailer joined per chunk, one ``pwrite``;
- without it, large bodies (average >= ``rmqlog.log.encode.crc.LARGE_BODY``): ``pwritev`` straight
  from the pieces, ~340 records per call.

All write chunk by chunk, pipelined (the next chunk is encoded while one is written), and
all must cut correctly at segment rolls. A short ``pwritev`` must be completed, and a failing
write must leave the published store untouched.
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import walk

import refcodec as rc
import rmqlog
import rmqlog.log.mapped_file as mf
import rmqlog.log.write_pipeline as wp
from rmqlog.log.encode import arrays as enc_arrays
from rmqlog.log.encode import crc as enc_crc
from rmqlog.log.encode import header as enc_header
from rmqlog.log.encode import native as enc_native
from rmqlog.log.encode import plain as enc_plain
from rmqlog.log.encode import prepare as enc_prepare
from rmqlog.log.encode.batch import EncodedBatch
from rmqlog.log.encode.crc import CRC_ASYNC_MIN_ROWS, LARGE_BODY
from rmqlog.log.msgid import UniqKeyGenerator
from rmqlog.log.record import header_dtype


def _bodies(n: int, size: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(size // 2, size * 3 // 2, n)
    return [rng.bytes(int(s)) for s in sizes]


PATHS = ["plain", "packed", "packed-background-crc", "python"]


@pytest.fixture(params=PATHS)
def write_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test once per write path (the C helper's paths are skipped when it is not built).

    ``plain``: everything available, so tables of just topic and body take the one-call
    ``pack_plain`` path; ``packed``: the general encoder with the C packer."""
    if request.param != "python" and enc_native.pack_records is None:
        pytest.skip("rmqlog._native is not built")
    if request.param != "plain":
        monkeypatch.setattr(enc_native, "pack_plain", None)
    if request.param == "python":
        monkeypatch.setattr(enc_native, "pack_records", None)
    if request.param == "packed-background-crc":
        monkeypatch.setattr(enc_native, "CLMUL", False)
    return str(request.param)


@pytest.mark.parametrize(("body_size", "segment"), [(100, 64 << 10), (LARGE_BODY * 2, 1 << 20)])
def test_batches_over_many_crc_chunks_and_rolls(tmp_path: Path, body_size: int, segment: int, write_path: str) -> None:
    n = max(CRC_ASYNC_MIN_ROWS + 904, (3 << 20) // body_size)  # several CRC chunks
    bodies = _bodies(n, body_size, 1)
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=segment, mapped_file_size_consume_queue=20 * 1000)
    with rmqlog.MessageStore.open(tmp_path, cfg) as s:
        t = pa.table(
            {
                "topic": ["W"] * n,
                "body": bodies,
                "tags": ["a", "bb"] * (n // 2) + ["a"] * (n % 2),
                "queueId": pa.array(np.arange(n) % 3, pa.int32()),
            }
        )
        res = s.put_batch(t)
        s.put_batch(t.slice(0, 10))  # and continue after it
        assert s.dispatch() == n + 10
        back = pa.concat_tables([s.read_queue("W", q, 0, n) for q in range(3)])
    recs = walk(tmp_path)
    assert len(recs) == n + 10
    assert [r.body for r in recs[:n]] == bodies
    assert all(r.body_crc == rc.body_crc(r.body) for r in recs)
    assert [r.physical_offset for r in recs[:n]] == res["commitLogOffset"].to_pylist()
    # the msgIds are made while the last chunks are written: every row's, across the rolls
    assert res["msgId"].to_pylist() == [rc.offset_msg_id("127.0.0.1:10911", r.physical_offset) for r in recs[:n]]
    assert len({r.physical_offset // segment for r in recs}) > 2  # the log rolled
    for q in range(3):
        assert [r.queue_offset for r in recs if r.queue_id == q] == list(range(sum(r.queue_id == q for r in recs)))
    assert sorted(back["body"].to_pylist()) == sorted(bodies + bodies[:10])


def test_short_pwritev_is_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(enc_native, "pack_records", None)  # the pwritev path
    real = mf._pwritev

    def short(fd: int, iov: int, cnt: int, off: int) -> int:  # writes only the first 3 entries
        return real(fd, iov, min(cnt, 3), off) if cnt > 3 else real(fd, iov, cnt, off)

    monkeypatch.setattr(mf, "_pwritev", short)
    bodies = _bodies(50, LARGE_BODY * 2, 2)
    with rmqlog.MessageStore.open(tmp_path) as s:
        s.put_batch(pa.table({"topic": ["W"] * 50, "body": bodies}))
    assert [r.body for r in walk(tmp_path)] == bodies


def _read_only_write_fds(m: pytest.MonkeyPatch, after: int = 0) -> list[int]:
    """From the ``after``-th call on, ``MappedFile.write_fd`` hands out a read-only descriptor:
    a packed chunk's ``pwrite`` on the native ``ChunkWriter`` thread then fails with EBADF.
    Returns the descriptors to close."""
    fds: list[int] = []
    real = mf.MappedFile.write_fd
    calls = {"n": 0}

    def ro(self: mf.MappedFile, rel: int, length: int) -> int:
        real(self, rel, length)  # the range check
        calls["n"] += 1
        if calls["n"] <= after:
            return real(self, rel, length)
        fds.append(os.open(self.path, os.O_RDONLY))
        return fds[-1]

    m.setattr(mf.MappedFile, "write_fd", ro)
    return fds


def _native_writes(write_path: str) -> bool:
    """Whether packed chunks go to the native ChunkWriter (not through ``MappedFile.write``)."""
    return write_path != "python" and wp._ChunkWriter is not None


@pytest.mark.parametrize("body_size", [100, LARGE_BODY * 2])
def test_failed_write_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_path: str, body_size: int
) -> None:
    with rmqlog.MessageStore.open(tmp_path) as s:
        s.put_batch(pa.table({"topic": ["W"] * 3, "body": [b"keep"] * 3}))
        tail = s.published_tail()

        def fail(fd: int, iov: int, cnt: int, off: int) -> int:
            ctypes.set_errno(errno.EIO)
            return -1

        def fail_write(self: mf.MappedFile, rel: int, data: object) -> None:
            raise OSError(errno.EIO, "injected", str(self.path))

        with monkeypatch.context() as m:
            m.setattr(mf, "_pwritev", fail)
            m.setattr(mf.MappedFile, "write", fail_write)
            fds = _read_only_write_fds(m, after=2)
            n = max(5, (3 << 20) // body_size)  # several chunks: later ones fail after earlier ones queued
            with pytest.raises(OSError) as info:
                s.put_batch(pa.table({"topic": ["W"] * n, "body": [b"x" * body_size] * n}))
        for fd in fds:
            os.close(fd)
        # EBADF where a chunk went to the native writer (a batch of one chunk is written inline)
        assert info.value.errno == (errno.EBADF if fds else errno.EIO)
        if _native_writes(write_path) and body_size == 100:  # ~30 chunks: some went there
            assert fds
        if not _native_writes(write_path):
            assert not fds
        assert s.published_tail() == tail
        s.put_batch(pa.table({"topic": ["W"], "body": [b"after"]}))
        s.dispatch()
        assert [r.body for r in walk(tmp_path)] == [b"keep"] * 3 + [b"after"]
        assert sum(s.read_queue("W", q, 0, 10).num_rows for q in range(4)) == 4


def test_pipeline_keeps_what_a_write_reads_until_it_is_done() -> None:
    """Regression: the pipeline dropped a chunk's buffers while its write was still running
    (the allocator then reused them: 8 zero bytes in a stored record, now and then)."""
    import threading
    import time
    import weakref

    from rmqlog.log.write_pipeline import IN_FLIGHT, WritePipeline

    class Chunk:
        pass

    alive_at_end: list[bool] = []
    refs: list[weakref.ref[Chunk]] = []
    release = threading.Event()

    def slow_write(i: int) -> None:
        release.wait(5)
        time.sleep(0.01)  # (a slow write on the pipeline's thread, so later chunks queue behind it)
        alive_at_end.append(refs[i]() is not None)

    with WritePipeline(99) as pipe:
        for i in range(IN_FLIGHT + 3):
            chunk = Chunk()
            refs.append(weakref.ref(chunk))
            if i == IN_FLIGHT:
                release.set()  # the first writes finish only while later chunks are queued
            pipe.submit(slow_write, i, keep=chunk)
            del chunk
    assert alive_at_end == [True] * (IN_FLIGHT + 3)
    assert all(r() is None for r in refs)  # and released afterwards


def test_pipeline_raises_the_first_failure_after_all_writes() -> None:
    from rmqlog.log.write_pipeline import WritePipeline

    done: list[int] = []

    def write(i: int) -> None:
        if i == 1:
            raise OSError(errno.EIO, "injected")
        done.append(i)

    with pytest.raises(OSError), WritePipeline(99) as pipe:
        for i in range(4):
            pipe.submit(write, i)
    # the failure surfaces when the next chunk waits for room; nothing more is queued, and
    # the write already queued (2) is skipped, as the native writer skips them: what a failed
    # append leaves is a prefix of its writes (see CommitLog.scrub)
    assert done == [0]

    done.clear()
    with pytest.raises(OSError), WritePipeline(99) as pipe:  # failing in the last, exit raises it
        for i in range(2):
            pipe.submit(write, i)
    assert done == [0]


def test_c_pack_records_checks_its_inputs() -> None:
    if enc_native.pack_records is None:
        pytest.skip("rmqlog._native was not built here")
    hdr = np.zeros(2 * 16, np.uint8)
    offs = np.array([0, 3, 5], np.int64)
    pieces = [(b"-", None), (b"vwxyz", offs)]  # a piece the same on every row, then a column
    out = np.zeros(2 * 16 + 5 + 2 + 5, np.uint8)
    enc_native.pack_records(hdr, 16, True, b"abcde", offs, pieces, out)
    assert bytes(out[16:23]) == b"abc-vwx" and bytes(out[39:44]) == b"de-yz"
    assert int.from_bytes(bytes(out[8:12]), "big") == rc.body_crc(b"abc")
    with pytest.raises(ValueError, match="out must be"):
        enc_native.pack_records(hdr, 16, True, b"abcde", offs, pieces, out[:-1])
    with pytest.raises(ValueError, match="offsets"):
        enc_native.pack_records(hdr, 16, True, b"abcd", offs, pieces, out)
    with pytest.raises(ValueError, match="offsets"):
        enc_native.pack_records(hdr, 16, True, b"abcde", np.array([0, 4, 3], np.int64), pieces, out)
    with pytest.raises(ValueError, match="piece offsets"):
        enc_native.pack_records(hdr, 16, True, b"abcde", offs, [(b"vw", offs)], out)
    with pytest.raises(ValueError, match="header"):
        enc_native.pack_records(hdr, 16, True, b"abcde", offs.astype(np.int32), pieces, out)
    with pytest.raises(ValueError, match="at most"):
        enc_native.pack_records(hdr, 16, True, b"abcde", offs, [(b"", None)] * 17, out)


def test_c_patch_records_writes_big_endian_fields_and_checks_bounds() -> None:
    if enc_native.patch_records is None:
        pytest.skip("rmqlog._native was not built here")
    out = np.zeros(40, np.uint8)
    starts = np.array([0, 24], np.int64)
    enc_native.patch_records(
        out, starts, (0, 8), (np.array([1, -2], np.int64), np.array([0x0102030405060708, 7], np.int64))
    )
    assert bytes(out[:16]) == (1).to_bytes(8, "big") + bytes(range(1, 9))
    assert bytes(out[24:40]) == (-2).to_bytes(8, "big", signed=True) + (7).to_bytes(8, "big")
    assert not out[16:24].any()  # nothing between the records is touched
    before = out.copy()
    with pytest.raises(ValueError, match="outside"):  # 24 + 10 + 8 > 40: nothing written
        enc_native.patch_records(out, starts, (10,), (np.array([5, 5], np.int64),))
    assert (out == before).all()
    with pytest.raises(ValueError, match="one entry per record"):
        enc_native.patch_records(out, starts, (0,), (np.array([5], np.int64),))
    with pytest.raises(ValueError, match="at most 4"):
        enc_native.patch_records(out, starts, (0,) * 5, (np.zeros(2, np.int64),) * 5)
    with pytest.raises(ValueError, match="int64"):
        enc_native.patch_records(out, starts.astype(np.int32), (0,), (np.zeros(2, np.int64),))


def test_uniq_keys_made_chunk_by_chunk_keep_given_ones(tmp_path: Path, write_path: str) -> None:
    n = 1500  # 4 KiB bodies: several chunks, each making its own UNIQ_KEY items
    given = [f"{i:032X}" if i % 3 == 0 else None for i in range(n)]
    props = pa.array([[("UNIQ_KEY", g)] if g else None for g in given], pa.map_(pa.string(), pa.string()))
    bodies = _bodies(n, LARGE_BODY * 4, 3)
    with rmqlog.MessageStore.open(tmp_path) as s:
        s.put_batch(pa.table({"topic": ["U"] * n, "body": bodies, "properties": props}))
    recs = walk(tmp_path)
    keys = [r.properties["UNIQ_KEY"] for r in recs]
    assert [r.body for r in recs] == bodies
    assert [k for k, g in zip(keys, given, strict=True) if g] == [g for g in given if g]
    made = [k for k, g in zip(keys, given, strict=True) if not g]
    assert len(set(made)) == len(made) and all(len(k) == 32 for k in made)
    assert made == sorted(made, key=lambda k: int(k[-12:], 16))  # in log order


def test_a_forked_child_can_still_append(tmp_path: Path, write_path: str) -> None:
    """The write and CRC threads are per process: a child forked after a put (Spark forks
    its Python workers; so may ``multiprocessing``) gets its own, instead of waiting forever
    on its parent's, which do not exist in it."""
    import os
    import signal
    import time

    n = 1200  # 4 KiB bodies: several chunks, so the write thread is used
    t = pa.table({"topic": ["F"] * n, "body": _bodies(n, LARGE_BODY * 4, 5)})
    with rmqlog.MessageStore.open(tmp_path / "parent") as s:
        s.put_batch(t)
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if the put completes
        code = 1
        try:
            with rmqlog.MessageStore.open(tmp_path / "child") as c:
                c.put_batch(t)
                code = 0 if c.published_tail() > 0 else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's put_batch hung")
        time.sleep(0.05)  # (waits for the forked child)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert [r.body for r in walk(tmp_path / "child")] == t["body"].to_pylist()


@pytest.mark.parametrize(("n", "rows"), [(1, 256), (256, 256), (257, 256), (5000, 256), (100_000, 20_971), (65, 64)])
def test_chunk_bounds_ramp_up_and_cover_every_row(n: int, rows: int) -> None:
    bounds = enc_crc.chunk_bounds(n, rows)
    sizes = np.diff(bounds)
    assert bounds[0] == 0 and bounds[-1] == n and (sizes > 0).all()
    if n <= rows:  # one chunk: written inline, no hand-off to the write thread
        assert len(sizes) == 1
        return
    assert sizes[0] == max(64, rows // 8) or sizes[0] == n  # small first chunk: the write starts early
    assert (sizes <= rows).all()
    full = sizes[:-1]  # each chunk doubles until full size (the last may be cut short)
    assert all(b == min(rows, 2 * a) for a, b in zip(full[:-1], full[1:], strict=True))


def test_header_rows_need_the_locked_fields_first() -> None:
    with pytest.raises(AssertionError, match="fill"):
        enc_header.HeaderColumns(
            dtype=header_dtype(),
            lengths=np.zeros(1, np.int64),
            queue_id=np.zeros(1, np.int64),
            flag=np.zeros(1, np.int64),
            born=np.zeros(1, np.int64),
            body_len=np.zeros(1, np.int64),
            sys_flag=0,
            born_host=bytes(8),
            store_host=bytes(8),
        ).rows(0, 1)


def test_put_batches_of_small_tables_share_one_pipeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_path: str
) -> None:
    """Many one-chunk tables (a sink task's Arrow batches) go through one pipeline: the writes
    overlap the next table's encoding, land in order across segment rolls, and a write
    failing in a later table publishes nothing of any of them."""
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=128 << 10)
    bodies = _bodies(1200, 300, 5)
    tables = [pa.table({"topic": ["P"] * 100, "body": bodies[i : i + 100]}) for i in range(0, 1200, 100)]
    with rmqlog.MessageStore.open(tmp_path, cfg) as s:
        res = s.put_batches(tables, dispatch=True)
        recs = walk(tmp_path)
        assert [r.body for r in recs] == bodies
        assert len({r.physical_offset // (128 << 10) for r in recs}) > 2  # rolled mid-way
        assert res["commitLogOffset"].to_pylist() == [r.physical_offset for r in recs]
        assert res["msgId"].to_pylist() == [rc.offset_msg_id("127.0.0.1:10911", r.physical_offset) for r in recs]
        assert sum(s.read_queue("P", q, 0, 2000).num_rows for q in range(4)) == 1200
        tail = s.published_tail()

        calls = {"n": 0}
        real_write, real_writev = mf.MappedFile.write, mf.MappedFile.writev

        def flaky(real):  # the 5th write call onwards fails: earlier tables' writes succeeded
            def go(self: mf.MappedFile, *args: object) -> None:
                calls["n"] += 1
                if calls["n"] >= 5:
                    raise OSError(errno.EIO, "injected", str(self.path))
                real(self, *args)

            return go

        with monkeypatch.context() as m:
            m.setattr(mf.MappedFile, "write", flaky(real_write))
            m.setattr(mf.MappedFile, "writev", flaky(real_writev))
            fds = _read_only_write_fds(m, after=4)  # the native writer's 5th write onwards fails
            with pytest.raises(OSError) as info:
                s.put_batches(tables)
        for fd in fds:
            os.close(fd)
        if _native_writes(write_path):
            assert info.value.errno == errno.EBADF and fds
        else:
            assert info.value.errno == errno.EIO and calls["n"] >= 5
        assert s.published_tail() == tail
        s.put_batch(pa.table({"topic": ["P"], "body": [b"after"]}))
        assert [r.body for r in walk(tmp_path)] == bodies + [b"after"]


@pytest.mark.parametrize("n", [1, 3, 4, 5, 17, 1000])
@pytest.mark.parametrize(("first", "count"), [(0, 1), (0, 4), (3, 4), (5, 8)])
def test_round_robin_queue_offsets_match_the_general_grouping(n: int, first: int, count: int) -> None:
    """The round-robin fast path (one topic, ids cycling from ``first``) gives the same
    offsets and the same next offsets per queue as grouping the rows, from non-empty queues."""
    from dataclasses import replace

    from rmqlog.log.commitlog import assign_queue_offsets

    batch = enc_prepare.prepare_batch(
        pa.table({"topic": ["T"] * n, "body": [b"x"] * n}),
        queue_counts=lambda topics: [count] * len(topics),
        max_message_size=1 << 20,
        max_record_size=1 << 20,
        store_host=bytes(8),
        born_host=bytes(8),
        uniq_keys=UniqKeyGenerator(),
        round_robin=lambda topic, queues, rows: first,
    )
    assert batch.round_robin == (first, count)
    assert batch.queue_id.tolist() == [(first + i) % count for i in range(n)]
    start = {f"T/{q}": 10 * q + 7 for q in range(0, count, 2)}  # some queues have messages
    fast_queues, general_queues = dict(start), dict(start)
    fast = assign_queue_offsets(batch, fast_queues)
    general = assign_queue_offsets(replace(batch, round_robin=None), general_queues)
    assert fast.tolist() == general.tolist()
    assert fast_queues == general_queues


def test_round_robin_fast_path_only_for_one_topic_without_queue_ids() -> None:
    def prep(table: pa.Table) -> EncodedBatch:
        return enc_prepare.prepare_batch(
            table,
            queue_counts=lambda topics: [4] * len(topics),
            max_message_size=1 << 20,
            max_record_size=1 << 20,
            store_host=bytes(8),
            born_host=bytes(8),
            uniq_keys=UniqKeyGenerator(),
            round_robin=lambda topic, queues, rows: 1,
        )

    assert prep(pa.table({"topic": ["A", "B"], "body": [b"x", b"y"]})).round_robin is None
    assert (
        prep(
            pa.table({"topic": ["A", "A"], "body": [b"x", b"y"], "queueId": pa.array([None, 2], pa.int32())})
        ).round_robin
        is None
    )
    two = prep(pa.table({"topic": ["A", "B", "A"], "body": [b"x", b"y", b"z"]}))
    assert two.queue_id.tolist() == [1, 1, 2]  # per topic, each from its own next queue


def test_small_puts_are_packed_before_the_lock_and_patched_under_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_path: str,
) -> None:
    """A put of one chunk is packed whole before the append lock (``EncodedBatch.prepack``);
    under it only QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP are written into the packed
    records. Checked byte for byte with the reference encoder, for batches that a segment
    roll cuts in two, with several topics, given and round-robin queue ids and properties."""
    prepacked: list[int] = []
    real = EncodedBatch.prepack

    def spy(self: EncodedBatch) -> None:
        prepacked.append(self.n)
        real(self)

    monkeypatch.setattr(EncodedBatch, "prepack", spy)
    real_plain = enc_plain.prepare_plain

    def spy_plain(*args: object) -> EncodedBatch | None:  # packed whole by pack_plain
        batch = real_plain(*args)  # type: ignore[arg-type]
        if batch is not None:
            prepacked.append(batch.n)
        return batch

    monkeypatch.setattr(enc_prepare, "prepare_plain", spy_plain)
    segment = 16 << 10
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=segment)
    rng = np.random.default_rng(11)
    results, bodies = [], []
    with rmqlog.MessageStore.open(tmp_path, cfg) as s:
        for i in range(40):
            n = int(rng.integers(1, 30))
            b = _bodies(n, 200, 100 + i)
            cols: dict[str, object] = {"topic": [("PA", "PB")[(i + r) % 2] for r in range(n)], "body": b}
            if i % 3 == 0:
                cols["queueId"] = pa.array([r % 4 for r in range(n)], pa.int32())
            if i % 4 == 1:
                cols["keys"] = [[f"k{i}", f"r{r}"] for r in range(n)]
                cols["properties"] = pa.array([[("p", str(r))] for r in range(n)], pa.map_(pa.string(), pa.string()))
            results.append(s.put_batch(pa.table(cols)))
            bodies += b
    recs = walk(tmp_path)
    assert prepacked == ([len(r) for r in results] if write_path != "python" else [])  # needs the C helper
    assert [r.body for r in recs] == bodies
    res = pa.concat_tables(results)
    assert [r.physical_offset for r in recs] == res["commitLogOffset"].to_pylist()
    assert [r.msg_id for r in recs] == res["msgId"].to_pylist()
    assert [r.store_timestamp * 1000 for r in recs] == res["storeTimestamp"].cast(pa.int64()).to_pylist()
    assert all(r.body_crc == rc.body_crc(r.body) for r in recs)
    for key in {(r.topic, r.queue_id) for r in recs}:  # dense from 0 in every queue
        assert [r.queue_offset for r in recs if (r.topic, r.queue_id) == key] == list(
            range(sum((r.topic, r.queue_id) == key for r in recs))
        )
    segs = {int(p.name): p.read_bytes() for p in (tmp_path / "commitlog").iterdir()}
    for r in recs:  # every byte as the reference encoder lays the record out
        off = r.physical_offset % segment
        raw = segs[r.physical_offset - off][off : off + r.total_size]
        assert raw == rc.encode_ref_record(r)
    cut = [t for t in results if len({o // segment for o in t["commitLogOffset"].to_pylist()}) > 1]
    assert len(cut) >= 2  # batches that a roll cut in two


@pytest.mark.skipif(wp._ChunkWriter is None, reason="rmqlog._native is not built")
def test_chunk_writer_writes_in_order_and_reports_the_first_failure(tmp_path: Path) -> None:
    w = wp._ChunkWriter(2)
    path = tmp_path / "out"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        chunks = [np.full(100_000 + i, i, np.uint8) for i in range(20)]
        off = 0
        for c in chunks:  # more chunks than the capacity: submit waits for room
            w.submit(fd, off, c.ctypes.data, c.nbytes)
            off += c.nbytes
        w.finish()
        assert w.done == 20
        assert path.read_bytes() == b"".join(c.tobytes() for c in chunks)
        with pytest.raises(ValueError, match="finished"):
            w.submit(fd, 0, chunks[0].ctypes.data, 1)
        w.finish()  # again: nothing to wait for
    finally:
        os.close(fd)
    ro = os.open(path, os.O_RDONLY)
    try:
        w = wp._ChunkWriter(1)
        good = os.open(path, os.O_RDWR)
        b = np.full(10, 7, np.uint8)
        w.submit(good, 0, b.ctypes.data, 10)
        w.submit(ro, 4096, b.ctypes.data, 10)  # fails: EBADF, at offset 4096
        w.submit(good, 20, b.ctypes.data, 10)  # skipped after the failure
        with pytest.raises(OSError) as info:
            w.finish()
        os.close(good)
        assert info.value.errno == errno.EBADF and info.value.offset == 4096  # type: ignore[attr-defined]
        assert w.done == 3
        data = path.read_bytes()
        assert data[:10] == b"\x07" * 10 and data[20:30] == bytes(10)  # the first written, the last not
    finally:
        os.close(ro)
    with pytest.raises(ValueError):
        wp._ChunkWriter(0)
    with pytest.raises(ValueError):
        wp._ChunkWriter(2).submit(0, -1, 0, 10)
    wp._ChunkWriter(2)  # dropped without finish(): its thread is joined, not leaked


@pytest.mark.skipif(wp._ChunkWriter is None, reason="rmqlog._native is not built")
def test_disk_full_on_the_native_writer_is_typed_and_harmless(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC on the ChunkWriter thread (a /dev/full descriptor from the 3rd chunk on) becomes
    DiskFullError; nothing is published, and the next put lands at the old tail."""
    with rmqlog.MessageStore.open(tmp_path) as s:
        s.put_batch(pa.table({"topic": ["W"] * 3, "body": [b"keep"] * 3}))
        tail = s.published_tail()
        real = mf.MappedFile.write_fd
        calls = {"n": 0}
        full = os.open("/dev/full", os.O_WRONLY)

        def dev_full(self: mf.MappedFile, rel: int, length: int) -> int:
            calls["n"] += 1
            return real(self, rel, length) if calls["n"] < 3 else full

        n = 40_000
        with monkeypatch.context() as m:
            m.setattr(mf.MappedFile, "write_fd", dev_full)
            with pytest.raises(rmqlog.DiskFullError):
                s.put_batch(pa.table({"topic": ["W"] * n, "body": [b"y" * 100] * n}))
        os.close(full)
        assert calls["n"] >= 3 and s.published_tail() == tail
        res = s.put("W", b"after", queue_id=0)
        assert res.commit_log_offset == tail
        assert s.verify().ok
    assert [r.body for r in walk(tmp_path)] == [b"keep"] * 3 + [b"after"]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["T"], True),
        (["Topic"] * 5, True),
        (["ab", "ab", "ba"], False),  # same lengths, other bytes
        (["abc", "ab", "c"], False),  # the same total length, other lengths
        (["ab", "abab"], False),
        (["", ""], True),
        (["x", "x", "y", "x"], False),
    ],
)
@pytest.mark.parametrize("native", [True, False], ids=["c", "numpy"])
def test_one_topic_screen_matches_an_exact_compare(
    monkeypatch: pytest.MonkeyPatch,
    values: list[str],
    expected: bool,
    native: bool,
) -> None:
    if native and enc_native.all_same is None:
        pytest.skip("rmqlog._native was not built here")
    if not native:
        monkeypatch.setattr(enc_native, "all_same", None)
    arr = pa.array(["pad"] + values + ["pad"]).slice(1, len(values))  # a slice: offsets not from 0
    assert enc_arrays.all_equal(arr) is expected
    assert expected == all(v == values[0] for v in values)


def test_c_all_same_checks_its_inputs() -> None:
    if enc_native.all_same is None:
        pytest.skip("rmqlog._native was not built here")
    offs = np.array([0, 2, 4, 6], np.int32)
    assert enc_native.all_same(offs, 0, 3, b"ababab") is True and enc_native.all_same(offs, 1, 2, b"xxabab") is True
    assert enc_native.all_same(offs, 0, 3, b"ababac") is False and enc_native.all_same(offs, 0, 0, b"") is True
    with pytest.raises(ValueError, match="out of range"):
        enc_native.all_same(offs, 0, 3, b"ababa")
    with pytest.raises(ValueError, match="past the offsets"):
        enc_native.all_same(offs, 1, 3, b"ababab")


# ---------------------------------------------------------------- the plain path (pack_plain)
def _prep(
    table: pa.Table | pa.RecordBatch,
    gen: UniqKeyGenerator,
    *,
    hosts: tuple[bytes, bytes] = (bytes(8), bytes(8)),
    counts: int = 4,
    marker: tuple[str, str] | None = None,
    max_message_size: int = 4 << 20,
    born_ms: int | None = None,
) -> EncodedBatch:
    return enc_prepare.prepare_batch(
        table,
        queue_counts=lambda topics: [counts] * len(topics),
        max_message_size=max_message_size,
        max_record_size=(64 << 20) - 8,
        store_host=hosts[0],
        born_host=hosts[1],
        uniq_keys=gen,
        round_robin=lambda topic, queues, rows: 3 % queues,
        last_row_property=marker,
        born_ms=born_ms,
    )


def _twin(gen: UniqKeyGenerator) -> UniqKeyGenerator:
    """A generator that hands out the same ids as ``gen`` (same prefix and sequence state)."""
    other = UniqKeyGenerator(wall_ms=gen.wall_ms)
    other._prefix, other._head, other._last = gen._prefix, gen._head, gen._last
    return other


V6 = bytes(range(16)) + (10911).to_bytes(4, "big")
PLAIN_CASES = {
    "one": lambda: pa.table({"topic": ["T"], "body": [b"x" * 100]}),
    "hundred": lambda: pa.table({"topic": ["TopicA"] * 100, "body": _bodies(100, 1024, 1)}),
    "empty-bodies": lambda: pa.table({"topic": ["T"] * 5, "body": [b"", b"a", b"", b"bc", b""]}),
    "sliced": lambda: pa.table({"topic": ["Q"] * 50, "body": _bodies(50, 64, 2)}).slice(7, 30),
    "record-batch": lambda: pa.record_batch({"body": _bodies(9, 300, 3), "topic": ["R%|-_9"] * 9}),
    "many-small": lambda: pa.table({"topic": ["M"] * 3000, "body": _bodies(3000, 40, 4)}),
    "null-queue-ids": lambda: pa.table(
        {"topic": ["S"] * 7, "body": _bodies(7, 80, 5), "queueId": pa.nulls(7, pa.int32())}
    ),
}


@pytest.mark.parametrize(
    "hosts", [(bytes(8), bytes(8)), (V6, bytes(8)), (bytes(8), V6)], ids=["v4", "store-v6", "born-v6"]
)
@pytest.mark.parametrize("case", list(PLAIN_CASES))
def test_plain_path_is_the_general_encoding_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch, case: str, hosts: tuple[bytes, bytes]
) -> None:
    """A plain batch packed by one ``pack_plain`` call: the very bytes the general encoder
    packs (same clock, same id sequence), and the same batch fields for the append."""
    if enc_native.pack_plain is None or not enc_native.CLMUL:
        pytest.skip("the plain path needs the C helper and carry-less multiply")
    now_ms = 1_790_000_000_123  # one clock for both: the ids' time and the born time
    table = PLAIN_CASES[case]()
    gen = UniqKeyGenerator(wall_ms=lambda: now_ms)
    twin = _twin(gen)
    plain = _prep(table, gen, hosts=hosts, born_ms=now_ms)
    assert plain.packed is not None  # took the plain path
    with monkeypatch.context() as m:
        m.setattr(enc_native, "pack_plain", None)
        general = _prep(table, twin, hosts=hosts, born_ms=now_ms)
        assert general.packed is None
        general.prepack()
    assert general.packed is not None and general.packed_starts is not None
    n = plain.n  # what the append lock gives, the same for both
    for batch in (plain, general):
        batch.patch(np.arange(n, dtype=np.int64) + 5, np.arange(n, dtype=np.int64) * 1000 + 77, 1_790_000_000_500)
    assert bytes(plain.packed) == bytes(general.packed)
    assert plain.packed_starts.tolist() == general.packed_starts.tolist()  # type: ignore[union-attr]
    for field in ("n", "topics", "round_robin", "large_bodies", "chunks"):
        assert getattr(plain, field) == getattr(general, field), field
    for field in ("topic_index", "queue_id", "lengths", "tags_codes"):
        got, want = getattr(plain, field), getattr(general, field)
        assert got.tolist() == want.tolist() and got.dtype == want.dtype, field
    for field in ("dtype", "sys_flag", "born_host", "store_host"):
        assert getattr(plain.header, field) == getattr(general.header, field), field
    for field in ("flag", "born", "body_len"):
        assert getattr(plain.header, field).tolist() == getattr(general.header, field).tolist(), field


def test_plain_path_only_takes_plain_batches() -> None:
    """Anything but one valid topic and non-null binary bodies in one write chunk goes to the
    general encoder (which then encodes it, or names the bad row)."""
    if enc_native.pack_plain is None or not enc_native.CLMUL:
        pytest.skip("the plain path needs the C helper and carry-less multiply")
    gen = UniqKeyGenerator()

    def plain(table: pa.Table, *, marker: tuple[str, str] | None = None, max_message_size: int = 100) -> bool:
        if marker is not None:  # the marker goes to the general path before any other check
            return _prep(table, gen, marker=marker).packed is not None
        return (
            enc_plain.prepare_plain(
                table,
                lambda topics: [4] * len(topics),
                max_message_size,
                64 << 20,
                bytes(8),
                bytes(8),
                gen,
                lambda topic, queues, rows: 0,
                1_790_000_000_123,
            )
            is not None
        )

    base = {"topic": ["T"] * 3, "body": [b"a", b"b", b"c"]}
    assert plain(pa.table(base))
    assert not plain(pa.table(base), marker=("RMQLOG_WRITER", "1 w"))  # the idempotence marker
    assert not plain(pa.table({**base, "tags": ["x"] * 3}))
    assert plain(pa.table({**base, "queueId": pa.nulls(3, pa.int64())}))  # a Spark sink's batches
    assert plain(pa.table({**base, "queueId": pa.nulls(3)}))
    assert not plain(pa.table({**base, "queueId": pa.array([None, 1, None], pa.int32())}))
    assert not plain(pa.table({**base, "queueId": pa.nulls(3, pa.string())}))  # the general path rejects it
    assert not plain(pa.table({**base, "flag": [0, 0, 0]}))
    assert not plain(pa.table({"topic": ["T", "U", "T"], "body": base["body"]}))
    assert not plain(pa.table({"topic": ["T"] * 3, "body": ["a", "b", "c"]}))  # string bodies
    assert not plain(pa.table({"topic": pa.array(["T"] * 3, pa.large_string()), "body": base["body"]}))
    assert not plain(pa.table({"topic": pa.array(["T"] * 3).dictionary_encode(), "body": base["body"]}))
    assert not plain(pa.table({"topic": ["T"] * 3, "body": pa.array([b"a", None, b"c"])}))
    assert not plain(pa.table({"topic": ["T", None, "T"], "body": base["body"]}))
    assert not plain(pa.table({"topic": ["T"] * 3, "body": pa.chunked_array([[b"a"], [b"b", b"c"]])}))
    assert not plain(pa.table({"topic": ["T"] * 3, "body": [b"a", b"b" * 11, b"c"]}), max_message_size=10)
    assert not plain(pa.table({"topic": ["a/b"] * 3, "body": base["body"]}))
    big = _bodies(300, 8 << 10, 6)  # 300 rows, ~2.4 MiB: several write chunks, pipelined
    assert not plain(pa.table({"topic": ["T"] * 300, "body": big}), max_message_size=1 << 20)
    assert plain(pa.table({"topic": ["T"] * 256, "body": big[:256]}), max_message_size=1 << 20)
    with pytest.raises(rmqlog.errors.InvalidTopicError):  # a bad name: the general path names it
        _prep(pa.table({"topic": ["a/b"] * 3, "body": base["body"]}), gen)
    with pytest.raises(rmqlog.errors.InvalidTopicError, match="auto-creation is off"):
        _prep(pa.table(base), gen, counts=-1)


def test_plain_path_failures_write_nothing_and_name_the_row(tmp_path: Path) -> None:
    cfg = rmqlog.StoreConfig(max_message_size=1000, auto_create_topic_enable=False)
    with rmqlog.MessageStore.open(tmp_path, cfg) as s:
        s.create_topic("T", 2)
        first = s.put_batch(pa.table({"topic": ["T"] * 4, "body": [b"ok"] * 4}))
        assert first["queueOffset"].to_pylist() == [0, 0, 1, 1]
        tail = s.published_tail()
        with pytest.raises(rmqlog.errors.MessageTooLargeError) as info:
            s.put_batch(pa.table({"topic": ["T"] * 3, "body": [b"a", b"b" * 1001, b"c"]}))
        assert (info.value.row, info.value.field) == (1, "body")
        with pytest.raises(rmqlog.errors.InvalidTopicError) as info2:
            s.put_batch(pa.table({"topic": ["Nope"] * 2, "body": [b"a", b"b"]}))
        assert (info2.value.row, info2.value.field) == (0, "topic")
        assert s.published_tail() == tail
        s.put_batch(pa.table({"topic": ["T"] * 2, "body": [b"c", b"d"]}), dispatch=True)
        assert s.read_queue("T", 0, 0, 10)["body"].to_pylist() == [b"ok", b"ok", b"c"]
        assert s.read_queue("T", 1, 0, 10)["body"].to_pylist() == [b"ok", b"ok", b"d"]
    recs = walk(tmp_path)
    assert [r.body for r in recs] == [b"ok"] * 4 + [b"c", b"d"]
    raw = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
    assert all(r.body_crc == rc.body_crc(r.body) for r in recs)
    assert all(raw[r.physical_offset : r.physical_offset + r.total_size] == rc.encode_ref_record(r) for r in recs)
    assert len({r.properties["UNIQ_KEY"] for r in recs}) == 6


def test_c_pack_plain_checks_its_inputs() -> None:
    if enc_native.pack_plain is None:
        pytest.skip("rmqlog._native was not built here")
    tpl = bytes(88)
    offs = np.array([0, 3, 5], np.int32)
    out = [np.zeros(2, np.int64), np.zeros(2, np.int64), np.zeros(2, np.int32)]
    packed = enc_native.pack_plain(tpl, 7, b"abcde", offs, 0, 2, b"\x01T", 0xABCDEF, 1, 2, 10, *out)
    assert len(packed) == 2 * (88 + 2 + 13) + 5
    assert out[0].tolist() == [88 + 3 + 15, 88 + 2 + 15] and out[1].tolist() == [0, 106] and out[2].tolist() == [1, 0]
    assert (
        bytes(packed[91:106]) == b"\x01T000000ABCDEF\x02"
        and bytes(packed[106 + 90 : 106 + 105]) == b"\x01T000000ABCDF0\x02"
    )
    assert int.from_bytes(packed[8:12], "big") == rc.body_crc(b"abc") and int.from_bytes(packed[40:48], "big") == 7
    before = [a.copy() for a in out]
    assert enc_native.pack_plain(tpl, 7, b"abcde", offs, 0, 2, b"", 0, 0, 2, 2, *out) is None  # a body over max_body
    assert all((a == b).all() for a, b in zip(out, before, strict=True))
    with pytest.raises(ValueError, match="offsets out of range"):
        enc_native.pack_plain(tpl, 7, b"abcd", offs, 0, 2, b"", 0, 0, 2, 10, *out)
    with pytest.raises(ValueError, match="offsets out of range"):
        enc_native.pack_plain(tpl, 7, b"abcde", np.array([0, 4, 3], np.int32), 0, 2, b"", 0, 0, 2, 10, *out)
    with pytest.raises(ValueError, match="bad template"):
        enc_native.pack_plain(tpl, 7, b"abcde", offs, 1, 2, b"", 0, 0, 2, 10, *out)  # rows past the offsets
    with pytest.raises(ValueError, match="bad template"):
        enc_native.pack_plain(tpl[:40], 7, b"abcde", offs, 0, 2, b"", 0, 0, 2, 10, *out)
    with pytest.raises(ValueError, match="bad template"):
        enc_native.pack_plain(tpl, 7, b"abcde", offs, 0, 2, b"", 0, 0, 0, 10, *out)  # no queues
    with pytest.raises(ValueError, match="bad template"):
        enc_native.pack_plain(tpl, 7, b"abcde", offs, 0, 2, b"", 0, 0, 2, 10, out[0][:1], out[1], out[2])
    assert enc_native.longest_value(offs, 0, 2, 5) == 3 and enc_native.longest_value(offs, 1, 1, 5) == 2
    assert enc_native.longest_value(offs, 0, 0, 0) == 0
    with pytest.raises(ValueError, match="out of range"):
        enc_native.longest_value(offs, 0, 2, 4)
    with pytest.raises(ValueError, match="past the offsets"):
        enc_native.longest_value(offs, 1, 2, 5)


@pytest.mark.parametrize("topics", [["T"], ["T", "U"]], ids=["one-topic", "two-topics"])
def test_a_topic_shrunk_after_encoding_is_checked_again_before_the_append(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    topics: list[str],
) -> None:
    """Queue ids are planned without the topics lock; a topic whose queue count fell since
    makes the put fail, naming the first row past the new count, with nothing written."""
    with rmqlog.MessageStore.open(tmp_path) as s:
        for t in topics:
            s.create_topic(t, 4)
        rows = [topics[i % len(topics)] for i in range(8)]
        s.put_batch(pa.table({"topic": rows, "body": [b"a"] * 8}))
        tail = s.published_tail()
        monkeypatch.setattr(s.topic_config, "write_queue_counts", lambda names: [3] * len(names))
        with pytest.raises(rmqlog.errors.QueueIdError) as info:  # round robin from queue 0 again
            s.put_batch(pa.table({"topic": rows, "body": [b"b"] * 8}))
        # one topic: queues 0, 1, 2, 3, ... (row 3 is the first past 3 queues); two alternating
        # topics: each 0, 1, 2, 3 over its own rows (row 6 is T's fourth)
        assert (info.value.row, info.value.field) == (3 if len(topics) == 1 else 6, "queueId")
        assert s.published_tail() == tail
        monkeypatch.undo()
        s.put_batch(pa.table({"topic": rows, "body": [b"c"] * 8}))
    assert [r.body for r in walk(tmp_path)] == [b"a"] * 8 + [b"c"] * 8


@pytest.mark.parametrize(
    "bad", [{"topic": ["T"], "body": [b"x"]}, [b"x"], "T", None], ids=["dict", "list", "str", "none"]
)
def test_put_batch_of_a_non_table_is_a_typed_error(tmp_path: Path, bad: object) -> None:
    with rmqlog.MessageStore.open(tmp_path) as s:
        with pytest.raises(rmqlog.errors.InvalidMessageError, match="pyarrow Table or RecordBatch") as info:
            s.put_batch(bad)  # type: ignore[arg-type]
        assert info.value.field == "*"
        assert s.published_tail() == 0


def test_put_batches_keeps_its_tables_unpacked_until_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``put_batches`` (a sink task's many tables) packs under the lock, chunk by chunk, so a
    task's memory holds its bodies once; ``put_batch`` of a plain table packs it whole first."""
    calls: list[int] = []
    real = enc_plain.prepare_plain

    def spy(table: pa.Table, *args: object) -> EncodedBatch | None:
        calls.append(table.num_rows)
        return real(table, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(enc_prepare, "prepare_plain", spy)
    tables = [pa.table({"topic": ["P"] * 10, "body": _bodies(10, 50, i)}) for i in range(3)]
    with rmqlog.MessageStore.open(tmp_path) as s:
        s.put_batches(tables)
        assert calls == []
        s.put_batch(tables[0])
        assert calls == [10]
    assert len(walk(tmp_path)) == 40


@pytest.mark.parametrize("spare", [8, 7])
def test_a_packed_put_fits_a_segment_with_exactly_the_end_blank_to_spare(
    tmp_path: Path, write_path: str, spare: int
) -> None:
    """A put packed before the lock is placed from its packing when it fits the segment with
    RocketMQ's 8-byte end blank to spare, and rolls over (blank, next segment) when it does
    not: one byte decides."""
    with rmqlog.MessageStore.open(tmp_path / "probe") as s:
        s.put_batch(pa.table({"topic": ["T"], "body": [b"x" * 1500]}))
        length = s.published_tail()  # every such record is as long
    segment = 3 * length + spare  # the third record ends 8 (or 7) bytes before the segment's end
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=segment)
    with rmqlog.MessageStore.open(tmp_path / "s", cfg) as s:
        offsets = [
            s.put_batch(pa.table({"topic": ["T"], "body": [b"x" * 1500]}))["commitLogOffset"][0].as_py()
            for _ in range(4)
        ]
        expected = [0, length, 2 * length, segment] if spare == 8 else [0, length, segment, segment + length]
        assert offsets == expected
        assert [r.physical_offset for r in walk(tmp_path / "s")] == expected
        s.dispatch()
        assert (
            sorted(o for q in range(4) for o in s.read_queue("T", q, 0, 10)["commitLogOffset"].to_pylist()) == expected
        )
