"""Checks of the scalar arguments of the store's calls (queue ids, offsets, counts).

RocketMQ's queue ids are Java ints and its offsets and timestamps Java longs: an argument is
an ``int`` (a numpy integer too; never a ``bool`` or a ``float``) in its range, else the call
raises :class:`rmqlog.errors.InvalidArgumentError` naming the argument.
"""

from __future__ import annotations

import numpy as np

from .errors import InvalidArgumentError

#: Java's ``Integer.MAX_VALUE`` and ``Long.MAX_VALUE``.
JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1
JAVA_LONG_MIN = -(2**63)


def int_arg(name: str, value: object, lo: int = JAVA_LONG_MIN, hi: int = JAVA_LONG_MAX) -> int:
    """``value`` as an int if it is an integer in ``[lo, hi]``; raises :class:`InvalidArgumentError`."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidArgumentError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    v = int(value)
    if not lo <= v <= hi:
        raise InvalidArgumentError(f"{name} {v} is out of range [{lo}, {hi}]")
    return v


def queue_id_arg(value: object, name: str = "queue_id") -> int:
    """A queue id: an int in ``[0, 2**31 - 1]`` (a non-negative Java int)."""
    return int_arg(name, value, 0, JAVA_INT_MAX)


def offset_arg(value: object, name: str = "offset") -> int:
    """A queue offset to commit: an int in ``[0, 2**63 - 1]`` (a non-negative Java long)."""
    return int_arg(name, value, 0, JAVA_LONG_MAX)
