"""The open stores of a Python process, and closing them when the process ends.

**One open store per root per process.** The first process to open a store runs recovery (a
walk of the newest commitlog segments, with CRCs) and the last one to close it flushes and
writes the checkpoint (see ``rmqlog.durability.lock_file``). Spark runs tasks in reused Python workers;
opening and closing the store in every task made each task a potential "first opener" and
"last closer" (measured: 0.65 s of recovery per open of a 1M-message store). So tasks share
one store per root for the life of the worker (:func:`using`). An open store reads all
shared state (published tail, queue ends, topics) from the files on each call, so a
long-lived instance sees what other processes append.

**Closing them.** A store left open by a process that ends counts as a crash: its ``abort``
file and owner file stay, and the next first opener walks the log on the abnormal path. So
every way a Spark Python process ends normally must close its stores first, and a process
that dies during a store operation must not. How pyspark 4 ends its Python processes
(traced with ``strace -f`` over a batch write, a batch read, a stream stopped with
``query.stop()``, an AvailableNow stream and ``spark.stop()``):

(process: holds a store for; how it ends)
- executor worker, forked by ``pyspark/daemon.py`` (module ``pyspark.worker``): sink and source tasks; idle and its
  socket closed by the JVM (idle timeout, ``spark.stop()``), or after a failed task: ``SystemExit`` inside the daemon's
  fork, then ``os._exit``: no ``atexit``. ``spark.stop()`` also SIGTERMs the daemon, which SIGHUPs its process group:
  killed by SIGHUP (the daemon resets it to ``SIG_DFL`` before every task). A task Spark kills: SIGKILL
- driver-side workers forked by their own daemons (``plan_data_source_read``, ``commit_data_source_write``,
  ``python_streaming_sink_runner``): batch read planning, the sink's commit (dispatch); as executor workers
- ``python_streaming_source_runner``, a plain child of the JVM, one per streaming source: the stream reader's driver
  side; SIGTERM from the JVM at ``query.stop()`` / ``spark.stop()``; ``stop()`` of the reader is not called
- the driver's own Python: nothing shared (``route`` opens and closes its own); a normal exit: ``atexit`` runs

This module closes every store of the process on each of those paths (:func:`close_all`):
``atexit``; SIGTERM and SIGHUP handlers, armed in the main thread whenever a store is used
and, in a daemon's worker, again before every task (a wrapper of the worker module's
``main``: the daemon's reset would otherwise leave ``SIG_DFL`` during tasks that do not use
a store); and ``os._exit`` in a daemon's worker (wrapped). After closing, the handler
restores the previous disposition and re-sends the signal: the process ends as it would
have, with its stores closed. A Python handler that was there before is called instead of
dying, and nothing is closed then (that process may go on; ``atexit`` closes them later).

**Never while a write could be in flight.** Every store call of the data source runs inside
:func:`busy` (opening included: it may recover). A signal that arrives while the count is
not zero, in any thread, does not close anything: the process dies of the signal as before,
leaving ``abort`` and its owner file, exactly as a kill -9 does, and the next first opener
recovers on the abnormal path. Reads yield outside :func:`busy` (a window at a time), so an
idle reader is closed cleanly. A signal that arrives while the stores are being closed is
ignored (the process is about to exit anyway). SIGKILL cannot be caught: a killed worker
always leaves ``abort`` (and, when other processes outlive it, its owner file makes the last
closer keep ``abort``).

Rejected: closing the store at the end of every task (each task a potential first opener
and last closer again: a recovery walk per task); a per-task "quiesce" that makes an idle
process's death harmless (it must fsync everything the task wrote to be safe against a power
loss, ~0.7 s for a 250 MB sink task, and Spark may stop the workers before it finishes);
moving workers out of the daemon's process group to escape its SIGHUP (workers Spark can no
longer stop as a group). Tests: ``tests/spark/test_stores_lifecycle.py`` (each signal and
exit path in a plain process) and ``tests/spark/test_spark_app_end.py`` (whole applications).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, NoReturn

from rmqlog import MessageStore, StoreError, safe_open

log = logging.getLogger(__name__)

#: The signals Spark ends its Python processes with (SIGKILL aside).
EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class _ProcessState:
    """This process's stores and exit hooks (a forked child starts afresh)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.shared: dict[str, tuple[MessageStore, tuple[int, int]]] = {}
        self.tracked: list[MessageStore] = []
        self.busy = 0  # store operations in progress, all threads
        self.closing = False
        self.prev_handlers: dict[int, Any] = {}
        self.hooked = False


_mutex = threading.RLock()  # reentrant: a signal handler runs on the main thread, maybe inside a holder
_state = _ProcessState()


def _current() -> _ProcessState:
    global _state
    if _state.pid != os.getpid():
        _state = _ProcessState()
    return _state


def _identity(ms: MessageStore) -> tuple[int, int]:
    """(inode, ctime) of the store's ``lock`` file: changes if the root is deleted and recreated.
    A read-only handle (which creates no ``lock`` file): the root folder's inode."""
    if ms.read_only:
        return os.stat(ms.paths.root).st_ino, 0
    st = safe_open.lstat(ms.paths.lock)
    return st.st_ino, st.st_ctime_ns


@contextmanager
def busy() -> Iterator[None]:
    """Mark a store operation in progress: an exit signal meanwhile leaves the stores as a crash would."""
    st = _arm()
    with _mutex:
        st.busy += 1
    try:
        yield
    finally:
        with _mutex:
            st.busy -= 1


