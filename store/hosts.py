"""Host addresses as RocketMQ stores them: IPv4 4 bytes or IPv6 16 bytes, then a 4-byte port."""

from __future__ import annotations

import ipaddress
import struct

from .errors import ConfigError


def parse_host(host: str, *, what: str = "host") -> tuple[bytes, int]:
    """``"ip:port"`` or ``"[v6]:port"`` -> (address bytes, port). Raises :class:`ConfigError`."""
    text = host.strip()
    try:
        if text.startswith("["):
            addr_text, _, port_text = text[1:].partition("]:")
        else:
            addr_text, _, port_text = text.rpartition(":")
        addr = ipaddress.ip_address(addr_text)
        port = int(port_text)
        if not 0 <= port <= 0x7FFFFFFF:
            raise ValueError(port_text)
    except ValueError as exc:
        raise ConfigError(f"{what}: {host!r} is not 'ip:port'") from exc
    return addr.packed, port


def host_bytes(host: str) -> bytes:
    """The 8 (IPv4) or 20 (IPv6) bytes RocketMQ writes for a host."""
    addr, port = parse_host(host)
    return addr + struct.pack(">i", port)


def format_host(raw: bytes) -> str:
    """The inverse of :func:`host_bytes`."""
    addr = ipaddress.ip_address(raw[:-4])
    port = struct.unpack(">i", raw[-4:])[0]
    if addr.version == 6:
        return f"[{addr}]:{port}"
    return f"{addr}:{port}"
