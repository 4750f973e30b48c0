"""The one check of what a peer's JSON holds: bodies nested no deeper than RocketMQ's, strings
that are Unicode text. Every JSON body the broker and the name server read goes through
:func:`loads_body` (or :func:`rmqnet.remoting.route.loads_fastjson`, which makes the same
checks), every JSON header through :func:`header_text_problem`; what fails is a
:class:`~rmqnet.remoting.errors.FieldError` naming the field or the body, answered SYSTEM_ERROR.

Depth. RocketMQ's bodies are shallow (a HeartbeatData is 4 levels, a RegisterBrokerBody 5): a
body nested deeper than :data:`MAX_BODY_DEPTH` is refused before any parse, so no reader (the
stdlib's C scanner recurses on the interpreter's stack, fastjson's lenient reader here in
Python) and nothing written from what it read ever meets a deep value. The check runs on
bytes operations, without a Python step per byte: a body with at most ``MAX_BODY_DEPTH``
opening brackets cannot be deeper (two ``bytes.count``); any other has its escaped backslashes
and quotes cut (``bytes.replace``, left to right as a reader takes them), everything but
brackets and quotes deleted (``bytes.translate``), what lies inside strings dropped (adjacent
quotes, then a split on the rest), the innermost pairs removed up to 8 times (a level a pass:
a topic table is flat after one), and the depth of what is left read from prefix sums by C
iterators (``itertools.accumulate``), stopping at the first 4,096 brackets that go too deep.
Exact for JSON; for anything else never below what a reader would reach before its error.
Measured: a 1.5 MB RegisterBrokerBody of 10,000 topics, a fraction of its
``json.loads``.

Text. JSON's ``\\uD800`` escape gives Python a ``str`` holding a lone surrogate, which no
UTF-8 (no answer, no file, no log line) can hold: Java would carry it and write ``?``. A request
holding one is refused, naming the field. Raw bytes cannot carry one (UTF-8 decoding refuses
encoded surrogates), so only a ``\\u`` escape of ``D800``-``DFFF`` outside a valid pair can: a
regex finds those, and only then is the parsed value encoded to confirm (an escaped backslash
before the ``u`` is no escape). orjson, which reads every header clients send, refuses lone
surrogates itself: the check costs nothing on the hot path.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
from typing import Any

from .errors import FieldError

#: the deepest nesting of a JSON body read from a peer (objects and arrays alike)
MAX_BODY_DEPTH = 64

_KEEP = b'[]{}"'
_NOT_KEPT = bytes(b for b in range(256) if b not in _KEEP)
_SQUARE = bytes.maketrans(b"{}", b"[]")
_WEIGHT = bytes.maketrans(b"[]", b"\x02\x00")  # an opener 2, a closer 0: the prefix sum less the count is the depth
#: innermost pairs removed at most this many times before the prefix sums (most bodies: none left)
_PASSES = 8
#: the prefix sums taken this many brackets at a time, stopping at the first too deep
_CHUNK = 4096
# a \u escape of a surrogate (a literal prefix: the regex engine scans for it at memchr speed)
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
# one that is not half of a pair (high then low): read only once a lone one is known to be there
_HIGH, _LOW = rb"\\u[dD][89abAB][0-9a-fA-F]{2}", rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
_LONE = re.compile(_HIGH + rb"(?!" + _LOW + rb")|(?<!" + _HIGH + rb")" + _LOW)


def nested_deeper(data: bytes, limit: int = MAX_BODY_DEPTH) -> bool:
    """Whether a JSON reader could nest deeper than ``limit`` levels reading ``data`` (see the
    module docstring: exact for JSON, never below what a reader would reach for anything else)."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    if b"\\" in data:  # escapes, left to right: an escaped backslash, then an escaped quote
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    s = data.translate(None, _NOT_KEPT)  # brackets and the quotes that delimit strings
    if b'"' in s:
        s = s.replace(b'""', b"")  # an empty string, or two strings with nothing between: one
        if b'"' in s:
            s = b"".join(s.split(b'"')[::2])  # what lies between strings (an unclosed one ends it)
    s = s.translate(_SQUARE)
    passes = 0
    while passes < _PASSES:
        t = s.replace(b"[]", b"")  # every innermost pair: one level less
        if len(t) == len(s):
            break
        passes += 1
        s = t
    if passes > limit:
        return True
    if s.count(b"[") + passes <= limit:
        return False
    return _deepest(s.translate(_WEIGHT), limit - passes)


