"""The config tables' one rule (rmqlog.config_tables): a table kept in memory merged with its
file under config.lock, the file read again only when another writer changed it, the
caller's changes winning, every other entry the file's, written only with changes; and the
store calls over it (merge_consumer_offsets, merge_subscription_groups, put_topic with
persist=False, persist_topics, topic_table). Structure is asserted (reads and writes of the
files counted), never time."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import refcodec as rc
import rmqlog
import rmqlog.config_tables as ct
from rmqlog import FileStamp, SubscriptionGroupConfig, TopicConfig


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


class Counts:
    """Reads (``load_held``) and writes (``replace_file``) of the config tables, by file name."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[str] = []
        self.writes: list[str] = []
        load, replace = ct.load_held, ct.replace_file

        def counted_load(path: Path, decode: Any = None) -> Any:
            self.reads.append(path.name)
            return load(path, decode)

        def counted_replace(path: Path, data: bytes, **kw: Any) -> None:
            self.writes.append(path.name)
            replace(path, data, **kw)

        monkeypatch.setattr(ct, "load_held", counted_load)
        monkeypatch.setattr(ct, "replace_file", counted_replace)


def _offsets_file(root: Path) -> dict[str, Any]:
    data = rc.parse_fastjson((root / "config" / "consumerOffset.json").read_text("utf-8"))
    assert isinstance(data, dict)
    return {k: {int(q): o for q, o in v.items()} for k, v in data["offsetTable"].items()}


