"""The workload: what the child processes run (``--child ROLE SPEC``); the parent starts and kills them.

- ``writer``: appends random batches (:func:`messages.make_batch`), noting ``B`` before and
  ``A`` (fsync) after each put; idempotent writers replay batches on purpose;
- ``reader``: dispatches (in the foreground or through the background services) and reads
  random queue ranges until killed, noting every message that is not intact;
- ``recover``: waits for the go byte on stdin, opens the store (recovering it) and holds it
  open until killed;
- ``check``: recovers and checks the store (:func:`checker.check_store`), writes the result
  as JSON, then closes the store or dies with it open.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import rmqlog

from .checker import check_store
from .ledger import Notes
from .messages import (
    TOPIC_QUEUES,
    TOPICS,
    BadMessage,
    identify,
    make_batch,
    store_config,
    writer_name,
)

#: A child process that outlives this (an orphan, or a hang) kills itself (SIGALRM).
CHILD_LIFETIME_S = 900


def child_setup() -> None:
    """An orphan never outlives the job: SIGKILL when the parent dies, SIGALRM after a while."""
    signal.alarm(CHILD_LIFETIME_S)
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def child_writer(spec: dict[str, Any]) -> None:
    """Append ``batches`` batches from ``start_seq`` on; note B before and A (fsync) after each put."""
    note = Notes(spec["log"])
    cfg = store_config(spec["config"])
    uid, idem, small = spec["uid"], spec["idempotent"], spec["small"]
    rng = random.Random(spec["seed"])
    note("I")
    if spec.get("wait_go"):
        sys.stdin.buffer.read(1)
    t0 = time.monotonic()
    s = rmqlog.MessageStore.open(spec["root"], cfg)
    note("O", f"{time.monotonic() - t0:.4f}", int(s.recovery is not None))
    sync = cfg.flush_disk_type == rmqlog.SYNC_FLUSH
    for seq in range(spec["start_seq"], spec["start_seq"] + spec["batches"]):
        table = make_batch(spec["run_seed"], uid, seq, small)
        n = table.num_rows
        dispatch = rng.random() < spec["dispatch_p"]
        note("B", uid, seq, n)
        if idem:
            out = s.put_batch(table, writer=writer_name(uid), sequence=seq, dispatch=dispatch)
        else:
            out = s.put_batch(table, dispatch=dispatch)
        offs = out["commitLogOffset"].to_pylist()
        first, last = (offs[0], offs[-1]) if offs else (-1, -1)
        note("A", uid, seq, n, len(offs), first, last, sync=True)
        if len(offs) not in ((0, n) if idem else (n,)):
            note("E", f"put of {n} rows returned {len(offs)} results (uid {uid} seq {seq})")
        if sync and offs and s.flushed_offset() <= last:
            note("E", f"SYNC_FLUSH put returned with flushed offset {s.flushed_offset()} <= {last}")
        if idem and rng.random() < spec["replay_p"]:  # a deliberate replay: must be a no-op
            r = seq if rng.random() < 0.6 else rng.randint(max(0, seq - 20), seq)
            again = s.put_batch(make_batch(spec["run_seed"], uid, r, small), writer=writer_name(uid), sequence=r)
            note("R", uid, r, again.num_rows)
            if again.num_rows:
                note("E", f"replay of uid {uid} seq {r} appended {again.num_rows} rows")
        if rng.random() < 0.03:
            s.dispatch()
    s.close()
    note("C")


def child_reader(spec: dict[str, Any]) -> None:
    """Dispatch and read random queue ranges until killed; note every message that is not intact."""
    note = Notes(spec["log"])
    rng = random.Random(spec["seed"])
    note("I")
    s = rmqlog.MessageStore.open(spec["root"], store_config(spec["config"]))
    note("O")
    if spec["background"]:
        s.start_services()
    reads = 0
    while True:
        if not spec["background"] or rng.random() < 0.1:
            s.dispatch()
        t = rng.randrange(3)
        q = rng.randrange(TOPIC_QUEUES[t])
        lo, hi = s.min_offset(TOPICS[t], q), s.max_offset(TOPICS[t], q)
        if hi > lo:
            off = rng.randint(lo, hi - 1)
            res = s.get_messages("torture-reader", TOPICS[t], q, off, max_count=rng.randint(1, 600))
            got = res.messages
            qoffs = got["queueOffset"].to_pylist()
            if qoffs != list(range(off, off + len(qoffs))):
                note("P", f"{TOPICS[t]}/{q} from {off}: queue offsets {qoffs[:5]}... not dense")
            for body, keys, topic, qid in zip(
                got["body"].to_pylist(),
                got["keys"].to_pylist(),
                got["topic"].to_pylist(),
                got["queueId"].to_pylist(),
                strict=True,
            ):
                try:
                    ident = identify(body, " ".join(keys or []))
                except BadMessage as exc:
                    note("P", f"{TOPICS[t]}/{q} from {off}: {exc}")
                    continue
                if TOPICS[ident[4]] != topic or (ident[5] >= 0 and ident[5] != qid):
                    note("P", f"message {ident} read from {topic}/{qid}")
            reads += len(qoffs)
        if rng.random() < 0.05:
            note("N", reads)
        time.sleep(rng.random() * 0.003)


def child_recover(spec: dict[str, Any]) -> None:
    """Wait for the go byte on stdin, open the store (recovering it), then hold it open until killed."""
    note = Notes(spec["log"])
    cfg = store_config(spec["config"])
    note("I")
    sys.stdin.buffer.read(1)
    t0 = time.monotonic()
    s = rmqlog.MessageStore.open(spec["root"], cfg)
    rep = s.recovery
    note("O", f"{time.monotonic() - t0:.4f}", int(rep is not None))
    time.sleep(CHILD_LIFETIME_S)


def child_check(spec: dict[str, Any]) -> None:
    """Recover and check the store, write the result as JSON; then close it or die with it open."""
    out_path = Path(spec["out"])
    result = check_store(spec)
    opened = result.pop("_store", None)
    tmp = out_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out_path)
    if spec["crash_after"]:
        os.kill(os.getpid(), signal.SIGKILL)
    if opened is not None:
        opened.close()


CHILDREN = {"writer": child_writer, "reader": child_reader, "recover": child_recover, "check": child_check}
