"""What the broker's kill -9 torture jobs share: the processes, the store, the trials and the flags.

``jobs/torture_broker.py``, ``jobs/torture_transactions.py`` and ``jobs/torture_send_back.py`` (and
``jobs/fuzz_broker.py`` for its two servers) import this module from their own directory
(``sys.path`` gets ``jobs/``). Each job keeps what is its own: its messages, its child process, its
ledger, its check, its trial and its report lines; here is only what they all do alike:

- the servers: :func:`start_process` (``python -m rmqnet ...``, ready once its log names the address
  it listens on), :func:`start_broker`, :func:`kill_restart` (SIGKILL, then a restart on the same root
  and address), :func:`stop_broker` (SIGTERM, exit 0 expected);
- the children: :class:`LedgerFile` (what a child notes, fsynced), :func:`pull_queues`,
  :func:`spawn_child` (``python JOB --child KIND SPEC``, run by :func:`run_child`), :func:`wait_for` (a condition,
  failing as soon as a child exits), :func:`reap` (every child's exit status checked);
- the store: :func:`write_conf` (the SYNC_FLUSH broker configuration), :func:`open_store` (with the
  configuration's store settings), :func:`prepare_root`, :func:`read_whole_queue`;
- the run: :class:`Problems` (the counted failures, their first 20 texts, a run's total),
  :func:`run_child` (``--child``), :func:`trial_parser` and :func:`parse_trial_args` (the flags
  every job takes), :func:`run_trials` (the work folder, one name server process, one folder per
  trial, a failing trial's kept, the exit status).

Every wait is bounded by :data:`GUARD_S`: a hang is an error the trial counts, never a stuck job.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

#: seconds to wait for a process to be ready, a producer to progress, a broker to stop (hangs are errors)
GUARD_S = 60.0
#: commitlog segments of 1 MiB, so that segments roll within a trial
SEGMENT = 1 << 20
#: how many problem texts a trial keeps (the counts go on; the first ones say enough)
MAX_PROBLEMS = 20

Proc = subprocess.Popen[bytes]


# ---- the servers ---------------------------------------------------------------------------


def _wait_line(proc: Proc, out: Path, marker: str, what: str) -> str:
    """The first line of ``out`` holding ``marker``, once the process wrote it."""
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        for line in out.read_text(errors="replace").splitlines():
            if marker in line:
                return line
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready: see {out}")
        time.sleep(0.01)
    raise RuntimeError(f"{what} not ready after {GUARD_S} s: see {out}")


def start_process(args: list[str], log: Path, marker: str, what: str) -> tuple[Proc, str]:
    """``python -m rmqnet ARGS`` with its output in ``log``; once a line of it holds ``marker``: the
    process and that line's last word (the address it listens on). ``RuntimeError`` naming ``what``
    if it exits first or is not ready within :data:`GUARD_S`."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rmqnet", *args], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    line = _wait_line(proc, log, marker, what)
    return proc, line.rsplit(" ", 1)[-1].strip()


def start_broker(root: Path, conf: Path, listen: str, namesrv: str, log: Path, what: str) -> tuple[Proc, str]:
    """A broker process on ``root`` with ``conf``, listening on ``listen`` (``127.0.0.1:0``: a free port),
    registered with ``namesrv``: the process and its address, once it is ready."""
    return start_process(
        ["broker", str(root), "-c", str(conf), "--listen", listen, "--namesrv", namesrv], log, "ready at", what
    )


def kill_restart(broker: Proc, root: Path, conf: Path, addr: str, namesrv: str, log: Path) -> Proc:
    """SIGKILL of ``broker``, then a broker on the same root and address (its open recovers the store)."""
    os.kill(broker.pid, signal.SIGKILL)
    broker.wait()
    proc, _ = start_broker(root, conf, addr, namesrv, log, "the restarted broker")
    return proc


def stop_broker(broker: Proc, problem: Callable[[str, str], None]) -> None:
    """SIGTERM of ``broker``; an exit status other than 0, or no exit within :data:`GUARD_S` (then it is
    killed), is a ``bad`` problem."""
    broker.send_signal(signal.SIGTERM)
    _await_exit(
        broker,
        problem,
        lambda code: f"the broker's SIGTERM stop exited with {code}",
        "the broker did not stop on SIGTERM",
    )


def _await_exit(proc: Proc, problem: Callable[[str, str], None], exited: Callable[[int], str], hung: str) -> None:
    """``proc``'s exit, awaited up to :data:`GUARD_S`: a status other than 0 is a ``bad`` problem
    (``exited(status)``); a process still running is killed, reaped, and ``bad`` (``hung``)."""
    try:
        if proc.wait(GUARD_S) != 0:
            problem("bad", exited(proc.returncode))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        problem("bad", hung)


def stop_namesrv(ns: Proc) -> None:
    """SIGTERM of the name server; killed if it has not exited within :data:`GUARD_S`."""
    ns.send_signal(signal.SIGTERM)
    try:
        ns.wait(GUARD_S)
    except subprocess.TimeoutExpired:
        ns.kill()


