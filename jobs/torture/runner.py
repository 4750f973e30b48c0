"""The parent: stores that live for several trials, the children it spawns, a trial's phases, the counts.

A trial runs against one store, which lives on for 2..``--trials-per-store`` trials (so it
accumulates crashes) before a fresh one is started: the workload is started and killed
(:mod:`faults`), openers are killed during recovery, then a checker process recovers and
checks the store (:mod:`checker`) and closes it, or kills itself with the store open (so the
next trial's writers recover it). A failing store is kept and its path printed; the others
are deleted unless ``--keep``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rmqlog

from . import faults
from .messages import CHECKER_SLOT, TOPIC_QUEUES, TOPICS, UID_SLOTS, store_config
from .workload import CHILD_LIFETIME_S

#: the children run the package itself: ``python jobs/torture --child ROLE SPEC``
PACKAGE_DIR = Path(__file__).resolve().parent


@dataclass
class Child:
    role: str
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    err: Path
    uid: int = -1
    idempotent: bool = False
    start_seq: int = 0
    killed: bool = False
    go_at: float = 0.0

    def lines(self) -> list[str]:
        try:
            return self.log.read_text().splitlines()
        except FileNotFoundError:
            return []

    def has(self, tag: str) -> bool:
        return any(line.split(" ", 1)[0] == tag for line in self.lines())

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
            self.killed = True


@dataclass
class StoreRun:
    """One store and its ledger, living on for several trials."""

    index: int
    dir: Path
    config: dict[str, Any]
    trials_left: int
    trials: int = 0
    acked_total: int = 0
    #: idempotent writers killed mid-way: uid -> the sequence to resume from (replaying it)
    resumable: dict[int, int] = field(default_factory=dict)
    issued: set[int] = field(default_factory=set)  # writer uids handed out

    @property
    def root(self) -> Path:
        return self.dir / "store"

    @property
    def acks(self) -> Path:
        return self.dir / "acks"


@dataclass
class Totals:
    trials: int = 0
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    torn: int = 0
    verify: int = 0
    errors: int = 0

    def add(self, other: Totals) -> None:
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(other, k))

    def line(self) -> str:
        return (
            f"trials={self.trials} acknowledged={self.acknowledged} lost={self.lost} duplicated={self.duplicated} "
            f"torn={self.torn} verify_problems={self.verify} errors={self.errors}"
        )

    @property
    def failed(self) -> bool:
        return bool(self.lost or self.duplicated or self.torn or self.verify or self.errors)


KiB, MiB = 1 << 10, 1 << 20


class Torture:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.rng = random.Random(args.seed)
        self.store: StoreRun | None = None
        self.stores = 0
        self.per_mode: dict[str, Totals] = {}
        self.total = Totals()
        self.kills = Counter[str]()
        self.est_open = 0.05  # seconds an open (with recovery) takes: kill moments are drawn from it
        self.failed_stores: list[Path] = []

    # -------------------------------------------------------------- stores
    def new_store(self) -> StoreRun:
        rng = self.rng
        self.stores += 1
        if self.args.small:
            seg = rng.choice([64 * KiB, 128 * KiB, 256 * KiB])
        else:
            seg = rng.choices([64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 1 << 30], weights=[4, 3, 2, 2, 1])[0]
        cq = rng.choice([20 * 64, 20 * 1000, 300_000 * 20])
        config = {
            "mapped_file_size_commit_log": seg,
            "mapped_file_size_consume_queue": cq,
            "flush_interval_commit_log": rng.choice([5, 50, 500]),
            "flush_commit_log_least_pages": rng.choice([1, 4]),
        }
        d = self.root / f"store-{self.stores:04d}"
        run = StoreRun(self.stores, d, config, trials_left=rng.randint(2, self.args.trials_per_store))
        run.acks.mkdir(parents=True)
        with rmqlog.MessageStore.open(run.root, store_config(config)) as s:
            s.create_topic(TOPICS[2], TOPIC_QUEUES[2])
        return run

    def retire_store(self, failed: bool) -> None:
        assert self.store is not None
        if failed:
            self.failed_stores.append(self.store.dir)
        elif not self.args.keep:
            shutil.rmtree(self.store.dir, ignore_errors=True)
        self.store = None

    # -------------------------------------------------------------- children
    def spawn(
        self, role: str, name: str, spec: dict[str, Any], tdir: Path, group: int | None, stdin: bool = False
    ) -> Child:
        assert self.store is not None
        log = self.store.acks / f"{tdir.name}-{name}.log"
        err = tdir / f"{name}.err"
        spec = dict(spec, log=str(log), root=str(self.store.root), run_seed=self.args.seed, small=self.args.small)
        with open(err, "wb") as ef:
            proc = subprocess.Popen(
                [sys.executable, str(PACKAGE_DIR), "--child", role, json.dumps(spec)],
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=ef,
                process_group=group,
            )
        return Child(
            role,
            name,
            proc,
            log,
            err,
            uid=spec.get("uid", -1),
            idempotent=spec.get("idempotent", False),
            start_seq=spec.get("start_seq", 0),
        )

    @staticmethod
    def wait_for(pred: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.002)
        return bool(pred())

    def writer_spec(self, uid: int, cfg: dict[str, Any], dispatch_trial: bool) -> dict[str, Any]:
        """A new writer ``uid``, or (sometimes) an idempotent writer killed earlier, resumed."""
        assert self.store is not None
        rng, run = self.rng, self.store
        if run.resumable and rng.random() < 0.5:
            uid = rng.choice(sorted(run.resumable))
            start_seq, idem = run.resumable.pop(uid), True
        else:
            start_seq, idem = 0, rng.random() < 0.5
            # a uid is issued once: only resuming an idempotent writer writes as an earlier one
            assert uid not in run.issued, f"harness: writer uid {uid} issued twice"
            run.issued.add(uid)
        return {
            "config": cfg,
            "uid": uid,
            "seed": rng.randrange(1 << 30),
            "start_seq": start_seq,
            "idempotent": idem,
            "batches": rng.randint(2, 30 if self.args.small else 300),
            "replay_p": rng.choice([0.0, 0.1, 0.3]),
            "dispatch_p": rng.choice([0.3, 1.0]) if dispatch_trial else 0.0,
        }

    @staticmethod
    def go(c: Child) -> None:
        """Send the go byte to a child waiting on its stdin."""
        assert c.proc.stdin is not None
        c.go_at = time.monotonic()
        with contextlib.suppress(BrokenPipeError):
            c.proc.stdin.write(b"g")
            c.proc.stdin.flush()

    def collect(self, children: list[Child], errors: list[str]) -> None:
        """After the children exited: count kills, note failures, learn open times, keep resumable writers."""
        assert self.store is not None
        for c in children:
            rc_ = c.proc.returncode
            if rc_ == -signal.SIGKILL:
                self.kills[c.role] += 1
            elif rc_ != 0:
                errors.append(f"{c.name} exited with {rc_}: {c.err.read_text()[-3000:]}")
            for line in c.lines():
                parts = line.split()
                if parts[0] == "O" and len(parts) == 3 and parts[2] == "1":  # it opened first: it recovered
                    self.est_open = 0.8 * self.est_open + 0.2 * float(parts[1])
            if c.role == "writer" and c.idempotent and not c.has("C"):  # resumed later, replaying its last batch
                begun = [int(ln.split()[2]) for ln in c.lines() if ln.startswith("B ")]
                self.store.resumable[c.uid] = max(begun) if begun else c.start_seq

    # -------------------------------------------------------------- one trial

    # -------------------------------------------------------------- one trial
    def trial(self, t: int, mode: str) -> Totals:
        """The workload killed, openers killed during recovery, the check; the trial's counts."""
        if self.store is None:
            self.store = self.new_store()
        tdir = self.store.dir / "trials" / f"t{t:05d}"
        tdir.mkdir(parents=True)
        cfg = dict(self.store.config, flush_disk_type=mode)
        t_start = time.monotonic()
        errors: list[str] = []
        plan: list[str] = []
        wl = faults.start_workload(self, t, cfg, tdir, plan)
        trigger = faults.wait_for_kill_moment(self, wl)
        faults.kill_workload(self, wl, trigger, time.monotonic() - t_start, errors, plan)
        faults.recovery_kills(self, t, cfg, tdir, errors, plan)
        t_check = time.monotonic()
        result = self.check(t, cfg, tdir, errors, plan)
        t_check = time.monotonic() - t_check
        return self.count(t, mode, tdir, result, errors, plan, t_check, t_start)

    def check(self, t: int, cfg: dict[str, Any], tdir: Path, errors: list[str], plan: list[str]) -> dict[str, Any]:
        """Run the checker process (it closes the store after, or sometimes dies with it open)."""
        assert self.store is not None
        run = self.store
        crash_after = self.rng.random() < 0.4
        out = tdir / "check.json"
        spec = {
            "config": cfg,
            "acks": str(run.acks),
            "cache": str(run.dir / "walk-cache.pkl"),
            "out": str(out),
            "seed": self.rng.randrange(1 << 30),
            "crash_after": crash_after,
            "uid": t * UID_SLOTS + CHECKER_SLOT,
            "trial": t,
        }
        c = self.spawn("check", "check", spec, tdir, None)
        try:
            c.proc.wait(timeout=CHILD_LIFETIME_S)
        except subprocess.TimeoutExpired:
            c.kill()
            c.proc.wait()
        if crash_after:
            plan.append("check-then-kill")
        if c.proc.returncode not in ((0, -signal.SIGKILL) if crash_after else (0,)) or not out.exists():
            errors.append(f"checker exited with {c.proc.returncode}: {c.err.read_text()[-3000:]}")
            return {
                "lost": 0,
                "duplicated": 0,
                "torn": 0,
                "verify": 0,
                "errors": [],
                "details": [],
                "acked_total": run.acked_total,
            }
        result: dict[str, Any] = json.loads(out.read_text())
        return result

    def count(
        self,
        t: int,
        mode: str,
        tdir: Path,
        result: dict[str, Any],
        errors: list[str],
        plan: list[str],
        t_check: float,
        t_start: float,
    ) -> Totals:
        """The trial's counts, its line, and the store kept (failed), retired or kept for the next trial."""
        assert self.store is not None
        run = self.store
        tot = Totals(
            trials=1,
            acknowledged=result["acked_total"] - run.acked_total,
            lost=result["lost"],
            duplicated=result["duplicated"],
            torn=result["torn"],
            verify=result["verify"],
            errors=len(errors) + len(result["errors"]),
        )
        run.acked_total = result["acked_total"]
        run.trials += 1
        run.trials_left -= 1
        rec = result.get("recovery") or {}
        print(
            f"trial {t:4d} {mode.split('_')[0]:5s} store {run.index}.{run.trials} "
            f"seg={run.config['mapped_file_size_commit_log'] // KiB}K {' '.join(plan)} | "
            f"acked +{tot.acknowledged} (store {run.acked_total}) records {result.get('records', '?')} "
            f"lost {tot.lost} dup {tot.duplicated} torn {tot.torn} verify {tot.verify} errors {tot.errors} | "
            f"recovery {'abnormal' if rec.get('abnormal') else 'normal'} {rec.get('seconds', '?')}s | "
            f"check {t_check:.1f}s, trial {time.monotonic() - t_start:.1f}s",
            flush=True,
        )
        if tot.failed:
            for msg in (errors + result["errors"] + result["details"])[:40]:
                print("    " + msg.replace("\n", "\n    "), flush=True)
            print(f"    FAILED: store kept at {run.dir} (store root {run.root}, ledger {run.acks})", flush=True)
            self.retire_store(failed=True)
        else:
            shutil.rmtree(tdir, ignore_errors=True)
            segments = len(list((run.root / "commitlog").glob("[0-9]" * 20)))
            if (
                run.trials_left <= 0
                or result.get("records", 0) > (300_000 if not self.args.small else 50_000)
                or segments > 300
            ):
                self.retire_store(failed=False)
        return tot

    def run(self) -> int:
        modes = {
            "sync": [rmqlog.SYNC_FLUSH],
            "async": [rmqlog.ASYNC_FLUSH],
            "both": [rmqlog.SYNC_FLUSH, rmqlog.ASYNC_FLUSH],
        }[self.args.flush]
        t0 = time.monotonic()
        for t in range(self.args.trials):
            mode = modes[t % len(modes)]
            tot = self.trial(t, mode)
            self.per_mode.setdefault(mode, Totals()).add(tot)
            self.total.add(tot)
            if len(self.failed_stores) >= self.args.max_failed_stores:
                print(f"stopping: {len(self.failed_stores)} failing stores kept", flush=True)
                break
        if self.store is not None:
            self.retire_store(failed=False)
        for mode, tot in self.per_mode.items():
            print(f"torture {mode}: {tot.line()}")
        print(
            f"torture total: {self.total.line()} | kills: writers {self.kills['writer']}, "
            f"readers {self.kills['reader']}, recoveries {self.kills['recoveries']} "
            f"({self.kills['mid-recovery']} before the open returned); stores {self.stores}; "
            f"{time.monotonic() - t0:.0f}s"
        )
        for d in self.failed_stores:
            print(f"failing store kept: {d}")
        return 1 if self.total.failed else 0
