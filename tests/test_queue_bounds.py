"""A read's queue bounds without a folder listing (rmqlog.log.folder_handle,
MappedFileQueue.listed_starts/still_listed, CommitLog.min_offset, ConsumeQueue.bounds with
``published``): reads, GET_MAX_OFFSET/GET_MIN_OFFSET's store calls and the checks before a
pull list no folder once the listings are kept, whatever the queue holds; and what another
process does to the queues is seen at the next read: its dispatch into the last known
segment, into new segments, past a gap of lost records, a segment cut and made again, its
retention, a topic's delete. "Another process" is a second open of the same root (its own
kept listings, nothing shared with the first) and, once, a real child process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import SMALL_CQ, batch, read_queue_all, small_store_config, subprocess_env

import rmqlog
from rmqlog import GetMessageStatus as S
from rmqlog import safe_open

PER_FILE = SMALL_CQ // 20  # units in one consume-queue file of the small config (50)


def put(s: rmqlog.MessageStore, n: int, first: int = 0, topic: str = "T", qid: int = 0) -> None:
    s.put_batch(
        batch(
            topic=topic,
            body=[f"{first + i}".encode().ljust(60, b".") for i in range(n)],
            queueId=pa.array([qid] * n, pa.int32()),
        ),
        dispatch=True,
    )


def bodies(s: rmqlog.MessageStore, topic: str = "T", qid: int = 0) -> list[int]:
    return [int(m["body"].rstrip(b".")) for m in read_queue_all(s, topic, qid)]


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Every folder of this test's stores reached by its path from now on (a listing by path
    starts so: ``safe_open.listdir``, ``entries`` and the kept handles' listings all open the
    folder). Only folders under the test's own ``tmp_path`` count: a store an earlier test of
    the same worker left to the collector may still have a thread listing its own folders."""
    seen: list[str] = []
    real = safe_open.open_folder
    mine = str(tmp_path) + "/"

    def counting(path: safe_open.PathLike) -> int:
        if str(path).startswith(mine):
            seen.append(str(path))
        return real(path)

    monkeypatch.setattr(safe_open, "open_folder", counting)
    return seen


def _reads(s: rmqlog.MessageStore, offset: int) -> None:
    """What a broker asks of the store per request: a pull's window (raw, and as a table),
    a queue's bounds, a plain read."""
    assert s.read_window("T", 0, offset, max_count=32, raw=True).status is S.FOUND
    assert s.read_window("T", 0, offset, max_count=8, tags="*").status is S.FOUND
    assert s.min_offset("T", 0) == 0 and s.max_offset("T", 0) == 120
    assert s.get_messages("g", "T", 0, offset, 4).status is S.FOUND
    assert len(s.read_queue("T", 0, offset, offset + 3)) == 3
    assert s.record_sizes("T", 0, offset, offset + 2).tolist() == [s.record_sizes("T", 0, offset, offset + 1)[0]] * 2


def test_reads_list_no_folder_once_the_listings_are_kept(tmp_path: Path, listings: list[str]) -> None:
    with rmqlog.MessageStore.open(tmp_path / "s", small_store_config()) as s:
        s.create_topic("T", 1)
        put(s, 120)  # three consume-queue files, many commitlog segments
        _reads(s, 0)  # (the first read lists what it reads from)
        listings.clear()
        for offset in (0, 5, 49, 50, 99, 110):
            _reads(s, offset)
        assert listings == []
        # the end moves within the last known file: seen, still without a listing
        put(s, 3, first=120)  # (its dispatch lists the queue: the dispatcher's own look)
        listings.clear()
        assert s.max_offset("T", 0) == 123 and s.read_window("T", 0, 120, raw=True).next_begin_offset == 123
        assert listings == []


def test_a_queue_at_its_end_lists_nothing_either(tmp_path: Path, listings: list[str]) -> None:
    """A consumer caught up asks at the end (OFFSET_OVERFLOW_ONE, a held pull's re-run): the
    published next offset says nothing lies past it; so does an empty queue's."""
    with rmqlog.MessageStore.open(tmp_path / "s", small_store_config()) as s:
        s.create_topic("T", 2)
        put(s, PER_FILE)  # its file exactly full: the next one may exist, and does not
        s.read_window("T", 0, PER_FILE)
        s.read_window("T", 1, 0)
        listings.clear()
        for _ in range(5):
            assert s.read_window("T", 0, PER_FILE, raw=True).status is S.OFFSET_OVERFLOW_ONE
            assert s.read_window("T", 1, 0, raw=True).status is S.NO_MESSAGE_IN_QUEUE
            assert s.max_offset("T", 0) == PER_FILE
        assert listings == []


