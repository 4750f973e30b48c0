"""The store API a broker on the wire uses: wire puts, the batch
body of SEND_BATCH_MESSAGE, the arrival signal, raw reads for 12/33/32, and the public decoder
of stored records. Records are checked with the independent decoder ``refcodec``."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest

import rmqlog
from refcodec.record import decode_record

UNIQ = "0100007F0000000000000000000000AB"


def java_batch_message(body: bytes, flag: int, props: str) -> bytes:
    """One message as RocketMQ 4.9.8's MessageDecoder.encodeMessage lays it out, by hand."""
    p = props.encode()
    total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(p)
    return struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body + struct.pack(">h", len(p)) + p


@pytest.fixture
def store(tmp_path):
    with rmqlog.MessageStore.open(tmp_path / "s", clock=rmqlog.ManualClock()) as s:
        yield s


def wire_row(**over: object) -> pa.Table:
    base: dict[str, object] = {"topic": ["T"], "queueId": [0], "body": [b"x"]}
    base.update(over)
    return pa.table(base)


# ------------------------------------------------------------------ wire puts
def test_put_wire_stores_the_client_fields_as_sent(store):
    t = pa.table(
        {
            "topic": ["T", "T"],
            "queueId": [1, 1],
            "body": [b"\x78\x9czz", b"yy"],
            "flag": pa.array([7, 0], pa.int32()),
            "sysFlag": pa.array([1, 8], pa.int32()),
            "bornTimestamp": pa.array([123, 456], pa.int64()),
            "bornHost": ["10.0.0.1:5555", "10.0.0.1:5555"],
            "properties": [
                f"TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01{UNIQ}\x02WAIT\x01true\x02PGROUP\x01pg\x02",
                "MAX_RECONSUME_TIMES\x0116\x02junk\x02\x02",
            ],
            "reconsumeTimes": pa.array([3, 0], pa.int32()),
        }
    )
    res = store.put_wire(t, dispatch=True, cluster="C1")
    assert res.schema == rmqlog.PUT_RESULT_SCHEMA and res.column("queueOffset").to_pylist() == [0, 1]
    raw = store.read_window("T", 1, 0, raw=True).records
    kind, rec = decode_record(bytes(raw.data), 0)
    assert kind == "record"
    assert (rec.body, rec.flag, rec.sys_flag, rec.born_timestamp, rec.born_host, rec.reconsume_times) == (
        b"\x78\x9czz",
        7,
        1,
        123,
        "10.0.0.1:5555",
        3,
    )
    # the client's order kept, WAIT dropped, CLUSTER added, its UNIQ_KEY kept
    assert list(rec.properties.items()) == [
        ("TAGS", "a"),
        ("KEYS", "k1 k2"),
        ("UNIQ_KEY", UNIQ),
        ("PGROUP", "pg"),
        ("CLUSTER", "C1"),
    ]
    kind, rec2 = decode_record(bytes(raw.data), int(raw.sizes[0]))
    assert rec2.sys_flag == 8 and rec2.properties["MAX_RECONSUME_TIMES"] == "16" and "junk" not in rec2.properties
    assert "UNIQ_KEY" in rec2.properties  # generated where the client gave none
    # TAGS hash as tagsCode: a tag filter finds it; KEYS and UNIQ_KEY indexed
    assert store.get_messages("g", "T", 1, 0, tags="a").messages.column("body").to_pylist() == [b"\x78\x9czz"]
    assert store.query_by_key("T", "k2").num_rows == 1
    assert store.query_by_unique_key("T", UNIQ).num_rows == 1


