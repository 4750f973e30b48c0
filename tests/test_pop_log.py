"""The POP checkpoint log (rmqlog.pop_log): records kept in order, a torn or damaged end cut at
load (what a crash in the middle of an append leaves), compaction by an atomic rewrite, and the
scan that says how far the bytes are valid."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

import rmqlog
from rmqlog.paths import StorePaths
from rmqlog.pop_log import decode_lines, encode_lines


def log_at(tmp_path: Path) -> rmqlog.PopLog:
    return rmqlog.PopLog(StorePaths(tmp_path).pop_log)


def test_records_appended_come_back_in_order_one_write_per_append(tmp_path: Path) -> None:
    log = log_at(tmp_path)
    assert log.load() == [] and (tmp_path / "pop").is_dir()
    log.append([{"k": "ck", "id": 1}, {"k": "ack", "id": 1, "x": [0]}])
    log.append([{"k": "done", "ids": [1]}])
    assert log.writes == 2 and log.records == 3
    log.close()
    again = log_at(tmp_path)
    assert again.load() == [{"k": "ck", "id": 1}, {"k": "ack", "id": 1, "x": [0]}, {"k": "done", "ids": [1]}]
    assert again.cut == 0


@pytest.mark.parametrize("damage", ["torn", "crc", "json"])
def test_a_torn_or_damaged_end_is_cut_at_load(tmp_path: Path, damage: str) -> None:
    log = log_at(tmp_path)
    log.load()
    log.append([{"k": "a"}, {"k": "b"}])
    log.close()
    path = StorePaths(tmp_path).pop_log
    good = path.read_bytes()
    last = encode_lines([{"k": "c", "n": 12345}])
    if damage == "torn":
        tail = last[:-5]  # a crash in the middle of the write
    elif damage == "crc":
        tail = last.replace(b"12345", b"12346")
    else:
        tail = b"%08x " % zlib.crc32(b"{nope") + b"{nope\n"
    path.write_bytes(good + tail)
    again = log_at(tmp_path)
    assert again.load() == [{"k": "a"}, {"k": "b"}]
    assert again.cut == len(tail) and path.read_bytes() == good
    again.append([{"k": "d"}])  # appends go on after the cut
    again.close()
    assert log_at(tmp_path).load() == [{"k": "a"}, {"k": "b"}, {"k": "d"}]


def test_rewrite_replaces_the_log_atomically(tmp_path: Path) -> None:
    log = log_at(tmp_path)
    log.load()
    log.append([{"k": "x", "i": i} for i in range(100)])
    log.rewrite([{"k": "pos", "n": 7}])
    assert log.records == 1 and not (StorePaths(tmp_path).pop_dir / "checkpoints.log.tmp").exists()
    log.append([{"k": "y"}])
    log.close()
    assert log_at(tmp_path).load() == [{"k": "pos", "n": 7}, {"k": "y"}]


def test_an_append_before_load_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(rmqlog.CorruptStoreError, match="not open"):
        log_at(tmp_path).append([{"k": "a"}])


def test_the_scan_reports_how_far_the_bytes_are_valid() -> None:
    data = encode_lines([{"a": 1}, {"b": [1, 2]}])
    assert decode_lines(data) == ([{"a": 1}, {"b": [1, 2]}], len(data))
    assert decode_lines(data + b"zz") == ([{"a": 1}, {"b": [1, 2]}], len(data))
    assert decode_lines(b"0000000") == ([], 0)
    assert decode_lines(encode_lines([[1, 2]])) == ([], 0)  # not an object: not a record


def test_a_log_dropped_without_close_leaves_no_descriptor(tmp_path: Path) -> None:
    import gc

    log = log_at(tmp_path)
    log.load()
    closer = log._closer
    assert closer is not None and closer.alive
    del log
    gc.collect()
    assert not closer.alive  # its finalizer closed the descriptor (it holds the fd, not the log)
    again = log_at(tmp_path)
    again.load()
    again.close()
    again.close()  # (once: a second close does nothing)
    assert again._closer is None
