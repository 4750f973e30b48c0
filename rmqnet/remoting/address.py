"""``host:port``: the network side's one parser of addresses, for what an operator gives (the
commands' ``--listen``, ``--namesrv``, ``--broker``, broker.conf's ``namesrvAddr`` and
``haMasterAddress``) and what peers and routes hold (a registered broker's address, a
connection's remote address, grpc's peer).

One rule: a host (an IPv6 one in brackets, returned without them) and a port of ASCII digits
in ``[lo, hi]``, no whitespace anywhere; anything else is :class:`AddressError` (a
``ValueError``) naming the value. It is the rule of :func:`rmqlog.values.parse_host_port`,
which the store's own commands and options use; here because the name server imports no store
(``import rmqlog`` loads pyarrow and numpy). ``tests/wire/test_address_parser.py`` holds the
two equal on any text, ``tests/wire/test_rmqnet_layout.py`` keeps ad-hoc parses out of rmqnet.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
from collections.abc import Callable
from typing import Any

_PORT = re.compile(r"[0-9]{1,5}")


class AddressError(ValueError):
    """A value that is not ``host:port``: ``name`` names it, ``problem`` says why (the words
    of :class:`rmqlog.values.InvalidValueError`); ``str()`` is ``name: problem``."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name}: {problem}")
        self.name = name
        self.problem = problem


def _shown(text: object) -> str:
    shown = repr(text)
    return shown if len(shown) <= 62 else shown[:59] + "...'"


def parse_host_port(name: str, text: str, lo: int = 1, hi: int = 65535) -> tuple[str, int]:
    """``(host, port)`` of ``text`` (see the module docstring); :class:`AddressError` else."""
    if not isinstance(text, str):
        raise AddressError(name, f"not a string, got {type(text).__name__} {_shown(text)}")
    host, sep, port = text.rpartition(":")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not bare or any(c.isspace() for c in text) or not _PORT.fullmatch(port) or not lo <= int(port) <= hi:
        raise AddressError(name, f"{_shown(text)} is not host:port (a port in {lo}..{hi})")
    return bare, int(port)


def parse_addresses(name: str, text: str) -> tuple[str, ...]:
    """RocketMQ's ``namesrvAddr``: ``host:port`` addresses separated by ``;`` (spaces around
    one ignored), at least one, none empty, none twice; else :class:`AddressError` (the words
    of :func:`rmqlog.values.parse_addresses`)."""
    if not isinstance(text, str):
        raise AddressError(name, f"not a string, got {type(text).__name__} {_shown(text)}")
    parts = [p.strip() for p in text.split(";")]
    if parts == [""]:
        raise AddressError(name, "is empty: name at least one item")
    for i, part in enumerate(parts, 1):
        if not part:
            raise AddressError(name, f"item {i} of {_shown(text)} is empty (separator ';' twice, or at an end)")
        if part in parts[: i - 1]:
            raise AddressError(name, f"{_shown(part)} is named twice")
        parse_host_port(name, part)
    return tuple(parts)


def split_address(addr: str) -> tuple[str, int]:
    """``(host, port)`` of an address a peer or a route gave (port 0 allowed: a test's
    ephemeral listener); :class:`AddressError` for anything else."""
    return parse_host_port("address", addr, 0)


def is_address(text: str) -> bool:
    """Whether ``text`` is an address rather than a name (RocketMQ's broker names hold no
    ``:``; ours are ``[%|a-zA-Z0-9_.-]+``)."""
    try:
        split_address(text)
    except AddressError:
        return False
    return True


def join_host_port(ip: str, port: int) -> str:
    """``ip:port`` (``[ip]:port`` for IPv6); ``ValueError`` if ``ip`` is no IP address."""
    addr = ipaddress.ip_address(ip)
    return f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}"


def with_port(addr: str, port: int) -> str:
    """``addr``'s host (brackets kept) with ``port``: a broker's HA address from its own."""
    parse_host_port("address", addr, 0)
    return f"{addr.rpartition(':')[0]}:{port}"


def peer_ip(remote: str) -> str:
    """The address part of a connection's ``ip:port`` (cut at the last ``:``, brackets
    dropped); the text itself when it holds no ``:``. Lenient: a remote address is the
    transport's, never an operator's."""
    host = remote.rpartition(":")[0] if ":" in remote else remote
    return host.strip("[]")


def grpc_peer_address(grpc_peer: str) -> str:
    """``ip:port`` of grpc's ``context.peer()`` (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``); the
    text after the scheme for any other form."""
    return grpc_peer.split(":", 1)[1] if grpc_peer.startswith(("ipv4:", "ipv6:")) else grpc_peer


def address_arg(parse: Callable[..., Any] = parse_host_port, *args: Any, text: bool = False) -> Callable[[str], Any]:
    """An ``argparse`` ``type=`` by ``parse`` of this module: its problem turned into argparse's
    error (the command prints it naming the argument and exits 2); ``text``: the argument keeps
    its text (``parse`` only checks it)."""

    def convert(value: str) -> Any:
        try:
            parsed = parse("value", value, *args)
        except AddressError as exc:
            raise argparse.ArgumentTypeError(exc.problem) from None
        return value if text else parsed

    convert.__name__ = parse.__name__.removeprefix("parse_")
    return convert


__all__ = [
    "AddressError",
    "address_arg",
    "grpc_peer_address",
    "is_address",
    "join_host_port",
    "parse_addresses",
    "parse_host_port",
    "peer_ip",
    "split_address",
    "with_port",
]
