"""A queue's missing units, as the dispatcher meets them (:mod:`rmqlog.queue.dispatcher`).

A run of records whose units for one queue would start past the queue's end means the
records between were not walked (a dispatch killed between two queues' writes, then a
position derived from the queues that got theirs; a queue's files lost) or are not in the
log (retention, a damaged queue offset). The dispatcher walks back for them once
(:class:`GoBack`) before it writes a filler over their place: a filler counts as a unit,
so the records would stay hidden for good.
"""

from __future__ import annotations

from ..paths import topic_problem


def queue_name_ok(name: str) -> bool:
    """Whether ``"topic/queueId"`` of the append state names a queue that gets a folder."""
    topic, _, q = name.rpartition("/")
    return q.isdigit() and topic_problem(topic) is None


class QueueBehind(Exception):
    """A run's units of one queue start past the queue's end (:func:`rmqlog.queue.unit_writes.write_units`):
    the records between may be in the log, below where this dispatch started (a dispatch killed
    between two queues' writes, then a position derived from the queues that got theirs; a
    queue's files lost). ``resume``: where walking again would reach them."""

    def __init__(self, key: tuple[str, int], have: int, first: int, resume: int) -> None:
        super().__init__(key, have, first, resume)
        self.key, self.have, self.first, self.resume = key, have, first, resume


class GoBack(Exception):
    """Raised out of a run to make ``Dispatcher.dispatch`` walk again from ``offset``."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset
