"""The one check of a peer's JSON values (rmqnet/remoting/json_values.py): the depth bound of a
body, exact for JSON and a bound for anything else (checked against a reference scanner written
out here), lone surrogates found in bodies and headers, valid pairs and escaped backslashes
left alone, and every failure a FieldError naming the body or the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqnet.remoting import (
    FrameDecoder,
    RemotingCommand,
    TextError,
    decode,
    encode_bytes,
    encode_frame,
)
from rmqnet.remoting.errors import FieldError, HeaderError
from rmqnet.remoting.json_values import MAX_BODY_DEPTH, escape_text, loads_body, nested_deeper
from rmqnet.remoting.route import loads_fastjson


def reference_depth(data: bytes) -> int:
    """How deep a JSON reader goes, byte by byte: brackets outside string literals (a string
    starts at a quote and ends at the next quote no backslash escapes), the deepest nesting
    before a closer with nothing open or a backslash outside a string (where any reader stops;
    past other errors it goes on: a stricter bound than a reader needs)."""
    depth = deepest = 0
    in_string = escaped = False
    for b in data:
        if in_string:
            if escaped:
                escaped = False
            elif b == 0x5C:
                escaped = True
            elif b == 0x22:
                in_string = False
        elif b == 0x22:
            in_string = True
        elif b == 0x5C:
            break  # a backslash outside a string: the reader's error
        elif b in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif b in b"]}":
            if depth == 0:
                break  # a closer with nothing open: the reader's error, it reads no further
            depth -= 1
    return deepest


def nest(depth: int) -> bytes:
    """A JSON value ``depth`` levels deep, arrays and objects alternating, strings with brackets."""
    out = b'"[{x\\"]"'
    for i in range(depth):
        out = b"[" + out + b',"}}"]' if i % 2 else b'{"k[":' + out + b"}"
    return out


@pytest.mark.parametrize("depth", [1, 5, MAX_BODY_DEPTH - 1, MAX_BODY_DEPTH, MAX_BODY_DEPTH + 1, 500])
def test_the_depth_of_json_is_exact(depth: int) -> None:
    body = nest(depth)
    assert reference_depth(body) == depth
    assert nested_deeper(body) == (depth > MAX_BODY_DEPTH)
    if depth <= MAX_BODY_DEPTH:
        assert loads_body(body, "X") == json.loads(body)
    else:
        with pytest.raises(FieldError, match=r"'body' is not X JSON \(nested too deep: more than 64 levels\)"):
            loads_body(body, "X")


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,
        b'{"a":' * 100_000,
        b"[" * 65,
        b"[]" * 10_000 + b"[" * 65,
        b"[" * 64 + b"]" * 64 + b"{" * 65,
        b'"' + b"[" * 1000 + b'\\""' + b"[" * 65,
    ],
)
def test_what_a_reader_would_nest_deep_is_refused(body: bytes) -> None:
    assert nested_deeper(body)
    with pytest.raises(FieldError, match="nested too deep"):
        loads_body(body, "X")


@pytest.mark.parametrize(
    "body",
    [
        b'["' + b"[" * 100_000 + b'"]',
        b'{"a":"\\"' + b"{" * 5000 + b'"}',
        b"[]" * 100_000,
        b'"' + b'[[[[[\\"' * 30 + b'"' + b"[" * 60,
        b"[" * 64,
    ],
)
def test_brackets_in_strings_and_siblings_do_not_count(body: bytes) -> None:
    assert not nested_deeper(body)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b"a", b",", b":", b"[[[[[[[[", b"]]]]]]]]"]), max_size=200
    )
)
def test_the_check_bounds_any_bytes(parts: list[bytes]) -> None:
    # exact for JSON, and for anything else never below what a reader scanning it would nest
    data = b"".join(parts)
    for limit in (0, 3, 8):
        if reference_depth(data) > limit:
            assert nested_deeper(data, limit), (data, limit)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab'),
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(alphabet='[]{"\\a'), kids, max_size=3),
        max_leaves=40,
    )
)
def test_json_values_are_measured_exactly(value: Any) -> None:
    data = json.dumps(value).encode()
    for limit in (0, 1, 2, 4):
        assert nested_deeper(data, limit) == (reference_depth(data) > limit)


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\uDBFF x", "\\udc00\\ud800", "a\\ud83d"])
def test_a_lone_surrogate_in_a_body_is_refused_naming_the_body(escape: str) -> None:
    body = b'{"clientID":"' + escape.encode() + b'"}'
    with pytest.raises(FieldError, match=r"'body' is not HeartbeatData JSON \(a string holds a lone surrogate"):
        loads_body(body, "HeartbeatData")
    with pytest.raises(FieldError, match="lone surrogate"):
        loads_fastjson(body)


def test_valid_pairs_and_escaped_backslashes_are_text() -> None:
    assert loads_body(b'["\\ud83d\\ude00", "\\\\ud800"]', "X") == ["\U0001f600", "\\ud800"]
    assert loads_fastjson(b'{0:"\\ud83d\\ude00"}') == {"0": "\U0001f600"}


def test_other_failures_name_the_body() -> None:
    with pytest.raises(FieldError, match=r"'body' is not X JSON \(Expecting"):
        loads_body(b"{not json", "X")
    with pytest.raises(FieldError, match="'body' is not X JSON"):
        loads_body(b'"\xff"', "X")


def test_escape_text_writes_a_lone_surrogate_as_its_escape() -> None:
    assert escape_text("a\ud800b\U0001f600") == "a\\ud800b\U0001f600"


def _frame(obj: dict[str, Any]) -> Any:
    (frame,) = FrameDecoder().feed(encode_frame(json.dumps(obj).encode()))
    return frame


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"code": 38, "opaque": 5, "extFields": {"consumerGroup": "G\ud800"}}, "consumerGroup"),
        ({"code": 38, "opaque": 5, "extFields": {"k\udc00": "v"}}, "k\\udc00"),
        ({"code": 38, "opaque": 5, "remark": "\ud800"}, "remark"),
        ({"code": 38, "opaque": 5, "language": "J\ud800"}, "language"),
        ({"code": 38, "opaque": 5, "extFields": {"topic": ["\ud800"]}}, "topic"),
    ],
)
def test_a_request_header_holding_a_lone_surrogate_raises_naming_the_field(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(TextError) as info:
        decode(_frame(obj))
    assert info.value.request is not None and info.value.request.opaque == 5
    assert info.value.field == field and f"field {field!r}" in str(info.value)
    str(info.value).encode("utf-8")


def test_a_response_holding_a_lone_surrogate_is_read_escaped() -> None:
    res = decode(
        _frame({"code": 17, "opaque": 5, "flag": 1, "remark": "topic[T\ud800] not exist", "extFields": {"k": "\udc00"}})
    )
    assert res.remark == "topic[T\\ud800] not exist" and res.ext_fields == {"k": "\\udc00"}


def test_a_header_whose_code_is_unreadable_is_a_header_error_still() -> None:
    with pytest.raises(HeaderError):
        decode(_frame({"code": "x", "opaque": 5, "remark": "\ud800"}))


def test_our_own_request_holding_a_lone_surrogate_raises_at_encode() -> None:
    with pytest.raises(UnicodeEncodeError):
        encode_bytes(RemotingCommand(105, 1, 0, None, {"topic": "\ud800"}))
