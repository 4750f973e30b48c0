"""The two ways a batch reaches its segment, checked with the independent decoder.

- small bodies: header, body and trailer joined per chunk, one ``pwrite`` per chunk;
- large bodies (average >= ``store.encode.LARGE_BODY``): ``pwritev`` straight from the
  pieces, ~340 records per call.

Both write chunk by chunk as the background thread finishes each chunk's body CRCs, and both
must cut correctly at segment rolls. A short ``pwritev`` must be completed, and a failing one
must leave the published store untouched.
"""

from __future__ import annotations

import ctypes
import errno
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import refcodec as rc
from conftest import walk

import store
import store.mapped_file as mf
from store.encode import _CRC_ASYNC_MIN_ROWS, LARGE_BODY


def _bodies(n: int, size: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(size // 2, size * 3 // 2, n)
    return [rng.bytes(int(s)) for s in sizes]


@pytest.mark.parametrize(("body_size", "segment"), [(100, 64 << 10), (LARGE_BODY * 2, 1 << 20)])
def test_batches_over_many_crc_chunks_and_rolls(tmp_path: Path, body_size: int, segment: int) -> None:
    n = max(_CRC_ASYNC_MIN_ROWS + 904, (3 << 20) // body_size)  # several CRC chunks
    bodies = _bodies(n, body_size, 1)
    cfg = store.StoreConfig(mapped_file_size_commit_log=segment, mapped_file_size_consume_queue=20 * 1000)
    with store.MessageStore.open(tmp_path, cfg) as s:
        t = pa.table({"topic": ["W"] * n, "body": bodies, "tags": ["a", "bb"] * (n // 2) + ["a"] * (n % 2),
                      "queueId": pa.array(np.arange(n) % 3, pa.int32())})
        res = s.put_batch(t)
        s.put_batch(t.slice(0, 10))  # and continue after it
        assert s.dispatch() == n + 10
        back = pa.concat_tables([s.read_queue("W", q, 0, n) for q in range(3)])
    recs = walk(tmp_path)
    assert len(recs) == n + 10
    assert [r.body for r in recs[:n]] == bodies
    assert all(r.body_crc == rc.body_crc(r.body) for r in recs)
    assert [r.physical_offset for r in recs[:n]] == res["commitLogOffset"].to_pylist()
    assert len({r.physical_offset // segment for r in recs}) > 2  # the log rolled
    for q in range(3):
        assert [r.queue_offset for r in recs if r.queue_id == q] == list(range(sum(r.queue_id == q for r in recs)))
    assert sorted(back["body"].to_pylist()) == sorted(bodies + bodies[:10])


def test_short_pwritev_is_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = mf._pwritev

    def short(fd: int, iov: int, cnt: int, off: int) -> int:  # writes only the first 3 entries
        return real(fd, iov, min(cnt, 3), off) if cnt > 3 else real(fd, iov, cnt, off)

    monkeypatch.setattr(mf, "_pwritev", short)
    bodies = _bodies(50, LARGE_BODY * 2, 2)
    with store.MessageStore.open(tmp_path) as s:
        s.put_batch(pa.table({"topic": ["W"] * 50, "body": bodies}))
    assert [r.body for r in walk(tmp_path)] == bodies


def test_failed_pwritev_publishes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with store.MessageStore.open(tmp_path) as s:
        s.put_batch(pa.table({"topic": ["W"] * 3, "body": [b"keep"] * 3}))
        tail = s.published_tail()

        def fail(fd: int, iov: int, cnt: int, off: int) -> int:
            ctypes.set_errno(errno.EIO)
            return -1

        monkeypatch.setattr(mf, "_pwritev", fail)
        with pytest.raises(OSError) as info:
            s.put_batch(pa.table({"topic": ["W"] * 5, "body": [b"x" * (LARGE_BODY * 2)] * 5}))
        assert info.value.errno == errno.EIO
        assert s.published_tail() == tail
        monkeypatch.undo()
        s.put_batch(pa.table({"topic": ["W"], "body": [b"after"]}))
        s.dispatch()
        assert [r.body for r in walk(tmp_path)] == [b"keep"] * 3 + [b"after"]
        assert sum(s.read_queue("W", q, 0, 10).num_rows for q in range(4)) == 4
