"""What the console's tests share: the console's application over a live cluster (the name
server and broker of test_broker_pull_over_the_wire.py's ``servers`` fixture) driven through
aiohttp's test client on a loop of the test's own, and waiting for what the broker's rounds make
true."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from rmqnet.console import ConsoleApp, WireBackend, make_app


def eventually(check: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """``check()`` until it returns a true value (the broker's dispatcher and registration run
    on their own rounds); AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.02)
    return got


def with_console(namesrv: str, body: Callable[[TestClient, ConsoleApp], Awaitable[None]], *,
                 admin: bool = False) -> None:
    """Run ``body(client, console)`` against a console over ``namesrv`` (no sampler task: the
    pages' answers feed the history)."""
    backend = WireBackend(namesrv)
    console = ConsoleApp(backend, admin=admin, sample_s=0)

    async def run() -> None:
        async with TestClient(TestServer(make_app(console))) as client:
            await body(client, console)

    try:
        asyncio.run(run())
    finally:
        backend.close()


def token_of(page: str) -> str:
    """The admin token an admin form of ``page`` carries."""
    found = re.search(r'name="token" value="([^"]+)"', page)
    assert found, "the page has no admin form"
    return found.group(1)
