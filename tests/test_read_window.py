"""MessageStore.read_window: one read of a window of a queue, as the message table or as the
stored records byte-exact (rmqlog.access.window).

Checked: the stored records are the commitlog's bytes and decode (with the reference decoder,
refcodec) to exactly the table form; RocketMQ 4.9.8's statuses and next offsets for every
case (DefaultMessageStore.getMessage); the byte budget (isTheBatchFull); the retention race,
records deleted between the unit read and the record read, in both forms; bad arguments.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import SMALL_COMMITLOG, SMALL_CQ, batch, small_store_config

import refcodec as rc
import rmqlog
from rmqlog import GetMessageStatus as S
from rmqlog.queue.consume_queue import ConsumeQueue

PER_FILE = SMALL_CQ // 20  # units in one consume-queue file of the small config (50)


def put_tagged(s: rmqlog.MessageStore, tags: list[str | None], topic: str = "W", body: int = 40) -> None:
    s.put_batch(
        batch(
            topic=topic,
            body=[f"{i}:".encode().ljust(body, b".") for i in range(len(tags))],
            tags=pa.array(tags, pa.string()),
            keys=[[f"k{i}"] for i in range(len(tags))],
            queueId=pa.array([0] * len(tags), pa.int32()),
        )
    )
    s.dispatch()


@pytest.fixture
def ws(ms: rmqlog.MessageStore) -> rmqlog.MessageStore:
    """Topic W, queue 0: 120 messages (records over several commitlog segments, units over
    three consume-queue files), tags cycling a, b, Aa, BB, none (Aa and BB share a Java hash)."""
    ms.create_topic("W", 1)
    put_tagged(ms, [["a", "b", "Aa", "BB", None][i % 5] for i in range(120)])
    return ms


def _ref_rows(records: rmqlog.StoredRecords) -> list[rc.RefRecord]:
    data = records.data.to_pybytes()
    starts = np.concatenate([[0], np.cumsum(records.sizes)[:-1]]).astype(int)
    out = []
    for start in starts:
        kind, rec = rc.decode_record(data, int(start))
        assert kind == "record", kind
        assert isinstance(rec, rc.RefRecord)
        out.append(rec)
    return out


@pytest.mark.parametrize("tags", ["*", "a || Aa", "BB"])
def test_stored_records_are_the_log_bytes_and_decode_to_the_table(
    ws: rmqlog.MessageStore, root: Path, tags: str
) -> None:
    assert rc.java_string_hash("Aa") == rc.java_string_hash("BB")  # so the exact-tag cut runs on both forms
    table_form = ws.read_window("W", 0, 3, max_count=40, tags=tags)
    raw_form = ws.read_window("W", 0, 3, max_count=40, tags=tags, raw=True)
    assert (raw_form.status, raw_form.next_begin_offset, raw_form.min_offset, raw_form.max_offset) == (
        table_form.status,
        table_form.next_begin_offset,
        table_form.min_offset,
        table_form.max_offset,
    )
    assert raw_form.status is S.FOUND and raw_form.messages.num_rows == 0 and table_form.records is None
    records, table = raw_form.records, table_form.messages
    assert records is not None and len(records) == table.num_rows > 0
    # byte-exact: each record is the commitlog's bytes at its offset, the data their concatenation
    segs = {int(p.name): p.read_bytes() for p in (root / "commitlog").iterdir()}
    assert len({int(o) // SMALL_COMMITLOG for o in records.commit_log_offsets}) > 1  # across segments
    for i, (off, size) in enumerate(zip(records.commit_log_offsets.tolist(), records.sizes.tolist(), strict=True)):
        seg = off // SMALL_COMMITLOG * SMALL_COMMITLOG
        assert records.array[i].as_py() == segs[seg][off - seg : off - seg + size]
    assert records.data.to_pybytes() == b"".join(records.array.to_pylist())
    refs = _ref_rows(records)
    rows = table.to_pylist()
    assert (
        records.commit_log_offsets.tolist() == [r["commitLogOffset"] for r in rows] == [r.physical_offset for r in refs]
    )
    assert records.queue_offsets.tolist() == [r["queueOffset"] for r in rows] == [r.queue_offset for r in refs]
    assert records.sizes.tolist() == [r.total_size for r in refs]
    for ref, row in zip(refs, rows, strict=True):
        assert (ref.topic, ref.queue_id, ref.body, ref.tags, ref.flag, ref.sys_flag, ref.reconsume_times) == (
            row["topic"],
            row["queueId"],
            row["body"],
            row["tags"],
            row["flag"],
            row["sysFlag"],
            row["reconsumeTimes"],
        )
        assert ref.msg_id == row["msgId"] and ref.properties["KEYS"] == " ".join(row["keys"])
        assert dict(row["properties"]) == ref.properties
        assert (ref.born_timestamp, ref.store_timestamp) == (
            int(row["bornTimestamp"].timestamp() * 1000),
            int(row["storeTimestamp"].timestamp() * 1000),
        )
        assert (ref.born_host, ref.store_host, ref.body_crc & 0xFFFFFFFF) == (
            row["bornHost"],
            row["storeHost"],
            row["bodyCRC"] & 0xFFFFFFFF,
        )
    wanted = None if tags == "*" else {t.strip() for t in tags.split("||")}
    assert wanted is None or {r.tags for r in refs} <= wanted  # the hash collision is cut in both forms


def _both(s: rmqlog.MessageStore, *args: object, **kw: object) -> tuple[S, int, list[int]]:
    """(status, next offset, queue offsets read) of a read, the same in both forms."""
    t = s.read_window(*args, **kw)  # type: ignore[arg-type]
    r = s.read_window(*args, raw=True, **kw)  # type: ignore[arg-type]
    assert r.records is not None
    assert (r.status, r.next_begin_offset, r.records.queue_offsets.tolist()) == (
        t.status,
        t.next_begin_offset,
        t.messages["queueOffset"].to_pylist(),
    )
    return t.status, t.next_begin_offset, t.messages["queueOffset"].to_pylist()


def test_statuses_and_next_offsets_in_the_queue(ws: rmqlog.MessageStore) -> None:
    ws.create_topic("E", 1)
    assert _both(ws, "Nope", 0, 0) == (S.NO_MATCHED_LOGIC_QUEUE, 0, [])
    assert _both(ws, "W", 1, 0) == (S.NO_MATCHED_LOGIC_QUEUE, 0, [])
    assert _both(ws, "E", 0, 7) == (S.NO_MESSAGE_IN_QUEUE, 0, [])
    assert _both(ws, "W", 0, 120) == (S.OFFSET_OVERFLOW_ONE, 120, [])
    assert _both(ws, "W", 0, 121) == (S.OFFSET_OVERFLOW_BADLY, 120, [])  # 4.9.8: the max offset, also when min is 0
    # FOUND: offset + units scanned; the scan stops at the unit after the max_count-th message
    assert _both(ws, "W", 0, 0, max_count=3) == (S.FOUND, 3, [0, 1, 2])
    assert _both(ws, "W", 0, 0, max_count=3, tags="b") == (S.FOUND, 12, [1, 6, 11])
    # a pull never crosses a consume-queue file: from 45, at most the 5 units left in the first
    assert _both(ws, "W", 0, 45, max_count=32) == (S.FOUND, PER_FILE, list(range(45, PER_FILE)))
    # nothing matches: every unit of the window scanned (to the file's end here)
    assert _both(ws, "W", 0, 0, tags="zzz") == (S.NO_MATCHED_MESSAGE, PER_FILE, [])
    # only a colliding tag in the window: the units match, the exact tags do not
    assert _both(ws, "W", 0, 3, max_count=1, tags="Aa") == (S.NO_MATCHED_MESSAGE, 4, [])
    # until: no unit at or past it is scanned
    assert _both(ws, "W", 0, 10, max_count=32, until=14) == (S.FOUND, 14, [10, 11, 12, 13])
    assert _both(ws, "W", 0, 10, tags="zzz", until=14) == (S.NO_MATCHED_MESSAGE, 14, [])


def test_status_offset_too_small_after_retention(root: Path) -> None:
    cfg = small_store_config()
    with rmqlog.MessageStore.open(root, cfg) as s:
        s.create_topic("W", 1)
        put_tagged(s, ["a"] * 80)
    (root / "commitlog" / f"{0:020d}").unlink()
    with rmqlog.MessageStore.open(root, cfg) as s:
        lo = s.min_offset("W", 0)
        assert lo > 0
        assert _both(s, "W", 0, 0) == (S.OFFSET_TOO_SMALL, lo, [])
        assert _both(s, "W", 0, lo, max_count=2) == (S.FOUND, lo + 2, [lo, lo + 1])


def test_byte_budget_is_rocketmqs_batch_full(ms: rmqlog.MessageStore) -> None:
    ws = ms
    ws.create_topic("W", 1)
    put_tagged(ws, ["a", "b", "b", "b", "b"] * 2)  # keys k0..k9: one length
    size = int(ws.read_window("W", 0, 0, max_count=1, raw=True).records.sizes[0])  # type: ignore[union-attr]
    sizes = ws.record_sizes("W", 0, 0, 20)  # (clamped to the 10 there)
    assert (sizes == size).all() and len(sizes) == 10  # every record the same size
    # the bytes taken plus the next unit's size may not pass max_bytes
    assert _both(ws, "W", 0, 0, max_bytes=2 * size) == (S.FOUND, 2, [0, 1])
    assert _both(ws, "W", 0, 0, max_bytes=3 * size - 1) == (S.FOUND, 2, [0, 1])
    # the first message always goes, however small the budget
    assert _both(ws, "W", 0, 0, max_bytes=1) == (S.FOUND, 1, [0])
    # the check runs before the tag filter: a filtered-out unit that would not fit ends the batch
    assert _both(ws, "W", 0, 0, tags="a", max_bytes=size) == (S.FOUND, 1, [0])
    assert _both(ws, "W", 0, 0, tags="a", max_bytes=2 * size) == (S.FOUND, 6, [0, 5])
    r = ws.read_window("W", 0, 0, max_count=32, max_bytes=5 * size, raw=True)
    assert r.records is not None and len(r.records) == 5 and r.records.data.size == 5 * size


# --------------------------------------------------------------------------- the retention race


def _aged_store(root: Path) -> rmqlog.MessageStore:
    """A store of 100 messages in queue RT/0 over several segments, the first four of them
    old enough for retention at 04:00 (the clean hour), the disk 10% full (injected)."""
    s = rmqlog.MessageStore.open(root, small_store_config(delete_when="04"))
    s.retention.disk_used = lambda path: 10.0
    s.create_topic("RT", 1)
    put_tagged(s, ["a"] * 100, topic="RT", body=100)
    s.flush()
    return s


def _at_4() -> int:
    import datetime as dt

    now = dt.datetime.now().astimezone()
    return int(now.replace(hour=4, minute=0, second=0, microsecond=0).timestamp() * 1000)


def _age(root: Path, now_ms: int, hours: float, which: list[int]) -> None:
    t = now_ms / 1000 - hours * 3600
    for start in which:
        os.utime(root / "commitlog" / f"{start:020d}", (t, t))


def _expire_first_four(root: Path, now: int) -> list[int]:
    """Every commitlog segment written an hour before ``now``, the first four 100 hours before:
    those four are due for deletion at ``now``. Returns the segments' starts."""
    segs = sorted(int(p.name) for p in (root / "commitlog").iterdir())
    _age(root, now, 1, segs)
    _age(root, now, 100, segs[:4])
    return segs


