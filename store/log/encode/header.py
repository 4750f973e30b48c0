"""The fixed-width header of a batch's records, kept as columns until its rows are laid out.

The layout is :func:`rmqlog.log.record.header_dtype` (one numpy dtype per host layout, field
offsets from it): rows are built chunk by chunk as the records are written (in the CPU cache
then, and overlapping the previous chunk's write), never for the whole batch at once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..record import MAGIC_V1, SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, header_dtype


def sys_flag(born_host: bytes, store_host: bytes) -> int:
    """SYSFLAG's host bits: IPv6 (20 raw bytes: address and port) for either host."""
    return (SYSFLAG_BORNHOST_V6 if len(born_host) == 20 else 0) | (SYSFLAG_STOREHOST_V6 if len(store_host) == 20 else 0)


@dataclass
class HeaderColumns:
    """The fixed-width header of a batch's records as columns; :meth:`rows` lays rows out.

    QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP are set under the append lock
    (:meth:`rmqlog.log.encode.batch.EncodedBatch.fill`); BODYCRC by whoever computes the CRCs.
    """

    dtype: np.dtype  # record.header_dtype for the batch's host layout
    lengths: np.ndarray  # TOTALSIZE
    queue_id: np.ndarray
    flag: np.ndarray
    born: np.ndarray  # BORNTIMESTAMP, ms
    body_len: np.ndarray
    sys_flag: int | np.ndarray  # one for every row, or one per row (a wire put's client bits)
    born_host: bytes | np.ndarray  # one for every row, or (n, 8) uint8: one IPv4 host per row
    store_host: bytes
    queue_offsets: np.ndarray | None = None
    physical_offsets: np.ndarray | None = None
    store_timestamp: int = 0
    #: RECONSUMETIMES per row (a wire put's); ``None``: 0
    reconsume_times: np.ndarray | None = None

    def rows(self, a: int, b: int) -> np.ndarray:
        """The headers of records ``[a, b)`` (BODYCRC 0), ``record.header_dtype`` rows."""
        assert self.queue_offsets is not None and self.physical_offsets is not None, "fill() first"
        dt = self.dtype
        h = np.zeros(b - a, dt)
        h["totalSize"] = self.lengths[a:b]
        h["magic"] = MAGIC_V1
        h["queueId"] = self.queue_id[a:b]
        h["flag"] = self.flag[a:b]
        h["queueOffset"] = self.queue_offsets[a:b]
        h["physicalOffset"] = self.physical_offsets[a:b]
        h["sysFlag"] = self.sys_flag if isinstance(self.sys_flag, int) else self.sys_flag[a:b]
        if self.reconsume_times is not None:
            h["reconsumeTimes"] = self.reconsume_times[a:b]
        h["bornTimestamp"] = self.born[a:b]
        if isinstance(self.born_host, bytes):
            h["bornHost"] = np.frombuffer(self.born_host, dt["bornHost"])[0]
        else:  # per row (a scheduler's copies keep the born host they were sent with)
            h["bornHost"] = np.ascontiguousarray(self.born_host[a:b], np.uint8).view(dt["bornHost"]).ravel()
        h["storeTimestamp"] = self.store_timestamp
        h["storeHost"] = np.frombuffer(self.store_host, dt["storeHost"])[0]
        h["bodyLength"] = self.body_len[a:b]
        return h


@functools.lru_cache(maxsize=8)
def plain_template(born_host: bytes, store_host: bytes) -> tuple[np.dtype, bytes]:
    """(header dtype, one header row with the fields every plain record shares: MAGICCODE,
    SYSFLAG, BORNHOST, STOREHOST; the rest zero). The C helper's ``pack_plain`` fills in the
    rest at the offsets checked here."""
    born_v6, store_v6 = len(born_host) == 20, len(store_host) == 20
    dt = header_dtype(born_v6, store_v6)
    h = np.zeros(1, dt)
    h["magic"] = MAGIC_V1
    h["sysFlag"] = sys_flag(born_host, store_host)
    h["bornHost"] = np.frombuffer(born_host, dt["bornHost"])[0]
    h["storeHost"] = np.frombuffer(store_host, dt["storeHost"])[0]
    fields = dt.fields
    assert fields is not None  # the C helper writes these fields at fixed offsets
    assert (
        fields["totalSize"][1],
        fields["bodyCRC"][1],
        fields["queueId"][1],
        fields["bornTimestamp"][1],
        fields["bodyLength"][1],
    ) == (0, 8, 12, 40, dt.itemsize - 4)
    return dt, h.tobytes()
