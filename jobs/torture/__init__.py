"""Kill -9 torture of the store: writers, dispatchers and recovering processes killed at random moments.

    python jobs/torture --trials N --seed S [--flush sync|async|both] [--max-writers 4]
                       [--root DIR] [--keep] [--small] [--trials-per-store 12]

A *trial* runs against one store (``rmqlog.MessageStore``), which lives on for several trials
(so it accumulates crashes) before a fresh one is started:

1. 1 to ``--max-writers`` writer processes (one process group) append random batches:
   1..2000 rows, bodies from empty to a few KiB, three topics (4, 4 and 8 queues), explicit
   or round-robin queue ids, tags, keys, properties; some writers are idempotent
   (``put_batch(writer=, sequence=)``), replay batches on purpose, and an idempotent writer
   killed in an earlier trial is resumed by replaying its last batch. Some trials put with
   ``dispatch=True`` and run a dispatcher/reader process beside the writers. The flush mode
   is ``SYNC_FLUSH`` or ``ASYNC_FLUSH`` (``--flush``); segments are small most of the time
   (64 KiB..4 MiB commitlog segments, so rolls happen), the defaults sometimes.
2. SIGKILL at a random moment: one, some or all writers (or the whole process group), during
   start-up/recovery, after some time or after some acknowledged batches; survivors are
   killed later or finish and close cleanly; the dispatcher with them or on its own.
3. 0..3 *recovery kills*: a process opens the store (the first opener recovers it) and is
   killed at a random moment of the open; then the next one recovers again.
4. A checker process opens the store (recovery), then checks it with the store's API and
   with the independent decoder ``refcodec`` (see :func:`check_store`), appends one
   batch and checks where it landed, then closes the store, or kills itself with the store
   open (so the next trial's writers recover it).

Every message identifies itself: a non-empty body starts with ``HEAD`` (writer uid, batch
sequence, row, rows in the batch, topic index, requested queue id, CRC-32 of the rest of the
body); an empty body carries the same fields in its KEYS (``tt:uid:seq:row:n:topic:queue``).
Bodies are generated from (run seed, writer uid, sequence), so a replay is byte-identical.

Writers note, in their own append-only log, ``B`` before each ``put_batch`` and ``A`` (then
``fsync``) once it returned: *acknowledged* = ``put_batch`` returned. A process kill keeps
the page cache, so under both flush modes nothing acknowledged may be lost.

Counted per trial and in the summary (``lost``/``duplicated`` are messages, ``torn``
incidents):

- ``acknowledged``: messages whose ``put_batch`` returned during the trial;
- ``lost``: acknowledged messages absent from the commitlog or unreadable through the queues;
- ``duplicated``: extra copies of a message (idempotent replays must not add any);
- ``torn``: a batch partly present, a record the reference decoder rejects (CRC, lengths), a
  body failing its checksum, a record no writer began, consume-queue units or
  ``read_queue``/``get_messages`` disagreeing with the commitlog, queue offsets not dense, an
  acknowledged offset not holding its message, a torn message seen by the live reader;
- ``verify``: problems ``MessageStore.verify()`` reported (before and after ``dispatch()``);
- ``errors``: the reopen failing (typed or not), a child process failing or hanging, an
  append after recovery landing in the wrong place, a SYNC_FLUSH put returning unflushed.

Exit status 1 if any of them is non-zero. A failing store is kept and its path printed;
the others are deleted unless ``--keep``.

The package (``jobs/torture/``; ``python jobs/torture`` runs its ``__main__``):

- :mod:`messages`: the self-identifying messages and batches;
- :mod:`workload`: what the child processes run (writer, reader, recover, check);
- :mod:`faults`: a trial's kills (the workload, then openers during recovery);
- :mod:`ledger`, :mod:`refwalk`, :mod:`checker`: what the children noted, the log as the
  reference decoder reads it, and the check that counts the failures;
- :mod:`runner`: stores, children, trials and the counts; :mod:`cli`: the command line.
"""

from __future__ import annotations

from .checker import check_store
from .ledger import Ledger, Notes
from .messages import (
    TOPIC_QUEUES,
    TOPICS,
    BadMessage,
    identify,
    make_batch,
    store_config,
    writer_name,
)

__all__ = [
    "TOPICS",
    "TOPIC_QUEUES",
    "BadMessage",
    "Ledger",
    "Notes",
    "check_store",
    "identify",
    "make_batch",
    "store_config",
    "writer_name",
]