def _clean_after_the_units_are_read(monkeypatch: pytest.MonkeyPatch, s: rmqlog.MessageStore, now: int) -> list[bool]:
    """Run retention once, right after the window's units are read and before their records
    are (by the general read, or by a small window's direct path); the returned flag turns
    false when it ran."""
    armed = [True]

    def then_clean(real):  # type: ignore[no-untyped-def]
        def read_then_clean(self: ConsumeQueue, start: int, count: int):  # type: ignore[no-untyped-def]
            units = real(self, start, count)
            if armed[0] and count > 1:  # the window's units are read: retention runs now
                armed[0] = False
                s.clean_expired(now)
            return units

        return read_then_clean

    monkeypatch.setattr(ConsumeQueue, "read", then_clean(ConsumeQueue.read))
    monkeypatch.setattr(ConsumeQueue, "read_stored", then_clean(ConsumeQueue.read_stored))
    return armed


@pytest.mark.parametrize("raw", [False, True], ids=["table", "records"])
def test_records_deleted_between_the_unit_read_and_the_record_read(
    root: Path, monkeypatch: pytest.MonkeyPatch, raw: bool
) -> None:
    """Retention deletes the first four segments after the window's units were read and before
    their records are: the deleted ones are skipped and named, the rest read (RocketMQ's
    MESSAGE_WAS_REMOVING skip), in both forms."""
    s = _aged_store(root)
    try:
        now = _at_4()
        segs = _expire_first_four(root, now)
        first_left = next(
            o for o in range(100) if s.read_queue("RT", 0, o, o + 1)["commitLogOffset"][0].as_py() >= segs[4]
        )
        armed = _clean_after_the_units_are_read(monkeypatch, s, now)
        start = first_left - 3
        assert start // PER_FILE == first_left // PER_FILE  # one consume-queue file: one window
        r = s.read_window("RT", 0, start, max_count=10, raw=raw)
        assert not armed[0]
        assert s.min_offset("RT", 0) == first_left
        read = r.records.queue_offsets.tolist() if raw else r.messages["queueOffset"].to_pylist()  # type: ignore[union-attr]
        assert (r.status, r.removed, read) == (S.FOUND, (start, first_left), list(range(first_left, first_left + 10)))
        assert r.next_begin_offset == first_left + 10
    finally:
        s.close()


