"""The direct path of a small window read: ``read_window(raw=True)`` of at most
:data:`SMALL_WINDOW` units without a tag or SQL92 filter (a broker's pull, whose count limit
is 32), answered with a cost in proportion to its units and no fixed cost of a few dozen
numpy and Arrow calls.

The general read (:func:`rmqlog.access.window.read_window`) makes each stage one vectorized
step over the window: units as a structured array, masks, cumulative sums, RocketMQ's
``isTheBatchFull`` as array algebra, the records' offsets, sizes and queue offsets as arrays,
the check (:func:`rmqlog.log.raw_check.read_checked`) and one Arrow gather per segment.
Each of those calls costs a microsecond or more however few units there are, ~150 us for a
pull of 32. Here, for the same case:

1. the window's units (at most :data:`SMALL_WINDOW`, inside one consume-queue file) are
   copied under the file's pin (:meth:`rmqlog.queue.consume_queue.ConsumeQueue.read_stored`);
2. one call of the C helper (``window_units``) walks them: ``isTheBatchFull`` before each
   unit, each judged by its own limits (the read's, or ``disk``'s for a record "on disk"),
   exactly as the general read's formulas (int64 arithmetic included) decide it, and for each
   unit taken the bounds of :func:`rmqlog.queue.checked_read.read_unit_stored` (at or past
   ``floor``, inside the published tail, no smaller than a record, inside one segment);
3. per commitlog segment, pinned and split as :func:`rmqlog.log.raw_check.read_checked`
   splits them, one call of the C helper (``check_copy``): the records checked where they
   lie by ``check_stored``'s very checks (one C function serves both) and, when all pass,
   copied back to back into one buffer, wrapped as the general read wraps them
   (:class:`rmqlog.results.StoredRecords`).

Whatever it does not take goes the general way, from the same bounds and tail: a filler in
the window (statuses and the second look at the whole scan are the general read's), the
units' file gone, a unit out of bounds, a record that fails a check (the general read then
raises the typed error naming it, or reads what the check declined), a segment gone, no C
helper. So no byte, status, next offset or error differs between the two paths
(``tests/test_small_window.py`` pins them on random windows and on damage).
"""

from __future__ import annotations

from array import array
from itertools import accumulate

import numpy as np
import pyarrow as pa

from ..log.commitlog import CommitLog
from ..log.decode import MIN_RECORD_SIZE, empty_message_table
from ..log.pins import pin, unpin
from ..log.record import MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS
from ..native import check_copy as _native_copy
from ..native import window_units as _native_units
from ..queue.consume_queue import CQ_UNIT_SIZE
from ..results import GetMessageResult, GetMessageStatus, StoredRecords
from .window_request import WindowRequest

#: The most units a window may span to take this path (a pull's 32 and the disk limit's 8 fit).
SMALL_WINDOW = 64


def read_small(
    commitlog: CommitLog, units: bytes, req: WindowRequest, *, lo: int, hi: int, floor: int, tail: int
) -> GetMessageResult | None:
    """The stored records of the window ``req`` whose ``units`` (as stored: at most
    :data:`SMALL_WINDOW`, from queue offset ``req.offset``, the units the general read would look
    at first, :meth:`rmqlog.queue.consume_queue.ConsumeQueue.read_stored`) were read, under
    ``max_count``/``max_bytes`` and ``disk`` (see the module docstring), answered FOUND with
    ``lo``/``hi`` as bounds; ``None`` whenever the general read must answer (from the same
    units). ``floor`` and ``tail``: the commitlog's first offset the bounds were taken
    against and the published tail read after them."""
    if _native_units is None or _native_copy is None or len(units) > SMALL_WINDOW * CQ_UNIT_SIZE:
        return None
    offset, max_bytes, disk = req.offset, req.max_bytes, req.disk
    room = len(units) // CQ_UNIT_SIZE
    offs, sizes = array("q", bytes(8 * room)), array("q", bytes(8 * room))
    no_bytes = -1 if max_bytes is None else max_bytes
    taken = _native_units(
        units,
        floor,
        tail,
        commitlog.segment_size,
        req.max_count,
        no_bytes,
        -1 if disk is None else disk.memory,
        0 if disk is None else disk.max_count,
        0 if disk is None else disk.max_bytes,
        MIN_RECORD_SIZE,
        offs,
        sizes,
    )
    if taken < 0:  # a filler before the batch is full (-1), a unit out of bounds (-2)
        return None
    del offs[taken:], sizes[taken:]
    ends = array("q", accumulate(sizes, initial=0))
    data = _checked_bytes(commitlog, offs, sizes, ends[-1], offset, req.topic.encode(), req.queue_id, req.check_crc)
    if data is None:
        return None
    records = StoredRecords(
        pa.LargeBinaryArray.from_buffers(pa.large_binary(), taken, [None, pa.py_buffer(ends), pa.py_buffer(data)]),
        np.frombuffer(offs, np.int64),
        np.frombuffer(sizes, np.int64),
        np.arange(offset, offset + taken, dtype=np.int64),
    )
    return GetMessageResult(GetMessageStatus.FOUND, offset + taken, lo, hi, empty_message_table(req.columns), records)


def _checked_bytes(
    commitlog: CommitLog,
    offs: array[int],
    sizes: array[int],
    total: int,
    first: int,
    topic: bytes,
    queue_id: int,
    crc: bool,
) -> bytearray | None:
    """The records' bytes back to back (``total`` of them), each checked where it lies exactly
    as :func:`rmqlog.log.raw_check.read_checked` checks them (the same split into segments,
    the C helper's checks of ``check_stored``) and copied by the same call
    (``check_copy``), each segment pinned meanwhile; ``None`` when any check fails or a
    segment is gone."""
    seg_size = commitlog.segment_size
    n = len(offs)
    if offs[0] // seg_size == offs[-1] // seg_size:  # read_checked's split: one part, or one per run
        parts = [(0, n)]
    else:
        cuts = [k for k in range(1, n) if offs[k] // seg_size != offs[k - 1] // seg_size]
        parts = list(zip([0, *cuts], [*cuts, n], strict=True))
    out = bytearray(total)
    at = 0
    for a, b in parts:
        seg = commitlog.segments.for_offset(offs[a])
        if seg is None or not pin(seg):  # (gone: deleted by retention)
            return None
        try:
            if not _native_copy(
                seg.array(),
                seg.start,
                offs,
                sizes,
                a,
                b - a,
                first + a,
                topic,
                queue_id,
                MIN_TIMESTAMP_MS,
                MAX_TIMESTAMP_MS,
                crc,
                out,
                at,
            ):
                return None
        finally:
            unpin(seg)
        if len(parts) > 1:
            at += sum(sizes[a:b])
    return out


__all__ = ["SMALL_WINDOW", "read_small"]
