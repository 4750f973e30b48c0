"""A really full disk: a store on a tiny tmpfs filled until ``ENOSPC``.

Every step that writes to the full filesystem runs in a child process: a store that stores
into a sparse page of its mapping (or, on tmpfs, even reads one) when there is no room is
killed by SIGBUS, which must show as a failed test, not as a dead test run. The parent checks
the files with the reference codec (plain reads: no mapping).

Checked, for both flush modes, with and without ``dispatch=True`` puts:

- filling the disk ends with :class:`rmqlog.DiskFullError` naming a file of the store, and the
  process lives on: a ``dispatch()`` and ``close()`` on the full disk are typed or succeed;
- every acknowledged batch is in the log, whole, and nothing else (the failed batch's bytes
  are gone), the consume queues agree with the log;
- reopening on the still-full disk gives a typed error or a store that reads every
  acknowledged message;
- after a filler file is deleted, appends and dispatches work again and ``verify`` is clean.

The tmpfs is mounted per test (root only): without the right to mount, the tests skip.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import read_queue_all, subprocess_env, units, walk

import rmqlog
import rmqlog.fileio as fio
import rmqlog.log.mapped_file as mf
from rmqlog.queue.consume_queue import ConsumeQueue

FS_MIB = 8

CHILD = r"""
import json, sys
import numpy as np
import pyarrow as pa
import rmqlog

root, action, flush, dispatch, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5]
cfg = rmqlog.StoreConfig(
    disk_space_warning_level_ratio=100, flush_disk_type=flush,
    mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=20 * 2048,
    max_hash_slot_num=4000, max_index_num=16000,  # a full-size index file alone touches ~20 MB
)
QUEUES = 3
report = {}


def error(exc):
    return {"type": type(exc).__name__, "typed": isinstance(exc, rmqlog.StoreError), "message": str(exc),
            "filename": getattr(exc, "filename", None), "appended": getattr(exc, "appended", None)}


def put(s, i, n=200):
    bodies = [b"%d:%d:" % (i, k) + b"x" * 300 for k in range(n)]
    table = pa.table({"topic": ["F"] * n, "body": bodies, "tags": ["t%d" % (k % 2) for k in range(n)],
                      "queueId": pa.array([k % QUEUES for k in range(n)], pa.int32())})
    return s.put_batch(table, dispatch=dispatch)


def readable(s, offsets):
    # every acknowledged record, by offset and (for what is dispatched) through its queue
    rows = [s.message_by_offset(o) for o in offsets]
    by_queue = sum(len(s.read_queue("F", q, 0, 1 << 40)) for q in range(QUEUES))
    return all(r is not None for r in rows), by_queue


try:
    s = rmqlog.MessageStore.open(root, cfg)
except Exception as exc:
    report["open_error"] = error(exc)
    s = None
if s is not None:
    acked = json.load(open(out + ".acked")) if action != "fill" else []
    if action == "fill":
        i = 0
        try:
            while True:
                res = put(s, i)
                acked.append([i, 200, res["commitLogOffset"][0].as_py(), res["commitLogOffset"][-1].as_py()])
                i += 1
        except Exception as exc:
            report["put_error"] = error(exc)
            report["failed_batch"] = i
        json.dump(acked, open(out + ".acked", "w"))
    if action == "resume":
        i = max(a[0] for a in acked) + 1000
        try:
            res = put(s, i)
            acked.append([i, 200, res["commitLogOffset"][0].as_py(), res["commitLogOffset"][-1].as_py()])
            report["resumed"] = i
        except Exception as exc:
            report["put_error"] = error(exc)
        json.dump(acked, open(out + ".acked", "w"))
    try:
        report["dispatched"] = s.dispatch()
    except Exception as exc:
        report["dispatch_error"] = error(exc)
    try:
        ok, report["by_queue"] = readable(s, [o for a in acked for o in a[2:]])
        report["readable"] = ok
        v = s.verify(); report["verify"] = v.ok; report["problems"] = [str(p) for p in v.problems][:5]
    except Exception as exc:
        report["read_error"] = error(exc)
    report["tail"] = s.published_tail()
    try:
        s.close()
    except Exception as exc:
        report["close_error"] = error(exc)
