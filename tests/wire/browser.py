"""A real browser for the console's tests: Debian's Chromium driven headless by its own
WebDriver (``chromium-driver``) through Selenium, never a downloaded browser (the driver's path
is given, so Selenium's manager never runs). Absent, the test fails naming ``make browser``
(real clients fail, not skip); ``close`` stops the driver it started. The console is served on
a thread of its own (:class:`ServedConsole`), as a process would serve it, for the browser to
load over a real socket."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from rmqnet.console import ConsoleApp, make_app

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: the longest any wait of a browser test lasts before it fails (a guard against a hang, not a
#: measure: every wait ends as soon as what it waits for is on the page)
GUARD_S = 30.0


def require_browser() -> None:
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not path.is_file() or shutil.which(str(path)) is None:
            pytest.fail(f"{path} is missing: `make browser` installs Debian's {package}", pytrace=False)


@contextmanager
def chromium(downloads: Path | None = None) -> Iterator[Any]:
    """A headless Chromium under its WebDriver, a window of 1400x1000 for the screenshots."""
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


class ServedConsole:
    """``console`` served on 127.0.0.1 (a free port) by a thread's event loop until ``close``."""

    def __init__(self, console: ConsoleApp) -> None:
        self.console = console
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.url = ""
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), name="console")
        self._thread.start()
        assert self._ready.wait(GUARD_S) and self.url, "the console did not start"

    async def _serve(self) -> None:
        runner = web.AppRunner(make_app(self.console), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(GUARD_S)
