"""The commitlog record: RocketMQ 4.9's ``MessageExtBrokerInner`` encoding, defined once.

All integers big-endian. Offsets for IPv4 hosts (each IPv6 host adds 12 bytes after it):

| #  | field                                   | bytes | offset |
|----|-----------------------------------------|-------|--------|
| 1  | TOTALSIZE (whole record, itself too)    | 4     | 0      |
| 2  | MAGICCODE V1 0xDAA320A7 / V2 0xDAA320AB | 4     | 4      |
| 3  | BODYCRC (zlib CRC-32 & 0x7FFFFFFF)      | 4     | 8      |
| 4  | QUEUEID                                 | 4     | 12     |
| 5  | FLAG                                    | 4     | 16     |
| 6  | QUEUEOFFSET                             | 8     | 20     |
| 7  | PHYSICALOFFSET                          | 8     | 28     |
| 8  | SYSFLAG                                 | 4     | 36     |
| 9  | BORNTIMESTAMP (ms)                      | 8     | 40     |
| 10 | BORNHOST (IPv4 4 + port 4; IPv6 16 + 4) | 8/20  | 48     |
| 11 | STORETIMESTAMP (ms)                     | 8     | 56     |
| 12 | STOREHOST                               | 8/20  | 64     |
| 13 | RECONSUMETIMES                          | 4     | 72     |
| 14 | PREPARED TRANSACTION OFFSET             | 8     | 76     |
| 15 | BODYLENGTH + body                       | 4+n   | 84     |
| 16 | TOPICLENGTH (1 byte V1, 2 bytes V2) + topic | 1/2+n |    |
| 17 | PROPERTIESLENGTH (short) + properties   | 2+n   |        |

Only the body is checksummed (BODYCRC); nothing protects the header or properties, so
recovery also checks that the lengths add up to TOTALSIZE.

End of segment: when ``length + 8 > bytes left``, an 8-byte blank record
``(int bytesLeft, int 0xCBD43194)`` fills the segment and the record goes to the next one.
Zero bytes where a record should start mean "no more data".

The numpy dtypes below are the one definition of the fixed part; the scalar codec here
and the vectorized codecs (:mod:`rmqlog.log.encode`, :mod:`rmqlog.log.decode`) are derived from them.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB (5.x: 2-byte topic length)
BLANK_MAGIC = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_MASK = 0xC
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

PROPERTIES_MAX_BYTES = 32767
TOPIC_MAX_BYTES_V1 = 127

#: The timestamps a record may carry (ms since the epoch): what a datetime can hold, year 1 to
#: 9999 (Arrow, Spark and Python all decode them). BORNTIMESTAMP is the producer's and may be
#: anywhere in it; STORETIMESTAMP is the store's clock, never before the epoch. A value outside
#: cannot have been written by a store: the scan treats it as damage (nothing checksums it).
MIN_TIMESTAMP_MS = -62135596800000  # 0001-01-01T00:00:00Z
MAX_TIMESTAMP_MS = 253402300799999  # 9999-12-31T23:59:59.999Z

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

#: Fixed part shared by every layout (bytes 0..40).
_PREFIX_FIELDS = [
    ("totalSize", ">i4"),
    ("magic", ">i4"),
    ("bodyCRC", ">i4"),
    ("queueId", ">i4"),
    ("flag", ">i4"),
    ("queueOffset", ">i8"),
    ("physicalOffset", ">i8"),
    ("sysFlag", ">i4"),
    ("bornTimestamp", ">i8"),
]


@cache
def header_dtype(born_v6: bool = False, store_v6: bool = False) -> np.dtype:
    """The fixed part of a record up to and including BODYLENGTH, for one host layout."""
    return np.dtype(
        _PREFIX_FIELDS
        + [
            ("bornHost", f"V{20 if born_v6 else 8}"),
            ("storeTimestamp", ">i8"),
            ("storeHost", f"V{20 if store_v6 else 8}"),
            ("reconsumeTimes", ">i4"),
            ("preparedTransactionOffset", ">i8"),
            ("bodyLength", ">i4"),
        ]
    )


HEADER_V4 = header_dtype(False, False)
assert HEADER_V4.itemsize == 88
#: Record length beyond header, body, topic and properties: topic length (1) + properties length (2).
TRAILER_LENGTH_FIELDS = 3


def header_size(sys_flag: int) -> int:
    return header_dtype(bool(sys_flag & SYSFLAG_BORNHOST_V6), bool(sys_flag & SYSFLAG_STOREHOST_V6)).itemsize


def record_length(
    body_len: int, topic_len: int, props_len: int, *, born_v6: bool = False, store_v6: bool = False, v2: bool = False
) -> int:
    """TOTALSIZE of a record: ``91 + body + topic + properties`` with IPv4 hosts and V1 magic."""
    return header_dtype(born_v6, store_v6).itemsize + body_len + (2 if v2 else 1) + topic_len + 2 + props_len


def _pick_crc32() -> Callable[..., int]:
    """The fastest available implementation of zlib's CRC-32 (RocketMQ's ``UtilAll.crc32``).

    Measured on this project's 2-core machine: ISA-L (``isal``) 23 GB/s on 4 KiB buffers and
    62 ns per 100-byte call; zlib 3.6 GB/s and 186 ns; ``crcmod`` 2x-6x slower than zlib. All
    three compute the same value; zlib is the fallback where ``isal`` has no wheel.
    """
    try:
        from isal import isal_zlib

        if isal_zlib.crc32(b"RocketMQ") == zlib.crc32(b"RocketMQ"):
            return isal_zlib.crc32
    except ImportError:  # pragma: no cover - depends on the platform
        pass
    return zlib.crc32


crc32 = _pick_crc32()


def body_crc(body: bytes | memoryview) -> int:
    """RocketMQ's BODYCRC: CRC-32 masked to 31 bits (``UtilAll.crc32``); 0 for empty."""
    return crc32(body) & 0x7FFFFFFF if len(body) else 0


