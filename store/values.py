"""The one parser per kind of value given as text: an option of the Spark source and sink, a
key of ``broker.conf``, an argument of the ``rmqlog`` command.

A value is taken only when it is exactly valid; anything else raises
:class:`InvalidValueError` naming the value (``name``) and saying why (``problem``), and each
caller re-raises it as its own typed error (``RmqLogOptionError``, ``ConfigError``, the
command's usage error) with the same words. What "exactly" means, per kind:

- a boolean: ``true`` or ``false``, any case (Java's ``Boolean.parseBoolean`` spellings); not
  ``yes``, ``1``, ``0`` nor ``on``.
- an integer: an optional sign and ASCII decimal digits (Java's ``Long.parseLong``), within
  the bounds the caller states; not ``1_000``, ``1e3``, `` 5``, ``٥`` nor ``5.0``.
- a number: a finite decimal (``1``, ``0.5``, ``2.5e3``) within bounds; not ``nan`` nor ``inf``.
- a list: items separated by ``sep`` (spaces around an item ignored), none empty, none twice:
  ``a,,b``, ``a,`` and ``a,a`` are refused, not read as ``a,b``, ``a`` and ``a``.
- a duration: ASCII digits and a unit ``ms``, ``s``, ``m``, ``min`` or ``h`` (none: ms), in
  milliseconds within the bounds; not ``30 s`` nor ``1.5s``.
- one of a set (an enum): one of the choices, any case unless ``case``; the choice's own
  spelling is returned.
- an address: ``host:port``, an IPv6 host in brackets, a port of ASCII digits in the bounds.

No parser strips the text it is given: a caller whose format ignores surrounding blanks (a
Java properties value) strips first and says so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from .errors import InvalidArgumentError

JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MIN, JAVA_LONG_MAX = -(2**63), 2**63 - 1


class InvalidValueError(InvalidArgumentError):
    """A value given as text is not exactly valid. ``name`` names it (an option, a key, an
    argument), ``problem`` says why (the value quoted, shortened to 60 characters)."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name}: {problem}")
        self.name = name
        self.problem = problem


def _shown(text: object) -> str:
    shown = repr(text)
    return shown if len(shown) <= 62 else shown[:59] + "...'"


def _str(name: str, text: object) -> str:
    if not isinstance(text, str):
        raise InvalidValueError(name, f"not a string, got {type(text).__name__} {_shown(text)}")
    return text


def parse_bool(name: str, text: str) -> bool:
    """``true`` or ``false`` (any case) as a bool; else :class:`InvalidValueError`."""
    low = _str(name, text).lower()
    if low == "true":
        return True
    if low == "false":
        return False
    raise InvalidValueError(name, f"not a boolean (true or false), got {_shown(text)}")


_INTEGER = re.compile(r"[+-]?[0-9]{1,20}")


def _bounds(lo: int, hi: int) -> str:
    if lo == JAVA_LONG_MIN and hi == JAVA_LONG_MAX:
        return "an integer (a Java long)"
    if lo == 1 and hi >= JAVA_INT_MAX:
        return "a positive integer"
    if lo == 0 and hi >= JAVA_INT_MAX:
        return "0 or a positive integer"
    return f"an integer in [{lo}, {hi}]"


def parse_int(name: str, text: str, lo: int = JAVA_LONG_MIN, hi: int = JAVA_LONG_MAX) -> int:
    """An optional sign and 1-20 ASCII digits, as an int in ``[lo, hi]``; else
    :class:`InvalidValueError` saying what is expected."""
    if not _INTEGER.fullmatch(_str(name, text)) or not lo <= int(text) <= hi:
        raise InvalidValueError(name, f"not {_bounds(lo, hi)}, got {_shown(text)}")
    return int(text)


_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?")


def parse_number(name: str, text: str, lo: float, hi: float) -> float:
    """A finite decimal number (``3``, ``0.5``, ``2.5e3``) in ``[lo, hi]``; else
    :class:`InvalidValueError`."""
    if not _NUMBER.fullmatch(_str(name, text)) or not (math.isfinite(float(text)) and lo <= float(text) <= hi):
        raise InvalidValueError(name, f"not a number in [{lo:g}, {hi:g}], got {_shown(text)}")
    return float(text)


