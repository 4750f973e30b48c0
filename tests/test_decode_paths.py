"""Decode fast paths give the same table as the general path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

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
