"""Vectorized encoding of a batch of messages (an Arrow table) into commitlog records.

Two steps, split around the append lock:

1. :func:`prepare_batch` (no lock): validate every row, fill defaults, build each record's
   header (numpy) and the pieces of its trailer (topic, properties: Arrow columns, scalars,
   and the UNIQ_KEY items to generate), and the record lengths. Any bad row raises a typed
   error naming the row and field before a byte is written.
2. Under the lock, :meth:`EncodedBatch.fill` sets the fields only the lock can give
   (QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP); the commitlog then writes the records chunk
   by chunk (see :meth:`store.log.commitlog.CommitLog.append_all`). Per chunk, the UNIQ_KEY items are
   generated and either the C helper packs the records into one buffer, computing each body
   CRC on the way (:meth:`EncodedBatch.pack`), or, without it, the records are joined
   (:meth:`EncodedBatch.joined`) or written straight from their pieces
   (:meth:`EncodedBatch.iovecs`, large bodies), with body CRCs from a background thread.
   A batch of one chunk is instead packed whole before the lock (:meth:`EncodedBatch.prepack`)
   and only those three fields are written into it under the lock (:meth:`EncodedBatch.patch`).

The usual small put, a *plain* batch (one topic, bodies only, one write chunk), skips step 1's
general machinery: :func:`_prepare_plain` checks it and one call of the C helper
(``pack_plain``) builds every record, CRCs and UNIQ_KEYs included, byte for byte what the
general path would pack. A put's cost is mostly fixed (Python lines and numpy/Arrow calls,
not bytes); this path cut it from ~280 to ~185 us of CPU for one message.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidMessageError, MessageTooLargeError, QueueIdError
from ..fileio import ProcessLocalPool
from ..hashing import tags_codes
from ..paths import topic_problem
from ..schema import PUT_COLUMNS
from .msgid import UNIQ_PROPERTY_WIDTH, UniqKeyGenerator
from .properties import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    bad_uniq_key,
    join_pairs,
    list_offsets,
    reserved_name_problem,
    single_property,
)
from .record import (
    MAGIC_V1,
    PROPERTIES_MAX_BYTES,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    TRAILER_LENGTH_FIELDS,
    crc32,
    header_dtype,
)

try:  # the optional C helper (setup.py builds it; without it, one call per body)
    from .._native import CLMUL as _CRC_CLMUL
    from .._native import all_same as _all_same
    from .._native import crc32_batch as _crc_batch
    from .._native import longest_value as _longest_value
    from .._native import pack_plain as _pack_plain
    from .._native import pack_records as _pack_records
    from .._native import patch_records as _patch_records
except ImportError:  # pragma: no cover - depends on the build
    _crc_batch = None
    _pack_plain = None
    _longest_value = None
    _all_same = None
    _pack_records = None
    _patch_records = None
    _CRC_CLMUL = False

#: Resolves distinct topics to their number of write queues (creating topics as configured).
QueueCounts = Callable[[list[str]], list[int]]


def _flat(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array; a column of one chunk is used as is (no copy of the bodies)."""
    if isinstance(col, pa.ChunkedArray):
        return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col


def _data_and_offsets(arr: pa.Array, a: int = 0, b: int | None = None) -> tuple[int, np.ndarray]:
    """(address of the data buffer, int64 value offsets of rows ``[a, b)``) of a binary or
    string array."""
    b = len(arr) if b is None else b
    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
        off = np.frombuffer(arr.buffers()[1], np.int64, b - a + 1, (arr.offset + a) * 8)
    else:
        off = np.frombuffer(arr.buffers()[1], np.int32, b - a + 1, (arr.offset + a) * 4).astype(np.int64)
    data = arr.buffers()[2]
    return (data.address if data is not None else 0), off


