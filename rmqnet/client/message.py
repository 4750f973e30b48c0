"""What a producer puts on the wire besides the body: RocketMQ's properties string and the
client's message ids.

Properties (``MessageDecoder.messageProperties2String``, 4.9.8): ``name \\x01 value \\x02`` for
each pair, the last pair followed by ``\\x02`` too. Names the client sets (``MessageConst``):
``TAGS``, ``KEYS`` (space-separated), ``WAIT`` (wait for the store: ``true``), ``DELAY``
(the delay level), ``UNIQ_KEY`` (the client's message id).

UNIQ_KEY (``MessageClientIDSetter.createUniqID``): 16 bytes as 32 upper-case hex digits:
the client's IPv4 address (4), pid (2), a per-process random int standing in for Java's
class-loader hash (4), milliseconds since the start of the current month (4), a counter (2).
"""

from __future__ import annotations

import datetime
import itertools
import os
import random
import struct
import threading
from collections.abc import Iterable, Mapping

import numpy as np

from ..remoting.names import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    SEPARATORS,
    properties_text,
)

#: the separators under the names this module always had (spark_rmq and users import them)
NAME_VALUE_SEP, PROPERTY_SEP = NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
#: property names the producer owns (``MessageConst``)
TAGS, KEYS, WAIT, DELAY, UNIQ_KEY = PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_WAIT, PROPERTY_DELAY, PROPERTY_UNIQ_KEY


def properties_string(props: Mapping[str, str]) -> str:
    """``props`` as RocketMQ writes them (module docstring); a name or value holding a
    separator character is refused (``ValueError``)."""
    for k, v in props.items():
        if any(c in k or c in v for c in SEPARATORS):
            raise ValueError(f"property {k!r}: names and values may not hold \\x01 or \\x02")
    return properties_text(props)


def message_properties(
    *,
    tags: str | None = None,
    keys: str | Iterable[str] | None = None,
    properties: Mapping[str, str] | None = None,
    delay_level: int = 0,
    uniq_key: str | None = None,
) -> dict[str, str]:
    """The properties of one message as the Java client sets them."""
    out: dict[str, str] = dict(properties or {})
    if tags:
        out[TAGS] = tags
    if keys:
        out[KEYS] = keys if isinstance(keys, str) else " ".join(keys)
    out[WAIT] = "true"
    if delay_level:
        out[DELAY] = str(delay_level)
    if uniq_key:
        out[UNIQ_KEY] = uniq_key
    return out


class UniqKeys:
    """Client message ids (module docstring); thread-safe; ``ip`` the IPv4 address to embed."""

    def __init__(self, ip: bytes = b"\x7f\x00\x00\x01") -> None:
        if len(ip) != 4:
            raise ValueError("UniqKeys: an IPv4 address of 4 bytes")
        self._fixed = ip + struct.pack(">HI", os.getpid() & 0xFFFF, random.getrandbits(32))
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._month = (0, 0)

    def _month_start_ms(self, now_ms: int) -> int:
        # cached: the month changes once a month (Java's startTime/nextStartTime)
        if not self._month[0] <= now_ms < self._month[1]:
            d = datetime.datetime.fromtimestamp(now_ms / 1000, datetime.UTC)
            start = d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            end = (start + datetime.timedelta(days=32)).replace(day=1)
            self._month = (int(start.timestamp() * 1000), int(end.timestamp() * 1000))
        return self._month[0]

    def next(self, now_ms: int) -> str:
        """One id (the scalar twin of :meth:`many`: a numpy pass costs more than one id)."""
        with self._lock:
            n = next(self._counter)
        span = (now_ms - self._month_start_ms(now_ms)) & 0xFFFFFFFF
        return (self._fixed + struct.pack(">IH", span, n & 0xFFFF)).hex().upper()

    def many(self, n: int, now_ms: int) -> list[str]:
        """``n`` ids at once (one numpy pass: no loop per id)."""
        with self._lock:
            first = next(self._counter)
            if n > 1:
                self._counter = itertools.count(first + n)
        raw = np.empty((n, 16), np.uint8)
        raw[:, :10] = np.frombuffer(self._fixed, np.uint8)
        raw[:, 10:14] = np.frombuffer(struct.pack(">I", (now_ms - self._month_start_ms(now_ms)) & 0xFFFFFFFF), np.uint8)
        counters = ((first + np.arange(n)) & 0xFFFF).astype(">u2")
        raw[:, 14:16] = counters.view(np.uint8).reshape(n, 2)
        hexed = np.ascontiguousarray(_HEX[raw]).view("S32").reshape(-1)
        return hexed.astype("U32").tolist()


_HEX = np.array([f"{i:02X}".encode() for i in range(256)], dtype="S2")
