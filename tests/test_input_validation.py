"""Input validation: reserved property names, the idempotence
marker, ranges of ids, offsets and timestamps, duplicated columns, config files.

Every rejection is a typed error of the StoreError family naming the row and field (or the
argument, or the file), and leaves the store's files as they were.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from conftest import small_store_config, snapshot_files, walk

import rmqlog
from rmqlog import (
    CorruptStoreError,
    InvalidArgumentError,
    InvalidMessageError,
    InvalidTopicError,
    QueueIdError,
)
from rmqlog.log.encode.columns import BORN_MS_MAX
from rmqlog.log.properties import DELAY_PROPERTIES, RESERVED_PROPERTIES, ROCKETMQ_SYSTEM_PROPERTIES
from rmqlog.log.writer_marker import writer_markers

MAP = pa.map_(pa.string(), pa.string())
UNIQ32 = "0A0B0C0D1234ABCDEF0123456789ABCD"
UNIQ56 = "20010DB8000000000000000000000001" + "1234ABCDEF01234567891234"


@pytest.fixture
def vs(root: Path) -> Iterator[rmqlog.MessageStore]:
    """A store with topic T (4 queues) holding 4 dispatched messages."""
    s = rmqlog.MessageStore.open(root, small_store_config())
    s.create_topic("T", 4)
    s.put_batch(pa.table({"topic": ["T"] * 4, "body": [b"seed%d" % i for i in range(4)]}))
    assert s.dispatch() == 4
    try:
        yield s
    finally:
        s.close()


def _files(root: Path) -> dict[str, bytes]:
    return snapshot_files(root, "append.state", "dispatch.state", "config/topics.json", "config/consumerOffset.json")


def _rejected(
    s: rmqlog.MessageStore,
    root: Path,
    call: Callable[[], Any],
    err: type[Exception],
    row: int | None,
    field: str,
    match: str | None = None,
) -> InvalidMessageError:
    """``call`` raises ``err`` naming (row, field); nothing on disk changed."""
    before = _files(root)
    with pytest.raises(err, match=match) as info:
        call()
    e = info.value
    assert isinstance(e, InvalidMessageError) and isinstance(e, rmqlog.StoreError)
    assert (e.row, e.field) == (row, field), str(e)
    assert _files(root) == before
    assert s.dispatch() == 0
    return e


def _props_table(props: list[list[tuple[str, str]] | None], **cols: Any) -> pa.Table:
    n = len(props)
    base: dict[str, Any] = {
        "topic": ["T"] * n,
        "body": pa.array([b"m"] * n, pa.binary()),
        "properties": pa.array(props, MAP),
    }
    base.update(cols)
    return pa.table(base)


# ============================================================== reserved names


def test_a_user_property_cannot_forge_the_writer_marker(root: Path) -> None:
    """A user property named like the idempotence marker is refused: stored, it made the
    writer's real batch look like a replay after a rebuild of append.state, and skipped it
    (silent loss)."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"seed")
        s.dispatch()
        _rejected(
            s,
            root,
            lambda: s.put_batch(_props_table([[("RMQLOG_WRITER", "999 evil")]])),
            InvalidMessageError,
            0,
            "properties",
            match="RMQLOG_WRITER",
        )
        _rejected(
            s,
            root,
            lambda: s.put("T", b"x", properties={"RMQLOG_WRITER": "999 evil"}),
            InvalidMessageError,
            0,
            "properties",
            match="RMQLOG_WRITER",
        )
    os.remove(root / "append.state")
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.writer_sequence("evil") is None
        assert s.put_batch(pa.table({"topic": ["T"], "body": [b"real"]}), writer="evil", sequence=5).num_rows == 1
    assert [r.body for r in walk(root)] == [b"seed", b"real"]


@pytest.mark.parametrize(
    "name", sorted(RESERVED_PROPERTIES - DELAY_PROPERTIES - {"DELAY"}) + ["RMQLOG_WRITER", "RMQLOG_", "RMQLOG_OTHER"]
)
def test_reserved_names_are_rejected_naming_row_and_name(vs: rmqlog.MessageStore, root: Path, name: str) -> None:
    props: list[list[tuple[str, str]] | None] = [[("a", "1")], None, [("b", "2"), (name, "v")]]
    e = _rejected(vs, root, lambda: vs.put_batch(_props_table(props)), InvalidMessageError, 2, "properties")
    assert repr(name) in str(e)