def _value_lengths(arr: pa.Array) -> np.ndarray:
    """Byte length of each value of a binary/string array (0 for a null), from its offsets."""
    if len(arr) == 0:
        return np.zeros(0, np.int64)
    offsets = _data_and_offsets(arr)[1]
    lengths = offsets[1:] - offsets[:-1]  # np.diff's Python wrapper costs more than the subtraction here
    if arr.null_count:  # Arrow lets a null's offsets span bytes: it has none
        lengths[np.asarray(arr.is_null())] = 0
    return lengths


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _is_stringish(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _as_string(col: pa.Array, field: str) -> pa.Array:
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if pa.types.is_null(col.type):
        return pa.nulls(len(col), pa.string())
    if not _is_stringish(col.type):
        valid = ~np.asarray(col.is_null())
        row = _first(valid) if valid.any() else 0
        raise InvalidMessageError(f"must be a string, got {col.type}", row=row, field=field)
    return col if col.type == pa.string() else col.cast(pa.string())


def _may_hold_separator(col: pa.Array, *, space: bool) -> bool:
    """Cheap screen over the raw value bytes: ``False`` means no value holds a separator."""
    if not (pa.types.is_string(col.type) or pa.types.is_binary(col.type)) or len(col) == 0:
        return True
    data = col.buffers()[2]
    if data is None:
        return False
    offsets = _data_and_offsets(col)[1]
    raw = np.frombuffer(data, np.uint8)[int(offsets[0]) : int(offsets[-1])]
    low = raw < 3  # \x00 too: rare, and the exact check below sorts it out
    return bool(low.any() or (space and (raw == 32).any()))


def _all_equal(col: pa.StringArray) -> bool:
    """Whether every value of a string column without nulls is the same (cheap screen).

    All values as long as the first and every value equal to the next one (one compare of
    the value bytes with themselves shifted by a value): ~3x cheaper than ``pc.equal``
    against the first value, which dominated the encoding of one-topic batches. Straight
    from the Arrow buffers (int32 offsets), with no numpy wrapper functions: every put runs it.
    The C helper's ``all_same`` (a memcmp per row) does it in one call when built.
    """
    n = len(col)
    buffers = col.buffers()
    if _all_same is not None:
        return bool(_all_same(buffers[1], col.offset, n, buffers[2] if buffers[2] is not None else b""))
    offsets = np.frombuffer(buffers[1], np.int32, n + 1, col.offset * 4)
    first = int(offsets[0])
    width = int(offsets[1]) - first
    if int(offsets[n]) - first != n * width or not (offsets[1:] - offsets[:-1] == width).all():
        return False
    if width == 0 or buffers[2] is None:
        return True
    raw = np.frombuffer(buffers[2], np.uint8, n * width, first)
    return bool((raw[width:] == raw[:-width]).all())


def _may_be_empty(col: pa.Array) -> bool:
    """Whether some non-null value of a string column is empty (cheap screen)."""
    empty = _value_lengths(col) == 0
    if col.null_count:
        empty &= ~np.asarray(col.is_null())
    return bool(empty.any())


def _no_separators(col: pa.Array, field: str, parent: np.ndarray | None = None, *, space: bool = False) -> None:
    """Reject values holding the properties separators (\\x01, \\x02) or, for keys, a space."""
    if not _may_hold_separator(col, space=space):
        return
    pattern = "[\\x01\\x02 ]" if space else "[\\x01\\x02]"
    bad = pc.fill_null(pc.match_substring_regex(col, pattern), False)
    if pc.any(bad).as_py():
        i = _first(np.asarray(bad))
        row = int(parent[i]) if parent is not None else i
        what = "a space or a control separator (\\x01, \\x02)" if space else "a control separator (\\x01 or \\x02)"
        raise InvalidMessageError(f"value {col[i].as_py()!r} contains {what}", row=row, field=field)


def _no_duplicate_columns(names: list[str]) -> None:
    """Refuse a table with two columns of one name (which one would be the message's?)."""
    if len(set(names)) != len(names):
        dup = next(name for name in names if names.count(name) > 1)
        raise InvalidMessageError(f"the table has {names.count(dup)} columns of this name", row=None, field=dup)


def _int64_column(col: pa.Array, field: str, error: type[InvalidMessageError] = InvalidMessageError) -> pa.Array:
    """An integer column as int64; a uint64 value over 2**63 - 1 raises ``error`` naming its row."""
    if pa.types.is_uint64(col.type) and len(col):
        over = pc.fill_null(pc.greater(col, pa.scalar(2**63 - 1, pa.uint64())), False)
        if pc.any(over).as_py():
            row = _first(np.asarray(over))
            raise error(f"{col[row].as_py()} does not fit a 64-bit signed integer", row=row, field=field)
    return col.cast(pa.int64())


#: The BORNTIMESTAMP range the store accepts, in ms since the epoch: 1970-01-01T00:00:00.000Z
#: to 9999-12-31T23:59:59.999Z. Every value decodes everywhere a message goes: Arrow's
#: timestamp[us] (the store's read schema), Python's datetime and Spark's TimestampType.
BORN_MS_MIN, BORN_MS_MAX = 0, 253_402_300_799_999
_PER_MS = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}


