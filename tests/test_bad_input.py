"""Bad input: a typed error naming the row and the field, and nothing written.

"Nothing written" is checked on disk: every commitlog and consume-queue byte, append.state,
dispatch.state and topics.json are unchanged, the queues' max offsets too, and a dispatch
finds nothing new.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import read_queue_all, small_store_config, snapshot_files, walk

import refcodec as rc
import rmqlog
from rmqlog import InvalidMessageError, InvalidTopicError, MessageTooLargeError, QueueIdError

MAX_BODY = 1000
MAP = pa.map_(pa.string(), pa.string())


@pytest.fixture
def bs(root: Path):
    """A store with topic T (4 queues) holding a few dispatched messages."""
    s = rmqlog.MessageStore.open(root, small_store_config(max_message_size=MAX_BODY))
    s.create_topic("T", 4)
    s.put_batch(pa.table({"topic": ["T"] * 6, "body": [b"seed%d" % i for i in range(6)]}))
    assert s.dispatch() == 6
    try:
        yield s
    finally:
        s.close()


def _state(s: rmqlog.MessageStore, root: Path) -> tuple[Any, ...]:
    files = snapshot_files(root, "append.state", "dispatch.state", "config/topics.json")
    maxes = tuple(s.max_offset("T", q) for q in range(4))
    return files, maxes


def _assert_rejected(
    s: rmqlog.MessageStore, root: Path, call: Callable[[], Any], err: type[Exception], row: int | None, field: str
) -> InvalidMessageError:
    before = _state(s, root)
    with pytest.raises(err) as info:
        call()
    e = info.value
    assert isinstance(e, InvalidMessageError)
    assert isinstance(e, rmqlog.StoreError) and isinstance(e, ValueError)
    assert (e.row, e.field) == (row, field), str(e)
    assert _state(s, root) == before
    assert s.dispatch() == 0
    assert len(walk(root)) == 6
    return e


def _table(n: int = 1, **cols: Any) -> pa.Table:
    base: dict[str, Any] = {"topic": pa.array(["T"] * n), "body": pa.array([b"ok"] * n, pa.binary())}
    base.update(cols)
    return pa.table(base)


# --------------------------------------------------------------------------- one bad row

BAD_SINGLE = [
    # (id, columns, error, field)
    ("topic-empty", {"topic": pa.array([""])}, InvalidTopicError, "topic"),
    ("topic-128-bytes", {"topic": pa.array(["x" * 128])}, InvalidTopicError, "topic"),
    ("topic-slash", {"topic": pa.array(["a/b"])}, InvalidTopicError, "topic"),
    ("topic-dotdot", {"topic": pa.array(["../x"])}, InvalidTopicError, "topic"),
    ("topic-dot", {"topic": pa.array(["a.b"])}, InvalidTopicError, "topic"),
    ("topic-space", {"topic": pa.array(["a b"])}, InvalidTopicError, "topic"),
    ("topic-non-ascii", {"topic": pa.array(["tópico"])}, InvalidTopicError, "topic"),
    ("topic-int-column", {"topic": pa.array([5])}, InvalidMessageError, "topic"),
    ("body-null", {"body": pa.array([None], pa.binary())}, InvalidMessageError, "body"),
    ("body-too-large", {"body": pa.array([b"b" * (MAX_BODY + 1)])}, MessageTooLargeError, "body"),
    ("body-int-column", {"body": pa.array([1])}, InvalidMessageError, "body"),
    (
        "properties-too-large",
        {"properties": pa.array([[("big", "v" * 32767)]], MAP)},
        MessageTooLargeError,
        "properties",
    ),
    (
        "properties-separator-in-value",
        {"properties": pa.array([[("k", "a\x02b")]], MAP)},
        InvalidMessageError,
        "properties",
    ),
    (
        "properties-separator-in-key",
        {"properties": pa.array([[("k\x01", "v")]], MAP)},
        InvalidMessageError,
        "properties",
    ),
    ("properties-empty-key", {"properties": pa.array([[("", "v")]], MAP)}, InvalidMessageError, "properties"),
    ("properties-empty-value", {"properties": pa.array([[("k", "")]], MAP)}, InvalidMessageError, "properties"),
    ("properties-null-value", {"properties": pa.array([[("k", None)]], MAP)}, InvalidMessageError, "properties"),
    ("properties-not-a-map", {"properties": pa.array(["k=v"])}, InvalidMessageError, "properties"),
    ("queue-negative", {"queueId": pa.array([-1], pa.int32())}, QueueIdError, "queueId"),
    ("queue-too-big", {"queueId": pa.array([4], pa.int32())}, QueueIdError, "queueId"),
    ("queue-huge", {"queueId": pa.array([2**40], pa.int64())}, QueueIdError, "queueId"),
    ("queue-string-column", {"queueId": pa.array(["1"])}, InvalidMessageError, "queueId"),
    ("tags-int-column", {"tags": pa.array([5])}, InvalidMessageError, "tags"),
    ("tags-separator", {"tags": pa.array(["a\x01b"])}, InvalidMessageError, "tags"),
    ("keys-int-column", {"keys": pa.array([5])}, InvalidMessageError, "keys"),
    ("keys-list-of-int", {"keys": pa.array([[1, 2]], pa.list_(pa.int64()))}, InvalidMessageError, "keys"),
    ("keys-space-in-token", {"keys": pa.array([["good", "a b"]], pa.list_(pa.string()))}, InvalidMessageError, "keys"),
    ("keys-empty-token", {"keys": pa.array([["good", ""]], pa.list_(pa.string()))}, InvalidMessageError, "keys"),
    ("keys-null-token", {"keys": pa.array([["good", None]], pa.list_(pa.string()))}, InvalidMessageError, "keys"),
    ("keys-separator", {"keys": pa.array([["a\x02"]], pa.list_(pa.string()))}, InvalidMessageError, "keys"),
    ("flag-over-int32", {"flag": pa.array([2**31], pa.int64())}, InvalidMessageError, "flag"),
    ("flag-under-int32", {"flag": pa.array([-(2**31) - 1], pa.int64())}, InvalidMessageError, "flag"),
    ("flag-string-column", {"flag": pa.array(["1"])}, InvalidMessageError, "flag"),
    ("born-string-column", {"bornTimestamp": pa.array(["2024-01-01"])}, InvalidMessageError, "bornTimestamp"),
    (
        "tags-twice",
        {"tags": pa.array(["A"]), "properties": pa.array([[("TAGS", "B")]], MAP)},
        InvalidMessageError,
        "tags",
    ),
    (
        "keys-twice",
        {"keys": pa.array([["k"]]), "properties": pa.array([[("KEYS", "j")]], MAP)},
        InvalidMessageError,
        "keys",
    ),
]


@pytest.mark.parametrize(("cols", "err", "field"), [pytest.param(c, e, f, id=i) for i, c, e, f in BAD_SINGLE])
def test_bad_row_rejected(
    bs: rmqlog.MessageStore, root: Path, cols: dict[str, Any], err: type[Exception], field: str
) -> None:
    _assert_rejected(bs, root, lambda: bs.put_batch(_table(1, **cols)), err, 0, field)


def test_null_topic_is_invalid_topic(bs: rmqlog.MessageStore, root: Path) -> None:
    # was the base InvalidMessageError before 2be997b (validate_topic(None) already said InvalidTopicError)
    _assert_rejected(
        bs, root, lambda: bs.put_batch(_table(1, topic=pa.array([None], pa.string()))), InvalidTopicError, 0, "topic"
    )


# --------------------------------------------------------------------------- whole columns


def test_unknown_column(bs: rmqlog.MessageStore, root: Path) -> None:
    _assert_rejected(
        bs, root, lambda: bs.put_batch(_table(3, queueid=pa.array([0, 1, 2]))), InvalidMessageError, None, "queueid"
    )
    _assert_rejected(bs, root, lambda: bs.put_batch(_table(1, extra=pa.array([1]))), InvalidMessageError, None, "extra")


def test_missing_required_columns(bs: rmqlog.MessageStore, root: Path) -> None:
    _assert_rejected(bs, root, lambda: bs.put_batch(pa.table({"topic": ["T"]})), InvalidMessageError, None, "body")
    _assert_rejected(bs, root, lambda: bs.put_batch(pa.table({"body": [b"x"]})), InvalidMessageError, None, "topic")


def test_not_a_table(bs: rmqlog.MessageStore, root: Path) -> None:
    with pytest.raises(InvalidMessageError):
        bs.put_batch({"topic": ["T"], "body": [b"x"]})  # type: ignore[arg-type]
    assert len(walk(root)) == 6


def test_tags_int_column_names_first_value(bs: rmqlog.MessageStore, root: Path) -> None:
    _assert_rejected(
        bs, root, lambda: bs.put_batch(_table(3, tags=pa.array([None, None, 5]))), InvalidMessageError, 2, "tags"
    )


# --------------------------------------------------------------------------- row 7 of 10

BAD_ROW7: list[tuple[str, Callable[[list[Any]], dict[str, pa.Array]], type[Exception], str]] = []


def _case(name: str, err: type[Exception], field: str):
    def deco(fn: Callable[[], dict[str, pa.Array]]):
        BAD_ROW7.append((name, fn, err, field))
        return fn

    return deco


def _col(values: list[Any], typ: pa.DataType | None = None) -> pa.Array:
    return pa.array(values, typ)


def _with7(good: Any, bad: Any) -> list[Any]:
    vals = [good] * 10
    vals[7] = bad
    return vals


@_case("topic", InvalidTopicError, "topic")
def _():
    return {"topic": _col(_with7("T", "bad/topic"))}


@_case("topic-too-long", InvalidTopicError, "topic")
def _():
    return {"topic": _col(_with7("T", "t" * 128))}


@_case("topic-null", InvalidMessageError, "topic")
def _():
    return {"topic": _col(_with7("T", None), pa.string())}


@_case("body-null", InvalidMessageError, "body")
def _():
    return {"body": _col(_with7(b"ok", None), pa.binary())}


@_case("body-too-large", MessageTooLargeError, "body")
def _():
    return {"body": _col(_with7(b"ok", b"x" * (MAX_BODY + 1)), pa.binary())}


@_case("queue-too-big", QueueIdError, "queueId")
def _():
    return {"queueId": _col(_with7(1, 9), pa.int32())}


@_case("queue-negative", QueueIdError, "queueId")
def _():
    return {"queueId": _col(_with7(None, -3), pa.int32())}


@_case("keys-space", InvalidMessageError, "keys")
def _():
    return {"keys": _col(_with7(["a", "b"], ["c", "d e"]), pa.list_(pa.string()))}


@_case("keys-empty-token", InvalidMessageError, "keys")
def _():
    return {"keys": _col(_with7(["a"], [""]), pa.list_(pa.string()))}


@_case("tags-separator", InvalidMessageError, "tags")
def _():
    return {"tags": _col(_with7("A", "A\x02"))}


@_case("properties-too-large", MessageTooLargeError, "properties")
def _():
    return {"properties": _col(_with7([("k", "v")], [("k", "v" * 33000)]), MAP)}


@_case("properties-separator", InvalidMessageError, "properties")
def _():
    return {"properties": _col(_with7([("k", "v"), ("k2", "v2")], [("k", "v"), ("k2", "\x01")]), MAP)}


@_case("properties-null-value", InvalidMessageError, "properties")
def _():
    return {"properties": _col(_with7(None, [("k", None)]), MAP)}


@_case("flag", InvalidMessageError, "flag")
def _():
    return {"flag": _col(_with7(1, 2**33), pa.int64())}


@pytest.mark.parametrize(("make", "err", "field"), [pytest.param(m, e, f, id=n) for n, m, e, f in BAD_ROW7])
def test_row_7_of_10_is_named(bs: rmqlog.MessageStore, root: Path, make, err: type[Exception], field: str) -> None:
    e = _assert_rejected(bs, root, lambda: bs.put_batch(_table(10, **make())), err, 7, field)
    assert "row 7" in str(e)


def test_row_7_in_a_chunked_table(bs: rmqlog.MessageStore, root: Path) -> None:
    good = _table(4)
    bad = pa.table(
        {"topic": ["T", "T", "T", "T", "T", "T"], "body": pa.array([b"a", b"b", b"c", None, b"e", b"f"], pa.binary())}
    )
    tbl = pa.concat_tables([good, bad])
    assert tbl.column("body").num_chunks == 2
    _assert_rejected(bs, root, lambda: bs.put_batch(tbl), InvalidMessageError, 7, "body")


# --------------------------------------------------------------------------- limits that are valid


def test_empty_body_round_trips(bs: rmqlog.MessageStore, root: Path) -> None:
    res = bs.put("T", b"", queue_id=0)
    bs.put_batch(_table(1, body=pa.array([b""], pa.binary()), queueId=pa.array([0], pa.int32())))
    bs.dispatch()
    recs = walk(root)[-2:]
    assert [(r.body, r.body_crc) for r in recs] == [(b"", 0), (b"", 0)]
    row = bs.message_by_offset(res.commit_log_offset)
    assert row is not None and row["body"] == b"" and row["bodyCRC"] == 0
    assert [r["body"] for r in read_queue_all(bs, "T", 0)][-2:] == [b"", b""]


def test_limits_inclusive(root: Path) -> None:
    cfg = small_store_config(mapped_file_size_commit_log=65536, max_message_size=MAX_BODY)
    with rmqlog.MessageStore.open(root, cfg) as s:
        s.put("t" * 127, b"b" * MAX_BODY, queue_id=0)
        uniq = len("UNIQ_KEY\x01" + "0" * 32 + "\x02")
        filler = 32767 - uniq - len("big\x01\x02")
        s.put("T", b"x", properties={"big": "v" * filler})
        with pytest.raises(MessageTooLargeError):
            s.put("T", b"x", properties={"big": "v" * (filler + 1)})
        # multi-byte characters count in bytes
        with pytest.raises(MessageTooLargeError):
            s.put("T", b"x", properties={"big": "é" * (filler // 2 + 1)})
        s.dispatch()
        recs = walk(root)
        assert recs[0].topic == "t" * 127 and len(recs[0].body) == MAX_BODY
        assert len(recs) == 2
        assert len(rc_props(recs[1])) == 32767
        row = s.message_by_offset(recs[1].physical_offset)
        assert row is not None and dict(row["properties"])["big"] == "v" * filler


def rc_props(rec) -> bytes:
    import refcodec as rc

    return rc.encode_properties(rec.properties)


# --------------------------------------------------------------------------- put() (scalar API)


def test_put_bad_scalars(bs: rmqlog.MessageStore, root: Path) -> None:
    _assert_rejected(bs, root, lambda: bs.put("a/b", b"x"), InvalidTopicError, 0, "topic")
    _assert_rejected(bs, root, lambda: bs.put("", b"x"), InvalidTopicError, 0, "topic")
    _assert_rejected(bs, root, lambda: bs.put("T", b"x", queue_id=-1), QueueIdError, 0, "queueId")
    _assert_rejected(bs, root, lambda: bs.put("T", b"x", queue_id=4), QueueIdError, 0, "queueId")
    _assert_rejected(bs, root, lambda: bs.put("T", b"x" * (MAX_BODY + 1)), MessageTooLargeError, 0, "body")
    _assert_rejected(bs, root, lambda: bs.put("T", b"x", keys=["a b"]), InvalidMessageError, 0, "keys")
    _assert_rejected(bs, root, lambda: bs.put("T", b"x", tags="a\x01"), InvalidMessageError, 0, "tags")
    _assert_rejected(bs, root, lambda: bs.put("T", b"x", flag=2**31), InvalidMessageError, 0, "flag")
    _assert_rejected(
        bs, root, lambda: bs.put("T", b"x", properties={"k": "\x02"}), InvalidMessageError, 0, "properties"
    )


def test_put_keys_string_is_split(bs: rmqlog.MessageStore, root: Path) -> None:
    bs.put("T", b"x", keys="k1  k2", queue_id=0)
    assert walk(root)[-1].properties["KEYS"] == "k1 k2"


# Before 2be997b these escaped as TypeError / pyarrow.ArrowTypeError / ArrowInvalid: put() built
# its Arrow arrays before validating the Python values.
PUT_WRONG_TYPES = [
    ("body-None", lambda s: s.put("T", None), "body"),
    ("body-int", lambda s: s.put("T", 5), "body"),
    ("tags-int", lambda s: s.put("T", b"x", tags=5), "tags"),
    ("keys-int", lambda s: s.put("T", b"x", keys=[1]), "keys"),
    ("properties-int-value", lambda s: s.put("T", b"x", properties={"k": 1}), "properties"),
    ("flag-str", lambda s: s.put("T", b"x", flag="1"), "flag"),
]


@pytest.mark.parametrize(("call", "field"), [pytest.param(c, f, id=i) for i, c, f in PUT_WRONG_TYPES])
def test_put_wrong_python_types_are_typed_errors(bs: rmqlog.MessageStore, root: Path, call, field: str) -> None:
    _assert_rejected(bs, root, lambda: call(bs), InvalidMessageError, 0, field)


# --------------------------------------------------------------------------- side effects


def test_rejected_batch_does_not_create_topic(bs: rmqlog.MessageStore, root: Path) -> None:
    # before 2be997b prepare_batch auto-created missing topics before validating the other columns
    for cols in (
        {"tags": ["bad\x01tag"]},
        {"queueId": pa.array([4], pa.int32())},
        {"body": pa.array([b"x" * (MAX_BODY + 1)])},
        {"keys": pa.array([["a b"]])},
    ):
        tbl = pa.table({"topic": ["Fresh"], "body": [b"x"], **cols})
        with pytest.raises(InvalidMessageError):
            bs.put_batch(tbl)
        assert "Fresh" not in bs.topics()
    data = rc.parse_fastjson((root / "config" / "topics.json").read_text("utf-8"))
    assert "Fresh" not in data["topicConfigTable"]
    bs.put("Fresh", b"ok")  # a valid batch creates it
    assert bs.topics()["Fresh"].write_queue_nums == 4


def test_good_batch_after_rejected_batch(bs: rmqlog.MessageStore, root: Path) -> None:
    with pytest.raises(QueueIdError):
        bs.put_batch(_table(3, queueId=pa.array([0, 1, 7], pa.int32())))
    out = bs.put_batch(_table(3, queueId=pa.array([0, 0, 0], pa.int32())))
    assert out.column("queueOffset").to_pylist() == [2, 3, 4]  # seed put 2 in queue 0
    assert bs.dispatch() == 3
    assert [r["queueOffset"] for r in read_queue_all(bs, "T", 0)] == [0, 1, 2, 3, 4]


def test_unknown_topic_without_auto_create_names_the_row(tmp_path: Path) -> None:
    root = tmp_path / "strict"
    with rmqlog.MessageStore.open(root, small_store_config(auto_create_topic_enable=False)) as s:
        s.create_topic("T", 4)
        before = snapshot_files(root, "append.state", "config/topics.json")
        topics = ["T"] * 10
        topics[7] = "Missing"
        with pytest.raises(InvalidTopicError) as info:
            s.put_batch(pa.table({"topic": topics, "body": [b"x"] * 10}))
        assert snapshot_files(root, "append.state", "config/topics.json") == before
        assert "Missing" not in s.topics()
        assert (info.value.row, info.value.field) == (7, "topic")