@pytest.mark.parametrize("name", sorted(DELAY_PROPERTIES - {"TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC"}))
def test_timer_properties_are_the_stores_to_set(vs: rmqlog.MessageStore, root: Path, name: str) -> None:
    """A timer property other than the three a delivery time is given with (TIMER_OUT_MS,
    TIMER_ENQUEUE_MS...) is the timer's own (tests/test_timer.py)."""
    _rejected(
        vs,
        root,
        lambda: vs.put_batch(_props_table([None, [(name, "3")]])),
        InvalidMessageError,
        1,
        "properties",
        match="set by the store's timer",
    )


def test_rocketmq_reserved_list_is_4_9_8s() -> None:
    """MessageConst.STRING_HASH_SET of rocketmq-all-4.9.8 has 31 names; TAGS, KEYS, UNIQ_KEY are the
    ones the store lets users give."""
    assert len(ROCKETMQ_SYSTEM_PROPERTIES) == 31
    assert {"TAGS", "KEYS", "UNIQ_KEY"} <= ROCKETMQ_SYSTEM_PROPERTIES
    assert not {"TAGS", "KEYS", "UNIQ_KEY"} & RESERVED_PROPERTIES
    assert {"DELAY", "WAIT", "REAL_TOPIC", "TRAN_MSG", "TIMER_DELIVER_MS"} <= RESERVED_PROPERTIES


@pytest.mark.parametrize(
    ("call", "row"),
    [
        pytest.param(lambda s: s.put("T", b"x", properties={"ok": "1", "TRAN_MSG": "true"}), 0, id="put"),
        pytest.param(lambda s: s.put_batch(_props_table([None, [("TRAN_MSG", "true")]])), 1, id="put_batch"),
        # topic/body/properties: a batch with a properties column never takes the plain fast path
        pytest.param(
            lambda s: s.put_batch(
                pa.table({"topic": ["T"], "body": [b"x"], "properties": pa.array([[("TRAN_MSG", "1")]], MAP)})
            ),
            0,
            id="plain-shape",
        ),
        pytest.param(
            lambda s: s.put_batches(
                [pa.table({"topic": ["T"] * 3, "body": [b"a"] * 3}), _props_table([None, [("TRAN_MSG", "1")]])]
            ),
            4,
            id="put_batches",
        ),
        pytest.param(
            lambda s: s.put_batch(_props_table([[("TRAN_MSG", "1")]]), writer="w", sequence=1), 0, id="idempotent"
        ),
    ],
)
def test_every_put_path_checks_the_names(
    vs: rmqlog.MessageStore, root: Path, call: Callable[[rmqlog.MessageStore], Any], row: int
) -> None:
    _rejected(vs, root, lambda: call(vs), InvalidMessageError, row, "properties", match="TRAN_MSG")


def test_allowed_names_and_lookalikes_are_stored(vs: rmqlog.MessageStore, root: Path) -> None:
    props = [
        ("MY_DELAY", "1"),
        ("delay", "2"),
        ("rmqlog_writer", "3"),
        ("XRMQLOG_WRITER", "999 evil"),
        ("RMQLOG", "4"),
        ("TAGS", "A"),
        ("KEYS", "k1 k2"),
        ("UNIQ_KEY", UNIQ32),
    ]
    vs.put_batch(_props_table([props]))
    rec = walk(root)[-1]
    assert rec.properties == dict(props)


@pytest.mark.parametrize("given", [UNIQ32, UNIQ56])
def test_a_client_message_id_is_kept(vs: rmqlog.MessageStore, root: Path, given: str) -> None:
    vs.put("T", b"x", properties={"UNIQ_KEY": given})
    assert walk(root)[-1].properties["UNIQ_KEY"] == given


@pytest.mark.parametrize(
    "bad", ["MINE-1", UNIQ32.lower(), UNIQ32[:-1], UNIQ32 + "0", UNIQ56 + "00", "G" * 32, " " + UNIQ32[1:]]
)
def test_a_uniq_key_must_be_a_rocketmq_client_id(vs: rmqlog.MessageStore, root: Path, bad: str) -> None:
    _rejected(
        vs,
        root,
        lambda: vs.put_batch(_props_table([None, None, [("UNIQ_KEY", bad)]])),
        InvalidMessageError,
        2,
        "properties",
        match="UNIQ_KEY",
    )