@pytest.mark.parametrize("raw", [False, True], ids=["table", "records"])
def test_window_wholly_deleted_while_read_is_message_was_removing(
    root: Path, monkeypatch: pytest.MonkeyPatch, raw: bool
) -> None:
    """Every record of the window deleted after its units were read: MESSAGE_WAS_REMOVING, the
    next offset past the units scanned (RocketMQ's), the deleted offsets named."""
    s = _aged_store(root)
    try:
        now = _at_4()
        _expire_first_four(root, now)
        _clean_after_the_units_are_read(monkeypatch, s, now)
        r = s.read_window("RT", 0, 0, max_count=32, until=5, raw=raw)
        assert (r.status, r.next_begin_offset, r.removed, len(r)) == (S.MESSAGE_WAS_REMOVING, 5, (0, 5), 0)
    finally:
        s.close()


def test_bad_arguments_are_named(ws: rmqlog.MessageStore) -> None:
    for kw, name in [
        ({"max_count": 0}, "max_count"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"until": 3}, "until"),
        ({"raw": 1}, "raw"),
        ({"tags": 5}, "tags"),
        ({"max_bytes": 1.5}, "max_bytes"),
    ]:
        with pytest.raises(rmqlog.InvalidArgumentError, match=name):
            ws.read_window("W", 0, 3, **kw)  # type: ignore[arg-type]
    with pytest.raises(rmqlog.InvalidTopicError):
        ws.read_window("bad topic", 0, 0)
