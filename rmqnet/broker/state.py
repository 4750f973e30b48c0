"""Persisting the broker's state tables on a schedule (RocketMQ's ``BrokerController``
scheduling ``consumerOffsetManager.persist()`` every ``flushConsumerOffsetInterval`` ms, and
``ConfigManager.persist`` at shutdown).

The tables live in memory and cost the same per request at any size: consumer offsets
(:mod:`rmqnet.broker.consumer_offsets`), subscription groups
(:mod:`rmqnet.broker.subscription_groups`), the topics created in memory (auto-created by a
send, retry and dead-letter topics: :mod:`rmqnet.broker.topics`; an admin's
UPDATE_AND_CREATE_TOPIC is written at once, as RocketMQ writes it). :class:`StatePersistService`
(a broker service, ``run_once(now_ms)`` on the broker's clock) merges each of them with its
file every ``flushConsumerOffsetInterval`` ms (default 5000), the first time one interval
after start, and :meth:`StatePersistService.close` once more at a clean stop (the process's
SIGTERM path closes every service after the requests in flight are answered). Each merge is
the rule of :mod:`rmqlog.config_tables`: under the store's ``config.lock``, the file read again
only if another process wrote it since (its other entries taken in), the broker's changes
winning, written (atomically, synced) only when the broker changed something.

With ``background`` (the broker's process sets it), a round runs in a thread of its own and
the event loop goes on answering: writing ``consumerOffset.json`` at 100 k entries costs
~40 ms, of which only the JSON dump (~10 ms) holds the GIL; a round still running when the
next is due delays that one, and :meth:`StatePersistService.close` waits for it, then runs
the last round. Each table's persist is safe while requests change it
(:meth:`rmqnet.broker.consumer_offsets.ConsumerOffsetTable.persist`).

What a crash between two persists loses: what changed since the last one (offsets committed:
their consumers read those messages again; subscription groups and auto-created topics: made
again by the next heartbeat or send, a topic with messages found from its consume queues at
the next start), never more; the files are whole (old or new) at any instant.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)

#: one table: its name (for the log) and its persist (returns whether it wrote its file)
Table = tuple[str, Callable[[], bool]]


class StatePersistService:
    """Persists ``tables`` every ``interval()`` ms (see the module docstring); ``interval`` is
    read at each round (``flushConsumerOffsetInterval`` of the broker's config of now)."""

    def __init__(self, interval: Callable[[], int], tables: Sequence[Table], *, background: bool = False) -> None:
        self.interval = interval
        self.tables = list(tables)
        #: rounds run in a thread of their own (the module docstring)
        self.background = background
        self._round: threading.Thread | None = None
        self.next_ms: int | None = None
        #: rounds run, and the last round's error (``Type: message``), for tests and logs
        self.rounds = 0
        self.last_error: str | None = None

    def run_once(self, now_ms: int) -> bool:
        """Persist when the interval passed since the last round (the first round: one
        interval after the first call); returns whether it ran (``background``: whether it
        started; not while the last one still runs)."""
        if self.next_ms is None:
            self.next_ms = now_ms + self.interval()
            return False
        if now_ms < self.next_ms or self.running:
            return False
        self.next_ms = now_ms + self.interval()
        if self.background:
            self._round = threading.Thread(target=self._background_round, name="rmq-state-persist", daemon=True)
            self._round.start()
        else:
            self.persist_all()
        return True

    @property
    def running(self) -> bool:
        """A background round is running now."""
        return self._round is not None and self._round.is_alive()

    def _background_round(self) -> None:
        # (each table's error is logged by persist_all and kept in last_error)
        with contextlib.suppress(Exception):
            self.persist_all()

    def wait(self) -> None:
        """Wait for a background round still running (none: returns at once)."""
        if self._round is not None:
            self._round.join()

    def persist_all(self) -> None:
        """Merge every table with its file now. A table that fails keeps its changes for the
        next round and does not stop the others; the first error is raised after all ran."""
        first: Exception | None = None
        for name, persist in self.tables:
            try:
                persist()
            except Exception as exc:  # a full disk, an unreadable file: logged, tried again next round
                log.error("persisting the broker's %s failed: %s: %s", name, type(exc).__name__, exc)
                first = first or exc
        self.rounds += 1
        self.last_error = None if first is None else f"{type(first).__name__}: {first}"
        if first is not None:
            raise first

    def close(self) -> None:
        """The last persist, at a clean stop (after the requests in flight were answered;
        after a background round still running)."""
        self.wait()
        self.persist_all()


__all__ = ["StatePersistService", "Table"]
