"""RocketMQ 4.9.8's SQL92 selector (rmqlog.filter): the grammar and Java's build-time checks
(SelectorParser.jj, ComparisonExpression.create*, ConstantExpression.create*), Java's
evaluation of string property values (ComparisonExpression.evaluate/__compare, LogicExpression,
UnaryExpression, ExpressionMessageFilter.isMatchedByCommitLog: a throw is "no match"), and the
vectorized evaluation against the scalar reference on random expressions and properties.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

import rmqlog
from rmqlog.filter import FilterParseError, compile_filter
from rmqlog.filter import sql92 as q


def props_column(rows: list[dict[str, str]]) -> pa.Array:
    return pa.array(["".join(f"{k}\x01{v}\x02" for k, v in r.items()) for r in rows], pa.string())


def java_map(row: dict[str, str]) -> dict[str, str]:
    """The properties Java's ``string2messageProperties`` keeps: an empty value is dropped."""
    return {k: v for k, v in row.items() if v}


def both(expr: str, rows: list[dict[str, str]]) -> list[bool]:
    """The vectorized answer, checked equal to the scalar reference's."""
    flt = compile_filter(expr)
    got = flt.mask_properties(props_column(rows)).tolist()
    assert got == [q.matches(flt.tree, java_map(r)) for r in rows], expr
    return got


# --------------------------------------------------------------------------- grammar
@pytest.mark.parametrize(
    "expr",
    [
        # RocketMQ's ParserTest valid set
        "a=3 and b<>4 And c>5 AND d<=4",
        "a=3 or b<>4 Or c>5 OR d<=4",
        "a in ('3', '4', '5')",
        "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
        "(a between 2 and 10) AND (b not between 6 and 9)",
        "a is null",
        "a is not null",
        "a <= now",
        # more of the grammar
        "TRUE",
        "NULL",
        "a",
        "NOT a",
        "a = 'it''s'",
        "a > -5",
        "a > +5",
        "a >= 1.5E3",
        "a < .5",
        "a < 5.",
        "a = 5L",
        "a = 2147483648",
        "a > -9223372036854775807",
        "a = TRUE",
        "1 = TRUE",
        "a = b",
        "-a = -b",
        "a = 1 -- a comment\n",
        "/* c */ a = 1 /* d */",
        "A_$1 = 'x'",
        "NOT a = 1",
        "a BETWEEN -5 AND 5",
        "a between 1 and 1.5",
        "(a = 1) = TRUE",
        "'x' <> a",
    ],
)
def test_valid_expressions_parse(expr: str) -> None:
    flt = compile_filter(expr)
    assert flt.expression == expr
    assert rmqlog.compile_filter(expr).tree == flt.tree  # exported at the top too


