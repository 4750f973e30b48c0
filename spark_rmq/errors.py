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


class QueryDataLossError(MessagesDeletedError):
    """Messages a query still needs were deleted (retention) before or while it read them.

    Raised with ``failOnDataLoss=true`` (the default); names the queue (``queue``,
    ``"topic/queueId"``; also ``topic`` and ``queue_id``) and the lost range ``[start,
    available)`` (``available``, also ``end``: the queue's first offset still stored). A
    :class:`rmqlog.errors.MessagesDeletedError`, so one ``except`` catches the store's and the
    source's report of the same loss. (The store's :class:`rmqlog.errors.DataLossError`, the
    base of both, is chiefly recovery refusing to cut damaged flushed data.)
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


class OffsetsWentBackError(QueryDataLossError):
    """A queue now ends below the offset a query had read to (``start``): its log was cut by a
    repair, or the store at ``path`` was replaced. What the query read past ``end`` is gone,
    and the offsets from ``end`` on will name new messages. Raised with
    ``failOnDataLoss=true``; with ``false`` the query goes on from the queue's end, warned once."""

    def __init__(self, queue: str, start: int, end: int) -> None:
        super().__init__(queue, start, end)
        self.args = (
            f"data loss on queue {queue}: it now ends at offset {end}, below offset {start} the query had read "
            "to (its log was cut by a repair, or the store was replaced); set failOnDataLoss=false to go on "
            "from the queue's end",
        )

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[type, tuple[str, int, int]]:  # picklable (processes pass it on)
        return (type(self), (self.queue, self.start, self.available))


class UnreplicatedError(QueryDataLossError):
    """A range was planned from a broker group's master, and its master is now out of reach:
    its slave, which serves the read, ends at ``end``, below the range's offset ``start``.
    The master stored messages the slave never got (an ``ASYNC_MASTER``'s last sends, or a
    ``SYNC_MASTER``'s not yet acknowledged); they are readable again once the master is back.
    Raised with ``failOnDataLoss=true``; with ``false`` the range ends where the slave does,
    with a warning."""

    def __init__(self, queue: str, start: int, end: int) -> None:
        super().__init__(queue, start, end)
        self.args = (
            f"data loss on queue {queue}: its master is out of reach and its slave ends at offset {end}, below "
            f"offset {start} of the range being read (messages the master stored were not replicated; they are "
            "read again once the master is back); set failOnDataLoss=false to skip them",
        )

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[type, tuple[str, int, int]]:  # picklable (processes pass it on)
        return (type(self), (self.queue, self.start, self.available))


class UnsupportedFieldError(InvalidMessageError):
    """A sink column the store does not give meaning to yet (delayLevel, deliverTime) is set."""


__all__ = ["RmqLogOptionError", "QueryDataLossError", "UnreplicatedError", "UnsupportedFieldError"]