json.dump(report, open(out, "w"))
"""


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of FS_MIB MiB, unmounted after the test (skips where it cannot be mounted)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FS_MIB}m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip() or res.returncode}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=True)  # busy: detach it all the same


def run_child(root: Path, action: str, flush: str, dispatch: bool, out: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), action, flush, "1" if dispatch else "0", str(out)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != -signal.SIGBUS, f"{action}: killed by SIGBUS\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{action}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text())


def assert_typed_or_absent(report: dict, key: str) -> None:
    err = report.get(key)
    assert err is None or (err["typed"] and err["type"] == "DiskFullError"), (key, err)


@pytest.mark.parametrize("dispatch", [False, True], ids=["put", "put+dispatch"])
@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_a_full_disk_is_typed_harmless_and_recoverable(
    small_fs: Path, tmp_path: Path, flush: str, dispatch: bool
) -> None:
    root = small_fs / "store"
    out = tmp_path / "report.json"  # outside the full filesystem
    filler = small_fs / "filler"
    filler.write_bytes(b"f" * (1 << 20))  # deleted later: the space that comes back

    fill = run_child(root, "fill", flush, dispatch, out)
    err = fill["put_error"]
    assert err["type"] == "DiskFullError" and err["typed"], err
    assert err["filename"] and err["filename"].startswith(str(root)), err
    assert fill["failed_batch"] > 3  # the disk filled up, not a refusal from the start
    for key in ("dispatch_error", "close_error", "read_error"):
        assert_typed_or_absent(fill, key)
    assert fill["readable"] and fill["verify"], fill
    acked = json.loads((tmp_path / "report.json.acked").read_text())
    # the failed put appended nothing, unless it says its batch was appended (a failed
    # SYNC_FLUSH flush, or the dispatch of dispatch=True, after the append)
    extra = [fill["failed_batch"]] if err["appended"] else []

    def expected(batches: list[int]) -> list[bytes]:
        return [b"%d:%d:" % (i, k) + b"x" * 300 for i in batches for k in range(200)]

    records = walk(root)
    assert [r.body for r in records] == expected([a[0] for a in acked] + extra)
    assert records[-1].physical_offset + records[-1].total_size == fill["tail"]

    again = run_child(root, "reopen", flush, dispatch, out)  # still full
    if "open_error" in again:
        assert again["open_error"]["typed"], again
    else:
        for key in ("dispatch_error", "close_error", "read_error"):
            assert_typed_or_absent(again, key)
        assert again["readable"] and again["verify"], again

    filler.unlink()
    resumed = run_child(root, "resume", flush, dispatch, out)
    assert "open_error" not in resumed and "put_error" not in resumed, resumed
    assert "dispatch_error" not in resumed and resumed["readable"] and resumed["verify"], resumed
    acked = json.loads((tmp_path / "report.json.acked").read_text())
    bodies = expected([a[0] for a in acked[:-1]] + extra + [resumed["resumed"]])
    records = walk(root)
    assert [r.body for r in records] == bodies
    assert resumed["by_queue"] == len(bodies)  # every message reachable through its queue
    for q in range(3):  # and the queues agree with the log, unit for unit
        mine = [r for r in records if r.queue_id == q]
        assert [(u[0], u[1]) for u in units(root, "F", q)] == [(r.physical_offset, r.total_size) for r in mine]


# --------------------------------------------------------------------------- injected ENOSPC


def _enospc(*args: object) -> int:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_consume_queue_write_cut_short_leaves_no_torn_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC after 32 bytes of a queue's units (one whole unit and 12 bytes of the next: its
    offset and size, not its tag hash): the dispatch fails typed and the half unit does not
    count as written, so the next dispatch writes it whole and a tag filter finds it. (It
    used to stay: counted as written by its size, with a zero tag hash, for good.)"""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        s.put_batch(
            pa.table(
                {
                    "topic": ["Q"] * 3,
                    "body": [b"a", b"b", b"c"],
                    "tags": ["A"] * 3,
                    "queueId": pa.array([0] * 3, pa.int32()),
                }
            )
        )
        real = os.pwrite

        def short(fd: int, data: object, offset: int) -> int:
            view = memoryview(data).cast("B")  # type: ignore[arg-type]
            if offset >= 32:  # no room past the first 32 bytes (the bytes there can be rewritten)
                _enospc()
            return real(fd, view[: 32 - offset], offset)

        with monkeypatch.context() as m:
            m.setattr(mf.os, "pwrite", short)
            with pytest.raises(rmqlog.DiskFullError) as info:
                s.dispatch()
        assert info.value.filename == str(root / "consumequeue" / "Q" / "0" / f"{0:020d}")
        assert s.max_offset("Q", 0) == 0 and units(root, "Q", 0) == []
        assert s.dispatch() == 3
        assert [r["body"] for r in read_queue_all(s, "Q", 0, tags="A")] == [b"a", b"b", b"c"]
        assert s.verify().ok