def _deepest(weights: bytes, limit: int) -> bool:
    """Whether a prefix of the brackets (weights 2 and 0) nests deeper than ``limit``: prefix
    sums by C iterators, a chunk at a time, stopping at the first chunk that goes too deep."""
    depth = 0
    for start in range(0, len(weights), _CHUNK):
        chunk = weights[start : start + _CHUNK]
        # depth after the i-th bracket of the chunk: depth + (sum of weights to i) - (i + 1)
        if depth + max(map(operator.sub, itertools.accumulate(chunk), itertools.count(1))) > limit:
            return True
        depth += 2 * chunk.count(2) - len(chunk)
    return False


def lone_surrogate(text: str) -> int:
    """The index of the first lone surrogate in ``text``, -1 when it is Unicode text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return -1


def escape_text(text: str) -> str:
    """``text`` with each lone surrogate written as its escape (``\\ud800``, six characters):
    what a remark echoing a peer's value is sent as."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def loads_body(body: bytes | bytearray | memoryview, what: str) -> Any:
    """A request's JSON body (``what`` names it in errors, e.g. ``"HeartbeatData"``) read by
    ``json``: :class:`FieldError` (field ``body``) when it is not JSON, not UTF-8, nested
    deeper than :data:`MAX_BODY_DEPTH` or holds a lone surrogate."""
    data = bytes(body)  # (the same object when it is bytes already)
    check_depth(data, what)
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FieldError("body", f"is not {what} JSON ({exc})") from None
    check_text(data, value, what)
    return value


def check_depth(body: bytes, what: str) -> None:
    """:class:`FieldError` when ``body`` nests deeper than :data:`MAX_BODY_DEPTH`."""
    if nested_deeper(body):
        raise FieldError("body", f"is not {what} JSON (nested too deep: more than {MAX_BODY_DEPTH} levels)")


def check_text(raw: bytes, value: Any, what: str) -> None:
    """:class:`FieldError` when ``value`` (read from the JSON ``raw``) holds a lone surrogate:
    looked for only when ``raw`` holds a surrogate's escape (a regex with a literal prefix), then
    confirmed by encoding ``value`` (a pair is text, an escaped backslash no escape)."""
    if _SURROGATE.search(raw) is None:
        return
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        m = _LONE.search(raw)
        where = f"{m.group().decode()} at byte {m.start()}" if m else "an escape"
        raise FieldError(
            "body", f"is not {what} JSON (a string holds a lone surrogate, {where}: not Unicode text)"
        ) from None


def header_text_problem(header: bytes, obj: dict[str, Any]) -> tuple[str, str] | None:
    """The first field of a JSON header object (read from ``header``) holding a string that is
    not Unicode text, as (name, problem), or None. A top-level field is named as it is
    (``remark``, ``language``), an extFields entry by its key."""
    if _SURROGATE.search(header) is None:
        return None
    for key, v in obj.items():
        entries = v.items() if key == "extFields" and isinstance(v, dict) else [(key, v)]
        for name, w in entries:
            if not isinstance(name, str):  # (json gives string keys: kept for the type checker)
                name = str(name)
            at = lone_surrogate(name)
            if at >= 0:
                return escape_text(name), f"has a name holding a lone surrogate (at {at}): not Unicode text"
            at = lone_surrogate(w if isinstance(w, str) else json.dumps(w, ensure_ascii=False))
            if at >= 0:
                return name, f"holds a lone surrogate (at {at}): not Unicode text"
    return None
