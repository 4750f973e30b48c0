"""Answers completed in one turn of the loop, written together: a processor's future resolved
by :func:`complete` queues its connection's answer at once, and :func:`flush_completed` writes
what was queued, one write per connection (a broker's put: its sends' answers and the held
pulls it woke leave together)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

#: the flushes of connections with answers queued by :func:`complete` (a connection's bound
#: ``_flush``: equal for one connection, so each is written once)
_PENDING: set[Callable[[], None]] = set()
_scheduled = False


def complete(fut: asyncio.Future[Any], result: Any) -> None:
    """Resolve a processor's future with ``result`` (if not done yet) and, when a connection
    awaits it, queue its answer now instead of in a done callback a loop turn later; the
    answers are written by :func:`flush_completed`, which the caller runs once it has completed
    a round of futures. A call of it is also scheduled, in case the caller does not get to it."""
    if fut.done():
        return
    fut.set_result(result)
    finish = getattr(fut, "rmq_finish", None)
    if finish is not None:
        finish()


def flush_completed() -> None:
    """Write the answers :func:`complete` queued (one write per connection)."""
    while _PENDING:
        _PENDING.pop()()


def flush_later(flush: Callable[[], None], loop: asyncio.AbstractEventLoop | None) -> None:
    """Queue a connection's ``flush`` for the next :func:`flush_completed`, and schedule one on
    ``loop`` in case nobody runs it in this turn."""
    global _scheduled
    _PENDING.add(flush)
    if not _scheduled and loop is not None:
        _scheduled = True
        loop.call_soon(_flush_completed_later)


def _flush_completed_later() -> None:
    global _scheduled
    _scheduled = False
    flush_completed()
