"""The commitlog record and its parts, encoded and decoded one at a time: the layout of
RocketMQ's own source (4.9.x ``CommitLog.checkMessageAndReturnSize`` / ``calMsgLength``, 5.x
for the V2 magic), sharing no code with the store (see the package).

CommitLog record (all integers big-endian, strings UTF-8)
=========================================================

==  ==========================  ==========  ============================================
#   field                       bytes       offset with IPv4 hosts
==  ==========================  ==========  ============================================
1   TOTALSIZE                   4           0   (whole record, this field included)
2   MAGICCODE                   4           4   V1 0xDAA320A7, V2 0xDAA320AB (5.x)
3   BODYCRC                     4           8   CRC-32(body) & 0x7FFFFFFF (0 if empty)
4   QUEUEID                     4           12
5   FLAG                        4           16  (producer's int flag)
6   QUEUEOFFSET                 8           20  (logical index in its consume queue)
7   PHYSICALOFFSET              8           28  (commitlog offset of this record)
8   SYSFLAG                     4           36
9   BORNTIMESTAMP               8           40  (ms)
10  BORNHOST                    8 / 20      48  IPv4 4 B + port int 4 B; IPv6 16 B + 4 B
11  STORETIMESTAMP              8           56  (ms)
12  STOREHOST                   8 / 20      64  as BORNHOST
13  RECONSUMETIMES              4           72
14  PREPARED TRANSACTION OFF.   8           76
15  BODYLENGTH + body           4 + n       84
16  TOPICLENGTH + topic         1 + n (V1)  2 + n with the V2 magic
17  PROPERTIESLENGTH + props    2 + n
==  ==========================  ==========  ============================================

Record length = ``91 + body + topic + properties`` with IPv4 hosts and V1; each IPv6 host
adds 12 bytes (SYSFLAG bit 0x10 = born host IPv6, 0x20 = store host IPv6, changing that
host field from 8 to 20 bytes); the V2 magic adds 1 byte (2-byte topic length).

End of segment: a *blank* record ``int bytesLeftInSegment, int BLANK_MAGIC 0xCBD43194`` fills
the rest of a segment; a reader moves on to the next segment. Zero bytes mean "no more data".

Properties: ``name \\x01 value \\x02`` repeated (see :func:`encode_properties`).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field
from typing import Final, Literal

import crcmod.predefined

# --------------------------------------------------------------------------- constants

MAGIC_V1: Final = 0xDAA320A7
"""CommitLog message magic, RocketMQ 4.x (as a signed Java int: -626843481)."""
MAGIC_V2: Final = 0xDAA320AB
"""CommitLog message magic, RocketMQ 5.x, 2-byte topic length (-626843477)."""
BLANK_MAGIC: Final = 0xCBD43194
"""End-of-segment blank record magic (-875286124)."""

SYSFLAG_BORN_HOST_V6: Final = 0x10
"""SYSFLAG bit: born host is IPv6 (16-byte address)."""
SYSFLAG_STORE_HOST_V6: Final = 0x20
"""SYSFLAG bit: store host is IPv6 (16-byte address)."""

PROPERTY_NAME_VALUE_SEP: Final = "\x01"
PROPERTY_SEP: Final = "\x02"

KIND_RECORD: Final = "record"
KIND_BLANK: Final = "blank"
KIND_END: Final = "end"
DecodeKind = Literal["record", "blank", "end"]

# Java's Integer.MAX_VALUE, the mask of the body CRC.
_INT_MAX: Final = 0x7FFFFFFF


# --------------------------------------------------------------------------- helpers


def java_string_hash(s: str) -> int:
    """Return Java's ``String.hashCode()`` of ``s`` as a signed 32-bit int.

    Java hashes UTF-16 code units (``h = 31*h + unit``), so characters outside the BMP count
    as two surrogate units. ``"TAG1"`` -> 2567159, ``"TagA"`` -> 2598919.
    """
    data = s.encode("utf-16-be", errors="surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        unit = (data[i] << 8) | data[i + 1]
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


#: The independent CRC-32 of the tests (crcmod, a library the store
#: does not use; the store itself uses its C helper, ISA-L and zlib for speed): the same polynomial RocketMQ's
#: ``UtilAll.crc32``
#: (java.util.zip.CRC32) uses.
_CRC32 = crcmod.predefined.mkCrcFun("crc-32")


def body_crc(body: bytes) -> int:
    """Return RocketMQ's body CRC: CRC-32 of the body ``& 0x7FFFFFFF`` (0 for an empty body)."""
    return _CRC32(body) & _INT_MAX if body else 0