@pytest.mark.parametrize(
    ("expr", "position", "token"),
    [
        ("a and between 2 and 10", 6, "between"),  # RocketMQ's ParserTest invalid one
        ("a > 100000000000000000000000", 4, "100000000000000000000000"),  # past Long (testParse_decimalOverFlow)
        (" a between 10 and 0", 3, "between"),  # illegalBetween
        ("a > 1" + "1" * 400 + ".5", 4, None),  # infinite float (testParse_floatOverFlow, smaller)
        ("a > 0.0", 4, "0.0"),  # Java refuses a float below Double.MIN_VALUE
        ("a > 1e-400", 4, "1e-400"),
        ("a >", 3, "<end>"),
        ("a = NULL", 2, "="),
        ("NULL = a", 5, "="),
        ("a <> NULL", 2, "<>"),
        ("a > 'x'", 2, ">"),
        ("'x' < a", 4, "<"),
        ("a > TRUE", 2, ">"),
        ("a > NULL", 2, ">"),
        ("(a = 1) > 2", 8, ">"),
        ("NOT a > 1", 6, ">"),
        ("TRUE = 1", 5, "="),
        ("FALSE <> 1", 6, "<>"),
        ("a BETWEEN NULL AND 5", 2, "BETWEEN"),
        ("a BETWEEN 'a' AND 'b'", 2, "BETWEEN"),
        ("a BETWEEN 1 AND 'x'", 2, "BETWEEN"),
        ("a BETWEEN TRUE AND 5", 2, "BETWEEN"),
        ("5 IN ('a')", 2, "IN"),
        ("a IN ()", 6, ")"),
        ("a IN (1, 2)", 6, "1"),
        ("a IN 'x'", 5, "'x'"),
        ("a NOT = 1", 6, "="),
        ("a = 1 b = 2", 6, "b"),
        ("a = 1)", 5, ")"),
        ("a != 1", 2, "!"),
        ("a = 'open", 4, "'"),
        ("a = 1 /* open", 6, "/*"),
        ("a = 1 --", 6, "-"),
        ("a == 1", 3, "="),
        ("a = 007", 5, "0"),
        ("0L = a", 0, "0"),
        ("5", 0, "5"),
        ("'x'", 0, "'x'"),
        ("-a", 0, "-"),
        ("a AND 5", 2, "AND"),
        ("NOT 5", 0, "NOT"),
        ("a LIKE 'x%'", 2, "LIKE"),
        ("(a = 1", 6, "<end>"),
        ("a IS 5", 5, "5"),
        ("a = 1 OR", 8, "<end>"),
    ],
)
def test_malformed_expressions_are_refused_naming_position_and_token(
    expr: str, position: int, token: str | None
) -> None:
    with pytest.raises(FilterParseError) as info:
        compile_filter(expr)
    err = info.value
    assert isinstance(err, rmqlog.InvalidArgumentError)
    assert err.position == position, str(err)
    if token is not None:
        assert err.token == token, str(err)
    assert f"position {position}" in str(err)


@pytest.mark.parametrize("expr", ["", "   ", "-- only a comment\n", None, 5, b"a = 1"])
def test_empty_or_not_text_is_refused(expr: object) -> None:
    with pytest.raises(FilterParseError):
        compile_filter(expr)


def test_huge_expressions_are_bounded() -> None:
    with pytest.raises(FilterParseError, match="characters"):
        compile_filter("a = '" + "x" * q.MAX_EXPRESSION_CHARS + "'")
    with pytest.raises(FilterParseError, match="deeper"):
        compile_filter("(" * 500 + "a = 1" + ")" * 500)
    with pytest.raises(FilterParseError, match="deeper"):
        compile_filter("NOT " * 500 + "a")
    with pytest.raises(FilterParseError, match="deeper"):
        compile_filter("+" * 500 + "1 = a")
    with pytest.raises(FilterParseError, match="deeper"):
        compile_filter(" = ".join(["TRUE"] * 300))
    with pytest.raises(FilterParseError, match="nodes"):
        compile_filter(" OR ".join(f"a{i} = {i}" for i in range(2000)))
    # a long chain of one operator is walked, not recursed: fine under the node bound
    flt = compile_filter(" OR ".join(f"a = {i}" for i in range(1000)))
    assert both(flt.expression, [{"a": "999"}, {"a": "1000"}, {}]) == [True, False, False]
    # an IN list of thousands is one node
    big = compile_filter("a IN (" + ", ".join(f"'{i}'" for i in range(5000)) + ")")
    assert big.mask_properties(props_column([{"a": "4999"}, {"a": "5000"}])).tolist() == [True, False]


def test_a_heartbeat_sized_expression_is_parsed_once_and_kept_by_text() -> None:
    text = "a IN (" + ", ".join(f"'{i}'" for i in range(8_000)) + ")"
    assert len(text) < q.MAX_EXPRESSION_CHARS
    first = compile_filter(text)
    assert compile_filter(text) is first  # the second pull with it does not parse it again
    assert first.mask_properties(pa.array(["a\x017999\x02", "a\x018000\x02"])).tolist() == [True, False]


