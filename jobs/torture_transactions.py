"""Kill -9 torture of transactional messages: producers commit, roll back and leave transactions to the
check-back while the broker is killed and restarted; then every commit must be delivered once, every
rollback never.

    python jobs/torture_transactions.py [--trials N] [--seed S] [--producers 3] [--run-s 1.0] [--root DIR] [--keep]

A *trial*, on a fresh store root:

1. A broker process (``SYNC_FLUSH``, 1 MiB segments, ``transactionTimeOut=300``,
   ``transactionCheckInterval=200``: open transactions are checked back within a second), topic
   ``TXN`` with 4 queues, registered with a name server process that lives for the whole run.
2. ``--producers`` processes (:class:`rmqnet.client.TransactionProducer`) run transactions one after
   another. Transaction ``seq`` of producer ``p`` has a body made from (seed, p, seq), a decided outcome
   (commit or rollback) and a mode, both drawn from (seed, p, seq): *direct* (the local transaction
   returns the outcome; END_TRANSACTION is retried until the broker answers it) or *check* (the local
   transaction returns UNKNOW; the producer's check listener answers the outcome when the broker asks).
   The ledger (append-only, fsynced): ``T seq`` before the half is sent, ``S seq`` once it was answered
   SEND_OK (it is stored), ``F seq`` when the send failed (it may be stored all the same: a reply cut by
   the kill), ``E seq`` once END_TRANSACTION was answered, ``X seq`` when the broker refused it (an
   answer with an error code: never right, the END names a half the broker stored).
3. Once every producer has ended a transaction, after a random further ``0..--run-s`` s, the broker is
   killed with SIGKILL (during commits, rollbacks and check-backs: all three run at once) and restarted
   on the same root and port. When each producer has ended 2 more, they stop starting transactions but
   keep answering check-backs (and heartbeating, so that a restarted broker finds them). In every
   other trial the broker is killed once more in this phase, when only check-backs run.
4. Settling: the store is opened read-only beside the running broker until no half message is open
   (its transaction has an op record, :mod:`rmqnet.broker.transactions`). Then the producers stop, the
   broker is stopped with SIGTERM (exit 0 expected) and topic ``TXN`` is read from the store. Counted:

   - ``lost``: a commit whose half was answered SEND_OK, not delivered;
   - ``dup``: a body delivered more than once;
   - ``leaked``: a rolled-back transaction's body delivered;
   - ``bad``: a body no producer sent or not byte-exact, an END_TRANSACTION the broker refused (the
     check-back would settle the transaction all the same: without this count a broker refusing every
     direct END passed), open transactions left after 60 s, a broker that does not restart or stop
     cleanly, a producer that fails.

   (A commit whose half send failed may be delivered once or not at all.) One line per trial, then
   ``N trials, L lost, D duplicated, R leaked, B bad``, with the commits and rollbacks whose half was
   answered SEND_OK (what the run proves) apart from those whose half send failed (settled by the
   check-back if stored at all); exit 1 if anything was wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torture_common as tc  # noqa: E402

from rmqnet.remoting.names import (  # noqa: E402
    PROPERTY_TRANSACTION_ID,
    PROPERTY_UNIQ_KEY,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)

TOPIC = "TXN"
QUEUES = 4
HALF_TOPIC, OP_TOPIC = TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
#: transactions each producer must end after the restart before they stop starting new ones
AFTER_RESTART = 2


def decide(seed: int, producer: int, seq: int) -> tuple[bool, bool]:
    """(commit?, via the check-back?) of a transaction."""
    rng = random.Random(f"{seed}:{producer}:{seq}")
    return rng.random() < 0.6, rng.random() < 0.3


def make_body(seed: int, producer: int, seq: int) -> bytes:
    rng = random.Random(f"body:{seed}:{producer}:{seq}")
    return f"tx:{producer}:{seq}:".encode() + rng.randbytes(rng.randrange(8, 2048))


def body_id(body: bytes) -> tuple[int, int] | None:
    parts = body.split(b":", 3)
    if len(parts) < 4 or parts[0] != b"tx" or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return int(parts[1]), int(parts[2])


# ---- the producer child ----------------------------------------------------------------------


def run_producer(spec: dict[str, Any]) -> int:
    """Transactions until stdin says ``stop``; check-backs answered until stdin closes."""
    from rmqnet.client import BrokerError, LocalTransactionState, TransactionProducer
    from rmqnet.client.loop import call

    idx, seed = int(spec["producer"]), int(spec["seed"])
    stop_sending, stop = threading.Event(), threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                stop_sending.set()
        stop_sending.set()
        stop.set()

    def state(commit: bool) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE if commit else LocalTransactionState.ROLLBACK_MESSAGE

    def check(message: dict[str, Any]) -> LocalTransactionState:
        ident = body_id(message["body"])
        if ident is None or ident[0] != idx:
            return LocalTransactionState.UNKNOW
        return state(decide(seed, idx, ident[1])[0])

    threading.Thread(target=watch_stdin, daemon=True).start()
    with tc.LedgerFile(spec["ledger"]) as ledger:
        note = ledger.note
        producer = TransactionProducer(f"TXN_PG_{idx}", spec["namesrv"], check_listener=check, timeout_s=5.0)
        seq = 0
        try:
            while not stop_sending.is_set():
                commit, via_check = decide(seed, idx, seq)
                note(f"T {seq}\n")
                try:
                    sent = call(producer.asend_half(TOPIC, make_body(seed, idx, seq)))
                except Exception:  # the broker is down (the half may be stored all the same: a reply cut)
                    note(f"F {seq}\n")
                    stop_sending.wait(0.1)  # a broker that is down refuses at once: do not spin on it
                    seq += 1
                    continue
                note(f"S {seq}\n")
                local = LocalTransactionState.UNKNOW if via_check else state(commit)
                for _ in range(400):  # END_TRANSACTION until the broker answers it (UNKNOW: oneway, once)
                    try:
                        call(producer.aend_transaction(TOPIC, sent, local))
                        note(f"E {seq}\n")
                        break
                    except BrokerError as exc:
                        print(f"transaction {seq}: END_TRANSACTION refused: {exc}", flush=True)
                        note(f"X {seq}\n")
                        break
                    except Exception:  # noqa: BLE001 - the broker is down: again
                        stop_sending.wait(0.05)
                seq += 1
            while not stop.is_set():  # check-backs only; a restarted broker must learn of us
                with contextlib.suppress(Exception):  # down for a moment: next time
                    producer.heartbeat(TOPIC)
                stop.wait(0.1)
        finally:
            producer.close()
    return 0


# ---- the ledger and the check ------------------------------------------------------------------


@dataclass
class Ledger:
    tried: set[int] = field(default_factory=set)
    sent: set[int] = field(default_factory=set)
    ended: int = 0
    #: END_TRANSACTIONs the broker refused
    refused: set[int] = field(default_factory=set)

    @classmethod
    def read(cls, path: Path) -> Ledger:
        led = cls()
        for line in path.read_text().splitlines() if path.exists() else []:
            f = line.split()
            if len(f) != 2 or not f[1].isdigit():
                continue
            if f[0] == "T":
                led.tried.add(int(f[1]))
            elif f[0] == "S":
                led.sent.add(int(f[1]))
            elif f[0] == "E":
                led.ended += 1
            elif f[0] == "X":
                led.refused.add(int(f[1]))
        return led


@dataclass
class Counts(tc.Problems):
    #: transactions whose half was answered SEND_OK, by decided outcome, and how many of those the
    #: local transaction left to the check-back
    commits: int = 0
    rollbacks: int = 0
    via_check: int = 0
    #: transactions whose half send failed (stored or not: settled by the check-back if stored)
    failed_sends: int = 0
    failed_commits: int = 0
    failed_rollbacks: int = 0
    refused_ends: int = 0
    lost: int = 0
    dup: int = 0
    leaked: int = 0
    bad: int = 0


def check(seed: int, ledgers: list[Ledger], delivered: list[bytes], counts: Counts) -> None:
    seen = Counter(delivered)
    by_id: dict[tuple[int, int], int] = {}
    for body, n in seen.items():
        ident = body_id(body)
        if (
            ident is None
            or ident[0] >= len(ledgers)
            or ident[1] not in ledgers[ident[0]].tried
            or make_body(seed, *ident) != body
        ):
            counts.problem("bad", f"a body no producer sent: {body[:40]!r}")
            continue
        by_id[ident] = n
        if n > 1:
            counts.problem("dup", f"producer {ident[0]} transaction {ident[1]} delivered {n} times")
    for p, led in enumerate(ledgers):
        for seq in sorted(led.tried):
            commit, via_check = decide(seed, p, seq)
            n = by_id.get((p, seq), 0)
            if seq in led.sent:
                counts.commits += commit
                counts.rollbacks += not commit
                counts.via_check += via_check
            else:
                counts.failed_sends += 1
                counts.failed_commits += commit
                counts.failed_rollbacks += not commit
            if seq in led.refused:
                counts.refused_ends += 1
                counts.problem("bad", f"producer {p} transaction {seq}: END_TRANSACTION refused by the broker")
            if commit and seq in led.sent and n == 0:
                counts.problem("lost", f"producer {p} transaction {seq} committed, never delivered")
            if not commit and n:
                counts.problem("leaked", f"producer {p} transaction {seq} rolled back, delivered")


def open_halves(root: Path, conf: Path) -> int:
    """Half messages whose transaction has no op record yet (read-only, beside the running broker)."""
    import pyarrow.compute as pc

    with tc.open_store(root, conf, read_only=True, create=False) as store:
        if HALF_TOPIC not in store.topics():
            return 0
        ended: set[str] = set()
        if OP_TOPIC in store.topics():
            ops = tc.read_whole_queue(store, OP_TOPIC, 0)
            ended = set(pc.map_lookup(ops.column("properties"), PROPERTY_TRANSACTION_ID, "last").to_pylist())
        halves = tc.read_whole_queue(store, HALF_TOPIC, 0)
        keys = set(pc.map_lookup(halves.column("properties"), PROPERTY_UNIQ_KEY, "last").to_pylist())
        return len(keys - ended)


def read_topic(root: Path, conf: Path) -> list[bytes]:
    out: list[bytes] = []
    with tc.open_store(root, conf, read_only=True, create=False) as store:
        for qid in range(QUEUES):
            out += tc.read_whole_queue(store, TOPIC, qid, check_crc=True).column("body").to_pylist()
    return out


# ---- a trial -------------------------------------------------------------------------------------


def _ended(ledgers: list[Path]) -> list[int]:
    return [Ledger.read(p).ended for p in ledgers]


def trial(n: int, args: argparse.Namespace, work: Path, namesrv: str, rng: random.Random) -> Counts:
    counts = Counts()
    root, conf = work / "store", work / "broker.conf"
    work.mkdir(parents=True)
    tc.write_conf(
        conf, "TxnCluster", "txn", "transactionTimeOut=300", "transactionCheckInterval=200", "transactionCheckMax=1000"
    )
    tc.prepare_root(root, conf, TOPIC, QUEUES)
    seed = args.seed * 1000 + n
    broker, addr = tc.start_broker(root, conf, "127.0.0.1:0", namesrv, work / "broker-1.log", "the broker")
    ledgers = [work / f"producer-{i}.ledger" for i in range(args.producers)]
    producers: list[subprocess.Popen[bytes]] = []
    kills = 0
    try:
        for i in range(args.producers):
            spec = {"producer": i, "seed": seed, "ledger": str(ledgers[i]), "namesrv": namesrv}
            producers.append(
                tc.spawn_child(__file__, "producer", spec, work / f"producer-{i}.log", stdin=subprocess.PIPE)
            )
        tc.wait_for(lambda: all(e >= 1 for e in _ended(ledgers)), producers, "a first ended transaction")
        time.sleep(rng.uniform(0.0, args.run_s))
        base = _ended(ledgers)
        broker = tc.kill_restart(broker, root, conf, addr, namesrv, work / "broker-2.log")
        kills += 1
        tc.wait_for(
            lambda: all(e >= b + AFTER_RESTART for e, b in zip(_ended(ledgers), base, strict=True)),
            producers,
            "transactions ended after the restart",
        )
        for p in producers:
            assert p.stdin is not None
            p.stdin.write(b"stop\n")
            p.stdin.flush()
        if n % 2 == 0:  # once more, while only check-backs run
            time.sleep(rng.uniform(0.0, 0.6))
            broker = tc.kill_restart(broker, root, conf, addr, namesrv, work / "broker-3.log")
            kills += 1
        tc.wait_for(lambda: open_halves(root, conf) == 0, producers, "every transaction ended (settling)")
    except RuntimeError as exc:
        counts.problem("bad", str(exc))
    finally:
        for p in producers:
            if p.stdin is not None and not p.stdin.closed:
                p.stdin.close()
    tc.reap(producers, work, counts.problem)
    tc.stop_broker(broker, counts.problem)
    check(seed, [Ledger.read(p) for p in ledgers], read_topic(root, conf), counts)
    print(
        f"trial {n}: {kills} kills, {counts.commits} commits, {counts.rollbacks} rollbacks with a SEND_OK half "
        f"({counts.via_check} of them left to the check-back), "
        f"{counts.failed_sends} half sends failed ({counts.failed_commits} commits, {counts.failed_rollbacks} "
        f"rollbacks), {counts.refused_ends} ENDs refused: {counts.lost} lost, "
        f"{counts.dup} duplicated, {counts.leaked} leaked, {counts.bad} bad",
        flush=True,
    )
    counts.print_problems()
    return counts


def main(argv: list[str] | None = None) -> int:
    tc.run_child(argv, "producer", run_producer)  # a child process ends here
    args = tc.parse_trial_args(
        argv,
        __doc__,
        [("--producers", {"type": int, "default": 3})],
        1.0,
        "the kill comes 0..RUN_S s after every producer ended one",
    )
    total = Counts()

    def summary() -> None:
        print(
            f"{args.trials} trials, {total.lost} lost, {total.dup} duplicated, {total.leaked} leaked, "
            f"{total.bad} bad ({total.commits} commits, {total.rollbacks} rollbacks with a SEND_OK half, "
            f"{total.via_check} of them via check-back; {total.failed_sends} half sends failed: "
            f"{total.failed_commits} commits, {total.failed_rollbacks} rollbacks; {total.refused_ends} ENDs "
            f"refused)",
            flush=True,
        )

    return tc.run_trials(
        args,
        "torture-txn-",
        lambda base: (
            f"torture_transactions: {args.trials} trials, seed {args.seed}, "
            f"{args.producers} producers, SYNC_FLUSH, work directory {base}"
        ),
        trial,
        total,
        lambda c: bool(c.lost or c.dup or c.leaked or c.bad),
        summary,
    )


if __name__ == "__main__":
    sys.exit(main())