def test_null_map_rows_do_not_count(vs: rmqlog.MessageStore, root: Path) -> None:
    """A null map whose (hidden) entries hold a reserved name is a row without properties."""
    keys = pa.array(["DELAY", "ok"])
    items = pa.array(["1", "2"])
    offsets = pa.array([0, 1, 2], pa.int32())
    pm = pa.MapArray.from_arrays(offsets, keys, items, mask=pa.array([True, False]))
    assert pm.null_count == 1
    vs.put_batch(pa.table({"topic": ["T", "T"], "body": [b"a", b"b"], "properties": pm}))
    recs = walk(root)[-2:]
    assert "DELAY" not in recs[0].properties and recs[1].properties["ok"] == "2"


# ------------------------------------------------------------- the marker parser


def test_marker_text_elsewhere_is_not_a_marker(root: Path) -> None:
    """Tags, keys, bodies, property values and other property names holding the marker's text
    do not make a marker: the parser takes only a property named RMQLOG_WRITER."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(
            pa.table(
                {
                    "topic": ["T"] * 3,
                    "body": [b"RMQLOG_WRITER\x01999 evil\x02", b"x", b"y"],
                    "tags": ["RMQLOG_WRITER", None, None],
                    "keys": pa.array([["RMQLOG_WRITER"], ["999", "evil"], []], pa.list_(pa.string())),
                    "properties": pa.array([None, [("p", "RMQLOG_WRITER")], [("XRMQLOG_WRITER", "999 evil")]], MAP),
                }
            )
        )
    os.remove(root / "append.state")
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert s.append_state().writers == {}
        assert s.put_batch(pa.table({"topic": ["T"], "body": [b"z"]}), writer="evil", sequence=5).num_rows == 1


@pytest.mark.parametrize(
    "props",
    [
        "RMQLOG_WRITER\x01\u00b2 evil\x02",  # a digit to str.isdigit, not to int()
        "RMQLOG_WRITER\x01\u0663 evil\x02",  # an Arabic-Indic three: int() takes it, the store never writes it
        "RMQLOG_WRITER\x0199999999999999999999 evil\x02",  # over 2**63
        "RMQLOG_WRITER\x015 \x02",  # no writer
        "RMQLOG_WRITER\x01 evil\x02",  # no sequence
        "XRMQLOG_WRITER\x015 evil\x02",
        "K\x01RMQLOG_WRITER\x015 evil\x02",  # three tokens: Java drops the item
    ],
)
def test_foreign_marker_values_are_ignored(props: str) -> None:
    assert writer_markers(pa.array(["a\x01b\x02", props, "RMQLOG_WRITER\x017 good\x02"])) == [("good", 7)]


# ============================================================== ranges and types


def test_put_queue_id_over_an_int_is_a_queue_id_error(vs: rmqlog.MessageStore, root: Path) -> None:
    _rejected(vs, root, lambda: vs.put("T", b"x", queue_id=2**31), QueueIdError, 0, "queueId")
    _rejected(vs, root, lambda: vs.put("T", b"x", queue_id=2**70), QueueIdError, 0, "queueId")
    _rejected(vs, root, lambda: vs.put("T", b"x", flag=2**70), InvalidMessageError, 0, "flag")


def test_uint64_columns_over_a_long_name_the_row(vs: rmqlog.MessageStore, root: Path) -> None:
    big = pa.array([0, 2**64 - 1], pa.uint64())
    base = {"topic": ["T", "T"], "body": [b"a", b"b"]}
    _rejected(vs, root, lambda: vs.put_batch(pa.table({**base, "queueId": big})), QueueIdError, 1, "queueId")
    _rejected(vs, root, lambda: vs.put_batch(pa.table({**base, "flag": big})), InvalidMessageError, 1, "flag")


BAD_BORN = [
    ("int-negative", pa.array([1, -1], pa.int64())),
    ("int-long-max", pa.array([1, 2**63 - 1], pa.int64())),
    ("int-after-9999", pa.array([1, BORN_MS_MAX + 1], pa.int64())),
    ("uint64-max", pa.array([1, 2**64 - 1], pa.uint64())),
    ("us-long-max", pa.array([1, 2**63 - 1], pa.timestamp("us"))),
    ("us-after-9999", pa.array([1, (BORN_MS_MAX + 1) * 1000], pa.timestamp("us", tz="UTC"))),
    ("s-overflowing-ms", pa.array([1, 2**62], pa.timestamp("s"))),
    ("ms-negative", pa.array([1, -5], pa.timestamp("ms"))),
    ("ns-before-1970", pa.array([1, -1], pa.timestamp("ns"))),
]


@pytest.mark.parametrize("born", [pytest.param(b, id=i) for i, b in BAD_BORN])
def test_born_timestamp_out_of_range_names_the_row(vs: rmqlog.MessageStore, root: Path, born: pa.Array) -> None:
    tbl = pa.table({"topic": ["T", "T"], "body": [b"a", b"b"], "bornTimestamp": born})
    _rejected(vs, root, lambda: vs.put_batch(tbl), InvalidMessageError, 1, "bornTimestamp", match="1970-01-01")


def test_born_timestamp_edges_and_units_decode(vs: rmqlog.MessageStore, root: Path) -> None:
    """0 and 9999-12-31T23:59:59.999Z are stored and decode (Arrow, Python datetime); timestamps
    of any unit are truncated to ms (a microsecond timestamp was refused before)."""
    utc = dt.UTC
    cases = [
        (pa.array([0], pa.int64()), 0),
        (pa.array([BORN_MS_MAX], pa.int64()), BORN_MS_MAX),
        (pa.array([dt.datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=utc)], pa.timestamp("us", tz="UTC")), 1704067200123),
        (pa.array([dt.datetime(2024, 1, 1, 0, 0, 0, 999999)], pa.timestamp("us")), 1704067200999),
        (pa.array([1704067200], pa.timestamp("s")), 1704067200000),
        (pa.array([1704067200123456789], pa.timestamp("ns", tz="Europe/Paris")), 1704067200123),
        (pa.array([(BORN_MS_MAX + 1) * 1000 - 1], pa.timestamp("us")), BORN_MS_MAX),
        (pa.array([2**63 - 1], pa.timestamp("ns")), (2**63 - 1) // 10**6),
        (pa.array([7], pa.uint8()), 7),
    ]
    offsets = []
    for born, _ in cases:
        res = vs.put_batch(
            pa.table({"topic": ["T"], "body": [b"t"], "bornTimestamp": born, "queueId": pa.array([0], pa.int32())})
        )
        offsets.append(res["commitLogOffset"][0].as_py())
    recs = walk(root)[-len(cases) :]
    assert [r.born_timestamp for r in recs] == [ms for _, ms in cases]
    vs.dispatch()
    for off, (_, ms) in zip(offsets, cases, strict=True):
        row = vs.message_by_offset(off)
        assert row is not None
        assert row["bornTimestamp"] == dt.datetime(1970, 1, 1, tzinfo=utc) + dt.timedelta(milliseconds=ms)
    read = vs.read_queue("T", 0, 0, 1 << 40)
    assert read["bornTimestamp"].cast(pa.int64()).to_pylist()[-len(cases) :] == [ms * 1000 for _, ms in cases]


@pytest.mark.parametrize("name", ["topic", "body", "queueId", "tags", "keys", "properties", "flag", "bornTimestamp"])
def test_a_duplicated_column_is_named(vs: rmqlog.MessageStore, root: Path, name: str) -> None:
    cols = {
        "topic": pa.array(["T"]),
        "body": pa.array([b"x"]),
        "queueId": pa.array([0], pa.int32()),
        "tags": pa.array(["A"]),
        "keys": pa.array([["k"]]),
        "properties": pa.array([[("p", "1")]], MAP),
        "flag": pa.array([1], pa.int32()),
        "bornTimestamp": pa.array([5], pa.int64()),
    }
    names = ["topic", "body", name] + ([name] if name not in ("topic", "body") else [])
    tbl = pa.Table.from_arrays([cols[n] for n in names], names=names)
    _rejected(vs, root, lambda: vs.put_batch(tbl), InvalidMessageError, None, name, match="2 columns")


def test_a_duplicated_queue_id_in_the_plain_shape(vs: rmqlog.MessageStore, root: Path) -> None:
    """topic/body/queueId of nulls is the plain fast path's shape: a duplicate queueId is not."""
    nulls = pa.nulls(1, pa.int32())
    tbl = pa.Table.from_arrays([pa.array(["T"]), nulls, nulls], names=["topic", "queueId", "queueId"])
    _rejected(vs, root, lambda: vs.put_batch(tbl), InvalidMessageError, None, "queueId")
    tbl = pa.Table.from_arrays([pa.array(["T"]), pa.array([b"x"]), pa.array([b"y"])], names=["topic", "body", "body"])
    _rejected(vs, root, lambda: vs.put_batch(tbl), InvalidMessageError, None, "body")