# ---- the children ----------------------------------------------------------------------------


class LedgerFile:
    """A child's ledger: lines appended (``O_APPEND``), each fsynced unless ``sync=False``, so that a
    line noted before an answer was acted on survives the kill of the child and of the machine's
    cache. A context manager: closed at its end."""

    def __init__(self, path: str | Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def note(self, text: str, *, sync: bool = True) -> None:
        """``text`` (its own newline) appended; then fsynced with ``sync``."""
        os.write(self.fd, text.encode())
        if sync:
            os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> LedgerFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pull_queues(consumer: Any, topic: str, queues: int) -> Iterator[Any]:
    """Every message of ``topic``'s queues 0..``queues``-1 through ``consumer``'s pulls from offset 0
    (32 a pull): each found pull's message table, queue by queue."""
    for qid in range(queues):
        offset = 0
        while True:
            res = consumer.pull(topic, qid, offset, 32)
            if res.status != "FOUND":
                break
            yield res.messages
            offset = res.next_begin_offset


def spawn_child(script: str, kind: str, spec: dict[str, Any], log: Path, *, stdin: int) -> Proc:
    """``python SCRIPT --child KIND SPEC`` (``SPEC``: ``spec`` as JSON), its output in ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, script, "--child", kind, json.dumps(spec)],
            stdin=stdin,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def run_child(argv: list[str] | None, kind: str, run: Callable[[dict[str, Any]], int]) -> None:
    """For ``--child KIND SPEC`` (what :func:`spawn_child` runs; ``argv`` None: ``sys.argv[1:]``):
    ``run(spec)``, then ``SystemExit`` with its exit status (a child process ends here); for a
    child of another kind, ``SystemExit`` naming it. Returns for the parent's argv."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] != ["--child"]:
        return
    if argv[1] != kind:
        raise SystemExit(f"unknown child {argv[1]!r}")
    raise SystemExit(run(json.loads(argv[2])))


def wait_for(
    cond: Callable[[], bool],
    children: Sequence[Proc],
    what: str,
    *,
    name: str = "producer",
    poll_s: float = 0.05,
    exits_ok: bool = False,
) -> None:
    """Until ``cond()`` holds, asked every ``poll_s`` s. ``RuntimeError`` if it does not within
    :data:`GUARD_S`, or if one of ``children`` (a ``name``) exits first (with ``exits_ok``: exits
    other than 0)."""
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        if cond():
            return
        for i, p in enumerate(children):
            if p.poll() is not None and (p.returncode != 0 or not exits_ok):
                raise RuntimeError(f"{name} {i} exited with {p.returncode} waiting for {what}")
        time.sleep(poll_s)
    raise RuntimeError(f"no {what} after {GUARD_S} s")


def reap(
    children: Sequence[Proc],
    work: Path,
    problem: Callable[[str, str], None],
    *,
    name: str = "producer",
    hung: str = "did not stop",
) -> None:
    """Every child's exit, each awaited up to :data:`GUARD_S`: an exit status other than 0 is a ``bad``
    problem naming its log (``WORK/NAME-i.log``), a child still running is killed and ``bad`` too."""
    for i, p in enumerate(children):
        _await_exit(
            p, problem, functools.partial(_child_exited, f"{name} {i}", f"{work}/{name}-{i}.log"), f"{name} {i} {hung}"
        )


def _child_exited(child: str, log: str, code: int) -> str:
    return f"{child} exited with {code}: see {log}"


# ---- the store -------------------------------------------------------------------------------


def write_conf(path: Path, cluster: str, broker: str, *extra: str) -> None:
    """The broker's configuration: cluster and broker name, 127.0.0.1, ``SYNC_FLUSH`` (a 20 s flush
    timeout), :data:`SEGMENT` segments, topics created on demand; then the job's ``extra`` lines."""
    path.write_text(
        "\n".join(
            [
                f"brokerClusterName={cluster}",
                f"brokerName={broker}",
                "brokerIP1=127.0.0.1",
                "flushDiskType=SYNC_FLUSH",
                f"mappedFileSizeCommitLog={SEGMENT}",
                "autoCreateTopicEnable=true",
                "syncFlushTimeout=20000",
                *extra,
                "",
            ]
        )
    )


def open_store(root: Path, conf: Path, **kw: Any) -> Any:
    """``rmqlog.MessageStore.open(root, ...)`` with the store settings of the broker's ``conf`` (``kw``:
    ``read_only=True, create=False`` to read beside a running broker)."""
    import rmqlog
    from rmqnet.broker.config import BrokerConfig

    return rmqlog.MessageStore.open(root, BrokerConfig.from_properties(str(conf)).store, **kw)


def prepare_root(root: Path, conf: Path, topic: str, queues: int) -> None:
    """The store with its topic before the broker's first registration (so routes have it)."""
    with open_store(root, conf) as store:
        store.create_topic(topic, queues)


def read_whole_queue(store: Any, topic: str, qid: int, **kw: Any) -> Any:
    """Every message a queue holds, min to max offset: the table of ``store.read_queue``."""
    return store.read_queue(topic, qid, store.min_offset(topic, qid), store.max_offset(topic, qid), **kw)


# ---- the run ---------------------------------------------------------------------------------


@dataclass
class Problems:
    """A trial's counted failures (the job's ``Counts`` adds one int field per kind) and the texts of
    the first :data:`MAX_PROBLEMS`."""

    problems: list[str] = field(default_factory=list)

    def problem(self, kind: str, text: str) -> None:
        """One more of ``kind`` (a field name), described by ``text``."""
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(f"{kind}: {text}")

    def add(self, other: Problems) -> None:
        """``other``'s counts added to these (a run's total): every int field summed, every
        ``Counter`` field updated; the texts stay each trial's."""
        for f in dataclasses.fields(self):
            if f.name == "problems":
                continue
            mine = getattr(self, f.name)
            if isinstance(mine, Counter):
                mine.update(getattr(other, f.name))
            else:
                setattr(self, f.name, mine + getattr(other, f.name))

    def print_problems(self) -> None:
        """The kept texts, indented under the trial's line."""
        for text in self.problems:
            print(f"  {text}", flush=True)


def trial_parser(
    doc: str | None, own: Sequence[tuple[str, dict[str, Any]]], run_s: float, run_s_help: str
) -> argparse.ArgumentParser:
    """The flags, in this order: ``--trials``, ``--seed``, the job's ``own`` (flag, ``add_argument``
    keywords), ``--run-s``, ``--root``, ``--keep``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    for flag, kw in own:
        ap.add_argument(flag, **kw)
    ap.add_argument("--run-s", type=float, default=run_s, help=run_s_help)
    ap.add_argument("--root", type=Path, default=None, help="work directory (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep every trial's store (failing ones are always kept)")
    return ap


def parse_trial_args(
    argv: list[str] | None, doc: str | None, own: Sequence[tuple[str, dict[str, Any]]], run_s: float, run_s_help: str
) -> argparse.Namespace:
    """The flags of :func:`trial_parser`, parsed from ``argv`` (None: ``sys.argv[1:]``); ``--trials``
    and each of ``own`` must be at least 1, ``--run-s`` not negative (else the usage error, exit 2)."""
    ap = trial_parser(doc, own, run_s, run_s_help)
    args = ap.parse_args(argv)
    counted = ["--trials", *(flag for flag, _ in own)]
    if any(getattr(args, flag[2:].replace("-", "_")) < 1 for flag in counted) or args.run_s < 0:
        names = ", ".join(counted[:-1]) + " and " + counted[-1]
        ap.error(f"{names} must be at least 1, --run-s not negative")
    return args


def _work_dir(args: argparse.Namespace, prefix: str) -> Path:
    """``--root``, or a new temporary folder named ``prefix...``; created."""
    base: Path = args.root or Path(tempfile.mkdtemp(prefix=prefix))
    base.mkdir(parents=True, exist_ok=True)
    return base


P = TypeVar("P", bound=Problems)


def run_trials(
    args: argparse.Namespace,
    prefix: str,
    header: Callable[[Path], str],
    trial: Callable[[int, argparse.Namespace, Path, str, random.Random], P],
    total: P,
    failed: Callable[[P], bool],
    summary: Callable[[], None],
) -> int:
    """A job's run: its work folder (:func:`_work_dir`) named in the ``header`` line; trials
    1..``--trials`` beside one name server process (stopped at the end), trial ``n`` in
    ``BASE/trial-n``, the kill moments drawn from one ``random.Random(--seed)``; each trial's
    counts added to ``total``; a ``failed`` trial's folder kept and printed, another's removed
    unless ``--keep``; then the ``summary`` lines. The exit status (:func:`_finish`)."""
    base = _work_dir(args, prefix)
    print(header(base), flush=True)
    n_failed = _trials(args, base, trial, total, failed)
    summary()
    return _finish(args, base, n_failed)


def _trials(
    args: argparse.Namespace,
    base: Path,
    trial: Callable[[int, argparse.Namespace, Path, str, random.Random], P],
    total: P,
    failed: Callable[[P], bool],
) -> int:
    """The trials of :func:`run_trials`: how many failed."""
    rng = random.Random(args.seed)
    ns, namesrv = start_process(
        ["namesrv", "--listen", "127.0.0.1:0"], base / "namesrv.log", "listening on", "the name server"
    )
    n_failed = 0
    try:
        for n in range(1, args.trials + 1):
            work = base / f"trial-{n}"
            c = trial(n, args, work, namesrv, rng)
            total.add(c)
            if failed(c):
                n_failed += 1
                print(f"  kept: {work}", flush=True)
            elif not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        stop_namesrv(ns)
    return n_failed


def _finish(args: argparse.Namespace, base: Path, n_failed: int) -> int:
    """The exit status (1 if a trial failed); a temporary work folder removed if none did (and no
    ``--keep``)."""
    if not n_failed and not args.keep and args.root is None:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if n_failed else 0
