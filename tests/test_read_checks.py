"""Reads check each record against its consume-queue unit, and its body CRC.

Each test damages a store the way a disk or a stray writer could (a unit rewritten, a byte
flipped) and reads it through every read path: ``read_queue``, ``get_messages``, the Spark
source's ``read_range`` (called directly, without Spark) and, for damaged records,
``message_by_offset``/``message_by_id``. A read must raise the typed error naming the file
and offsets, never return another record's data or raise an untyped exception.

Unit damage is done under an open store (a consume-queue file written through the page
cache, which the store's mapping shares): a reopen would run recovery, whose job is not
tested here. Record damage is done with the store closed, in the oldest of many segments,
which a clean open does not walk: only a read can find it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from conftest import SMALL_COMMITLOG, SMALL_CQ, cq_file, small_store_config, unit, write_unit

import rmqlog
from rmqlog import CorruptQueueError, CorruptRecordError
from rmqlog.queue.consume_queue import CQ_UNIT_SIZE

pytest.importorskip("pyspark")
from spark_rmq.read import QueueRange, read_range  # noqa: E402
from spark_rmq.stores import close_all  # noqa: E402

#: 160-byte bodies make 301-byte records: 13 per 4 KiB segment, then a 183-byte blank
#: (large enough for a unit of that size to point at it without crossing the segment end).
BODY = 160
PER_QUEUE = 30
TOPICS = ("A", "B")  # names of one length: records of both have the same size
UNITS_PER_CQ_FILE = SMALL_CQ // CQ_UNIT_SIZE


def body(topic: str, q: int, k: int) -> bytes:
    return f"{topic}{q}-{k}".encode().ljust(BODY, b".")


def fill(s: rmqlog.MessageStore) -> None:
    """4 queues x 30 messages in each of topics A and B, interleaved, all the same size."""
    for t in TOPICS:
        s.create_topic(t, 4)
    rows = [(t, q, k) for k in range(PER_QUEUE) for t in TOPICS for q in range(4)]
    s.put_batch(
        pa.table(
            {
                "topic": [t for t, _, _ in rows],
                "body": [body(*r) for r in rows],
                "queueId": pa.array([q for _, q, _ in rows], pa.int32()),
                "tags": ["t"] * len(rows),
            }
        )
    )
    assert s.dispatch() == 2 * 4 * PER_QUEUE


# ------------------------------------------------------------------------ helpers


def segment_of(root: Path, offset: int) -> Path:
    return root / "commitlog" / f"{offset - offset % SMALL_COMMITLOG:020d}"


def flip(root: Path, offset: int) -> None:
    """Invert one byte of the commitlog at ``offset``."""
    with open(segment_of(root, offset), "r+b") as f:
        f.seek(offset % SMALL_COMMITLOG)
        b = f.read(1)
        f.seek(offset % SMALL_COMMITLOG)
        f.write(bytes([b[0] ^ 0xFF]))


Reader = Callable[[rmqlog.MessageStore, Path, str, int, "bool | None"], list[dict[str, Any]]]


def via_read_queue(
    s: rmqlog.MessageStore, root: Path, topic: str, qid: int, check_crc: bool | None = None
) -> list[dict[str, Any]]:
    kw = {} if check_crc is None else {"check_crc": check_crc}
    return s.read_queue(topic, qid, 0, 1 << 40, **kw).to_pylist()


def via_get_messages(
    s: rmqlog.MessageStore, root: Path, topic: str, qid: int, check_crc: bool | None = None
) -> list[dict[str, Any]]:
    kw = {} if check_crc is None else {"check_crc": check_crc}
    res = s.get_messages("g", topic, qid, s.min_offset(topic, qid), max_count=1000, **kw)
    assert res.status is rmqlog.GetMessageStatus.FOUND
    return res.messages.to_pylist()


def via_read_range(
    s: rmqlog.MessageStore, root: Path, topic: str, qid: int, check_crc: bool | None = None
) -> list[dict[str, Any]]:
    kw = {} if check_crc is None else {"check_crc": check_crc}
    part = QueueRange(str(root), topic, qid, s.min_offset(topic, qid), s.max_offset(topic, qid), **kw)
    batches = list(read_range(part))
    return pa.Table.from_batches(batches).to_pylist() if batches else []


READERS = [via_read_queue, via_get_messages, via_read_range]
reader_ids = ["read_queue", "get_messages", "spark_read_range"]


@pytest.fixture(params=[True, False], ids=["native", "pure-python"])
def native(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run with the C helper's gather and CRC, and with their pure-Python fallbacks."""
    if not request.param:
        import rmqlog.log.decode
        import rmqlog.log.gather

        monkeypatch.setattr(rmqlog.log.gather, "_native_gather", None)
        monkeypatch.setattr(rmqlog.log.decode, "_crc32_batch", None)
    return bool(request.param)


