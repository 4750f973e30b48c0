"""The batch body decoder's fast path: ``decode_message_batch``
walked by the C helper's ``walk_batch`` and its properties joined to the batch's own in one
gather, pinned to the numpy twin (the whole-array candidate walk, used without the helper)
and to a plain per-message reference written from RocketMQ's ``MessageDecoder``: the same
table for random batches, the same typed error (row, field, byte position, text) for damaged
ones."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest

import rmqlog
import rmqlog.log.batch_body as wire
import rmqlog.native

FIXED = 22


def message(body: bytes, flag: int, props: bytes) -> bytes:
    total = 20 + len(body) + 2 + len(props)
    return struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body + struct.pack(">h", len(props)) + props


def reference(data: bytes, extra: str = "") -> list[dict] | tuple[str, int, str, int]:
    """The rows of a batch body, one message at a time (the Java layout); or
    ("invalid" | "utf8" | "large", row, field, byte position) of the first problem."""
    rows, pos = [], 0
    while pos < len(data):
        rest = len(data) - pos
        if rest < FIXED:
            return ("invalid", len(rows), "TOTALSIZE", pos)
        total, _, _, flag, body_len = struct.unpack_from(">iiiii", data, pos)
        if not FIXED <= total <= rest:
            return ("invalid", len(rows), "TOTALSIZE", pos)
        if not 0 <= body_len <= total - FIXED:
            return ("invalid", len(rows), "BODYLENGTH", pos)
        (props_len,) = struct.unpack_from(">h", data, pos + 20 + body_len)
        if props_len != total - FIXED - body_len:
            return ("invalid", len(rows), "PROPERTIESLENGTH", pos)
        body = data[pos + 20 : pos + 20 + body_len]
        props = data[pos + FIXED + body_len : pos + total]
        rows.append({"body": body, "flag": flag, "props": props, "pos": pos})
        pos += total
    if not rows:
        return ("invalid", 0, "body", 0)
    for i, r in enumerate(rows):
        try:
            r["props"] = r["props"].decode()
        except UnicodeDecodeError:
            return ("utf8", i, "PROPERTIES", r["pos"])
    if extra:
        for i, r in enumerate(rows):
            p = r["props"]
            r["props"] = p + ("\x02" if p and not p.endswith("\x02") else "") + extra
            if len(r["props"].encode()) > 32767:
                return ("large", i, "PROPERTIES", r["pos"])
    return [{"body": r["body"], "flag": r["flag"], "properties": r["props"]} for r in rows]


def need_walk_batch() -> None:
    """Skip without the C helper (tests/conftest.py refuses that where a compiler exists,
    unless RMQ_ALLOW_NO_NATIVE=1); fail on a helper built from an older _native.c."""
    if not rmqlog.native.AVAILABLE:
        pytest.skip(f"rmqlog._native is not built here: {rmqlog.native.LOAD_ERROR}")
    if rmqlog.native.walk_batch is None:
        pytest.fail("rmqlog._native has no walk_batch: rebuild it (make .venv/.installed)")


@pytest.fixture(params=["native", "numpy"])
def path(request, monkeypatch):
    """Each test runs on the C helper's walk and on the numpy twin."""
    if request.param == "native":
        need_walk_batch()
    else:
        monkeypatch.setattr(wire, "_native_walk_batch", None)
    return request.param


def outcome(data: bytes | memoryview | bytearray | pa.Buffer, extra: str = "") -> object:
    try:
        t = rmqlog.decode_message_batch(data, extra)
    except rmqlog.MessageTooLargeError as exc:  # (an InvalidMessageError: first)
        return ("large", exc.row, exc.field, str(exc))
    except rmqlog.InvalidMessageError as exc:
        kind = "utf8" if "UTF-8" in str(exc) else "invalid"
        return (kind, exc.row if exc.row is not None else 0, exc.field, str(exc))
    assert t.schema == pa.schema([("body", pa.binary()), ("flag", pa.int32()), ("properties", pa.string())])
    return t.to_pylist()


def agrees(got: object, want: object) -> bool:
    if isinstance(want, list):
        return got == want
    assert isinstance(got, tuple), got
    kind, row, field, pos = want
    where = "" if field == "body" else f"at byte {pos}"
    return got[:3] == (kind, row, field) and where in got[3]


def random_batch(rng: np.random.Generator, n: int) -> bytes:
    parts = []
    for i in range(n):
        body = rng.bytes(int(rng.integers(0, 120)))
        choice = int(rng.integers(0, 4))
        props = [
            b"",
            f"KEYS\x01k{i}\x02".encode(),
            f"UNIQ_KEY\x01{i:032X}".encode(),
            "TAGS\x01\u00e9t\u00e9\x02".encode(),
        ][choice]
        parts.append(message(body, int(rng.integers(-(2**31), 2**31)), props))
    return b"".join(parts)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("extra", ["", "CLUSTER\x01DefaultCluster\x02", "\u00fc\x01v"])
