"""SEND_BATCH_MESSAGE's body (``MessageDecoder.encodeMessages``, RocketMQ 4.9.8): the messages
one after the other, each::

    int32 totalSize     20 + bodyLen + 2 + propsLen (itself included)
    int32 magic         0
    int32 bodyCRC       0
    int32 flag
    int32 bodyLen, byte[bodyLen] body
    int16 propsLen, byte[propsLen] properties (``name\\x01value\\x02``...)

Built for the whole batch at once (no Python loop per message): the fixed fields as one
(n, 20) numpy array, then each message's four parts joined by Arrow's
``binary_join_element_wise`` (a C++ copy of each part), whose data buffer is the body.
:func:`encode_messages_numpy`, the earlier encoder (every byte moved by numpy index
arithmetic, ~10x slower), is kept as the reference the tests compare it with.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .slices import binary_parts, spans

FIXED = 20  # totalSize, magic, bodyCRC, flag, bodyLen
MAX_PROPS = 32767  # a Java short


def _large_binary(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr.cast(pa.large_binary()).fill_null(b"")


def _fixed(raw: np.ndarray, width: int, n: int) -> pa.Array:
    """``n`` values of ``width`` bytes from a contiguous array, as a large_binary array."""
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(raw)]).cast(pa.large_binary())


def encode_messages(bodies: pa.Array, properties: pa.Array, flags: np.ndarray | None = None) -> bytes:
    """The batch body of ``bodies`` (binary) with ``properties`` (string, already in
    RocketMQ's form) and ``flags`` (int32, default 0); nulls count as empty. ``ValueError``
    if a message's properties pass 32767 bytes. The same bytes as :func:`encode_messages_numpy`."""
    n = len(bodies)
    if len(properties) != n or (flags is not None and len(flags) != n):
        raise ValueError("encode_messages: bodies, properties and flags differ in length")
    if n == 0:
        return b""
    body = _large_binary(bodies)
    props = _large_binary(properties)
    blen = np.asarray(pc.binary_length(body), np.int64)
    plen = np.asarray(pc.binary_length(props), np.int64)
    if int(plen.max()) > MAX_PROPS:
        row = int(np.argmax(plen > MAX_PROPS))
        raise ValueError(f"message {row}: properties of {int(plen[row])} bytes (at most {MAX_PROPS})")
    head = np.zeros((n, 5), ">i4")
    head[:, 0] = FIXED + blen + 2 + plen
    head[:, 3] = 0 if flags is None else flags
    head[:, 4] = blen
    joined = pc.binary_join_element_wise(_fixed(head, FIXED, n), body, _fixed(plen.astype(">i2"), 2, n), props,
                                         pa.scalar(b"", pa.large_binary()))
    offsets = np.frombuffer(joined.buffers()[1], np.int64)[joined.offset: joined.offset + n + 1]
    data = joined.buffers()[2]
    return data.slice(int(offsets[0]), int(offsets[-1] - offsets[0])).to_pybytes()


def encode_messages_numpy(bodies: pa.Array, properties: pa.Array, flags: np.ndarray | None = None) -> bytes:
    """:func:`encode_messages` by numpy index arithmetic (the reference of the tests)."""
    n = len(bodies)
    if len(properties) != n or (flags is not None and len(flags) != n):
        raise ValueError("encode_messages: bodies, properties and flags differ in length")
    bdata, bstart, blen = binary_parts(bodies)
    pdata, pstart, plen = binary_parts(properties)
    if n and int(plen.max()) > MAX_PROPS:
        row = int(np.argmax(plen > MAX_PROPS))
        raise ValueError(f"message {row}: properties of {int(plen[row])} bytes (at most {MAX_PROPS})")
    total = FIXED + blen + 2 + plen
    at = np.cumsum(total) - total
    out = np.zeros(int(total.sum()), np.uint8)
    head = np.zeros((n, 5), ">i4")
    head[:, 0] = total
    head[:, 3] = 0 if flags is None else flags
    head[:, 4] = blen
    out[spans(at, np.full(n, FIXED))] = head.view(np.uint8).reshape(-1)
    out[spans(at + FIXED, blen)] = bdata[spans(bstart, blen)]
    out[spans(at + FIXED + blen, np.full(n, 2))] = plen.astype(">i2").view(np.uint8)
    out[spans(at + FIXED + blen + 2, plen)] = pdata[spans(pstart, plen)]
    return out.tobytes()
