"""Errors of the Spark data source (options, data loss, sink input).

Bad rows in the sink raise the store's own typed errors (:class:`rmqlog.InvalidMessageError`
and subclasses), so callers catch one hierarchy whichever layer found the problem.
"""

from __future__ import annotations

from rmqlog.errors import InvalidMessageError, MessagesDeletedError, StoreError


class RmqLogOptionError(StoreError, ValueError):
    """An option of the ``rmqlog`` source or sink is missing, unknown or invalid.

    ``option`` names it.
    """

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"rmqlog option {option!r}: {message}")
        self.option = option


class DataLossError(MessagesDeletedError):
    """Messages a query still needs were deleted (retention) before or while it read them.

    Raised with ``failOnDataLoss=true`` (the default); names the queue (``queue``,
    ``"topic/queueId"``; also ``topic`` and ``queue_id``) and the lost range ``[start,
    available)`` (``available``, also ``end``: the queue's first offset still stored). A
    :class:`rmqlog.errors.MessagesDeletedError`, so one ``except`` catches the store's and the
    source's report of the same loss.
    """

    def __init__(self, queue: str, start: int, available: int) -> None:
        topic, _, qid = queue.rpartition("/")
        super().__init__(topic, int(qid) if qid.isdigit() else -1, start, available)
        self.args = (
            f"data loss on queue {queue}: offsets [{start}, {available}) were deleted before "
            f"they were read (the queue now starts at {available}); set failOnDataLoss=false "
            "to skip them",
        )
        self.queue = queue
        self.available = available

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[type, tuple[str, int, int]]:  # picklable (processes pass it on)
        return (type(self), (self.queue, self.start, self.available))


class UnsupportedFieldError(InvalidMessageError):
    """A sink column the store does not give meaning to yet (delayLevel, deliverTime) is set."""


__all__ = ["RmqLogOptionError", "DataLossError", "UnsupportedFieldError"]