@pytest.fixture
def live(root: Path) -> Iterator[rmqlog.MessageStore]:
    """An open, filled store (units are damaged under it)."""
    s = rmqlog.MessageStore.open(root, small_store_config())
    fill(s)
    try:
        yield s
    finally:
        close_all()  # the stores read_range opened in this process
        s.close()


def expect_queue_error(
    err: pytest.ExceptionInfo[CorruptQueueError],
    root: Path,
    topic: str,
    qid: int,
    logical: int,
    offset: int,
    reason: str,
) -> None:
    e = err.value
    assert type(e) is CorruptQueueError
    assert e.path == str(cq_file(root, topic, qid, logical))
    assert (e.queue_offset, e.commit_log_offset, e.offset) == (logical, offset, offset)
    assert reason in str(e), str(e)
    assert f"queue offset {logical}" in str(e) and f"commitlog offset {offset}" in str(e) and e.path in str(e)


# ------------------------------------------------------------- unit damage

K = 10  # the damaged unit of queue A/2


@pytest.mark.parametrize("read", READERS, ids=reader_ids)
def test_unit_pointing_at_another_queues_record(
    live: rmqlog.MessageStore, root: Path, read: Reader, native: bool
) -> None:
    """Same topic, same size, same queue offset: only QUEUEID tells the record is queue 3's."""
    other, size, _ = unit(root, "A", 3, K)
    assert size == unit(root, "A", 2, K)[1]
    write_unit(root, "A", 2, K, other, size)
    with pytest.raises(CorruptQueueError) as err:
        read(live, root, "A", 2, None)
    expect_queue_error(err, root, "A", 2, K, other, "the record there is of queue 3, not 2")


@pytest.mark.parametrize("read", READERS, ids=reader_ids)
def test_unit_pointing_at_another_topics_record(
    live: rmqlog.MessageStore, root: Path, read: Reader, native: bool
) -> None:
    """Topic B's record of queue 2 at queue offset K: same size, queue id and offset; only the topic differs."""
    other, size, _ = unit(root, "B", 2, K)
    write_unit(root, "A", 2, K, other, size)
    with pytest.raises(CorruptQueueError) as err:
        read(live, root, "A", 2, None)
    expect_queue_error(err, root, "A", 2, K, other, "the record there is of topic 'B'")


@pytest.mark.parametrize("read", READERS, ids=reader_ids)
@pytest.mark.parametrize("where", ["at_tail", "straddling_tail", "wild"])
def test_unit_pointing_past_the_tail(
    live: rmqlog.MessageStore, root: Path, read: Reader, where: str, native: bool
) -> None:
    tail = live.published_tail()
    size = unit(root, "A", 2, K)[1]
    offset = {"at_tail": tail, "straddling_tail": tail - 100, "wild": (1 << 63) - 10}[where]
    write_unit(root, "A", 2, K, offset, size)
    with pytest.raises(CorruptQueueError) as err:
        read(live, root, "A", 2, None)
    expect_queue_error(err, root, "A", 2, K, offset, f"it points past the published tail {tail}")