def test_the_dispatch_position_stays_behind_when_it_cannot_be_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk when the position is saved: the units are written and the dispatch
    succeeds; the file keeps the older position (a hint), from which the next dispatch walks
    again without writing a unit twice. Recovery moving the position back when even that
    write fails removes the file, as the position derived without it is not past the new
    one; where it would be, the error is raised."""
    from rmqlog.queue.dispatch_position import DispatchPositionFile

    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        s.put_batch(pa.table({"topic": ["P"] * 4, "body": [b"x"] * 4, "queueId": pa.array([0] * 4, pa.int32())}))
        assert s.dispatch() == 4
        saved = s.dispatcher.position()
        s.put_batch(pa.table({"topic": ["P"] * 2, "body": [b"y"] * 2, "queueId": pa.array([0] * 2, pa.int32())}))
        before = (root / "dispatch.state").read_bytes()
        with monkeypatch.context() as m:

            def no_room(self: DispatchPositionFile, offset: int, store_timestamp: int) -> None:
                raise rmqlog.DiskFullError(errno.ENOSPC, "No space left on device", str(self.path))

            m.setattr(DispatchPositionFile, "write", no_room)  # the position's rewrite: no room
            assert s.dispatch() == 2
            assert s.dispatcher.position() == saved and (root / "dispatch.state").read_bytes() == before
            with pytest.raises(rmqlog.DiskFullError):
                s.dispatcher.set_position(0)  # the queues reach past 0: cannot go back without the file
            assert not (root / "dispatch.state").exists()  # (removed: the derived position stands)
        assert s.dispatcher.position() == s.published_tail()  # derived from the queues
        s.dispatcher.set_position(0)
        assert s.dispatcher.position() == 0
        assert s.dispatch() == 6  # walked again: every unit already there is skipped
        assert [u[0] for u in units(root, "P", 0)] == [r.physical_offset for r in walk(root)]
        assert s.max_offset("P", 0) == 6 and s.verify().ok
    assert DispatchPositionFile.write  # the file under test


def test_a_put_whose_dispatch_fails_says_its_batch_was_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dispatch=True`` and no room for the units: the batch is in the log (published), so the
    DiskFullError says ``appended`` (a retry would append it again); the next dispatch writes
    the units. A failed append says the opposite."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        s.put_batch(pa.table({"topic": ["D"], "body": [b"first"]}), dispatch=True)
        tail = s.published_tail()
        with monkeypatch.context() as m:
            m.setattr(ConsumeQueue, "_write_at", lambda self, first, u: _enospc())
            with pytest.raises(rmqlog.DiskFullError) as info:
                s.put_batch(pa.table({"topic": ["D"], "body": [b"second"]}), dispatch=True)
        assert info.value.appended and "WAS appended" in str(info.value)
        assert s.message_by_offset(tail)["body"] == b"second"  # type: ignore[index]
        assert s.dispatch() == 1
        with monkeypatch.context() as m:
            m.setattr(mf.os, "pwrite", _enospc)
            with pytest.raises(rmqlog.DiskFullError) as info:
                s.put_batch(pa.table({"topic": ["D"], "body": [b"third"]}), dispatch=True)
        assert not info.value.appended and "nothing was published" in str(info.value)
        assert info.value.filename == str(root / "commitlog" / f"{0:020d}")
        assert sum(len(read_queue_all(s, "D", q)) for q in range(8)) == 2 and s.verify().ok


def test_replacing_a_file_on_a_full_disk_keeps_the_old_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """topics.json, consumerOffset.json, dispatch.state: typed, naming the file; the old
    content stays and no partial temporary file is left taking space."""
    path = tmp_path / "f" / "topics.json"
    path.parent.mkdir()
    fio.replace_file(path, b"old", keep_backup=True)
    with rmqlog.MessageStore.open(tmp_path / "s") as s:
        s.commit_offset("g", "T", 0, 4)
        monkeypatch.setattr(fio.os, "write", lambda fd, data: os.pwrite(fd, bytes(data)[:1], 0) and _enospc())
        with pytest.raises(rmqlog.DiskFullError) as info:
            fio.replace_file(path, b"new content", keep_backup=True)
        assert info.value.filename == str(path) and info.value.errno == errno.ENOSPC
        assert path.read_bytes() == b"old" and sorted(p.name for p in path.parent.iterdir()) == ["topics.json"]
        with pytest.raises(rmqlog.DiskFullError) as info:
            s.commit_offset("g", "T", 0, 5)
        assert info.value.filename == str(tmp_path / "s" / "config" / "consumerOffset.json")
        monkeypatch.undo()
        assert s.committed_offset("g", "T", 0) == 4


def test_reads_bounded_at_the_first_hole_find_the_same_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tmpfs read bounds (consume-queue ends, scans past the data), forced on here: the
    same queue ends, reads and rebuilt tail as unbounded, across segment rolls, a truncation
    and a rebuild of the append state from the log."""
    monkeypatch.setattr(mf, "hole_reads_allocate", lambda path: True)
    root = tmp_path / "s"
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=64 << 10, mapped_file_size_consume_queue=20 * 300)
    with rmqlog.MessageStore.open(root, cfg) as s:
        assert s.commitlog.segments.bounded_reads
        for i in range(7):
            s.put_batch(
                pa.table(
                    {
                        "topic": ["B"] * 250,
                        "body": [b"%d" % i + b"b" * 150] * 250,
                        "queueId": pa.array([0] * 250, pa.int32()),
                    }
                ),
                dispatch=True,
            )
        cq = s.consume_queue("B", 0)
        assert cq.segments.bounded_reads and len(cq.segments.segment_starts()) == 6
        assert (s.min_offset("B", 0), s.max_offset("B", 0)) == (0, 1750)
        cq.truncate(1000)  # clears the rest of its segment: punched
        assert s.max_offset("B", 0) == 1000
        assert s.dispatch() == 0 and s.max_offset("B", 0) == 1000  # the position is past: a hint
        tail = s.published_tail()
        (root / "append.state").unlink()  # rebuilt by the next put, by a scan to the data's end
        res = s.put_batch(pa.table({"topic": ["B"], "body": [b"last"], "queueId": pa.array([0], pa.int32())}))
        assert res["commitLogOffset"][0].as_py() == tail and res["queueOffset"][0].as_py() == 1750
    (root / "dispatch.state").unlink()
    with rmqlog.MessageStore.open(root, cfg) as s:
        s.dispatch()
        assert s.max_offset("B", 0) == 1751 and s.verify().ok
        assert len(read_queue_all(s, "B", 0, max_count=500)) == 1751


