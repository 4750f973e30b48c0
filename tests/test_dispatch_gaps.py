"""Consume queues whose units are missing below where dispatching stands: walked back for, never
hidden behind fillers.

The torture job found it (seed 17, trial 0, on a loaded machine): a store's first opener was
killed while its recovery dispatched, after some queues of a run had their units and before
the others did. ``dispatch.state`` had never been saved, so the next opener derived the
position RocketMQ's way (the largest end any queue references), which skipped the records
of the queues still without units; their next records then got fillers in place of the
missing units, and fillers count as units, so the recovery's completeness check passed:
acknowledged messages could not be read, and ``verify`` said nothing.

Now the derived position stops at the resume point of every queue short of the append
state's next offset, a gap in a queue makes the dispatch walk back for it (fillers only when
the records are not in the log), and ``verify`` reports fillers standing in for records the
log holds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import kill_at_crash_point, subprocess_env

import refcodec as rc
import rmqlog
from rmqlog.queue.consume_queue import CQ_UNIT, FILLER_SIZE

CFG = dict(mapped_file_size_commit_log=64 << 10, mapped_file_size_consume_queue=20 * 100)

#: four batches over three topics: A round-robin over its 4 queues, B on queue 1, C on 0 and 2
#: (each batch meets the queues in another order, so a run's queues are written in turns)
WRITE = r"""
import sys, pyarrow as pa, rmqlog
root, dispatch = sys.argv[1], sys.argv[2] == "dispatch"
s = rmqlog.MessageStore.open(root, rmqlog.StoreConfig(**eval(sys.argv[3])))
for b in range(4):
    topics = (["C", "A", "B", "A"] if b % 2 else ["A", "B", "C", "A"]) * 6
    qids = [[0, 2][i % 2] if t == "C" else 1 if t == "B" else None for i, t in enumerate(topics)]
    s.put_batch(pa.table({"topic": topics, "body": [b"b%d-%d" % (b, i) for i in range(len(topics))],
                          "queueId": pa.array(qids, pa.int32())}))
print("put", flush=True)
if dispatch:
    s.dispatch()
s.close()
"""

OPEN = r"""
import sys, rmqlog
s = rmqlog.MessageStore.open(sys.argv[1], rmqlog.StoreConfig(**eval(sys.argv[2])))
print("opened", flush=True)
s.close()
"""


def _expected_units(root: Path) -> dict[str, list[tuple[int, int, int]]]:
    """Per queue, the units the log's records need (the reference decoder's walk)."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for r in sorted(rc.walk_commitlog(str(root / "commitlog")), key=lambda r: (r.topic, r.queue_id, r.queue_offset)):
        out.setdefault(f"{r.topic}/{r.queue_id}", []).append((r.physical_offset, r.total_size, r.tags_code))
    return out


def _queue_files(root: Path) -> dict[str, list[tuple[int, int, int]]]:
    return {
        f"{q.parent.name}/{q.name}": rc.read_consume_queue(str(q)) for q in sorted((root / "consumequeue").glob("*/*"))
    }


def _assert_whole(root: Path, s: rmqlog.MessageStore) -> None:
    """Every queue's units are the log's (no filler), read_queue reads every message, verify is clean."""
    want = _expected_units(root)
    assert _queue_files(root) == want
    for name, units in want.items():
        topic, q = name.rsplit("/", 1)
        assert (s.min_offset(topic, int(q)), s.max_offset(topic, int(q))) == (0, len(units))
        got = s.read_queue(topic, int(q), 0, len(units))
        assert got["commitLogOffset"].to_pylist() == [u[0] for u in units]
    assert s.verify().problems == []


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 4, 6])
def test_a_first_opener_killed_between_two_queues_units_loses_none(tmp_path: Path, n: int) -> None:
    """The torture failure: a writer closes cleanly with nothing dispatched; the next opener's
    recovery dispatch is killed after ``n`` queues of the run got their units. The opener
    after it (a normal recovery: the killed one had not finished) must give every queue all
    its units, and appends after it land at the right queue offsets."""
    root = tmp_path / "s"
    subprocess.run(
        [sys.executable, "-c", WRITE, str(root), "no", repr(CFG)], check=True, env=subprocess_env(), timeout=120
    )
    assert kill_at_crash_point(["-c", OPEN, str(root), repr(CFG)], "dispatch.queue", n, tmp=tmp_path) == []
    with rmqlog.MessageStore.open(root, rmqlog.StoreConfig(**CFG)) as s:
        assert s.recovery is not None and not s.recovery.abnormal
        _assert_whole(root, s)
        s.put_batch(pa.table({"topic": ["A"] * 8, "body": [b"after"] * 8}))
        s.dispatch()
        _assert_whole(root, s)


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 3])
def test_a_writer_killed_between_two_queues_units_loses_none(tmp_path: Path, n: int) -> None:
    """The same kill inside a writer's own dispatch (the store open: an abnormal recovery)."""
    root = tmp_path / "s"
    assert kill_at_crash_point(["-c", WRITE, str(root), "dispatch", repr(CFG)], "dispatch.queue", n, tmp=tmp_path) == [
        "put"
    ]
    with rmqlog.MessageStore.open(root, rmqlog.StoreConfig(**CFG)) as s:
        assert s.recovery is not None and s.recovery.abnormal
        _assert_whole(root, s)


