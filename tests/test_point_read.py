"""Point reads (:mod:`rmqlog.log.point_read`) give exactly the batch decoder's rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import FIXTURE_COMMITLOG, copy_file, small_store_config

import rmqlog
from rmqlog.log.decode import RecordCheck
from rmqlog.log.point_read import records_table


def _both(s: rmqlog.MessageStore, offsets: list[int]) -> tuple[pa.Table, pa.Table]:
    tail = s.published_tail()
    found = [(o, s.commitlog.record_at(o, tail).record) for o in offsets]
    batch = s.commitlog.read_messages(np.array(offsets, np.int64), check=RecordCheck(crc=True), tail=tail)
    return records_table(found, check_crc=True), batch


def test_rows_equal_the_batch_decoders(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config(store_host="[::1]:10911")) as s:
        res = s.put_batch(
            pa.table(
                {
                    "topic": ["T", "U", "T"],
                    "body": [b"a", b"", b"c" * 300],
                    "tags": ["x", None, "y"],
                    "keys": [["k1", "k2"], [], ["k3"]],
                    "flag": [1, 2, 3],
                    "properties": pa.array(
                        [[("p", "1")], [], [("q", "2"), ("r", "3")]], pa.map_(pa.string(), pa.string())
                    ),
                }
            )
        )
        offsets = res.column("commitLogOffset").to_pylist()
        point, batch = _both(s, offsets[::-1])
        assert point.equals(batch), (point.to_pylist(), batch.to_pylist())


def test_rows_of_records_rocketmq_wrote(tmp_path: Path) -> None:
    root = tmp_path / "rmq"
    copy_file(FIXTURE_COMMITLOG, root / "commitlog" / FIXTURE_COMMITLOG.name)
    with rmqlog.MessageStore.open(root) as s:
        point, batch = _both(s, [0, 172, 46 * 172])
        assert point.equals(batch)


def test_a_body_crc_mismatch_is_named(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        off = s.put("T", b"hello").commit_log_offset
        rec = s.commitlog.record_at(off, s.published_tail()).record
        rec.body_crc ^= 1
        with pytest.raises(rmqlog.CorruptRecordError, match=f"body CRC mismatch.*offset {off}"):
            records_table([(off, rec)], check_crc=True)
        assert records_table([(off, rec)], check_crc=False).num_rows == 1
