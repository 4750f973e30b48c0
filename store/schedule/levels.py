"""Delay levels: when a delayed message is due, and the tagsCode of its consume-queue unit.

RocketMQ 4.x (``CommitLog.checkMessageAndReturnSize``): a unit of ``SCHEDULE_TOPIC_XXXX``
whose record has a ``DELAY`` property holds, as its tagsCode, the time the message is due:
``storeTimestamp + delay(level)`` (``computeDeliverTimestamp``), the level clamped to the
highest configured one. The scheduler compares those tagsCodes with the clock, so it finds
what is due from the consume queue alone, without reading the records.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..log.properties import PROPERTY_DELAY, SCHEDULE_TOPIC, ParsedProperties


def level_queue(level: int) -> int:
    """The schedule topic's queue of a level (RocketMQ's ``delayLevel2QueueId``)."""
    return level - 1


def schedule_tags_codes(levels_ms: tuple[int, ...]):  # noqa: ANN201 - returns the dispatcher's hook
    """The dispatcher's hook (``Dispatcher.codes_hook``) giving schedule-topic units their
    delivery time as tagsCode; other units keep the tags hash."""
    delays = np.asarray((0, *levels_ms), np.int64)  # index = level
    top = len(levels_ms)

    def hook(
        topics: list[str], tidx: np.ndarray, parsed: ParsedProperties, header: dict[str, np.ndarray], codes: np.ndarray
    ) -> np.ndarray:
        if SCHEDULE_TOPIC not in topics:
            return codes
        rows = np.flatnonzero(tidx == topics.index(SCHEDULE_TOPIC))
        if not len(rows):
            return codes
        values = parsed.column(PROPERTY_DELAY).take(pa.array(rows))
        ok = np.asarray(pc.fill_null(pc.match_substring_regex(values, r"^-?[0-9]{1,9}$"), False))
        if not ok.any():
            return codes
        level = np.zeros(len(rows), np.int64)
        level[ok] = np.asarray(values.filter(pa.array(ok)).cast(pa.int64()))
        level = np.minimum(level, top)
        due = level > 0
        codes = np.array(codes, np.int64, copy=True)
        at = rows[due]
        codes[at] = header["storeTimestamp"][at].astype(np.int64) + delays[level[due]]
        return codes

    return hook