def is_consumable(sys_flag: np.ndarray | int) -> np.ndarray | bool:
    """False for prepared/rollback transaction records, which never enter a consume queue."""
    t = np.bitwise_and(sys_flag, SYSFLAG_TRANSACTION_MASK)
    return (t == 0) | (t == SYSFLAG_TRANSACTION_COMMIT)


def encode_properties(props: dict[str, str]) -> bytes:
    """``name \\x01 value \\x02`` for each property, UTF-8."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items()).encode()


def decode_properties(raw: bytes) -> dict[str, str]:
    """The inverse of :func:`encode_properties`; items without a separator are skipped."""
    out: dict[str, str] = {}
    for item in raw.decode("utf-8", "replace").split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            out[name] = value
    return out


def field_problems(
    queue_id: np.ndarray,
    queue_offset: np.ndarray,
    physical_offset: np.ndarray,
    born_timestamp: np.ndarray,
    store_timestamp: np.ndarray,
    expected_offset: np.ndarray | None = None,
) -> tuple[int, str]:
    """The first record whose header holds a value no store writes: (its index, why); (n, "") if none.

    The body is the only checksummed part of a record, so a damaged QUEUEID, QUEUEOFFSET,
    PHYSICALOFFSET or timestamp would otherwise be believed, and poison what is rebuilt from
    the log (an enormous STORETIMESTAMP made every later put fail). ``expected_offset`` is
    each record's commitlog position when the caller knows it: PHYSICALOFFSET must equal it.
    Vectorized over the records; the scalar decoder calls it with arrays of one.
    """
    checks = [
        (queue_id < 0, "QUEUEID {} is negative", queue_id),
        (queue_offset < 0, "QUEUEOFFSET {} is negative", queue_offset),
        (
            (store_timestamp < 0) | (store_timestamp > MAX_TIMESTAMP_MS),
            "STORETIMESTAMP {} is out of range",
            store_timestamp,
        ),
        (
            (born_timestamp < MIN_TIMESTAMP_MS) | (born_timestamp > MAX_TIMESTAMP_MS),
            "BORNTIMESTAMP {} is out of range",
            born_timestamp,
        ),
    ]
    if expected_offset is not None:
        checks.insert(
            0, (physical_offset != expected_offset, "PHYSICALOFFSET {} is not the record's position", physical_offset)
        )
    bad = np.zeros(len(queue_id), bool)
    for mask, _, _ in checks:
        bad |= mask
    if not bad.any():
        return len(queue_id), ""
    i = int(np.flatnonzero(bad)[0])
    for mask, fmt, values in checks:  # the first check that failed names the field
        if mask[i]:
            return i, fmt.format(int(values[i]))
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass
class Record:
    """One decoded record (the scalar codec's view; batch code works on Arrow columns)."""

    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: bytes
    total_size: int = 0
    magic: int = MAGIC_V1
    body_crc: int = 0

    def encode(self) -> bytes:
        """The record's bytes (TOTALSIZE and BODYCRC computed)."""
        born_v6, store_v6 = len(self.born_host) == 20, len(self.store_host) == 20
        v2 = self.magic == MAGIC_V2
        topic = self.topic.encode("utf-8")
        dt = header_dtype(born_v6, store_v6)
        total = record_length(
            len(self.body), len(topic), len(self.properties), born_v6=born_v6, store_v6=store_v6, v2=v2
        )
        h = np.zeros(1, dt)
        sys_flag = self.sys_flag | (SYSFLAG_BORNHOST_V6 if born_v6 else 0) | (SYSFLAG_STOREHOST_V6 if store_v6 else 0)
        h[0] = (
            total,
            self.magic,
            body_crc(self.body),
            self.queue_id,
            self.flag,
            self.queue_offset,
            self.physical_offset,
            sys_flag,
            self.born_timestamp,
            self.born_host,
            self.store_timestamp,
            self.store_host,
            self.reconsume_times,
            self.prepared_transaction_offset,
            len(self.body),
        )
        topic_len = struct.pack(">h" if v2 else ">b", len(topic))
        return b"".join(
            [h.tobytes(), self.body, topic_len, topic, struct.pack(">h", len(self.properties)), self.properties]
        )


class ScanKind(enum.Enum):
    """What :func:`decode_at` found at a position."""

    RECORD = "record"
    BLANK = "blank"  # end-of-segment filler: continue at the next segment
    END = "end"  # zero bytes: no more data
    CORRUPT = "corrupt"


@dataclass
class ScanResult:
    kind: ScanKind
    size: int = 0
    record: Record | None = None
    reason: str = ""


def decode_at(buf: memoryview | bytes, pos: int, *, check_crc: bool = False, base: int | None = None) -> ScanResult:
    """Decode the record at ``pos`` of ``buf`` (a segment), never reading past its end.

    Returns a :class:`ScanResult` rather than raising: a scan decides what a bad record means.
    A record is CORRUPT when its lengths do not add up, or a header field holds a value no
    store writes (:func:`field_problems`; ``base``, the segment's commitlog offset, lets
    PHYSICALOFFSET be checked too).
    """
    left = len(buf) - pos
    if left < 8:
        return ScanResult(
            ScanKind.END if left == 0 or not any(bytes(buf[pos:])) else ScanKind.CORRUPT,
            reason="fewer than 8 bytes left",
        )
    total, magic = struct.unpack_from(">ii", buf, pos)
    if magic == BLANK_MAGIC:
        if total != left:
            return ScanResult(ScanKind.CORRUPT, reason=f"blank record of {total} bytes but {left} left")
        return ScanResult(ScanKind.BLANK, size=total)
    if total == 0 and magic == 0:
        return ScanResult(ScanKind.END)
    if magic not in (MAGIC_V1, MAGIC_V2):
        return ScanResult(ScanKind.CORRUPT, reason=f"bad magic 0x{magic & 0xFFFFFFFF:08X}")
    if total < 40 or total > left:
        return ScanResult(ScanKind.CORRUPT, reason=f"TOTALSIZE {total} out of range")
    sys_flag = struct.unpack_from(">i", buf, pos + 36)[0]
    dt = header_dtype(bool(sys_flag & SYSFLAG_BORNHOST_V6), bool(sys_flag & SYSFLAG_STOREHOST_V6))
    if total < dt.itemsize + 3:
        return ScanResult(ScanKind.CORRUPT, reason=f"TOTALSIZE {total} too small")
    h = np.frombuffer(bytes(buf[pos : pos + dt.itemsize]), dt)[0]
    p = pos + dt.itemsize
    body_len = int(h["bodyLength"])
    v2 = magic == MAGIC_V2
    tl_width = 2 if v2 else 1
    if body_len < 0 or p + body_len + tl_width + 2 > pos + total:
        return ScanResult(ScanKind.CORRUPT, reason=f"BODYLENGTH {body_len} does not fit")
    body = bytes(buf[p : p + body_len])
    p += body_len
    topic_len = struct.unpack_from(">H" if v2 else ">B", buf, p)[0]
    p += tl_width
    if p + topic_len + 2 > pos + total:
        return ScanResult(ScanKind.CORRUPT, reason=f"TOPICLENGTH {topic_len} does not fit")
    topic = bytes(buf[p : p + topic_len])
    p += topic_len
    props_len = struct.unpack_from(">H", buf, p)[0]
    p += 2
    if p + props_len != pos + total:
        return ScanResult(ScanKind.CORRUPT, reason="lengths do not add up to TOTALSIZE")
    props = bytes(buf[p : p + props_len])
    one = np.ones(1, np.int64)
    bad, why = field_problems(
        one * int(h["queueId"]),
        one * int(h["queueOffset"]),
        one * int(h["physicalOffset"]),
        one * int(h["bornTimestamp"]),
        one * int(h["storeTimestamp"]),
        None if base is None else one * (base + pos),
    )
    if why:
        return ScanResult(ScanKind.CORRUPT, reason=why)
    crc = int(h["bodyCRC"])
    if check_crc and body_crc(body) != crc:
        return ScanResult(ScanKind.CORRUPT, reason="body CRC mismatch")
    rec = Record(
        queue_id=int(h["queueId"]),
        flag=int(h["flag"]),
        queue_offset=int(h["queueOffset"]),
        physical_offset=int(h["physicalOffset"]),
        sys_flag=sys_flag,
        born_timestamp=int(h["bornTimestamp"]),
        born_host=bytes(h["bornHost"]),
        store_timestamp=int(h["storeTimestamp"]),
        store_host=bytes(h["storeHost"]),
        reconsume_times=int(h["reconsumeTimes"]),
        prepared_transaction_offset=int(h["preparedTransactionOffset"]),
        body=body,
        topic=topic.decode("utf-8", "replace"),
        properties=props,
        total_size=total,
        magic=magic,
        body_crc=crc,
    )
    return ScanResult(ScanKind.RECORD, size=total, record=rec)