# ------------------------------------------------------------------------- semantics
def test_missing_properties_follow_java() -> None:
    rows = [{"a": "x"}, {"a": "y"}, {}]
    assert both("a = 'x'", rows) == [True, False, False]
    assert both("a <> 'x'", rows) == [False, True, False]  # null for the missing one
    assert both("'x' <> a", rows) == [False, True, True]  # doCreateEqual: a missing right side is FALSE
    assert both("NOT (a = 'x')", rows) == [False, True, False]
    assert both("a IS NULL", rows) == [False, False, True]
    assert both("a IS NOT NULL", rows) == [True, True, False]
    assert both("a IN ('x')", rows) == [True, False, False]
    assert both("a NOT IN ('x')", rows) == [False, True, False]
    assert both("a = b", [{}, {"a": "1"}, {"a": "1", "b": "1"}]) == [True, False, True]  # both missing: equal
    assert both("-a = -b", [{}, {"a": "1", "b": "1"}]) == [True, True]  # a negated string is null
    assert both("a > 1 OR TRUE", rows) == [False, False, True]  # 'x' > 1 throws: the whole row fails
    assert both("a > 1 AND FALSE", [{}]) == [False]
    assert both("NOT (a > 1 AND b > 1)", [{"a": "0"}, {"a": "5"}, {}]) == [True, False, False]
    assert both("a OR b IS NULL", [{}, {"a": "true"}, {"a": "true", "b": "1"}]) == [True, True, False]
    assert both("a", [{}, {"a": "true"}]) == [False, False]  # a string cast to boolean is FALSE
    assert both("NOT a", [{}, {"a": "true"}]) == [False, True]
    assert both("NOT a = 1", [{}, {"a": "1"}]) == [False, False]  # (NOT a) = 1: a Boolean is no number
    assert both("TRUE", [{}]) == [True]
    assert both("NULL", [{}]) == [False]
    assert both("NULL IS NULL", [{}]) == [True]


def test_numbers_follow_java_conversions() -> None:
    vals = [
        "5",
        "+5",
        "-5",
        "05",
        "5.0",
        "5.5",
        "x",
        "",
        " 5",
        "2147483648",
        "1e1",
        "٥",
        "NaN",
        "Infinity",
        "0x1.4p2",
        "5d",
        "99999999999999999999",
        "0x5",
        "inf",
    ]
    rows = [{"a": v} for v in vals]
    ok = lambda expr: [v for v, m in zip(vals, both(expr, rows), strict=True) if m]  # noqa: E731
    # an Integer constant: Integer.valueOf (sign, any script's digits, int range); else a throw
    assert ok("a = 5") == ["5", "+5", "05", "٥"]
    assert ok("a <> 5") == ["-5"]
    assert ok("a > 4") == ["5", "+5", "05", "٥"]
    assert ok("a >= 2147483647") == []  # 2147483648 does not parse as an Integer
    assert ok("a >= 2147483648") == ["2147483648"]  # a Long constant: Long.valueOf
    # a Double constant: Double.valueOf (blanks trimmed, suffixes, hex, NaN above everything)
    assert ok("a = 5.0") == ["5", "+5", "05", "5.0", " 5", "0x1.4p2", "5d"]
    assert ok("a > 5.25") == ["5.5", "2147483648", "1e1", "NaN", "Infinity", "99999999999999999999"]
    assert ok("a < -4.5") == ["-5"]
    assert ok("a BETWEEN 4.5 AND 5.5") == ["5", "+5", "05", "5.0", "5.5", " 5", "0x1.4p2", "5d"]
    assert ok("a NOT BETWEEN 4.5 AND 5.5") == ["-5", "2147483648", "1e1", "NaN", "Infinity", "99999999999999999999"]
    # a string constant: String.equals
    assert ok("a = '5'") == ["5"]
    # a Boolean constant: Boolean.valueOf(string)
    assert both("a = TRUE", [{"a": "TRUE"}, {"a": "true"}, {"a": "yes"}, {}]) == [True, True, False, False]
    assert both("a = FALSE", [{"a": "TRUE"}, {"a": "no"}]) == [False, True]
    assert both("TRUE = a", [{"a": "true"}, {}]) == [False, False]  # a Boolean then a String: ClassCastException
    # two properties by order: both read as doubles
    assert both("a > b", [{"a": "10", "b": "9"}, {"a": "10", "b": "x"}, {"a": "1e1", "b": "9.5"}]) == [
        True,
        False,
        True,
    ]
    # constants among themselves
    assert both("1 = 1.0", [{}]) == [True]
    assert both("2147483648 > 1", [{}]) == [True]
    assert both("1 = TRUE", [{}]) == [False]


