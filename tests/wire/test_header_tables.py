"""Request headers declared as field tables (rmqnet/remoting/header_table.py): what a table
derives (reader, writer), checked on the declared headers and on a header made here."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rmqnet.remoting import FieldError
from rmqnet.remoting.header_table import BOOL, INT, LONG, STR, Header, header, java
from rmqnet.remoting.headers import SEND_V2_NAMES, EndTransactionHeader, PullMessageHeader, SendMessageHeader
from rmqnet.remoting.pop_headers import PopMessageHeader
from rmqnet.remoting.register import RegisterBrokerHeader, RegisterBrokerResult
from rmqnet.remoting.request_headers import (
    ConsumeStatsHeader,
    CreateTopicHeader,
    QueryMessageHeader,
    UnregisterClientHeader,
)


@header
@dataclasses.dataclass(slots=True, kw_only=True)
class Sample(Header):
    name: str = java("name", STR)
    count: int = java("count", INT)
    offset: int = java("offset", LONG)
    flag: bool = java("flag", BOOL, False)
    note: str | None = java("note", STR, None)
    limit: int = java("limit", INT, 7)


def _full() -> dict[str, Any]:
    return {"name": "n", "count": "3", "offset": str(2**40), "flag": "true", "note": "x", "limit": "9"}


def test_the_table_lists_the_declared_fields_in_order() -> None:
    rows = [(f.java, f.attr, f.kind, f.required) for f in Sample.TABLE.fields]
    assert rows == [
        ("name", "name", STR, True),
        ("count", "count", INT, True),
        ("offset", "offset", LONG, True),
        ("flag", "flag", BOOL, False),
        ("note", "note", STR, False),
        ("limit", "limit", INT, False),
    ]


def test_write_then_read_gives_the_header_back() -> None:
    h = Sample(name="n", count=-1, offset=-(2**63), flag=True, note=None, limit=0)
    assert Sample.read(h.to_ext()) == h


def test_written_in_javas_string_forms_none_left_out() -> None:
    ext = Sample(name="n", count=3, offset=2**40, flag=False).to_ext()
    assert ext == {"name": "n", "count": "3", "offset": "1099511627776", "flag": "false", "limit": "7"}
    assert all(type(v) is str for v in ext.values())


def test_absent_optional_fields_take_their_defaults() -> None:
    h = Sample.read({"name": "n", "count": 1, "offset": 2})
    assert (h.flag, h.note, h.limit) == (False, None, 7)


@pytest.mark.parametrize("missing", ["name", "count", "offset"])
def test_a_missing_required_field_is_a_field_error_naming_it(missing: str) -> None:
    ext = _full()
    del ext[missing]
    with pytest.raises(FieldError, match=f"'{missing}' is missing") as info:
        Sample.read(ext)
    assert info.value.field == missing


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("count", "three", "not a Java int"),
        ("count", str(2**31), "outside the range of a Java int"),
        ("count", True, "not a Java int"),
        ("count", 1.5, "not a Java int"),
        ("offset", str(2**63), "outside the range of a Java long"),
        ("offset", [1], "not a Java long"),
        ("flag", "maybe", "not a boolean"),
        ("flag", 2, "not a boolean"),
        ("name", {"a": 1}, "is a JSON dict"),
        ("limit", "x", "not a Java int"),
    ],
)
def test_a_value_of_the_wrong_type_is_a_field_error(field: str, value: Any, problem: str) -> None:
    ext = {**_full(), field: value}
    with pytest.raises(FieldError, match=problem) as info:
        Sample.read(ext)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("ext", "expected"),
    [
        # Java's strings, ali-ons' JSON numbers and booleans, the C++ client's "1"/"0"
        ({"count": "5", "offset": "6", "flag": "TRUE"}, (5, 6, True)),
        ({"count": 5, "offset": 6, "flag": True}, (5, 6, True)),
        ({"count": " 5 ", "offset": "6", "flag": "1"}, (5, 6, True)),
        ({"count": "-5", "offset": -6, "flag": "0"}, (-5, -6, False)),
        ({"count": "5", "offset": "6", "flag": ""}, (5, 6, False)),
    ],
)
def test_every_clients_forms_are_read(ext: dict[str, Any], expected: tuple[int, int, bool]) -> None:
    h = Sample.read({"name": 12, **ext})
    assert (h.name, h.count, h.offset, h.flag) == ("12", *expected)


def test_a_field_not_declared_with_java_is_refused() -> None:
    with pytest.raises(TypeError, match="not declared with java"):

        @header
        @dataclasses.dataclass(slots=True, kw_only=True)
        class Bad(Header):
            name: str = dataclasses.field(default="")


def test_an_unknown_field_type_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown field type"):
        java("x", "double")


def test_send_header_v2_uses_the_one_letter_names() -> None:
    h = SendMessageHeader(
        producer_group="PG",
        topic="T",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=1,
        sys_flag=0,
        born_timestamp=1700000000000,
        flag=0,
        unit_mode=True,
    )
    v2 = h.to_ext(v2=True)
    assert set(v2) <= set(SEND_V2_NAMES.values()) and v2["b"] == "T" and v2["k"] == "true"
    assert SendMessageHeader.read(v2, v2=True) == h
    assert SendMessageHeader.read(h.to_ext(), v2=False) == h
    with pytest.raises(FieldError, match="'b' is missing"):
        SendMessageHeader.read({k: v for k, v in v2.items() if k != "b"}, v2=True)
    with pytest.raises(FieldError, match="'producerGroup' is missing"):
        SendMessageHeader.read(v2, v2=False)


def test_end_transaction_keeps_javas_check_of_the_outcome() -> None:
    ext = {"producerGroup": "P", "tranStateTableOffset": "1", "commitLogOffset": "2", "msgId": "m"}
    assert EndTransactionHeader.read({**ext, "commitOrRollback": "8"}).commit_or_rollback == 8
    with pytest.raises(FieldError, match="not 0, 8 or 12"):
        EndTransactionHeader.read({**ext, "commitOrRollback": "5"})


@pytest.mark.parametrize(
    "h",
    [
        PullMessageHeader(
            consumer_group="G",
            topic="T",
            queue_id=0,
            queue_offset=5,
            max_msg_nums=32,
            sys_flag=3,
            commit_offset=0,
            suspend_timeout_millis=15000,
            sub_version=0,
        ),
        PopMessageHeader(
            consumer_group="G", topic="T", queue_id=-1, max_msg_nums=8, invisible_time=1, poll_time=2, init_mode=0
        ),
        RegisterBrokerHeader(broker_name="b", broker_addr="1:1", cluster_name="C", ha_server_addr="", broker_id=0),
        CreateTopicHeader(
            topic="T", default_topic="TBW102", read_queue_nums=4, write_queue_nums=4, perm=6, topic_filter_type="X"
        ),
        QueryMessageHeader(topic="T", key="k", max_num=32, begin_timestamp=0, end_timestamp=2**63 - 1),
        UnregisterClientHeader(client_id="c", producer_group=""),
        ConsumeStatsHeader(consumer_group="G"),
    ],
    ids=type,
)
def test_declared_headers_round_trip(h: Header) -> None:
    assert type(h).read(h.to_ext()) == h


def test_the_registration_answer_reads_an_empty_address_as_none() -> None:
    assert RegisterBrokerResult.read({"haServerAddr": "", "masterAddr": "h:1"}) == RegisterBrokerResult(
        master_addr="h:1"
    )
    assert RegisterBrokerResult(ha_server_addr="", master_addr=None).to_ext() == {}
    assert RegisterBrokerResult.read({}) == RegisterBrokerResult()
