"""``MessageStore.put_stream``: ``put_batches`` in bounded memory. Within ``buffer_bytes`` it is
the usual one append; past it the append lock is taken and the rest written as it arrives,
unseen until the last table is published with everything: all or nothing, idempotent, and a
process killed mid-stream leaves nothing of it (recovery cuts what was never published)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import read_queue_all, subprocess_env

import rmqlog


def tables(n_tables: int, rows: int, *, start: int = 0, bad_at: int | None = None) -> Iterator[pa.Table]:
    for t in range(n_tables):
        first = start + t * rows
        topics = ["S"] * rows
        if bad_at is not None and t == bad_at:
            topics[3] = "bad/topic"
        yield pa.table(
            {
                "topic": topics,
                "body": [f"m{first + i}".encode() for i in range(rows)],
                "keys": [[f"k{first + i}"] for i in range(rows)],
            }
        )


def _bodies(s: rmqlog.MessageStore) -> list[bytes]:
    return [m["body"] for q in range(4) for m in read_queue_all(s, "S", q)]


@pytest.mark.parametrize("buffer_bytes", [0, 3000, 256 << 20])
def test_every_row_once_whatever_the_buffer(tmp_path: Path, buffer_bytes: int) -> None:
    with rmqlog.MessageStore.open(tmp_path / "s") as s:
        s.create_topic("S", 4)
        assert s.put_stream(tables(10, 50), writer="w", sequence=1, dispatch=True, buffer_bytes=buffer_bytes) == 500
        assert sorted(_bodies(s)) == sorted(f"m{i}".encode() for i in range(500))
        assert s.writer_sequence("w") == 1
        # a replay adds nothing, streamed or not
        assert s.put_stream(tables(10, 50), writer="w", sequence=1, dispatch=True, buffer_bytes=buffer_bytes) == 0
        assert len(_bodies(s)) == 500
        assert s.query_by_key("S", "k123")["body"].to_pylist() == [b"m123"]
        assert s.verify().ok


def test_past_the_buffer_the_rows_are_written_unseen_until_the_end(tmp_path: Path) -> None:
    with rmqlog.MessageStore.open(tmp_path / "s") as s:
        s.create_topic("S", 4)
        s.put_batch(pa.table({"topic": ["S"], "body": [b"before"]}), dispatch=True)
        tail = s.published_tail()
        seen: list[int] = []

        def watched() -> Iterator[pa.Table]:
            for i, t in enumerate(tables(6, 40)):
                if i >= 3:  # the buffer (1 byte) was passed at the second table: written, not published
                    seen.append(s.published_tail())
                    seg = s.parts.commitlog.segments.for_offset(tail)
                    assert seg is not None and seg.read(tail - seg.start, 4) != bytes(
                        4
                    )  # (the held tables are written)
                yield t

        assert s.put_stream(watched(), buffer_bytes=1, dispatch=True) == 240
        assert seen == [tail] * 3 and s.published_tail() > tail
        assert len(_bodies(s)) == 241


def test_a_bad_row_past_the_buffer_leaves_nothing(tmp_path: Path) -> None:
    with rmqlog.MessageStore.open(tmp_path / "s") as s:
        s.create_topic("S", 4)
        tail = s.published_tail()
        with pytest.raises(rmqlog.InvalidTopicError) as info:
            s.put_stream(tables(6, 40, bad_at=4), writer="w", sequence=1, buffer_bytes=1)
        assert info.value.row == 4 * 40 + 3  # numbered across the tables
        assert s.published_tail() == tail and s.writer_sequence("w") is None and _bodies(s) == []
        # what was written past the tail is cleared: the next append is whole and readable
        assert s.put_stream(tables(2, 10, start=900), writer="w", sequence=1, buffer_bytes=1, dispatch=True) == 20
        assert sorted(_bodies(s)) == sorted(f"m{i}".encode() for i in range(900, 920))
        assert s.verify().ok


def test_a_process_killed_mid_stream_leaves_nothing_of_it(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        s.create_topic("S", 4)
        s.put_batch(pa.table({"topic": ["S"] * 4, "body": [b"kept"] * 4}), dispatch=True)
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import rmqlog
        from test_put_stream import tables
        def killed():
            for i, t in enumerate(tables(8, 100)):
                if i == 6:
                    os.kill(os.getpid(), signal.SIGKILL)
                yield t
        s = rmqlog.MessageStore.open({str(root)!r})
        s.put_stream(killed(), writer="w", sequence=5, buffer_bytes=1)
    """)
    proc = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), timeout=120)
    assert proc.returncode == -signal.SIGKILL
    with rmqlog.MessageStore.open(root) as s:
        assert _bodies(s) == [b"kept"] * 4 and s.writer_sequence("w") is None
        assert s.put_stream(tables(2, 10), writer="w", sequence=5, dispatch=True) == 20
        assert len(_bodies(s)) == 24 and s.verify().ok


@pytest.mark.parametrize("bad", [-1, "1", None, 2.5])
def test_a_bad_buffer_is_refused(tmp_path: Path, bad: object) -> None:
    with (
        rmqlog.MessageStore.open(tmp_path / "s") as s,
        pytest.raises(rmqlog.InvalidArgumentError, match="buffer_bytes"),
    ):
        s.put_stream(tables(1, 1), buffer_bytes=bad)  # type: ignore[arg-type]