def _random_expr(rnd: random.Random, depth: int = 0) -> str:
    names = ["a", "b", "c"]
    leaf_values = ["5", "-5", "5.5", "2147483648", "'5'", "'x'", "TRUE", "FALSE"]
    r = rnd.random()
    if depth > 3 or r < 0.35:
        name = rnd.choice(names)
        op = rnd.choice(
            [
                "=",
                "<>",
                ">",
                ">=",
                "<",
                "<=",
                "IS NULL",
                "IS NOT NULL",
                "IN",
                "NOT IN",
                "BETWEEN",
                "NOT BETWEEN",
                "= prop",
                "> prop",
                "bare",
            ]
        )
        numeric = [v for v in leaf_values[:4]]
        if op in ("IS NULL", "IS NOT NULL"):
            return f"{name} {op}"
        if op in ("IN", "NOT IN"):
            return f"{name} {op} ('5', 'x', 'true')"
        if op in ("BETWEEN", "NOT BETWEEN"):
            return f"{name} {op} {rnd.choice(['-5', '1'])} AND {rnd.choice(['5', '5.5'])}"
        if op == "= prop":
            return f"{name} = {rnd.choice(names)}"
        if op == "> prop":
            return f"{name} > {rnd.choice(names)}"
        if op == "bare":
            return name
        value = rnd.choice(numeric) if op in (">", ">=", "<", "<=") else rnd.choice(leaf_values)
        return f"{value} {op} {name}" if rnd.random() < 0.3 and op in ("=", "<>", ">", "<") else f"{name} {op} {value}"
    if r < 0.5:
        return f"NOT ({_random_expr(rnd, depth + 1)})"
    if r < 0.6:
        return f"({_random_expr(rnd, depth + 1)}) = {rnd.choice(['TRUE', 'FALSE', 'a'])}"
    op = rnd.choice(["AND", "OR"])
    return f"({_random_expr(rnd, depth + 1)}) {op} ({_random_expr(rnd, depth + 1)})"


def test_vectorized_agrees_with_the_scalar_reference_on_random_input() -> None:
    rnd = random.Random(20261129)
    values = [
        "5",
        "-5",
        "5.5",
        "x",
        "true",
        "TRUE",
        "",
        "2147483648",
        "NaN",
        " 5",
        "05",
        "1e1",
        "-0.0",
        "0.0",
        "0x5",
        "Infinity",
        "inf",
        "+5",
    ]
    rows = [{k: rnd.choice(values) for k in "abc" if rnd.random() < 0.7} for _ in range(300)]
    column = props_column(rows)
    checked = 0
    for _ in range(400):
        text = _random_expr(rnd)
        try:
            flt = compile_filter(text)
        except FilterParseError:
            continue
        got = flt.mask_properties(column)
        want = np.array([q.matches(flt.tree, java_map(r)) for r in rows])
        assert (got == want).all(), (text, [rows[i] for i in np.flatnonzero(got != want)[:3]])
        checked += 1
    assert checked > 250


def test_filter_is_picklable_and_reads_only_its_names() -> None:
    import pickle

    flt = compile_filter("a = 1 AND (b IS NULL OR c IN ('x'))")
    assert pickle.loads(pickle.dumps(flt)) == flt
    assert flt.names == ("a", "b", "c")
    # system properties are properties too (Java decodes the whole properties string)
    assert both("TAGS = 'TagA' AND KEYS IS NOT NULL", [{"TAGS": "TagA", "KEYS": "k"}, {"TAGS": "TagA"}]) == [
        True,
        False,
    ]
    assert compile_filter("TRUE").mask_properties(pa.array([], pa.string())).tolist() == []
