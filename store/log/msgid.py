"""Message ids.

Offset msgId (RocketMQ ``MessageDecoder.createMessageId``): store address (4 bytes IPv4 or
16 bytes IPv6) + store port (int, 4 bytes) + commitlog offset (long, 8 bytes), as uppercase
hex: 32 characters for IPv4, 56 for IPv6. ``C0A8470100001FBB00000000000000AC`` is
192.168.71.1:8123 at offset 172.

Client id ``UNIQ_KEY`` (``MessageClientIDSetter``): 16 bytes as 32 uppercase hex: IPv4 (4),
pid (short), a per-process random int, then a 48-bit sequence ``ms since the start of the
month << 16 | counter``. RocketMQ's counter is a 16-bit short that may wrap within one
millisecond; ours is a per-process monotonic 48-bit sequence, so a batch of any size gets
distinct ids (a batch larger than 65536 messages borrows the next milliseconds).
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import random
import struct
import threading
from collections.abc import Callable

import numpy as np
import pyarrow as pa

# the C helper's (None without it): ~3 ns a byte, against ~12 for the numpy table lookup
from ..clock import SYSTEM_CLOCK
from ..native import hexlify as _hexlify
from ..native import offset_msg_ids as _offset_msg_ids

#: Two uppercase hex characters per byte value, as one uint16 each: hex is one table lookup.
_HEX2 = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), np.uint16)


def hex_into(raw: np.ndarray, out: np.ndarray, offset: int) -> None:
    """Uppercase hex of each row of ``raw`` (n x w uint8) into columns ``[offset, offset + 2w)``
    of ``out`` (n x stride uint8)."""
    n, width = raw.shape
    if _hexlify is not None and out.flags.c_contiguous:
        _hexlify(np.ascontiguousarray(raw), width, out, out.shape[1], offset)
    else:
        out[:, offset : offset + 2 * width] = _HEX2[raw].view(np.uint8).reshape(n, 2 * width)


def fixed_strings(rows: np.ndarray) -> pa.StringArray:
    """A string per row of ``rows`` (an (n, width) C-contiguous uint8 array of ASCII), no copy
    of the characters."""
    n, width = rows.shape
    return pa.StringArray.from_buffers(n, fixed_width_offsets(n, width), pa.py_buffer(rows))


def fixed_width_offsets(n: int, width: int) -> pa.Buffer:
    """The Arrow offsets of ``n`` values of ``width`` bytes each; remembered for the sizes of
    puts (up to :data:`_REMEMBERED_ROWS` rows: they repeat from put to put, and a large read's
    offsets would stay in memory for nothing)."""
    if n <= _REMEMBERED_ROWS:
        return _remembered_offsets(n, width)
    return pa.py_buffer(np.arange(0, n * width + 1, width, dtype=np.int32))


_REMEMBERED_ROWS = 4096


@functools.lru_cache(maxsize=64)
def _remembered_offsets(n: int, width: int) -> pa.Buffer:
    return pa.py_buffer(np.arange(0, n * width + 1, width, dtype=np.int32))


def hex_rows(raw: np.ndarray) -> pa.StringArray:
    """Uppercase hex of each row of a 2-D uint8 array, as a string array (vectorized)."""
    n, width = raw.shape
    out = np.empty((n, 2 * width), np.uint8)
    hex_into(raw, out, 0)
    return pa.StringArray.from_buffers(n, fixed_width_offsets(n, 2 * width), pa.py_buffer(out))


@functools.lru_cache(maxsize=16)
def _host_hex(store_host_raw: bytes) -> bytes:
    return store_host_raw.hex().upper().encode()


def offset_msg_ids(store_host_raw: bytes, commitlog_offsets: np.ndarray) -> pa.StringArray:
    """Offset msgIds of records stored by one host (its 8 or 20 raw bytes) at these offsets."""
    n = len(commitlog_offsets)
    head = _host_hex(store_host_raw)  # the same on every row
    width = len(head) + 16
    if _offset_msg_ids is not None:  # one C call (every put makes its results with this)
        data = _offset_msg_ids(head, np.ascontiguousarray(commitlog_offsets, np.int64))
        return pa.StringArray.from_buffers(n, fixed_width_offsets(n, width), pa.py_buffer(data))
    out = np.empty((n, width), np.uint8)
    out[:, : len(head)] = np.frombuffer(head, np.uint8)
    hex_into(np.asarray(commitlog_offsets, dtype=">i8").view(np.uint8).reshape(n, 8), out, len(head))
    return pa.StringArray.from_buffers(n, fixed_width_offsets(n, width), pa.py_buffer(out))


def offset_msg_id(store_host_raw: bytes, commitlog_offset: int) -> str:
    """Scalar form of :func:`offset_msg_ids`."""
    return (store_host_raw + struct.pack(">q", commitlog_offset)).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[bytes, int] | None:
    """(store host raw bytes, commitlog offset) of an offset msgId, or ``None`` if malformed."""
    if len(msg_id) not in (32, 56):
        return None
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        return None
    return raw[:-8], struct.unpack(">q", raw[-8:])[0]


#: Bytes of one generated ``UNIQ_KEY\x01<32 hex>\x02`` property item.
_HEX = frozenset("0123456789abcdefABCDEF")


def is_uniq_key(msg_id: object) -> bool:
    """Whether ``msg_id`` has the form of a client msgId (``UNIQ_KEY``): 32 hex digits (an
    IPv4 producer) or 56 (IPv6). An offset msgId has the same form for IPv4 hosts."""
    return isinstance(msg_id, str) and len(msg_id) in (32, 56) and set(msg_id) <= _HEX


UNIQ_PROPERTY_WIDTH = len("UNIQ_KEY") + 1 + 32 + 1
#: where the 32-hex id starts in a ``UNIQ_KEY\x01<id>\x02`` item
UNIQ_ID_AT = len("UNIQ_KEY") + 1


class UniqKeyGenerator:
    """Generates ``UNIQ_KEY`` values for messages that have none (thread-safe)."""

    def __init__(self, ip4: bytes = b"\x7f\x00\x00\x01", wall_ms: Callable[[], int] = SYSTEM_CLOCK.wall_ms) -> None:
        self.wall_ms = wall_ms  # the store's clock: the ids' time since the month's start
        self._prefix = ip4[:4].rjust(4, b"\x00") + struct.pack(">Hi", os.getpid() & 0xFFFF, random.getrandbits(31))
        self._head = b"UNIQ_KEY\x01" + self._prefix.hex().upper().encode()
        self._lock = threading.Lock()
        self._last = -1
        self._pid = os.getpid()
        self._month = (0, 0)  # [start, end) of the current month, in ms

    @staticmethod
    def _month_start_ms(now: float) -> int:
        d = _dt.datetime.fromtimestamp(now)
        start = d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        return int(start.timestamp() * 1000)

    def _renew_after_fork(self) -> None:
        """In a forked child, a new prefix (its pid and random part): ids never repeat across
        processes."""
        if os.getpid() != self._pid:
            self.__init__(self._prefix[:4], self.wall_ms)  # type: ignore[misc]

    def _seq(self, n: int) -> np.ndarray:
        """``n`` consecutive 48-bit sequence values (int64), never reused by this generator."""
        start = self.reserve(n)
        return np.arange(start, start + n, dtype=np.int64) & 0xFFFFFFFFFFFF

    def reserve(self, n: int) -> int:
        """The first of ``n`` consecutive sequence values reserved for the caller: value ``i``
        is ``(start + i) & 0xFFFFFFFFFFFF`` (48 bits); never handed out again."""
        self._renew_after_fork()
        now_ms = self.wall_ms()
        if not self._month[0] <= now_ms < self._month[1]:  # recomputed once a month, not per call
            start = self._month_start_ms(now_ms / 1000)
            self._month = (start, self._month_start_ms(start / 1000 + 32 * 86400))
        base = (now_ms - self._month[0]) << 16
        with self._lock:
            start = max(base, self._last + 1)
            self._last = start + n - 1
        return start

    @property
    def property_head(self) -> bytes:
        """``UNIQ_KEY\x01`` and the hex of the id's first 10 bytes (host, pid, random): the
        part of a generated property item that is the same on every message; the 12 hex
        characters of the sequence and ``\x02`` follow it."""
        self._renew_after_fork()
        return self._head

    def id_at(self, value: int) -> str:
        """The id (32 uppercase hex characters) of sequence value ``value`` (one :meth:`reserve`
        gave), as :meth:`generate` makes them, without an array (the direct path of a small put)."""
        return f"{self._head[9:].decode()}{value & 0xFFFFFFFFFFFF:012X}"

    def _raw(self, n: int) -> np.ndarray:
        """``n`` distinct 16-byte ids (rows of a uint8 array)."""
        seq = self._seq(n)
        raw = np.empty((n, 16), np.uint8)
        raw[:, :10] = np.frombuffer(self._prefix, np.uint8)
        raw[:, 10:] = seq.astype(">i8").view(np.uint8).reshape(n, 8)[:, 2:]
        return raw

    def generate(self, n: int) -> pa.StringArray:
        """``n`` distinct ids, as a string array of 32 uppercase hex characters."""
        return hex_rows(self._raw(n))

    def generate_property(self, n: int) -> pa.BinaryArray:
        """``n`` distinct ``UNIQ_KEY\x01<id>\x02`` property items, built directly in numpy.

        The first 10 id bytes (host, pid, random) are the same for every row: the rows start
        as copies of one template (a C-level repeat); only the 12 hex characters of the
        48-bit sequence are written per row.
        """
        seq = self._seq(n)  # first: in a forked child it makes the new prefix
        head = self._head
        template = head + b"0" * 12 + b"\x02"
        width = len(template)
        out = np.frombuffer(bytearray(template * n), np.uint8).reshape(n, width)
        hex_into(seq.astype(">i8").view(np.uint8).reshape(n, 8)[:, 2:], out, len(head))
        return pa.BinaryArray.from_buffers(pa.binary(), n, [None, fixed_width_offsets(n, width), pa.py_buffer(out)])
