"""What a replicated run of records must satisfy beyond the recovery walk's checks, and what
it adds to the append state: the fast form of :meth:`ReplicaWriter._take_general` and of the
walk's body CRC check (:func:`first_crc_mismatch`: every body of the run in one batch).

The walk (:func:`rmqlog.log.scan.scan_segment`) already checked lengths, magic, header
fields and PHYSICALOFFSET. Left to check, for records that continue this store's
log: every topic name is one the store accepts, and each queue's QUEUEOFFSETs continue it
(the append state's next offset first, then dense; a queue the state does not know starts at
0 when the log starts at 0, anywhere otherwise). Then the state takes from them the next
queue offsets, the store time and the idempotence markers.

Read straight from the segment's mapped bytes with numpy (a fixed number of whole-array
steps, a step per distinct topic and per distinct queue, none per record): header fields by
strided gathers, topics as a padded byte matrix grouped by ``np.unique``. Properties are read
(the general decoder) only when the run holds the marker's name at all (one ``bytes.find``).
Returns ``None`` when it cannot judge cheaply (not a case of its own: the caller runs the
general form); a test pins both forms to the same answers on random and damaged runs.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..log.append_state import AppendState
from ..log.decode import body_crcs
from ..log.gather import gather_slices
from ..log.properties import PROPERTY_WRITER
from ..log.record import (
    HEADER_V4,
    MAGIC_V2,
    NAME_VALUE_SEPARATOR,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    is_consumable,
)
from ..paths import topic_problem

#: the marker's name as stored: a run without these bytes carries no marker
MARKER_NEEDLE = (PROPERTY_WRITER + NAME_VALUE_SEPARATOR).encode()
#: topics longer than this go to the general form (RocketMQ's limit is 127)
_MAX_TOPIC = 255


def _be(arr: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed ints of ``width`` bytes at ``at`` (positions checked by the walk)."""
    b = np.ascontiguousarray(arr[at[:, None] + np.arange(width)])
    return b.view(f">i{width}").ravel().astype(np.int64)


def first_crc_mismatch(arr: np.ndarray, pos: np.ndarray) -> int:
    """Index of the first walked record at ``pos`` whose BODYCRC is wrong, ``len(pos)`` if
    none: the bodies gathered with one copy and their CRCs computed in one call of the C
    helper (the walk's own check makes a call per body)."""
    n = len(pos)
    if n == 0:
        return 0
    sys_flag = _be(arr, pos + 36, 4)
    hsize = (
        HEADER_V4.itemsize
        + np.where(sys_flag & SYSFLAG_BORNHOST_V6, 12, 0)
        + np.where(sys_flag & SYSFLAG_STOREHOST_V6, 12, 0)
    )
    body_len = _be(arr, pos + hsize - 4, 4)
    got = body_crcs(gather_slices(pa.py_buffer(arr), pos + hsize, body_len)).astype(np.int64)
    bad = np.flatnonzero(got != _be(arr, pos + 8, 4))
    return int(bad[0]) if len(bad) else n


