"""SEND_BATCH_MESSAGE's body (``MessageDecoder.encodeMessages``, RocketMQ 4.9.8): the messages
one after the other, each::

    int32 totalSize     20 + bodyLen + 2 + propsLen (itself included)
    int32 magic         0
    int32 bodyCRC       0
    int32 flag
    int32 bodyLen, byte[bodyLen] body
    int16 propsLen, byte[propsLen] properties (``name\\x01value\\x02``...)

Built for the whole batch at once with numpy (the fixed fields as one (n, 20) array, bodies
and properties moved by index arithmetic): no Python loop per message.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .slices import binary_parts, spans

FIXED = 20  # totalSize, magic, bodyCRC, flag, bodyLen
MAX_PROPS = 32767  # a Java short


def encode_messages(bodies: pa.Array, properties: pa.Array, flags: np.ndarray | None = None) -> bytes:
    """The batch body of ``bodies`` (binary) with ``properties`` (string, already in
    RocketMQ's form) and ``flags`` (int32, default 0). ``ValueError`` if a message's
    properties pass 32767 bytes."""
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
