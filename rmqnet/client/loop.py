"""The event loop behind the client's blocking calls.

Why a background thread: the client is used from plain synchronous code (tests, benchmarks,
Spark executors' Python workers, notebooks), where no event loop runs, and from asyncio code.
One daemon thread per process runs one loop on which every connection of every client lives;
a blocking call submits a coroutine to it and waits for the result, an ``a``-prefixed method
awaits the same coroutine from the caller's own loop (``asyncio.wrap_future``). Connections
are bound to the loop that made them, so they all live on this one. A blocking call made from
this loop's own thread would wait for itself: it raises ``RuntimeError`` instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


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


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run ``coro`` on the clients' loop; its result as a ``concurrent.futures.Future``."""
    return asyncio.run_coroutine_threadsafe(coro, client_loop())


def call(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the clients' loop and wait for its result (re-raising its error)."""
    loop = client_loop()
    if threading.current_thread() is _thread:
        coro.close()
        raise RuntimeError("a blocking client call from the client loop's own thread: use the a-prefixed method")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


async def on_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` run on the clients' loop from any loop (or on it, directly)."""
    loop = client_loop()
    if asyncio.get_running_loop() is loop:
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))