def take_fast(
    state: AppendState, arr: np.ndarray, pos: np.ndarray, from_log_start: bool, needs_properties: bool
) -> tuple[int, str, bool] | None:
    """Check the walked records at ``pos`` (relative to ``arr``, the segment) and add them to
    ``state`` up to the first bad one; returns (its index or the count, why, whether the
    caller must still read the markers of rows ``[0, cut)``), or ``None`` for the general
    form. ``needs_properties``: the run's bytes hold the marker's name."""
    n = len(pos)
    sys_flag = _be(arr, pos + 36, 4)
    born6 = (sys_flag & SYSFLAG_BORNHOST_V6) != 0
    hsize = HEADER_V4.itemsize + np.where(born6, 12, 0) + np.where(sys_flag & SYSFLAG_STOREHOST_V6, 12, 0)
    body_len = _be(arr, pos + hsize - 4, 4)
    v2 = _be(arr, pos + 4, 4) == MAGIC_V2
    tl_at = pos + hsize + body_len
    tlen = np.where(v2, _be(arr, tl_at, 2) & 0xFFFF, arr[tl_at].astype(np.int64))
    width = int(tlen.max())
    if width == 0 or width > _MAX_TOPIC:
        return None
    t_at = tl_at + np.where(v2, 2, 1)
    mat = arr[np.minimum(t_at[:, None] + np.arange(width), len(arr) - 1)]
    mat = np.where(np.arange(width) < tlen[:, None], mat, 0).astype(np.uint8)
    if (tlen == tlen[0]).all() and (mat == mat[0]).all():  # one topic (the usual run)
        uniq, tidx = mat[:1], np.zeros(n, np.int64)
    else:
        keyed = np.concatenate([tlen[:, None].astype(np.uint8), mat], axis=1) if width < 256 else None
        if keyed is None:
            return None
        uniq_k, tidx = np.unique(keyed, axis=0, return_inverse=True)
        uniq, tidx = uniq_k[:, 1:], tidx.ravel().astype(np.int64)
    cut, why = n, ""
    names: list[str] = []
    for i, row in enumerate(uniq):  # one step per distinct topic
        length = int(tlen[int(np.flatnonzero(tidx == i)[0])])
        try:
            name = bytes(row[:length]).decode("utf-8")
            problem = topic_problem(name)
        except UnicodeDecodeError:
            name, problem = "", "topic is not valid UTF-8"
        names.append(name)
        if problem is not None:
            row_at = int(np.flatnonzero(tidx == i)[0])
            if row_at < cut:
                cut, why = row_at, f"topic refused: field 'topic': {problem}"
    qid = _be(arr, pos + 12, 4)
    qoff = _be(arr, pos + 20, 8)
    keep = np.asarray(is_consumable(sys_flag), bool)
    rows = np.flatnonzero(keep)
    key = (tidx[rows] << 32) | qid[rows]
    order = np.argsort(key, kind="stable")
    sk, so = key[order], qoff[rows][order]
    first = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]]) if len(sk) else np.zeros(0, np.int64)
    group = np.cumsum(np.r_[True, sk[1:] != sk[:-1]]) - 1 if len(sk) else np.zeros(0, np.int64)
    start = np.empty(len(first), np.int64)
    for g, k in enumerate(sk[first].tolist()):  # one step per distinct queue
        known = state.queues.get(f"{names[k >> 32]}/{k & 0xFFFFFFFF}")
        start[g] = known if known is not None else (0 if from_log_start else int(so[first[g]]))
    expected = start[group] + (np.arange(len(sk)) - first[group])
    bad = np.flatnonzero(so != expected)
    if len(bad):
        at = rows[order[bad]]
        i = int(np.argmin(at))
        if int(at[i]) < cut:
            b = int(bad[i])
            k = int(sk[b])
            cut = int(at[i])
            why = (
                f"QUEUEOFFSET {int(so[b])} of queue {names[k >> 32]}/{k & 0xFFFFFFFF} breaks its density "
                f"(expected {int(expected[b])})"
            )
    if cut == 0:
        return 0, why, False
    ok = np.flatnonzero(keep[:cut])
    if len(ok):
        k2 = (tidx[ok] << 32) | qid[ok]
        uk, last = np.unique(k2[::-1], return_index=True)  # each queue's last record before the cut
        for k, o in zip(uk.tolist(), qoff[ok][::-1][last].tolist(), strict=True):  # one step per queue
            name = f"{names[k >> 32]}/{k & 0xFFFFFFFF}"
            state.queues[name] = max(state.queues.get(name, 0), o + 1)
    store_at = pos[:cut] + np.where(born6[:cut], 68, 56)
    state.store_timestamp = max(state.store_timestamp, int(_be(arr, store_at, 8).max()))
    return cut, why, needs_properties
