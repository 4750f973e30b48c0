"""The tokens of a SQL92 selector (RocketMQ 4.9.8's ``SelectorParser.jj`` token rules), read on
demand and in time linear in the text.

Tokens: ``DECIMAL`` (``0`` or ``[1-9][0-9]*`` with an optional ``l``/``L``), ``FLOAT``
(``1.5``, ``1.``, ``.5``, ``5E10``), ``STRING`` (``'it''s'``), ``ID`` (``[a-zA-Z_$][a-zA-Z0-9_$]*``,
a keyword when it is one of :data:`KEYWORDS` in any case: the token's kind is then the keyword
in upper case), ``OP`` (``<> >= <= = > < ( ) , + -``), then ``EOF``. Skipped: blanks
(``[ \\t\\n\\r\\f]``), ``--`` comments that end at a line break (``\\n``, ``\\r`` or ``\\r\\n``: a
``--`` with no line break after it is two ``-`` tokens, as in Java) and ``/* */`` comments. Where
two rules match, the longest match wins, the first rule on a tie (JavaCC's rule).

Linear time: every character is examined a bounded number of times. The two places where
a regular expression per token would rescan the rest of the text are measured once and
remembered: the position of the next line break (a run of ``-`` would otherwise look for one
at each ``-``) and the end of a run of digits with what follows it (a run of ``0`` is one
``0`` token per digit, and each would look for a ``.`` or an exponent after the run).
:attr:`Scanner.visited` counts the characters examined, for the tests.

Errors: :class:`FilterParseError` (an :class:`rmqlog.errors.InvalidArgumentError`) naming the
position (0-based character) and the text there.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..errors import InvalidArgumentError

KEYWORDS = frozenset(("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"))
_BLANKS = re.compile(r"[ \t\n\r\f]+")
_BREAK = re.compile(r"[\n\r]")
_DIGITS = re.compile(r"[0-9]+")
_ID = re.compile(r"[a-zA-Z_$][a-zA-Z0-9_$]*")
_ID_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_DIGIT = frozenset("0123456789")
_OPS2 = frozenset(("<>", ">=", "<="))
_OPS1 = frozenset("=><(),+-")
_SKIP_START = frozenset(" \t\n\r\f-/")  # what may start blanks or a comment


class FilterParseError(InvalidArgumentError):
    """A SQL92 expression that RocketMQ's parser (or this one's bounds) refuses.

    ``position``: 0-based character where the problem was found (``None``: the whole
    expression); ``token``: the text there."""

    def __init__(self, reason: str, *, position: int | None = None, token: str | None = None) -> None:
        where = (
            ""
            if position is None
            else f" at position {position}" + (f" (token {_short(token)!r})" if token is not None else "")
        )
        super().__init__(f"invalid SQL92 expression{where}: {reason}")
        self.reason, self.position, self.token = reason, position, token


def _short(token: str | None) -> str | None:
    """A token as the error message shows it: at most 64 characters (a string literal can be
    as long as the expression)."""
    return token if token is None or len(token) <= 64 else token[:61] + "..."


class Token(NamedTuple):
    """One token (a tuple: made ~2x faster than a frozen dataclass, a few per character of a
    long expression)."""

    kind: str  # DECIMAL, FLOAT, STRING, ID, OP, a keyword (upper case), or EOF
    text: str
    pos: int


class Scanner:
    """The tokens of ``text``, one at a time (:meth:`next`), then ``EOF`` for ever.

    Raises :class:`FilterParseError` from :meth:`next` at a character no token starts with
    (``unexpected character``), an unterminated ``/*`` comment or string literal."""

    def __init__(self, text: str) -> None:
        self.text, self.n, self.i = text, len(text), 0
        #: characters examined so far (each primitive counts the span it looked at, plus one)
        self.visited = 0
        self._break = -1  # the next line break at or after the last search (n: none ahead)
        self._run_end = 0  # the end of the run of digits measured last
        self._run_float = ""  # what makes a FLOAT of that run: the text after it, or "" (none)

    def next(self) -> Token:
        text, i = self.text, self.i
        if i < self.n and text[i] in _SKIP_START:
            self._skip()
            i = self.i
        if i >= self.n:
            return Token("EOF", "", self.n)
        c = text[i]
        self.visited += 1
        if c in _ID_START:
            end = self._match(_ID, i)
            word = text[i:end]
            upper = word.upper()
            return self._emit(upper if upper in KEYWORDS else "ID", word, i)
        if c in _DIGIT:
            return self._number(i)
        if c == ".":
            tail = self._fraction(i, digit_needed=True)
            if tail is None:
                raise FilterParseError("unexpected character", position=i, token=c)
            return self._emit("FLOAT", text[i:tail], i)
        if c == "'":
            return self._emit("STRING", text[i : self._string(i)], i)
        two = text[i : i + 2]
        if two in _OPS2:
            return self._emit("OP", two, i)
        if c in _OPS1:
            return self._emit("OP", c, i)
        raise FilterParseError("unexpected character", position=i, token=c)

    # -- pieces
    def _emit(self, kind: str, word: str, at: int) -> Token:
        self.i = at + len(word)
        return Token(kind, word, at)

    def _match(self, pattern: re.Pattern[str], at: int) -> int:
        """The end of ``pattern``'s match at ``at`` (``at`` when none); counts what it looked at."""
        m = pattern.match(self.text, at)
        end = at if m is None else m.end()
        self.visited += end - at + 1
        return end

    def _skip(self) -> None:
        """Past blanks and comments."""
        text = self.text
        while self.i < self.n:
            i = self.i
            c = text[i]
            if c in " \t\n\r\f":
                self.i = self._match(_BLANKS, i)
            elif text.startswith("--", i) and self._next_break(i + 2) < self.n:
                b = self._break
                self.i = b + 2 if text.startswith("\r\n", b) else b + 1
            elif text.startswith("/*", i):
                end = text.find("*/", i + 2)
                self.visited += (self.n if end < 0 else end + 2) - i
                if end < 0:
                    raise FilterParseError("unterminated comment", position=i, token="/*")
                self.i = end + 2
            else:
                return

    def _next_break(self, at: int) -> int:
        """The first line break at or after ``at`` (``n``: none). Searched only when the last
        one found lies before ``at``: the searches cover disjoint spans of the text."""
        if self._break < at:
            m = _BREAK.search(self.text, at)
            self._break = self.n if m is None else m.start()
            self.visited += self._break - at + 1
        return self._break

    def _number(self, i: int) -> Token:
        """A DECIMAL or FLOAT starting at the digit at ``i``. A FLOAT from anywhere in a run
        of digits ends where the one from the run's start ends (the ``.`` or exponent comes
        after the run), so the run is measured once, at its first digit."""
        text = self.text
        if i >= self._run_end:  # a new run
            self._run_end = self._match(_DIGITS, i)
            dot = text.startswith(".", self._run_end)
            tail = self._fraction(self._run_end, digit_needed=False) if dot else self._exponent(self._run_end)
            self._run_float = text[self._run_end : tail] if tail is not None else ""
        if self._run_float:  # the longer match: a FLOAT is longer than any DECIMAL here
            return self._emit("FLOAT", text[i : self._run_end] + self._run_float, i)
        if text[i] == "0":
            return self._emit("DECIMAL", "0", i)
        end = self._run_end + 1 if text.startswith(("l", "L"), self._run_end) else self._run_end
        return self._emit("DECIMAL", text[i:end], i)

    def _fraction(self, dot: int, *, digit_needed: bool) -> int | None:
        """The end of ``.[0-9]*`` and an optional exponent at ``dot``; ``None`` when
        ``digit_needed`` (a FLOAT that starts with the dot, ``.5``) and no digit follows."""
        end = self._match(_DIGITS, dot + 1)
        if digit_needed and end == dot + 1:
            return None
        exp = self._exponent(end)
        return end if exp is None else exp

    def _string(self, i: int) -> int:
        """The end of the string literal opening at ``i`` (``''`` is a quote inside it). One
        left open after a ``''`` ends at that pair's first quote (the regular expression
        ``'(?:''|[^'])*'`` backtracks so); one left open without is an unexpected character."""
        text, k, last_pair = self.text, i + 1, -1
        while True:
            j = text.find("'", k)
            self.visited += (self.n if j < 0 else j + 1) - k
            if j < 0:
                if last_pair < 0:
                    raise FilterParseError("unexpected character", position=i, token="'")
                return last_pair + 1
            if not text.startswith("''", j):
                return j + 1
            last_pair, k = j, j + 2
            self.visited += 1

    def _exponent(self, at: int) -> int | None:
        """The end of ``[eE][+-]?[0-9]+`` at ``at``, or ``None``."""
        text = self.text
        if not text.startswith(("e", "E"), at):
            return None
        digits = at + 2 if text.startswith(("+", "-"), at + 1) else at + 1
        end = self._match(_DIGITS, digits)
        return None if end == digits else end


def tokenize(text: str) -> list[Token]:
    """Every token of ``text`` then EOF (:class:`Scanner` to the end); :class:`FilterParseError`
    at a character no token starts with."""
    scanner = Scanner(text)
    out = [scanner.next()]
    while out[-1].kind != "EOF":
        out.append(scanner.next())
    return out
