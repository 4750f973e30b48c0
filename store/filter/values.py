"""Java's values as RocketMQ's SQL92 evaluation sees them (``ComparisonExpression.__compare``,
``Integer.valueOf``, ``Long.valueOf``, ``Double.valueOf``, ``Double.compareTo``), for the scalar
reference (:func:`rmqlog.filter.sql92.evaluate`), the parser's BETWEEN check and the vectorized
evaluation's rare one-by-one conversions. A value is ``(kind, python value)`` or ``None`` (null);
kinds are Java's classes: String, Boolean, Integer, Long, Double."""

from __future__ import annotations

import math
import re
import struct
import unicodedata

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
DOUBLE_MIN_VALUE = 5e-324  # Java's Double.MIN_VALUE (the smallest positive double)

#: Java's runtime types of a value: String, Boolean, Integer, Long, Double
STRING, BOOLEAN, INT, LONG, DOUBLE = "S", "B", "I", "L", "D"
NUMERIC = frozenset((INT, LONG, DOUBLE))

Value = tuple[str, object] | None  # (kind, python value) or null


class EvaluationError(Exception):
    """What Java's evaluation throws (a failed conversion, a ClassCastException): the message
    does not match. Internal to the scalar evaluator."""


def java_int(s: str, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
    """``Integer.valueOf`` / ``Long.valueOf`` (with ``lo``/``hi``): optional sign, then decimal
    digits of any script (Java's ``Character.digit``); :class:`EvaluationError` otherwise."""
    body = s[1:] if s[:1] in ("+", "-") else s
    if not body:
        raise EvaluationError(f"For input string: {s!r}")
    value = 0
    for ch in body:
        d = unicodedata.decimal(ch, None)
        if d is None:
            raise EvaluationError(f"For input string: {s!r}")
        value = value * 10 + d
    value = -value if s[0] == "-" else value
    if not lo <= value <= hi:
        raise EvaluationError(f"For input string: {s!r} (out of range)")
    return value


_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")
_JAVA_HEX_DOUBLE = re.compile(r"([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?")
_JAVA_TRIM = "".join(chr(i) for i in range(33))


def java_double(s: str) -> float:
    """``Double.valueOf``: trimmed of characters up to space, Java's decimal or hex float
    syntax (``NaN``, ``Infinity``, a ``f``/``d`` suffix); :class:`EvaluationError` otherwise."""
    t = s.strip(_JAVA_TRIM)
    if _JAVA_DOUBLE.fullmatch(t):
        return float(t.rstrip("fFdD") if t[-1] in "fFdD" else t)
    m = _JAVA_HEX_DOUBLE.fullmatch(t)
    if m:
        return float.fromhex(m.group(1) + "0x" + m.group(2))
    raise EvaluationError(f"For input string: {s!r}")


def double_key(x: float) -> int:
    """An integer whose order is ``Double.compareTo``'s (NaN above everything, -0.0 < 0.0)."""
    bits = 0x7FF8000000000000 if math.isnan(x) else struct.unpack(">q", struct.pack(">d", x))[0]
    return bits if bits >= 0 else bits ^ 0x7FFFFFFFFFFFFFFF


def cmp(a: object, b: object) -> int:
    return (a > b) - (a < b)  # type: ignore[operator]


def java_compare(lv: Value, rv: Value) -> int:
    """``ComparisonExpression.__compare`` with string conversion on (the parser's setting)."""
    assert lv is not None and rv is not None
    (lk, a), (rk, b) = lv, rv
    if lk != rk:
        if lk == BOOLEAN:
            if rk == STRING:
                raise EvaluationError("ClassCastException: Boolean cannot be cast to String")
            return -1
        if lk in NUMERIC:
            if rk == BOOLEAN:
                return -1
            if rk == STRING:
                b = _convert(str(b), lk)
                rk = lk
            elif {lk, rk} == {INT, LONG}:
                lk = rk = LONG
            else:  # one is DOUBLE
                a, b, lk, rk = float(a), float(b), DOUBLE, DOUBLE  # type: ignore[arg-type]
        else:  # lk == STRING
            if rk == BOOLEAN:
                a, lk = str(a).lower() == "true", BOOLEAN
            else:
                a, lk = _convert(str(a), rk), rk
    if lk == DOUBLE:
        return cmp(double_key(float(a)), double_key(float(b)))  # type: ignore[arg-type]
    if lk == STRING:
        return cmp(str(a).encode("utf-16-be"), str(b).encode("utf-16-be"))
    return cmp(a, b)


def _convert(s: str, kind: str) -> object:
    if kind == INT:
        return java_int(s)
    if kind == LONG:
        return java_int(s, LONG_MIN, LONG_MAX)
    return java_double(s)


def java_equals(lv: Value, rv: Value) -> bool:
    """``Object.equals`` of two Java values of these kinds (Double's by its bits)."""
    assert lv is not None and rv is not None
    if lv[0] != rv[0]:
        return False
    if lv[0] == DOUBLE:
        return double_key(float(lv[1])) == double_key(float(rv[1]))  # type: ignore[arg-type]
    return lv[1] == rv[1]
