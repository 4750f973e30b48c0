"""Lenient readers of a request's extFields (RocketMQ's ``CommandCustomHeader`` decoding).

Values arrive as strings (Java), JSON numbers and booleans (ali-ons) or a mix with booleans
as ``"0"``/``"1"`` (the C++ client): a field is read as its text, then as the declared type.
Unknown fields (``AccessKey``, ``Signature``, ``OnsChannel``...) are ignored by the readers.
A missing required field or a value of the wrong type raises :class:`FieldError`.
"""

from __future__ import annotations

from typing import Any

from .errors import FieldError

_MISSING = object()
_JAVA_LONG = (-(1 << 63), (1 << 63) - 1)
_JAVA_INT = (-(1 << 31), (1 << 31) - 1)


def _raw(ext: dict[str, Any], name: str, default: Any) -> Any:
    v = ext.get(name, _MISSING)
    if v is _MISSING or v is None:
        if default is _MISSING:
            raise FieldError(name, "is missing")
        return default
    return v


def ext_str(ext: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
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


def ext_int(ext: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
    """A Java ``int`` field."""
    v = _raw(ext, name, default)
    return v if v is default else _number(name, v, *_JAVA_INT, "a Java int")


def ext_long(ext: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
    """A Java ``long`` field."""
    v = _raw(ext, name, default)
    return v if v is default else _number(name, v, *_JAVA_LONG, "a Java long")


def ext_bool(ext: dict[str, Any], name: str, default: Any = _MISSING) -> Any:
    """A boolean: ``true``/``false`` (any case), JSON booleans, or ``1``/``0`` (the C++ client)."""
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
