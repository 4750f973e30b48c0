"""The encoded batch: records ready to be written but for the fields the append lock gives,
and the ways they are turned into bytes (the packing decisions).

- with the C helper, :meth:`EncodedBatch.pack` packs a chunk of records into one buffer
  (header rows, bodies with their CRCs computed on the way, trailer pieces), one call;
- a batch of one chunk is packed whole before the append lock (:meth:`EncodedBatch.prepack`)
  and only QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP are written into it under the lock
  (:meth:`EncodedBatch.patch`);
- without the helper, records are joined into one buffer (:meth:`EncodedBatch.joined`), or,
  for large bodies (:data:`rmqlog.log.encode.crc.LARGE_BODY`), written straight from their
  pieces with ``pwritev`` (:meth:`EncodedBatch.iovecs`).

Which one runs is decided per chunk by :meth:`rmqlog.log.commitlog.CommitLog.append_all`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...hashing import tags_codes
from ..msgid import fixed_strings
from . import native
from .arrays import data_and_offsets, int64_filled
from .crc import BodyCrcs
from .header import HeaderColumns
from .trailer import LazyUniqKeys, Piece, chunk_pieces

_EMPTY_BIN = pa.scalar(b"", pa.binary())


@dataclass
class EncodedBatch:
    """A validated batch, encoded but for the fields assigned under the append lock.

    Record ``i`` is its header (``header.rows``, :func:`rmqlog.log.record.header_dtype`), ``body[i]``
    and the trailer (TOPICLEN, TOPIC, PROPERTIESLENGTH, PROPERTIES), the join of ``trailer``'s
    pieces at row ``i`` (scalars are the same on every row).
    """

    n: int
    topics: list[str]  # distinct topics of the batch
    topic_index: np.ndarray  # row -> index in ``topics``
    queue_id: np.ndarray  # int32 per row
    header: HeaderColumns  # the header's fields; rows are built chunk by chunk when written
    body: pa.BinaryArray
    trailer: list[Piece]  # join pieces, joined chunk by chunk when written
    lengths: np.ndarray  # TOTALSIZE per row, int64
    crcs: BodyCrcs
    large_bodies: bool  # average body >= LARGE_BODY: written with iovecs
    tags: pa.Array | None = None  # the tags column (strings, null = no tag), if any
    tags_from_properties: bool = False  # TAGS came in the user's properties map
    #: (first queue id, queue count) when every row is of one topic and its queue ids are
    #: the round-robin cycle ``(first + row) % count``: queue offsets need no grouping then
    round_robin: tuple[int, int] | None = None
    #: the records packed before the append lock (:meth:`prepack`), their lock-given fields
    #: still to be patched; ``packed_starts[i]`` is where record ``i`` starts in ``packed``
    packed: np.ndarray | None = None
    packed_starts: np.ndarray | None = None
    #: KEYS per row (null: none) and whether the index keys come only from the batch's own
    #: columns and generated ids (:class:`rmqlog.log.encode.trailer.Properties`): then the
    #: dispatch after the append indexes the batch without reading it back (:meth:`index_ids`)
    keys: pa.Array | None = None
    index_from_batch: bool = False
    #: rows name light message queues (:mod:`rmqlog.access.lmq`): the dispatch after the
    #: append reads the records back (their LMQ units come from their properties)
    lmq: bool = False

    def index_ids(self) -> pa.StringArray | None:
        """The UNIQ_KEY id (32 hex) of every row once the batch is written, from what the
        encoding made (a plain batch's packed records end with theirs); ``None`` when the
        batch cannot say (it is not ``index_from_batch``, or an id was made another way)."""
        if not self.index_from_batch:
            return None
        if not self.trailer and self.packed is not None and self.packed_starts is not None:
            # a plain record's properties are its UNIQ_KEY item alone: the id is its last 33 bytes but one
            at = (self.packed_starts + self.lengths - 33)[:, None] + np.arange(32)
            return fixed_strings(np.ascontiguousarray(self.packed[at]))
        lazy = next((p for p in self.trailer if isinstance(p, LazyUniqKeys)), None)
        return lazy.ids(self.n) if lazy is not None else None

    @functools.cached_property
    def tags_codes(self) -> np.ndarray | None:
        """Consume-queue tagsCode per row (computed when a dispatch asks for it); ``None``
        when TAGS came from the user's properties (the dispatcher reads the records then)."""
        if self.tags_from_properties:
            return None
        return tags_codes(self.tags) if self.tags is not None else np.zeros(self.n, np.int64)

    def fill(self, queue_offsets: np.ndarray, physical_offsets: np.ndarray, store_ts: int) -> None:
        """Set the fields only the append lock can give."""
        self.header.queue_offsets = queue_offsets
        self.header.physical_offsets = physical_offsets
        self.header.store_timestamp = store_ts

    def spans(self, a: int, b: int) -> list[tuple[int, int]]:
        """Rows ``[a, b)`` cut where more body CRCs become ready (write in this order)."""
        return self.crcs.spans(a, b)

    @property
    def chunks(self) -> int:
        """How many chunks the whole batch is written in (``len(spans(0, n))``)."""
        return len(self.crcs.bounds) - 1

    def _header(self, a: int, b: int) -> np.ndarray:
        """The headers of rows ``[a, b)`` with their body CRCs (from the background threads)."""
        h = self.header.rows(a, b)
        h["bodyCRC"] = self.crcs.get(a, b)
        return h

    def _trailer(self, a: int, b: int) -> pa.Array:
        m = b - a
        pieces = chunk_pieces(self.trailer, a, b)
        if all(isinstance(p, pa.Scalar) for p in pieces):  # the join of scalars is a scalar
            pieces.append(pa.array([b""] * m, pa.binary()))
        return pc.binary_join_element_wise(*pieces, _EMPTY_BIN)

    def joined(self, a: int, b: int) -> pa.Buffer:
        """The bytes of records ``[a, b)``, one after another (one join: each byte copied once)."""
        h = self._header(a, b)
        m, width = b - a, h.dtype.itemsize
        hdr = pa.BinaryArray.from_buffers(
            pa.binary(),
            m,
            [None, pa.py_buffer(np.arange(0, width * (m + 1), width, dtype=np.int32)), pa.py_buffer(h)],
        )
        trailer = chunk_pieces(self.trailer, a, b)
        joined = pc.binary_join_element_wise(hdr, self.body.slice(a, m), *trailer, _EMPTY_BIN)
        start = int(data_and_offsets(joined, 0, 0)[1][0])
        return joined.buffers()[2].slice(start, int(self.lengths[a:b].sum()))

    @property
    def packable(self) -> bool:
        """Whether :meth:`pack` is available (the C helper was built)."""
        return native.pack_records is not None

    def pack(self, a: int, b: int, out: np.ndarray) -> None:
        """Records ``[a, b)`` back to back into ``out`` (exactly their size), by the C helper.

        With the carry-less-multiply CRC, each body's CRC is computed right before the body
        is copied (one pass over memory for both); otherwise the background CRCs are used.
        """
        assert native.pack_records is not None
        on_demand = self.crcs.on_demand
        header = self.header.rows(a, b) if on_demand else self._header(a, b)
        # the trailer's pieces go to the C helper as they are (no joined column first): a
        # scalar as its bytes, an array as its data buffer and the chunk's offsets
        pieces: list[tuple[object, np.ndarray | None]] = []
        for p in chunk_pieces(self.trailer, a, b):
            if isinstance(p, pa.Scalar):
                pieces.append((p.as_buffer() or b"", None))
            else:
                if p.null_count:  # the encoder makes none; a null would be an absent property
                    p = pc.fill_null(p, _EMPTY_BIN)
                data = p.buffers()[2]
                pieces.append((data if data is not None else b"", data_and_offsets(p)[1]))
        body_data = self.body.buffers()[2]
        native.pack_records(
            header,
            header.dtype.itemsize,
            on_demand,
            body_data if body_data is not None else b"",
            data_and_offsets(self.body, a, b)[1],
            pieces,
            out,
        )

    def prepack(self) -> None:
        """Pack every record now, before the append lock; :meth:`patch` completes them under it.

        For a batch of one chunk (a small put): the CRCs, the copy of the bodies and the
        trailers, the UNIQ_KEYs, everything but QUEUEOFFSET, PHYSICALOFFSET and
        STORETIMESTAMP, no longer hold the lock that every writer process waits for. The bytes
        of a record do not depend on where it lands, but for those three fields.
        """
        assert self.packable and self.packed is None
        starts = np.zeros(self.n, np.int64)
        self.lengths[:-1].cumsum(out=starts[1:])
        self.fill(np.zeros(self.n, np.int64), starts, 0)  # placeholders, patched later
        out = np.empty(int(self.lengths.sum()), np.uint8)
        self.pack(0, self.n, out)
        self.packed, self.packed_starts = out, starts

    def patch(self, queue_offsets: np.ndarray, physical_offsets: np.ndarray, store_ts: int) -> None:
        """Write the fields only the append lock can give into the :meth:`prepack`-ed records."""
        assert self.packed is not None and self.packed_starts is not None
        self.fill(queue_offsets, physical_offsets, store_ts)
        fields = self.header.dtype.fields
        assert fields is not None
        assert native.patch_records is not None  # built with pack_records, which prepack needs
        # one C call (numpy's fancy indexing of the three fields cost ~20 us more a put)
        native.patch_records(
            self.packed,
            self.packed_starts,
            (fields["queueOffset"][1], fields["physicalOffset"][1], fields["storeTimestamp"][1]),
            (
                np.ascontiguousarray(queue_offsets, np.int64),
                np.ascontiguousarray(physical_offsets, np.int64),
                int64_filled(self.n, store_ts),
            ),
        )

    def iovecs(self, a: int, b: int) -> tuple[np.ndarray, tuple[np.ndarray, pa.Array]]:
        """``struct iovec`` entries (address, length) of records ``[a, b)``: header, body, trailer.

        The addresses point into this batch's body and into the returned headers and trailer
        array (the join of the chunk's trailer pieces): keep them alive until written.
        """
        header = self._header(a, b)
        trailer = self._trailer(a, b)
        m = b - a
        width = header.dtype.itemsize
        iov = np.empty((m, 3, 2), np.uint64)
        iov[:, 0, 0] = header.ctypes.data + (np.arange(m, dtype=np.uint64) * width)
        iov[:, 0, 1] = width
        for j, (addr, off) in ((1, data_and_offsets(self.body, a, b)), (2, data_and_offsets(trailer))):
            iov[:, j, 0] = addr + off[:-1].astype(np.uint64)
            iov[:, j, 1] = np.diff(off).astype(np.uint64)
        return iov.reshape(-1, 2), (header, trailer)
