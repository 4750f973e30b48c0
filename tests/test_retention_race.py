"""Retention with other processes: readers racing deletion, and kills during and after a pass.

A read that races a deletion gets the data or a typed :class:`rmqlog.MessagesDeletedError`
(naming topic, queue and the lost offsets), never another record's data nor another error;
a file a reader of another process holds for a read in progress is not deleted. A store
killed (SIGKILL) after or in the middle of a pass reopens cleanly, verify finds nothing, and
appends go on at the right queue offsets.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import REPO_ROOT, SMALL_COMMITLOG, SMALL_CQ, batch, small_store_config, subprocess_env

import rmqlog
import rmqlog.queue.checked_read

BODY = 266  # 400-byte records: 10 per 4 KiB segment

CFG = f"rmqlog.StoreConfig(mapped_file_size_commit_log={SMALL_COMMITLOG}, mapped_file_size_consume_queue={SMALL_CQ})"

PRELUDE = f"""
import os, signal, sys, time
import numpy as np, pyarrow as pa
import rmqlog
from rmqlog.errors import MessagesDeletedError
from rmqlog.queue.checked_read import read_units
cfg = {CFG}
BODY = {BODY}

def fill(s, n, queues=2, first=0):
    qids = [i % queues for i in range(first, first + n)]
    bodies = [f"{{q}}:{{i // queues}}".encode().ljust(BODY, b".") for i, q in zip(range(first, first + n), qids)]
    s.put_batch(pa.table({{"topic": ["RT"] * n, "body": bodies, "queueId": pa.array(qids, pa.int32())}}))
    s.dispatch()
    s.flush()

def check(q, offsets, bodies):
    for o, b in zip(offsets, bodies):
        assert b.split(b".")[0] == f"{{q}}:{{o}}".encode(), (q, o, b[:16])
"""


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PRELUDE + code, *args],
        cwd=str(REPO_ROOT),
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(p: subprocess.Popen[str], timeout: float = 120) -> str:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"child did not finish in time\n{err[-3000:]}")
    assert p.returncode == 0, f"child exited with {p.returncode}:\n{err[-3000:]}"
    return out


def fill(s: rmqlog.MessageStore, n: int, queues: int = 2, first: int = 0) -> None:
    qids = [i % queues for i in range(first, first + n)]
    bodies = [
        f"{q}:{i // queues}".encode().ljust(BODY, b".") for i, q in zip(range(first, first + n), qids, strict=True)
    ]
    s.put_batch(batch(topic="RT", body=bodies, queueId=pa.array(qids, pa.int32())))
    s.dispatch()
    s.flush()


def segments(root: Path) -> list[int]:
    return sorted(int(p.name) for p in (root / "commitlog").iterdir() if len(p.name) == 20)


def check_rows(table: pa.Table, q: int) -> None:
    for o, b in zip(table["queueOffset"].to_pylist(), table["body"].to_pylist(), strict=True):
        assert b.split(b".")[0] == f"{q}:{o}".encode()


# --------------------------------------------------------------------------- readers


READER = """
root, done = sys.argv[1], sys.argv[2]
stats = dict(rows=0, deleted=0, removing=0, too_small=0, rounds=0)
with rmqlog.MessageStore.open(root, cfg, create=False) as s:
    open(done + ".ready", "w").close()
    while not os.path.exists(done):
        stats["rounds"] += 1
        for q in (0, 1):
            t = s.read_queue("RT", q, 0, 10**6)  # whatever is left, exactly
            offs = t["queueOffset"].to_pylist()
            assert offs == list(range(offs[0], offs[0] + len(offs))) if offs else True, offs[:5]
            check(q, offs, t["body"].to_pylist())
            stats["rows"] += len(offs)
            cq = s.consume_queue("RT", q)
            lo, hi, floor = s.reader.read_bounds(cq)  # planned now, read a moment later
            units = cq.read(lo, min(30, hi - lo))
            time.sleep(0.002)  # (widens the race with the retention process)
            if stats["rounds"] % 2:
                s.commitlog.min_offset()  # lets go of the mappings below the start now, as a fresh reader has none
            try:
                tab = read_units(s.commitlog, cq, units, np.arange(lo, lo + len(units)), topic="RT", queue_id=q,
                                 floor=floor, tail=s.published_tail(), check_crc=True)
            except MessagesDeletedError as e:
                assert (e.topic, e.queue_id) == ("RT", q) and lo <= e.start < e.end, (lo, e.start, e.end)
                assert e.end <= s.min_offset("RT", q)
                stats["deleted"] += 1
            else:
                check(q, tab["queueOffset"].to_pylist(), tab["body"].to_pylist())
                assert tab["queueOffset"].to_pylist() == list(range(lo, lo + len(units)))
            r = s.get_messages("g", "RT", q, lo, 16)
            if r.status is rmqlog.GetMessageStatus.FOUND:
                check(q, r.messages["queueOffset"].to_pylist(), r.messages["body"].to_pylist())
                # from lo, or from past the records deleted meanwhile (skipped, as RocketMQ does)
                skipped = r.removed[1] if r.removed is not None and r.removed[0] == lo else lo
                assert r.messages["queueOffset"].to_pylist()[0] == skipped, (lo, r.removed)
            elif r.status in (rmqlog.GetMessageStatus.MESSAGE_WAS_REMOVING, rmqlog.GetMessageStatus.OFFSET_FOUND_NULL):
                assert r.next_begin_offset > lo
                stats["removing"] += 1
            else:
                assert r.status is rmqlog.GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset > lo, r
                stats["too_small"] += 1
