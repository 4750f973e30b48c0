"""A daemon thread that runs one step of a service over and over until stopped.

Used by the dispatcher (RocketMQ's reput service) and the async flusher: both run a step,
keep an error that escapes it for their callers (and keep running), and sleep
``interval_s`` when the step found nothing to do.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class BackgroundLoop:
    """``step()`` returns whether it did work: if so it runs again at once, else after
    ``interval_s`` (``wait_first``: also before the first step)."""

    def __init__(self, name: str, step: Callable[[], bool], interval_s: float, *, wait_first: bool = False) -> None:
        self.name = name
        self.step = step
        self.interval_s = interval_s
        self.wait_first = wait_first
        self.last_error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def _run(self) -> None:
        if self.wait_first and self._stop.wait(self.interval_s):
            return
        while not self._stop.is_set():
            try:
                busy = self.step()
            except BaseException as exc:  # keep serving; the error is kept for callers
                self.last_error = exc
                log.exception("%s failed", self.name)
                busy = False
            if not busy:
                self._stop.wait(self.interval_s)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
