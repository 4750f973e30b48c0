"""Decode fast paths give the same table as the general path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import rmqlog
from rmqlog.log.decode import message_table, read_columns


def test_expected_topic_fast_path_and_mismatch_fallback(tmp_path: Path) -> None:
    with rmqlog.MessageStore.open(tmp_path) as s:
        res = s.put_batch(pa.table({"topic": ["Ab", "Ab", "Abc", "Ab"], "body": [b"1", b"2", b"3", b"4"]}))
        seg = s.commitlog.segments.for_offset(0)
        assert seg is not None
        pos = np.asarray(res["commitLogOffset"], np.int64)
        general = message_table(read_columns(seg.buffer(), 0, pos))
        for expected in ("Ab", "Abc", "A"):  # right for some rows only, or for none
            fast = message_table(read_columns(seg.buffer(), 0, pos, topic=expected))
            assert fast.equals(general)
        only_ab = pos[[0, 1, 3]]
        assert message_table(read_columns(seg.buffer(), 0, only_ab, topic="Ab")).equals(
            message_table(read_columns(seg.buffer(), 0, only_ab))
        )
        assert message_table(read_columns(seg.buffer(), 0, only_ab, topic="Ab"))["topic"].to_pylist() == ["Ab"] * 3


def test_gather_with_and_without_the_c_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    import rmqlog.log.gather as g

    rng = np.random.default_rng(3)
    src = pa.py_buffer(rng.bytes(10_000))
    starts = np.sort(rng.choice(9_000, 300, replace=False)).astype(np.int64)
    lengths = np.minimum(np.diff(np.append(starts, 9_000)), rng.integers(0, 40, 300)).astype(np.int64)
    expect = [src.to_pybytes()[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]
    assert g.gather_slices(src, starts, lengths).to_pylist() == expect
    monkeypatch.setattr(g, "_native_gather", None)
    assert g.gather_slices(src, starts, lengths).to_pylist() == expect


def test_c_gather_rejects_slices_outside_the_buffer() -> None:
    import rmqlog.log.gather as g

    if g._native_gather is None:
        pytest.skip("rmqlog._native was not built here")
    out = np.empty(5, np.uint8)
    with pytest.raises(ValueError):
        g._native_gather(b"abc", np.array([1], np.int64), np.array([5], np.int64), out)


# ----------------------------------------------------------------------------- not UTF-8
# Java clients always write UTF-8; other clients (or a damaged record) may not. RocketMQ's
# broker decodes text with `new String(bytes, UTF_8)` (U+FFFD per malformed sequence), so a
# store holding such bytes must still open, rebuild its state and read.


def _foreign_commitlog(root: Path, segment_size: int) -> list[int]:
    """A commitlog written "by another tool": record 1 has a property value that is not
    UTF-8 and carries a writer marker; record 2's topic is not UTF-8. Returns the offsets."""
    import refcodec  # the repository root is on sys.path (conftest)

    specs = [
        ("T", {"A": "b"}, 0),
        ("T", {"K": "VALUEX", "RMQLOG_WRITER": "5 w1"}, 1),
        ("TX", {"A": "c"}, 0),
        ("T", {"A": "d"}, 2),
    ]
    data, offsets = b"", []
    for i, (topic, props, qoff) in enumerate(specs):
        rec = refcodec.encode_record(
            topic=topic,
            body=b"body%d" % i,
            queue_id=0,
            queue_offset=qoff,
            physical_offset=len(data),
            properties=props,
            store_timestamp=1_000 + i,
        )
        rec = rec.replace(b"VALUEX", b"VAL\xff\xfeX").replace(b"\x02TX", b"\x02T\xff")  # same lengths
        offsets.append(len(data))
        data += rec
    seg = bytearray(segment_size)
    seg[: len(data)] = data
    (root / "commitlog").mkdir(parents=True)
    (root / "commitlog" / f"{0:020d}").write_bytes(bytes(seg))
    return offsets


def test_store_with_non_utf8_bytes_opens_rebuilds_and_reads(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "s"
    offsets = _foreign_commitlog(root, 1 << 20)
    with rmqlog.MessageStore.open(root, rmqlog.StoreConfig(mapped_file_size_commit_log=1 << 20)) as s:
        # the append state was rebuilt from the log: the marker inside the bad record counts
        state = s.append_state()
        assert state.writers == {"w1": 5} and state.queues["T/0"] == 3
        assert s.recovery.redispatched == 4 and s.dispatch() == 0  # dispatched at open
        # the record whose topic cannot name a queue directory gets no unit (else dispatching
        # would stop at it for good) and is reported; the records after it are dispatched
        assert "cannot name a consume queue" in caplog.text
        assert [p.name for p in (root / "consumequeue").iterdir()] == ["T"]
        got = s.get_messages("g", "T", 0, 0)
        assert got.messages.column("body").to_pylist() == [b"body0", b"body1", b"body3"]
        # (the writer marker read above is the store's, not shown in the message table)
        assert got.messages.column("properties").to_pylist()[1] == [("K", "VAL\ufffd\ufffdX")]
        # still readable by offset, its topic decoded as Java would
        assert s.message_by_offset(offsets[2])["topic"] == "T\ufffd"
        # and appends go on after it
        res = s.put_batch(pa.table({"topic": ["T"], "body": [b"new"], "queueId": pa.array([0], pa.int32())}))
        assert res.column("queueOffset").to_pylist() == [3]


def test_utf8_lossy_matches_javas_decoding() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from rmqlog.log.gather import utf8_lossy

    @settings(max_examples=150, deadline=None)
    @given(st.lists(st.one_of(st.binary(max_size=12), st.text(max_size=6).map(str.encode)), max_size=40))
    def check(values: list[bytes]) -> None:
        got = utf8_lossy(pa.array(values, pa.binary())).to_pylist()
        assert got == [v.decode("utf-8", "replace") for v in values]

    check()
    # an offset slice and a large_binary input take the same path
    arr = pa.array([b"ok", b"\xff", b"fine"], pa.large_binary()).slice(1)
    assert utf8_lossy(arr).to_pylist() == ["\ufffd", "fine"]