print(stats)
"""


@pytest.mark.parametrize("readers", [1, 2])
def test_reads_racing_deletion_in_other_processes(tmp_path: Path, readers: int) -> None:
    root = tmp_path / "store"
    done = tmp_path / "done"
    with rmqlog.MessageStore.open(root, small_store_config(delete_commit_log_files_max_num=1)) as s:
        fill(s, 1200)
        n = len(segments(root))
        children = [_spawn(READER, str(root), str(done) + str(i)) for i in range(readers)]
        try:
            for i in range(readers):
                deadline = time.monotonic() + 60
                while not Path(str(done) + str(i) + ".ready").exists():
                    assert time.monotonic() < deadline and children[i].poll() is None, children[i].stderr
                    time.sleep(0.01)  # (waits for the reader process)
            s.retention.disk_used = lambda path: 99.0  # forced: one segment per pass, whatever the age
            busy = 0
            while len(segments(root)) > 1:
                report = s.clean_expired()
                busy += len(report.busy)
                time.sleep(0.003)  # (lets the reader processes read between passes)
        finally:
            for i in range(readers):
                Path(str(done) + str(i)).touch()
        stats = [eval(_finish(c).strip().splitlines()[-1]) for c in children]  # noqa: S307 - our own child's dict
        assert all(st["rounds"] > 0 and st["rows"] > 0 for st in stats), stats
        assert segments(root) == [(n - 1) * SMALL_COMMITLOG]
        assert s.verify().ok
        print(f"passes held back by readers: {busy}; readers: {stats}")


HOLDER = """
from rmqlog.log.pins import pin, unpin
root, go, release = sys.argv[1], sys.argv[2], sys.argv[3]
with rmqlog.MessageStore.open(root, cfg, create=False) as s:
    seg = s.commitlog.segments.for_offset(0)
    assert pin(seg)  # what a read does while it reads the segment
    rows = s.read_queue("RT", 0, 0, 5)
    open(go, "w").close()
    while not os.path.exists(release):
        time.sleep(0.005)  # (waits for the test's release)
    check(0, rows["queueOffset"].to_pylist(), rows["body"].to_pylist())
    again = s.read_queue("RT", 0, 0, 5)  # through its mapping: deleted only after this
    unpin(seg)
    print(again["queueOffset"].to_pylist())
