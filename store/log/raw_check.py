"""Stored records checked on their own bytes: the fast form of a checked read of records as
stored (a broker's pull).

A read of stored records for a consumer (``read_window(raw=True)``) needs each record's bytes
and the assurance that each is the record its consume-queue unit names. The general checked
decode (:func:`rmqlog.log.decode.read_columns` with a :class:`rmqlog.log.decode.RecordCheck`)
gives that assurance by decoding every column (five gathers, three casts) and is what names a
bad unit. Here the same checks run on the records where they lie (one C pass, or numpy), and
only records that passed are then copied once, whole (each unit's ``size`` bytes at its
offset: the bytes a pull sends), one gather per segment, the segment pinned throughout:

(check: on the record's bytes)
- a V1 record starts there, IPv4 hosts (``sysFlag`` bits 0x10/0x20 clear): MAGIC, SYSFLAG
- TOTALSIZE is the unit's size; QUEUEID the queue's; QUEUEOFFSET the unit's: header fields
- PHYSICALOFFSET the record's offset; queue id/offset and timestamps in range: :func:`rmqlog.log.record.field_problems`
- BODYLENGTH fits; TOPICLENGTH and the topic are the queue's: one byte, a ``(n, len)`` compare
- PROPERTIESLENGTH is the rest of the record: two bytes
- with ``crc``: each body's CRC is its BODYCRC: one batch CRC call

:func:`records_pass` only says yes or no. Anything it does not take (a MAGIC V2 record, an
IPv6 host, any check failing) is a "no", and the caller then runs the general checked read,
which raises the typed error naming the first bad unit and its field, or reads what this
declined. So the guarantee is one-sided and simple to keep: every check here is at least as
strict as its counterpart in the general decode (a "yes" means that decode passes too), and
the bytes are the same (TOTALSIZE bytes at the record's offset). Every index into a record is
checked to lie inside it before it is used. (Records below the published tail never change,
so checking them in place and then copying them is as sound as the general read, which
also checks headers from one gather and copies bodies with the next.)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..native import (
    check_stored as _native_check,  # the C helper's (None without it: the numpy twin below)
)
from .commitlog import CommitLog
from .decode import MIN_RECORD_SIZE, body_crcs
from .gather import gather_slices
from .pins import pinned
from .record import (
    HEADER_V4,
    MAGIC_V1,
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    field_problems,
)

_HEADER = np.arange(HEADER_V4.itemsize, dtype=np.int64)


def read_checked(
    commitlog: CommitLog,
    offsets: np.ndarray,
    sizes: np.ndarray,
    queue_offsets: np.ndarray,
    *,
    topic: bytes,
    queue_id: int,
    crc: bool,
) -> pa.LargeBinaryArray | None:
    """The records at ``offsets`` (int64, ascending; each unit's ``sizes`` bytes) of
    ``commitlog``, checked in place by :func:`records_pass` and then copied back to back into
    one binary array (value offsets from 0), segment by segment while each is pinned
    (:mod:`rmqlog.log.pins`). Nothing is copied before it passed (so a damaged unit's size
    never sizes a copy). Each span must lie inside one segment below the published tail
    (:func:`rmqlog.queue.checked_read.check_bounds`). ``None`` when any record does not pass
    or a segment is missing, deleted or shorter than a span: the caller's general checked
    read then names what is wrong."""
    size = commitlog.segment_size
    if offsets[0] // size == offsets[-1] // size:  # the usual read: one segment, no split
        parts = [(offsets, sizes, queue_offsets)]
    else:
        cuts = np.flatnonzero(np.diff(offsets // size)) + 1
        parts = list(zip(np.split(offsets, cuts), np.split(sizes, cuts), np.split(queue_offsets, cuts), strict=True))
    arrays: list[pa.LargeBinaryArray] = []
    for part, lengths, logical in parts:
        seg = commitlog.segments.for_offset(int(part[0]))
        if seg is None:
            return None
        with pinned(seg) as held:  # a read in progress: retention leaves the file alone
            if not held:
                return None
            source = seg.array()
            at = part - seg.start
            if not records_pass(
                source, at, lengths, part, topic=topic, queue_id=queue_id, queue_offsets=logical, crc=crc
            ):
                return None
            try:
                arrays.append(gather_slices(pa.py_buffer(source), at, lengths))
            except ValueError:  # a span outside the file (one shorter than a segment)
                return None
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def records_pass(
    data: np.ndarray,
    starts: np.ndarray,
    sizes: np.ndarray,
    offsets: np.ndarray,
    *,
    topic: bytes,
    queue_id: int,
    queue_offsets: np.ndarray,
    crc: bool,
) -> bool:
    """Whether the records in ``data`` (uint8: a segment's bytes; record ``i`` at ``starts[i]``,
    its unit's ``sizes[i]`` bytes, from commitlog offset ``offsets[i]``) are each a whole IPv4
    V1 record of ``topic``, queue ``queue_id``, at queue offset ``queue_offsets[i]``, their
    lengths adding up and, with ``crc``, their bodies matching BODYCRC (the module docstring's
    table). ``False`` whenever in doubt (a record not inside ``data`` too): the caller's
    general checked read decides then. All arrays int64. One pass of the C helper
    (``check_stored``) when it is built, else numpy, the same checks."""
    n = len(starts)
    if n == 0:
        return True
    if _native_check is not None:  # one C pass over the records (the same checks), GIL released
        return bool(
            _native_check(
                data, starts, sizes, offsets, queue_offsets, topic, queue_id, MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS, crc
            )
            == n
        )
    if (sizes < MIN_RECORD_SIZE).any() or (starts < 0).any() or (sizes > len(data) - starts).any():
        return False
    hdr = data[starts[:, None] + _HEADER].view(HEADER_V4).ravel()
    if not (
        (hdr["magic"] == MAGIC_V1).all()
        and (hdr["totalSize"] == sizes).all()
        and (hdr["sysFlag"] & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6) == 0).all()
        and (hdr["queueId"] == queue_id).all()
        and (hdr["queueOffset"] == queue_offsets).all()
    ):
        return False
    bad, _ = field_problems(
        hdr["queueId"], hdr["queueOffset"], hdr["physicalOffset"], hdr["bornTimestamp"], hdr["storeTimestamp"], offsets
    )
    if bad < n:
        return False
    body_len = hdr["bodyLength"].astype(np.int64)
    # after the body: TOPICLENGTH (1 byte), the topic, PROPERTIESLENGTH (2 bytes), the properties
    if ((body_len < 0) | (body_len > sizes - HEADER_V4.itemsize - 3 - len(topic))).any():
        return False
    body_start = starts + HEADER_V4.itemsize
    topic_at = body_start + body_len
    if not (data[topic_at] == len(topic)).all():
        return False
    if topic and not (data[topic_at[:, None] + np.arange(1, len(topic) + 1)] == np.frombuffer(topic, np.uint8)).all():
        return False
    props_at = topic_at + 1 + len(topic)
    props_len = data[props_at].astype(np.int64) << 8 | data[props_at + 1]
    if not (props_len == starts + sizes - props_at - 2).all():
        return False
    if crc:  # the bodies copied out (any order), then one batch CRC call
        bodies = gather_slices(pa.py_buffer(data), body_start, body_len)
        if not (body_crcs(bodies) == hdr["bodyCRC"]).all():
            return False
    return True


__all__ = ["read_checked", "records_pass"]