def test_put_wire_routes_delay_and_timer_properties_like_put(store):
    clock = store.clock
    res = store.put_wire(
        pa.table(
            {
                "topic": ["T", "T"],
                "queueId": [0, 0],
                "body": [b"d", b"t"],
                "properties": ["DELAY\x011\x02", f"TIMER_DELIVER_MS\x01{clock.wall_ms() + 5000}\x02"],
            }
        )
    )
    assert res.num_rows == 2
    store.dispatch()
    assert store.max_offset("T", 0) == 0
    assert store.max_offset("SCHEDULE_TOPIC_XXXX", 0) == 1 and store.max_offset("rmq_sys_wheel_timer", 0) == 1
    clock.advance(5001)
    assert store.deliver_due() == 2
    store.dispatch()
    assert sorted(store.read_queue("T", 0, 0, 10).column("body").to_pylist()) == [b"d", b"t"]


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"sysFlag": pa.array([4], pa.int32())}, "sysFlag", "TRANSACTION_PREPARED"),
        ({"sysFlag": pa.array([12], pa.int32())}, "sysFlag", "TRANSACTION_ROLLBACK"),
        ({"sysFlag": pa.array([0x40], pa.int32())}, "sysFlag", "0x40"),
        ({"sysFlag": pa.array([16], pa.int32())}, "sysFlag", "BORNHOST_V6"),
        ({"properties": ["REAL_TOPIC\x01X\x02"]}, "properties", "REAL_TOPIC"),
        ({"properties": ["TIMER_OUT_MS\x011\x02"]}, "properties", "TIMER_OUT_MS"),
        ({"properties": ["RMQLOG_WRITER\x011 w\x02"]}, "properties", "RMQLOG_WRITER"),
        ({"properties": ["A\x01b\x01c\x02"]}, "properties", "\\x01"),
        ({"properties": [b"A\x01\xff\x02"]}, "properties", "UTF-8"),
        ({"properties": ["DELAY\x01x\x02"]}, "properties", "DELAY"),
        ({"bornHost": ["nohost"]}, "bornHost", "nohost"),
        ({"reconsumeTimes": pa.array([-1], pa.int32())}, "reconsumeTimes", "-1"),
        ({"topic": ["SCHEDULE_TOPIC_XXXX"]}, "topic", "SCHEDULE_TOPIC_XXXX"),
        ({"topic": ["RMQ_SYS_TRANS_HALF_TOPIC"]}, "topic", "RMQ_SYS_TRANS_HALF_TOPIC"),
        ({"topic": ["bad topic"]}, "topic", ""),
        ({"body": [b"x" * (4 * 1024 * 1024 + 1)]}, "body", ""),
        ({"properties": ["A\x01" + "v" * 40000 + "\x02"]}, "properties", "32767"),
    ],
)
def test_put_wire_refuses_naming_row_and_field(store, over, field, words):
    before = store.published_tail()
    good = {"topic": ["T"], "queueId": [0], "body": [b"ok"]}
    table = pa.concat_tables(
        [
            pa.table(good),
            wire_row(**over).select(list(good) + [k for k in over if k not in good])
            if set(over) - set(good)
            else wire_row(**over),
        ],
        promote_options="default",
    )
    with pytest.raises(rmqlog.InvalidMessageError) as info:
        store.put_wire(table)
    assert info.value.row == 1 and info.value.field == field and words in str(info.value)
    assert store.published_tail() == before  # all or nothing


def test_put_wire_refuses_mixed_host_forms_and_unknown_columns(store):
    with pytest.raises(rmqlog.InvalidMessageError, match="mixes IPv4 and IPv6"):
        store.put_wire(pa.table({"topic": ["T", "T"], "body": [b"a", b"b"], "bornHost": ["1.2.3.4:5", "[::1]:5"]}))
    with pytest.raises(rmqlog.InvalidMessageError, match="unknown column"):
        store.put_wire(pa.table({"topic": ["T"], "body": [b"a"], "tags": ["x"]}))
    with pytest.raises(rmqlog.InvalidArgumentError):
        store.put_wire(wire_row(), cluster="a\x02b")


def _not_utf8(values: list[bytes]) -> pa.Array:
    """A string column holding these bytes (Arrow takes them; Spark's CAST(binary AS STRING) makes such)."""
    return pa.array(values, pa.binary()).view(pa.string())


@pytest.mark.parametrize(
    ("column", "values", "error"),
    [
        ("topic", [b"T\xed\xa0", b"T\xed\xa0"], rmqlog.InvalidTopicError),  # one topic: the one-name screen
        ("topic", [b"T", b"T\xed"], rmqlog.InvalidTopicError),
        ("bornHost", [b"1.2.3.4:5\xed", b"1.2.3.4:5\xed"], rmqlog.InvalidMessageError),  # one host: parsed once
        ("bornHost", [b"1.2.3.4:5", b"1.2.3.4:6\xed"], rmqlog.InvalidMessageError),
    ],
)
def test_put_wire_refuses_text_that_is_not_utf8_typed(store, column, values, error):
    before = store.published_tail()
    table = {"topic": ["T", "T"], "body": [b"a", b"b"]}
    table[column] = _not_utf8(values)
    with pytest.raises(error, match="UTF-8") as info:
        store.put_wire(pa.table(table))
    assert info.value.field == column and info.value.row == (0 if values[0] == values[1] else 1)
    assert store.published_tail() == before


