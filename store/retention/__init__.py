"""Retention: RocketMQ's clean services. Expired commitlog segments are deleted, oldest first,
and the consume-queue (and index) files wholly below the commitlog's new start follow.

- :mod:`.policy`: the rules (time, space, forced; which segments), pure functions;
- :mod:`.cleaner`: one pass (``MessageStore.clean_expired``) and the background service;
- :mod:`.marker`: ``retention.state``, the durable commitlog start;
- :mod:`.leftovers`: completing a pass cut short (at open, and by the next pass).

Readers are protected by read pins (:mod:`rmqlog.log.pins`).
"""

from .cleaner import CleanReport, Retention
from .marker import RetentionState, RetentionStateFile

__all__ = ["CleanReport", "Retention", "RetentionState", "RetentionStateFile"]