def _born_ms(col: pa.Array, now_ms: int) -> np.ndarray:
    """BORNTIMESTAMP (ms) per row from a ``bornTimestamp`` column; a null is ``now_ms``.

    A timestamp column (any unit, any time zone: its values are UTC) is truncated to ms; an
    integer column is ms. Raises :class:`InvalidMessageError` naming the first row outside
    [:data:`BORN_MS_MIN`, :data:`BORN_MS_MAX`] (checked in the column's own unit, before any
    conversion could overflow).
    """
    n = len(col)
    if pa.types.is_timestamp(col.type):
        unit, raw = col.type.unit, col.cast(pa.int64())  # the stored integers, no conversion
        per_ms = _PER_MS[unit]
        lo, hi = (BORN_MS_MIN, BORN_MS_MAX // 1000) if per_ms is None else (BORN_MS_MIN * per_ms, BORN_MS_MAX * per_ms + per_ms - 1)
    elif pa.types.is_integer(col.type):
        unit, raw, lo, hi, per_ms = "ms", col, BORN_MS_MIN, BORN_MS_MAX, 1
    else:
        raise InvalidMessageError(f"must be a timestamp or int64 ms, got {col.type}", row=0 if n else None, field="bornTimestamp")
    values = np.asarray(pc.fill_null(raw, 0))  # uint64 stays uint64: compared before any cast
    valid = ~np.asarray(raw.is_null()) if raw.null_count else None
    bad = (values < lo) | (values > min(hi, 2**63 - 1))
    if valid is not None:
        bad &= valid
    if bad.any():
        row = _first(bad)
        raise InvalidMessageError(
            f"{values[row]} {unit} is outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59.999Z "
            f"({BORN_MS_MIN}..{BORN_MS_MAX} ms)", row=row, field="bornTimestamp",
        )
    ms = values.astype(np.int64)
    if per_ms is None:
        ms *= 1000
    elif per_ms > 1:
        ms //= per_ms
    if valid is not None:
        ms[~valid] = now_ms
    return ms


def _check_property_names(keys: pa.Array, vals: pa.Array, parent: np.ndarray, is_uniq: np.ndarray) -> None:
    """Refuse user properties the store or RocketMQ reserves (``RMQLOG_*``, RocketMQ's system
    names, delay/timer names) and a given ``UNIQ_KEY`` that is not a RocketMQ client message
    id; see :func:`store.log.properties.reserved_name_problem`. ``keys``/``vals``: the batch's
    flattened user properties, ``parent`` their rows, ``is_uniq`` which names are UNIQ_KEY."""
    problem = reserved_name_problem(keys)
    if problem is not None:
        i, reason = problem
        raise InvalidMessageError(reason, row=int(parent[i]), field="properties")
    i_bad = bad_uniq_key(vals, is_uniq)
    if i_bad is not None:
        raise InvalidMessageError(
            f"property 'UNIQ_KEY' {vals[i_bad].as_py()!r} is not a RocketMQ client message id (32 or 56 uppercase hex digits)",
            row=int(parent[i_bad]), field="properties",
        )


def _crc32s(body: pa.BinaryArray) -> np.ndarray:
    """BODYCRC of each body: CRC-32 & 0x7FFFFFFF.

    One call of the C helper ``store._native`` for the whole array (no per-body Python
    call, GIL released), when it was built: for every batch when the CPU has carry-less
    multiply (~14 GB/s), else for bodies averaging under :data:`LARGE_BODY` (its table CRC
    runs at ~2.2 GB/s). Otherwise one ISA-L/zlib call per body (:data:`store.log.record.crc32`):
    through Python bytes objects for small bodies, memoryview slices (no copy) for large ones.
    """
    n = len(body)
    if n == 0:
        return np.zeros(0, np.int32)
    offsets = np.frombuffer(body.buffers()[1], np.int32, n + 1, body.offset * 4)
    total = int(offsets[-1] - offsets[0])
    if _crc_batch is not None and (_CRC_CLMUL or total // n < LARGE_BODY):
        out = np.empty(n, np.int32)
        _crc_batch(body.buffers()[2] or b"", offsets, out)
        return out
    if total // n <= 1024:
        crcs = np.fromiter(map(crc32, body.to_pylist()), np.uint32, n)
    else:
        mv = memoryview(body.buffers()[2])
        starts = offsets[:-1].tolist()
        ends = offsets[1:].tolist()
        crcs = np.fromiter(map(crc32, map(mv.__getitem__, map(slice, starts, ends))), np.uint32, n)
    return (crcs & 0x7FFFFFFF).astype(np.int32)


#: Body CRCs are computed chunk by chunk (~:data:`_CRC_CHUNK_BYTES` of bodies each), so the
#: commitlog can write a chunk as soon as its CRCs are known. With the C helper's
#: carry-less-multiply CRC (~14 GB/s, GIL released) a chunk's CRCs are computed on demand by
#: the appending thread, right before the chunk is written: its bodies are then still in the
#: CPU cache when the write copies them, and the write of the previous chunk runs meanwhile
#: (see :meth:`store.log.commitlog.CommitLog.append_all`). Otherwise (table CRC or one call per
#: body) one background thread computes them ahead, while the caller encodes the rest.
_CRC_POOL = ProcessLocalPool("rmq-crc")
_CRC_ASYNC_MIN_ROWS = 4096
_CRC_CHUNK_BYTES = 2 << 20
#: Rows of a chunk at least, whatever the body sizes.
_MIN_CHUNK_ROWS = 256
_SEP2 = pa.scalar(b"\x02", pa.binary())
_EMPTY_BIN = pa.scalar(b"", pa.binary())
#: Average body size from which records are written straight from their pieces (header,
#: body, trailer) with one ``pwritev`` per ~340 records, instead of joined first: for large
#: bodies the join's extra copy of every byte costs more than the scatter-gather entries.
LARGE_BODY = 1024


def _chunk_bounds(n: int, rows: int) -> np.ndarray:
    """Row bounds of the chunks of ``n`` rows: ``rows`` each, after a ramp from ``rows / 8``.

    Nothing overlaps the first chunk's encoding (the write thread waits for it), so it is
    small; each next one doubles until full size. A batch of one full chunk or less stays
    one chunk (written inline, see ``store.log.commitlog``).
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
        rows = max(_MIN_CHUNK_ROWS, int(_CRC_CHUNK_BYTES * n // max(1, int(body_len.sum()))))
        self.bounds = _chunk_bounds(n, rows)
        self.on_demand = _pack_records is not None and _CRC_CLMUL
        if self.on_demand:
            self.values = np.zeros(0, np.int32)  # not used: pack_records computes them
            return
        self.values = np.zeros(n, np.int32)
        if n < _CRC_ASYNC_MIN_ROWS:
            self.values[:] = _crc32s(body)
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
        self.values[a:b] = _crc32s(self._body.slice(a, b - a))

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


@dataclass(frozen=True)
class LazyUniqKeys:
    """The generated ``UNIQ_KEY`` property items of a batch, made chunk by chunk when written.

    ``given`` marks the rows whose own properties carry a ``UNIQ_KEY`` (they get none).
    Items are generated as the chunks are packed or joined: under the append lock, or before
    it for a put packed ahead (:meth:`EncodedBatch.prepack`); the generator is thread-safe.
    """

    generator: UniqKeyGenerator
    given: np.ndarray | None

    def lengths(self, n: int) -> np.ndarray:
        out = np.full(n, UNIQ_PROPERTY_WIDTH, np.int64)
        if self.given is not None:
            out[self.given] = 0
        return out

    def make(self, a: int, b: int) -> pa.BinaryArray:
        items = self.generator.generate_property(b - a)
        if self.given is not None and self.given[a:b].any():
            items = pc.if_else(pa.array(self.given[a:b]), _EMPTY_BIN, items)
        return items


Piece: TypeAlias = pa.Array | pa.Scalar | LazyUniqKeys


@dataclass
class HeaderColumns:
    """The fixed-width header of a batch's records as columns; :meth:`rows` lays rows out.

    QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP are set under the append lock
    (:meth:`EncodedBatch.fill`); BODYCRC by whoever computes the CRCs.
    """

    dtype: np.dtype  # record.header_dtype for the batch's host layout
    lengths: np.ndarray  # TOTALSIZE
    queue_id: np.ndarray
    flag: np.ndarray
    born: np.ndarray  # BORNTIMESTAMP, ms
    body_len: np.ndarray
    sys_flag: int
    born_host: bytes
    store_host: bytes
    queue_offsets: np.ndarray | None = None
    physical_offsets: np.ndarray | None = None
    store_timestamp: int = 0

    def rows(self, a: int, b: int) -> np.ndarray:
        """The headers of records ``[a, b)`` (BODYCRC 0), ``record.header_dtype`` rows."""
        assert self.queue_offsets is not None and self.physical_offsets is not None, "fill() first"
        dt = self.dtype
        h = np.zeros(b - a, dt)
        h["totalSize"] = self.lengths[a:b]
        h["magic"] = MAGIC_V1
        h["queueId"] = self.queue_id[a:b]
        h["flag"] = self.flag[a:b]
        h["queueOffset"] = self.queue_offsets[a:b]
        h["physicalOffset"] = self.physical_offsets[a:b]
        h["sysFlag"] = self.sys_flag
        h["bornTimestamp"] = self.born[a:b]
        h["bornHost"] = np.frombuffer(self.born_host, dt["bornHost"])[0]
        h["storeTimestamp"] = self.store_timestamp
        h["storeHost"] = np.frombuffer(self.store_host, dt["storeHost"])[0]
        h["bodyLength"] = self.body_len[a:b]
        return h


def _chunk_pieces(pieces: list[Piece], a: int, b: int) -> list[pa.Array | pa.Scalar]:
    """The join pieces of rows ``[a, b)``."""
    return [p if isinstance(p, pa.Scalar) else p.make(a, b) if isinstance(p, LazyUniqKeys) else p.slice(a, b - a)
            for p in pieces]


@functools.lru_cache(maxsize=1024)
def _binary_scalar(value: bytes) -> pa.Scalar:
    """``pa.scalar(value, pa.binary())``, made once per value: a scalar costs ~10 us in a put
    (the topic's prefix, the properties length), and these repeat from put to put."""
    return pa.scalar(value, pa.binary())


def _merge_scalars(pieces: list[Piece]) -> list[Piece]:
    """Adjacent scalar join pieces merged into one (fewer pieces, faster join)."""
    out: list[Piece] = []
    for p in pieces:
        if isinstance(p, pa.Scalar) and out and isinstance(out[-1], pa.Scalar):
            out[-1] = _binary_scalar(out[-1].as_py() + p.as_py())
        else:
            out.append(p)
    return out


@dataclass
class EncodedBatch:
    """A validated batch, encoded but for the fields assigned under the append lock.

    Record ``i`` is its header (``header.rows``, :func:`store.log.record.header_dtype`), ``body[i]``
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
        pieces = _chunk_pieces(self.trailer, a, b)
        if all(isinstance(p, pa.Scalar) for p in pieces):  # the join of scalars is a scalar
            pieces.append(pa.array([b""] * m, pa.binary()))
        return pc.binary_join_element_wise(*pieces, _EMPTY_BIN)

    def joined(self, a: int, b: int) -> pa.Buffer:
        """The bytes of records ``[a, b)``, one after another (one join: each byte copied once)."""
        h = self._header(a, b)
        m, width = b - a, h.dtype.itemsize
        hdr = pa.BinaryArray.from_buffers(
            pa.binary(), m, [None, pa.py_buffer(np.arange(0, width * (m + 1), width, dtype=np.int32)), pa.py_buffer(h)],
        )
        trailer = _chunk_pieces(self.trailer, a, b)
        joined = pc.binary_join_element_wise(hdr, self.body.slice(a, m), *trailer, _EMPTY_BIN)
        start = int(_data_and_offsets(joined, 0, 0)[1][0])
        return joined.buffers()[2].slice(start, int(self.lengths[a:b].sum()))

    @property
    def packable(self) -> bool:
        """Whether :meth:`pack` is available (the C helper was built)."""
        return _pack_records is not None

    def pack(self, a: int, b: int, out: np.ndarray) -> None:
        """Records ``[a, b)`` back to back into ``out`` (exactly their size), by the C helper.

        With the carry-less-multiply CRC, each body's CRC is computed right before the body
        is copied (one pass over memory for both); otherwise the background CRCs are used.
        """
        assert _pack_records is not None
        on_demand = self.crcs.on_demand
        header = self.header.rows(a, b) if on_demand else self._header(a, b)
        # the trailer's pieces go to the C helper as they are (no joined column first): a
        # scalar as its bytes, an array as its data buffer and the chunk's offsets
        pieces: list[tuple[object, np.ndarray | None]] = []
        for p in _chunk_pieces(self.trailer, a, b):
            if isinstance(p, pa.Scalar):
                pieces.append((p.as_buffer() or b"", None))
            else:
                if p.null_count:  # the encoder makes none; a null would be an absent property
                    p = pc.fill_null(p, _EMPTY_BIN)
                data = p.buffers()[2]
                pieces.append((data if data is not None else b"", _data_and_offsets(p)[1]))
        body_data = self.body.buffers()[2]
        _pack_records(
            header, header.dtype.itemsize, on_demand,
            body_data if body_data is not None else b"", _data_and_offsets(self.body, a, b)[1],
            pieces, out,
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
        assert _patch_records is not None  # built with pack_records, which prepack needs
        # one C call (numpy's fancy indexing of the three fields cost ~20 us more a put)
        _patch_records(
            self.packed, self.packed_starts,
            (fields["queueOffset"][1], fields["physicalOffset"][1], fields["storeTimestamp"][1]),
            (np.ascontiguousarray(queue_offsets, np.int64), np.ascontiguousarray(physical_offsets, np.int64),
             int64_filled(self.n, store_ts)),
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
        for j, (addr, off) in ((1, _data_and_offsets(self.body, a, b)), (2, _data_and_offsets(trailer))):
            iov[:, j, 0] = addr + off[:-1].astype(np.uint64)
            iov[:, j, 1] = np.diff(off).astype(np.uint64)
        return iov.reshape(-1, 2), (header, trailer)


def prepare_batch(
    table: pa.Table | pa.RecordBatch,
    *,
    queue_counts: QueueCounts,
    max_message_size: int,
    max_record_size: int,
    store_host: bytes,
    born_host: bytes,
    uniq_keys: UniqKeyGenerator,
    round_robin: Callable[[str, int, int], int],
    last_row_property: tuple[str, str] | None = None,
    plain: bool = True,
) -> EncodedBatch:
    """Validate and encode ``table``; raises :class:`store.errors.InvalidMessageError` subclasses.

    ``max_record_size`` is the largest record a segment can take (segment size - 8).
    ``round_robin(topic, queues, n)`` returns the first queue for ``n`` rows without queueId.
    ``last_row_property`` (name, value) is added to the properties of the last row only (the
    store's idempotence marker; the caller validated it). ``plain``: a plain batch may be
    packed whole now by :func:`_prepare_plain` (its copy of the bodies then lives until the
    append; ``put_batches`` of many tables says no, to keep a sink task's memory flat).
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise InvalidMessageError(f"put_batch takes a pyarrow Table or RecordBatch, not {type(table).__name__}", row=None, field="*")
    if plain and last_row_property is None:
        packed = _prepare_plain(table, queue_counts, max_message_size, max_record_size, store_host, born_host,
                               uniq_keys, round_robin)
        if packed is not None:
            return packed
    _no_duplicate_columns(table.column_names)
    for name in table.column_names:
        if name not in PUT_COLUMNS:
            raise InvalidMessageError(f"unknown column; allowed: {', '.join(PUT_COLUMNS)}", row=None, field=name)
    for name in ("topic", "body"):
        if name not in table.column_names:
            raise InvalidMessageError("required column is missing", row=None, field=name)
    cols = {name: _flat(table.column(name)) for name in table.column_names}
    n = table.num_rows

    # --- topic: validate the distinct values only (topics are few)
    topic = _as_string(cols["topic"], "topic")
    if topic.null_count:
        from ..errors import InvalidTopicError

        raise InvalidTopicError("topic is null", row=_first(np.asarray(topic.is_null())), field="topic")
    if n and _all_equal(topic):  # the usual case: one topic
        topics: list[str] = [topic[0].as_py()]
        topic_index = np.zeros(n, np.int64)
    else:
        enc = pc.dictionary_encode(topic)
        topics = enc.dictionary.to_pylist()
        topic_index = np.asarray(enc.indices, dtype=np.int64)
    for i, t in enumerate(topics):
        problem = topic_problem(t)
        if problem is not None:
            from ..errors import InvalidTopicError

            raise InvalidTopicError(problem, row=_first(topic_index == i), field="topic")

    # --- body
    body = cols["body"]
    if pa.types.is_string(body.type) or pa.types.is_large_string(body.type) or pa.types.is_fixed_size_binary(body.type):
        body = body.cast(pa.binary()) if not pa.types.is_large_string(body.type) else body.cast(pa.large_binary())
    if pa.types.is_large_binary(body.type):
        body = body.cast(pa.binary())
    if not pa.types.is_binary(body.type):
        raise InvalidMessageError(f"must be binary or string, got {body.type}", row=0 if n else None, field="body")
    if body.null_count:
        raise InvalidMessageError("body is null (an empty body is valid, a missing one is not)", row=_first(np.asarray(body.is_null())), field="body")
    body_len = _value_lengths(body)
    if n and body_len.max() > max_message_size:
        row = _first(body_len > max_message_size)
        raise MessageTooLargeError(f"body is {body_len[row]} bytes, over max_message_size {max_message_size}", row=row, field="body")

    large = n > 0 and int(body_len.sum()) >= LARGE_BODY * n
    crcs = BodyCrcs(body, body_len)  # in the background, overlapping the Arrow kernels below

    # --- queueId
    counts = np.asarray(queue_counts(topics) if topics else [], dtype=np.int64)
    if (counts < 0).any():  # a topic that does not exist (auto-creation off): name its first row
        from ..errors import InvalidTopicError

        i = int(np.flatnonzero(counts < 0)[0])
        raise InvalidTopicError(f"topic {topics[i]!r} does not exist and auto-creation is off", row=_first(topic_index == i), field="topic")
    if (counts == 0).any():  # writeQueueNums 0 in topics.json: a topic closed to writes
        from ..errors import InvalidTopicError

        i = int(np.flatnonzero(counts == 0)[0])
        raise InvalidTopicError(f"topic {topics[i]!r} has no write queues (writeQueueNums 0)", row=_first(topic_index == i), field="topic")
    queue_id = np.full(n, -1, np.int64)
    if "queueId" in cols:
        q = cols["queueId"]
        if not (pa.types.is_integer(q.type) or pa.types.is_null(q.type)):
            raise InvalidMessageError(f"must be an integer, got {q.type}", row=0 if n else None, field="queueId")
        if not pa.types.is_null(q.type):
            qv = np.asarray(pc.fill_null(_int64_column(q, "queueId", QueueIdError), -1))
            given = ~np.asarray(q.is_null())
            if (qv[given] < 0).any():
                row = _first(given & (qv < 0))
                raise QueueIdError(f"queue id {qv[row]} is negative", row=row, field="queueId")
            queue_id = np.where(given, qv, -1)
    limit = counts[topic_index] if n else np.zeros(0, np.int64)
    over = queue_id >= limit
    if over.any():
        row = _first(over)
        raise QueueIdError(f"queue id {queue_id[row]} is not below {topics[topic_index[row]]!r}'s {limit[row]} queues", row=row, field="queueId")
    missing = queue_id < 0
    cycle: tuple[int, int] | None = None
    if len(topics) == 1 and n and missing.all():  # the default: one topic, no queue ids
        c = int(counts[0])
        cycle = (round_robin(topics[0], c, n), c)
        queue_id = _round_robin_ids(*cycle, n)
    elif missing.any():  # round robin per topic, continuing where this process left off
        for i, t in enumerate(topics):
            rows = np.flatnonzero(missing & (topic_index == i))
            if len(rows):
                first = round_robin(t, int(counts[i]), len(rows))
                queue_id[rows] = _round_robin_ids(first, int(counts[i]), len(rows))

    # --- properties: the user's map, then KEYS, TAGS, UNIQ_KEY
    parts: list[pa.Array | LazyUniqKeys | tuple[pa.Scalar, pa.Array, pa.Scalar]] = []
    has_uniq = np.zeros(n, bool)
    user_has_tags = user_has_keys = False
    tags_col: pa.Array | None = None
    if "properties" in cols and not pa.types.is_null(cols["properties"].type):
        pm = cols["properties"]
        if not pa.types.is_map(pm.type) or not (_is_stringish(pm.type.key_type) and _is_stringish(pm.type.item_type)):
            raise InvalidMessageError(f"must be map<string,string>, got {pm.type}", row=0 if n else None, field="properties")
        offsets = list_offsets(pm)
        lens = np.diff(offsets)
        lens[np.asarray(pm.is_null())] = 0
        keys = pm.keys.cast(pa.string())
        vals = pm.items.cast(pa.string())
        base = int(np.asarray(pm.offsets)[0])
        keys = keys.slice(base, int(offsets[-1]))
        vals = vals.slice(base, int(offsets[-1]))
        parent = np.repeat(np.arange(n), np.diff(offsets))
        if vals.null_count:
            i = _first(np.asarray(vals.is_null()))
            raise InvalidMessageError(f"property {keys[i].as_py()!r} has a null value", row=int(parent[i]), field="properties")
        empty = np.asarray(pc.equal(pc.binary_length(keys), 0)) if len(keys) else np.zeros(0, bool)
        if empty.any():
            raise InvalidMessageError("a property name is empty", row=int(parent[_first(empty)]), field="properties")
        blank = np.asarray(pc.equal(pc.binary_length(vals), 0)) if len(vals) else np.zeros(0, bool)
        if blank.any():  # RocketMQ's client refuses them too, and its decoder drops them
            i = _first(blank)
            raise InvalidMessageError(f"property {keys[i].as_py()!r} has an empty value", row=int(parent[i]), field="properties")
        _no_separators(keys, "properties", parent)
        _no_separators(vals, "properties", parent)
        if pm.null_count:  # null maps contribute nothing
            valid_rows = ~np.asarray(pm.is_null())
            keep = valid_rows[parent]
            keys, vals, parent = keys.filter(pa.array(keep)), vals.filter(pa.array(keep)), parent[keep]
            lens = np.where(valid_rows, lens, 0)
            offsets = np.concatenate([[0], np.cumsum(lens)])
        if len(keys):
            is_uniq = np.asarray(pc.equal(keys, PROPERTY_UNIQ_KEY))
            _check_property_names(keys, vals, parent, is_uniq)
            has_uniq[parent[is_uniq]] = True
            user_has_tags = bool(pc.any(pc.equal(keys, PROPERTY_TAGS)).as_py())
            user_has_keys = bool(pc.any(pc.equal(keys, PROPERTY_KEYS)).as_py())
        parts.append(join_pairs(keys, vals, offsets))
    if "keys" in cols and not pa.types.is_null(cols["keys"].type):
        kc = cols["keys"]
        if _is_stringish(kc.type) or pa.types.is_dictionary(kc.type):  # one space-separated string
            ks = _as_string(kc, "keys")
            _no_separators(ks, "keys")
            keys_value = pc.if_else(pc.equal(pc.binary_length(ks), 0), pa.scalar(None, pa.string()), ks)
        elif (pa.types.is_list(kc.type) or pa.types.is_large_list(kc.type)) and (
            _is_stringish(kc.type.value_type) or pa.types.is_null(kc.type.value_type)
        ):
            offsets = list_offsets(kc)
            flat = kc.values.slice(int(np.asarray(kc.offsets)[0]), int(offsets[-1]))
            flat = pa.nulls(len(flat), pa.string()) if pa.types.is_null(flat.type) else flat.cast(pa.string())
            parent = np.repeat(np.arange(n), np.diff(offsets))
            if flat.null_count:
                raise InvalidMessageError("a key is null", row=int(parent[_first(np.asarray(flat.is_null()))]), field="keys")
            empty = np.asarray(pc.equal(pc.binary_length(flat), 0)) if len(flat) else np.zeros(0, bool)
            if empty.any():
                raise InvalidMessageError("a key is empty", row=int(parent[_first(empty)]), field="keys")
            _no_separators(flat, "keys", parent, space=True)
            lists = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), flat)
            joined = pc.binary_join(lists, " ")
            keys_value = pc.if_else(pc.equal(pc.binary_length(joined), 0), pa.scalar(None, pa.string()), joined)
            if kc.null_count:
                keys_value = pc.if_else(kc.is_null(), pa.scalar(None, pa.string()), keys_value)
        else:
            raise InvalidMessageError(f"must be list<string> (or a space-separated string), got {kc.type}", row=0 if n else None, field="keys")
        if user_has_keys and keys_value.null_count < n:
            raise InvalidMessageError("KEYS given both as the keys column and in properties", row=_first(~np.asarray(keys_value.is_null())), field="keys")
        parts.append(single_property(PROPERTY_KEYS, keys_value))
    if "tags" in cols:
        tags = _as_string(cols["tags"], "tags")
        _no_separators(tags, "tags")
        if user_has_tags and tags.null_count < n:
            raise InvalidMessageError("TAGS given both as the tags column and in properties", row=_first(~np.asarray(tags.is_null())), field="tags")
        if n and _may_be_empty(tags):  # an empty tag is no tag (Java's decoder drops it)
            tags = pc.if_else(pc.equal(pc.binary_length(tags), 0), pa.scalar(None, pa.string()), tags)
        tags_col = tags
        if tags.null_count:
            parts.append(single_property(PROPERTY_TAGS, tags))
        else:  # 'TAGS\x01' + tag + '\x02' as three join pieces: no intermediate column
            parts.append((_binary_scalar(PROPERTY_TAGS.encode() + b"\x01"), tags.view(pa.binary()), _SEP2))
    # 'UNIQ_KEY\x01<32 hex>\x02' items are made chunk by chunk as the records are written
    # (overlapping the writes; their length is fixed, so the record lengths are known now)
    parts.append(LazyUniqKeys(uniq_keys, has_uniq if has_uniq.any() else None))
    if last_row_property is not None and n:
        # empty on every row but the last: offsets all 0 except the final one
        piece = (last_row_property[0] + "\x01" + last_row_property[1] + "\x02").encode()
        offs = np.zeros(n + 1, np.int32)
        offs[-1] = len(piece)
        parts.append(pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offs), pa.py_buffer(piece)]))
    pieces: list[pa.Array | pa.Scalar | LazyUniqKeys] = []
    props_len = np.zeros(n, np.int64)
    for part in parts:
        for p in part if isinstance(part, tuple) else (part,):
            if isinstance(p, pa.Scalar):
                props_len += len(p.as_py())
            elif isinstance(p, LazyUniqKeys):
                props_len += p.lengths(n)
            else:
                p = p if p.type == pa.binary() else p.cast(pa.binary())
                props_len += _value_lengths(p)
            pieces.append(p)
    if n and props_len.max() > PROPERTIES_MAX_BYTES:
        row = _first(props_len > PROPERTIES_MAX_BYTES)
        raise MessageTooLargeError(f"properties are {props_len[row]} bytes, over {PROPERTIES_MAX_BYTES}", row=row, field="properties")

    # --- flag, bornTimestamp
    flag = np.zeros(n, np.int64)
    if "flag" in cols and not pa.types.is_null(cols["flag"].type):
        f = cols["flag"]
        if not pa.types.is_integer(f.type):
            raise InvalidMessageError(f"must be an integer, got {f.type}", row=0 if n else None, field="flag")
        flag = np.asarray(pc.fill_null(_int64_column(f, "flag"), 0))
        bad = (flag < -(1 << 31)) | (flag >= (1 << 31))
        if bad.any():
            raise InvalidMessageError("flag does not fit in 32 bits", row=_first(bad), field="flag")
    now_ms = int(time.time() * 1000)
    born = np.full(n, now_ms, np.int64)
    if "bornTimestamp" in cols and not pa.types.is_null(cols["bornTimestamp"].type):
        born = _born_ms(cols["bornTimestamp"], now_ms)

    # --- lengths and the trailer (topic length + topic + properties length + properties)
    born_v6, store_v6 = len(born_host) == 20, len(store_host) == 20
    dt = header_dtype(born_v6, store_v6)
    topic_bytes = [t.encode() for t in topics]
    topic_len = np.array([len(t) for t in topic_bytes], np.int64)[topic_index] if n else np.zeros(0, np.int64)
    lengths = dt.itemsize + body_len + TRAILER_LENGTH_FIELDS + topic_len + props_len
    if n and lengths.max() > max_record_size:
        row = _first(lengths > max_record_size)
        raise MessageTooLargeError(f"record of {lengths[row]} bytes does not fit a commitlog segment", row=row, field="body")
    # a piece equal on every row is passed to the join as a scalar (cheaper than a column)
    prefixes = [bytes([len(t)]) + t for t in topic_bytes]
    topic_prefix: pa.Array | pa.Scalar
    if len(prefixes) == 1:
        topic_prefix = _binary_scalar(prefixes[0])
    else:
        topic_prefix = pa.array(prefixes, pa.binary()).take(pa.array(topic_index))
    plen_arr: pa.Array | pa.Scalar
    if n and (props_len == props_len[0]).all():
        plen_arr = _binary_scalar(int(props_len[0]).to_bytes(2, "big"))
    else:
        plen = props_len.astype(">u2")
        plen_arr = pa.BinaryArray.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(np.arange(0, 2 * (n + 1), 2, dtype=np.int32)), pa.py_buffer(plen)]
        )

    # --- the trailer of each record: its pieces, joined chunk by chunk as they are written
    trailer_pieces = _merge_scalars([topic_prefix, plen_arr, *pieces])

    # --- header: its fields now, its rows chunk by chunk as they are written (in the CPU
    # cache then, and overlapping the previous chunk's write)
    header = HeaderColumns(
        dtype=dt, lengths=lengths, queue_id=queue_id, flag=flag, born=born, body_len=body_len,
        sys_flag=_sys_flag(born_host, store_host),
        born_host=born_host, store_host=store_host,
    )
    return EncodedBatch(
        n=n, topics=topics, topic_index=topic_index, queue_id=queue_id.astype(np.int32), header=header,
        body=body, trailer=trailer_pieces, lengths=lengths, crcs=crcs, large_bodies=large,
        tags=tags_col, tags_from_properties=user_has_tags, round_robin=cycle,
    )


