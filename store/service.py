"""Background services and the one loop that runs them (RocketMQ's ServiceThreads, as objects).

A *service* is an object with one method, ``run_once(now)``: do one round of work as of
``now`` (seconds of the loop's clock) and say whether it did any. The services of a store:
the async flusher (:mod:`rmqlog.durability.flush`, from the open on, ASYNC_FLUSH), the segment
preparer (:mod:`rmqlog.log.allocate`, the next segment made ahead of the writer; added by a
process's first put), and, from :meth:`rmqlog.MessageStore.start_services` on, the dispatcher
(:mod:`rmqlog.queue.dispatcher`, which also feeds the index files; woken by puts and by its
watch of ``append.state``), retention
(:mod:`rmqlog.retention.cleaner`) and the scheduler of delayed and timed messages
(:mod:`rmqlog.schedule.scheduler`). The policy lives there, and the time comes in as an
argument, so a service is tested by calling ``run_once`` with a fake clock: no thread, no
sleep.

:class:`ServiceLoop` is the only thread: one per open store, started when its first service
is added and ended when the last is removed. It runs each service when due:

- a service is first due at once, or after one interval when ``wait_first`` (the flusher:
  nothing to flush right after opening);
- after a round that did work it is due again at once when ``repeat_when_busy`` (the
  dispatcher: a backlog is worked off in rounds, each bounded, with the other services'
  rounds in between), else after ``interval_s``;
- after a round that found nothing to do, or raised, it is due after ``interval_s``;
- :meth:`ServiceLoop.wake` makes it due at once, also during its round (it then runs again
  right after: the round may have looked before what the wake was about).

A service may also have ``attach(wake)``: called when it is added, with a function that makes
it due now (:meth:`ServiceLoop.wake`), for a service that can be told when it has work instead
of looking for it (the dispatcher's watch of ``append.state``); it returns the function that
undoes it, called when the service is removed or the loop stopped (after its last round).

A round that raises is logged and kept in the service's ``last_error`` for its callers; the
loop goes on (a full disk now does not stop the flusher for good). Services run one at a
time, in the order they were added; :meth:`ServiceLoop.run_due` is one pass, which tests
drive with a fake clock too.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable
from typing import Protocol

from .clock import SYSTEM_CLOCK

log = logging.getLogger(__name__)


class Service(Protocol):
    """What :class:`ServiceLoop` runs (see the module docstring)."""

    #: shown in logs
    name: str
    #: seconds between rounds (after an idle round; after any round unless ``repeat_when_busy``)
    interval_s: float
    #: a round that did work is followed by another at once (else by the interval)
    repeat_when_busy: bool
    #: the first round comes one interval after the service is added (else at once)
    wait_first: bool
    #: the last error a round raised (set by the loop; the service keeps being run)
    last_error: BaseException | None

    def run_once(self, now: float) -> bool:
        """One round as of ``now`` (the loop's clock, seconds); returns whether it did work."""
        ...


class ServiceLoop:
    """One daemon thread running registered :class:`Service` objects when due.

    ``clock`` (default: the system's monotonic clock; a store's loop: its clock's
    :meth:`~rmqlog.clock.Clock.monotonic`) gives ``now``; the thread sleeps on a condition
    variable between rounds, so :meth:`add`, :meth:`remove` and :meth:`stop` take effect at
    once. :meth:`remove` and :meth:`stop` return only once the service's round in progress
    (if any) has finished: after them the service does not run. ``threaded=False``: no
    thread, the caller drives :meth:`run_due` (tests, with a fake clock).
    """

    def __init__(
        self,
        name: str = "rmq-services",
        clock: Callable[[], float] = SYSTEM_CLOCK.monotonic,
        *,
        threaded: bool = True,
    ) -> None:
        self.name = name
        self.clock = clock
        self.threaded = threaded
        self._due: dict[Service, float] = {}  # in the order added
        self._detach: dict[Service, Callable[[], object]] = {}  # what each service's attach() returned
        self._running: Service | None = None
        self._woken_running = False  # the service running now was woken during its round
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    @property
    def services(self) -> list[Service]:
        with self._cond:
            return list(self._due)

    def add(self, service: Service) -> None:
        """Run ``service`` from now on (a service already added is left as it is)."""
        with self._cond:
            if service in self._due:
                return
            now = self.clock()
            self._due[service] = now + service.interval_s if service.wait_first else now
            if self._thread is None and self.threaded:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
        attach = getattr(service, "attach", None)
        if attach is not None:
            self._attached(service, attach(functools.partial(self.wake, service)))

    def _attached(self, service: Service, detach: Callable[[], object]) -> None:
        with self._cond:
            if service in self._due and service not in self._detach:
                self._detach[service] = detach
                return
        detach()  # removed (or added twice) meanwhile

    def wake(self, service: Service) -> None:
        """Make ``service`` due now (one not added is left alone): a writer whose preparation
        fell behind does not wait for the service's interval."""
        with self._cond:
            if service in self._due:
                self._due[service] = min(self._due[service], self.clock())
                # woken during its round: the round may have looked before what the wake is
                # about, so it runs again at once (else the end of the round would set its
                # next time past the wake, which would be lost)
                if self._running is service:
                    self._woken_running = True
                self._cond.notify_all()

    def remove(self, service: Service) -> None:
        """Stop running ``service``; returns once its round in progress (if any) has finished.
        The thread ends with the last service."""
        with self._cond:
            self._due.pop(service, None)
            detach = self._detach.pop(service, None)
            self._cond.notify_all()
            inside = threading.current_thread() is self._thread  # (its round finishes when it returns)
            while not inside and self._running is service:
                self._cond.wait()
        if detach is not None:
            detach()  # outside the lock: what it stops may be calling wake()
        if not inside:
            self._join_if_idle()

    def stop(self) -> None:
        """Remove every service; returns once the thread has ended (idempotent)."""
        with self._cond:
            self._due.clear()
            self._cond.notify_all()
            detached, self._detach = list(self._detach.values()), {}
        self._join_if_idle()
        for detach in detached:
            detach()

    def _join_if_idle(self) -> None:
        """With no service left, wait for the thread to end (unless one is added meanwhile)."""
        with self._cond:
            thread = self._thread
            if thread is None or thread is threading.current_thread():
                return
            while self._thread is thread and not self._due:
                self._cond.wait()
            if self._thread is thread:  # a service was added meanwhile: the thread goes on
                return
        thread.join()  # it has left its loop: only its return is left

    def run_due(self, now: float) -> float:
        """Run once every service due at ``now``; returns when the next one is due (``inf``: none)."""
        with self._cond:
            due = [s for s, at in self._due.items() if at <= now]
        for service in due:
            with self._cond:
                if service not in self._due:  # removed meanwhile
                    continue
                self._running = service
                self._woken_running = False
            busy = False
            try:
                busy = bool(service.run_once(now))
            except BaseException as exc:  # keep serving; the error is kept for callers
                service.last_error = exc
                log.exception("%s failed", service.name)
            finally:
                with self._cond:
                    self._running = None
                    if service in self._due:
                        again = (busy and service.repeat_when_busy) or self._woken_running
                        self._due[service] = now if again else now + service.interval_s
                    self._cond.notify_all()
        with self._cond:
            return min(self._due.values(), default=math.inf)

    def _run(self) -> None:
        while True:
            next_due = self.run_due(self.clock())
            with self._cond:
                if not self._due:
                    self._thread = None
                    self._cond.notify_all()
                    return
                next_due = min(next_due, min(self._due.values()))  # one added meanwhile
                wait = next_due - self.clock()
                if wait > 0:
                    self._cond.wait(wait)
