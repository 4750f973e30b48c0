"""The console's aiohttp application put together (:func:`make_app`: the routes of
:mod:`.pages` and :mod:`.admin_pages`, the static files from the package, the sampler's task)
and served (:func:`serve`, what ``rmqlog console`` runs until SIGTERM or SIGINT)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable
from importlib import resources

from aiohttp import web

from . import admin_pages, pages
from .app import APP_KEY, ConsoleApp, errors


async def _sample(app: web.Application) -> AsyncIterator[None]:
    console = app[APP_KEY]

    async def loop() -> None:
        while True:
            await console.run(console.sampler.run_once, console.now_ms())
            await asyncio.sleep(console.sample_s)

    task = asyncio.create_task(loop()) if console.sample_s > 0 else None
    yield
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def make_app(console: ConsoleApp) -> web.Application:
    """The application of ``console``: every route, the static files, the sampler's task."""
    app = web.Application(middlewares=[errors], client_max_size=1024 * 1024)
    app[APP_KEY] = console
    pages.add_routes(app)
    admin_pages.add_routes(app)
    app.router.add_static("/static", str(resources.files("rmqnet.console") / "static"))
    app.cleanup_ctx.append(_sample)
    return app


async def serve(console: ConsoleApp, host: str, port: int, ready: Callable[[str], None]) -> None:
    """Serve until SIGTERM or SIGINT; ``ready`` gets the address once it listens."""
    runner = web.AppRunner(make_app(console), access_log=None)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0] if runner.addresses else (host, port)
        ready(f"{'[' + bound[0] + ']' if ':' in bound[0] else bound[0]}:{bound[1]}")
        await stop.wait()
    finally:
        await runner.cleanup()
