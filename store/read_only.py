"""Read-only opens: looking at a store without changing one byte of it.

``MessageStore.open(root, read_only=True)`` is for inspection (the notebook, ``rmqlog
--read-only``, a Spark read with ``readOnly``): it writes nothing, creates nothing and takes
no ownership, so it also works on a store on a read-only mount, on a snapshot, or on a store
another process is writing.

- **No files created or changed.** Every segment, state and index file is opened
  ``O_RDONLY`` and mapped ``PROT_READ``; lock files are opened read-only and only shared locks
  are taken (a lock file that does not exist means no process of ours ever wrote here: there
  is nothing to wait for); no ``lock``/``abort`` ownership files, no checkpoint at close, no
  ``config/indexFile.json`` (the configured index geometry is used when it is missing).
- **No recovery, no dispatch.** A first normal opener recovers a store; a read-only one reads
  it as it is: messages whose consume-queue units are written (dispatched), up to the
  published tail (``append.state``). When ``append.state`` is missing or unreadable (a store
  written by RocketMQ, or after a power loss) the tail is rebuilt in memory from the log, once,
  at open (:func:`open_read_only`), and stays fixed for the life of the handle.
- **A store being written.** Reads see what writers publish after the open too (the tail is
  re-read from ``append.state``), with the same bounds as any reader.
- **A store not closed cleanly** is read as it is on disk: what recovery would cut (a torn
  tail) is beyond the published tail or fails its checks on read with a typed
  :class:`rmqlog.errors.CorruptStoreError`; open it normally to recover it.
- **Changes are refused.** ``put*``, ``dispatch``, ``start_services``, ``deliver_due``,
  ``clean_expired``, ``commit_offset``, ``create_topic`` and ``flush`` raise
  :class:`rmqlog.errors.ReadOnlyStoreError` naming the call, before touching anything.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .errors import ReadOnlyStoreError

if TYPE_CHECKING:
    from .parts import StoreParts

log = logging.getLogger(__name__)


def open_read_only(parts: StoreParts) -> None:
    """Finish a read-only open of wired ``parts``: check segment sizes, and fix the tail from
    the log when ``append.state`` cannot say it (see the module docstring)."""
    parts.commitlog.segments.check_sizes()
    if parts.state_file.load() is None:
        parts.fixed_state = parts.rebuild_state()
        log.info(
            "read-only open of %s: no append state; the log's tail is %d", parts.paths.root, parts.fixed_state.tail
        )


def refuse(operation: str) -> ReadOnlyStoreError:
    """The error a read-only store raises for ``operation``."""
    return ReadOnlyStoreError(f"{operation}: the store is open read-only (open it without read_only to change it)")
