"""Body CRCs (BODYCRC: CRC-32 & 0x7FFFFFFF, the only checksummed part of a record) and the
write chunks they are computed in.

Body CRCs are computed chunk by chunk (~:data:`CRC_CHUNK_BYTES` of bodies each), so the
commitlog can write a chunk as soon as its CRCs are known. With the C helper's
carry-less-multiply CRC (~14 GB/s, GIL released) a chunk's CRCs are computed on demand by the
appending thread, right before the chunk is written (``pack_records`` computes each as it
copies the body): its bodies are then still in the CPU cache when the write copies them, and
the write of the previous chunk runs meanwhile (see
:meth:`rmqlog.log.commitlog.CommitLog.append_all`). Otherwise (table CRC or one call per body)
one background thread computes them ahead, while the caller encodes the rest.
"""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pyarrow as pa

from ...fileio import ProcessLocalPool
from ..record import crc32
from . import native

_CRC_POOL = ProcessLocalPool("rmq-crc")
#: Batches of fewer rows compute their CRCs at once, in the caller's thread.
CRC_ASYNC_MIN_ROWS = 4096
#: Bytes of bodies per chunk (a chunk is written as one buffer or one ``pwritev`` series).
CRC_CHUNK_BYTES = 2 << 20
#: Rows of a chunk at least, whatever the body sizes.
MIN_CHUNK_ROWS = 256
#: Average body size from which records are written straight from their pieces (header,
#: body, trailer) with one ``pwritev`` per ~340 records, instead of joined first: for large
#: bodies the join's extra copy of every byte costs more than the scatter-gather entries.
#: (Also where the C helper's table CRC stops paying off against one ISA-L call per body.)
LARGE_BODY = 1024


def crc32s(body: pa.BinaryArray) -> np.ndarray:
    """BODYCRC of each body: CRC-32 & 0x7FFFFFFF.

    One call of the C helper ``rmqlog._native`` for the whole array (no per-body Python
    call, GIL released), when it was built: for every batch when the CPU has carry-less
    multiply (~14 GB/s), else for bodies averaging under :data:`LARGE_BODY` (its table CRC
    runs at ~2.2 GB/s). Otherwise one ISA-L/zlib call per body (:data:`rmqlog.log.record.crc32`):
    through Python bytes objects for small bodies, memoryview slices (no copy) for large ones.
    """
    n = len(body)
    if n == 0:
        return np.zeros(0, np.int32)
    offsets = np.frombuffer(body.buffers()[1], np.int32, n + 1, body.offset * 4)
    total = int(offsets[-1] - offsets[0])
    if native.crc32_batch is not None and (native.CLMUL or total // n < LARGE_BODY):
        out = np.empty(n, np.int32)
        native.crc32_batch(body.buffers()[2] or b"", offsets, out)
        return out
    if total // n <= 1024:
        crcs = np.fromiter(map(crc32, body.to_pylist()), np.uint32, n)
    else:
        mv = memoryview(body.buffers()[2])
        starts = offsets[:-1].tolist()
        ends = offsets[1:].tolist()
        crcs = np.fromiter(map(crc32, map(mv.__getitem__, map(slice, starts, ends))), np.uint32, n)
    return (crcs & 0x7FFFFFFF).astype(np.int32)


def chunk_bounds(n: int, rows: int) -> np.ndarray:
    """Row bounds of the chunks of ``n`` rows: ``rows`` each, after a ramp from ``rows / 8``.

    Nothing overlaps the first chunk's encoding (the write thread waits for it), so it is
    small; each next one doubles until full size. A batch of one full chunk or less stays
    one chunk (written inline, see ``rmqlog.log.commitlog``).
    """
    if n <= rows:
        return np.array([0, n], np.int64)
    sizes = []
    size, total = max(64, rows // 8), 0
    while total < n:
        sizes.append(min(size, n - total))
        total += sizes[-1]
        size = min(rows, 2 * size)
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


class BodyCrcs:
    """The BODYCRC of every row, known chunk by chunk (:meth:`spans`, :meth:`get`).

    ``on_demand``: the C helper's ``pack_records`` computes them as it packs each chunk
    (carry-less multiply available), so nothing is computed here.
    """

    def __init__(self, body: pa.BinaryArray, body_len: np.ndarray) -> None:
        n = len(body)
        self._body = body
        self._futures: list[Future[None]] = []
        rows = max(MIN_CHUNK_ROWS, int(CRC_CHUNK_BYTES * n // max(1, int(body_len.sum()))))
        self.bounds = chunk_bounds(n, rows)
        self.on_demand = native.pack_records is not None and native.CLMUL
        if self.on_demand:
            self.values = np.zeros(0, np.int32)  # not used: pack_records computes them
            return
        self.values = np.zeros(n, np.int32)
        if n < CRC_ASYNC_MIN_ROWS:
            self.values[:] = crc32s(body)
            self.bounds = np.array([0, n], np.int64)
            return
        self._futures = [
            _CRC_POOL.get().submit(self._run, int(a), int(b))
            for a, b in zip(self.bounds[:-1], self.bounds[1:], strict=True)
        ]

    @classmethod
    def computed_in_pack(cls, body: pa.BinaryArray) -> BodyCrcs:
        """The CRCs of a batch whose records were packed whole, CRCs included (one chunk)."""
        self = cls.__new__(cls)
        self._body, self._futures, self.on_demand = body, [], True
        self.bounds = np.array([0, len(body)], np.int64)
        self.values = np.zeros(0, np.int32)
        return self

    def _run(self, a: int, b: int) -> None:
        self.values[a:b] = crc32s(self._body.slice(a, b - a))

    def get(self, a: int, b: int) -> np.ndarray:
        """The CRCs of rows ``[a, b)`` (waited for when the background thread computes them)."""
        assert not self.on_demand, "pack_records computes these"
        for i, f in enumerate(self._futures):
            if self.bounds[i] >= b:
                break
            f.result()
        return self.values[a:b]

    def spans(self, a: int, b: int) -> list[tuple[int, int]]:
        """``[a, b)`` cut at chunk boundaries: write a chunk as soon as its CRCs are ready."""
        inner = self.bounds[(self.bounds > a) & (self.bounds < b)].tolist()
        edges = [a, *inner, b]
        return list(zip(edges[:-1], edges[1:], strict=True))
