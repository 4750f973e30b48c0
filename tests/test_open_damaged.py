"""Opening damaged stores: each damage reproduced as a user once met it,
with what it did then (the corruption matrix covers every damage systematically)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import FIXTURE_COMMITLOG, copy_file, small_store_config

import rmqlog
from rmqlog.admin.cli import main as cli

CFG = small_store_config()


def _fill(root: Path, n: int = 1000) -> pa.Table:
    with rmqlog.MessageStore.open(root, CFG) as s:
        out = s.put_batch(pa.table({"topic": ["t"] * n, "body": [b"x%d" % i for i in range(n)]}))
        s.dispatch()
    return out


@pytest.mark.parametrize("where", ["first", "last"])
@pytest.mark.parametrize("abort", [False, True])
def test_a_negative_totalsize_never_makes_the_store_unopenable(root: Path, where: str, abort: bool) -> None:
    """0x80000000 over a TOTALSIZE raised IndexError from the scan, even with repair."""
    out = _fill(root, 200)
    segs = sorted((root / "commitlog").iterdir())
    seg = segs[0] if where == "first" else segs[-1]
    victim = next(o for o in out["commitLogOffset"].to_pylist() if o >= int(seg.name))
    with open(seg, "r+b") as f:
        f.seek(victim - int(seg.name))
        f.write((0x80000000).to_bytes(4, "big"))
    if abort:
        (root / "abort").touch()
    if where == "last" or abort:  # the walk meets it: below the flushed position
        with pytest.raises(rmqlog.DataLossError, match="TOTALSIZE -2147483648 out of range") as info:
            rmqlog.MessageStore.open(root, CFG)
        assert info.value.offset == victim and info.value.path == str(seg)
    with rmqlog.MessageStore.open(root, CFG, repair=True) as s:
        assert s.recovery is not None and s.recovery.end == victim
        assert s.verify().ok


def test_a_poisoned_store_timestamp_is_damage_not_a_poisoned_state(root: Path) -> None:
    """STORETIMESTAMP 0x7FFF... and append.state deleted: verify said OK and every later
    put failed with OverflowError, even after repair=True."""
    out = _fill(root, 30)
    last = out["commitLogOffset"].to_pylist()[-1]
    seg = root / "commitlog" / f"{last - last % CFG.mapped_file_size_commit_log:020d}"
    with open(seg, "r+b") as f:
        f.seek(last - int(seg.name) + 56)
        f.write((2**63 - 1).to_bytes(8, "big"))
    (root / "append.state").unlink()
    with pytest.raises(rmqlog.DataLossError, match="STORETIMESTAMP 9223372036854775807 is out of range"):
        rmqlog.MessageStore.open(root, CFG)
    with rmqlog.MessageStore.open(root, CFG, repair=True) as s:
        assert s.published_tail() == last
        res = s.put("t", b"after")
        assert res.commit_log_offset == last and res.store_timestamp.year < 3000
        assert s.verify().ok


def test_a_deleted_consume_queue_is_rebuilt_at_open(root: Path) -> None:
    """consumequeue/ deleted after a clean close: every message unreadable,
    dispatch() returned 0 and verify() was clean."""
    _fill(root)
    shutil.rmtree(root / "consumequeue")
    with rmqlog.MessageStore.open(root, CFG) as s:
        assert [s.max_offset("t", q) for q in range(4)] == [250] * 4
        assert s.read_queue("t", 3, 0, 250)["body"].to_pylist()[-1] == b"x999"
        assert s.dispatch() == 0 and s.verify().ok


def test_a_lost_last_queue_file_leaves_no_hole(root: Path) -> None:
    """one queue's last file deleted: 50 messages vanished and the next put took
    queue offset 250, leaving a hole."""
    _fill(root)
    q = root / "consumequeue" / "t" / "2"
    sorted(q.iterdir())[-1].unlink()
    with rmqlog.MessageStore.open(root, CFG) as s:
        assert s.max_offset("t", 2) == 250
        assert s.put("t", b"next", queue_id=2).queue_offset == 250
        s.dispatch()
        assert s.read_queue("t", 2, 248, 251)["body"].to_pylist() == [b"x994", b"x998", b"next"]
        assert s.verify().ok


def test_verify_reports_missing_units_of_an_open_store(root: Path) -> None:
    _fill(root)
    with rmqlog.MessageStore.open(root, CFG) as s:
        shutil.rmtree(root / "consumequeue" / "t" / "1")
        problems = s.verify().problems
        assert [(Path(p.path).name, p.offset) for p in problems] == [("1", 0)]
        assert "units missing" in problems[0].detail


def test_repair_fixes_a_last_segment_truncated_mid_record(root: Path) -> None:
    """ "segments of different sizes" even with repair=True."""
    out = _fill(root, 100)
    seg = sorted((root / "commitlog").iterdir())[-1]
    first = next(o for o in out["commitLogOffset"].to_pylist() if o >= int(seg.name))
    os.truncate(seg, first - int(seg.name) + 40)
    with pytest.raises(rmqlog.CorruptStoreError, match="repair=True") as info:
        rmqlog.MessageStore.open(root, CFG)
    assert info.value.path == str(seg)
    with rmqlog.MessageStore.open(root, CFG, repair=True) as s:
        assert s.published_tail() == first  # (the segment held nothing else: gone)
        assert not seg.exists() or seg.stat().st_size == CFG.mapped_file_size_commit_log
        assert s.verify().ok


def test_an_empty_checkpoint_beside_abort_only_means_a_longer_walk(root: Path) -> None:
    """ "checkpoint is 0 bytes" beside an abort file, even with repair=True."""
    _fill(root, 100)
    (root / "checkpoint").write_bytes(b"")
    (root / "abort").touch()
    with rmqlog.MessageStore.open(root, CFG) as s:
        assert s.recovery is not None and s.recovery.abnormal and s.recovery.walk_start == 0
        assert sum(s.max_offset("t", q) for q in range(4)) == 100


def test_a_rocketmq_store_reads_at_once_and_lists_its_topics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """after a normal open, `rmqlog read` found nothing until `rmqlog dispatch`, and
    topics()/`rmqlog info` listed only topics.json."""
    root = tmp_path / "broker"
    copy_file(FIXTURE_COMMITLOG, root / "commitlog" / FIXTURE_COMMITLOG.name)
    with rmqlog.MessageStore.open(root) as s:  # a first open: dispatched like a broker's start-up
        pass
    (root / "config" / "topics.json").unlink(missing_ok=True)
    assert cli(["read", str(root), "abc", "0", "--count", "3", "--body", "none"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert cli(["info", str(root)]) == 0
    assert "abc" in capsys.readouterr().out
    with rmqlog.MessageStore.open(root) as s:
        assert {t: c.read_queue_nums for t, c in s.topics().items()} == {"abc": 1}


def test_queue_offset_far_past_its_queue_costs_one_file(tmp_path: Path) -> None:
    """A unit written far past a queue's end (a damaged QUEUEOFFSET) gets fillers from the start
    of its own file only (RocketMQ's fillPreBlank), never one per missing unit."""
    from rmqlog.queue.consume_queue import CQ_UNIT, ConsumeQueue

    cq = ConsumeQueue(tmp_path / "cq" / "t" / "0", 20 * 100)
    unit = np.zeros(1, CQ_UNIT)
    unit["size"] = 100
    first = 1 << 35
    assert cq.write(first, unit, 0) == 1
    files = sorted(p.name for p in (tmp_path / "cq" / "t" / "0").iterdir())
    assert files == [f"{(first - first % 100) * 20:020d}"]
    assert cq.read(first, 1)["size"].tolist() == [100]
    assert cq.max_offset() == first + 1
    cq.close()


def test_auto_created_topic_takes_the_queues_it_has_on_disk(tmp_path: Path) -> None:
    """A topic the log has but topics.json lacks lists as many queues as its folders say; a put
    auto-creating it gets that many too (not the default 4), so every listed queue takes puts."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        s.create_topic("t", 8)
        for q in range(8):
            s.put("t", b"x", queue_id=q)
        s.dispatch()
    (root / "config" / "topics.json").unlink()
    with rmqlog.MessageStore.open(root) as s:
        assert s.topics()["t"].write_queue_nums == 8
        assert s.put("t", b"y", queue_id=7).queue_offset == 1
        assert s.topics()["t"].write_queue_nums == 8


def _empty_commitlog(root: Path) -> None:
    for seg in (root / "commitlog").iterdir():
        seg.unlink()
    (root / "abort").touch()  # as a killed owner leaves it


def test_a_log_emptied_after_its_data_was_flushed_is_data_loss(root: Path) -> None:
    _fill(root, 50)  # closed: flushed
    _empty_commitlog(root)
    with pytest.raises(rmqlog.DataLossError, match="holds no segment"):
        rmqlog.MessageStore.open(root, CFG)


def test_a_power_loss_before_the_first_flush_opens_an_empty_log(root: Path) -> None:
    # append.state's publishes reached the disk, the segments' names did not, and nothing was
    # ever flushed: nothing was acknowledged as durable (ASYNC_FLUSH), so the log starts over
    _fill(root, 50)
    from rmqlog.durability.flush import FlushPosition, FlushStateFile

    state = FlushStateFile(root / "flush.state")
    state.write(FlushPosition(0, 0))
    state.close()
    _empty_commitlog(root)
    with rmqlog.MessageStore.open(root, CFG) as s:
        assert s.recovery is not None and s.recovery.published and not s.recovery.flushed
        assert s.published_tail() == 0 and s.read_queue("t", 0, 0, 10).num_rows == 0
        assert s.put("t", b"after", queue_id=0).queue_offset == 0
