"""Checks of the arguments of the store's calls (queue ids, offsets, counts, flags, names).

RocketMQ's queue ids are Java ints and its offsets and timestamps Java longs: an argument is
an ``int`` (a numpy integer too; never a ``bool`` or a ``float``) in its range, else the call
raises :class:`rmqlog.errors.InvalidArgumentError` naming the argument. A flag is a ``bool``
(a numpy bool too; never an int or anything merely truthy), a text argument a ``str`` that can
be written as UTF-8 (no lone surrogate): every call checks its arguments before it reads or
writes anything, so any value of any type gets a typed error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from .errors import InvalidArgumentError

#: Java's ``Integer.MAX_VALUE`` and ``Long.MAX_VALUE``.
JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1
JAVA_LONG_MIN = -(2**63)


def int_arg(name: str, value: object, lo: int = JAVA_LONG_MIN, hi: int = JAVA_LONG_MAX) -> int:
    """``value`` as an int if it is an integer in ``[lo, hi]``; raises :class:`InvalidArgumentError`."""
    # np.timedelta64 is a numpy integer too: a duration is not an offset
    if isinstance(value, bool | np.timedelta64) or not isinstance(value, int | np.integer):
        raise InvalidArgumentError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    v = int(value)
    if not lo <= v <= hi:
        raise InvalidArgumentError(f"{name} {v} is out of range [{lo}, {hi}]")
    return v


def long_array_arg(name: str, value: object, n: int | None = None) -> np.ndarray:
    """``value`` as a 1-D int64 array if it is one of integers (Java longs; ``n`` of them when
    given): a list, a numpy array, an Arrow array. Anything else (floats, strings, nested
    lists, an Arrow array numpy cannot take) raises :class:`InvalidArgumentError`."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError, OverflowError, pa.ArrowException):
        arr = np.asarray(None)
    if arr.ndim == 1 and arr.size == 0 and n in (None, 0):
        return arr.astype(np.int64)
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or (arr.dtype.kind == "u" and int(arr.max()) >= 1 << 63):
        raise InvalidArgumentError(f"{name} must be a 1-D array of integers (Java longs), got {type(value).__name__}")
    if n is not None and len(arr) != n:
        raise InvalidArgumentError(f"{name} must be {n} integers, got {len(arr)}")
    return arr.astype(np.int64)


def optional_int_arg(name: str, value: object, lo: int = JAVA_LONG_MIN, hi: int = JAVA_LONG_MAX) -> int | None:
    """``None``, or ``value`` checked as :func:`int_arg` does."""
    return None if value is None else int_arg(name, value, lo, hi)


def queue_id_arg(value: object, name: str = "queue_id") -> int:
    """A queue id: an int in ``[0, 2**31 - 1]`` (a non-negative Java int)."""
    return int_arg(name, value, 0, JAVA_INT_MAX)


def offset_arg(value: object, name: str = "offset") -> int:
    """A queue offset to commit: an int in ``[0, 2**63 - 1]`` (a non-negative Java long)."""
    return int_arg(name, value, 0, JAVA_LONG_MAX)


def bool_arg(name: str, value: object) -> bool:
    """A flag: ``True`` or ``False`` (or a numpy bool). Anything else, ``0``/``1`` and ``None``
    included, raises :class:`InvalidArgumentError` (a numpy array's truth value would raise
    an untyped ``ValueError``, and a string's would be true whatever it says)."""
    if not isinstance(value, bool | np.bool_):
        raise InvalidArgumentError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def optional_bool_arg(name: str, value: object) -> bool | None:
    """``None``, or ``value`` checked as :func:`bool_arg` does."""
    return None if value is None else bool_arg(name, value)


def utf8_problem(text: str) -> str | None:
    """Why ``text`` cannot be written as UTF-8, or ``None`` when it can. A Python string may
    hold a lone surrogate (``"\\ud800"``; ``os.fsdecode`` of bytes that are not UTF-8 makes
    them) that no UTF-8 encoder takes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"is not valid UTF-8 (a lone surrogate {text[exc.start]!r} at character {exc.start})"
    return None


def text_arg(name: str, value: object, *, empty: bool = False) -> str:
    """A text argument: a ``str`` (non-empty unless ``empty``) that can be written as UTF-8;
    raises :class:`InvalidArgumentError` naming the argument."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    if not value and not empty:
        raise InvalidArgumentError(f"{name} must be a non-empty string")
    problem = utf8_problem(value)
    if problem is not None:
        raise InvalidArgumentError(f"{name} {problem}")
    return value


def callable_arg(name: str, value: object) -> Callable[..., Any] | None:
    """``None`` or a callable (a callback); raises :class:`InvalidArgumentError`."""
    if value is not None and not callable(value):
        raise InvalidArgumentError(f"{name} must be callable or None, got {type(value).__name__} {value!r}")
    return value
