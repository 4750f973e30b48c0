"""Long polling: RocketMQ 4.9.8's ``PullRequestHoldService`` as an object on the injected clock.

A pull that finds nothing (``PULL_NOT_FOUND``) and carries the suspend flag is *held*: the
pull processor calls :meth:`PullHoldService.hold`, which returns an ``asyncio.Future`` the
handler hands to the transport as its answer. The future is completed exactly once:

- on **arrival**: the store's dispatcher reports, per queue, its new max offset
  (:meth:`notify_arrivals`, vectorized, or :meth:`notify_arrival`); every pull held on that
  queue at an offset below the new max is re-run (suspend not allowed, as Java's
  ``executeRequestWhenWakeup``). If the re-run finds a message matching the held
  subscription, that response completes the future; if what arrived does not match (the
  re-run says ``NO_MATCHED_MESSAGE`` or still nothing), the pull stays held with its
  deadline unchanged (Java checks the arrival's tag hash for the same purpose);
- on **timeout**: :meth:`run_once` (``now_ms`` from the broker's clock) re-runs each pull
  whose deadline (hold time + ``suspendTimeoutMillis``, or ``shortPollingTimeMills`` with
  long polling off) has passed and answers whatever it gives: ``PULL_NOT_FOUND`` with the
  requested offset as ``nextBeginOffset`` when nothing arrived, as RocketMQ does;
- with **None** (nothing is sent) when the pull's connection closed (:meth:`on_close`, or
  found closed when it would be answered) or when the service stops.

Costs: arrivals are pushed, never found by scanning; holds are found by queue key
(``(topic, queueId)``, Java's ``topic@queueId``) and by connection, and timeouts sit in a
heap, so an idle tick with 10,000 held pulls is one look at the heap's top. Heap entries of
pulls answered early are dropped lazily when they come up.

Threads: the table is touched only on the event loop's thread (the one that held the first
pull). The dispatcher's callback and a timer may call :meth:`notify_arrivals` /
:meth:`run_once` from other threads: they are handed to the loop with
``call_soon_threadsafe``. That keeps a re-run and its re-hold atomic with respect to the
next arrival on the same queue (no wake-up can fall between them). An arrival signalled on
the loop's own thread (a send's ``put`` with ``dispatch=True`` calls the store's arrival
callback before it returns) is handled on the loop's next turn: the send is answered first,
and the store is never re-entered from inside its own call.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..remoting import RemotingCommand
from ..transport import complete
from .peer import Peer

if TYPE_CHECKING:
    from .broker import Broker

#: heap entries of answered pulls tolerated beyond twice the held ones before a compaction
COMPACT_SLACK = 1024


@dataclass(eq=False, slots=True)
class HeldPull:
    """One held pull: the request to re-run, where it waits, until when (wall ms)."""

    peer: Peer
    request: RemotingCommand
    topic: str
    queue_id: int
    offset: int
    deadline_ms: int
    future: asyncio.Future[RemotingCommand | None]
    seq: int = 0
    state: dict[str, Any] = field(default_factory=dict)  # what the pull processor keeps (parsed header, filter)

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.queue_id)


#: ``rerun(held, final)`` -> the response to answer, or ``None`` to keep holding (only
#: when ``final`` is false: at the deadline, whatever the pull gives is the answer)
Rerun = Callable[[HeldPull, bool], "RemotingCommand | None"]


class PullHoldService:
    """Held pulls by queue and by connection, their deadlines in a heap (see the module docstring)."""

    def __init__(self, rerun: Rerun) -> None:
        self._rerun = rerun
        self._by_queue: dict[tuple[str, int], dict[int, HeldPull]] = {}
        self._by_peer: dict[int, dict[int, HeldPull]] = {}
        self._deadlines: list[tuple[int, int, HeldPull]] = []
        self._seq = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._live = 0

    def __len__(self) -> int:
        """How many pulls are held now."""
        return self._live

    # ------------------------------------------------------------------ hold
    def hold(
        self,
        peer: Peer,
        request: RemotingCommand,
        topic: str,
        queue_id: int,
        offset: int,
        deadline_ms: int,
        state: dict[str, Any] | None = None,
    ) -> asyncio.Future[RemotingCommand | None]:
        """Hold ``request`` (a pull that found nothing at ``offset``) until ``deadline_ms``;
        must be called on the event loop's thread (a handler is). Returns the future that
        gets the answer (``None``: answer nothing)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._loop_thread = loop, threading.get_ident()
        fut: asyncio.Future[RemotingCommand | None] = loop.create_future()
        held = HeldPull(peer, request, topic, queue_id, offset, deadline_ms, fut, next(self._seq), state or {})
        self._insert(held)
        if len(self._deadlines) > 2 * self._live + COMPACT_SLACK:
            # pulls answered before their deadline leave their heap entries behind; dropping
            # them now and then keeps the heap within twice the held pulls (amortized O(1))
            self._deadlines = [e for e in self._deadlines if not e[2].future.done()]
            heapq.heapify(self._deadlines)
        heapq.heappush(self._deadlines, (deadline_ms, held.seq, held))
        # the transport may cancel the future (its connection went): forget the pull then
        fut.add_done_callback(functools.partial(self._forget, held))
        return fut

    def _forget(self, held: HeldPull, _fut: object) -> None:
        self._remove(held)

    def _insert(self, held: HeldPull) -> None:
        self._by_queue.setdefault(held.key, {})[held.seq] = held
        self._by_peer.setdefault(id(held.peer), {})[held.seq] = held
        self._live += 1

    def _remove(self, held: HeldPull) -> None:
        queue = self._by_queue.get(held.key)
        if queue is not None and queue.pop(held.seq, None) is not None:
            self._live -= 1
            if not queue:
                del self._by_queue[held.key]
        mine = self._by_peer.get(id(held.peer))
        if mine is not None and mine.pop(held.seq, None) is not None and not mine:
            del self._by_peer[id(held.peer)]

    # -------------------------------------------------------------- threads
    def _on_loop(self, fn: Callable[..., object], *args: object, now: bool = True) -> None:
        """Run ``fn(*args)`` on the loop's thread: handed over from another thread; on it, at
        once, or with ``now=False`` on the loop's next turn."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(fn, *args)
        elif now:
            fn(*args)
        else:
            loop.call_soon(fn, *args)

    # ------------------------------------------------------------- arrivals
    def notify_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """One queue's max offset grew to ``max_offset`` (any thread)."""
        if self._by_queue:
            self._on_loop(self._arrived, ((topic, int(queue_id), int(max_offset)),))

    def notify_arrivals(self, topics: Iterable[str], queue_ids: Iterable[int], max_offsets: Iterable[int]) -> None:
        """The dispatcher's signal for one pass, one entry per queue that grew (any thread;
        the shape of ``MessageStore.on_arrival``'s callback). Costs nothing while no pull is
        held; otherwise one hand-over to the loop and a dict lookup per queue reported."""
        if not self._by_queue:
            return
        entries = tuple(zip(topics, (int(q) for q in queue_ids), (int(m) for m in max_offsets), strict=True))
        # on the loop's thread (a put's own dispatch): at once, its answers written with the put's
        self._on_loop(self._arrived, entries)

    def _arrived(self, entries: tuple[tuple[str, int, int], ...]) -> None:
        for topic, queue_id, max_offset in entries:
            bucket = self._by_queue.get((topic, queue_id))
            if not bucket:
                continue
            for held in [h for h in bucket.values() if h.offset < max_offset]:
                self._answer(held, final=False)

    # ------------------------------------------------------------- timeouts
    def run_once(self, now_ms: int) -> None:
        """Answer every held pull whose deadline is at or before ``now_ms`` (any thread; from
        another thread the answers are handed to the loop). While none is due this is one
        look at the heap's top."""
        if self._deadlines and self._deadlines[0][0] <= now_ms:
            self._on_loop(self._expire, now_ms)

    def _expire(self, now_ms: int) -> None:
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, _, held = heapq.heappop(self._deadlines)
            if not held.future.done():
                self._answer(held, final=True)

    # ----------------------------------------------------------- answering
    def _finish(self, held: HeldPull, res: RemotingCommand | None) -> None:
        self._remove(held)  # now, not in the done callback a loop turn later
        complete(held.future, res)  # (its answer queued now: written by the next flush_completed)

    def _answer(self, held: HeldPull, *, final: bool) -> None:
        if held.future.done() or held.peer.closed:
            self._finish(held, None)
            return
        try:
            res = self._rerun(held, final)
        except Exception as exc:  # noqa: BLE001 (one pull's failure must not stop the others' answers)
            res = held.request.reply(1, f"held pull failed on wake-up: {type(exc).__name__}: {exc}")
        if res is not None or final:
            self._finish(held, res)

    def on_close(self, peer: Peer) -> int:
        """The connection ``peer`` closed: its held pulls are dropped, answered with ``None``
        (nothing is written). Returns how many. Call on the loop's thread."""
        bucket = self._by_peer.pop(id(peer), None)
        if not bucket:
            return 0
        for held in list(bucket.values()):
            self._finish(held, None)
        return len(bucket)

    def close(self) -> None:
        """The broker is stopping: every held pull is answered with what its pull gives
        (``PULL_NOT_FOUND`` at its offset when nothing arrived), so clients are not left
        waiting on a connection about to close (any thread: handed to the loop's)."""
        self._on_loop(self._close)

    def _close(self) -> None:
        for bucket in list(self._by_queue.values()):
            for held in list(bucket.values()):
                self._answer(held, final=True)
        self.stop()

    def stop(self) -> None:
        """Drop every held pull (the broker is stopping; clients pull again elsewhere)."""
        for bucket in list(self._by_queue.values()):
            for held in list(bucket.values()):
                self._finish(held, None)
        self._by_queue.clear()
        self._by_peer.clear()
        self._deadlines.clear()
        self._live = 0


_WATCHED = "rmqnet.broker.close_watched"


def watch_close(broker: Broker, peer: Peer) -> None:
    """Have ``peer``'s connection tell the broker when it closes, once per connection: the
    transport's connections run the callables of their ``on_close`` list then. What closes
    with it: its held pulls and pops (``broker.holds``, ``broker.pop_holds``) and its clients (``broker.consumers``). A
    peer
    without that list (a test's stand-in) is left alone: its held pulls are dropped when they
    would be answered, its clients when they expire."""
    if peer.attrs.get(_WATCHED):
        return
    hooks = getattr(peer, "on_close", None)
    if not isinstance(hooks, list):
        return
    peer.attrs[_WATCHED] = True
    hooks.append(functools.partial(connection_closed, broker))


def connection_closed(broker: Broker, peer: Peer) -> None:
    """A connection closed: every broker part that keeps per-connection state forgets it
    (its held pulls and pops, then its clients)."""
    broker.holds.on_close(peer)
    broker.pop_holds.on_close(peer)
    broker.consumers.on_close(peer)