def test_random_batches_match_the_reference(path, seed, extra):
    rng = np.random.default_rng(seed)
    data = random_batch(rng, int(rng.integers(1, 400)))
    want = reference(data, extra)
    assert isinstance(want, list)
    assert outcome(data, extra) == want


def test_bodies_holding_message_like_bytes_do_not_derail_the_walk(path):
    # a body that is itself a whole batch message: only the chain from byte 0 counts
    inner = message(b"xy", 7, b"a\x01b\x02")
    data = message(inner * 3, 1, b"") + message(inner, 2, b"K\x01v") + message(b"", 3, b"")
    assert outcome(data) == reference(data)
    assert [r["body"] for r in outcome(data)] == [inner * 3, inner, b""]


@pytest.mark.parametrize("seed", range(40))
def test_damaged_batches_fail_alike(path, seed, monkeypatch):
    rng = np.random.default_rng(1000 + seed)
    data = bytearray(random_batch(rng, int(rng.integers(1, 30))))
    kind = seed % 4
    if kind == 0:  # cut short
        data = data[: int(rng.integers(0, len(data)))]
    elif kind == 1:  # a byte of a length field changed
        at = int(rng.integers(0, len(data)))
        data[at] = int(rng.integers(0, 256))
    elif kind == 2:  # garbage after the last message
        data += rng.bytes(int(rng.integers(1, 40)))
    else:  # properties that are not UTF-8 (a lone continuation byte)
        data += message(b"z", 0, b"\x80bad")
    for extra in ("", "CLUSTER\x01c\x02"):
        got, want = outcome(bytes(data), extra), reference(bytes(data), extra)
        assert agrees(got, want), (got, want)
        # the other path gives exactly the same outcome, message text included
        other = None if wire._native_walk_batch is not None else rmqlog.native.walk_batch
        with monkeypatch.context() as m:
            m.setattr(wire, "_native_walk_batch", other)
            assert outcome(bytes(data), extra) == got


def test_the_batch_properties_push_a_message_over_32767_bytes(path):
    data = message(b"a", 0, b"k\x01v\x02") + message(b"b", 0, b"x" * 32760)
    got = outcome(data, "CLUSTER\x01c\x02")
    assert got[:3] == ("large", 1, "PROPERTIES") and "at byte 27" in got[3] and "32771 bytes" in got[3]
    assert outcome(data) == reference(data)  # alone they fit


def test_bad_utf8_is_found_before_the_size_and_named_by_row(path):
    data = message(b"a", 0, b"ok") + message(b"b", 0, b"\xc3") + message(b"c", 0, b"y" * 32760)
    assert outcome(data, "CLUSTER\x01c\x02")[:3] == ("utf8", 1, "PROPERTIES")
    # a lead byte at the end of one message's properties is not completed by the batch's own
    assert outcome(message(b"a", 0, b"\xc3"), "\xa9")[:3] == ("utf8", 0, "PROPERTIES")


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview, pa.py_buffer])
def test_any_byte_form_and_a_view_into_a_bigger_buffer(path, wrap):
    data = message(b"hello", 3, b"KEYS\x01k\x02") + message(b"", -1, b"")
    framed = b"\x00" * 13 + data + b"\xff" * 5
    view = memoryview(framed)[13 : 13 + len(data)]
    want = reference(data, "C\x01d\x02")
    assert outcome(wrap(data), "C\x01d\x02") == want
    assert outcome(view, "C\x01d\x02") == want


def test_empty_and_tiny_bodies(path):
    assert outcome(b"")[:3] == ("invalid", 0, "body")
    for n in range(1, FIXED + 1):
        got = outcome(b"\x00" * n)
        assert got[:3] == ("invalid", 0, "TOTALSIZE")
    one = message(b"", 0, b"")
    assert outcome(one) == [{"body": b"", "flag": 0, "properties": ""}]


def test_walk_batch_refuses_outputs_too_small():
    need_walk_batch()
    data = message(b"a", 0, b"") * 3
    small = np.empty(2, np.int64)
    with pytest.raises(ValueError, match="walk_batch"):
        rmqlog.native.walk_batch(data, small, small.copy(), small.copy(), small.copy())
    room = len(data) // FIXED + 1
    out = [np.empty(room, np.int64) for _ in range(4)]
    assert rmqlog.native.walk_batch(data, *out) == (3, len(data))
    assert out[0][:3].tolist() == [0, 23, 46] and out[2][:3].tolist() == [1, 1, 1]
