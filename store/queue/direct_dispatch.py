"""The dispatch of a few records just appended by the direct path
(:mod:`rmqlog.access.direct_append`), from their own fields: no read of the commitlog, no
folder listing, no search for a queue's end, a cost in proportion to the records.

It applies when the dispatcher stands exactly at the put's start under ``dispatch.lock``:
every record before the put then has its units (the position is saved only after them), so
each queue's units for the put begin at the put's first queue offset in it, and are written
there (one ``pwrite`` per queue). A unit already there (a dispatch killed after writing them,
before saving the position) is overwritten with the same 20 bytes. Then the index entries
(``index``: :mod:`rmqlog.index`, called under the lock as the dispatcher's hook is), the
position, and the arrival signal (held pulls woken in this process at once). Anywhere else
(records before the put not yet dispatched: another process's appends), nothing is done and
the caller wakes the dispatcher, which reads them all (:meth:`Dispatcher.dispatch`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Sequence

from .. import crash_points
from .arrival import Maxes
from .consume_queue import CQ_UNIT_SIZE
from .dispatcher import Dispatcher

_UNIT = struct.Struct(">qiq")  # (CQ_UNIT's fields, big-endian: offset, size, tagsCode)
assert _UNIT.size == CQ_UNIT_SIZE
#: one unit to write: (topic, queue id, queue offset, commitlog offset, size, tagsCode)
Unit = tuple[str, int, int, int, int, int]


def dispatch_direct(
    dispatcher: Dispatcher,
    start: int,
    end: int,
    units: Sequence[Unit],
    store_timestamp: int,
    index: Callable[[], object] | None = None,
    version: Hashable | None = None,
) -> bool:
    """Write the units of the records appended and published at ``[start, end)`` (in log order); returns
    whether they are dispatched (by this call, or already by another dispatch), ``False``
    when the dispatcher stands before ``start`` (see the module docstring). Raises what the
    writes raise (:class:`rmqlog.errors.DiskFullError`): the position then stays, and the next
    dispatch writes them again. ``version``: the append state's token of the publish that ended at
    ``end`` (:attr:`rmqlog.log.append_state.AppendStateFile.published_version`): background rounds
    stay idle while it is the newest."""
    if dispatcher.index_hook is not None and index is None:
        return False
    maxes: Maxes = {}
    with dispatcher.lock.held():
        pos, last_ts = dispatcher.dispatched()
        if pos >= end:
            return True
        if pos != start:
            return False
        runs: dict[tuple[str, int], list[Unit]] = {}
        for u in units:
            runs.setdefault((u[0], u[1]), []).append(u)
        for (topic, queue_id), run in runs.items():
            first = run[0][2]
            rows = b"".join([_UNIT.pack(u[3], u[4], u[5]) for u in run])
            dispatcher.queue_for(topic, queue_id).write_packed(first, rows)
            maxes[(topic, queue_id)] = first + len(run)
        if crash_points.reached is not None:
            crash_points.reached("dispatch.units")
        if index is not None:
            index()
        dispatcher.save_position(end, max(last_ts, store_timestamp))
        if dispatcher.arrival.active:
            dispatcher.arrival.foreign(dispatcher.commitlog, start, end, maxes)
        dispatcher.caught_up(end, version)
    dispatcher.arrival.notify(maxes)
    return True
