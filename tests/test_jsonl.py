"""The vectorized JSON lines (rmqlog.admin.jsonl) give, byte for byte, what json.dumps gives
per row, for any message table (export used to make them in a per-message Python loop)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqlog.admin import jsonl
from rmqlog.schema import MESSAGE_SCHEMA

text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
maybe = st.none() | text
rows = st.fixed_dictionaries(
    {
        "topic": maybe,
        "queueId": st.none() | st.integers(-(2**31), 2**31 - 1),
        "queueOffset": st.none() | st.integers(-(2**63), 2**63 - 1),
        "commitLogOffset": st.integers(0, 2**63 - 1),
        "msgId": maybe,
        "body": st.binary(max_size=20) | text.map(str.encode),
        "tags": maybe,
        "keys": st.none() | st.lists(maybe, max_size=3),
        "properties": st.none() | st.lists(st.tuples(text, maybe), max_size=3, unique_by=lambda kv: kv[0]),
        "bornTimestamp": st.none() | st.integers(0, 253402300799999999),
        "storeTimestamp": st.integers(0, 4102444800000000),
        "bornHost": maybe,
        "storeHost": maybe,
        "flag": st.integers(-(2**31), 2**31 - 1),
        "sysFlag": st.integers(0, 255),
        "reconsumeTimes": st.integers(0, 16),
        "bodyCRC": st.integers(-(2**31), 2**31 - 1),
    }
)


def _table(batch: list[dict]) -> pa.Table:
    cols = {f.name: pa.array([r[f.name] for r in batch], f.type) for f in MESSAGE_SCHEMA}
    return pa.table(cols, schema=MESSAGE_SCHEMA)


def _reference(table: pa.Table, body: str) -> str:
    return "".join(json.dumps(jsonl.row_dict(r, body), ensure_ascii=False) + "\n" for r in table.to_pylist())


@settings(max_examples=150, deadline=None)
@given(st.lists(rows, max_size=40), st.sampled_from(jsonl.BODY_MODES), st.integers(0, 5))
def test_vectorized_lines_equal_json_dumps_per_row(batch: list[dict], body: str, skip: int) -> None:
    table = _table(batch)
    for t in (table, table.slice(min(skip, table.num_rows))):  # sliced arrays (non-zero offsets) too
        assert bytes(jsonl.lines(t, body)).decode("utf-8") == _reference(t, body)


def test_every_escape_and_a_body_that_is_not_utf8() -> None:
    nasty = "".join(chr(i) for i in range(32)) + '"\\/\x7f\u2028é😀'
    batch = [
        {f.name: None for f in MESSAGE_SCHEMA}
        | {
            "topic": nasty,
            "body": b"\xff\xfe" + nasty.encode() + b"\xc3",
            "keys": [nasty, None, ""],
            "properties": [(nasty, nasty), ("k", None)],
            "commitLogOffset": 1,
            "storeTimestamp": 1_795_492_800_123_999,
            "flag": 0,
            "sysFlag": 0,
            "reconsumeTimes": 0,
            "bodyCRC": 0,
        }
    ] * 300  # > one 256-row UTF-8 block
    table = _table(batch)
    for body in jsonl.BODY_MODES:
        got = bytes(jsonl.lines(table, body)).decode("utf-8")
        assert got == _reference(table, body)
        assert [json.loads(line)["topic"] for line in got.split("\n")[:-1]] == [
            nasty
        ] * 300  # (splitlines would split at U+2028)


def test_empty_and_chunked_tables() -> None:
    assert bytes(jsonl.lines(_table([]))) == b""
    one = {f.name: None for f in MESSAGE_SCHEMA} | {"body": b"x", "commitLogOffset": 0}
    chunked = pa.concat_tables([_table([one]), _table([one, one])])
    assert bytes(jsonl.lines(chunked)).decode() == _reference(chunked, "text")
    with pytest.raises(ValueError):
        jsonl.lines(chunked, "base64")
