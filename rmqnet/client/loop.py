"""The event loop behind the client's blocking calls.

Why a background thread: the client is used from plain synchronous code (tests, benchmarks,
Spark executors' Python workers, notebooks), where no event loop runs. One daemon thread per
process runs one loop for every client's blocking calls: a call submits a coroutine to it and
waits for the result. (The ``a``-prefixed coroutines do not come here: they run on the
caller's loop, :mod:`rmqnet.client.remote`.) A blocking call made from this loop's own thread
would wait for itself: it raises ``RuntimeError`` instead.

Submissions are coalesced: a burst of them (``send_async`` in a loop) wakes the loop once,
not once per call (each wake-up is a write to the loop's self-pipe).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_queue: deque[tuple[Coroutine[Any, Any, Any], concurrent.futures.Future[Any]]] = deque()
_wake_pending = False


def client_loop() -> asyncio.AbstractEventLoop:
    """The clients' loop, started on first use (a daemon thread named ``rmqnet-client``)."""
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            _thread = threading.Thread(target=run, name="rmqnet-client", daemon=True)
            _thread.start()
            ready.wait()
            _loop = loop
        return _loop


def _copy_outcome(task: asyncio.Task[Any], fut: concurrent.futures.Future[Any]) -> None:
    if fut.cancelled():
        return
    if task.cancelled():
        fut.cancel()
    elif (exc := task.exception()) is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(task.result())


def _start_submitted() -> None:
    global _wake_pending
    with _lock:
        items = list(_queue)
        _queue.clear()
        _wake_pending = False
    loop = asyncio.get_running_loop()
    for coro, fut in items:
        if not fut.set_running_or_notify_cancel():
            coro.close()
            continue
        task = loop.create_task(coro)
        task.add_done_callback(lambda t, f=fut: _copy_outcome(t, f))  # type: ignore[misc]


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run ``coro`` on the clients' loop; its outcome as a ``concurrent.futures.Future``."""
    global _wake_pending
    loop = client_loop()
    fut: concurrent.futures.Future[T] = concurrent.futures.Future()
    with _lock:
        _queue.append((coro, fut))
        wake = not _wake_pending
        _wake_pending = True
    if wake:
        loop.call_soon_threadsafe(_start_submitted)
    return fut


def call(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the clients' loop and wait for its result (re-raising its error)."""
    client_loop()
    if threading.current_thread() is _thread:
        coro.close()
        raise RuntimeError("a blocking client call from the client loop's own thread: use the a-prefixed method")
    return submit(coro).result()
