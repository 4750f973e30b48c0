"""A real Spark read of a damaged store fails with the store's typed error; ``checkCRC=false``
reads it as stored (the damage cases themselves are in
tests/test_read_checks.py, through ``read_range`` without Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

import rmqlog

from .spark_helpers import fill


def test_batch_read_of_a_damaged_body_fails_unless_checkcrc_is_off(spark, store_root: str) -> None:
    config = rmqlog.StoreConfig(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=20 * 50)
    res = fill(store_root, "orders", 400, queues=2, config=config)
    segments = sorted(Path(store_root, "commitlog").iterdir())
    assert len(segments) > 4  # a clean open walks the last 3 only: the damage is found by the read
    offset = res["commitLogOffset"][3].as_py()
    with open(segments[0], "r+b") as f:  # a body byte of message 3 ("m3"), in the oldest segment
        f.seek(offset + 88)
        f.write(b"X")
    # unchecked first: a failed task's worker exits without closing the store, so the next
    # open runs the abnormal recovery, which finds the damage too (DataLossError, at open)
    unchecked = (
        spark.read.format("rmqlog")
        .option("path", store_root)
        .option("topics", "orders")
        .option("checkCRC", "false")
        .load()
    )
    bodies = {bytes(r.body) for r in unchecked.select("body").collect()}
    assert len(bodies) == 400 and b"X3" in bodies and b"m3" not in bodies
    df = spark.read.format("rmqlog").option("path", store_root).option("topics", "orders").load()
    with pytest.raises(Exception, match="rmqlog.errors.(CorruptRecordError|DataLossError)") as err:
        df.count()
    # the job reports its last attempt: the read's CorruptRecordError, or, on a retry after
    # the failed worker left the store open, recovery's DataLossError; both name the damage
    msg = str(err.value)
    assert "body CRC mismatch" in msg and f"offset {offset}" in msg and str(segments[0]) in msg, msg