def test_a_topic_without_write_queues_refuses_messages(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.create_topic("T", 4)
    path = root / "config" / "topics.json"
    data = json.loads(path.read_text())
    data["topicConfigTable"]["T"]["writeQueueNums"] = 0
    path.write_text(json.dumps(data))
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        for call in (
            lambda: s.put("T", b"x"),
            lambda: s.put_batch(pa.table({"topic": ["U", "T"], "body": [b"a", b"b"]})),
        ):
            with pytest.raises(InvalidTopicError, match="no write queues") as info:
                call()
            assert info.value.field == "topic"
        assert walk(root) == []


# ------------------------------------------------------------- commit_offset and friends


@pytest.mark.parametrize(
    ("queue_id", "offset", "arg"),
    [
        (-1, 0, "queue_id"),
        (0, -5, "offset"),
        (0, 2**63, "offset"),
        (0, 2**70, "offset"),
        (2**31, 0, "queue_id"),
        (4, 0, "queue_id"),
        (0, 1.5, "offset"),
        (1.0, 1, "queue_id"),
        (True, 1, "queue_id"),
        (0, False, "offset"),
        ("1", 1, "queue_id"),
        (0, "1", "offset"),
        (None, 1, "queue_id"),
    ],
)
def test_commit_offset_bad_arguments(vs: rmqlog.MessageStore, root: Path, queue_id: Any, offset: Any, arg: str) -> None:
    before = _files(root)
    with pytest.raises(InvalidArgumentError, match=f"^{arg}") as info:
        vs.commit_offset("g", "T", queue_id, offset)
    assert isinstance(info.value, rmqlog.StoreError)
    assert _files(root) == before


def test_commit_offset_good_arguments(vs: rmqlog.MessageStore) -> None:
    vs.commit_offset("g", "T", np.int32(3), np.int64(2**63 - 1))  # numpy ints; a long's max
    assert vs.committed_offset("g", "T", 3) == 2**63 - 1
    vs.commit_offset("g", "Unknown", 70, 5)  # a topic not in topics.json: any queue (RocketMQ's broker)
    assert vs.committed_offset("g", "Unknown", 70) == 5
    vs.commit_offset("g", "T", 0, 10**6)  # past the queue's end: stored as given
    assert vs.committed_offset("g", "T", 0) == 10**6


def test_commit_offset_on_a_queue_of_a_shrunk_topic(vs: rmqlog.MessageStore) -> None:
    vs.create_topic("S", 8)
    vs.put("S", b"x", queue_id=7)
    vs.dispatch()
    vs.create_topic("S", 4)
    vs.commit_offset("g", "S", 7, 1)  # its folder still exists: a queue of the topic
    assert vs.committed_offset("g", "S", 7) == 1
    with pytest.raises(InvalidArgumentError, match="queue_id 6"):
        vs.commit_offset("g", "S", 6, 1)


@pytest.mark.parametrize("queue_id", [-1, 2**31, 1.0, True, "0", None])
def test_committed_offset_bad_queue_id(vs: rmqlog.MessageStore, queue_id: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="^queue_id"):
        vs.committed_offset("g", "T", queue_id)


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"queues": 0}, "queues"),
        ({"queues": -1}, "queues"),
        ({"queues": 65536}, "queues"),
        ({"queues": True}, "queues"),
        ({"queues": 2.0}, "queues"),
        ({"queues": 2, "read_queues": 0}, "read_queues"),
        ({"read_queues": -3}, "read_queues"),
    ],
)
def test_create_topic_bad_queue_counts(vs: rmqlog.MessageStore, root: Path, kwargs: dict[str, Any], arg: str) -> None:
    before = _files(root)
    with pytest.raises(InvalidArgumentError, match=f"^{arg} "):
        vs.create_topic("Z", **kwargs)
    assert _files(root) == before
    assert "Z" not in vs.topics()