def test_another_processes_dispatch_is_seen(tmp_path: Path) -> None:
    """Into the last file this process knows (read through its mapping), into new files (the
    queue rolls: listed once), into a file past a gap of lost records (the published next
    offset lies past every file known)."""
    root = tmp_path / "s"
    with (
        rmqlog.MessageStore.open(root, small_store_config()) as s,
        rmqlog.MessageStore.open(root, small_store_config()) as other,
    ):
        s.create_topic("T", 1)
        put(s, 10)
        assert s.max_offset("T", 0) == 10 and bodies(s) == list(range(10))
        cq = s.consume_queue("T", 0)
        before = cq.segments.relists
        put(other, 20, first=10)
        assert s.max_offset("T", 0) == 30 and cq.segments.relists == before
        put(other, 50, first=30)  # into the next file
        assert s.max_offset("T", 0) == 80 and bodies(s) == list(range(80))
        assert cq.segments.relists == before + 1
        # a gap: queue offsets 80..139 have no record (a damaged next offset, as
        # test_dispatch_gaps makes one); the dispatch fills only from the start of the file
        # holding 140, the file holding 80..99 stays short of full
        state = other.parts.state_file.load()
        assert state is not None
        state.queues["T/0"] += 60
        with other.parts.append_lock.held():
            other.parts.state_file.publish(state)
        put(other, 5, first=140)
        assert s.max_offset("T", 0) == 145
        got = s.read_window("T", 0, 140, raw=True)
        assert (got.status, got.next_begin_offset, len(got.records)) == (S.FOUND, 145, 5)
        assert [int(m["body"].rstrip(b".")) for m in s.read_queue("T", 0, 140, 145).to_pylist()] == list(
            range(140, 145)
        )


def test_a_file_cut_and_made_again_by_another_process_is_seen(tmp_path: Path) -> None:
    """The last file this process maps removed (a dispatch undoing its failed write) and written
    again: this process lets go of the old file and reads the new one."""
    root = tmp_path / "s"
    with (
        rmqlog.MessageStore.open(root, small_store_config()) as s,
        rmqlog.MessageStore.open(root, small_store_config()) as other,
    ):
        s.create_topic("T", 1)
        put(s, 60)
        assert bodies(s) == list(range(60))  # the second file mapped here
        ocq = other.consume_queue("T", 0)
        with other.parts.dispatch_lock.held():
            ocq.truncate(PER_FILE)  # the second file deleted
            other.parts.dispatcher.set_position(0)
        other.parts.dispatcher.dispatch()  # ... and made again: a new file, the same name
        put(other, 10, first=60)
        assert s.max_offset("T", 0) == 70 and bodies(s) == list(range(70))


def test_a_topic_deleted_by_another_process_is_seen(tmp_path: Path) -> None:
    """Its queues' files below the one holding the end deleted, the rest filled: a reader that
    had them mapped serves none of the deleted messages afterwards."""
    root = tmp_path / "s"
    with (
        rmqlog.MessageStore.open(root, small_store_config()) as s,
        rmqlog.MessageStore.open(root, small_store_config()) as other,
    ):
        s.create_topic("T", 1)
        put(s, 120)
        assert bodies(s) == list(range(120))  # every file mapped here
        other.delete_topic("T")
        assert (s.min_offset("T", 0), s.max_offset("T", 0)) == (120, 120)
        got = s.read_window("T", 0, 0, raw=True)
        assert (got.status, got.next_begin_offset) == (S.OFFSET_TOO_SMALL, 120)
        assert bodies(s) == []


def test_retention_in_another_process_is_seen(tmp_path: Path) -> None:
    """The oldest commitlog segments moved away and the queue files below the new start
    deleted: the first offsets move, a read below them is sent on."""
    root = tmp_path / "s"
    with (
        rmqlog.MessageStore.open(root, small_store_config()) as s,
        rmqlog.MessageStore.open(root, small_store_config()) as other,
    ):
        s.create_topic("T", 1)
        put(s, 120)
        s.flush()  # (retention deletes only what is flushed)
        assert bodies(s) == list(range(120)) and s.commit_log_min_offset() == 0
        other.retention.disk_used = lambda path: 99.0  # past the forced ratio: the oldest go whatever their age
        report = other.clean_expired()
        assert report.segments and report.consume_queue_files
        low = other.commit_log_min_offset()
        assert s.commit_log_min_offset() == low > 0
        lo = s.min_offset("T", 0)
        assert lo == other.min_offset("T", 0) > PER_FILE
        got = s.read_window("T", 0, 0, raw=True)
        assert (got.status, got.next_begin_offset) == (S.OFFSET_TOO_SMALL, lo)
        assert bodies(s) == list(range(lo, 120))


CHILD = """
import sys, pyarrow as pa, rmqlog
sys.path.insert(0, {tests!r})
from conftest import small_store_config
with rmqlog.MessageStore.open(sys.argv[1], small_store_config()) as s:
    for k in range(3):
        s.put_batch(pa.table({{"topic": ["T"] * 40, "queueId": pa.array([0] * 40, pa.int32()),
                              "body": [str(40 * k + i + 10).encode().ljust(60, b".") for i in range(40)]}}),
                                  dispatch=True)
"""


def test_a_child_process_dispatching_into_new_files_is_seen(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.create_topic("T", 1)
        put(s, 10)
        assert bodies(s) == list(range(10)) and s.max_offset("T", 0) == 10
        code = textwrap.dedent(CHILD.format(tests=str(Path(__file__).parent)))
        subprocess.run([sys.executable, "-c", code, str(root)], env=subprocess_env(), timeout=120, check=True)
        assert s.max_offset("T", 0) == 130
        assert bodies(s) == list(range(130))