def test_a_dispatch_cut_short_leaves_every_queue_where_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No room for queue 1's units after queue 0's were written: queue 0's go too, so the
    queues still end at the same record. Otherwise the position derived from the queues
    (``dispatch.state`` absent: never saved, or lost) starts past queue 1's records, and
    their units are never written."""
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as s:
        s.put_batch(
            pa.table(
                {
                    "topic": ["R"] * 6,
                    "body": [b"r%d" % i for i in range(6)],
                    "queueId": pa.array([0, 1] * 3, pa.int32()),
                }
            )
        )
        real = ConsumeQueue._write_at

        def no_room_for_queue_1(self: ConsumeQueue, first: int, u: object) -> None:
            if self.directory.name == "1":
                raise rmqlog.DiskFullError(errno.ENOSPC, "injected", str(self.directory))
            real(self, first, u)  # type: ignore[arg-type]

        with monkeypatch.context() as m:
            m.setattr(ConsumeQueue, "_write_at", no_room_for_queue_1)
            with pytest.raises(rmqlog.DiskFullError):
                s.dispatch()
        assert (s.max_offset("R", 0), s.max_offset("R", 1)) == (0, 0)
        (root / "dispatch.state").unlink(missing_ok=True)
        assert s.dispatch() == 6
        assert (s.max_offset("R", 0), s.max_offset("R", 1)) == (3, 3) and s.verify().ok
