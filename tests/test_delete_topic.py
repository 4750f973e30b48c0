"""``MessageStore.delete_topic``: the topic's ``topics.json`` entry and every group's offsets of
it removed, other topics' and other entries' kept; bad names refused, typed."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import read_queue_all, subprocess_env

import rmqlog


def test_delete_topic_removes_its_config_and_offsets_only(tmp_path: Path) -> None:
    with rmqlog.MessageStore.open(tmp_path / "s") as s:
        s.create_topic("A", 2)
        s.create_topic("AB", 1)  # a name that starts like A's: untouched
        s.commit_offset("G1", "A", 0, 5)
        s.commit_offset("G2", "A", 1, 7)
        s.commit_offset("G1", "AB", 0, 3)
        assert s.delete_topic("A") == (True, 2)
        assert "A" not in s.topics() and "AB" in s.topics()
        assert s.committed_offset("G1", "A", 0) == -1 and s.committed_offset("G2", "A", 1) == -1
        assert s.committed_offset("G1", "AB", 0) == 3
        offsets = json.loads((s.paths.config_dir / "consumerOffset.json").read_text())["offsetTable"]
        assert set(offsets) == {"AB@G1"}
        assert s.delete_topic("A") == (False, 0)  # nothing left: nothing done
    with rmqlog.MessageStore.open(tmp_path / "s") as s:  # the files say so after a reopen
        assert "A" not in s.topics() and s.committed_offset("G1", "AB", 0) == 3


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "x" * 200])
def test_delete_topic_refuses_bad_names(tmp_path: Path, bad: str) -> None:
    with rmqlog.MessageStore.open(tmp_path / "s") as s, pytest.raises(rmqlog.InvalidTopicError):
        s.delete_topic(bad)


def test_delete_topic_on_a_read_only_store_is_refused(tmp_path: Path) -> None:
    with rmqlog.MessageStore.open(tmp_path / "s") as s:
        s.create_topic("A", 1)
    with rmqlog.MessageStore.open(tmp_path / "s", read_only=True) as s:
        with pytest.raises(rmqlog.ReadOnlyStoreError):
            s.delete_topic("A")
        assert "A" in s.topics()


def _fill(s: rmqlog.MessageStore, topic: str, n: int, queues: int = 2, body: bytes = b"old") -> None:
    s.put_batch(
        pa.table({"topic": [topic] * n, "body": [body] * n, "queueId": [i % queues for i in range(n)]}), dispatch=True
    )


def _bodies(s: rmqlog.MessageStore, topic: str, qid: int) -> list[bytes]:
    return [m["body"] for m in read_queue_all(s, topic, qid)]


@pytest.mark.parametrize("reopen", ["closed", "killed", "queue-files-lost"])
def test_a_deleted_topic_with_messages_stays_deleted(tmp_path: Path, reopen: str) -> None:
    """Its queues' units go with it (RocketMQ's ``cleanUnusedTopic``) and nothing brings them back:
    not a reopen, not crash recovery re-dispatching the commitlog, not queue files rebuilt from
    the log. Other topics keep everything; the records stay readable by offset (as in RocketMQ)."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        _fill(s, "A", 10)
        _fill(s, "B", 6)
        first = s.read_queue("A", 0, 0, 1)["commitLogOffset"][0].as_py()
        assert s.delete_topic("A") == (True, 0)
        assert "A" not in s.topics() and "B" in s.topics()
        assert s.min_offset("A", 0) == s.max_offset("A", 0) == 5 and _bodies(s, "A", 0) == []
    if reopen == "killed":  # deleted again by a process killed -9 right after: recovery walks the log again
        code = textwrap.dedent(f"""
            import os, signal, pyarrow as pa, rmqlog
            s = rmqlog.MessageStore.open({str(root)!r})
            s.put_batch(pa.table({{"topic": ["A"] * 2, "body": [b"old"] * 2, "queueId": [0, 1]}}), dispatch=True)
            s.delete_topic("A")
            os.kill(os.getpid(), signal.SIGKILL)
        """)
        proc = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), timeout=120)
        assert proc.returncode == -signal.SIGKILL and (root / "abort").exists()
    if reopen == "queue-files-lost":
        shutil.rmtree(root / "consumequeue")
    with rmqlog.MessageStore.open(root) as s:
        assert "A" not in s.topics(), s.topics()
        # its queues count as complete: recovery looks for none of their units in the log
        assert not [p for p in (s.recovery.problems if s.recovery else []) if "A/" in p]
        assert _bodies(s, "A", 0) == [] and _bodies(s, "A", 1) == []
        assert _bodies(s, "B", 0) == [b"old"] * 3 and _bodies(s, "B", 1) == [b"old"] * 3
        assert s.message_by_offset(first)["body"] == b"old"  # by offset: the commitlog is shared
        assert s.verify().ok  # records of a deleted topic need no units below its delete


