"""One open :class:`store.MessageStore` per store root per process, shared by tasks.

Why: the first process to open a store runs recovery (a walk of the newest commitlog
segments, with CRCs) and the last one to close it flushes and writes the checkpoint (see
``store.lock_file``). Spark runs tasks in reused Python workers; opening and closing the store
in every task made each task a potential "first opener" and "last closer" (measured: 0.65 s
of recovery per open of a 1M-message store). Keeping it open for the life of the worker makes
those costs once per worker. Stores are closed at interpreter exit; a worker killed by Spark
leaves ``abort`` behind, and the next first opener takes the abnormal recovery path, which is
what that file is for.

An open store reads all shared state (published tail, queue ends, topics) from the files on
each call, so a long-lived instance sees what other processes append.
"""

from __future__ import annotations

import atexit
import os
import threading

from store import MessageStore, StoreError

_stores: dict[tuple[int, str], tuple[MessageStore, tuple[int, int]]] = {}
_mutex = threading.Lock()


def _identity(ms: MessageStore) -> tuple[int, int]:
    """(inode, ctime) of the store's ``lock`` file: changes if the root is deleted and recreated."""
    st = os.stat(ms.paths.lock)
    return st.st_ino, st.st_ctime_ns


def shared_store(path: str) -> MessageStore:
    """The process's open store at ``path`` (opened on first use; do not close it).

    Raises :class:`store.StoreError` if the directory was deleted and a new store created in
    its place while this process had the old one open (its mappings would show stale data).
    """
    key = (os.getpid(), os.path.realpath(path))
    with _mutex:
        entry = _stores.get(key)
        if entry is not None and not entry[0]._closed:
            ms, ident = entry
            try:
                same = _identity(ms) == ident
            except FileNotFoundError:
                same = False
            if not same:
                raise StoreError(f"the store at {path!r} was deleted or replaced while this process had it "
                                 "open; use a new path or restart the application")
            return ms
        ms = MessageStore.open(path)
        _stores[key] = (ms, _identity(ms))
        return ms


@atexit.register
def close_all() -> None:
    """Close every store this process opened (at exit: flush, checkpoint, clean shutdown)."""
    with _mutex:
        stores = [(ms, ident) for (pid, _), (ms, ident) in _stores.items() if pid == os.getpid()]
        _stores.clear()
    for ms, ident in stores:
        try:
            current = _identity(ms)
        except FileNotFoundError:
            current = None
        if current == ident:  # a replaced store's files are not ours to flush or mark clean
            ms.close()
