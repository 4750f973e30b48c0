"""Lenient readers of a request's extFields (RocketMQ's ``CommandCustomHeader`` decoding).

Values arrive as strings (Java), JSON numbers and booleans (ali-ons) or a mix with booleans
as ``"0"``/``"1"`` (the C++ client): a field is read as its text, then as the declared type.
Unknown fields (``AccessKey``, ``Signature``, ``OnsChannel``...) are ignored by the readers.
A missing required field or a value of the wrong type raises :class:`FieldError`.

Each reader first tries the common case in one step (a string where a string is wanted, a
decimal string or an int in range where a number is, a JSON boolean or the exact spellings
``true``/``false``/``1``/``0`` where a boolean is): that answers exactly what the general path
after it would, and anything else (missing, ``None``, floats, out of range, not a number)
goes to the general path, which decides and raises as before. A send header reads 14 fields
a request, so the readers' own calls were most of its cost.
"""

from __future__ import annotations

from typing import Any

from .errors import FieldError

_MISSING = object()
_JAVA_LONG = (-(1 << 63), (1 << 63) - 1)
_JAVA_INT = (-(1 << 31), (1 << 31) - 1)
_BOOL_TEXT = {"true": True, "false": False, "1": True, "0": False}


def _raw(ext: dict[str, Any], name: str, default: Any) -> Any:
    v = ext.get(name, _MISSING)
    if v is _MISSING or v is None:
        if default is _MISSING:
            raise FieldError(name, "is missing")
        return default
    return v


def ext_str(ext: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
    v = ext.get(name)
    if type(v) is str:  # the common case (see the module docstring)
        return v
    v = _raw(ext, name, default)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        raise FieldError(name, f"is a JSON {type(v).__name__}, not a string")
    return v if isinstance(v, str) or v is default else str(v)


def _number(name: str, v: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(v, bool):
        raise FieldError(name, f"is {v!r}, not {what}")
    if isinstance(v, int):
        n = v
    elif isinstance(v, str):
        try:
            n = int(v.strip())
        except ValueError:
            raise FieldError(name, f"is {v[:40]!r}, not {what}") from None
    else:
        raise FieldError(name, f"is {v!r}, not {what}")
    if not lo <= n <= hi:
        raise FieldError(name, f"is {n}, outside the range of {what}")
    return n


def _common_number(v: Any, lo: int, hi: int) -> int | None:
    """``v`` as a number in [lo, hi] when it is an int or a decimal string (``int()`` skips
    the same whitespace ``str.strip`` removes), else ``None``: the general path decides."""
    t = type(v)
    if t is str:
        try:
            n = int(v)
        except ValueError:
            return None
    elif t is int:  # (not a bool: its type is bool)
        n = v
    else:
        return None
    return n if lo <= n <= hi else None


def ext_int(ext: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
    """A Java ``int`` field."""
    n = _common_number(ext.get(name), -2147483648, 2147483647)
    if n is not None:
        return n
    v = _raw(ext, name, default)
    return v if v is default else _number(name, v, *_JAVA_INT, "a Java int")


def ext_long(ext: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
    """A Java ``long`` field."""
    n = _common_number(ext.get(name), -9223372036854775808, 9223372036854775807)
    if n is not None:
        return n
    v = _raw(ext, name, default)
    return v if v is default else _number(name, v, *_JAVA_LONG, "a Java long")


def ext_bool(ext: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
    """A boolean: ``true``/``false`` (any case), JSON booleans, or ``1``/``0`` (the C++ client)."""
    v = ext.get(name)
    if type(v) is bool:
        return v
    if type(v) is str:
        b = _BOOL_TEXT.get(v)  # the exact spellings clients send
        if b is not None:
            return b
    v = _raw(ext, name, default)
    if v is default or isinstance(v, bool):
        return v
    if isinstance(v, int):
        if v in (0, 1):
            return bool(v)
    elif isinstance(v, str):
        t = v.strip().lower()
        if t in ("true", "1"):
            return True
        if t in ("false", "0", ""):
            return False
    raise FieldError(name, f"is {v!r}, not a boolean")