def test_put_wire_ipv6_born_host_round_trips(store):
    store.put_wire(wire_row(bornHost=["[::1]:9876"]), dispatch=True)
    kind, rec = decode_record(bytes(store.read_window("T", 0, 0, raw=True).records.data), 0)
    assert rec.born_host == "[::1]:9876" and rec.sys_flag & 16


# ------------------------------------------------------------- batch bodies
BATCH = (
    java_batch_message(b"hello", 3, "KEYS\x01k1\x02")
    + java_batch_message(b"", 0, "")
    + java_batch_message(b"\x00" * 40 + b"\x00\x00\x00\x16", -1, "a\x01b")
)


def test_decode_message_batch_reads_the_java_layout():
    t = rmqlog.decode_message_batch(BATCH)
    assert t.to_pylist() == [
        {"body": b"hello", "flag": 3, "properties": "KEYS\x01k1\x02"},
        {"body": b"", "flag": 0, "properties": ""},
        {"body": b"\x00" * 40 + b"\x00\x00\x00\x16", "flag": -1, "properties": "a\x01b"},
    ]
    # the batch request's own properties appended as CommitLog's batch encoder does
    t2 = rmqlog.decode_message_batch(BATCH, "CLUSTER\x01c\x02")
    assert t2.column("properties").to_pylist() == [
        "KEYS\x01k1\x02CLUSTER\x01c\x02",
        "CLUSTER\x01c\x02",
        "a\x01b\x02CLUSTER\x01c\x02",
    ]


def test_decode_message_batch_many_messages_match_a_scalar_walk():
    rng = np.random.default_rng(7)
    msgs = [(rng.bytes(int(rng.integers(0, 60))), int(rng.integers(-5, 5)), f"K\x01{i}\x02") for i in range(500)]
    t = rmqlog.decode_message_batch(b"".join(java_batch_message(*m) for m in msgs))
    assert t.column("body").to_pylist() == [m[0] for m in msgs]
    assert t.column("flag").to_pylist() == [m[1] for m in msgs]
    assert t.column("properties").to_pylist() == [m[2] for m in msgs]


@pytest.mark.parametrize(
    ("data", "row", "field", "pos"),
    [
        (BATCH[:-1], 2, "TOTALSIZE", 57),
        (BATCH + b"\x00", 3, "TOTALSIZE", len(BATCH)),
        (BATCH[:10], 0, "TOTALSIZE", 0),
        (struct.pack(">iiiii", 30, 0, 0, 0, 99) + b"\x00" * 10, 0, "BODYLENGTH", 0),
        (struct.pack(">iiiii", 30, 0, 0, 0, 2) + b"ab" + struct.pack(">h", 7) + b"\x00" * 6, 0, "PROPERTIESLENGTH", 0),
        (java_batch_message(b"a", 0, "") + struct.pack(">i", -5) + b"\x00" * 30, 1, "TOTALSIZE", 23),
    ],
)
def test_decode_message_batch_refuses_truncated_or_inconsistent(data, row, field, pos):
    with pytest.raises(rmqlog.InvalidMessageError) as info:
        rmqlog.decode_message_batch(data)
    assert (info.value.row, info.value.field) == (row, field) and f"at byte {pos}" in str(info.value)


def test_decode_message_batch_refuses_empty_and_bad_utf8():
    with pytest.raises(rmqlog.InvalidMessageError, match="empty"):
        rmqlog.decode_message_batch(b"")
    with pytest.raises(rmqlog.InvalidMessageError, match="UTF-8") as info:
        rmqlog.decode_message_batch(java_batch_message(b"a", 0, "") + java_batch_message(b"b", 0, "x")[:-1] + b"\xff")
    assert info.value.row == 1