def decode_properties(b: bytes) -> dict[str, str]:
    """Decode a properties blob ``name \\x01 value \\x02 ...`` into an ordered dict.

    Mirrors RocketMQ's ``MessageDecoder.string2messageProperties``: the UTF-8 string is split
    on ``\\x02``, each item on ``\\x01`` (Java ``String.split``, which drops trailing empty
    strings), and only items that split into exactly two parts are kept. So an empty value or
    an item without ``\\x01`` is silently dropped, as in Java. Invalid UTF-8 raises ValueError.
    """
    text = b.decode("utf-8")
    out: dict[str, str] = {}
    for item in _java_split(text, PROPERTY_SEP):
        parts = _java_split(item, PROPERTY_NAME_VALUE_SEP)
        if len(parts) == 2:
            out[parts[0]] = parts[1]
    return out


def _java_split(s: str, sep: str) -> list[str]:
    """Split like Java's ``String.split(sep)`` for a one-char literal separator.

    Trailing empty strings are removed; the empty string splits into ``[""]``.
    """
    parts = s.split(sep)
    if s == "":
        return [""]
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def encode_properties(d: dict[str, str]) -> bytes:
    """Encode properties as UTF-8 ``name \\x01 value \\x02`` for each item, in dict order.

    Matches ``MessageDecoder.messageProperties2String`` (every item, the last included, ends
    with ``\\x02``). Raises ValueError if a name or value contains a separator character.
    """
    chunks: list[str] = []
    for name, value in d.items():
        for s in (name, value):
            if PROPERTY_NAME_VALUE_SEP in s or PROPERTY_SEP in s:
                raise ValueError(f"property {name!r} contains a separator character")
        chunks.append(f"{name}{PROPERTY_NAME_VALUE_SEP}{value}{PROPERTY_SEP}")
    return "".join(chunks).encode("utf-8")


def _format_host(ip: bytes, port: int) -> str:
    """Format a 4- or 16-byte address and a port as ``"ip:port"`` (IPv6: ``"[ip]:port"``)."""
    if len(ip) == 4:
        return f"{ip[0]}.{ip[1]}.{ip[2]}.{ip[3]}:{port}"
    return f"[{ipaddress.IPv6Address(ip).compressed}]:{port}"


def _parse_host(host: str) -> tuple[bytes, int]:
    """Parse ``"a.b.c.d:port"`` or ``"[v6]:port"`` into (address bytes, port)."""
    addr, sep, port_s = host.rpartition(":")
    if not sep or not port_s.lstrip("-").isdigit():
        raise ValueError(f"bad host {host!r}: expected 'ip:port'")
    if addr.startswith("[") and addr.endswith("]"):
        ip = ipaddress.IPv6Address(addr[1:-1]).packed
    else:
        ip = ipaddress.IPv4Address(addr).packed
    return ip, int(port_s)


def host_bytes(host: str) -> bytes:
    """Return the on-disk form of a host string: address bytes + port as a 4-byte int."""
    ip, port = _parse_host(host)
    return ip + struct.pack(">i", port)


def offset_msg_id(store_host: str, physical_offset: int) -> str:
    """Return RocketMQ's offset msgId: store ip + port (int) + physical offset (long), hex.

    Uppercase hex, 32 characters for an IPv4 store host, 56 for IPv6
    (``MessageDecoder.createMessageId``).
    """
    return (host_bytes(store_host) + struct.pack(">q", physical_offset)).hex().upper()


# --------------------------------------------------------------------------- records


@dataclass
class RefRecord:
    """One decoded CommitLog message record, every on-disk field kept as read."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def msg_id(self) -> str:
        """Offset msgId of this record (store host + physical offset, uppercase hex)."""
        return offset_msg_id(self.store_host, self.physical_offset)

    @property
    def tags(self) -> str | None:
        """The ``TAGS`` property, or None."""
        return self.properties.get("TAGS")

    @property
    def tags_code(self) -> int:
        """Consume-queue tagsCode: Java hash of ``TAGS`` (0 without tags).

        Not valid for ``SCHEDULE_TOPIC_XXXX`` (there it is the delivery time).
        """
        tags = self.tags
        return java_string_hash(tags) if tags else 0


def record_length(
    body_len: int,
    topic_len: int,
    props_len: int,
    sys_flag: int = 0,
    magic: int = MAGIC_V1,
) -> int:
    """Return the total record size, as RocketMQ's ``calMsgLength`` computes it."""
    born_host_len = 20 if sys_flag & SYSFLAG_BORN_HOST_V6 else 8
    store_host_len = 20 if sys_flag & SYSFLAG_STORE_HOST_V6 else 8
    topic_len_len = 2 if magic == MAGIC_V2 else 1
    return (
        4  # TOTALSIZE
        + 4  # MAGICCODE
        + 4  # BODYCRC
        + 4  # QUEUEID
        + 4  # FLAG
        + 8  # QUEUEOFFSET
        + 8  # PHYSICALOFFSET
        + 4  # SYSFLAG
        + 8  # BORNTIMESTAMP
        + born_host_len
        + 8  # STORETIMESTAMP
        + store_host_len
        + 4  # RECONSUMETIMES
        + 8  # PREPARED TRANSACTION OFFSET
        + 4
        + body_len
        + topic_len_len
        + topic_len
        + 2
        + props_len
    )


