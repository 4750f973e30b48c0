"""320's body encoder (``rmqlog.encode_message_batch``, Arrow's element-wise join, which
``rmqnet.client.encode_messages`` is) pinned against a numpy reference (below: every byte
moved by index) on random batches: the same bytes, nulls as empty, sliced and chunked inputs,
the same refusal; and read back by the store's decoder beside it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import rmqlog
from rmqnet.client import encode_messages

MAX_PROPS = 32767  # PROPERTIESLENGTH, a Java short


def spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices of every byte of the slices ``[starts[i], starts[i] + lengths[i])``, in order."""
    lengths = lengths.astype(np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    out_starts = np.cumsum(lengths) - lengths
    return np.repeat(starts.astype(np.int64) - out_starts, lengths) + np.arange(total, dtype=np.int64)


def binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A binary or string array's ``(data uint8, starts, lengths)`` (nulls count as empty)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.large_binary())
        off_type: type = np.int64
    else:
        arr = arr.cast(pa.binary())
        off_type = np.int32
    arr = arr.fill_null(b"")
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], off_type)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return data, offsets[:-1], np.diff(offsets)


def encode_messages_numpy(bodies: pa.Array, properties: pa.Array, flags: np.ndarray | None = None) -> bytes:
    """The batch body by numpy index arithmetic, every byte moved by index (the reference)."""
    n = len(bodies)
    if len(properties) != n or (flags is not None and len(flags) != n):
        raise ValueError("encode_messages: bodies, properties and flags differ in length")
    bdata, bstart, blen = binary_parts(bodies)
    pdata, pstart, plen = binary_parts(properties)
    if n and int(plen.max()) > MAX_PROPS:
        row = int(np.argmax(plen > MAX_PROPS))
        raise ValueError(f"message {row}: properties of {int(plen[row])} bytes (at most {MAX_PROPS})")
    total = 20 + blen + 2 + plen
    at = np.cumsum(total) - total
    out = np.zeros(int(total.sum()), np.uint8)
    head = np.zeros((n, 5), ">i4")
    head[:, 0] = total
    head[:, 3] = 0 if flags is None else flags
    head[:, 4] = blen
    out[spans(at, np.full(n, 20))] = head.view(np.uint8).reshape(-1)
    out[spans(at + 20, blen)] = bdata[spans(bstart, blen)]
    out[spans(at + 20 + blen, np.full(n, 2))] = plen.astype(">i2").view(np.uint8)
    out[spans(at + 20 + blen + 2, plen)] = pdata[spans(pstart, plen)]
    return out.tobytes()


def test_the_same_bytes_as_the_numpy_reference_on_random_batches() -> None:
    rng = np.random.default_rng(30)
    for _ in range(300):
        n = int(rng.integers(0, 50))
        bodies = pa.array(
            [None if rng.random() < 0.1 else rng.bytes(int(rng.integers(0, 400))) for _ in range(n)], pa.binary()
        )
        props = pa.array(
            [None if rng.random() < 0.1 else "k\x01" + "v" * int(rng.integers(0, 80)) + "\x02" for _ in range(n)],
            pa.string(),
        )
        flags = rng.integers(-(2**31), 2**31, n).astype(np.int32) if rng.random() < 0.5 else None
        if n > 4 and rng.random() < 0.5:  # slices of larger arrays (offsets not at 0)
            bodies, props, flags = bodies.slice(3), props.slice(3), None if flags is None else flags[3:]
        got = encode_messages(bodies, props, flags)
        assert got == encode_messages_numpy(bodies, props, flags)
        if len(bodies):  # and the store's batch decoder reads it back
            back = rmqlog.decode_message_batch(got)
            assert back["body"].to_pylist() == [b or b"" for b in bodies.to_pylist()]


def test_chunked_and_large_inputs_and_the_properties_cap() -> None:
    bodies = pa.chunked_array([pa.array([b"a", b"bc"]), pa.array([b"d"])])
    props = pa.array(["x\x011\x02"] * 3, pa.large_string())
    assert encode_messages(bodies, props) == encode_messages_numpy(bodies, props)
    assert encode_messages(pa.array([], pa.binary()), pa.array([], pa.string())) == b""
    for encode in (encode_messages, encode_messages_numpy):
        with pytest.raises(ValueError, match="message 1: properties of 32768 bytes"):
            encode(pa.array([b"a", b"b"]), pa.array(["", "p" * (MAX_PROPS + 1)]))
        with pytest.raises(ValueError, match="differ in length"):
            encode(pa.array([b"a"]), pa.array(["", ""]))


@pytest.mark.parametrize(
    "args, says",
    [
        ((None, None), "bodies must be a column of binary values"),
        (([b"a"], None), "properties must be a column of string values"),
        (([b"a"], [1]), "properties must be a column of string values"),
        (([b"a", b"b"], ["x"]), "differ in length"),
        (([b"a"], ["x"], ["q"]), "flags must be a 1-D array of integers"),
        (([b"a"], ["x"], [1 << 40]), "a flag is outside Java's int"),
    ],
)
def test_arguments_that_are_not_columns_are_refused_typed(args: tuple[object, ...], says: str) -> None:
    """Found by the API's argument fuzzing: ``None`` or a tuple of them raised TypeError and
    AttributeError from inside the encoder."""
    with pytest.raises(rmqlog.InvalidArgumentError, match=says):
        rmqlog.encode_message_batch(*args)  # type: ignore[arg-type]
    assert rmqlog.encode_message_batch([None], (None,)) == rmqlog.encode_message_batch([b""], [""])  # nulls: empty
