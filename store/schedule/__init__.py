"""Delay messages (RocketMQ 4.x's delay levels): routing on put, the delivery time of each
unit, the delivered copy, the progress file and the scheduler service.

- :mod:`.routing`: rows with a delay level go to ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``;
- :mod:`.levels`: their units' tagsCode is the time they are due;
- :mod:`.timeup`: the copy delivered to the real topic and queue;
- :mod:`.delay_offsets`: ``config/delayOffset.json`` (RocketMQ's format);
- :mod:`.scheduler`: the passes, exactly once (idempotent appends) and one process at a time.

:func:`install` wires them into a store's put path and dispatcher.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..config import delay_levels_ms
from ..config_files import TopicConfig
from ..errors import InvalidMessageError
from ..log.properties import SCHEDULE_TOPIC
from .levels import schedule_tags_codes
from .routing import DELAY_LEVEL_COLUMN, route_delays
from .scheduler import DelayScheduler, PassReport

if TYPE_CHECKING:
    from ..log.appender import Appender
    from ..parts import StoreParts
    from ..queue.reader import QueueReader

__all__ = ["DELAY_LEVEL_COLUMN", "DelayScheduler", "PassReport", "install"]


def install(parts: StoreParts, appender: Appender, reader: QueueReader) -> DelayScheduler:
    """Route delayed rows on put, give schedule-topic units their delivery time, and return
    the scheduler of the store (not started: the facade adds it to its service loop)."""
    levels = delay_levels_ms(parts.config.message_delay_level)
    topics = parts.topic_config

    def queue_count(topic: str) -> int:
        count = topics.planned_queue_counts([topic], unknown=0)[0]
        if count < 1:
            raise InvalidMessageError(f"topic {topic!r} does not exist and auto-creation is off", row=None, field="topic")
        return count

    def choose(topic: str, n: int) -> np.ndarray:
        count = queue_count(topic)
        return (appender.round_robin(topic, count, n) + np.arange(n, dtype=np.int64)) % count

    def route(table: pa.Table) -> tuple[pa.Table, pa.Array | None]:
        routed = route_delays(table, len(levels), choose, queue_count)
        if routed.delayed:
            have = topics.get(SCHEDULE_TOPIC)
            if have is None or have.write_queue_nums < len(levels):  # one queue per level (RocketMQ: 18)
                topics.put(TopicConfig(SCHEDULE_TOPIC, len(levels), len(levels)))
        return routed.table, routed.system_properties

    appender.router = route
    parts.dispatcher.codes_hook = schedule_tags_codes(levels)
    return DelayScheduler(parts, reader, lambda t, marker, system: appender.put_table(t, marker, system=system), levels)