class _Reader:
    """Bounds-checked big-endian cursor over a byte buffer (raises ValueError past the end)."""

    def __init__(self, buf: bytes, pos: int, end: int) -> None:
        """Read ``buf[pos:end]``."""
        self.buf = buf
        self.pos = pos
        self.end = end

    def take(self, n: int) -> bytes:
        """Return the next ``n`` bytes."""
        if n < 0 or self.pos + n > self.end:
            raise ValueError(f"record truncated at byte {self.pos} (need {n} bytes)")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return bytes(out)

    def unpack(self, fmt: str) -> int:
        """Unpack one big-endian integer of struct format ``fmt`` (e.g. ``"i"``, ``"q"``)."""
        return int(struct.unpack(">" + fmt, self.take(struct.calcsize(">" + fmt)))[0])

    def host(self, v6: bool) -> str:
        """Read a host field: 4- or 16-byte address then an int port."""
        ip = self.take(16 if v6 else 4)
        return _format_host(ip, self.unpack("i"))


def decode_record(buf: bytes, pos: int = 0, *, check_crc: bool = True) -> tuple[DecodeKind, RefRecord | int | None]:
    """Decode the commitlog entry that starts at ``buf[pos]``.

    Returns one of:

    * ``("record", RefRecord)`` for a message record (V1 or V2 magic, IPv4/IPv6 hosts);
    * ``("blank", size)`` for an end-of-segment blank record, ``size`` being its TOTALSIZE
      (the bytes left in the segment);
    * ``("end", None)`` when there is no more data: ``pos`` is at the end of ``buf`` or the
      entry starts with zero TOTALSIZE and zero MAGICCODE.

    Raises ValueError on a malformed record: unknown magic, TOTALSIZE different from the size
    computed from the field lengths, negative lengths, a record running past the end of
    ``buf``, invalid UTF-8, or (with ``check_crc``) a body CRC mismatch.
    """
    end = len(buf)
    if pos == end:
        return KIND_END, None
    if pos + 8 > end:
        if not any(buf[pos:end]):
            return KIND_END, None
        raise ValueError(f"truncated entry header at byte {pos}")
    total_size, magic = struct.unpack_from(">iI", buf, pos)
    if total_size == 0 and magic == 0:
        return KIND_END, None
    if magic == BLANK_MAGIC:
        return KIND_BLANK, total_size
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise ValueError(f"bad magic 0x{magic:08X} at byte {pos}")
    if total_size <= 0 or pos + total_size > end:
        raise ValueError(f"bad TOTALSIZE {total_size} at byte {pos} ({end - pos} bytes left)")

    r = _Reader(buf, pos + 8, pos + total_size)
    crc = r.unpack("i")
    queue_id = r.unpack("i")
    flag = r.unpack("i")
    queue_offset = r.unpack("q")
    physical_offset = r.unpack("q")
    sys_flag = r.unpack("i")
    born_timestamp = r.unpack("q")
    born_host = r.host(bool(sys_flag & SYSFLAG_BORN_HOST_V6))
    store_timestamp = r.unpack("q")
    store_host = r.host(bool(sys_flag & SYSFLAG_STORE_HOST_V6))
    reconsume_times = r.unpack("i")
    prepared_offset = r.unpack("q")
    body_len = r.unpack("i")
    if body_len < 0:
        raise ValueError(f"negative BODYLENGTH {body_len} at byte {pos}")
    body = r.take(body_len)
    topic_len = r.unpack("h" if magic == MAGIC_V2 else "b")  # signed, as Java reads it
    if topic_len < 0:
        raise ValueError(f"negative TOPICLENGTH {topic_len} at byte {pos}")
    topic = r.take(topic_len).decode("utf-8")
    props_len = r.unpack("h")
    if props_len < 0:
        raise ValueError(f"negative PROPERTIESLENGTH {props_len} at byte {pos}")
    properties = decode_properties(r.take(props_len))

    expected = record_length(body_len, topic_len, props_len, sys_flag, magic)
    if expected != total_size or r.pos != pos + total_size:
        raise ValueError(f"length mismatch at byte {pos}: TOTALSIZE {total_size}, fields give {expected}")
    if check_crc and body_len > 0 and body_crc(body) != crc:
        raise ValueError(f"body CRC mismatch at byte {pos}: stored {crc}, computed {body_crc(body)}")

    return KIND_RECORD, RefRecord(
        total_size=total_size,
        magic=magic,
        body_crc=crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
        sys_flag=sys_flag,
        born_timestamp=born_timestamp,
        born_host=born_host,
        store_timestamp=store_timestamp,
        store_host=store_host,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_offset,
        body=body,
        topic=topic,
        properties=properties,
    )