def test_a_merge_reads_the_file_only_when_another_writer_changed_it(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with rmqlog.MessageStore.open(root) as broker, rmqlog.MessageStore.open(root) as other:
        first = broker.merge_consumer_offsets({})
        assert first.reread and not first.written and first.table == {} and first.stamp is None
        counts = Counts(monkeypatch)
        table = first.table
        table.setdefault("T@G", {})[0] = 5  # the caller's table holds its change, as a broker's does
        m = broker.merge_consumer_offsets({"T@G": {0: 5}}, base=table, since=first.stamp)
        assert (m.reread, m.written, m.table is table) == (False, True, True)
        assert counts.reads == [] and counts.writes == ["consumerOffset.json"]
        assert _offsets_file(root) == {"T@G": {0: 5}}
        # nothing changed anywhere: no read, no write
        again = broker.merge_consumer_offsets({}, base=m.table, since=m.stamp)
        assert (again.reread, again.written) == (False, False) and counts.reads == [] and len(counts.writes) == 1
        # another writer: its entry is taken in; an entry both changed: the caller's wins
        other.commit_offset("O", "T", 1, 9)
        other.commit_offset("G", "T", 0, 99)
        reads = len(counts.reads)
        m.table["T@G"][0] = 6
        merged = broker.merge_consumer_offsets({"T@G": {0: 6}}, base=m.table, since=again.stamp)
        assert merged.reread and merged.written and len(counts.reads) == reads + 1
        assert merged.table == {"T@G": {0: 6}, "T@O": {1: 9}} == _offsets_file(root)


def test_an_entry_another_writer_removed_is_removed_from_the_callers_table(root: Path) -> None:
    with rmqlog.MessageStore.open(root) as broker, rmqlog.MessageStore.open(root) as other:
        m = broker.merge_consumer_offsets({"T@G": {0: 1}, "U@G": {0: 2}})
        other.create_topic("T", 4)
        other.delete_topic("T")  # removes T@G from the file
        merged = broker.merge_consumer_offsets({}, base=m.table, since=m.stamp)
        assert merged.reread and not merged.written and merged.table == {"U@G": {0: 2}}


def test_a_file_rewritten_in_place_is_read_again(root: Path) -> None:
    with rmqlog.MessageStore.open(root) as s:
        m = s.merge_consumer_offsets({"T@G": {0: 1}})
        path = root / "config" / "consumerOffset.json"
        path.write_text(json.dumps({"offsetTable": {"T@G": {"0": 7}, "T@H": {"3": 1}}}))  # same inode, by hand
        merged = s.merge_consumer_offsets({}, base=m.table, since=m.stamp)
        assert merged.reread and merged.table == {"T@G": {0: 7}, "T@H": {3: 1}}


def test_merge_arguments_are_checked_and_nothing_is_written(root: Path) -> None:
    with rmqlog.MessageStore.open(root) as s:
        m = s.merge_consumer_offsets({"T@G": {0: 1}})
        before = (root / "config" / "consumerOffset.json").read_bytes()
        for changes, error in [
            ({"bad/t@G": {0: 1}}, rmqlog.InvalidTopicError),
            ({"T@bad g": {0: 1}}, rmqlog.InvalidGroupError),
            ({"T": {0: 1}}, rmqlog.InvalidArgumentError),
            ({"T@G": {-1: 1}}, rmqlog.InvalidArgumentError),
            ({"T@G": {0: -1}}, rmqlog.InvalidArgumentError),
            ({"T@G": {0: "1"}}, rmqlog.InvalidArgumentError),
            ({"T@G": [1]}, rmqlog.InvalidArgumentError),
            ([("T@G", 1)], rmqlog.InvalidArgumentError),
        ]:
            with pytest.raises(error):
                s.merge_consumer_offsets(changes)  # type: ignore[arg-type]
        with pytest.raises(rmqlog.InvalidArgumentError, match="base"):
            s.merge_consumer_offsets({}, base=[], since=m.stamp)  # type: ignore[arg-type]
        with pytest.raises(rmqlog.InvalidArgumentError, match="since"):
            s.merge_consumer_offsets({}, base=m.table, since=(1, 2))  # type: ignore[arg-type]
        with pytest.raises(rmqlog.InvalidArgumentError, match="names group"):
            s.merge_subscription_groups({"G": SubscriptionGroupConfig("H")})
        with pytest.raises(rmqlog.InvalidArgumentError, match="retryQueueNums"):
            s.merge_subscription_groups({"G": SubscriptionGroupConfig("G", retry_queue_nums="1")})  # type: ignore[arg-type]
        with pytest.raises(rmqlog.InvalidGroupError):
            s.merge_subscription_groups({"bad g": None})
        assert (root / "config" / "consumerOffset.json").read_bytes() == before
        assert not (root / "config" / "subscriptionGroup.json").exists()


def test_a_failed_write_keeps_the_file_and_the_next_merge_reads_it(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with rmqlog.MessageStore.open(root) as s:
        m = s.merge_consumer_offsets({"T@G": {0: 1}})
        before = (root / "config" / "consumerOffset.json").read_bytes()

        def full(path: Path, data: bytes, **kw: Any) -> None:
            raise rmqlog.DiskFullError(28, "No space left on device", str(path))

        monkeypatch.setattr(ct, "replace_file", full)
        m.table["T@G"][0] = 2
        with pytest.raises(rmqlog.DiskFullError):
            s.merge_consumer_offsets({"T@G": {0: 2}}, base=m.table, since=m.stamp)
        monkeypatch.undo()
        assert (root / "config" / "consumerOffset.json").read_bytes() == before
        retried = s.merge_consumer_offsets({"T@G": {0: 2}}, base=m.table, since=m.stamp)
        assert retried.reread and retried.table == {"T@G": {0: 2}} == _offsets_file(root)


def test_fastjson_bare_keys_are_read_and_written_back_quoted(root: Path) -> None:
    rmqlog.MessageStore.open(root).close()
    path = root / "config" / "consumerOffset.json"
    path.write_text('{"offsetTable":{"T@G":{0:250,1:251},"bad/x@G":{0:1}}}')  # RocketMQ's, and one bad name kept
    with rmqlog.MessageStore.open(root) as s:
        m = s.merge_consumer_offsets({})
        assert m.table == {"T@G": {0: 250, 1: 251}}
        s.merge_consumer_offsets({"T@G": {1: 300}}, base=m.table, since=m.stamp)
    data = json.loads(path.read_text())  # strict JSON now
    assert data["offsetTable"] == {"bad/x@G": {"0": 1}, "T@G": {"0": 250, "1": 300}}
    assert rc.parse_fastjson(path.read_text()) == data


def test_commit_offset_of_another_process_reads_the_file_once_per_change(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rmqlog command and Spark commit one entry at a time: the table of the previous call
    is used while the file stays the same (no parse per commit or per read)."""
    with rmqlog.MessageStore.open(root) as s:
        s.create_topic("T", 4)
        s.commit_offset("G", "T", 0, 1)
        counts = Counts(monkeypatch)
        for q in range(4):
            s.commit_offset("G", "T", q, 10 + q)
            assert s.committed_offset("G", "T", q) == 10 + q
        assert counts.reads == [] and counts.writes == ["consumerOffset.json"] * 4


def test_subscription_groups_round_trip(root: Path) -> None:
    with rmqlog.MessageStore.open(root) as s:
        m = s.merge_subscription_groups({})
        assert m.table == {} and m.stamp is None
        g = SubscriptionGroupConfig("G", consume_enable=False, retry_queue_nums=2)
        m.table["G"] = g
        m = s.merge_subscription_groups({"G": g}, base=m.table, since=m.stamp)
        assert m.written
    data = json.loads((root / "config" / "subscriptionGroup.json").read_text())
    assert data["subscriptionGroupTable"]["G"]["consumeEnable"] is False and data["dataVersion"]["counter"] == 1
    with rmqlog.MessageStore.open(root) as s:
        assert s.merge_subscription_groups({}).table == {"G": g}


# ------------------------------------------------------------------------ topics


def test_a_topic_put_in_memory_is_written_by_persist_topics_only(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with rmqlog.MessageStore.open(root) as s:
        s.create_topic("Admin", 2)
        counts = Counts(monkeypatch)
        tc = TopicConfig("Auto", 3, 3, perm=4, topic_sys_flag=1, order=True)
        s.put_topic(tc, persist=False)
        assert s.topic_table()["Auto"] == tc and s.topics()["Auto"] == tc
        assert s.put("Auto", b"x", queue_id=2).queue_id == 2  # the put path sees it
        assert counts.writes == [] and counts.reads == []
        assert "Auto" not in json.loads((root / "config" / "topics.json").read_text())["topicConfigTable"]
        assert s.persist_topics() is True and counts.writes == ["topics.json"]
        assert s.persist_topics() is False and counts.writes == ["topics.json"]  # nothing changed: no write
    with rmqlog.MessageStore.open(root) as s:  # perm, order and sysflag survive a restart
        assert s.topics()["Auto"] == tc and s.topics()["Admin"] == TopicConfig("Admin", 2, 2)


def test_another_processes_topics_are_taken_in_and_staged_ones_win(root: Path) -> None:
    with rmqlog.MessageStore.open(root) as broker, rmqlog.MessageStore.open(root) as other:
        broker.put_topic(TopicConfig("Mine", 2, 2), persist=False)
        other.create_topic("Theirs", 5)
        other.create_topic("Mine", 7)
        assert "Theirs" not in broker.topic_table()  # in memory: no file read at a lookup
        broker.persist_topics()
        assert broker.topic_table()["Theirs"].write_queue_nums == 5
        assert broker.topic_table()["Mine"].write_queue_nums == 2  # the staged change won
        assert (
            json.loads((root / "config" / "topics.json").read_text())["topicConfigTable"]["Mine"]["writeQueueNums"] == 2
        )


def test_a_lookup_of_an_unknown_topic_reads_no_file(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with rmqlog.MessageStore.open(root) as s:
        s.create_topic("T", 2)
        counts = Counts(monkeypatch)
        for _ in range(3):
            assert s.max_offset("Unknown", 0) == 0
            assert s.read_window("Unknown", 0, 0).status is not None
        assert counts.reads == [] and counts.writes == []


def test_put_topic_checks_its_config(root: Path) -> None:
    with rmqlog.MessageStore.open(root) as s:
        for bad, error in [
            (TopicConfig("bad/t"), rmqlog.InvalidTopicError),
            (TopicConfig("T", 0, 1), rmqlog.ConfigError),
            (TopicConfig("T", perm=9), rmqlog.ConfigError),
            (TopicConfig("T", order=1), rmqlog.ConfigError),  # type: ignore[arg-type]
            ("T", rmqlog.ConfigError),
        ]:
            with pytest.raises(error):
                s.put_topic(bad, persist=False)  # type: ignore[arg-type]
        with pytest.raises(rmqlog.InvalidArgumentError):
            s.put_topic(TopicConfig("T"), persist="no")  # type: ignore[arg-type]
        assert "T" not in s.topic_table()


def test_the_held_file_keeps_its_stamp_from_being_reused(root: Path) -> None:
    """The file last read or written stays open: its inode cannot come back under a later file
    (ext4 reuses a freed inode at once), so an equal stamp is the same file."""
    with rmqlog.MessageStore.open(root) as broker, rmqlog.MessageStore.open(root) as other:
        m = broker.merge_consumer_offsets({"T@G": {0: 1}})
        assert isinstance(m.stamp, FileStamp)
        for i in range(4):  # another process replaces the file again and again
            other.commit_offset("G", "T", 0, 10 + i)
        stamps = {other.parts.consumer_offsets.file.stamp_now()}
        assert m.stamp not in stamps and os.stat(root / "config" / "consumerOffset.json").st_ino != m.stamp.ino
        assert broker.merge_consumer_offsets({}, base=m.table, since=m.stamp).table == {"T@G": {0: 13}}


def test_a_table_read_from_its_bak_is_read_again_next_time(root: Path) -> None:
    """The file missing (as between a replacement's two renames): its ``.bak`` is read, and the
    path's stamp, which says nothing of that content, does not spare the next read."""
    with rmqlog.MessageStore.open(root) as s:
        m = s.merge_consumer_offsets({"T@G": {0: 1}})
        s.merge_consumer_offsets({"T@G": {0: 2}}, base=m.table, since=m.stamp)
        (root / "config" / "consumerOffset.json").unlink()
        from_bak = s.merge_consumer_offsets({})
        assert from_bak.table == {"T@G": {0: 1}}
        again = s.merge_consumer_offsets({}, base=from_bak.table, since=from_bak.stamp)
        assert again.reread
