"""The body of a batch send, written and read in one module over one layout.

A batch body (``SEND_BATCH_MESSAGE`` 320, and the C++ client's ``SEND_MESSAGE`` with
``batch=1``) is RocketMQ 4.9.8's ``MessageDecoder.encodeMessages``: the messages one after
the other, each

| field | bytes | at |
|---|---|---|
| TOTALSIZE | 4 | 0 |
| MAGICCODE (0; not read) | 4 | 4 |
| BODYCRC (0; not read) | 4 | 8 |
| FLAG | 4 | 12 |
| BODYLENGTH, BODY | 4 + n | 16 |
| PROPERTIESLENGTH (int16), PROPERTIES | 2 + m | 20 + n |

all big-endian, so TOTALSIZE = 22 + n + m. RocketMQ's broker (``CommitLog``'s batch
encoder) reads MAGICCODE and BODYCRC of none: neither is checked here either.
:func:`decode_message_batch` walks it with no Python step per message: the C helper's
``walk_batch`` follows the chain from byte 0 (each message's TOTALSIZE says where the next
starts) while a message's lengths agree (TOTALSIZE = 22 + BODYLENGTH + PROPERTIESLENGTH, all
in range); without the helper, every byte position where a message *could* start is found in
whole-array passes and the chain is followed over those candidates, a Python step per
*break* in it (a candidate inside a body). Bodies and properties are then copied out by
gathers (the batch request's own properties appended in the same gather). A body that does
not end exactly after its last message raises :class:`InvalidMessageError` naming the byte
position and the field.

:func:`encode_message_batch` writes it for a whole batch at once (no Python step per message:
the fixed fields as one (n, 20) numpy array, then each message's four parts joined by Arrow's
``binary_join_element_wise``, whose data buffer is the body); the clients send what it writes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..arguments import long_array_arg, text_arg
from ..errors import InvalidArgumentError, InvalidMessageError, MessageTooLargeError
from ..native import (
    walk_batch as _native_walk_batch,  # the C helper's (None without it: the numpy walk)
)
from .gather import gather_slices, to_binary
from .record import PROPERTY_SEPARATOR
from .wire import bytes_view

#: the layout's fixed parts: TOTALSIZE + MAGICCODE + BODYCRC + FLAG + BODYLENGTH (before the
#: body), and with PROPERTIESLENGTH
BATCH_HEAD = 20
BATCH_FIXED = BATCH_HEAD + 2
#: PROPERTIESLENGTH is a Java short
MAX_PROPERTIES = 32767
_PROPERTY_SEPARATOR = PROPERTY_SEPARATOR.encode()


# ------------------------------------------------------------------------------ the writer
def _large_binary(name: str, arr: object, kind: pa.DataType) -> pa.Array:
    """``arr`` (an Arrow array or chunked array, or a list of ``kind`` values) as large_binary,
    nulls as empty; anything else :class:`InvalidArgumentError` naming ``name``."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    try:
        if isinstance(arr, (list, tuple)):
            arr = pa.array(arr, kind)
        if not isinstance(arr, pa.Array):
            raise TypeError(f"got {type(arr).__name__}")
        return arr.cast(pa.large_binary()).fill_null(b"")
    except (TypeError, ValueError, pa.ArrowException) as exc:
        raise InvalidArgumentError(f"encode_message_batch: {name} must be a column of {kind} values ({exc})") from None


def _fixed(raw: np.ndarray, width: int, n: int) -> pa.Array:
    """``n`` values of ``width`` bytes from a contiguous array, as a large_binary array."""
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(raw)]).cast(pa.large_binary())


