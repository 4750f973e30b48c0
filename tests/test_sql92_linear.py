"""The SQL92 selector's tokenizer and parser run in time linear in their input (before, a
pull or heartbeat carrying 40-60 KB of ``-`` froze the broker 7-26 s, the tokenizer's comment
rule looking for a line break from every ``-``; a run of ``0`` did the same looking for a
``.`` after the run). Work is counted, not timed: :attr:`rmqlog.filter.tokens.Scanner.visited`
counts the characters the scanner examines. The scanner is pinned to the regular-expression
tokenizer it replaced (JavaCC's longest-match rule over the token rules of SelectorParser.jj)
on random inputs.
"""

from __future__ import annotations

import inspect
import pickle
import random
import re
import sys

import pyarrow as pa
import pytest

from rmqlog.filter import FilterParseError, compile_filter
from rmqlog.filter import sql92 as q
from rmqlog.filter.tokens import KEYWORDS, Scanner, Token, tokenize

# ------------------------------------------------------------------ the reference
_SKIP = re.compile(r"[ \t\n\r\f]+|--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^*/][^*]*\*+)*/")
_PATTERNS = (  # (kind, regex); the longest match wins, the first on a tie (JavaCC's rule)
    ("DECIMAL", re.compile(r"0|[1-9][0-9]*[lL]?")),
    ("FLOAT", re.compile(r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+")),
    ("STRING", re.compile(r"'(?:''|[^'])*'")),
    ("ID", re.compile(r"[a-zA-Z_$][a-zA-Z0-9_$]*")),
    ("OP", re.compile(r"<>|>=|<=|[=><(),+-]")),
)


def reference_tokenize(text: str) -> list[Token]:
    """The token rules as regular expressions, longest match first (quadratic on some inputs:
    only for short ones here)."""
    out: list[Token] = []
    i, n = 0, len(text)
    while True:
        m = _SKIP.match(text, i)
        while m is not None and m.end() > i:
            i = m.end()
            m = _SKIP.match(text, i)
        if i >= n:
            return [*out, Token("EOF", "", n)]
        best: tuple[str, str] | None = None
        for kind, pattern in _PATTERNS:
            m = pattern.match(text, i)
            if m is not None and (best is None or len(m.group()) > len(best[1])):
                best = (kind, m.group())
        if best is None:
            bad = text[i : i + 2] if text.startswith("/*", i) else text[i]
            raise FilterParseError(
                "unexpected character" if bad != "/*" else "unterminated comment", position=i, token=bad
            )
        kind, word = best
        if kind == "ID" and word.upper() in KEYWORDS:
            kind = word.upper()
        out.append(Token(kind, word, i))
        i += len(word)


def _outcome(tokenizer, text: str) -> object:
    try:
        return tokenizer(text)
    except FilterParseError as exc:
        return ("refused", exc.position, exc.token, exc.reason)


_ALPHABET = [*"0123456789.eE+-lL'/*\n\r \t\f=<>(),abAZ_$!x", "--", "/*", "*/", "''", "AND", "in", "1.5", "0.0", "1e5"]


def test_the_scanner_tokenizes_as_the_regular_expressions_do_on_random_inputs() -> None:
    rng = random.Random(42)
    for _ in range(30_000):
        text = "".join(rng.choice(_ALPHABET) for _ in range(rng.choice((3, 8, 16, 40))))
        assert _outcome(tokenize, text) == _outcome(reference_tokenize, text), repr(text)


# ------------------------------------------------------------------------ work counted
def _scan_all(text: str) -> int:
    """Characters the scanner examines to read every token of ``text`` (or up to its refusal)."""
    scanner = Scanner(text)
    try:
        while scanner.next().kind != "EOF":
            pass
    except FilterParseError:
        pass
    return scanner.visited


#: inputs that made a regular expression per token rescan the rest of the text, and others
FAMILIES = {
    "dashes": lambda n: "-" * n,  # the issue's: `--` looked for a line break from every `-`
    "zeros": lambda n: "0" * n,  # a FLOAT looked for `.` after the run from every `0`
    "zeros then a dot": lambda n: "0" * n + ".",
    "spaced dashes": lambda n: "- " * (n // 2),
    "comments with \\r": lambda n: "-- c\r" * (n // 5) + "a",
    "an open comment": lambda n: "a /*" + "*" * n,
    "an open string": lambda n: "'" + "x" * n,
    "quotes": lambda n: "'" + "''" * (n // 2),
    "a long name": lambda n: "a" * n,
    "names and numbers": lambda n: "a1 = 1.5e3 AND " * (n // 15),
    "digits then e": lambda n: "1" * n + "e",
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_scanner_work_doubles_at_most_with_the_input(family: str) -> None:
    make = FAMILIES[family]
    n = 20_000
    small, big = _scan_all(make(n)), _scan_all(make(2 * n))
    assert small <= 3 * len(make(n)) + 10, (family, small)
    assert big <= 2 * small + 10, (family, small, big)


def test_sixty_kilobytes_of_dashes_are_refused_typed_after_one_pass_at_most() -> None:
    text = "-" * 60_000
    parser = q.Parser(text)
    with pytest.raises(FilterParseError, match="deeper") as info:
        parser.parse()
    assert info.value.position == q.MAX_DEPTH - 1  # the 100th `-` (the expression is a level)
    # one search for a line break (none: `--` is no comment), then the tokens up to the refusal
    assert parser.scanner.visited <= len(text) + 5 * q.MAX_DEPTH
    with pytest.raises(FilterParseError, match="deeper"):
        compile_filter(text)
    spaced = q.Parser("- " * 30_000)  # no `--`: the tokens are read on demand, the rest never
    with pytest.raises(FilterParseError, match="deeper"):
        spaced.parse()
    assert spaced.scanner.visited <= 5 * q.MAX_DEPTH


# ------------------------------------------------------------------ recursion bounded
DEEP = {  # each family's deepest accepted expression, k levels
    "parentheses": (lambda k: "(" * k + "a = 1" + ")" * k, q.MAX_DEPTH // 2 - 1),
    "NOT": (lambda k: "NOT " * k + "a", q.MAX_DEPTH - 2),
    "minus": (lambda k: "-" * k + "1 = a", q.MAX_DEPTH - 2),
    "comparisons": (lambda k: " = ".join(["a"] * k), q.MAX_DEPTH),
    "NOT in parentheses": (lambda k: "(NOT " * k + "a" + ")" * k, 32),
}


@pytest.mark.parametrize("family", sorted(DEEP))
def test_nesting_is_refused_typed_and_what_is_accepted_runs_in_bounded_stack(family: str) -> None:
    make, deepest = DEEP[family]
    base = len(inspect.stack())
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(base + 400)  # whatever the input, the parser needs a few hundred frames
    try:
        tree = q.parse(make(deepest))
        q.matches(tree, {"a": "1"})
        pickle.loads(pickle.dumps(tree))
        for k in (deepest + 1, 5 * deepest, 60_000 // max(len(make(1)), 1)):
            text = make(k)
            if len(text) > q.MAX_EXPRESSION_CHARS:
                continue
            with pytest.raises(FilterParseError, match="deeper"):
                q.parse(text)
    finally:
        sys.setrecursionlimit(limit)
    assert compile_filter(make(deepest)).mask_properties(pa.array(["a\x011\x02"])).shape == (1,)


def test_the_compiled_filters_kept_are_bounded_in_count_and_characters() -> None:
    from rmqlog.filter import vectorized as v

    kept = v._COMPILED
    texts = [f"a = {i} AND b IN (" + ", ".join(f"'{j}'" for j in range(1000)) + ")" for i in range(300)]
    for text in texts:
        compile_filter(text)
    assert len(kept.entries) <= v.COMPILED_CACHE and kept.chars <= v.COMPILED_CACHE_CHARS
    assert kept.chars == sum(len(t) for t in kept.entries)
    assert compile_filter(texts[-1]) is compile_filter(texts[-1])  # the last ones are there
