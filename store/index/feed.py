"""Feeding the index from the commitlog: the dispatcher's hook and the catch-up walk.

RocketMQ builds the index in the dispatch (``CommitLogDispatcherBuildIndex``): every record
dispatched gives its ``UNIQ_KEY`` and each ``KEYS`` token (space-separated) to the index.
Here the dispatcher calls :func:`index_records` with the columns it decoded for the consume
queues (header, topic, parsed properties: nothing is read twice), a whole run of records
at a time; :meth:`rmqlog.index.index_service.IndexService.build` makes the keys, hashes and
chain links for the run at once and skips what is already indexed, so a run dispatched
again adds nothing.

Entries go into the index in commitlog order, so records the index missed (index files
dropped after an abnormal exit, a store written without an index, the index switched on
later) must be fed before anything newer: :func:`catch_up` walks the commitlog from the
index's resume point up to where dispatching stands, at open, before the dispatch goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..log.decode import RecordColumns, read_columns
from ..log.properties import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, ParsedProperties
from ..log.scan import StopReason

if TYPE_CHECKING:
    from ..log.commitlog import CommitLog
    from .index_service import IndexService

#: Bytes of commitlog walked per step of a catch-up (bounds memory).
CATCH_UP_CHUNK = 64 << 20


def index_records(index: IndexService, cols: RecordColumns, parsed: ParsedProperties) -> int:
    """Index a run of decoded records (commitlog order); returns the entries added."""
    h = cols.header
    if not len(h):
        return 0
    return index.build(
        cols.topic,
        cols.offsets,
        np.asarray(h["storeTimestamp"], np.int64),
        parsed.column(PROPERTY_UNIQ_KEY),
        parsed.column(PROPERTY_KEYS),
        np.asarray(h["sysFlag"]),
    )


def recover_index(
    index: IndexService,
    commitlog: CommitLog,
    *,
    abnormal: bool,
    index_msg_timestamp: int,
    end: int,
    dispatched: int,
) -> tuple[list[Path], int, int]:
    """Make the index agree with a recovered log; returns (files dropped, entries cut, records
    indexed again). Run by recovery under the dispatch lock, before it dispatches.

    After an abnormal exit the files the checkpoint's ``indexMsgTimestamp`` does not cover are
    dropped (RocketMQ's ``IndexService.load(lastExitOK=false)``); entries at or past the log's
    end ``end`` are cut (RocketMQ keeps them); then the records between the index's resume
    point and the dispatch position ``dispatched`` are indexed again (:func:`catch_up`), so
    that the dispatch that follows continues the index in commitlog order."""
    dropped = index.drop_after(index_msg_timestamp) if abnormal else []
    cut = index.truncate(end)
    return dropped, cut, catch_up(index, commitlog, dispatched)


def catch_up(index: IndexService, commitlog: CommitLog, end: int) -> int:
    """Index every record from the index's resume point (or the log's first record) up to
    ``end`` (a record boundary: where dispatching stands). Returns the records walked.

    The walk stops early at a record it cannot read (recovery has cut the log before this
    runs; what is past a bad record is not dispatched either)."""
    pos = max(index.resume_offset(), commitlog.min_offset())
    walked = 0
    while pos < end:
        stop = min(end, pos + CATCH_UP_CHUNK)
        new = pos
        for seg, scan in commitlog.scan(pos, stop):
            if len(scan.positions):
                cols = read_columns(seg.buffer(), seg.start, scan.positions, with_body=False)
                index_records(index, cols, ParsedProperties(cols.properties))
                walked += len(scan.positions)
            new = seg.end if scan.reason is StopReason.BLANK else seg.start + scan.end
            if scan.reason is StopReason.CORRUPT:
                return walked
        if new <= pos:
            break
        pos = new
    return walked