def encode_message_batch(
    bodies: pa.Array | pa.ChunkedArray, properties: pa.Array | pa.ChunkedArray, flags: np.ndarray | None = None
) -> bytes:
    """The batch body of ``bodies`` (binary) with ``properties`` (string, already in
    RocketMQ's ``name\\x01value\\x02`` form) and ``flags`` (int32, default 0); nulls count as
    empty. :class:`InvalidArgumentError` when one is not such a column (Arrow, or a list) or
    the three differ in length,
    :class:`MessageTooLargeError` when a message's properties pass 32767 bytes."""
    body = _large_binary("bodies", bodies, pa.binary())
    props = _large_binary("properties", properties, pa.string())
    n = len(body)
    if len(props) != n:
        raise InvalidArgumentError("encode_message_batch: bodies, properties and flags differ in length")
    if flags is not None:
        flags = long_array_arg("encode_message_batch: flags", flags, n)
        if len(flags) and (int(flags.min()) < -(1 << 31) or int(flags.max()) >= 1 << 31):
            raise InvalidArgumentError("encode_message_batch: a flag is outside Java's int")
    if n == 0:
        return b""
    blen = np.asarray(pc.binary_length(body), np.int64)
    plen = np.asarray(pc.binary_length(props), np.int64)
    if int(plen.max()) > MAX_PROPERTIES:
        row = int(np.argmax(plen > MAX_PROPERTIES))
        raise MessageTooLargeError(
            f"message {row}: properties of {int(plen[row])} bytes (at most {MAX_PROPERTIES})",
            row=row,
            field="properties",
        )
    head = np.zeros((n, 5), ">i4")
    head[:, 0] = BATCH_FIXED + blen + plen
    head[:, 3] = 0 if flags is None else flags
    head[:, 4] = blen
    joined = pc.binary_join_element_wise(
        _fixed(head, BATCH_HEAD, n), body, _fixed(plen.astype(">i2"), 2, n), props, pa.scalar(b"", pa.large_binary())
    )
    offsets = np.frombuffer(joined.buffers()[1], np.int64)[joined.offset : joined.offset + n + 1]
    data = joined.buffers()[2]
    return data.slice(int(offsets[0]), int(offsets[-1] - offsets[0])).to_pybytes()


