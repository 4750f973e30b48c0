"""``timer/state``: where the timer's index stands, and what its two other files
(:mod:`rmqlog.schedule.timer_wheel`) must hold for the index to be trusted.

128 bytes, rewritten in place, little-endian:

(bytes: field; meaning)
- 0-8: magic; ``RMQTIMR2`` (``RMQTIMR1``, the first format, had none of the checks below: it is not read, the index is
  rebuilt)
- 8: ``enqueued`` int64; the next timer-queue offset to enqueue
- 16: ``log_end`` int64; entries in ``timer/log`` (its size is exactly ``40 * log_end``)
- 24: ``delivered`` int64 ms; every message due at or before it was delivered
- 32: ``pending`` int64; entries enqueued and not yet delivered (at most ``log_end``)
- 40: ``slots`` int64; the wheel's slots (its size is exactly ``24 * slots``)
- 48: ``precision`` int64 ms; the wheel's bucket
- 56: ``generation`` int64; drawn at random each time the log and the wheel start again empty: a process whose mappings
  are of another generation maps the new files
- 64: ``anchor`` int64; the commitlog offset in the timer-queue unit at ``enqueued - 1`` (-1: none): ties the index to
  this store's queue
- 72: ``wheel_sum`` uint64; the sum modulo 2**64 of the hashes of the wheel's non-empty slots (:func:`slot_sums`), kept
  up to date as slots change
- 80: ``log_crc`` uint32; CRC-32 of the log's ``log_end`` entries, extended as entries are appended
- 84: ``dirty`` uint32; 1 while an enqueue or a rebuild is under way
- 88: CRC-32; of bytes 0-88
- 92-128: zeros;

A state is read only when it is whole (its CRC), of this format, not dirty, made for the
wheel's geometry (``slots``, ``precision``) and its numbers are in range
(:meth:`TimerState.out_of_range`); the files are then checked against it once per open store
(:meth:`rmqlog.schedule.timer_wheel.TimerWheel.check`). Anything else, and the index is
rebuilt from the timer queue, which is the truth.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field

import numpy as np

_STATE = struct.Struct("<8sqqqqqqqqQII")  # magic, enqueued ... anchor, wheel_sum, log_crc, dirty
STATE_SIZE = 128
MAGIC = b"RMQTIMR2"
#: the last millisecond of year 9999: a time past it is no time the store writes
MAX_MS = 253_402_300_799_999
assert _STATE.size == 88

# splitmix64's constants: a slot's hash mixes its index and its three fields
_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93], np.uint64)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def new_generation() -> int:
    """A random generation (63 bits: never negative)."""
    return int.from_bytes(os.urandom(8), "little") >> 1


@dataclass
class TimerState:
    """``timer/state`` (see the module docstring)."""

    enqueued: int = 0
    log_end: int = 0
    delivered: int = 0
    pending: int = 0
    slots: int = 0
    precision: int = 0
    generation: int = field(default_factory=new_generation)
    anchor: int = -1
    wheel_sum: int = 0
    log_crc: int = 0
    dirty: bool = False

    def pack(self) -> bytes:
        body = _STATE.pack(
            MAGIC,
            self.enqueued,
            self.log_end,
            self.delivered,
            self.pending,
            self.slots,
            self.precision,
            self.generation,
            self.anchor,
            self.wheel_sum,
            self.log_crc,
            int(self.dirty),
        )
        return (body + struct.pack("<I", zlib.crc32(body))).ljust(STATE_SIZE, b"\0")

    @classmethod
    def unpack(cls, raw: bytes) -> TimerState | None:
        """The state in ``raw``, or ``None``: too short, another format, a failed CRC."""
        if len(raw) < _STATE.size + 4:
            return None
        body = raw[: _STATE.size]
        (crc,) = struct.unpack_from("<I", raw, _STATE.size)
        if zlib.crc32(body) != crc:
            return None
        (
            magic,
            enqueued,
            log_end,
            delivered,
            pending,
            slots,
            precision,
            generation,
            anchor,
            wheel_sum,
            log_crc,
            dirty,
        ) = _STATE.unpack(body)
        if magic != MAGIC:
            return None
        return cls(
            enqueued, log_end, delivered, pending, slots, precision, generation, anchor, wheel_sum, log_crc, bool(dirty)
        )

    def out_of_range(self) -> str | None:
        """What number of the state no index could hold, or ``None`` (checked before anything
        is sized or mapped from it)."""
        if self.enqueued < 0 or self.anchor < -1:
            return f"queue offsets out of range (enqueued {self.enqueued}, anchor {self.anchor})"
        if not 0 <= self.pending <= self.log_end:
            return f"entry counts out of range (log_end {self.log_end}, pending {self.pending})"
        if not 0 <= self.delivered <= MAX_MS:
            return f"delivered time out of range ({self.delivered} ms)"
        return None


def slot_sums(index: np.ndarray, slots: np.ndarray) -> int:
    """The sum modulo 2**64 of the hashes of the non-empty (``count != 0``) slots among
    ``slots``, whose wheel indices are ``index``: an empty slot adds nothing whatever its other
    fields hold, so a sparse wheel's holes need no hashing and a slot's change moves the sum by
    its new hash less its old one. Any change to a non-empty slot, and any slot made non-empty,
    changes the sum (but for a 2**-64 chance)."""
    with np.errstate(over="ignore"):
        z = index.astype(np.uint64) * _MIX[0]
        z ^= slots["time"].astype(np.uint64) * _MIX[1]
        z ^= slots["last"].astype(np.uint64) * _MIX[2]
        z ^= slots["count"].astype(np.uint64) * _MIX[3]
        z ^= z >> np.uint64(30)
        z *= _M1
        z ^= z >> np.uint64(27)
        z *= _M2
        z ^= z >> np.uint64(31)
        z[slots["count"] == 0] = 0
    return int(z.sum(dtype=np.uint64))
