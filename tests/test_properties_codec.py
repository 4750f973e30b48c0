"""The vectorized properties parser against the reference (Java ``string2messageProperties``).

Two code paths: a fast one for well-formed columns (``k\\x01v\\x02`` repeated: what RocketMQ
and this store write) and a general one for anything else. Both must agree with the
independent reference decoder on every input, including foreign, malformed strings.
"""

from __future__ import annotations

import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

import refcodec as rc
from rmqlog.log.properties import ParsedProperties, split_keys

_chars = st.sampled_from(["a", "b", "K", "é", " ", "\x01", "\x02"])
_any = st.text(_chars, max_size=16)
_word = st.text(st.sampled_from(["a", "b", "é", "Z", " "]), max_size=4)
_well_formed = st.lists(st.tuples(_word, _word), max_size=4).map(lambda kv: "".join(f"{k}\x01{v}\x02" for k, v in kv))


def _pairs(p: ParsedProperties) -> list[dict[str, str]]:
    m = p.map_array().to_pylist()
    return [dict(row) for row in m]


def _reference(rows: list[str]) -> list[dict[str, str]]:
    return [rc.decode_properties(r.encode()) for r in rows]


@settings(max_examples=300, deadline=None)
@given(st.lists(_any, min_size=1, max_size=8))
def test_any_strings_parse_like_java(rows: list[str]) -> None:
    assert _pairs(ParsedProperties(pa.array(rows, pa.string()))) == _reference(rows)


@settings(max_examples=300, deadline=None)
@given(st.lists(_well_formed, min_size=1, max_size=8))
def test_well_formed_columns_take_the_fast_path_and_agree(rows: list[str]) -> None:
    arr = pa.array(rows, pa.string())
    fast = ParsedProperties(arr)
    assert _pairs(fast) == _reference(rows)
    slow = ParsedProperties.__new__(ParsedProperties)
    slow.n = len(rows)
    slow._parse_general(arr)
    assert fast.keys.to_pylist() == slow.keys.to_pylist()
    assert fast.values.to_pylist() == slow.values.to_pylist()
    assert fast.parent.tolist() == slow.parent.tolist()


def test_fast_path_is_used_for_well_formed_input() -> None:
    p = ParsedProperties.__new__(ParsedProperties)
    p.n = 2
    assert p._parse_well_formed(pa.array(["TAGS\x01A\x02UNIQ_KEY\x01X\x02", "k\x01v\x02"]))
    for bad in (["a\x01b\x01c\x02"], ["a\x02"], ["a\x01b\x02c"], ["a\x01b"], ["", ""]):
        assert not p._parse_well_formed(pa.array(bad))


def test_column_picks_the_last_value_and_null_when_absent() -> None:
    p = ParsedProperties(pa.array(["T\x01x\x02T\x01y\x02", "U\x01z\x02", ""]))
    assert p.column("T").to_pylist() == ["y", None, None]
    assert p.has("U").tolist() == [False, True, False]


def test_sliced_input_column() -> None:
    arr = pa.array(["x\x01y\x02", "TAGS\x01A\x02", "TAGS\x01B\x02k\x01\x02"]).slice(1)
    assert _pairs(ParsedProperties(arr)) == [{"TAGS": "A"}, {"TAGS": "B"}]


def test_split_keys_all_null_and_mixed() -> None:
    assert split_keys(pa.nulls(3, pa.string())).to_pylist() == [[], [], []]
    assert split_keys(pa.array(["a  b", None, " c"])).to_pylist() == [["a", "b"], [], ["c"]]


def _via(path: str, rows: list[str]) -> list[dict[str, str]]:
    p = ParsedProperties.__new__(ParsedProperties)
    p.n = len(rows)
    arr = pa.array(rows, pa.string())
    if path == "native":
        assert p._parse_native(arr)
    elif path == "well_formed":
        if not p._parse_well_formed(arr):
            return _reference(rows)  # not applicable: nothing to compare
    else:
        p._parse_general(arr)
    import numpy as np

    p.offsets = np.concatenate([[0], np.cumsum(np.bincount(p.parent, minlength=p.n))]).astype(np.int32)
    return [dict(r) for r in p.map_array().to_pylist()]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_any, _well_formed), min_size=1, max_size=8))
def test_every_parser_path_agrees_with_java(rows: list[str]) -> None:
    from rmqlog.log import properties

    paths = ["well_formed", "general"] + (["native"] if properties._native_parse is not None else [])
    for path in paths:
        assert _via(path, rows) == _reference(rows), path


def test_native_parser_grows_its_output_for_many_pairs() -> None:
    rows = ["".join(f"k{i}\x01v{i}\x02" for i in range(40))] * 3
    assert _pairs(ParsedProperties(pa.array(rows))) == _reference(rows)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_any, _well_formed), min_size=1, max_size=8), st.sampled_from(["a", "K", "é", "ab", " "]))
@example(["K\x01K"], "K")  # a name asked for twice
def test_a_column_found_without_the_map_is_javas_last_value(rows: list[str], name: str) -> None:
    from rmqlog.log import properties

    want = [r.get(name) for r in _reference(rows)]
    arr = pa.array(rows, pa.string())
    if properties._native_parse is not None:
        found = properties.find_values(arr, (name, "K"))
        assert found is not None and found[0].to_pylist() == want
        assert found[1].to_pylist() == [r.get("K") for r in _reference(rows)]
        lazy = ParsedProperties(arr)
        assert lazy.column(name).to_pylist() == want and "keys" not in lazy.__dict__  # no map was built
    mapped = ParsedProperties(arr)
    assert mapped.keys is not None  # the map first: column() then reads it
    assert mapped.column(name).to_pylist() == want
