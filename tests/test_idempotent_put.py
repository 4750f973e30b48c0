"""Idempotent appends: ``put_batch(table, writer=..., sequence=...)``.

The Spark sink relies on these: a retried task or replayed micro-batch re-sends the same
(writer, sequence) and must add nothing, also after the append state was lost and rebuilt
from the commitlog.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import batch, subprocess_env, walk

import rmqlog
from rmqlog.errors import InvalidMessageError


def test_replay_of_same_or_older_sequence_writes_nothing(ms: rmqlog.MessageStore, root: Path) -> None:
    t = batch(3, topic="T", body=b"x", queueId=0)
    first = ms.put_batch(t, writer="q1/0", sequence=7)
    assert first.num_rows == 3
    before = walk(root)
    assert ms.put_batch(t, writer="q1/0", sequence=7).num_rows == 0
    assert ms.put_batch(t, writer="q1/0", sequence=3).num_rows == 0
    assert walk(root) == before
    assert ms.writer_sequence("q1/0") == 7
    assert ms.writer_sequence("q1/1") is None
    # another writer, and a later sequence, append normally
    assert ms.put_batch(t, writer="q1/1", sequence=7).num_rows == 3
    assert ms.put_batch(t, writer="q1/0", sequence=8).num_rows == 3
    assert ms.dispatch() == 9
    assert ms.max_offset("T", 0) == 9


def test_marker_is_on_the_last_record_only(ms: rmqlog.MessageStore, root: Path) -> None:
    ms.put_batch(batch(4, topic="T", body=b"x", queueId=1), writer="job/3", sequence=42)
    recs = walk(root)
    assert [r.properties.get("RMQLOG_WRITER") for r in recs] == [None, None, None, "42 job/3"]
    assert all("UNIQ_KEY" in r.properties for r in recs)


def test_marker_survives_a_lost_append_state(root: Path, small_config: rmqlog.StoreConfig) -> None:
    with rmqlog.MessageStore.open(root, small_config) as s:
        for seq in range(5):  # several batches over segment rolls (4 KiB segments)
            s.put_batch(batch(20, topic="T", body=b"y" * 50), writer="w", sequence=seq)
        s.put_batch(batch(2, topic="T", body=b"z"), writer="other", sequence=11)
    os.remove(root / "append.state")
    with rmqlog.MessageStore.open(root, small_config) as s:
        assert s.writer_sequence("w") == 4
        assert s.writer_sequence("other") == 11
        assert s.put_batch(batch(20, topic="T", body=b"y" * 50), writer="w", sequence=4).num_rows == 0
        assert s.put_batch(batch(1, topic="T", body=b"n"), writer="w", sequence=5).num_rows == 1
    assert len(walk(root)) == 5 * 20 + 2 + 1


@pytest.mark.parametrize(
    ("writer", "sequence", "field"),
    [
        ("", 1, "writer"),
        (None, 1, "writer"),
        ("a\x01b", 1, "writer"),
        ("x" * 1025, 1, "writer"),
        (5, 1, "writer"),
        ("w", None, "sequence"),
        ("w", -1, "sequence"),
        ("w", 1.5, "sequence"),
        ("w", True, "sequence"),
        ("w", 1 << 63, "sequence"),
    ],
)
def test_bad_writer_or_sequence_is_rejected_before_writing(
    ms: rmqlog.MessageStore,
    root: Path,
    writer: object,
    sequence: object,
    field: str,
) -> None:
    with pytest.raises(InvalidMessageError) as err:
        ms.put_batch(batch(1, topic="T", body=b"x"), writer=writer, sequence=sequence)  # type: ignore[arg-type]
    assert err.value.field == field
    assert walk(root) == []


def test_bad_row_in_an_idempotent_batch_does_not_record_the_sequence(ms: rmqlog.MessageStore) -> None:
    with pytest.raises(InvalidMessageError):
        ms.put_batch(batch(2, topic=["T", "bad topic"], body=b"x"), writer="w", sequence=1)
    assert ms.writer_sequence("w") is None
    assert ms.put_batch(batch(2, topic="T", body=b"x"), writer="w", sequence=1).num_rows == 2


def test_concurrent_processes_replaying_the_same_batches_append_each_once(
    root: Path, small_config: rmqlog.StoreConfig
) -> None:
    """Four processes race to append the same 30 (writer, sequence) batches: each lands once."""
    script = textwrap.dedent(f"""
        import pyarrow as pa, rmqlog
        cfg = rmqlog.StoreConfig(mapped_file_size_commit_log={small_config.mapped_file_size_commit_log},
                                mapped_file_size_consume_queue={small_config.mapped_file_size_consume_queue})
        with rmqlog.MessageStore.open({str(root)!r}, cfg) as s:
            for seq in range(30):
                t = pa.table({{"topic": ["T"] * 3, "body": [b"%d-%d" % (seq, i) for i in range(3)], "queueId": [0] *
                    3}})
                s.put_batch(t, writer="shared", sequence=seq)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], env=subprocess_env()) for _ in range(4)]
    assert all(p.wait(120) == 0 for p in procs)
    bodies = [r.body for r in walk(root)]
    assert len(bodies) == len(set(bodies)) == 90
    with rmqlog.MessageStore.open(root, small_config) as s:
        s.dispatch()
        assert s.max_offset("T", 0) == 90


# --------------------------------------------------------------------------- put_batches


def _tables(sizes: list[int], topic: str = "T") -> list[pa.Table]:
    out, k = [], 0
    for n in sizes:
        out.append(
            batch(n, topic=topic, body=[b"m%d" % (k + i) for i in range(n)], queueId=pa.array([0] * n, pa.int32()))
        )
        k += n
    return out


def test_put_batches_appends_all_tables_as_one_batch(ms: rmqlog.MessageStore, root: Path) -> None:
    res = ms.put_batches(iter(_tables([3, 0, 4, 2])), writer="task/1", sequence=9, dispatch=True)
    assert res.num_rows == 9
    assert res["queueOffset"].to_pylist() == list(range(9))
    recs = walk(root)
    assert [r.body for r in recs] == [b"m%d" % i for i in range(9)]
    assert [r.properties.get("RMQLOG_WRITER") for r in recs] == [None] * 8 + ["9 task/1"]
    assert ms.max_offset("T", 0) == 9  # dispatched
    assert ms.put_batches(iter(_tables([3, 4])), writer="task/1", sequence=9).num_rows == 0
    assert len(walk(root)) == 9


def test_put_batches_bad_row_in_a_later_table_writes_nothing(ms: rmqlog.MessageStore, root: Path) -> None:
    tables = _tables([3, 4])
    bad = batch(2, topic=["T", "bad topic"], body=[b"x", b"y"])
    with pytest.raises(InvalidMessageError) as err:
        ms.put_batches([*tables, bad], writer="w", sequence=1)
    assert (err.value.row, err.value.field) == (3 + 4 + 1, "topic")
    assert "row 8" in str(err.value)
    assert walk(root) == []
    assert ms.writer_sequence("w") is None
    assert ms.put_batches([], writer="w", sequence=1).num_rows == 0


def test_put_batches_rejects_non_tables(ms: rmqlog.MessageStore) -> None:
    with pytest.raises(InvalidMessageError):
        ms.put_batches([{"topic": "T"}])  # type: ignore[list-item]
