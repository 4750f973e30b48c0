"""The broker's persist rounds off its event loop (no request waits for a persist):
a round runs in a thread of its own, and a persist of the consumer offsets holds the table's
lock only to take its changes, so commits, queries and pulls with a commit flag go on while
``consumerOffset.json`` is written; a commit made meanwhile is neither lost nor overwritten,
whether the persist writes the table, reads another process's file again, or fails.
Asserted by structure: the merge is held inside the store until the test lets it go."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker.consumer_offsets import ConsumerOffsetTable
from rmqnet.broker.state import StatePersistService

WAIT_S = 30  # (a deadlock's bound, never a measure)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path) -> Iterator[rmqlog.MessageStore]:
    s = rmqlog.MessageStore.open(root, small_store_config())
    s.create_topic("T", 4)
    try:
        yield s
    finally:
        s.close()


class HeldMerge:
    """``store.merge_consumer_offsets`` held at its start until :meth:`release` (or failing
    with ``error`` once released)."""

    def __init__(
        self, store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch, error: BaseException | None = None
    ) -> None:
        self.entered, self.released = threading.Event(), threading.Event()
        real = store.merge_consumer_offsets

        def held(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            assert self.released.wait(WAIT_S)
            if error is not None:
                raise error
            return real(*args, **kwargs)

        monkeypatch.setattr(store, "merge_consumer_offsets", held)

    def release(self) -> None:
        self.released.set()


def file_offsets(root: Path) -> dict[str, dict[int, int]]:
    with rmqlog.MessageStore.open(root, small_store_config(), read_only=True) as reader:
        return reader.merge_consumer_offsets({}).table


def in_thread(fn: Any) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - asserted by the test
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t, errors


def test_a_commit_during_a_persist_goes_on_and_wins(
    root: Path, store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = ConsumerOffsetTable(store)
    table.commit("G", "T", 0, 5)
    held = HeldMerge(store, monkeypatch)
    persist, errors = in_thread(table.persist)
    assert held.entered.wait(WAIT_S)
    committer, cerrors = in_thread(lambda: table.commit("G", "T", 0, 9))
    committer.join(WAIT_S)
    # the commit finished while the persist is still inside the store's merge
    assert not committer.is_alive() and not cerrors
    assert not held.released.is_set() and persist.is_alive()
    assert table.query("G", "T", 0) == 9
    held.release()
    persist.join(WAIT_S)
    assert not errors
    assert table.query("G", "T", 0) == 9  # not overwritten by the persist's older change
    assert table.pending == 1  # the commit made meanwhile: the next persist's
    monkeypatch.undo()
    assert table.persist()
    assert file_offsets(root)["T@G"] == {0: 9}


def test_a_persist_that_reads_another_writers_file_keeps_the_commits_made_meanwhile(
    root: Path, store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = ConsumerOffsetTable(store)
    table.commit("G", "T", 0, 5)
    assert table.persist()
    with rmqlog.MessageStore.open(root, small_store_config()) as other:  # another process's commit
        other.commit_offset("Spark", "T", 1, 77)
    table.commit("G", "T", 0, 6)
    held = HeldMerge(store, monkeypatch)
    persist, errors = in_thread(table.persist)
    assert held.entered.wait(WAIT_S)
    table.commit("G", "T", 2, 3)  # meanwhile
    held.release()
    persist.join(WAIT_S)
    assert not errors and table.rereads == 1
    assert table.query("Spark", "T", 1) == 77  # the other writer's entry taken in
    assert table.query("G", "T", 0) == 6
    assert table.query("G", "T", 2) == 3  # the commit made during the merge kept in the new table
    assert table.topics_of("Spark") == ["T"]
    monkeypatch.undo()
    table.persist()
    assert file_offsets(root)["T@G"] == {0: 6, 2: 3}


def test_a_failed_persist_keeps_its_changes_and_a_newer_commit_wins(
    root: Path, store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = ConsumerOffsetTable(store)
    table.commit("G", "T", 0, 5)
    table.commit("G", "T", 1, 5)
    held = HeldMerge(store, monkeypatch, error=rmqlog.DiskFullError(28, "no space", str(root)))
    persist, errors = in_thread(table.persist)
    assert held.entered.wait(WAIT_S)
    table.commit("G", "T", 0, 8)  # newer than the failing persist's change of queue 0
    held.release()
    persist.join(WAIT_S)
    assert len(errors) == 1 and isinstance(errors[0], rmqlog.DiskFullError)
    assert table.pending == 1
    monkeypatch.undo()
    assert table.persist()
    assert file_offsets(root)["T@G"] == {0: 8, 1: 5}


def test_a_background_round_leaves_the_caller_at_once_and_close_waits_for_it() -> None:
    entered, release = threading.Event(), threading.Event()
    done: list[str] = []

    def slow() -> bool:
        entered.set()
        assert release.wait(WAIT_S)
        done.append("slow")
        return True

    state = StatePersistService(lambda: 1000, [("slow", slow)], background=True)
    assert state.run_once(0) is False  # the first round: one interval on
    assert state.run_once(1000) is True  # started ...
    assert entered.wait(WAIT_S)
    assert state.running and done == []  # ... and the caller is back while it runs
    assert state.run_once(5000) is False  # a round is due, the last one still runs: none started
    release.set()
    state.close()  # waits for the round in flight, then the last round
    assert done == ["slow", "slow"] and not state.running and state.rounds == 2


def test_a_background_round_that_fails_is_logged_and_kept(caplog: pytest.LogCaptureFixture) -> None:
    def failing() -> bool:
        raise rmqlog.DiskFullError(28, "no space", "/x")

    state = StatePersistService(lambda: 1000, [("offsets", failing)], background=True)
    state.run_once(0)
    assert state.run_once(1000)
    state.wait()
    assert state.last_error is not None and state.last_error.startswith("DiskFullError")
    assert "persisting the broker's offsets failed" in caplog.text