def test_batch_then_put_wire_is_one_append(store):
    rows = rmqlog.decode_message_batch(BATCH)
    n = rows.num_rows
    table = rows.append_column("topic", pa.array(["T"] * n)).append_column("queueId", pa.array([0] * n))
    res = store.put_wire(table, dispatch=True)
    assert res.column("queueOffset").to_pylist() == [0, 1, 2]
    got = rmqlog.decode_records(store.read_window("T", 0, 0, raw=True).records.data)
    assert got.column("body").to_pylist() == rows.column("body").to_pylist()
    assert got.column("flag").to_pylist() == [3, 0, -1]


# ------------------------------------------------------------ arrival signal
def test_arrival_signal_after_units_are_readable(store):
    seen = []

    def listener(topics, qids, maxes):
        # the units are readable when the callback runs
        seen.append(
            (
                list(topics),
                qids.tolist(),
                maxes.tolist(),
                [store.max_offset(t, int(q)) for t, q in zip(topics, qids, strict=True)],
            )
        )

    unsubscribe = store.on_arrival(listener)
    store.put_batch(pa.table({"topic": ["A", "A", "B"], "body": [b"1", b"2", b"3"], "queueId": [0, 0, 3]}))
    store.dispatch()
    assert sorted(zip(seen[0][0], seen[0][1], seen[0][2], strict=True)) == [("A", 0, 2), ("B", 3, 1)]
    assert seen[0][2] == seen[0][3]
    store.put_wire(wire_row(topic=["A"]), dispatch=True)
    assert seen[-1][:3] == (["A"], [0], [3])
    unsubscribe()
    unsubscribe()  # idempotent
    store.put_batch(pa.table({"topic": ["A"], "body": [b"4"], "queueId": [0]}))
    store.dispatch()
    assert len(seen) == 2


def test_arrival_listener_failure_never_breaks_dispatch(store, caplog):
    calls = []
    store.on_arrival(lambda *a: 1 / 0)
    store.on_arrival(lambda *a: calls.append(a))
    store.put_batch(pa.table({"topic": ["A"], "body": [b"1"], "queueId": [0]}))
    assert store.dispatch() == 1 and store.max_offset("A", 0) == 1 and len(calls) == 1
    assert "arrival listener failed" in caplog.text
    with pytest.raises(rmqlog.InvalidArgumentError):
        store.on_arrival(None)  # type: ignore[arg-type]


def test_arrival_of_units_another_store_dispatched(tmp_path):
    root = tmp_path / "s"
    with rmqlog.MessageStore.open(root) as mine, rmqlog.MessageStore.open(root) as other:
        seen = []
        mine.on_arrival(lambda t, q, m: seen.append((t, q.tolist(), m.tolist())))
        other.put_batch(pa.table({"topic": ["A", "A"], "body": [b"1", b"2"], "queueId": [1, 1]}), dispatch=True)
        assert seen == []  # the other opener dispatched it: nothing of this one's ran yet
        assert mine.dispatch() == 0  # nothing left to dispatch, yet the arrival is told
        assert seen == [(["A"], [1], [2])]
        mine.dispatch()
        assert len(seen) == 1  # told once


# -------------------------------------------------------------- raw reads
def test_record_at_and_raw_queries_are_byte_exact(store):
    res = store.put_wire(
        pa.table(
            {
                "topic": ["T", "T"],
                "queueId": [0, 0],
                "body": [b"a", b"b"],
                "properties": [f"KEYS\x01k\x02UNIQ_KEY\x01{UNIQ}\x02", "KEYS\x01k\x02"],
            }
        ),
        dispatch=True,
    )
    window = store.read_window("T", 0, 0, raw=True).records
    first = store.record_at(res.column("commitLogOffset")[0].as_py())
    assert bytes(first.data) == bytes(window.data)[: int(window.sizes[0])]
    assert store.record_at(1) is None and store.record_at(10**9) is None
    by_key = store.query_by_key("T", "k", raw=True)
    assert (
        bytes(by_key.data) == bytes(window.data)
        and by_key.commit_log_offsets.tolist() == window.commit_log_offsets.tolist()
    )
    assert bytes(store.query_by_unique_key("T", UNIQ, raw=True).data) == bytes(first.data)
    assert len(store.query_by_key("T", "none", raw=True)) == 0
    ts, phy = store.index_last_update()
    # RocketMQ's index header: the newest indexed message's commitlog offset and store time
    assert phy == res.column("commitLogOffset")[1].as_py()
    assert ts == store.read_queue("T", 0, 1, 2).column("storeTimestamp").cast(pa.int64())[0].as_py() // 1000
    assert (
        store.earliest_store_time("T", 0)
        == store.read_queue("T", 0, 0, 1).column("storeTimestamp").cast(pa.int64())[0].as_py() // 1000
    )
    assert store.earliest_store_time("T", 3) == -1


