"""Time strings, read one way everywhere (the ``rmqlog`` command and the Spark options).

A time is either

- an integer: milliseconds since the epoch (``1700000000000``, also negative), or
- an ISO 8601 date or date-time (Python's :meth:`datetime.datetime.fromisoformat`:
  ``2026-11-24``, ``2026-11-24T04:00``, ``2026-11-24 04:00:00.250``, with or without a zone:
  ``Z``, ``+09:00``).

**A time that names no zone is UTC**, whatever the machine's or the process's time zone
(``TZ``). That is the Spark session's default zone (``spark_rmq.local_session`` sets
``spark.sql.session.timeZone`` to UTC), and the zone every time is printed in (``rmqlog``
prints store and born times as ``...+00:00``), so a time copied from the output means the same
instant when it is typed back. Local time was rejected: the same string would mean different
instants on two machines, or in a shell and in a Spark job.

Milliseconds are exact: the instant is computed in integers (``float`` seconds would round
some ``.xxx`` fractions down by one ms).
"""

from __future__ import annotations

import datetime as dt
import re

from .errors import InvalidArgumentError

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_INTEGER = re.compile(r"[+-]?[0-9]+")
#: Java's long: what a RocketMQ timestamp can hold
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1

EXAMPLES = "ms since the epoch or ISO 8601, e.g. 2026-11-24T04:00 (UTC) or 2026-11-24T13:00+09:00"


def parse_time_ms(text: object, *, what: str = "time") -> int:
    """Milliseconds since the epoch of ``text`` (see the module docstring: no zone means UTC).

    Raises :class:`rmqlog.InvalidArgumentError` naming ``what`` and the text for anything
    else: a non-string, an empty or malformed string, a number outside Java's long range.
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{what} must be a string ({EXAMPLES}), not {type(text).__name__}")
    s = text.strip()
    if _INTEGER.fullmatch(s):
        # (a Java long has at most 19 digits; Python refuses int() of 4,300 digits or more)
        ms = int(s) if len(s.lstrip("+-0")) <= 19 else _LONG_MAX + 1
    else:
        try:
            # fromisoformat reads "Z" itself since 3.11; isascii keeps out other scripts' digits
            when = dt.datetime.fromisoformat(s) if s.isascii() else None
        except ValueError:
            when = None
        if when is None:
            raise InvalidArgumentError(f"{what}: not a time: {text[:100]!r} ({EXAMPLES})")
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        delta = when - _EPOCH  # exact: days, seconds, microseconds are integers
        ms = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    if not _LONG_MIN <= ms <= _LONG_MAX:  # (out of range, however many digits)
        raise InvalidArgumentError(f"{what}: {text[:100]!r} is outside the range of a timestamp (a Java long of ms)")
    return ms