def _put(s: rmqlog.MessageStore, tag: str) -> pa.Table:
    return s.put_batch(
        pa.table(
            {
                "topic": ["A", "A", "B"] * 4,
                "body": [f"{tag}{i}".encode() for i in range(12)],
                "queueId": pa.array([0, 1, 0] * 4, pa.int32()),
            }
        )
    )


def test_a_position_past_missing_units_is_walked_back_for(tmp_path: Path) -> None:
    """``dispatch.state`` ahead of a queue's units (here set there on purpose): the next
    records of that queue make the dispatch walk back for the missing ones; no filler."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, rmqlog.StoreConfig(**CFG)) as s:
        first = _put(s, "x")
        end = int(first["commitLogOffset"][-1].as_py()) + 200  # (a record is < 200 bytes here)
        s.parts.dispatcher.save_position(s.published_tail(), 0)  # the first batch skipped
        assert end >= s.published_tail()
        _put(s, "y")
        s.dispatch()
        _assert_whole(root, s)
        assert s.read_queue("A", 0, 0, 100)["body"].to_pylist()[:4] == [b"x0", b"x3", b"x6", b"x9"]


def test_the_derived_position_stops_at_a_queue_short_of_its_units(tmp_path: Path) -> None:
    """Without ``dispatch.state`` the position is RocketMQ's (the largest end any queue
    references) only where no queue has fewer units than the append state gives it."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, rmqlog.StoreConfig(**CFG)) as s:
        _put(s, "x")
        s.dispatch()
        tail = s.published_tail()
        assert s.parts.dispatcher._derive_position() == tail
        # queue A/1 loses its units (a kill before they were written): it resumes at its start
        s.parts.queues.get("A", 1).truncate(0)
        assert s.parts.dispatcher._derive_position() == 0
        (root / "dispatch.state").unlink()
        s.dispatch()
        _assert_whole(root, s)


def test_a_gap_whose_records_are_not_in_the_log_is_filled_once(tmp_path: Path) -> None:
    """A queue whose units stop short while the records between are nowhere in the log (its
    units past a damaged queue offset, here units cut by hand and the walk-back already
    done): the dispatch walks back once, finds nothing, and fills; it does not loop."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, rmqlog.StoreConfig(**CFG)) as s:
        _put(s, "x")
        s.dispatch()
        cq = s.parts.queues.get("A", 0)
        # queue A/0's units claim 2 more messages than the log has (a damaged next offset)
        state = s.parts.state_file.load()
        assert state is not None
        state.queues["A/0"] += 2
        with s.parts.append_lock.held():
            s.parts.state_file.publish(state)
        out = _put(s, "y")
        assert out["queueOffset"].to_pylist()[:3] == [6, 4, 4]
        s.dispatch()
        units = cq.read(0, cq.max_offset())
        assert cq.max_offset() == 10
        assert units["size"].tolist()[4:6] == [FILLER_SIZE, FILLER_SIZE]  # offsets 4, 5: no record has them
        assert s.read_queue("A", 0, 0, 10)["body"].to_pylist() == [
            b"x0",
            b"x3",
            b"x6",
            b"x9",
            b"y0",
            b"y3",
            b"y6",
            b"y9",
        ]


def test_verify_reports_fillers_standing_in_for_records_the_log_holds(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root, rmqlog.StoreConfig(**CFG)) as s:
        _put(s, "x")
        s.dispatch()
        assert s.verify().problems == []
        filler = np.zeros(2, CQ_UNIT)
        filler["size"] = FILLER_SIZE
        path = root / "consumequeue" / "A" / "1" / f"{0:020d}"
        with open(path, "r+b") as f:
            f.write(filler.tobytes())
        problems = s.verify().problems
        assert len(problems) == 1 and problems[0].path == str(path.parent) and problems[0].offset == 0
        assert "filler units in place of records the commitlog holds (2 from queue offset 0)" in problems[0].detail