def test_create_topic_counts(vs: rmqlog.MessageStore) -> None:
    assert (vs.create_topic("A").write_queue_nums, vs.create_topic("A").read_queue_nums) == (4, 4)
    tc = vs.create_topic("B", 65535, read_queues=1)
    assert (tc.write_queue_nums, tc.read_queue_nums) == (65535, 1)
    assert vs.topics()["B"] == tc


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s: s.min_offset("T", -1), id="min-negative"),
        pytest.param(lambda s: s.max_offset("T", 2**31), id="max-huge"),
        pytest.param(lambda s: s.max_offset("T", 1.0), id="max-float"),
        pytest.param(lambda s: s.min_offset("T", True), id="min-bool"),
        pytest.param(lambda s: s.read_queue("T", -1, 0, 10), id="read-negative"),
        pytest.param(lambda s: s.read_queue("T", 0, 0.5, 10), id="read-float-start"),
        pytest.param(lambda s: s.offset_for_timestamp("T", 2**40, 0), id="ofts-huge"),
        pytest.param(lambda s: s.offset_for_timestamp("T", 0, "now"), id="ofts-str"),
        pytest.param(lambda s: s.get_messages("g", "T", 1.5, 0), id="get-float-queue"),
        pytest.param(lambda s: s.get_messages("g", "T", True, 0), id="get-bool-queue"),
        pytest.param(lambda s: s.get_messages("g", "T", 0, "0"), id="get-str-offset"),
        pytest.param(lambda s: s.get_messages("g", "T", 0, 0, 1.5), id="get-float-count"),
        pytest.param(lambda s: s.get_messages("g", "T", 2**70, 0), id="get-over-long"),
        pytest.param(lambda s: s.message_by_offset(0.0), id="by-offset-float"),
    ],
)
def test_read_calls_reject_bad_arguments(vs: rmqlog.MessageStore, call: Callable[[rmqlog.MessageStore], Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        call(vs)


def test_read_calls_keep_rocketmq_answers_for_missing_queues(vs: rmqlog.MessageStore) -> None:
    S = rmqlog.GetMessageStatus
    assert vs.get_messages("g", "T", -1, 0).status is S.NO_MATCHED_LOGIC_QUEUE
    assert vs.get_messages("g", "T", 2**40, 0).status is S.NO_MATCHED_LOGIC_QUEUE
    assert vs.max_offset("T", 2**31 - 1) == 0 and vs.min_offset("T", np.int64(0)) == 0
    assert vs.get_messages("g", "T", np.int32(0), np.int64(0)).status is S.FOUND


# ------------------------------------------------------------- config files


def _write_offsets(root: Path, table: dict[str, Any], name: str = "consumerOffset.json") -> None:
    (root / "config" / name).write_text(json.dumps({"offsetTable": table}))


def test_non_utf8_consumer_offsets_is_corrupt_store(vs: rmqlog.MessageStore, root: Path) -> None:
    path = root / "config" / "consumerOffset.json"
    path.write_bytes(b'{"offsetTable":{"T@g":{"0":\xff}}}')
    with pytest.raises(CorruptStoreError) as info:
        vs.committed_offset("g", "T", 0)
    assert info.value.path == str(path) and "UTF-8" in str(info.value)
    with pytest.raises(CorruptStoreError):
        vs.commit_offset("g", "T", 0, 1)
    assert path.read_bytes() == b'{"offsetTable":{"T@g":{"0":\xff}}}'


@pytest.mark.parametrize(
    "bad",
    [
        b"\xff\xfe{}",
        b'{"offsetTable":{"T@g":{"0":\xff}}}',
        b"{",
        b'{"offsetTable":[1]}',
        b'{"offsetTable":{"T@g":{"0":1.5}}}',
        b'{"offsetTable":{"T@g":{"x":1}}}',
        b'{"offsetTable":{"T@g":{"0":"7"}}}',
        b'{"offsetTable":{"T@g":[0]}}',
        b"[" * 100000,
    ],
)
def test_a_bad_consumer_offsets_falls_back_to_its_bak(vs: rmqlog.MessageStore, root: Path, bad: bytes) -> None:
    _write_offsets(root, {"T@g": {"0": 42}}, "consumerOffset.json.bak")
    (root / "config" / "consumerOffset.json").write_bytes(bad)
    assert vs.committed_offset("g", "T", 0) == 42
    vs.commit_offset("g", "T", 1, 7)  # rewrites the main file from what was readable
    assert vs.consumer_offsets.table() == {"T@g": {0: 42, 1: 7}}


def test_a_bad_topics_json_falls_back_to_its_bak(root: Path) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.create_topic("T", 3)
        s.create_topic("U", 2)  # topics.json.bak now holds T
    (root / "config" / "topics.json").write_bytes(b'{"topicConfigTable":{"T":{"topicName":"T","writeQueueNums":\xff}}}')
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert {n: t.write_queue_nums for n, t in s.topics().items()} == {"T": 3}
    for both in ("topics.json", "topics.json.bak"):
        (root / "config" / both).write_bytes(b'{"topicConfigTable":{"T":{"topicName":"T","writeQueueNums":-1}}}')
    with pytest.raises(CorruptStoreError, match="writeQueueNums") as info:
        rmqlog.MessageStore.open(root, small_store_config())
    assert info.value.path == str(root / "config" / "topics.json")


def test_untrusted_topic_names_are_never_listed_nor_used(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.create_topic("T", 2)
    path = root / "config" / "topics.json"
    data = json.loads(path.read_text())
    t = data["topicConfigTable"]["T"]
    foreign = {
        "../../evil": {**t, "topicName": "../../evil"},
        "Q": {**t, "topicName": "R"},
        "bad name": {**t, "topicName": "bad name"},
        "N": {**t, "topicName": None},
    }
    data["topicConfigTable"].update(foreign)
    path.write_text(json.dumps(data))
    with (
        caplog.at_level(logging.WARNING, logger="rmqlog.config_files"),
        rmqlog.MessageStore.open(root, small_store_config()) as s,
    ):
        assert sorted(s.topics()) == ["T"]
        assert any("../../evil" in r.getMessage() for r in caplog.records)
        assert any("'Q'" in r.getMessage() and "differs" in r.getMessage() for r in caplog.records)
        s.put("V", b"x")  # auto-creates V: topics.json is rewritten
        s.dispatch()
        assert sorted(s.topics()) == ["T", "V"]
        with pytest.raises(InvalidTopicError):
            s.put("../../evil", b"x")
    kept = json.loads(path.read_text())["topicConfigTable"]
    assert {k: kept[k] for k in foreign} == foreign  # kept in the file as they were
    assert sorted(p.name for p in (root / "consumequeue").iterdir()) == ["V"]
    assert not (root.parent / "evil").exists()


def test_untrusted_offset_keys_are_skipped_and_kept(vs: rmqlog.MessageStore, root: Path) -> None:
    foreign = {"../x@g": {"0": 1}, "T@bad group": {"0": 2}, "no-at-sign": {"0": 3}, "T@g@h": {"0": 4}}
    _write_offsets(root, {**foreign, "T@g": {"0": 5}})
    assert vs.consumer_offsets.table() == {"T@g": {0: 5}}
    assert vs.committed_offset("g", "T", 0) == 5
    vs.commit_offset("g", "T", 1, 6)
    table = json.loads((root / "config" / "consumerOffset.json").read_text())["offsetTable"]
    assert table == {**foreign, "T@g": {"0": 5, "1": 6}}


# ------------------------------------------------------------- names on disk


def test_stray_consume_queue_folders_are_not_queues(root: Path) -> None:
    """A folder under consumequeue/ that the store would not have named (not a valid topic, a
    queue id not in canonical decimal) made open fail with InvalidTopicError; it is ignored."""
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"x", queue_id=0)
        s.dispatch()
    for stray in ("bad name/0", "T/junk", "T/007", "T/\u0663", "T/99999999999", "%RETRY%g/x"):
        (root / "consumequeue" / stray).mkdir(parents=True)
    with rmqlog.MessageStore.open(root, small_store_config()) as s:
        assert [(cq.directory.parent.name, cq.directory.name) for cq in s.parts.queues.all()] == [("T", "0")]
        s.put("T", b"y", queue_id=0)
        assert s.dispatch() == 1
        assert s.verify().ok
        assert s.max_offset("T", 0) == 2
    assert (root / "consumequeue" / "bad name" / "0").is_dir()  # left as it was


def test_segment_names_are_ascii_digits() -> None:
    from rmqlog.paths import parse_queue_dir_name, parse_segment_name

    assert parse_segment_name("0" * 20) == 0 and parse_segment_name("\u0660" * 20) is None
    assert [parse_queue_dir_name(n) for n in ("0", "12", "2147483647", "2147483648", "01", "\u0663", "-1", "")] == [
        0,
        12,
        2**31 - 1,
        None,
        None,
        None,
        None,
        None,
    ]