"""


def test_a_segment_another_process_is_reading_is_not_deleted(tmp_path: Path) -> None:
    root = tmp_path / "store"
    go, release = tmp_path / "go", tmp_path / "release"
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        fill(s, 100)
        s.retention.disk_used = lambda path: 99.0
        child = _spawn(HOLDER, str(root), str(go), str(release))
        deadline = time.monotonic() + 60
        while not go.exists():
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.01)  # (waits for the holder process)
        report = s.clean_expired()
        assert report.busy == [str(root / "commitlog" / f"{0:020d}")] and report.segments == []
        assert segments(root)[0] == 0
        release.touch()
        assert _finish(child).strip() == "[0, 1, 2, 3, 4]"
        assert len(s.clean_expired().segments) == 9
        assert s.min_offset("RT", 0) == 45 and s.verify().ok


def test_a_reader_that_mapped_a_segment_before_it_went_still_reads_it(tmp_path: Path) -> None:
    """A segment deleted after a reader mapped it keeps its data for that reader (never another
    record's); a reader that had not mapped it gets the typed error, naming the range."""
    root = tmp_path / "store"
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        fill(s, 100)
        cq = s.consume_queue("RT", 0)
        lo, hi, floor = s.reader.read_bounds(cq)
        units = cq.read(0, 50)
        first = rmqlog.queue.checked_read.read_units(
            s.commitlog,
            cq,
            units,
            np.arange(50),
            topic="RT",
            queue_id=0,
            floor=floor,
            tail=s.published_tail(),
            check_crc=True,
        )
        child = _spawn(
            """
with rmqlog.MessageStore.open(sys.argv[1], cfg) as s:
    s.retention.disk_used = lambda path: 99.0
    print(len(s.clean_expired().segments))
""",
            str(root),
        )
        assert _finish(child).strip() == "9"
        again = rmqlog.queue.checked_read.read_units(
            s.commitlog,
            cq,
            units,
            np.arange(50),
            topic="RT",
            queue_id=0,
            floor=floor,
            tail=s.published_tail(),
            check_crc=True,
        )
        assert again.equals(first)
        check_rows(again, 0)
        s.commitlog.min_offset()  # the process learns the new start: lets go of its mappings below it
        with pytest.raises(rmqlog.MessagesDeletedError) as err:
            rmqlog.queue.checked_read.read_units(
                s.commitlog,
                cq,
                units,
                np.arange(50),
                topic="RT",
                queue_id=0,
                floor=floor,
                tail=s.published_tail(),
                check_crc=True,
            )
        assert (err.value.topic, err.value.queue_id, err.value.start, err.value.end) == ("RT", 0, 0, 45)


# --------------------------------------------------------------------------- kills


KILLED_AFTER = """
with rmqlog.MessageStore.open(sys.argv[1], cfg) as s:
    fill(s, 300)
    s.retention.disk_used = lambda path: 99.0
    assert len(s.clean_expired().segments) == 10
    fill(s, 40, first=300)
    os.kill(os.getpid(), signal.SIGKILL)
"""

KILLED_DURING = """
import rmqlog.retention.cleaner as cleaner
import rmqlog.retention.leftovers as leftovers
from rmqlog import safe_open
where = sys.argv[2]
with rmqlog.MessageStore.open(sys.argv[1], cfg) as s:
    fill(s, 300)
    s.retention.disk_used = lambda path: 99.0
    module = cleaner if where == "rename" else leftovers  # (moves into commitlog.deleted/, unlinks there)
    real, calls = getattr(safe_open, where), []
    def killing(*args, **kw):
        calls.append(args)
        if len(calls) == 4:  # in the middle of the pass
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kw)
    module.safe_open = type(sys)("safe_open_spy")  # (the module's file calls go through safe_open)
    module.safe_open.__dict__.update(safe_open.__dict__)
    setattr(module.safe_open, where, killing)
    s.clean_expired()
"""


def _reopen_and_check(root: Path, first_left: int, appended: int) -> None:
    """Two queues, ``appended`` messages in all, 10 per segment: the log starts at the segment
    of message ``2 * first_left``."""
    for repair in (False, True):  # (repair: the walk of every segment agrees)
        with rmqlog.MessageStore.open(root, small_store_config(), repair=repair) as s:
            assert s.recovery is not None and s.recovery.abnormal is not repair  # the kill; then a clean close
            assert s.verify().ok, s.verify().problems
            assert s.commitlog.min_offset() == 2 * first_left // 10 * SMALL_COMMITLOG
            assert not list((root / "commitlog").glob(".*")) and not list((root / "commitlog.deleted").iterdir())
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        for q in (0, 1):
            assert s.min_offset("RT", q) == first_left
            rows = s.read_queue("RT", q, 0, 10**6)
            assert rows["queueOffset"].to_pylist() == list(range(first_left, appended // 2))
            check_rows(rows, q)
        assert s.put("RT", b"next", queue_id=1).queue_offset == appended // 2
        s.dispatch()
        assert s.max_offset("RT", 1) == appended // 2 + 1


def test_killed_after_a_pass(tmp_path: Path) -> None:
    root = tmp_path / "store"
    child = _spawn(KILLED_AFTER, str(root))
    child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL
    assert (root / "abort").exists()
    _reopen_and_check(root, first_left=50, appended=340)


@pytest.mark.parametrize("where", ["rename", "unlink"])
def test_killed_in_the_middle_of_a_pass(tmp_path: Path, where: str) -> None:
    root = tmp_path / "store"
    child = _spawn(KILLED_DURING, str(root), where)
    child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL
    state = json.loads((root / "retention.state").read_bytes())
    assert state["logStart"] == 10 * SMALL_COMMITLOG  # recorded before anything was removed
    assert segments(root)[0] < state["logStart"] or list((root / "commitlog.deleted").iterdir())
    _reopen_and_check(root, first_left=50, appended=300)
