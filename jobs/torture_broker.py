"""Kill -9 torture of the broker: 4 producers send under SYNC_FLUSH, the broker is killed, restarted, checked.

    python jobs/torture_broker.py [--trials N] [--seed S] [--producers 4] [--run-s 1.5] [--root DIR] [--keep]

A *trial*, on a fresh store root:

1. A broker process (``python -m rmqnet broker ROOT -c broker.conf``: ``flushDiskType=SYNC_FLUSH``,
   1 MiB commitlog segments so segments roll, topic ``TORTURE`` with 4 queues) on 127.0.0.1, registered
   with a name server process that lives for the whole run.
2. ``--producers`` processes (our client, :class:`rmqnet.client.Producer`, synchronous sends, queues
   round robin) send unique bodies. Each writes its ledger (one file per producer, append-only):
   ``T seq try`` before every attempt, and once the broker answered ``SEND_OK``
   ``OK seq try msgId queueId queueOffset``, then ``fsync``.
3. Once every producer has had a ``SEND_OK``, after a random further ``0..--run-s`` seconds, the broker
   is killed with SIGKILL and restarted on the same root and port (the first opener recovers the store).
   The producers retry a failed send with the same body until it is answered, so sends cut by the
   kill land after the restart. When each producer has had 2 more ``SEND_OK`` after the restart, the
   producers are told to stop (their stdin closes) and exit.
4. The check: every queue read through pulls (:class:`rmqnet.client.PullConsumer`, the running broker),
   then the broker stopped with SIGTERM (exit 0 expected), then the store opened read-only with
   ``rmqlog.MessageStore`` and every queue read again. Counted:

   - ``lost``: a ``SEND_OK`` whose message is not, in either read, at the queue offset its answer gave,
     with its body byte-exact, its try number, and the commitlog offset its msgId names;
   - ``dup``: a body stored twice from the same try, or from a try its producer never made (a retry of
     the same body is allowed: every try carries its number in the property ``TORTURE_TRY`` and a
     new ``UNIQ_KEY``, so each stored copy names the attempt it came from; copies from distinct tries
     of a body are counted as ``retry copies``, not as duplicates);
   - ``bad``: a body no producer sent or not byte-exact, the two reads disagreeing, a broker that does
     not restart or stop cleanly, a producer that fails.

Bodies are ``tb:<producer>:<seq>:`` + bytes generated from (seed, producer, seq), 16 B to 8 KiB, so
the checker regenerates each one. One line per trial, then ``N trials, L lost``; exit 1 if anything
was lost, duplicated or bad. ``--child producer SPEC`` is what the parent spawns.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torture_common as tc  # noqa: E402

TOPIC = "TORTURE"
QUEUES = 4
TRY_PROP = "TORTURE_TRY"
#: sends a producer must have answered after the restart before the producers are stopped
AFTER_RESTART = 2


# ---- the messages ------------------------------------------------------------------------


def make_body(seed: int, producer: int, seq: int) -> bytes:
    """The body of message ``seq`` of ``producer``: its id, then 16 B..8 KiB from (seed, producer, seq)."""
    rng = random.Random(f"{seed}:{producer}:{seq}")
    size = rng.randint(16, 512) if rng.random() < 0.9 else rng.randint(513, 8192)
    return f"tb:{producer}:{seq}:".encode() + rng.randbytes(size)


def body_id(body: bytes) -> tuple[int, int] | None:
    """(producer, seq) of a torture body, None if it is not one."""
    parts = body.split(b":", 3)
    if len(parts) < 4 or parts[0] != b"tb":
        return None
    try:
        return int(parts[1]), int(parts[2])
    except ValueError:
        return None


# ---- a producer process --------------------------------------------------------------------


def run_producer(spec: dict[str, Any]) -> int:
    """Send until stdin closes; every try noted, every SEND_OK noted and fsynced (module docstring)."""
    from rmqnet.client import Producer

    idx, seed = int(spec["producer"]), int(spec["seed"])
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()  # returns at EOF: the parent closed our stdin
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    with tc.LedgerFile(spec["ledger"]) as ledger:
        producer = Producer(f"TORTURE_PG_{idx}", spec["namesrv"], timeout_s=float(spec["timeout_s"]))
        seq = 0
        try:
            while not stop.is_set():
                body = make_body(seed, idx, seq)
                attempt = 0
                while not stop.is_set():
                    attempt += 1
                    ledger.note(f"T {seq} {attempt}\n", sync=False)
                    try:
                        res = producer.send(TOPIC, body, properties={TRY_PROP: str(attempt)})
                    except Exception as exc:  # the broker is down or restarting: retry the same body
                        ledger.note(f"E {seq} {attempt} {type(exc).__name__}\n", sync=False)
                        stop.wait(0.02)  # a broker that is down refuses at once: do not spin on it
                        continue
                    tag = "OK" if res.status == "SEND_OK" else "ST"  # ST: stored, flush late (not counted)
                    ledger.note(f"{tag} {seq} {attempt} {res.offset_msg_id} {res.queue_id} {res.queue_offset}\n")
                    break
                seq += 1
        finally:
            producer.close()
    return 0


@dataclass
class Ledger:
    """What one producer noted: its tries per seq, its SEND_OKs."""

    tries: dict[int, int] = field(default_factory=dict)
    oks: list[tuple[int, int, str, int, int]] = field(default_factory=list)  # seq, try, msgId, qid, qoff
    errors: int = 0

    @classmethod
    def read(cls, path: Path) -> Ledger:
        led = cls()
        for line in path.read_text().splitlines():
            f = line.split()
            if not f:
                continue
            if f[0] == "T" and len(f) == 3:
                led.tries[int(f[1])] = max(led.tries.get(int(f[1]), 0), int(f[2]))
            elif f[0] == "OK" and len(f) == 6:
                led.oks.append((int(f[1]), int(f[2]), f[3], int(f[4]), int(f[5])))
            elif f[0] == "E":
                led.errors += 1
        return led


def count_oks(path: Path) -> int:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    return data.count(b"\nOK ") + data.startswith(b"OK ")


# ---- reading the store back -----------------------------------------------------------------

Stored = dict[tuple[int, int], tuple[bytes, int, int]]  # (qid, qoff) -> (body, commitlog offset, try)


def _collect(table: Any, into: Stored) -> None:
    cols = table.select(["queueId", "queueOffset", "body", "commitLogOffset", "properties"]).to_pydict()
    for qid, qoff, body, phys, props in zip(
        cols["queueId"], cols["queueOffset"], cols["body"], cols["commitLogOffset"], cols["properties"], strict=True
    ):
        attempt = dict(props or []).get(TRY_PROP, "0")
        into[(int(qid), int(qoff))] = (bytes(body), int(phys), int(attempt) if attempt.isdigit() else -1)


def read_by_pull(namesrv: str) -> Stored:
    from rmqnet.client import PullConsumer

    out: Stored = {}
    with PullConsumer("TORTURE_CHECK", namesrv, timeout_s=30.0) as consumer:
        for messages in tc.pull_queues(consumer, TOPIC, QUEUES):
            _collect(messages, out)
    return out


def read_direct(root: Path, conf: Path) -> tuple[Stored, list[str]]:
    out: Stored = {}
    with tc.open_store(root, conf, read_only=True, create=False) as store:
        for qid in range(QUEUES):
            _collect(tc.read_whole_queue(store, TOPIC, qid, check_crc=True), out)
    return out, []


# ---- the check -------------------------------------------------------------------------------


@dataclass
class Counts(tc.Problems):
    ok: int = 0
    lost: int = 0
    dup: int = 0
    bad: int = 0
    retried: int = 0
    retry_copies: int = 0


def check(seed: int, ledgers: list[Ledger], pulled: Stored, direct: Stored, counts: Counts) -> None:
    from rmqnet.client import parse_offset_msg_id

    for key in sorted(set(pulled) ^ set(direct)):
        counts.problem("bad", f"queue {key[0]} offset {key[1]} in only one of the pull and the direct read")
    for key in sorted(set(pulled) & set(direct)):
        if pulled[key] != direct[key]:
            counts.problem("bad", f"queue {key[0]} offset {key[1]}: the pull and the direct read differ")
    for idx, led in enumerate(ledgers):
        counts.retried += sum(1 for n in led.tries.values() if n > 1)
        for seq, attempt, msg_id, qid, qoff in led.oks:
            counts.ok += 1
            want = make_body(seed, idx, seq)
            try:
                phys = parse_offset_msg_id(msg_id)[1]
            except ValueError:
                phys = -1
            for name, view in (("pull", pulled), ("store", direct)):
                got = view.get((qid, qoff))
                if got is None:
                    counts.problem(
                        "lost", f"producer {idx} seq {seq} try {attempt}: nothing at queue {qid} offset {qoff} ({name})"
                    )
                elif got != (want, phys, attempt):
                    counts.problem(
                        "lost",
                        f"producer {idx} seq {seq} try {attempt}: queue {qid} offset {qoff} holds "
                        f"{got[0][:24]!r} try {got[2]} at {got[1]}, the answer said {phys} ({name})",
                    )
                else:
                    continue
                break
    copies: dict[tuple[int, int], list[int]] = defaultdict(list)
    for (qid, qoff), (body, _phys, attempt) in sorted(direct.items()):
        ident = body_id(body)
        if ident is None or not 0 <= ident[0] < len(ledgers) or body != make_body(seed, *ident):
            counts.problem("bad", f"queue {qid} offset {qoff}: a body no producer sent ({body[:24]!r})")
            continue
        copies[ident].append(attempt)
    for (idx, seq), tries in copies.items():
        made = ledgers[idx].tries.get(seq, 0)
        if len(set(tries)) != len(tries) or any(not 1 <= a <= made for a in tries):
            counts.problem("dup", f"producer {idx} seq {seq}: stored from tries {sorted(tries)}, tried {made} times")
        counts.retry_copies += len(tries) - 1


# ---- a trial ---------------------------------------------------------------------------------


def trial(n: int, args: argparse.Namespace, work: Path, namesrv: str, rng: random.Random) -> Counts:
    counts = Counts()
    root, conf = work / "store", work / "broker.conf"
    work.mkdir(parents=True)
    tc.write_conf(conf, "TortureCluster", "torture")
    tc.prepare_root(root, conf, TOPIC, QUEUES)
    seed = args.seed * 1000 + n
    broker, addr = tc.start_broker(root, conf, "127.0.0.1:0", namesrv, work / "broker-1.log", "the broker")
    producers: list[subprocess.Popen[bytes]] = []
    ledgers = [work / f"producer-{i}.ledger" for i in range(args.producers)]
    try:
        for i in range(args.producers):
            spec = {"producer": i, "seed": seed, "ledger": str(ledgers[i]), "namesrv": namesrv, "timeout_s": 30.0}
            producers.append(
                tc.spawn_child(__file__, "producer", spec, work / f"producer-{i}.log", stdin=subprocess.PIPE)
            )
        _wait_progress(producers, ledgers, [0] * len(ledgers), 1, "the first SEND_OK")
        time.sleep(rng.uniform(0.0, args.run_s))  # the random moment of the kill
        os.kill(broker.pid, signal.SIGKILL)
        broker.wait()
        killed_at = [count_oks(p) for p in ledgers]
        t0 = time.monotonic()
        broker, _ = tc.start_broker(root, conf, addr, namesrv, work / "broker-2.log", "the restarted broker")
        recovery_s = time.monotonic() - t0
        _wait_progress(producers, ledgers, killed_at, AFTER_RESTART, "SEND_OKs after the restart")
    except RuntimeError as exc:
        counts.problem("bad", str(exc))
        _stop_all(producers, broker)
        return counts
    finally:
        for p in producers:
            if p.stdin is not None:
                p.stdin.close()
    tc.reap(producers, work, counts.problem)
    pulled = read_by_pull(namesrv)
    tc.stop_broker(broker, counts.problem)
    direct, _ = read_direct(root, conf)
    check(seed, [Ledger.read(p) for p in ledgers], pulled, direct, counts)
    after = sum(count_oks(p) for p in ledgers) - sum(killed_at)
    print(
        f"trial {n}: {counts.ok} SEND_OK ({after} after the restart), killed {sum(killed_at)} answered in, "
        f"recovery+start {recovery_s:.2f} s, {counts.retried} sends retried, {counts.retry_copies} retry copies "
        f"stored: {counts.lost} lost, {counts.dup} duplicated, {counts.bad} bad",
        flush=True,
    )
    counts.print_problems()
    return counts


def _wait_progress(
    producers: list[subprocess.Popen[bytes]], ledgers: list[Path], base: list[int], more: int, what: str
) -> None:
    tc.wait_for(
        lambda: all(count_oks(p) >= b + more for p, b in zip(ledgers, base, strict=True)), producers, what, poll_s=0.01
    )


def _stop_all(producers: list[subprocess.Popen[bytes]], broker: subprocess.Popen[bytes]) -> None:
    for p in [*producers, broker]:
        if p.poll() is None:
            p.kill()
            p.wait()


def main(argv: list[str] | None = None) -> int:
    tc.run_child(argv, "producer", run_producer)  # a child process ends here
    args = tc.parse_trial_args(
        argv,
        __doc__,
        [("--producers", {"type": int, "default": 4})],
        1.5,
        "the kill comes 0..RUN_S s after every producer sent",
    )
    total = Counts()

    def summary() -> None:
        print(
            f"{args.trials} trials, {total.lost} lost ({total.ok} SEND_OK checked, {total.dup} duplicated, "
            f"{total.bad} bad, {total.retried} retried sends, {total.retry_copies} retry copies)",
            flush=True,
        )

    return tc.run_trials(
        args,
        "torture-broker-",
        lambda base: (
            f"torture_broker: {args.trials} trials, seed {args.seed}, {args.producers} "
            f"producers, SYNC_FLUSH, work directory {base}"
        ),
        trial,
        total,
        lambda c: bool(c.lost or c.dup or c.bad),
        summary,
    )


if __name__ == "__main__":
    sys.exit(main())
