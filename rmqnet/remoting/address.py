"""``host:port`` as the network side's light processes read it (the name server's ``--listen``,
``--metrics-listen``): the rule of :func:`rmqlog.values.parse_host_port`, here because the
name server imports no store (importing ``rmqlog.values`` loads the store's package, pyarrow
and numpy with it). ``tests/wire/test_address_parser.py`` holds the two equal on any text.

A host (an IPv6 one in brackets, returned without them) and a port of ASCII digits in
``[lo, hi]``, no whitespace anywhere; anything else is :class:`AddressError` (a ``ValueError``)
naming the value.
"""

from __future__ import annotations

import re

_PORT = re.compile(r"[0-9]{1,5}")


class AddressError(ValueError):
    """A value that is not ``host:port``; ``str()`` names it and the rule."""


def parse_host_port(name: str, text: str, lo: int = 1, hi: int = 65535) -> tuple[str, int]:
    """``(host, port)`` of ``text`` (see the module docstring); :class:`AddressError` else."""
    if not isinstance(text, str):
        raise AddressError(f"{name}: {text!r} is not host:port (a port in {lo}..{hi})")
    host, sep, port = text.rpartition(":")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not bare or any(c.isspace() for c in text) or not _PORT.fullmatch(port) or not lo <= int(port) <= hi:
        raise AddressError(f"{name}: {text!r} is not host:port (a port in {lo}..{hi})")
    return bare, int(port)


__all__ = ["AddressError", "parse_host_port"]