@pytest.mark.parametrize("read", READERS, ids=reader_ids)
def test_unit_pointing_before_the_commitlogs_first_offset(root: Path, read: Reader, native: bool) -> None:
    """After retention deleted the oldest segment, a unit past the queue's first live one
    that points into the deleted range is damaged, not expired: it is not silently skipped."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        fill(s)
    (root / "commitlog" / f"{0:020d}").unlink()  # what retention does
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        try:
            lo = s.min_offset("A", 2)
            assert 0 < lo < PER_QUEUE - 5
            victim = PER_QUEUE - 5
            write_unit(root, "A", 2, victim, 600, unit(root, "A", 2, victim)[1])
            with pytest.raises(CorruptQueueError) as err:
                read(s, root, "A", 2, None)
            expect_queue_error(
                err, root, "A", 2, victim, 600, f"it points below the commitlog's first offset {SMALL_COMMITLOG}"
            )
        finally:
            close_all()


@pytest.mark.parametrize("read", READERS, ids=reader_ids)
def test_unit_pointing_into_the_middle_of_a_record(
    live: rmqlog.MessageStore, root: Path, read: Reader, native: bool
) -> None:
    offset, size, _ = unit(root, "A", 2, K)
    assert (offset + 8) // SMALL_COMMITLOG == (offset + 8 + size - 1) // SMALL_COMMITLOG  # not past its segment's end
    write_unit(root, "A", 2, K, offset + 8, size)
    with pytest.raises(CorruptQueueError) as err:
        read(live, root, "A", 2, None)
    expect_queue_error(err, root, "A", 2, K, offset + 8, "no record there: magic 0x")


@pytest.mark.parametrize("read", READERS, ids=reader_ids)
def test_unit_pointing_at_a_blank_record(live: rmqlog.MessageStore, root: Path, read: Reader, native: bool) -> None:
    offset, size, _ = unit(root, "A", 2, 0)
    records_per_segment = (SMALL_COMMITLOG - 8) // size
    blank = records_per_segment * size  # the end-of-segment blank of the first segment
    blank_size = SMALL_COMMITLOG - blank
    assert blank_size >= 91 and struct.unpack(
        ">ii", (root / "commitlog" / f"{0:020d}").read_bytes()[blank : blank + 8]
    ) == (blank_size, -875286124)
    write_unit(root, "A", 2, K, blank, blank_size)
    with pytest.raises(CorruptQueueError) as err:
        read(live, root, "A", 2, None)
    expect_queue_error(err, root, "A", 2, K, blank, "no record there: a blank (end-of-segment) record")


@pytest.mark.parametrize("read", READERS, ids=reader_ids)
@pytest.mark.parametrize("delta", [1, -1, -250])
def test_unit_size_mismatch(live: rmqlog.MessageStore, root: Path, read: Reader, delta: int, native: bool) -> None:
    offset, size, _ = unit(root, "A", 2, K)
    write_unit(root, "A", 2, K, offset, size + delta)
    with pytest.raises(CorruptQueueError) as err:
        read(live, root, "A", 2, None)
    want = (
        f"the record there has TOTALSIZE {size}, the unit says {size + delta}"
        if size + delta >= 91
        else (f"its size {size + delta} is smaller than any record")
    )
    expect_queue_error(err, root, "A", 2, K, offset, want)


@pytest.mark.parametrize("read", READERS, ids=reader_ids)
def test_unit_queue_offset_mismatch(live: rmqlog.MessageStore, root: Path, read: Reader, native: bool) -> None:
    """Unit K points at queue A/2's own next record: right topic, queue and size, wrong QUEUEOFFSET."""
    nxt, size, _ = unit(root, "A", 2, K + 1)
    write_unit(root, "A", 2, K, nxt, size)
    with pytest.raises(CorruptQueueError) as err:
        read(live, root, "A", 2, None)
    expect_queue_error(err, root, "A", 2, K, nxt, f"the record there has queue offset {K + 1}")


def test_the_first_bad_unit_in_queue_order_is_named(live: rmqlog.MessageStore, root: Path, native: bool) -> None:
    """A damage found late (a unit pointing at another queue's record, known only once the
    headers are read) before one found early (past the tail, known from the units alone):
    the earlier unit is the one named."""
    other, size, _ = unit(root, "A", 3, 4)
    write_unit(root, "A", 2, 4, other, size)
    write_unit(root, "A", 2, 20, live.published_tail(), size)
    for read in READERS:
        with pytest.raises(CorruptQueueError) as err:
            read(live, root, "A", 2, None)
        assert err.value.queue_offset == 4, read


