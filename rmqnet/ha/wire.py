"""RocketMQ 4.x's HA stream (4.9.8 ``store/ha/HAService.java``, ``HAConnection.java``), sans-I/O.

Plain TCP on the master's ``haListenPort``: no remoting frames, no handshake.

```
slave -> master  report    int64 BE   the slave's max commitlog offset (on connect, after
                                      each append that moved it, every haSendHeartbeatInterval)
master -> slave  transfer  int64 BE   phyOffset: commitlog offset of the first byte
                           int32 BE   size: bytes that follow (0: a heartbeat)
                           size bytes the master's commitlog, as stored: at most
                                      haTransferBatchSize (32 KiB), never across a segment
```

The master reads reports as Java's ``ReadSocketService`` does: whatever has arrived, the
last *complete* 8-byte group counts (``pos - pos % 8``), earlier ones are superseded. A
negative report is malformed (:class:`HAProtocolError`). The slave reads transfers one after
another; a size that is negative or above the slave's cap (Java's slave reads into a 4 MiB
buffer) is malformed. Both readers keep at most one partial item buffered.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

#: slave -> master: int64 big-endian
REPORT = struct.Struct(">q")
#: master -> slave: int64 phyOffset, int32 size (HAConnection.WriteSocketService ``headerSize = 8 + 4``)
HEADER = struct.Struct(">qi")
#: MessageStoreConfig.haTransferBatchSize
TRANSFER_BATCH_SIZE = 32 * 1024
#: MessageStoreConfig.haSendHeartbeatInterval (ms)
HEARTBEAT_INTERVAL_MS = 5000
#: MessageStoreConfig.haHousekeepingInterval (ms): a connection silent this long is closed
HOUSEKEEPING_INTERVAL_MS = 20000
#: MessageStoreConfig.haSlaveFallbehindMax (bytes): a slave further behind is not "OK"
SLAVE_FALLBEHIND_MAX = 256 * 1024 * 1024
#: HAClient's READ_MAX_BUFFER_SIZE: the largest transfer a slave takes
MAX_TRANSFER_SIZE = 4 * 1024 * 1024


class HAProtocolError(Exception):
    """Bytes on an HA connection that the protocol does not allow (the connection closes)."""


def encode_report(offset: int) -> bytes:
    """A slave's report of its max commitlog offset."""
    return REPORT.pack(offset)


def encode_header(offset: int, size: int) -> bytes:
    """A transfer's 12-byte header (``size`` 0: a heartbeat)."""
    return HEADER.pack(offset, size)


class ReportReader:
    """The master's side: bytes in, the latest report out."""

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: bytes) -> int | None:
        """The last complete report in what arrived so far (``None``: none completed)."""
        buf = self._partial + data if self._partial else data
        whole = len(buf) - len(buf) % 8
        self._partial = bytes(buf[whole:])
        if whole == 0:
            return None
        value: int = REPORT.unpack_from(buf, whole - 8)[0]
        if value < 0:
            raise HAProtocolError(f"slave reported a negative offset {value}")
        return value


@dataclass(frozen=True)
class Transfer:
    """One transfer: ``data`` (empty for a heartbeat) is the master's commitlog from ``offset``."""

    offset: int
    data: bytes

    @property
    def heartbeat(self) -> bool:
        return not self.data


class TransferReader:
    """The slave's side: bytes in, whole transfers out, in order."""

    def __init__(self, max_size: int = MAX_TRANSFER_SIZE) -> None:
        self.max_size = max_size
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Transfer]:
        buf = self._buf
        buf += data
        out: list[Transfer] = []
        pos = 0
        while len(buf) - pos >= HEADER.size:
            offset, size = HEADER.unpack_from(buf, pos)
            if size < 0 or size > self.max_size:
                raise HAProtocolError(f"transfer of {size} bytes (the cap is {self.max_size})")
            if offset < 0:
                raise HAProtocolError(f"transfer at a negative offset {offset}")
            if len(buf) - pos - HEADER.size < size:
                break
            start = pos + HEADER.size
            out.append(Transfer(offset, bytes(buf[start : start + size])))
            pos = start + size
        del buf[:pos]
        return out

    @property
    def buffered(self) -> int:
        return len(self._buf)


def join_transfers(transfers: list[Transfer], segment_size: int) -> list[Transfer]:
    """Consecutive transfers within one segment joined into one (fewer appends for the same
    bytes); heartbeats dropped, except that a run of only heartbeats keeps its last one
    (the slave checks its offset too)."""
    out: list[Transfer] = []
    pieces: list[bytes] = []
    start = end = -1
    for t in transfers:
        if t.heartbeat:
            continue
        if (
            pieces
            and t.offset == end
            and t.offset // segment_size == start // segment_size
            and (t.offset + len(t.data) - 1) // segment_size == start // segment_size
        ):
            pieces.append(t.data)
            end += len(t.data)
            continue
        if pieces:
            out.append(Transfer(start, b"".join(pieces)))
        pieces, start, end = [t.data], t.offset, t.offset + len(t.data)
    if pieces:
        out.append(Transfer(start, b"".join(pieces)))
    if not out and transfers:
        out.append(transfers[-1])
    return out