def test_record_at_damaged_record_is_typed(store):
    res = store.put_wire(wire_row(body=[b"abcdef"]), dispatch=True)
    offset = res.column("commitLogOffset")[0].as_py()
    seg = store.commitlog.segments.for_offset(offset)
    body_at = offset + 88 + 4 - seg.start - 4  # BODY after the 88-byte v4 header and BODYLENGTH
    with open(seg.path, "r+b") as f:
        f.seek(body_at + 4)
        f.write(b"X")
    with pytest.raises(rmqlog.CorruptRecordError):
        store.record_at(offset)


def test_record_head_is_where_a_listed_record_belongs(store):
    """record_head: a dispatched record's topic, queue, queue offset and properties; nothing
    where no queue lists a record: not dispatched yet, inside a record, or a record forged
    inside a message body (valid lengths, PHYSICALOFFSET where it lies), whose claims are
    never taken."""
    res = store.put_wire(
        pa.table({"topic": ["T"], "queueId": [2], "body": [b"a"], "properties": ["KEYS\x01k\x02P\x01R\x02"]}),
        dispatch=True,
    )
    offset = res.column("commitLogOffset")[0].as_py()
    head = store.record_head(offset)
    assert (head.topic, head.queue_id, head.queue_offset) == ("T", 2, 0)
    assert head.properties["KEYS"] == "k" and head.properties["P"] == "R"
    assert store.record_head(offset + 1) is None and store.record_head(-1) is None and store.record_head(10**9) is None
    pending = store.put_wire(wire_row(), dispatch=False).column("commitLogOffset")[0].as_py()
    assert store.record_at(pending) is not None and store.record_head(pending) is None  # no unit yet
    store.dispatch()
    assert store.record_head(pending).topic == "T"
    # a record forged inside a body: the bytes of a real one, its PHYSICALOFFSET where it will lie
    forged = bytearray(bytes(store.record_at(offset).data))
    where = store.published_tail() + 88  # the body of the next record, after its 88-byte v4 header
    forged[28:36] = where.to_bytes(8, "big")
    store.put_wire(wire_row(topic=["U"], body=[bytes(forged)]), dispatch=True)
    assert bytes(store.record_at(where).data) == bytes(forged)  # the store reads a record there...
    assert store.record_head(where) is None  # ...that no queue lists
    with pytest.raises(rmqlog.InvalidArgumentError):
        store.record_head("x")


# --------------------------------------------------------- records decoder
def test_decode_records_gives_the_message_table(store):
    store.put_batch(
        pa.table({"topic": ["T"] * 3, "body": [b"x", b"y", b"z"], "queueId": [0, 1, 1], "tags": ["a", "b", "c"]})
    )
    store.dispatch()
    r = store.read_window("T", 1, 0, raw=True)
    got = rmqlog.decode_records(r.records.data)
    assert got.schema == rmqlog.MESSAGE_SCHEMA
    want = store.read_window("T", 1, 0).messages
    assert got.to_pylist() == want.to_pylist()
    assert rmqlog.decode_records(b"").num_rows == 0


def test_decode_records_refuses_bad_bytes(store):
    store.put_batch(pa.table({"topic": ["T"] * 2, "body": [b"x" * 20, b"y"], "queueId": [0, 0]}))
    store.dispatch()
    data = bytes(store.read_window("T", 0, 0, raw=True).records.data)
    with pytest.raises(rmqlog.CorruptRecordError):
        rmqlog.decode_records(data[:-3])  # cut short
    bad = bytearray(data)
    bad[88 + 4 + 3] ^= 0xFF  # a body byte: its CRC fails
    with pytest.raises(rmqlog.CorruptRecordError, match="CRC"):
        rmqlog.decode_records(bytes(bad))
    with pytest.raises(rmqlog.CorruptRecordError):
        rmqlog.decode_records(b"\x00" * 100)