# ------------------------------------------------------------------------------ the reader
def _be(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed ints of ``width`` bytes at positions ``at`` (all in range), int64."""
    rows = buf[at[:, None] + np.arange(width)]
    return np.ascontiguousarray(rows).view(f">i{width}").ravel().astype(np.int64)


def _be32_everywhere(buf: np.ndarray, count: int) -> np.ndarray:
    """The big-endian int32 starting at each of the first ``count`` bytes (``count`` <=
    len - 3), int64: four zero-copy ``>i4`` views of the buffer shifted by 0-3 bytes,
    interleaved (a strided copy each), instead of gathering 4 bytes per position by index."""
    out = np.empty(count, np.int64)
    for k in range(4):
        m = (count - k + 3) // 4  # positions k, k + 4, ... below count
        if m > 0:
            out[k::4] = buf[k : k + 4 * m].view(">i4")
    return out


def _candidates(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions, TOTALSIZE, BODYLENGTH) of every byte position where a message's lengths
    agree: TOTALSIZE fits the body, BODYLENGTH fits TOTALSIZE, PROPERTIESLENGTH is the rest."""
    size = len(buf)
    if size < BATCH_FIXED:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    ints = _be32_everywhere(buf, size - 3)
    pos = np.arange(size - BATCH_FIXED + 1, dtype=np.int64)
    total = ints[: len(pos)]
    ok = (total >= BATCH_FIXED) & (total <= size - pos)
    pos, total = pos[ok], total[ok]
    body_len = ints[pos + 16]
    ok = (body_len >= 0) & (body_len <= total - BATCH_FIXED)
    pos, total, body_len = pos[ok], total[ok], body_len[ok]
    props_len = _be(buf, pos + BATCH_HEAD + body_len, 2)
    ok = props_len == total - BATCH_FIXED - body_len
    return pos[ok], total[ok], body_len[ok]


def problem_at(buf: bytes | memoryview | np.ndarray, pos: int) -> tuple[str, str]:
    """(field, what is wrong) of the batch message that cannot start at byte ``pos``."""
    data = bytes(buf[pos : pos + BATCH_HEAD])
    rest = len(buf) - pos
    if rest < BATCH_FIXED:
        return "TOTALSIZE", f"{rest} bytes left, fewer than a message's {BATCH_FIXED} fixed bytes (truncated)"
    total = int.from_bytes(data[0:4], "big", signed=True)
    if total < BATCH_FIXED or total > rest:
        return "TOTALSIZE", f"TOTALSIZE {total} is not in [{BATCH_FIXED}, {rest}] (the bytes left)"
    body_len = int.from_bytes(data[16:20], "big", signed=True)
    if body_len < 0 or body_len > total - BATCH_FIXED:
        return "BODYLENGTH", f"BODYLENGTH {body_len} does not fit TOTALSIZE {total}"
    at = pos + BATCH_HEAD + body_len
    props_len = int.from_bytes(bytes(buf[at : at + 2]), "big", signed=True)
    return (
        "PROPERTIESLENGTH",
        f"PROPERTIESLENGTH {props_len} is not TOTALSIZE {total} - {BATCH_FIXED} - BODYLENGTH {body_len}",
    )


def _walk(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """(positions, TOTALSIZEs, BODYLENGTHs, FLAGs, end) of the chain of messages from byte 0;
    ``end`` is where it stopped (the body's length when whole). The C helper's
    ``walk_batch`` follows the chain message by message in C (a few ns a message); without
    it, :func:`_walk_numpy` (whole-array passes over every byte position)."""
    if _native_walk_batch is None:
        pos, total, body_len, end = _walk_numpy(buf)
        return pos, total, body_len, _be(buf, pos + 12, 4), end
    room = len(buf) // BATCH_FIXED + 1
    out = np.empty((4, room), np.int64)
    n, end = _native_walk_batch(buf, out[0], out[1], out[2], out[3])
    return out[0, :n], out[1, :n], out[2, :n], out[3, :n], int(end)


def _walk_numpy(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`_walk` without the C helper: every byte position where a message *could* start
    (:func:`_candidates`, whole-array passes), then the chain from byte 0 followed over those
    candidates, a Python step per *break* in it (a candidate inside a body), not per message."""
    cand, total, body_len = _candidates(buf)
    if not len(cand):
        return cand, total, body_len, 0
    nxt = cand + total
    link = np.zeros(len(cand), bool)
    link[:-1] = nxt[:-1] == cand[1:]
    breaks = np.flatnonzero(~link)
    runs: list[np.ndarray] = []
    pos, i = 0, 0
    # follow the chain, a Python step per break (a candidate inside a body), not per message
    while i < len(cand) and cand[i] == pos:
        j = int(breaks[np.searchsorted(breaks, i)])  # the last candidate of this linked run
        runs.append(np.arange(i, j + 1))
        pos = int(nxt[j])
        i = int(np.searchsorted(cand, pos))
    idx = np.concatenate(runs) if runs else np.zeros(0, np.int64)
    return cand[idx], total[idx], body_len[idx], pos


def decode_message_batch(body: bytes | bytearray | memoryview | pa.Buffer, append_properties: str = "") -> pa.Table:
    """The messages of a batch send's body (module docstring) as a table: ``body`` (binary),
    ``flag`` (int32), ``properties`` (string, RocketMQ's ``name\\x01value\\x02`` form, as sent).

    ``append_properties``: the batch request's own properties (its header's ``properties``
    with what the broker adds, such as ``CLUSTER``), appended to every message's as
    RocketMQ's batch encoder does (a ``\\x02`` first when a message's own do not end with one).

    Raises :class:`InvalidMessageError` (``row`` the message's index, ``field`` the field; the
    message names the byte position) for an empty body, a truncated or inconsistent message,
    properties that are not UTF-8; :class:`MessageTooLargeError` when a message's properties
    with ``append_properties`` pass 32767 bytes.
    """
    view = bytes_view("body", body)
    text_arg("append_properties", append_properties, empty=True)
    buf = np.frombuffer(view, np.uint8)
    if not len(buf):
        raise InvalidMessageError("a batch of no message (empty body)", row=None, field="body")
    pos, total, body_len, flag, end = _walk(buf)
    if end != len(buf):
        field, what = problem_at(buf, end)
        raise InvalidMessageError(f"message at byte {end}: {what}", row=len(pos), field=field)
    source = pa.py_buffer(view)
    bodies = to_binary(gather_slices(source, pos + BATCH_HEAD, body_len))
    props_start = pos + BATCH_FIXED + body_len
    props_len = total - BATCH_FIXED - body_len
    if append_properties:
        props = _with_batch_properties(buf, props_start, props_len, append_properties)
    else:
        props = gather_slices(source, props_start, props_len)
    try:
        props_text = props.cast(pa.string())
    except pa.ArrowInvalid:
        # joined to valid UTF-8, a message's properties are valid exactly when they are alone
        row = _first_bad_utf8(gather_slices(source, props_start, props_len))
        raise InvalidMessageError(
            f"message at byte {int(pos[row])}: PROPERTIES are not UTF-8", row=row, field="PROPERTIES"
        ) from None
    if append_properties:
        lengths = np.diff(np.frombuffer(props.buffers()[1], np.int64, count=len(props) + 1))
        _check_properties_size(lengths, pos)
    return pa.table({"body": bodies, "flag": pa.array(flag.astype(np.int32), pa.int32()), "properties": props_text})


def _with_batch_properties(buf: np.ndarray, start: np.ndarray, length: np.ndarray, extra: str) -> pa.LargeBinaryArray:
    """Each message's properties (``length`` bytes at ``start`` in ``buf``) with ``extra``
    appended as RocketMQ's batch encoder appends the request's own: after a ``\\x02`` when
    the message's are not empty and do not end with one. One gather of three slices per
    message (its properties, the separator or nothing, ``extra``) from the body followed by
    ``\\x02`` and ``extra``: no Python step per message, no per-row list."""
    n = len(start)
    extra_b = extra.encode()
    size = len(buf)  # where the \x02 is in the source; extra follows it
    source = pa.py_buffer(buf.tobytes() + _PROPERTY_SEPARATOR + extra_b)
    last = buf[np.maximum(start + length - 1, 0)]
    sep = ((length > 0) & (last != 2)).astype(np.int64)
    starts = np.empty((n, 3), np.int64)
    sizes = np.empty((n, 3), np.int64)
    starts[:, 0], sizes[:, 0] = start, length
    starts[:, 1], sizes[:, 1] = size, sep
    starts[:, 2], sizes[:, 2] = size + 1, len(extra_b)
    joined = gather_slices(source, starts.ravel(), sizes.ravel())
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(length + sep + len(extra_b), out=offsets[1:])
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), joined.buffers()[2]])


def _check_properties_size(lengths: np.ndarray, pos: np.ndarray) -> None:
    """:class:`MessageTooLargeError` for the first message whose properties with the batch's
    own pass 32767 UTF-8 bytes (RocketMQ's short length field)."""
    if len(lengths) and int(lengths.max()) > 32767:
        row = int(np.flatnonzero(lengths > 32767)[0])
        raise MessageTooLargeError(
            f"message at byte {int(pos[row])}: properties with the batch's own are {lengths[row]} bytes, over 32767",
            row=row,
            field="PROPERTIES",
        )


def _first_bad_utf8(props: pa.Array) -> int:
    """The first value that is not UTF-8 (found by halving: a log2 number of validating casts)."""
    lo, hi = 0, len(props)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            props.slice(lo, mid - lo).cast(pa.string())
            lo = mid
        except pa.ArrowInvalid:
            hi = mid
    return lo
