"""The store's segment sizes are the store's (``config/segmentSizes.json``, :mod:`rmqlog.segment_sizes`):
recorded when it is created, used by every later opener, reader or writer, whatever its config;
stores an older version made (no record) keep the sizes their files say."""

from __future__ import annotations

import json
import logging
import zlib
from pathlib import Path

import pytest

import rmqlog

SMALL = rmqlog.StoreConfig(mapped_file_size_commit_log=64 << 10, mapped_file_size_consume_queue=2000)
RECORD = "segmentSizes.json"


def _record(root: Path) -> dict[str, int]:
    raw: dict[str, int] = json.loads((root / "config" / RECORD).read_text())
    return raw


def test_the_sizes_are_recorded_when_the_store_is_created(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, SMALL):
        pass
    assert _record(root) == {
        "mappedFileSizeCommitLog": 64 << 10,
        "mappedFileSizeConsumeQueue": 2000,
        "crc": zlib.crc32(f"{64 << 10},2000".encode()),
    }


def test_a_reader_opened_before_the_first_segments_reads_with_the_stores_sizes(tmp_path: Path) -> None:
    """A read-only reader without the store's config, opened before the writer's first
    consume-queue file and commitlog segment exist, reads once the writer dispatches (it read
    the 6,000,000 and 1 GiB defaults and failed every read with ``segment is 2000 bytes,
    expected 6000000``)."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, SMALL) as writer:
        assert not (root / "commitlog").exists() or not list((root / "commitlog").iterdir())
        with rmqlog.MessageStore.open(root, read_only=True) as reader:
            writer.put("T", b"x", queue_id=0)
            writer.dispatch()
            assert reader.read_queue("T", 0, 0, 1)["body"].to_pylist() == [b"x"]
            assert reader.message_by_offset(0)["body"] == b"x"
            assert (reader.config.mapped_file_size_commit_log, reader.config.mapped_file_size_consume_queue) == (
                64 << 10,
                2000,
            )


def test_a_second_opener_with_other_sizes_uses_the_stores(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A second writer of an empty store with another configured size uses the recorded
    sizes and says so; the first opener keeps reading (it failed with ``segment is 6000
    bytes, expected 2000``); every later opener with a default config too."""
    root = tmp_path / "s"
    other = rmqlog.StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=6000)
    with (
        caplog.at_level(logging.WARNING, logger="rmqlog.segment_sizes"),
        rmqlog.MessageStore.open(root, SMALL) as first,
        rmqlog.MessageStore.open(root, other) as second,
    ):
        assert "are used, not the configured ones (1048576, 6000)" in caplog.text
        assert second.config.mapped_file_size_consume_queue == 2000
        second.put("T", b"y", queue_id=0)
        second.dispatch()
        for s in (first, second):
            assert s.read_queue("T", 0, 0, 1)["body"].to_pylist() == [b"y"]
            assert s.parts.commitlog.segment_size == 64 << 10 and s.parts.queues.segment_size == 2000
    assert sorted(p.stat().st_size for p in (root / "consumequeue" / "T" / "0").iterdir()) == [2000]
    with rmqlog.MessageStore.open(root) as later:
        assert later.read_queue("T", 0, 0, 1)["body"].to_pylist() == [b"y"]
    assert _record(root)["mappedFileSizeConsumeQueue"] == 2000


def test_a_store_an_older_version_made_keeps_its_files_sizes(tmp_path: Path) -> None:
    """No record (an older version's store): the files say the sizes; the next writer records them."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, SMALL) as s:
        s.put("T", b"z", queue_id=0)
        s.dispatch()
    (root / "config" / RECORD).unlink()
    with rmqlog.MessageStore.open(root, read_only=True) as reader:
        assert reader.read_queue("T", 0, 0, 1)["body"].to_pylist() == [b"z"]
    assert not (root / "config" / RECORD).exists()  # (a reader writes nothing)
    with rmqlog.MessageStore.open(root) as s:
        assert s.read_queue("T", 0, 0, 1)["body"].to_pylist() == [b"z"]
    assert _record(root)["mappedFileSizeCommitLog"] == 64 << 10 and _record(root)["mappedFileSizeConsumeQueue"] == 2000


@pytest.mark.parametrize("record", ["kept", "removed"])
def test_a_reader_of_a_store_without_record_or_files_settles_at_the_first_segment(tmp_path: Path, record: str) -> None:
    """An older version's empty store (no record, no segment): a reader's sizes are provisional;
    once a writer makes segments it reads the record that writer wrote, or (an older writer,
    no record) the files' own sizes."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, SMALL):
        pass
    (root / "config" / RECORD).unlink()
    with rmqlog.MessageStore.open(root, read_only=True) as reader, rmqlog.MessageStore.open(root, SMALL) as writer:
        writer.put("T", b"w", queue_id=0)
        writer.dispatch()
        if record == "removed":
            (root / "config" / RECORD).unlink()
        assert reader.read_queue("T", 0, 0, 1)["body"].to_pylist() == [b"w"]
        assert reader.message_by_offset(0)["body"] == b"w"


@pytest.mark.parametrize(
    "damage",
    [
        b"{not json",
        b'{"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 2000, "crc": 1}',
        b'{"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 2001}',
    ],
)
def test_a_damaged_record_gives_way_to_the_files(
    tmp_path: Path, damage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """The record only matters before the files exist: a damaged one is logged, the files say
    the sizes, and a writer records them again."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, SMALL) as s:
        s.put("T", b"v", queue_id=0)
        s.dispatch()
    (root / "config" / RECORD).write_bytes(damage)
    with rmqlog.MessageStore.open(root) as s:
        assert "unreadable segment sizes" in caplog.text
        assert s.read_queue("T", 0, 0, 1)["body"].to_pylist() == [b"v"]
    assert _record(root)["mappedFileSizeConsumeQueue"] == 2000


def test_the_commitlogs_segments_outweigh_the_record(tmp_path: Path) -> None:
    """A record that disagrees with the commitlog's segments: the log's size is used."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, SMALL) as s:
        s.put("T", b"u", queue_id=0)
        s.dispatch()
    wrong = {"mappedFileSizeCommitLog": 1 << 20, "mappedFileSizeConsumeQueue": 2000}
    (root / "config" / RECORD).write_text(json.dumps({**wrong, "crc": zlib.crc32(f"{1 << 20},2000".encode())}))
    with rmqlog.MessageStore.open(root) as s:
        assert s.parts.commitlog.segment_size == 64 << 10
        assert s.message_by_offset(0)["body"] == b"u" and s.config.mapped_file_size_commit_log == 64 << 10


WRITER = """
import sys, rmqlog
cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=64 << 10, mapped_file_size_consume_queue=2000)
with rmqlog.MessageStore.open(sys.argv[1], cfg) as s:
    print("open", flush=True)
    sys.stdin.readline()
    s.put("T", b"from another process", queue_id=0)
    s.dispatch()
    print("put", flush=True)
    sys.stdin.readline()
"""


def test_a_reader_and_a_writer_in_two_processes(tmp_path: Path) -> None:
    """The writer's process creates the store with its sizes; a reader in another process,
    with the default config, opened before the first segment, reads what it puts."""
    import subprocess
    import sys

    from conftest import subprocess_env

    root = tmp_path / "s"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root)],
        env=subprocess_env(),
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline() == "open\n"
        with rmqlog.MessageStore.open(root, read_only=True) as reader:
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline() == "put\n"
            assert reader.read_queue("T", 0, 0, 1)["body"].to_pylist() == [b"from another process"]
        child.stdin.write("end\n")
        child.stdin.flush()
        assert child.wait(60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