def _sys_flag(born_host: bytes, store_host: bytes) -> int:
    """SYSFLAG's host bits: IPv6 (20 raw bytes: address and port) for either host."""
    return (SYSFLAG_BORNHOST_V6 if len(born_host) == 20 else 0) | (SYSFLAG_STOREHOST_V6 if len(store_host) == 20 else 0)


#: The per-message end of a generated UNIQ_KEY item: the sequence's 12 hex digits and \x02.
_UNIQ_TAIL = 13
_PLAIN_COLUMNS = frozenset(("topic", "body"))


@functools.lru_cache(maxsize=8)
def _plain_template(born_host: bytes, store_host: bytes) -> tuple[np.dtype, bytes]:
    """(header dtype, one header row with the fields every plain record shares: MAGICCODE,
    SYSFLAG, BORNHOST, STOREHOST; the rest zero)."""
    born_v6, store_v6 = len(born_host) == 20, len(store_host) == 20
    dt = header_dtype(born_v6, store_v6)
    h = np.zeros(1, dt)
    h["magic"] = MAGIC_V1
    h["sysFlag"] = _sys_flag(born_host, store_host)
    h["bornHost"] = np.frombuffer(born_host, dt["bornHost"])[0]
    h["storeHost"] = np.frombuffer(store_host, dt["storeHost"])[0]
    fields = dt.fields
    assert fields is not None  # the C helper writes these fields at fixed offsets
    assert (fields["totalSize"][1], fields["bodyCRC"][1], fields["queueId"][1], fields["bornTimestamp"][1],
            fields["bodyLength"][1]) == (0, 8, 12, 40, dt.itemsize - 4)
    return dt, h.tobytes()


