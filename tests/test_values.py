"""A value given as text is taken only when it is exactly valid (``yes`` was once read as true): the one
parser per kind of value (:mod:`rmqlog.values`), and each place that reads values through it
(the Spark source and sink's options, ``broker.conf``, the ``rmqlog`` command) refusing with its
own typed error naming the value."""

from __future__ import annotations

import pytest

from rmqlog.values import (
    InvalidValueError,
    parse_addresses,
    parse_bool,
    parse_duration_ms,
    parse_enum,
    parse_host_port,
    parse_int,
    parse_list,
    parse_number,
)


@pytest.mark.parametrize(("text", "value"), [("true", True), ("false", False), ("TRUE", True), ("False", False)])
def test_bool_takes_true_or_false(text: str, value: bool) -> None:
    assert parse_bool("b", text) is value


@pytest.mark.parametrize("text", ["yes", "no", "1", "0", "on", "", " true", "true ", "t", "truee"])
def test_bool_refuses_anything_else_naming_it(text: str) -> None:
    with pytest.raises(InvalidValueError) as err:
        parse_bool("failOnDataLoss", text)
    assert err.value.name == "failOnDataLoss" and "true or false" in err.value.problem
    assert repr(text) in err.value.problem


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("42", 42), ("-7", -7), ("+7", 7), (str(2**63 - 1), 2**63 - 1)])
def test_int_takes_java_long_digits(text: str, value: int) -> None:
    assert parse_int("n", text) == value


@pytest.mark.parametrize(
    "text", ["1_000", "1e3", " 5", "5 ", "\u0665", "\uff15", "5.0", "", "-", "0x10", str(2**63), "9" * 5000]
)
def test_int_refuses_what_python_int_would_take_or_choke_on(text: str) -> None:
    with pytest.raises(InvalidValueError) as err:
        parse_int("count", text)
    assert err.value.name == "count"


def test_int_bounds_are_the_callers() -> None:
    assert parse_int("n", "1", 1) == 1
    with pytest.raises(InvalidValueError, match="positive integer"):
        parse_int("n", "0", 1)
    with pytest.raises(InvalidValueError, match=r"in \[0, 7\]"):
        parse_int("n", "8", 0, 7)


def test_number_is_finite_and_bounded() -> None:
    assert parse_number("t", "2.5", 0, 10) == 2.5 and parse_number("t", "1e1", 0, 10) == 10
    for text in ("nan", "inf", "-1", "1,5", "", " 1", "11"):
        with pytest.raises(InvalidValueError):
            parse_number("t", text, 0, 10)


def test_list_refuses_an_empty_item_and_a_repeat() -> None:
    assert parse_list("topics", "a,b") == ("a", "b")
    assert parse_list("topics", " b , a ") == ("b", "a")  # spaces around an item are no part of it
    for text, said in (
        ("a,,b", "item 2"),
        ("a,", "item 2"),
        (",a", "item 1"),
        ("", "empty"),
        ("a, ,b", "item 2"),
        ("a,a", "named twice"),
    ):
        with pytest.raises(InvalidValueError) as err:
            parse_list("topics", text)
        assert said in err.value.problem, (text, err.value.problem)


def test_list_checks_each_item() -> None:
    assert parse_addresses("ns", "127.0.0.1:9876;[::1]:9877") == ("127.0.0.1:9876", "[::1]:9877")
    for text in (
        "127.0.0.1:9876;;127.0.0.1:9877",
        "127.0.0.1:9876;",
        "h",
        "h:0",
        "h:65536",
        "h:\u0669\u0668",
        "h:98 76",
    ):
        with pytest.raises(InvalidValueError):
            parse_addresses("ns", text)


def test_duration() -> None:
    assert [parse_duration_ms("d", t) for t in ("250", "500ms", "30s", "15m", "15min", "1h")] == [
        250,
        500,
        30_000,
        900_000,
        900_000,
        3_600_000,
    ]
    for text in ("30 s", " 30s", "1.5s", "-1s", "30sec", "", "s"):
        with pytest.raises(InvalidValueError, match="duration"):
            parse_duration_ms("d", text)
    with pytest.raises(InvalidValueError, match="1 to"):
        parse_duration_ms("d", "0", 1)


def test_enum_returns_the_choices_spelling() -> None:
    assert parse_enum("q", "HASH", ("roundRobin", "hash")) == "hash"
    with pytest.raises(InvalidValueError, match="roundRobin, hash"):
        parse_enum("q", "random", ("roundRobin", "hash"))
    with pytest.raises(InvalidValueError):
        parse_enum("role", "sync_master", ("SYNC_MASTER",), case=True)


def test_host_port() -> None:
    assert parse_host_port("a", "[::1]:10911") == ("::1", 10911)
    assert parse_host_port("a", "h:0", 0) == ("h", 0)
    for text in ("h", ":1", "h:", "h:x", "h :1"):
        with pytest.raises(InvalidValueError, match="host:port"):
            parse_host_port("a", text)