def test_a_topic_created_again_continues_its_queue_offsets(tmp_path: Path) -> None:
    """Sends after the delete make the topic again; its queues go on from where they ended (the
    commitlog's queue offsets stay dense, which recovery checks), holding only the new messages."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        _fill(s, "A", 10)
        s.delete_topic("A")
        _fill(s, "A", 4, body=b"new")
        assert "A" in s.topics()
        assert s.min_offset("A", 0) == 5 and s.max_offset("A", 0) == 7
        assert _bodies(s, "A", 0) == [b"new"] * 2 and _bodies(s, "A", 1) == [b"new"] * 2
    for _ in range(2):
        (root / "abort").touch()  # and through crash recovery, which walks the log again
        with rmqlog.MessageStore.open(root) as s:
            assert "A" in s.topics()
            assert _bodies(s, "A", 0) == [b"new"] * 2 and s.min_offset("A", 0) == 5
            assert not [p for p in (s.recovery.problems if s.recovery else []) if "A/" in p]
            assert s.verify().ok


def test_a_delete_seen_by_another_process_dispatching(tmp_path: Path) -> None:
    """The delete is on disk (``config/deletedTopics.json``): a process that had the store open
    before it does not give the topic its units back when it dispatches the log again."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s, rmqlog.MessageStore.open(root) as other:
        _fill(s, "A", 10)
        assert other.max_offset("A", 0) == 5
        s.delete_topic("A")
        other.parts.dispatcher.set_position(0)  # a walk from the start, as a rebuild does
        other.parts.dispatcher.dispatch()
        assert _bodies(other, "A", 0) == [] and "A" not in other.topics()


def test_an_unreadable_deleted_topics_file_loses_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``config/deletedTopics.json`` (and its ``.bak``) damaged: logged, read as if nothing had
    been deleted. The store opens; what the log holds of the topic may be listed again, never lost."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        _fill(s, "A", 4)
        s.delete_topic("A")
        _fill(s, "A", 2, body=b"new")
        s.delete_topic("A")  # a second delete keeps the first file as .bak
    for name in ("deletedTopics.json", "deletedTopics.json.bak"):
        (root / "config" / name).write_bytes(b"\xff{not json")
    shutil.rmtree(root / "consumequeue")
    with rmqlog.MessageStore.open(root) as s:
        assert "deletedTopics.json" in caplog.text
        assert sorted(_bodies(s, "A", 0) + _bodies(s, "A", 1)) == [b"new"] * 2 + [b"old"] * 4