def encode_record(
    *,
    topic: str,
    body: bytes,
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    properties: dict[str, str] | None = None,
    flag: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: str = "127.0.0.1:0",
    store_timestamp: int = 0,
    store_host: str = "127.0.0.1:10911",
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    body_crc_value: int | None = None,
    magic: int = MAGIC_V1,
) -> bytes:
    """Encode one commitlog message record, field by field.

    By default this writes what RocketMQ 4.x writes: the V1 magic with IPv4 hosts. Pass
    ``magic=MAGIC_V2`` for a 5.x record, or ``"[v6]:port"`` hosts together with the matching
    SYSFLAG bits (0x10 born, 0x20 store) for IPv6; a host whose family disagrees with
    ``sys_flag`` raises ValueError. The body CRC is computed (``body_crc``) unless
    ``body_crc_value`` is given. Raises ValueError when a length does not fit its field.
    """
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise ValueError(f"not a message magic: 0x{magic:08X}")
    born = host_bytes(born_host)
    store = host_bytes(store_host)
    if (len(born) == 20) != bool(sys_flag & SYSFLAG_BORN_HOST_V6):
        raise ValueError(f"born host {born_host!r} disagrees with sys_flag 0x{sys_flag:X}")
    if (len(store) == 20) != bool(sys_flag & SYSFLAG_STORE_HOST_V6):
        raise ValueError(f"store host {store_host!r} disagrees with sys_flag 0x{sys_flag:X}")

    topic_b = topic.encode("utf-8")
    props_b = encode_properties(properties or {})
    max_topic = 0x7FFF if magic == MAGIC_V2 else 0x7F
    if len(topic_b) > max_topic:
        raise ValueError(f"topic too long: {len(topic_b)} bytes > {max_topic}")
    if len(props_b) > 0x7FFF:
        raise ValueError(f"properties too long: {len(props_b)} bytes > 32767")
    total = record_length(len(body), len(topic_b), len(props_b), sys_flag, magic)
    crc = body_crc(body) if body_crc_value is None else body_crc_value

    out = bytearray()
    out += struct.pack(
        ">iIiiiqqiq",
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
    )
    out += born
    out += struct.pack(">q", store_timestamp)
    out += store
    out += struct.pack(">iqi", reconsume_times, prepared_transaction_offset, len(body))
    out += body
    out += struct.pack(">h" if magic == MAGIC_V2 else ">b", len(topic_b))
    out += topic_b
    out += struct.pack(">h", len(props_b))
    out += props_b
    assert len(out) == total, (len(out), total)
    return bytes(out)


def encode_ref_record(rec: RefRecord) -> bytes:
    """Re-encode a decoded :class:`RefRecord` with its own stored fields (CRC included).

    ``rec.total_size`` is not used: the size is recomputed from the fields.
    """
    return encode_record(
        topic=rec.topic,
        body=rec.body,
        queue_id=rec.queue_id,
        queue_offset=rec.queue_offset,
        physical_offset=rec.physical_offset,
        properties=rec.properties,
        flag=rec.flag,
        sys_flag=rec.sys_flag,
        born_timestamp=rec.born_timestamp,
        born_host=rec.born_host,
        store_timestamp=rec.store_timestamp,
        store_host=rec.store_host,
        reconsume_times=rec.reconsume_times,
        prepared_transaction_offset=rec.prepared_transaction_offset,
        body_crc_value=rec.body_crc,
        magic=rec.magic,
    )


def encode_blank(size: int) -> bytes:
    """Encode an end-of-segment blank record filling ``size`` bytes (at least 8).

    Only the 8-byte header is meaningful; the rest is zero-filled here.
    """
    if size < 8:
        raise ValueError(f"blank record needs at least 8 bytes, got {size}")
    return struct.pack(">iI", size, BLANK_MAGIC) + bytes(size - 8)