@contextmanager
def using(path: str, *, create: bool = True, read_only: bool = False) -> Iterator[MessageStore]:
    """The process's open store at ``path`` for the duration of a store operation (see :func:`busy`).

    ``create=False`` (readers) raises :class:`rmqlog.StoreNotFoundError` where no store exists,
    creating nothing; ``read_only``: the process's read-only handle of it (the ``readOnly``
    source option), which writes nothing.
    """
    with busy():
        yield shared_store(path, create=create, read_only=read_only)


def shared_store(path: str, *, create: bool = True, read_only: bool = False) -> MessageStore:
    """The process's open store at ``path`` (opened on first use; do not close it).

    Call inside :func:`busy` (or use :func:`using`). Raises :class:`rmqlog.StoreError` if the
    directory was deleted and a new store created in its place while this process had the
    old one open (its mappings would show stale data), :class:`rmqlog.StoreNotFoundError`
    with ``create=False`` where there is no store.
    """
    key = os.path.realpath(path) + ("\0read-only" if read_only else "")
    st = _arm()
    with _mutex:
        entry = st.shared.get(key)
        if entry is not None and not entry[0]._closed:
            ms, ident = entry
            try:
                same = _identity(ms) == ident
            except FileNotFoundError:
                same = False
            if not same:
                raise StoreError(
                    f"the store at {path!r} was deleted or replaced while this process had it "
                    "open; use a new path or restart the application"
                )
            return ms
        ms = MessageStore.open(path, create=create, read_only=read_only)
        st.shared[key] = (ms, _identity(ms))
        return ms


def track(ms: MessageStore) -> None:
    """Close ``ms`` (a store this process opened itself) with the shared ones if the process ends."""
    st = _arm()
    with _mutex:
        st.tracked.append(ms)


def untrack(ms: MessageStore) -> None:
    with _mutex:
        st = _current()
        st.tracked = [m for m in st.tracked if m is not ms]


def close_all() -> None:
    """Close every store of this process (flush; the last closer writes the checkpoint and
    deletes ``abort``). Stores of a root that was replaced are dropped, not closed: their
    files are not ours to flush or mark clean."""
    with _mutex:
        st = _current()
        st.closing = True
        shared, tracked = list(st.shared.values()), st.tracked
        st.shared, st.tracked = {}, []
    try:
        for ms, ident in shared:
            try:
                current: tuple[int, int] | None = _identity(ms)
            except FileNotFoundError:
                current = None
            if current == ident:
                _close(ms)
        for ms in tracked:
            _close(ms)
    finally:
        st.closing = False


def _close(ms: MessageStore) -> None:
    try:
        ms.close()
    except Exception:  # one store failing to close must not keep the others open
        log.exception("closing the store at %s failed", ms.paths.root)


atexit.register(close_all)


# ------------------------------------------------------------------ exit hooks


def _arm() -> _ProcessState:
    """Install this process's exit hooks (once) and (re)arm the signal handlers."""
    st = _current()
    if not st.hooked:
        st.hooked = True
        _hook_daemon_worker()
    _arm_signals(st)
    return st


def _arm_signals(st: _ProcessState) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers; it re-arms on its next store use
    for sig in EXIT_SIGNALS:
        current = signal.getsignal(sig)
        if current is _on_exit_signal or current == signal.SIG_IGN:
            continue
        st.prev_handlers[sig] = current
        signal.signal(sig, _on_exit_signal)


def _on_exit_signal(signum: int, frame: FrameType | None) -> None:
    st = _current()
    if st.closing:
        return  # the stores are being closed on the way out: let that finish
    prev = st.prev_handlers.pop(signum, signal.SIG_DFL)
    dies = prev in (signal.SIG_DFL, None)
    if dies and st.busy == 0:
        close_all()
    # busy: a write may be in flight, so die without closing (abort stays, as after kill -9)
    signal.signal(signum, prev if prev is not None else signal.SIG_DFL)
    if callable(prev):
        prev(signum, frame)
        return
    os.kill(os.getpid(), signum)  # the default action: the process ends here
    os._exit(128 + signum)  # pragma: no cover (only if the signal was blocked)


def _daemon_worker_module() -> Any:
    """The module whose ``main`` pyspark's daemon calls for each task, if this process is a
    daemon's forked worker (``python -m pyspark.daemon [module]``, or ``-m spark_rmq.daemon``);
    else None."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    # pyspark's daemon, or ours (spark_rmq.daemon: pyspark's, run with this package loaded)
    daemon = (
        main
        if getattr(spec, "name", None) == "pyspark.daemon"
        else sys.modules.get("pyspark.daemon")
        if getattr(spec, "name", None) == "spark_rmq.daemon"
        else None
    )
    if daemon is None or not hasattr(daemon, "worker"):
        return None
    name = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].startswith("pyspark") else "pyspark.worker"
    module = sys.modules.get(name)
    return module if callable(getattr(module, "main", None)) else None


def _hook_daemon_worker() -> None:
    """In a daemon's worker: re-arm the handlers before every task, close the stores before ``os._exit``."""
    module = _daemon_worker_module()
    if module is None:
        return
    task_main = module.main
    if not getattr(task_main, "_rmqlog_wrapped", False):

        def main(*args: Any, **kwargs: Any) -> Any:
            _arm_signals(_current())  # the daemon has just reset SIGHUP/SIGTERM to SIG_DFL
            return task_main(*args, **kwargs)

        main._rmqlog_wrapped = True  # type: ignore[attr-defined]
        module.main = main
    real_exit: Callable[[int], Any] = os._exit
    if not getattr(real_exit, "_rmqlog_wrapped", False):

        def _exit(status: int) -> NoReturn:
            st = _current()
            if st.busy == 0 and not st.closing:
                close_all()
            real_exit(status)
            raise SystemExit(status)  # not reached: os._exit does not return

        _exit._rmqlog_wrapped = True  # type: ignore[attr-defined]
        os._exit = _exit
