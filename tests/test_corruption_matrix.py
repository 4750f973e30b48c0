"""The corruption matrix: every kind of damage, with and without ``abort``, with and without
``repair=True``, and the exact outcome of each.

A store of several 4 KiB segments (two topics, six queues, everything flushed and dispatched,
closed cleanly) is damaged in a copy, then opened. The outcomes:

- ``dataloss``: :class:`rmqlog.DataLossError` names the segment file and the commitlog offset of
  the damage, and nothing on disk changed (the damage was below the flushed position);
- ``cut``: opened; the log ends where the damage starts, every message before it reads back
  exactly, the ones after are gone, ``verify()`` is clean, and new appends continue every queue
  at the right offset (what ``repair=True`` promises: the valid prefix, nothing else);
- ``on-read``: opened (a clean close checks only the last 3 segments, as RocketMQ does); the
  damage is reported by ``verify()`` (file and offset) and by a typed error when the damaged
  record is read; every other message reads back exactly;
- ``intact``: opened; every message reads back exactly and ``verify()`` is clean (the damaged
  file was a hint or a cache: rebuilt, or read from its backup);
- ``refused``: a typed :class:`rmqlog.CorruptStoreError` naming the file, nothing changed.

Record layout offsets used below: TOTALSIZE 0, MAGIC 4, BODYCRC 8, QUEUEID 12, QUEUEOFFSET 20,
PHYSICALOFFSET 28, BORNTIMESTAMP 40, STORETIMESTAMP 56, body at 88 (IPv4 hosts).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import small_store_config, snapshot_files, walk

import rmqlog

CFG = small_store_config(mapped_file_size_consume_queue=20 * 8)  # 8 units: queues have several files
SEG = CFG.mapped_file_size_commit_log
TOPICS = {"A": 4, "B": 2}


@dataclass(frozen=True)
class Msg:
    topic: str
    queue_id: int
    queue_offset: int
    offset: int  # commitlog
    body: bytes


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Msg], list[int]]:
    """The undamaged store, its messages (from the reference decoder) and its segment starts."""
    root = tmp_path_factory.mktemp("matrix") / "store"
    with rmqlog.MessageStore.open(root, CFG) as s:
        for topic, n in TOPICS.items():
            s.create_topic(topic, n)
        for i in range(12):
            topic = "A" if i % 3 else "B"
            s.put_batch(
                pa.table(
                    {
                        "topic": [topic] * 9,
                        "body": [f"{topic}-{i}-{k}-".encode() * 6 for k in range(9)],
                        "tags": [f"t{k % 3}" for k in range(9)],
                        "keys": [[f"k{i}-{k}"] for k in range(9)],
                    }
                )
            )
        s.dispatch()
    msgs = [Msg(r.topic, r.queue_id, r.queue_offset, r.physical_offset, r.body) for r in walk(root)]
    starts = sorted(int(p.name) for p in (root / "commitlog").iterdir())
    assert len(starts) >= 6 and len(msgs) == 108
    return root, msgs, starts


# --------------------------------------------------------------------------- damage


def _patch(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def _flip(path: Path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


def _seg_path(root: Path, offset: int) -> Path:
    return root / "commitlog" / f"{offset - offset % SEG:020d}"


@dataclass(frozen=True)
class Damage:
    """What was damaged: the file, and the commitlog offset where the log stops being valid."""

    path: Path
    offset: int | None = None


def _record_field(field_at: int, data: bytes | Callable[[bytes], bytes], *, old: bool) -> Callable[..., Damage]:
    def damage(root: Path, msgs: list[Msg], starts: list[int]) -> Damage:
        m = _target(msgs, starts, old=old)
        path = _seg_path(root, m.offset)
        rel = m.offset - int(path.name) + field_at
        if callable(data):
            raw = path.read_bytes()[rel : rel + 8]
            _patch(path, rel, data(raw))
        else:
            _patch(path, rel, data)
        return Damage(path, m.offset)

    return damage


def _target(msgs: list[Msg], starts: list[int], *, old: bool) -> Msg:
    """The second record of the first segment (old: outside a clean open's walk of the last 3
    segments) or of the last segment."""
    seg = starts[0] if old else starts[-1]
    return [m for m in msgs if seg <= m.offset < seg + SEG][1]


def _flip_at(rel_in_record: int, *, old: bool) -> Callable[..., Damage]:
    def damage(root: Path, msgs: list[Msg], starts: list[int]) -> Damage:
        m = _target(msgs, starts, old=old)
        path = _seg_path(root, m.offset)
        _flip(path, m.offset - int(path.name) + rel_in_record)
        return Damage(path, m.offset)

    return damage


def _blank(*, old: bool) -> Callable[..., Damage]:
    """The magic of the blank record that ends the first (old) or third-to-last segment."""

    def damage(root: Path, msgs: list[Msg], starts: list[int]) -> Damage:
        seg = starts[0] if old else starts[-3]
        end = max(m.offset + _size(root, m) for m in msgs if seg <= m.offset < seg + SEG)
        path = root / "commitlog" / f"{seg:020d}"
        _flip(path, end - seg + 4)
        return Damage(path, end)

    return damage


def _size(root: Path, m: Msg) -> int:
    path = _seg_path(root, m.offset)
    rel = m.offset - int(path.name)
    return int.from_bytes(path.read_bytes()[rel : rel + 4], "big")


def _truncated_last_segment(root: Path, msgs: list[Msg], starts: list[int]) -> Damage:
    m = _target(msgs, starts, old=False)
    path = _seg_path(root, m.offset)
    os.truncate(path, m.offset - int(path.name) + 30)  # mid-record
    return Damage(path, m.offset)


def _deleted_segment(*, old: bool) -> Callable[..., Damage]:
    def damage(root: Path, msgs: list[Msg], starts: list[int]) -> Damage:
        seg = starts[1] if old else starts[-1]
        path = root / "commitlog" / f"{seg:020d}"
        path.unlink()
        return Damage(path, seg)

    return damage


def _plus(n: int, width: int = 8) -> Callable[[bytes], bytes]:
    return lambda raw: (int.from_bytes(raw[:width], "big", signed=True) + n).to_bytes(width, "big", signed=True)


MAX_LONG = (2**63 - 1).to_bytes(8, "big")
COMMITLOG_DAMAGE: dict[str, Callable[[bool], Callable[..., Damage]]] = {
    "totalsize-negative": lambda old: _record_field(0, (0x80000000).to_bytes(4, "big"), old=old),
    "totalsize-zero": lambda old: _record_field(0, bytes(4), old=old),
    "totalsize-huge": lambda old: _record_field(0, (0x7FFFFFFF).to_bytes(4, "big"), old=old),
    "totalsize-plus-one": lambda old: _record_field(0, _plus(1, 4), old=old),
    "magic": lambda old: _flip_at(5, old=old),
    "body-crc-field": lambda old: _flip_at(9, old=old),
    "queue-id-negative": lambda old: _record_field(12, (-1).to_bytes(4, "big", signed=True), old=old),
    "queue-offset-breaks-density": lambda old: _record_field(20, _plus(5), old=old),
    "physical-offset": lambda old: _record_field(28, _plus(1), old=old),
    "born-timestamp": lambda old: _record_field(40, (-(2**63)).to_bytes(8, "big", signed=True), old=old),
    "store-timestamp": lambda old: _record_field(56, MAX_LONG, old=old),
    "body-byte": lambda old: _flip_at(88 + 10, old=old),
    "properties-length": lambda old: _flip_at(-1, old=old),  # set below: the record's PROPERTIESLENGTH
    "blank-record": lambda old: _blank(old=old),
}


def _props_length(old: bool) -> Callable[..., Damage]:
    def damage(root: Path, msgs: list[Msg], starts: list[int]) -> Damage:
        m = _target(msgs, starts, old=old)
        path = _seg_path(root, m.offset)
        rel = m.offset - int(path.name)
        at = rel + 88 + len(m.body) + 1 + len(m.topic)  # the high byte of PROPERTIESLENGTH
        _flip(path, at)
        return Damage(path, m.offset)

    return damage


COMMITLOG_DAMAGE["properties-length"] = _props_length


def _expected_commitlog(location: str, abort: bool, repair: bool) -> str:
    if repair:
        return "cut"
    if location == "last" or abort:  # the walk sees it: below the flushed position
        return "dataloss"
    return "on-read"


CASES = [
    (name, location, abort, repair)
    for name in COMMITLOG_DAMAGE
    for location in ("old", "last")
    for abort in (False, True)
    for repair in (False, True)
]


def _prepare(base: tuple[Path, list[Msg], list[int]], tmp_path: Path) -> tuple[Path, list[Msg], list[int]]:
    root, msgs, starts = base
    copy = tmp_path / "store"
    shutil.copytree(root, copy)
    return copy, msgs, starts


def _open(root: Path, *, repair: bool) -> rmqlog.MessageStore:
    return rmqlog.MessageStore.open(root, CFG, repair=repair)


def _read_all(s: rmqlog.MessageStore, topic: str, qid: int) -> list[tuple[int, int, bytes]]:
    t = s.read_queue(topic, qid, 0, 1 << 40)
    return list(zip(t["queueOffset"].to_pylist(), t["commitLogOffset"].to_pylist(), t["body"].to_pylist(), strict=True))


def _expected_rows(msgs: list[Msg], topic: str, qid: int, below: int | None = None) -> list[tuple[int, int, bytes]]:
    return [
        (m.queue_offset, m.offset, m.body)
        for m in msgs
        if m.topic == topic and m.queue_id == qid and (below is None or m.offset < below)
    ]


def _assert_outcome(outcome: str, root: Path, msgs: list[Msg], dmg: Damage, *, repair: bool) -> None:
    before = snapshot_files(root, "append.state", "flush.state", "dispatch.state", "checkpoint")
    if outcome in ("dataloss", "refused"):
        err = rmqlog.DataLossError if outcome == "dataloss" else rmqlog.CorruptStoreError
        with pytest.raises(err) as info:
            _open(root, repair=repair).close()
        assert info.value.path is not None and Path(info.value.path).name == dmg.path.name, info.value
        if outcome == "dataloss":
            assert info.value.offset == dmg.offset, info.value
        assert snapshot_files(root, "append.state", "flush.state", "dispatch.state", "checkpoint") == before
        return
    with _open(root, repair=repair) as s:
        if outcome == "cut":
            assert dmg.offset is not None
            assert s.recovery is not None and s.recovery.end == dmg.offset and s.recovery.problems
            for topic, n in TOPICS.items():
                for q in range(n):
                    assert _read_all(s, topic, q) == _expected_rows(msgs, topic, q, below=dmg.offset)
            assert s.verify().ok, s.verify().problems
            # appends go on at the right queue offsets, and read back
            for topic, n in TOPICS.items():
                for q in range(n):
                    kept = len(_expected_rows(msgs, topic, q, below=dmg.offset))
                    res = s.put(topic, b"after", queue_id=q)
                    assert res.queue_offset == kept and res.commit_log_offset >= dmg.offset
            s.dispatch()
            assert s.verify().ok
        elif outcome == "on-read":
            problems = s.verify().problems
            assert problems and Path(problems[0].path).name == dmg.path.name and problems[0].offset == dmg.offset
            victim = next((m for m in msgs if m.offset == dmg.offset), None)  # none for a blank record
            for topic, n in TOPICS.items():
                for q in range(n):
                    if victim is None or (topic, q) != (victim.topic, victim.queue_id):
                        assert _read_all(s, topic, q) == _expected_rows(msgs, topic, q)
                        continue
                    with pytest.raises(rmqlog.CorruptStoreError) as info:
                        s.read_queue(topic, q, 0, 1 << 40)
                    assert str(dmg.offset) in str(info.value)
                    for row in _expected_rows(msgs, topic, q):  # every other message still reads
                        if row[1] != dmg.offset:
                            assert _read_all_at(s, topic, q, row[0]) == [row]
        else:  # intact
            for topic, n in TOPICS.items():
                for q in range(n):
                    assert _read_all(s, topic, q) == _expected_rows(msgs, topic, q)
            assert s.verify().ok, s.verify().problems


def _read_all_at(s: rmqlog.MessageStore, topic: str, qid: int, k: int) -> list[tuple[int, int, bytes]]:
    t = s.read_queue(topic, qid, k, k + 1)
    return list(zip(t["queueOffset"].to_pylist(), t["commitLogOffset"].to_pylist(), t["body"].to_pylist(), strict=True))


@pytest.mark.parametrize(
    ("name", "location", "abort", "repair"),
    CASES,
    ids=[f"{n}-{loc}-{'abort' if a else 'clean'}-{'repair' if r else 'open'}" for n, loc, a, r in CASES],
)
def test_commitlog_damage(base, tmp_path: Path, name: str, location: str, abort: bool, repair: bool) -> None:
    root, msgs, starts = _prepare(base, tmp_path)
    dmg = COMMITLOG_DAMAGE[name](location == "old")(root, msgs, starts)
    if abort:
        (root / "abort").touch()
    _assert_outcome(_expected_commitlog(location, abort, repair), root, msgs, dmg, repair=repair)


# --------------------------------------------------------------------------- whole segments


@pytest.mark.parametrize("abort", [False, True], ids=["clean", "abort"])
@pytest.mark.parametrize("repair", [False, True], ids=["open", "repair"])
def test_last_segment_truncated_mid_record(base, tmp_path: Path, abort: bool, repair: bool) -> None:
    root, msgs, starts = _prepare(base, tmp_path)
    dmg = _truncated_last_segment(root, msgs, starts)
    if abort:
        (root / "abort").touch()
    _assert_outcome("cut" if repair else "refused", root, msgs, dmg, repair=repair)


@pytest.mark.parametrize("abort", [False, True], ids=["clean", "abort"])
@pytest.mark.parametrize("repair", [False, True], ids=["open", "repair"])
def test_last_segment_deleted(base, tmp_path: Path, abort: bool, repair: bool) -> None:
    root, msgs, starts = _prepare(base, tmp_path)
    dmg = _deleted_segment(old=False)(root, msgs, starts)
    if abort:
        (root / "abort").touch()
    if repair:
        _assert_outcome("cut", root, msgs, dmg, repair=True)
    else:
        with pytest.raises(rmqlog.DataLossError) as info:
            _open(root, repair=False).close()
        assert info.value.offset == dmg.offset


@pytest.mark.parametrize("abort", [False, True], ids=["clean", "abort"])
@pytest.mark.parametrize("repair", [False, True], ids=["open", "repair"])
def test_middle_segment_deleted(base, tmp_path: Path, abort: bool, repair: bool) -> None:
    root, msgs, starts = _prepare(base, tmp_path)
    dmg = _deleted_segment(old=True)(root, msgs, starts)
    if abort:
        (root / "abort").touch()
    if abort or repair:
        _assert_outcome(_expected_commitlog("old", abort, repair), root, msgs, dmg, repair=repair)
        return
    # a clean open does not walk it: verify names it, and reads of its messages fail typed
    gone = {m.offset for m in msgs if dmg.offset <= m.offset < dmg.offset + SEG}
    with _open(root, repair=False) as s:
        problems = s.verify().problems
        assert (Path(problems[0].path).name, problems[0].offset) == (dmg.path.name, dmg.offset)
        for topic, n in TOPICS.items():
            for q in range(n):
                for row in _expected_rows(msgs, topic, q):
                    if row[1] in gone:
                        with pytest.raises(rmqlog.CorruptQueueError, match="no commitlog segment holds its record"):
                            _read_all_at(s, topic, q, row[0])
                    else:
                        assert _read_all_at(s, topic, q, row[0]) == [row]


# --------------------------------------------------------------------------- control and state files


def _write(name: str, content: bytes) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        (root / name).write_bytes(content)

    return damage


def _delete(name: str) -> Callable[[Path], None]:
    return lambda root: (root / name).unlink()


def _flip_file(name: str, at: int) -> Callable[[Path], None]:
    return lambda root: _flip(root / name, at)


def _flip_both_slots(root: Path) -> None:
    raw = (root / "append.state").read_bytes()
    size = int.from_bytes(raw[8:12], "big")
    for slot in (0, 1):
        if int.from_bytes(raw[16 + slot * size + 8 : 16 + slot * size + 12], "big"):  # a written slot
            _flip(root / "append.state", 16 + slot * size + 20)


def _consume_queue_files(which: str) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        q = root / "consumequeue" / "A" / "1"
        files = sorted(q.iterdir())
        if which == "all":
            shutil.rmtree(root / "consumequeue")
        elif which == "queue":
            shutil.rmtree(q)
        elif which == "last":
            files[-1].unlink()
        elif which == "middle":
            assert len(files) >= 2
            files[0].unlink()
        elif which == "truncated":
            os.truncate(files[0], 30)

    return damage


STATE_DAMAGE: dict[str, Callable[[Path], None]] = {
    "checkpoint-empty": _write("checkpoint", b""),
    "checkpoint-deleted": _delete("checkpoint"),
    "checkpoint-flipped": _flip_file("checkpoint", 3),
    "append-state-empty": _write("append.state", b""),
    "append-state-deleted": _delete("append.state"),
    "append-state-garbage": _write("append.state", b"\x00garbage" * 100),
    "append-state-both-slots-torn": _flip_both_slots,
    "flush-state-empty": _write("flush.state", b""),
    "flush-state-deleted": _delete("flush.state"),
    "flush-state-flipped": _flip_file("flush.state", 5),
    "dispatch-state-garbage": _write("dispatch.state", b"{not json"),
    "dispatch-state-deleted": _delete("dispatch.state"),
    "dispatch-state-ahead": _write("dispatch.state", b'{"version": 1, "offset": 999999999, "storeTimestamp": 0}'),
    "topics-json-garbage-backup-kept": _write("config/topics.json", b"\xff\xfe{{{"),
    "consumer-offset-garbage": _write("config/consumerOffset.json", b"\xff\xfe{{{"),
    "lock-garbage": _write("lock", b"garbage!"),
    "consumequeue-all-deleted": _consume_queue_files("all"),
    "consumequeue-queue-deleted": _consume_queue_files("queue"),
    "consumequeue-last-file-deleted": _consume_queue_files("last"),
    "consumequeue-first-file-deleted": _consume_queue_files("middle"),
    "consumequeue-file-truncated": _consume_queue_files("truncated"),
}


@pytest.mark.parametrize("abort", [False, True], ids=["clean", "abort"])
@pytest.mark.parametrize("repair", [False, True], ids=["open", "repair"])
@pytest.mark.parametrize("name", list(STATE_DAMAGE))
def test_state_file_damage(base, tmp_path: Path, name: str, abort: bool, repair: bool) -> None:
    root, msgs, starts = _prepare(base, tmp_path)
    if name == "topics-json-garbage-backup-kept":
        assert (root / "config" / "topics.json.bak").exists()
    STATE_DAMAGE[name](root)
    if abort:
        (root / "abort").touch()
    _assert_outcome("intact", root, msgs, Damage(root), repair=repair)
    with _open(root, repair=False) as s:  # and it stays so
        assert s.topics().keys() >= TOPICS.keys()
        if name == "consumer-offset-garbage" and not repair:
            with pytest.raises(rmqlog.CorruptStoreError, match="consumerOffset.json"):
                s.committed_offset("g", "A", 0)


@pytest.mark.parametrize("repair", [False, True], ids=["open", "repair"])
def test_topics_json_and_its_backup_unreadable(base, tmp_path: Path, repair: bool) -> None:
    root, msgs, _ = _prepare(base, tmp_path)
    for name in ("topics.json", "topics.json.bak"):
        (root / "config" / name).write_bytes(b"\xff\xfe{{{")
    if not repair:
        with pytest.raises(rmqlog.CorruptStoreError) as info:
            _open(root, repair=False).close()
        assert info.value.path is not None and info.value.path.endswith("topics.json")
        return
    # repair: the unreadable files are set aside and the topics rebuilt from the consume queues
    _assert_outcome("intact", root, msgs, Damage(root), repair=True)
    with _open(root, repair=False) as s:
        assert {t: (c.read_queue_nums, c.write_queue_nums) for t, c in s.topics().items()} == {
            t: (n, n) for t, n in TOPICS.items()
        }
    assert any(p.name.startswith("topics.json.damaged") for p in (root / "config").iterdir())