def parse_list(name: str, text: str, sep: str = ",", item: Callable[[str], object] | None = None) -> tuple[str, ...]:
    """The items of ``text`` separated by ``sep``, spaces around each ignored, in their order:
    at least one, none empty, none twice; ``item`` (when given) is called on each and may
    raise :class:`InvalidValueError` itself. Else :class:`InvalidValueError`."""
    parts = [p.strip() for p in _str(name, text).split(sep)]
    if parts == [""]:
        raise InvalidValueError(name, "is empty: name at least one item")
    for i, part in enumerate(parts, 1):
        if not part:
            raise InvalidValueError(
                name, f"item {i} of {_shown(text)} is empty (separator {sep!r} twice, or at an end)"
            )
        if part in parts[: i - 1]:
            raise InvalidValueError(name, f"{_shown(part)} is named twice")
        if item is not None:
            item(part)
    return tuple(parts)


_DURATION = re.compile(r"([0-9]{1,19})(ms|s|m|min|h)?")
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


def parse_duration_ms(name: str, text: str, lo: int = 0, hi: int = JAVA_LONG_MAX) -> int:
    """``500ms``, ``30s``, ``15m`` (or ``15min``), ``1h``, or a bare number of milliseconds,
    as milliseconds in ``[lo, hi]``; else :class:`InvalidValueError`."""
    m = _DURATION.fullmatch(_str(name, text))
    if m is None:
        raise InvalidValueError(name, f"not a duration like 500ms, 30s, 15m or 1h, got {_shown(text)}")
    ms = int(m.group(1)) * _UNIT_MS[m.group(2)]
    if not lo <= ms <= hi:
        raise InvalidValueError(name, f"not a duration of {lo} to {hi} ms, got {_shown(text)}")
    return ms


def parse_enum(name: str, text: str, choices: Iterable[str], *, case: bool = False) -> str:
    """The choice ``text`` names (any case unless ``case``), in the choice's spelling; else
    :class:`InvalidValueError` listing the choices."""
    options = tuple(choices)
    given = _str(name, text)
    for choice in options:
        if choice == given or (not case and choice.lower() == given.lower()):
            return choice
    raise InvalidValueError(name, f"not one of {', '.join(options)}, got {_shown(text)}")


def parse_host_port(name: str, text: str, lo: int = 1, hi: int = 65535) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) as ``(host, port)``, the host without brackets, the port
    ASCII digits in ``[lo, hi]``; else :class:`InvalidValueError`."""
    host, sep, port = _str(name, text).rpartition(":")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if (
        not sep
        or not bare
        or any(c.isspace() for c in text)
        or not re.fullmatch(r"[0-9]{1,5}", port)
        or not lo <= int(port) <= hi
    ):
        raise InvalidValueError(name, f"{_shown(text)} is not host:port (a port in {lo}..{hi})")
    return bare, int(port)


def parse_addresses(name: str, text: str) -> tuple[str, ...]:
    """RocketMQ's ``namesrvAddr``: ``host:port`` addresses separated by ``;`` (spaces around
    one ignored), each once; else :class:`InvalidValueError`."""
    return parse_list(name, text, ";", item=lambda a: parse_host_port(name, a))


def arg_type(parse: Callable[..., Any], *args: Any, text: bool = False, **kw: Any) -> Callable[[str], Any]:
    """An ``argparse`` ``type=`` for a command's argument: ``parse(NAME, value, *args, **kw)``,
    its problem turned into argparse's own error (the command prints it naming the argument
    and exits 2). ``text``: the argument keeps its text (``parse`` only checks it)."""
    import argparse

    def convert(value: str) -> Any:
        try:
            parsed = parse("value", value, *args, **kw)
        except InvalidValueError as exc:
            raise argparse.ArgumentTypeError(exc.problem) from None
        return value if text else parsed

    convert.__name__ = parse.__name__.removeprefix("parse_")  # argparse's fallback message names it
    return convert


__all__ = [
    "arg_type",
    "InvalidValueError",
    "parse_bool",
    "parse_int",
    "parse_number",
    "parse_list",
    "parse_duration_ms",
    "parse_enum",
    "parse_host_port",
    "parse_addresses",
]