@functools.lru_cache(maxsize=1024)
def _plain_trailer_head(topic: str, uniq_head: bytes) -> bytes:
    """TOPICLEN, TOPIC, PROPERTIESLENGTH (just the generated UNIQ_KEY) and the fixed part of
    the UNIQ_KEY item: a plain record's trailer up to the id's 12 per-message hex digits."""
    assert len(uniq_head) + _UNIQ_TAIL == UNIQ_PROPERTY_WIDTH
    t = topic.encode()
    return bytes([len(t)]) + t + UNIQ_PROPERTY_WIDTH.to_bytes(2, "big") + uniq_head


def _prepare_plain(
    table: pa.Table | pa.RecordBatch, queue_counts: QueueCounts, max_message_size: int, max_record_size: int,
    store_host: bytes, born_host: bytes, uniq_keys: UniqKeyGenerator, round_robin: Callable[[str, int, int], int],
) -> EncodedBatch | None:
    """The usual small put, encoded and packed by one call of the C helper; ``None`` when the
    batch is not one (the general path then encodes it, and names any bad row).

    A plain batch: columns ``topic`` (string, one value, a valid name) and ``body`` (binary),
    neither with nulls, of one chunk each, and maybe an integer ``queueId`` of nulls only; one
    write chunk (at most ``_MIN_CHUNK_ROWS`` rows, or bodies of at most ``_CRC_CHUNK_BYTES``:
    larger batches gain from the general path's pipelining); the topic exists or may be
    created. Its records are what the general path makes of it,
    byte for byte but for the generated ids and the timestamps: queue ids round robin,
    flag 0, BORNTIMESTAMP now, properties just ``UNIQ_KEY``. They are packed now, before the
    append lock, like :meth:`EncodedBatch.prepack`; the lock patches three fields in.
    """
    if _pack_plain is None or not _CRC_CLMUL or not isinstance(table, pa.Table | pa.RecordBatch):
        return None
    names = table.column_names
    if len(names) == 3 and "queueId" in names and len(set(names)) == 3:  # all null (as a Spark sink sends it): round robin
        qid = table.column("queueId")
        if qid.null_count != table.num_rows or not (pa.types.is_integer(qid.type) or pa.types.is_null(qid.type)):
            return None
        names = [name for name in names if name != "queueId"]
    if len(names) != 2 or set(names) != _PLAIN_COLUMNS:
        return None
    topic, body = table.column("topic"), table.column("body")
    if isinstance(topic, pa.ChunkedArray):
        if topic.num_chunks != 1 or body.num_chunks != 1:
            return None
        topic, body = topic.chunk(0), body.chunk(0)
    n = len(topic)
    if not n or topic.type != pa.string() or body.type != pa.binary() or topic.null_count or body.null_count:
        return None
    buffers = body.buffers()
    data = buffers[2] if buffers[2] is not None else b""
    if n > _MIN_CHUNK_ROWS and len(data) > _CRC_CHUNK_BYTES:  # several chunks (BodyCrcs' rule)
        return None
    if not _all_equal(topic):
        return None
    name = topic[0].as_py()
    if topic_problem(name) is not None:
        return None
    dt, template = _plain_template(born_host, store_host)
    head = _plain_trailer_head(name, uniq_keys.property_head)
    fixed = dt.itemsize + len(head) + _UNIQ_TAIL  # a record's bytes beyond its body
    max_body = min(max_message_size, max_record_size - fixed)
    assert _longest_value is not None  # built with pack_plain
    if _longest_value(buffers[1], body.offset, n, len(data)) > max_body:
        return None  # before the round robin moves on
    count = queue_counts([name])[0]
    if count <= 0:
        return None
    first = round_robin(name, count, n)
    lengths, starts, queue_id = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int32)
    now_ms = int(time.time() * 1000)
    packed = _pack_plain(
        template, now_ms, data, buffers[1], body.offset, n, head, uniq_keys.reserve(n), first, count, max_body,
        lengths, starts, queue_id,
    )
    assert packed is not None, "longest_value checked the bodies"
    header = HeaderColumns(
        dtype=dt, lengths=lengths, queue_id=queue_id, flag=np.zeros(n, np.int64), born=int64_filled(n, now_ms),
        body_len=lengths - fixed, sys_flag=_sys_flag(born_host, store_host), born_host=born_host, store_host=store_host,
    )
    return EncodedBatch(
        n=n, topics=[name], topic_index=np.zeros(n, np.int64), queue_id=queue_id, header=header, body=body,
        trailer=[], lengths=lengths, crcs=BodyCrcs.computed_in_pack(body),
        large_bodies=len(packed) - n * fixed >= LARGE_BODY * n,
        round_robin=(first, count), packed=np.frombuffer(packed, np.uint8), packed_starts=starts,
    )


def int64_filled(n: int, value: int) -> np.ndarray:
    """``np.full(n, value, np.int64)`` without its Python wrapper (per put, in the hot path)."""
    out = np.empty(n, np.int64)
    out.fill(value)
    return out


def _round_robin_ids(first: int, count: int, n: int) -> np.ndarray:
    """Queue ids ``first, first+1, ...`` modulo ``count`` for ``n`` rows."""
    return repeat_cycle((first + np.arange(count, dtype=np.int64)) % count, n)


def repeat_cycle(values: np.ndarray, n: int) -> np.ndarray:
    """``values[i % len(values)]`` for ``i < n``: whole copies of ``values`` one after another.

    ``np.repeat`` of the row copies whole rows: ~5x cheaper than ``%`` over the rows, and
    far cheaper than ``np.tile`` (Python overhead) or a broadcast with an inner dimension of
    a few queues.
    """
    return values[None, :].repeat(-(-n // len(values)), axis=0).ravel()[:n]  # the method: no numpy wrapper
