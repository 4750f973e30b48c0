"""Byte forms of stored records on RocketMQ's wire: pull and query bodies.

**A pull body** is stored commitlog records, byte-exact, one after the other
(:class:`rmqlog.results.StoredRecords`); :func:`decode_records` turns it into the message
table with the store's own vectorized decoder (:mod:`rmqlog.log.decode`), checked as a
recovery walk checks a segment (lengths, header values, body CRCs). A batch send's body is
:mod:`rmqlog.log.batch_body`'s.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import CorruptRecordError, InvalidArgumentError
from ..results import StoredRecords
from .decode import RecordColumns, message_table, read_columns
from .scan import StopReason, scan_segment


def bytes_view(name: str, value: object) -> memoryview:
    """A byte view of ``value`` (bytes, bytearray, memoryview, pa.Buffer); else
    :class:`InvalidArgumentError` naming the argument."""
    if isinstance(value, (bytes, bytearray, memoryview, pa.Buffer)):
        return memoryview(value).cast("B") if isinstance(value, memoryview) else memoryview(value)
    raise InvalidArgumentError(
        f"{name} must be bytes, bytearray, memoryview or a pyarrow Buffer, got {type(value).__name__}"
    )


def decode_records(data: bytes | bytearray | memoryview | pa.Buffer) -> pa.Table:
    """The message table (:data:`rmqlog.schema.MESSAGE_SCHEMA`) of stored commitlog records
    concatenated as a pull or query body carries them (any number, ``b""`` gives none).

    Each record's ``commitLogOffset`` (and offset ``msgId``) is its PHYSICALOFFSET field: where
    it lies in its broker's commitlog. The bytes are walked and checked as recovery checks a
    segment (each record's lengths, header values and body CRC; C helper or numpy walk), then
    decoded by the store's vectorized decoder. Raises :class:`CorruptRecordError` (``offset``:
    the byte position in ``data`` of the first bad record) when they are not whole, valid
    records: a record cut short, lengths that do not add up, a body CRC mismatch, an
    end-of-segment blank.
    """
    view = bytes_view("data", data)
    buf = np.frombuffer(view, np.uint8)
    scan = scan_segment(buf, 0, len(buf), check_crc=True)
    if scan.end != len(buf) or scan.reason is StopReason.CORRUPT:
        if scan.reason is StopReason.CORRUPT:
            what = scan.detail or "not a record"
        elif scan.reason is StopReason.BLANK:
            what = "an end-of-segment blank or too few bytes for a record"
        else:
            what = "record cut short (or not a record)"
        raise CorruptRecordError(f"stored records: byte {scan.end}: {what}", offset=scan.end)
    cols = read_columns(pa.py_buffer(view), 0, scan.positions)
    cols.offsets = cols.header["physicalOffset"].astype(np.int64)
    return message_table(cols)


def stored_records(parts: list[tuple[RecordColumns, pa.LargeBinaryArray]]) -> StoredRecords:
    """One :class:`StoredRecords` of per-segment reads
    (:meth:`rmqlog.log.commitlog.CommitLog.read_stored_records`), in their order."""
    if not parts:
        return StoredRecords.empty()
    cols = [c for c, _ in parts]
    # a gather's and a concatenation's value offsets start at 0: ``data`` is the records
    array = parts[0][1] if len(parts) == 1 else pa.concat_arrays([a for _, a in parts])
    return StoredRecords(
        array,
        np.concatenate([c.offsets for c in cols]).astype(np.int64),
        np.concatenate([c.header["totalSize"] for c in cols]).astype(np.int64),
        np.concatenate([c.header["queueOffset"] for c in cols]).astype(np.int64),
    )