def test_a_unit_that_is_not_read_is_not_checked(live: rmqlog.MessageStore, root: Path) -> None:
    """get_messages reads max_count units: damage past them does not fail a read before it."""
    write_unit(root, "A", 2, K, live.published_tail(), unit(root, "A", 2, K)[1])
    res = live.get_messages("g", "A", 2, 0, max_count=K)
    assert res.messages["body"].to_pylist() == [body("A", 2, k) for k in range(K)]
    with pytest.raises(CorruptQueueError):
        live.get_messages("g", "A", 2, res.next_begin_offset)


@pytest.mark.parametrize("damage", ["other_queue", "other_topic", "past_tail", "middle", "size"])
def test_offset_for_timestamp_checks_the_units_it_looks_at(live: rmqlog.MessageStore, root: Path, damage: str) -> None:
    """Its binary search looks at unit 15 of 30 first: a damaged one must not lend another
    record's store time (before: any non-record read as time 0, or an AssertionError)."""
    own, size, _ = unit(root, "A", 2, 15)
    offset, new_size, want = {
        "other_queue": (unit(root, "A", 3, 15)[0], size, "the record there is of queue 3, not 2"),
        "other_topic": (unit(root, "B", 2, 15)[0], size, "the record there is of topic 'B'"),
        "past_tail": (live.published_tail(), size, f"it points past the published tail {live.published_tail()}"),
        "middle": (own + 8, size, "no record there: magic 0x"),
        "size": (own, size + 1, f"the record there has TOTALSIZE {size}, the unit says {size + 1}"),
    }[damage]
    assert live.offset_for_timestamp("A", 2, 0) == 0
    write_unit(root, "A", 2, 15, offset, new_size)
    with pytest.raises(CorruptQueueError) as err:
        live.offset_for_timestamp("A", 2, 0)
    expect_queue_error(err, root, "A", 2, 15, offset, want)


def test_intact_reads_are_unchanged(live: rmqlog.MessageStore, root: Path) -> None:
    want = [body("A", 2, k) for k in range(PER_QUEUE)]
    for read in READERS:
        rows = read(live, root, "A", 2, None)
        assert [r["body"] for r in rows] == want and [r["queueOffset"] for r in rows] == list(range(PER_QUEUE))


# ----------------------------------------------------------- record damage

VICTIM = 1  # queue offset of the damaged record of A/2 (in the oldest segment)


