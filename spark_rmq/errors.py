"""Errors of the Spark data source (options, data loss, sink input).

Bad rows in the sink raise the store's own typed errors (:class:`store.InvalidMessageError`
and subclasses), so callers catch one hierarchy whichever layer found the problem.
"""

from __future__ import annotations

from store.errors import InvalidMessageError, StoreError


class RmqLogOptionError(StoreError, ValueError):
    """An option of the ``rmqlog`` source or sink is missing, unknown or invalid.

    ``option`` names it.
    """

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"rmqlog option {option!r}: {message}")
        self.option = option


class DataLossError(StoreError):
    """Messages a query still needs were deleted (retention) before it read them.

    Raised with ``failOnDataLoss=true`` (the default); names the queue and the lost range.
    """

    def __init__(self, queue: str, start: int, available: int) -> None:
        super().__init__(
            f"data loss on queue {queue}: offsets [{start}, {available}) were deleted before "
            f"they were read (the queue now starts at {available}); set failOnDataLoss=false "
            "to skip them"
        )
        self.queue = queue
        self.start = start
        self.available = available


class UnsupportedFieldError(InvalidMessageError):
    """A sink column the store does not give meaning to yet (delayLevel, deliverTime) is set."""


__all__ = ["RmqLogOptionError", "DataLossError", "UnsupportedFieldError"]
