"""The send's idempotence marker (``rmqlogWriter`` / ``rmqlogSequence``, the Spark sink's
exactly-once over the wire): the store's ``put_wire(writer=, sequence=)``, the header's reader,
and the broker applying it to 320 and 310 sends against a real store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from rmqnet.remoting.errors import FieldError
from rmqnet.remoting.headers import IdempotenceMarker
from wire.broker_helpers import FakePeer, encode_batch, make_broker, run, send_header, send_request


@pytest.fixture
def store(tmp_path: Path) -> Iterator[rmqlog.MessageStore]:
    s = rmqlog.MessageStore.open(tmp_path / "store", small_store_config())
    s.create_topic("T", 2)
    try:
        yield s
    finally:
        s.close()


def bodies(store: rmqlog.MessageStore, queue_id: int) -> list[bytes]:
    store.dispatch()
    return store.read_queue("T", queue_id, 0, 1000)["body"].to_pylist()


def test_put_wire_with_a_writer_is_idempotent(store: rmqlog.MessageStore) -> None:
    rows = pa.table({"topic": ["T", "T"], "queueId": [0, 0], "body": [b"a", b"b"]})
    assert store.put_wire(rows, writer="w/0", sequence=7).num_rows == 2
    assert store.put_wire(rows, writer="w/0", sequence=7).num_rows == 0  # a replay: nothing
    assert store.put_wire(rows, writer="w/0", sequence=3).num_rows == 0  # older: nothing
    assert store.put_wire(rows, writer="w/1", sequence=7).num_rows == 2  # another writer
    assert store.writer_sequence("w/0") == 7
    assert bodies(store, 0) == [b"a", b"b", b"a", b"b"]
    with pytest.raises(rmqlog.InvalidMessageError, match="writer"):
        store.put_wire(rows, writer="", sequence=1)
    with pytest.raises(rmqlog.InvalidMessageError, match="sequence"):
        store.put_wire(rows, writer="w/0", sequence=-1)


def test_marker_fields_are_read_leniently_and_checked() -> None:
    assert IdempotenceMarker.read({"b": "T"}) is None
    assert IdempotenceMarker.read({"rmqlogWriter": "q/1", "rmqlogSequence": 5}) == IdempotenceMarker("q/1", 5)
    assert IdempotenceMarker.read({"rmqlogWriter": "q/1", "rmqlogSequence": "5"}) == IdempotenceMarker("q/1", 5)
    assert IdempotenceMarker("q/1", 5).to_ext() == {"rmqlogWriter": "q/1", "rmqlogSequence": "5"}
    for ext, name in [
        ({"rmqlogWriter": "q"}, "rmqlogSequence"),
        ({"rmqlogSequence": "1"}, "rmqlogWriter"),
        ({"rmqlogWriter": "q", "rmqlogSequence": "x"}, "rmqlogSequence"),
        ({"rmqlogWriter": "q", "rmqlogSequence": "-1"}, "rmqlogSequence"),
    ]:
        with pytest.raises(FieldError) as err:
            IdempotenceMarker.read(ext)
        assert err.value.field == name


def batch_request(
    queue_id: int, bodies_: list[bytes], marker: IdempotenceMarker | None, opaque: int = 1
) -> RemotingCommand:
    req = send_request(
        send_header("T", queue_id=queue_id, batch=True),
        encode_batch([(b, 0, {"UNIQ_KEY": f"{i:032X}"}) for i, b in enumerate(bodies_)]),
        code=RequestCode.SEND_BATCH_MESSAGE,
        opaque=opaque,
    )
    if marker is not None:
        req.ext_fields.update(marker.to_ext())
    return req


def test_broker_applies_the_marker_a_replay_stores_nothing(store: rmqlog.MessageStore) -> None:
    broker = make_broker(store)
    peer = FakePeer()
    m = IdempotenceMarker("spark-query/q/0", 2 << 20)
    (first,) = run(broker, peer, batch_request(0, [b"x", b"y"], m))
    assert first is not None and first.code == ResponseCode.SUCCESS and "rmqlogDuplicate" not in first.ext_fields
    assert first.ext_fields["queueOffset"] == "0" and len(first.ext_fields["msgId"].split(",")) == 2
    (again,) = run(broker, peer, batch_request(0, [b"x", b"y"], m))
    assert again is not None and again.code == ResponseCode.SUCCESS
    # the writer's last send: answered with the original answer, marked as a duplicate
    assert again.ext_fields == {**first.ext_fields, "rmqlogDuplicate": "true"}
    assert bodies(store, 0) == [b"x", b"y"]
    assert store.writer_sequence("spark-query/q/0") == 2 << 20
    (newer,) = run(broker, peer, batch_request(0, [b"z"], IdempotenceMarker("spark-query/q/0", (2 << 20) + 1)))
    assert newer is not None and newer.code == ResponseCode.SUCCESS and newer.ext_fields["queueOffset"] == "2"
    (older,) = run(broker, peer, batch_request(0, [b"x", b"y"], m))  # not the last one: no answer kept
    assert older is not None and older.code == ResponseCode.SUCCESS
    assert older.ext_fields["rmqlogDuplicate"] == "true" and older.ext_fields["msgId"] == ""
    assert older.ext_fields["queueOffset"] == "-1"
    assert bodies(store, 0) == [b"x", b"y", b"z"]
    # another broker on the same store (a restart) keeps the writer's sequence, not the answers
    (restarted,) = run(
        make_broker(store), peer, batch_request(0, [b"z"], IdempotenceMarker("spark-query/q/0", (2 << 20) + 1))
    )
    assert restarted is not None and restarted.ext_fields["rmqlogDuplicate"] == "true"
    assert restarted.ext_fields["msgId"] == "" and bodies(store, 0) == [b"x", b"y", b"z"]


def test_marked_and_plain_sends_of_one_round_are_each_stored_once(store: rmqlog.MessageStore) -> None:
    broker = make_broker(store)
    peer = FakePeer()
    plain = send_request(send_header("T", queue_id=1), b"plain-1", opaque=1)
    marked = batch_request(1, [b"m1", b"m2"], IdempotenceMarker("w/0", 0), opaque=2)
    plain2 = send_request(send_header("T", queue_id=1), b"plain-2", opaque=3)
    replay = batch_request(1, [b"m1", b"m2"], IdempotenceMarker("w/0", 0), opaque=4)
    later = batch_request(1, [b"m3"], IdempotenceMarker("w/0", 1), opaque=5)
    answers = run(broker, peer, plain, marked, plain2, replay, later)
    assert [a.code if a else None for a in answers] == [ResponseCode.SUCCESS] * 5
    assert [a.ext_fields.get("rmqlogDuplicate") for a in answers if a] == [None, None, None, "true", None]
    assert bodies(store, 1) == [b"plain-1", b"m1", b"m2", b"plain-2", b"m3"]  # in the order they came


def test_bad_markers_are_refused_naming_the_field_and_store_nothing(store: rmqlog.MessageStore) -> None:
    broker = make_broker(store)
    peer = FakePeer()
    half = batch_request(0, [b"x"], None)
    half.ext_fields["rmqlogWriter"] = "w/0"
    empty = batch_request(0, [b"x"], IdempotenceMarker("", 1), opaque=2)
    a, b = run(broker, peer, half, empty)
    assert a is not None and a.code == ResponseCode.SYSTEM_ERROR and "rmqlogSequence" in (a.remark or "")
    assert b is not None and b.code == ResponseCode.MESSAGE_ILLEGAL and "writer" in (b.remark or "")
    assert bodies(store, 0) == []
