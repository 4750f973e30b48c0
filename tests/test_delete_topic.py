"""``MessageStore.delete_topic``: the topic's ``topics.json`` entry and every group's offsets of
it removed, other topics' and other entries' kept; bad names refused, typed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
