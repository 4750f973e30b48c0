"""Input validation (issue 17, defects 8 and 10): reserved property names, the idempotence
marker, ranges of ids, offsets and timestamps, duplicated columns, config files.

Every rejection is a typed error of the StoreError family naming the row and field (or the
argument, or the file), and leaves the store's files as they were.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import small_store_config, snapshot_files, walk

import store
from store import InvalidMessageError
from store.message_store import writer_markers
from store.properties import DELAY_PROPERTIES, RESERVED_PROPERTIES, ROCKETMQ_SYSTEM_PROPERTIES

MAP = pa.map_(pa.string(), pa.string())
UNIQ32 = "0A0B0C0D1234ABCDEF0123456789ABCD"
UNIQ56 = "20010DB8000000000000000000000001" + "1234ABCDEF01234567891234"


@pytest.fixture
def vs(root: Path) -> Iterator[store.MessageStore]:
    """A store with topic T (4 queues) holding 4 dispatched messages."""
    s = store.MessageStore.open(root, small_store_config())
    s.create_topic("T", 4)
    s.put_batch(pa.table({"topic": ["T"] * 4, "body": [b"seed%d" % i for i in range(4)]}))
    assert s.dispatch() == 4
    try:
        yield s
    finally:
        s.close()


def _files(root: Path) -> dict[str, bytes]:
    return snapshot_files(root, "append.state", "dispatch.state", "config/topics.json", "config/consumerOffset.json")


def _rejected(s: store.MessageStore, root: Path, call: Callable[[], Any], err: type[Exception],
              row: int | None, field: str, match: str | None = None) -> InvalidMessageError:
    """``call`` raises ``err`` naming (row, field); nothing on disk changed."""
    before = _files(root)
    with pytest.raises(err, match=match) as info:
        call()
    e = info.value
    assert isinstance(e, InvalidMessageError) and isinstance(e, store.StoreError)
    assert (e.row, e.field) == (row, field), str(e)
    assert _files(root) == before
    assert s.dispatch() == 0
    return e


def _props_table(props: list[list[tuple[str, str]] | None], **cols: Any) -> pa.Table:
    n = len(props)
    base: dict[str, Any] = {"topic": ["T"] * n, "body": pa.array([b"m"] * n, pa.binary()), "properties": pa.array(props, MAP)}
    base.update(cols)
    return pa.table(base)


# ============================================================== defect 8: reserved names


def test_a_user_property_cannot_forge_the_writer_marker(root: Path) -> None:
    """The defect: the forged marker was stored, and after a rebuild of append.state the
    writer's real batch was skipped as a replay (silent loss)."""
    with store.MessageStore.open(root, small_store_config()) as s:
        s.put("T", b"seed")
        s.dispatch()
        _rejected(s, root, lambda: s.put_batch(_props_table([[("RMQLOG_WRITER", "999 evil")]])),
                  InvalidMessageError, 0, "properties", match="RMQLOG_WRITER")
        _rejected(s, root, lambda: s.put("T", b"x", properties={"RMQLOG_WRITER": "999 evil"}),
                  InvalidMessageError, 0, "properties", match="RMQLOG_WRITER")
    os.remove(root / "append.state")
    with store.MessageStore.open(root, small_store_config()) as s:
        assert s.writer_sequence("evil") is None
        assert s.put_batch(pa.table({"topic": ["T"], "body": [b"real"]}), writer="evil", sequence=5).num_rows == 1
    assert [r.body for r in walk(root)] == [b"seed", b"real"]


@pytest.mark.parametrize("name", sorted(RESERVED_PROPERTIES - DELAY_PROPERTIES) + ["RMQLOG_WRITER", "RMQLOG_", "RMQLOG_OTHER"])
def test_reserved_names_are_rejected_naming_row_and_name(vs: store.MessageStore, root: Path, name: str) -> None:
    props: list[list[tuple[str, str]] | None] = [[("a", "1")], None, [("b", "2"), (name, "v")]]
    e = _rejected(vs, root, lambda: vs.put_batch(_props_table(props)), InvalidMessageError, 2, "properties")
    assert repr(name) in str(e)


@pytest.mark.parametrize("name", sorted(DELAY_PROPERTIES))
def test_delay_and_timer_properties_say_delay_is_not_supported(vs: store.MessageStore, root: Path, name: str) -> None:
    """A DELAY property was stored and delivered at once; delay messages come in a later issue."""
    _rejected(vs, root, lambda: vs.put_batch(_props_table([None, [(name, "3")]])), InvalidMessageError, 1, "properties",
              match="delay messages are not supported yet")


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
        pytest.param(lambda s: s.put_batch(pa.table({"topic": ["T"], "body": [b"x"],
                                                     "properties": pa.array([[("TRAN_MSG", "1")]], MAP)})), 0, id="plain-shape"),
        pytest.param(lambda s: s.put_batches([pa.table({"topic": ["T"] * 3, "body": [b"a"] * 3}),
                                              _props_table([None, [("TRAN_MSG", "1")]])]), 4, id="put_batches"),
        pytest.param(lambda s: s.put_batch(_props_table([[("TRAN_MSG", "1")]]), writer="w", sequence=1), 0, id="idempotent"),
    ],
)
def test_every_put_path_checks_the_names(vs: store.MessageStore, root: Path, call: Callable[[store.MessageStore], Any], row: int) -> None:
    _rejected(vs, root, lambda: call(vs), InvalidMessageError, row, "properties", match="TRAN_MSG")


def test_allowed_names_and_lookalikes_are_stored(vs: store.MessageStore, root: Path) -> None:
    props = [("MY_DELAY", "1"), ("delay", "2"), ("rmqlog_writer", "3"), ("XRMQLOG_WRITER", "999 evil"),
             ("RMQLOG", "4"), ("TAGS", "A"), ("KEYS", "k1 k2"), ("UNIQ_KEY", UNIQ32)]
    vs.put_batch(_props_table([props]))
    rec = walk(root)[-1]
    assert rec.properties == dict(props)


@pytest.mark.parametrize("given", [UNIQ32, UNIQ56])
def test_a_client_message_id_is_kept(vs: store.MessageStore, root: Path, given: str) -> None:
    vs.put("T", b"x", properties={"UNIQ_KEY": given})
    assert walk(root)[-1].properties["UNIQ_KEY"] == given


@pytest.mark.parametrize("bad", ["MINE-1", UNIQ32.lower(), UNIQ32[:-1], UNIQ32 + "0", UNIQ56 + "00", "G" * 32, " " + UNIQ32[1:]])
def test_a_uniq_key_must_be_a_rocketmq_client_id(vs: store.MessageStore, root: Path, bad: str) -> None:
    _rejected(vs, root, lambda: vs.put_batch(_props_table([None, None, [("UNIQ_KEY", bad)]])),
              InvalidMessageError, 2, "properties", match="UNIQ_KEY")


def test_null_map_rows_do_not_count(vs: store.MessageStore, root: Path) -> None:
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
    with store.MessageStore.open(root, small_store_config()) as s:
        s.put_batch(pa.table({
            "topic": ["T"] * 3,
            "body": [b"RMQLOG_WRITER\x01999 evil\x02", b"x", b"y"],
            "tags": ["RMQLOG_WRITER", None, None],
            "keys": pa.array([["RMQLOG_WRITER"], ["999", "evil"], []], pa.list_(pa.string())),
            "properties": pa.array([None, [("p", "RMQLOG_WRITER")], [("XRMQLOG_WRITER", "999 evil")]], MAP),
        }))
    os.remove(root / "append.state")
    with store.MessageStore.open(root, small_store_config()) as s:
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
