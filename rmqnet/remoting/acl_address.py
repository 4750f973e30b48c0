"""RocketMQ 4.9.8's white-listed address patterns (``RemoteAddressStrategyFactory``).

A pattern is read once (:func:`address_pattern`) into a matcher of a peer's IP (the peer's
``ip:port`` with the port cut at the last ``:``, as ``PlainAccessValidator.parse`` cuts it):

(pattern: matches)
- empty or missing: nothing (``BlankRemoteAddressStrategy``)
- ``*``, ``*.*.*.*``, ``*:*:*:*:*:*:*:*``: every address
- ``192.168.0.{1,2}`` (ends with ``}``): the listed last parts: 192.168.0.1 and 192.168.0.2
- ``192.168.0.1,192.168.0.2``: the listed addresses
- ``192.168.1.1-5``, ``192.168.1.*``, ``192.168.*.*``, ``10.*.1.1``: the first part from the left that is ``*`` or
  ``a-b`` is compared with its range, the parts before it must be equal, the parts after it are ignored (RocketMQ's
  rule); IPv6 the same with hex groups (``1:2:3:4:5:6:7:*``, ``2::ac5:78:1-200:*``)
- an IPv4 or IPv6 address: that address (IPv6 compared expanded)

A pattern RocketMQ refuses at load (``AclException``: not four parts before ``{..}``, an
address that is no IP, a range outside 0-255 or reversed, a part that is no number) raises
:class:`AclPatternError` naming it. One RocketMQ accepts but could only fail on at match time
(a range ending at 0, e.g. ``1.2.3.0-0``: no head is set and its ``match`` throws) matches
nothing here. Matching never raises.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from .address import peer_ip

Matcher = Callable[[str], bool]


class AclPatternError(ValueError):
    """A white-list pattern RocketMQ refuses (``AclException`` at load)."""


def _is_v4(s: str) -> bool:
    parts = s.split(".")
    return len(parts) == 4 and all(p.isdigit() and len(p) <= 3 and int(p) <= 255 for p in parts)


def _is_v6(s: str) -> bool:
    if ":" not in s:
        return False
    try:
        ipaddress.IPv6Address(s)
    except ValueError:
        return False
    return True


def _expand6(s: str, groups: int = 8) -> str:
    """``AclUtils.expandIP``: ``::`` filled to ``groups`` groups, each 4 upper-case hex digits."""
    s = s.upper()
    if "::" in s:
        left, _, right = s.partition("::")
        lparts = left.split(":") if left else []
        rparts = right.split(":") if right else []
        parts = lparts + ["0"] * max(groups - len(lparts) - len(rparts), 0) + rparts
    else:
        parts = s.split(":")
    return ":".join(p.rjust(4, "0") for p in parts)


def _never(ip: str) -> bool:
    return False


def _always(ip: str) -> bool:
    return True


def _one(pattern: str) -> Matcher:
    if _is_v4(pattern):
        return lambda ip: ip == pattern
    if _is_v6(pattern):
        want = _expand6(pattern)
        return lambda ip: _is_v6(ip) and _expand6(ip) == want
    raise AclPatternError(f"Netaddress examine Exception netaddress is {pattern}")


def _multiple(addresses: list[str]) -> Matcher:
    wanted: set[str] = set()
    for a in addresses:
        if _is_v4(a):
            wanted.add(a)
        elif _is_v6(a):
            wanted.add(_expand6(a))
        else:
            raise AclPatternError(f"Netaddress examine Exception netaddress is {a}")
    return lambda ip: (_expand6(ip) if _is_v6(ip) else ip) in wanted


def _braces(pattern: str) -> Matcher:
    sep = ":" if ":" in pattern else "."
    parts = [p for p in pattern.split(sep) if p]
    if sep == "." and len(parts) < 4:
        raise AclPatternError(f"MultipleRemoteAddressStrategy has got a/some wrong format IP(s) {pattern}")
    last = parts[-1]
    if not last.startswith("{"):
        raise AclPatternError(f"MultipleRemoteAddressStrategy netaddress examine scope Exception netaddress {pattern}")
    head = pattern[: pattern.index("{")]
    return _multiple([head + item for item in last[1:-1].split(",") if item])


def _int(text: str, base: int, pattern: str) -> int:
    try:
        return int(text.strip(), base)
    except ValueError:
        raise AclPatternError(f"netaddress {pattern}: {text.strip()!r} is not a number") from None


def _range_bounds(value: str, base: int, top: int, pattern: str) -> tuple[int, int] | None:
    """(start, end) of a ``*`` or ``a-b`` part, None for a plain part."""
    value = value.strip()
    if value == "*":
        return 0, top
    if "-" in value:
        if value.startswith("-"):
            raise AclPatternError(f"RangeRemoteAddressStrategy netaddress examine scope Exception value {value} ")
        bounds = [b for b in value.split("-") if b]
        start, end = _int(bounds[0], base, pattern), _int(bounds[1] if len(bounds) > 1 else "", base, pattern)
        if not (0 <= start <= top and 0 <= end <= top and start <= end):
            raise AclPatternError(
                f"RangeRemoteAddressStrategy netaddress examine scope Exception start is {start} , end is {end}"
            )
        return start, end
    return None


def _range4(pattern: str) -> Matcher:
    parts = [p for p in pattern.split(".") if p]
    found: tuple[int, int, int] | None = None  # (index, start, end)
    for index in (1, 2, 3):
        if index >= len(parts):
            raise AclPatternError(f"Netaddress examine scope Exception netaddress is {pattern}")
        bounds = _range_bounds(parts[index], 10, 255, pattern)
        if bounds is not None and bounds[1] > 0:
            found = (index, *bounds)
            break
    if found is None:
        return _never  # RocketMQ: no head, its match would throw
    index, start, end = found
    # AclUtils.verify: four parts, those before the range numbers 0-255
    if len(parts) != 4 or not all(0 <= _int(p, 10, pattern) <= 255 for p in parts[: index - 1]):
        raise AclPatternError(f"Netaddress examine scope Exception netaddress is {pattern}")
    head = [p.strip() for p in parts[:index]]

    def match(ip: str) -> bool:
        if not _is_v4(ip):
            return False
        got = ip.split(".")
        return got[:index] == head and start <= int(got[index]) <= end

    return match


def _range6(pattern: str) -> Matcher:
    if "*" in pattern and pattern.index("*") != len(pattern) - 1:
        raise AclPatternError(f"Netaddress examine scope Exception netaddress is {pattern}")
    star, minus = "*" in pattern, "-" in pattern
    cuts = 2 if star and minus else 1
    prefix = pattern
    for _ in range(cuts):
        prefix = prefix[: prefix.rindex(":")]
    tail = pattern[len(prefix) + 1 :].split(":")[0]
    if minus and "-" in prefix:
        raise AclPatternError(f"Netaddress examine scope Exception netaddress is {pattern}")
    head_groups = 8 - cuts
    head = _expand6(prefix, head_groups).split(":")
    if len(head) != head_groups or not all(_valid_hex(g) for g in head):
        raise AclPatternError(f"Netaddress examine scope Exception netaddress is {pattern}")
    bounds = _range_bounds(tail, 16, 0xFFFF, pattern)
    if bounds is None or bounds[1] == 0:
        return _never
    start, end = bounds

    def match(ip: str) -> bool:
        if not _is_v6(ip):
            return False
        got = _expand6(ip).split(":")
        return got[:head_groups] == head and start <= int(got[head_groups], 16) <= end

    return match


def _valid_hex(g: str) -> bool:
    try:
        return 0 <= int(g, 16) <= 0xFFFF
    except ValueError:
        return False


def address_pattern(pattern: str | None) -> Matcher:
    """The matcher of one white-list pattern (see the module docstring); raises
    :class:`AclPatternError` for one RocketMQ refuses."""
    p = (pattern or "").strip()
    if not p:
        return _never
    if p in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return _always
    if p.endswith("}"):
        return _braces(p)
    if "," in p:
        return _multiple([a for a in p.split(",") if a])
    if "*" in p or "-" in p:
        return _range6(p) if ":" in p else _range4(p)
    return _one(p)


__all__ = ["AclPatternError", "Matcher", "address_pattern", "peer_ip"]
