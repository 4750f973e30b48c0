"""320's body encoder (``rmqnet.client.encode_messages``, Arrow's element-wise join) pinned
against the numpy reference (``encode_messages_numpy``) on random batches: the same bytes,
nulls as empty, sliced and chunked inputs, the same refusal."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import rmqlog
from rmqnet.client.batch import MAX_PROPS, encode_messages, encode_messages_numpy


def test_the_same_bytes_as_the_numpy_reference_on_random_batches() -> None:
    rng = np.random.default_rng(30)
    for _ in range(300):
        n = int(rng.integers(0, 50))
        bodies = pa.array([None if rng.random() < 0.1 else rng.bytes(int(rng.integers(0, 400))) for _ in range(n)],
                          pa.binary())
        props = pa.array([None if rng.random() < 0.1 else "k\x01" + "v" * int(rng.integers(0, 80)) + "\x02"
                          for _ in range(n)], pa.string())
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
