"""Decode fast paths give the same table as the general path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import store
from store.decode import message_table, read_columns


def test_expected_topic_fast_path_and_mismatch_fallback(tmp_path: Path) -> None:
    with store.MessageStore.open(tmp_path) as s:
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
            message_table(read_columns(seg.buffer(), 0, only_ab)))
        assert message_table(read_columns(seg.buffer(), 0, only_ab, topic="Ab"))["topic"].to_pylist() == ["Ab"] * 3


def test_gather_with_and_without_the_c_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    import store.gather as g

    rng = np.random.default_rng(3)
    src = pa.py_buffer(rng.bytes(10_000))
    starts = np.sort(rng.choice(9_000, 300, replace=False)).astype(np.int64)
    lengths = np.minimum(np.diff(np.append(starts, 9_000)), rng.integers(0, 40, 300)).astype(np.int64)
    expect = [src.to_pybytes()[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]
    assert g.gather_slices(src, starts, lengths).to_pylist() == expect
    monkeypatch.setattr(g, "_native_gather", None)
    assert g.gather_slices(src, starts, lengths).to_pylist() == expect


def test_c_gather_rejects_slices_outside_the_buffer() -> None:
    import store.gather as g

    if g._native_gather is None:
        pytest.skip("store._native was not built here")
    out = np.empty(5, np.uint8)
    with pytest.raises(ValueError):
        g._native_gather(b"abc", np.array([1], np.int64), np.array([5], np.int64), out)