@pytest.fixture
def closed(root: Path) -> tuple[int, int]:
    """A filled, cleanly closed store: (commitlog offset, size) of record A/2 #VICTIM."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        fill(s)
    offset, size, _ = unit(root, "A", 2, VICTIM)
    assert offset < SMALL_COMMITLOG and len(list((root / "commitlog").iterdir())) > 4
    return offset, size


def open_damaged(root: Path, **config: Any) -> rmqlog.MessageStore:
    s = rmqlog.MessageStore.open(root, small_store_config(**config))
    assert s.recovery is not None and not s.recovery.abnormal  # a clean open: it checked the last segments only
    return s


def expect_record_error(err: pytest.ExceptionInfo[CorruptRecordError], root: Path, offset: int, reason: str) -> None:
    e = err.value
    assert type(e) is CorruptRecordError
    assert e.path == str(root / "commitlog" / f"{0:020d}") and e.offset == offset
    assert reason in str(e) and e.path in str(e) and f"offset {offset}" in str(e), str(e)


@pytest.mark.parametrize("read", READERS, ids=reader_ids)
@pytest.mark.parametrize("field", ["body", "bodyCRC"])
def test_flipped_byte_in_an_old_segment(
    closed: tuple[int, int], root: Path, read: Reader, field: str, native: bool
) -> None:
    offset, _size = closed
    flip(root, offset + (88 + 5 if field == "body" else 8))  # a body byte, or BODYCRC (bytes 8-11)
    with open_damaged(root) as s:
        try:
            with pytest.raises(CorruptRecordError) as err:
                read(s, root, "A", 2, None)
            expect_record_error(err, root, offset, "body CRC mismatch")
            # checks off: the damaged record comes back as stored
            rows = read(s, root, "A", 2, False)
            assert len(rows) == PER_QUEUE
            got = rows[VICTIM]["body"]
            assert (got != body("A", 2, VICTIM)) == (field == "body") and got[:2] == b"A2"
        finally:
            close_all()


@pytest.mark.parametrize("field", ["body", "bodyCRC"])
def test_message_by_offset_and_id_check_the_crc(closed: tuple[int, int], root: Path, field: str, native: bool) -> None:
    offset, _size = closed
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        msg_id = s.message_by_offset(offset)["msgId"]  # type: ignore[index]
    flip(root, offset + (88 + 5 if field == "body" else 8))
    with open_damaged(root) as s:
        with pytest.raises(CorruptRecordError) as err:
            s.message_by_offset(offset)
        expect_record_error(err, root, offset, "body CRC mismatch")
        with pytest.raises(CorruptRecordError):
            s.message_by_id(msg_id)
        assert s.message_by_offset(offset + 8) is None  # not a record start: none, as before
    with open_damaged(root, check_crc_on_read=False) as s:
        row = s.message_by_offset(offset)
        assert row is not None and row["queueOffset"] == VICTIM and row["body"][:2] == b"A2"


def test_config_turns_crc_checks_off_and_a_call_back_on(closed: tuple[int, int], root: Path) -> None:
    offset, _size = closed
    flip(root, offset + 88 + 5)
    with open_damaged(root, check_crc_on_read=False) as s:
        assert s.read_queue("A", 2, 0, 100).num_rows == PER_QUEUE
        assert s.get_messages("g", "A", 2, 0, max_count=100).messages.num_rows == PER_QUEUE
        with pytest.raises(CorruptRecordError):
            s.read_queue("A", 2, 0, 100, check_crc=True)
        with pytest.raises(CorruptRecordError):
            s.get_messages("g", "A", 2, 0, max_count=100, check_crc=True)


@pytest.mark.parametrize("read", READERS, ids=reader_ids)
def test_record_lengths_that_do_not_add_up(closed: tuple[int, int], root: Path, read: Reader, native: bool) -> None:
    """A damaged BODYLENGTH would make the gathers read past the record (before: ValueError
    from the gather, or another record's bytes): a typed error, CRC checks on or off."""
    offset, _size = closed
    with open(segment_of(root, offset), "r+b") as f:
        f.seek(offset % SMALL_COMMITLOG + 84)  # BODYLENGTH
        f.write(struct.pack(">i", 0x7FFFFFF0))
    with open_damaged(root) as s:
        try:
            for check_crc in (None, False):
                with pytest.raises(CorruptRecordError) as err:
                    read(s, root, "A", 2, check_crc)
                expect_record_error(err, root, offset, f"BODYLENGTH {0x7FFFFFF0} does not fit")
        finally:
            close_all()


def test_topic_length_that_does_not_fit(closed: tuple[int, int], root: Path, native: bool) -> None:
    offset, _size = closed
    with open(segment_of(root, offset), "r+b") as f:
        f.seek(offset % SMALL_COMMITLOG + 88 + BODY)  # TOPICLENGTH (1 byte, V1)
        f.write(b"\xff")
    with open_damaged(root) as s:
        with pytest.raises(CorruptRecordError) as err:
            s.read_queue("A", 2, 0, 100)
        expect_record_error(err, root, offset, "TOPICLENGTH 255 does not fit")


def test_crc_damage_before_unit_damage_names_the_record(closed: tuple[int, int], root: Path) -> None:
    """The first problem in queue order wins, whichever check finds it."""
    offset, size = closed
    flip(root, offset + 88 + 5)
    with open_damaged(root) as s:
        write_unit(root, "A", 2, VICTIM + 3, s.published_tail(), size)
        with pytest.raises(CorruptRecordError) as err:
            s.read_queue("A", 2, 0, 100)
        assert err.value.offset == offset
        with pytest.raises(CorruptQueueError) as qerr:
            s.read_queue("A", 2, 0, 100, check_crc=False)
        assert qerr.value.queue_offset == VICTIM + 3


@pytest.mark.parametrize("damaged", [True, False])
def test_an_untyped_decode_failure_becomes_a_typed_error(
    closed: tuple[int, int], root: Path, damaged: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should a damaged record get past the checks and make the decode fail any other way
    (simulated: the properties' UTF-8 cast raises ArrowInvalid), the read raises
    CorruptRecordError naming the segment and the first record the scalar decoder rejects
    (or, with none, the first of the read), never the ArrowInvalid."""
    import rmqlog.log.decode

    offset, _size = closed
    if damaged:
        flip(root, offset + 88 + 5)

    real_utf8_lossy = rmqlog.log.decode.utf8_lossy

    def boom(arr: pa.Array) -> pa.Array:  # fails on reads of several records, as a bad one among them would
        if len(arr) > 1:
            raise pa.ArrowInvalid("boom")
        return real_utf8_lossy(arr)

    with open_damaged(root) as s:
        first = s.read_queue("A", 2, 0, 1)["commitLogOffset"][0].as_py()
        monkeypatch.setattr(rmqlog.log.decode, "utf8_lossy", boom)
        with pytest.raises(CorruptRecordError) as err:
            s.read_queue("A", 2, 0, 100)
        if damaged:
            expect_record_error(err, root, offset, "body CRC mismatch")
        else:
            expect_record_error(err, root, first, "undecodable record (ArrowInvalid: boom)")


# ------------------------------------------------------------------ units of the checks


def test_gather_slices_takes_slices_in_any_order(native: bool) -> None:
    """Damaged units may point anywhere: the gather must copy what it is asked (the checks
    then reject it), never read out of its buffer or mix slices up."""
    from rmqlog.log.gather import gather_slices

    src = pa.py_buffer(bytes(range(256)))
    starts = np.array([100, 10, 12, 200, 0], np.int64)
    lengths = np.array([5, 4, 4, 0, 3], np.int64)
    got = gather_slices(src, starts, lengths).to_pylist()
    assert got == [bytes(range(s, s + n)) for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]
    for bad_start, bad_len in ((250, 10), (-1, 2), (3, -1)):
        with pytest.raises(ValueError):
            gather_slices(src, np.array([0, bad_start], np.int64), np.array([1, bad_len], np.int64))


def test_body_crcs_match_the_scalar_crc(native: bool) -> None:
    from rmqlog.log.decode import body_crcs
    from rmqlog.log.record import body_crc

    bodies = [b"", b"a", bytes(range(256)) * 9, b"RocketMQ"]
    for arr in (
        pa.array(bodies, pa.binary()),
        pa.array(bodies, pa.large_binary()),
        pa.array(bodies, pa.binary()).slice(1),
    ):
        assert body_crcs(arr).tolist() == [body_crc(b) for b in arr.to_pylist()]


def test_new_errors_are_store_errors() -> None:
    assert issubclass(CorruptQueueError, rmqlog.CorruptStoreError) and issubclass(
        CorruptRecordError, rmqlog.CorruptStoreError
    )
    assert rmqlog.StoreConfig().check_crc_on_read is True
    assert rmqlog.StoreConfig(check_crc_on_read=False).check_crc_on_read is False


def test_checkcrc_source_option() -> None:
    from spark_rmq.errors import RmqLogOptionError
    from spark_rmq.options import SourceOptions

    assert SourceOptions.parse({"path": "/x", "topics": "A"}, streaming=False).check_crc is True
    assert SourceOptions.parse({"path": "/x", "topics": "A", "checkCRC": "false"}, streaming=False).check_crc is False
    with pytest.raises(RmqLogOptionError, match="checkCRC"):
        SourceOptions.parse({"path": "/x", "topics": "A", "checkCRC": "maybe"}, streaming=False)
