"""The faults of a trial: the workload started in one process group, SIGKILL at a random
moment, then kills during recovery (the parent's side; the children are in :mod:`workload`).

Every choice is drawn from the run's one ``random.Random`` in a fixed order, so a seed names
a sequence of trials (the kill moments still depend on timing).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .messages import CHECKER_SLOT, MAX_WRITERS, UID_SLOTS
from .workload import CHILD_LIFETIME_S

if TYPE_CHECKING:  # the runner calls these phases with itself
    from .runner import Child, Torture


@dataclass
class Workload:
    """A trial's writers (and perhaps a dispatcher/reader), in the process group of ``leader``."""

    leader: subprocess.Popen[bytes]
    writers: list[Child]
    reader: Child | None

    @property
    def children(self) -> list[Child]:
        return self.writers + ([self.reader] if self.reader is not None else [])


def start_workload(tt: Torture, t: int, cfg: dict[str, Any], tdir: Path, plan: list[str]) -> Workload:
    """1 to ``--max-writers`` writers, some resumed, and sometimes a dispatcher/reader beside them."""
    rng = tt.rng
    leader = subprocess.Popen(["sleep", str(CHILD_LIFETIME_S)], process_group=0)
    pg = leader.pid
    nw = rng.randint(1, tt.args.max_writers)
    dispatch_trial = rng.random() < 0.4
    writers: list[Child] = []
    resumed = 0
    for w in range(nw):
        spec = tt.writer_spec(t * UID_SLOTS + w, cfg, dispatch_trial)
        resumed += int(spec["uid"] != t * UID_SLOTS + w)
        writers.append(tt.spawn("writer", f"w{w}", spec, tdir, pg))
    reader = None
    if dispatch_trial or rng.random() < 0.3:
        reader = tt.spawn(
            "reader",
            "reader",
            {"config": cfg, "seed": rng.randrange(1 << 30), "background": rng.random() < 0.3},
            tdir,
            pg,
        )
    plan.append(
        f"w={nw}"
        + (f"({resumed} resumed)" if resumed else "")
        + f" idem={sum(c.idempotent for c in writers)}"
        + (" reader" if reader else "")
        + (" dispatch=True" if dispatch_trial else "")
    )
    return Workload(leader, writers, reader)


def wait_for_kill_moment(tt: Torture, wl: Workload) -> str:
    """Wait until the moment drawn: during start-up/recovery, after a while, or after some acks."""
    rng, writers = tt.rng, wl.writers
    trigger = rng.choices(["early", "time", "acks"], weights=[2, 5, 3])[0]
    if trigger == "early":  # while a writer starts up, opens or recovers the store
        tt.wait_for(lambda: any(c.has("I") for c in writers), 60)
        time.sleep(rng.uniform(0, 1.5 * tt.est_open))
    elif trigger == "time":
        tt.wait_for(lambda: any(c.has("O") for c in writers) or all(c.proc.poll() is not None for c in writers), 60)
        time.sleep(
            rng.choice([rng.uniform(0, 0.05), rng.uniform(0, 0.5), rng.uniform(0.2, 1.0 if tt.args.small else 2.5)])
        )
    else:
        k = rng.randint(1, 10 if tt.args.small else 40)
        tt.wait_for(
            lambda: (
                sum(sum(1 for ln in c.lines() if ln.startswith("A ")) for c in writers) >= k
                or all(c.proc.poll() is not None for c in writers)
            ),
            60,
        )
    return trigger


def kill_workload(tt: Torture, wl: Workload, trigger: str, at: float, errors: list[str], plan: list[str]) -> None:
    """SIGKILL all, the group, some or one of the writers; survivors finish or are killed later."""
    rng, writers, children = tt.rng, wl.writers, wl.children
    pg = wl.leader.pid
    how = rng.choices(["all", "group", "some", "one"], weights=[3, 3, 2, 2])[0]
    if how == "group":
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pg, signal.SIGKILL)
        for c in children:
            c.killed = c.killed or c.proc.poll() is None
    elif how == "all":
        for c in rng.sample(children, len(children)):
            c.kill()
    else:
        victims = [rng.choice(writers)] if how == "one" else rng.sample(writers, rng.randint(1, len(writers)))
        if wl.reader is not None and rng.random() < 0.5:
            victims.append(wl.reader)
        for c in victims:
            c.kill()
        if rng.random() < 0.4:  # the survivors run to their end and close the store
            tt.wait_for(lambda: all(c.proc.poll() is not None for c in writers), 20 if tt.args.small else 60)
        else:
            time.sleep(rng.uniform(0, 0.5 if tt.args.small else 1.5))
    plan.append(f"kill={how}@{trigger}:{at:.2f}s")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pg, signal.SIGKILL)  # whatever is left (the reader, survivors that did not finish)
    for c in children:
        c.killed = c.killed or c.proc.poll() is None
    for c in [*children]:
        c.proc.wait()
    wl.leader.wait()
    tt.collect(children, errors)


def recovery_kills(tt: Torture, t: int, cfg: dict[str, Any], tdir: Path, errors: list[str], plan: list[str]) -> None:
    """0..3 openers killed during their recovery, some while writers wait to open the store."""
    rng = tt.rng
    nrk = rng.choices([0, 1, 2, 3], weights=[4, 3, 2, 1])[0] if not tt.args.small else rng.choice([0, 1])
    mid = waiters = 0
    for i in range(nrk):
        cut, waiters = _kill_one_recovery(tt, i, t, cfg, tdir, waiters, errors)
        mid += cut
    tt.kills["recoveries"] += nrk
    tt.kills["mid-recovery"] += mid
    if nrk:
        plan.append(f"rec-kills={nrk}(mid {mid}" + (f", {waiters} writers waiting)" if waiters else ")"))


def _kill_one_recovery(
    tt: Torture, i: int, t: int, cfg: dict[str, Any], tdir: Path, waiters: int, errors: list[str]
) -> tuple[int, int]:
    """One opener killed at a random moment of its open: (1 if before the open returned, writers waiting so far)."""
    rng = tt.rng
    c = tt.spawn("recover", f"rec{i}", {"config": cfg}, tdir, None, stdin=True)
    late = []
    if rng.random() < 0.35:  # writers that open while the recovery runs (they wait for its lock)
        for j in range(rng.randint(1, 2)):
            slot = MAX_WRITERS + waiters  # a slot of its own: never another process's uid
            assert slot < CHECKER_SLOT
            spec = dict(tt.writer_spec(t * UID_SLOTS + slot, cfg, False), wait_go=True, batches=rng.randint(2, 40))
            late.append(tt.spawn("writer", f"rec{i}w{j}", spec, tdir, None, stdin=True))
            waiters += 1
    tt.wait_for(lambda: all(x.has("I") or x.proc.poll() is not None for x in [c, *late]), 60)
    delay = rng.uniform(0, 1.3 * tt.est_open)
    tt.go(c)
    time.sleep(rng.uniform(0, min(delay, 0.3 * tt.est_open)))
    for x in late:
        tt.go(x)
    time.sleep(max(0.0, delay - (time.monotonic() - c.go_at)))
    c.kill()
    c.proc.wait()
    cut = 0 if c.has("O") else 1
    if late:  # they go on as openers of a store whose recovery was cut short: kill them later
        tt.wait_for(lambda: all(x.proc.poll() is not None for x in late), rng.uniform(0.05, 1.5))
        for x in late:
            x.kill()
            x.proc.wait()
    tt.collect([c, *late], errors)
    return cut, waiters