def test_a_delete_records_where_it_stood(tmp_path: Path) -> None:
    """The file says what was deleted: the dispatch position and each queue's end."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        _fill(s, "A", 5)
        tail = s.published_tail()
        s.delete_topic("A")
        s.delete_topic("NEVER")  # no queue: nothing to record
    raw = json.loads((root / "config" / "deletedTopics.json").read_text())
    assert raw == {"deletedTopics": {"A": {"commitLogOffset": tail, "queueOffsets": {"0": 3, "1": 2}}}}


DELETE_CHILD = """
import sys, pyarrow as pa, rmqlog
s = rmqlog.MessageStore.open(sys.argv[1])
s.delete_topic("A")
print("deleted", flush=True)
"""


@pytest.mark.parametrize(
    ("point", "n"),
    [("delete.recorded", 1), ("delete.config", 1), ("delete.offsets", 1), ("delete.units", 1), ("delete.units", 2)],
)
def test_a_delete_killed_at_any_step_is_finished_by_the_next_open(tmp_path: Path, point: str, n: int) -> None:
    """A delete that survives a kill at any step: ``delete_topic`` records the delete first (``deletedTopics.json``,
    pending), then removes the config entry, the offsets and the units: killed at any step
    (a crash point after each, the child waiting there for its SIGKILL), the next open finishes
    it: the topic is not listed, no group has offsets of it, its queues hold no unit; the other
    topic keeps everything."""
    from conftest import kill_at_crash_point

    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        _fill(s, "A", 10)
        _fill(s, "B", 4)
        s.commit_offset("G1", "A", 0, 3)
        s.commit_offset("G1", "B", 0, 1)
    printed = kill_at_crash_point(["-c", DELETE_CHILD, str(root)], point, n, tmp=tmp_path)
    assert "deleted" not in printed
    with rmqlog.MessageStore.open(root, read_only=True) as ro:  # a reader before the next owner: deleted
        assert "A" not in ro.topics()
    with rmqlog.MessageStore.open(root) as s:
        assert "A" not in s.topics() and "A" not in s.topic_table(), s.topics()
        assert s.committed_offset("G1", "A", 0) == -1 and s.committed_offset("G1", "B", 0) == 1
        assert _bodies(s, "A", 0) == [] and _bodies(s, "A", 1) == []
        assert _bodies(s, "B", 0) == [b"old"] * 2
        assert s.verify().ok
    raw = json.loads((root / "config" / "deletedTopics.json").read_text())
    assert raw["deletedTopics"]["A"] == {
        "commitLogOffset": raw["deletedTopics"]["A"]["commitLogOffset"],
        "queueOffsets": {"0": 5, "1": 5},
    }  # done: no longer pending


def test_a_delete_records_before_it_removes_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record is the first file written: each step sees it already on disk, pending."""
    root = tmp_path / "s"
    seen: list[str] = []
    with rmqlog.MessageStore.open(root) as s:
        _fill(s, "A", 4)
        s.commit_offset("G1", "A", 0, 1)
        path = root / "config" / "deletedTopics.json"
        remove, remove_topic = s.parts.topic_config.remove, s.parts.consumer_offsets.remove_topic

        def config_step(topic: str) -> bool:
            seen.append(
                "config:" + ("pending" if json.loads(path.read_text())["deletedTopics"][topic].get("pending") else "?")
            )
            return remove(topic)

        def offsets_step(topic: str) -> int:
            seen.append(
                "offsets:" + ("pending" if json.loads(path.read_text())["deletedTopics"][topic].get("pending") else "?")
            )
            return remove_topic(topic)

        monkeypatch.setattr(s.parts.topic_config, "remove", config_step)
        monkeypatch.setattr(s.parts.consumer_offsets, "remove_topic", offsets_step)
        assert s.delete_topic("A") == (True, 1)
    assert seen == ["config:pending", "offsets:pending"]
    assert "pending" not in json.loads(path.read_text())["deletedTopics"]["A"]


def test_a_delete_killed_while_another_process_holds_the_store_is_finished_by_the_next_opener(tmp_path: Path) -> None:
    """The next opener is not the store's first (another holds it open, no recovery runs):
    it finishes the pending delete all the same."""
    from conftest import kill_at_crash_point

    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as holder:
        _fill(holder, "A", 6)
        holder.commit_offset("G1", "A", 0, 2)
        kill_at_crash_point(["-c", DELETE_CHILD, str(root)], "delete.config", 1, tmp=tmp_path)
        assert "A" not in holder.topics()  # pending: not listed
        with rmqlog.MessageStore.open(root) as s:
            assert s.recovery is None  # (not the first opener)
            assert s.committed_offset("G1", "A", 0) == -1 and _bodies(s, "A", 0) == []
        raw = json.loads((root / "config" / "deletedTopics.json").read_text())
        assert "pending" not in raw["deletedTopics"]["A"]
