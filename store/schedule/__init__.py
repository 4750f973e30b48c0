"""Delay messages (RocketMQ 4.x's delay levels) and timed messages (RocketMQ 5's timer):
routing on put, the delivery time of each unit, the delivered copy, the progress file and the
scheduler service.

- :mod:`.routing`: rows with a delay level go to ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``;
- :mod:`.levels`: their units' tagsCode is the time they are due;
- :mod:`.timeup`: the copy delivered to the real topic and queue;
- :mod:`.delay_offsets`: ``config/delayOffset.json`` (RocketMQ's format);
- :mod:`.scheduler`: the passes, exactly once (idempotent appends) and one process at a time;
- timed messages (RocketMQ 5's timer): :mod:`.timer_routing` (rows with a delivery time go to
  ``rmq_sys_wheel_timer``), :mod:`.timer_wheel` (the time wheel and timer log that index
  them by due time) and :mod:`.timer` (their delivery, in the scheduler's pass).

:func:`install` wires them into a store's put path and dispatcher.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..config import delay_levels_ms
from ..config_files import TopicConfig
from ..errors import InvalidMessageError
from ..log.properties import SCHEDULE_TOPIC, TIMER_TOPIC
from .levels import schedule_tags_codes
from .routing import DELAY_LEVEL_COLUMN, route_delays
from .scheduler import DelayScheduler, PassReport
from .timer import TimerDelivery, timer_tags_codes
from .timer_routing import DELIVER_TIME_COLUMN, route_timers
from .timeup import Copies, StoredMessages

if TYPE_CHECKING:
    from ..access.appender import Appender
    from ..access.reader import QueueReader
    from ..parts import StoreParts

__all__ = ["DELAY_LEVEL_COLUMN", "DELIVER_TIME_COLUMN", "DelayScheduler", "PassReport", "install"]


def install(parts: StoreParts, appender: Appender, reader: QueueReader) -> DelayScheduler:
    """Route delayed and timed rows on put, give their units their due time, and return the
    scheduler of the store (not started: the facade adds it to its service loop)."""
    config = parts.config
    levels = delay_levels_ms(config.message_delay_level)
    max_delay_ms, precision_ms = config.timer_max_delay_sec * 1000, config.timer_precision_ms
    topics = parts.topic_config

    def queue_count(topic: str) -> int:
        count = topics.planned_queue_counts([topic], unknown=0)[0]
        if count < 1:
            raise InvalidMessageError(
                f"topic {topic!r} does not exist and auto-creation is off", row=None, field="topic"
            )
        return count

    def choose(topic: str, n: int) -> np.ndarray:
        count = queue_count(topic)
        return (appender.round_robin(topic, count, n) + np.arange(n, dtype=np.int64)) % count

    def ensure_topic(name: str, queues: int) -> None:
        have = topics.get(name)
        if have is None or have.write_queue_nums < queues:
            topics.put(TopicConfig(name, queues, queues))

    def route(table: pa.Table) -> tuple[pa.Table, pa.Array | None]:
        timed = route_timers(table, parts.clock.wall_ms(), max_delay_ms, precision_ms, choose, queue_count)
        routed = route_delays(timed.table, len(levels), choose, queue_count)
        if timed.timed:
            ensure_topic(TIMER_TOPIC, 1)
        if routed.delayed:
            ensure_topic(SCHEDULE_TOPIC, len(levels))  # one queue per level (RocketMQ: 18)
        parts_ = [p for p in (timed.system_properties, routed.system_properties) if p is not None]
        if not parts_:
            return routed.table, None
        system = parts_[0] if len(parts_) == 1 else pc.binary_join_element_wise(*parts_, b"")
        return routed.table, system.combine_chunks() if isinstance(system, pa.ChunkedArray) else system

    appender.router = route
    level_codes, timer_codes = schedule_tags_codes(levels), timer_tags_codes(precision_ms)
    parts.dispatcher.codes_hook = lambda *args: timer_codes(*args[:4], level_codes(*args))

    def put(messages: StoredMessages, copies: Copies, marker: tuple[str, str] | None) -> object:
        # appended as a broker's delivery is (RocketMQ's putMessage): readable once dispatched,
        # by the dispatcher service or a reader's dispatch
        batch = appender.encode_copies(
            copies.topic,
            copies.queue_id,
            messages.body,
            messages.flag,
            messages.born,
            copies.properties,
            marker,
            messages.born_host,
            sys_flags=messages.sys_flag,
            reconsume_times=messages.reconsume_times,
        )
        return appender.put_encoded(batch, marker, results=False)  # (the pass reads none)

    scheduler = DelayScheduler(parts, reader, put, levels)
    scheduler.timer = TimerDelivery(
        parts, reader, put, max_delay_ms=max_delay_ms, precision_ms=precision_ms, wall_ms=scheduler.now_ms
    )
    return scheduler
