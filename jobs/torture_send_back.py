"""Kill -9 torture of retries and dead letters: consumers send messages back (CONSUMER_SEND_MSG_BACK, 36)
while the broker is killed and restarted; then every answered send-back must be in ``%RETRY%<group>``
(delivered after its delay) or ``%DLQ%<group>`` once, with the right properties.

    python jobs/torture_send_back.py [--trials N] [--seed S] [--workers 3] [--messages 90] [--run-s 1.0]
                                     [--root DIR] [--keep]

A *trial*, on a fresh store root:

1. A broker process (``SYNC_FLUSH``, 1 MiB segments, ``messageDelayLevel=1s 1s 2s 1s 1s``: every retry
   is due within 2 s), topic ``RT`` with 4 queues, registered with a name server process that lives
   for the whole run. ``--messages`` messages per worker are sent to ``RT`` (answered SEND_OK before
   anything else starts); message ``i``'s body is made from (seed, i).
2. ``--workers`` processes (:class:`rmqnet.client.PullConsumer` of group ``RT_CG``) pull ``RT`` and send
   back their messages (``i % workers``), up to 4 in flight, one started every 20 ms. Message ``i``'s
   *mode* is drawn from (seed, i): *retry* (``delayLevel`` 0..3, ``maxReconsumeTimes`` 16 or 3: stored
   through ``SCHEDULE_TOPIC_XXXX``, delivered to ``%RETRY%RT_CG``), *max* (``maxReconsumeTimes`` 0: its
   ``reconsumeTimes`` 0 has reached it, ``%DLQ%RT_CG``) or *negative* (``delayLevel`` -1 or -2,
   ``%DLQ%RT_CG``). A send-back that fails (the broker is down, the reply was cut) is tried again until
   the broker answers it, as a consumer's retry would. The ledger (append-only, fsynced): ``T i try``
   before a try, ``S i try`` once it was answered SUCCESS, ``F i try`` when it failed (it may be stored
   all the same: a reply cut by the kill), ``X i try code`` when the broker refused it.
3. Once every worker had a send-back answered, after a random further ``0..--run-s`` s, the broker is
   killed with SIGKILL and restarted on the same root and port. In every other trial it is killed once
   more after the workers ended, 0..2 s later, while the scheduler delivers the retries.
4. Settling: the store is opened read-only beside the running broker until the scheduler delivered
   every ``SCHEDULE_TOPIC_XXXX`` message (``delayOffset.json`` at each level's end). The broker is
   stopped with SIGTERM (exit 0 expected) and ``RT``, ``%RETRY%RT_CG`` and ``%DLQ%RT_CG`` are read
   from the store. Counted per message:

   - ``lost``: a send-back answered SUCCESS with no copy in its topic;
   - ``dup``: more copies than tries (an answered send-back tried once stored twice, or a scheduled
     retry delivered twice);
   - ``retry copies`` (reported, not a failure: RocketMQ's send-back is at-least-once for a request
     left unanswered): copies beyond the first of a message whose send-back was tried more than once,
     at most one per try;
   - ``bad``: a copy in the other topic (a retry in the DLQ or the reverse), a copy whose body is not
     byte-exact or whose ``RETRY_TOPIC`` (``RT``), ``ORIGIN_MESSAGE_ID`` (the original's offset msgId)
     or ``reconsumeTimes`` (1) is wrong, a send-back refused, a message no worker answered, undelivered
     retries after 60 s, a broker that does not restart or stop cleanly, a worker that fails.

   One line per trial; then one line per mode and ``N trials, L lost, D duplicated, B bad``; exit 1 if
   anything was wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torture_common as tc  # noqa: E402

from rmqnet.remoting.names import SCHEDULE_TOPIC, dlq_topic, retry_topic  # noqa: E402

TOPIC = "RT"
QUEUES = 4
GROUP = "RT_CG"
RETRY, DLQ = retry_topic(GROUP), dlq_topic(GROUP)
SCHEDULE = SCHEDULE_TOPIC
DELAY_LEVELS = "1s 1s 2s 1s 1s"
MODES = ("retry", "max", "negative")
WINDOW = 4
PACE_S = 0.02
MAX_TRIES = 600


@dataclass(frozen=True)
class Plan:
    mode: str
    delay_level: int
    max_reconsume: int | None

    @property
    def topic(self) -> str:
        return RETRY if self.mode == "retry" else DLQ


def decide(seed: int, i: int) -> Plan:
    """What message ``i``'s send-back asks, and so where its copy must land."""
    rng = random.Random(f"{seed}:{i}")
    r = rng.random()
    if r < 0.5:
        return Plan("retry", rng.choice([0, 1, 2, 3]), rng.choice([None, 3]))
    if r < 0.75:
        return Plan("max", rng.choice([0, 1, 2]), 0)
    return Plan("negative", rng.choice([-1, -2]), rng.choice([None, 16]))


def make_body(seed: int, i: int) -> bytes:
    rng = random.Random(f"body:{seed}:{i}")
    return f"rb:{i}:".encode() + rng.randbytes(rng.randrange(8, 1024))


def body_id(body: bytes) -> int | None:
    parts = body.split(b":", 2)
    if len(parts) < 3 or parts[0] != b"rb" or not parts[1].isdigit():
        return None
    return int(parts[1])


# ---- the worker child ------------------------------------------------------------------------


def run_worker(spec: dict[str, Any]) -> int:
    """Pull ``RT``, send back this worker's messages, each until it is answered."""
    from rmqnet.client import BrokerError, PullConsumer
    from rmqnet.client.loop import call

    idx, seed, workers, total = int(spec["worker"]), int(spec["seed"]), int(spec["workers"]), int(spec["total"])
    with tc.LedgerFile(spec["ledger"]) as ledger:
        note = ledger.note
        consumer = PullConsumer(GROUP, spec["namesrv"], timeout_s=3.0)
        try:
            mine: dict[int, dict[str, Any]] = {}
            for messages in tc.pull_queues(consumer, TOPIC, QUEUES):
                for row in messages.to_pylist():
                    i = body_id(row["body"])
                    if i is not None and i % workers == idx:
                        mine[i] = row
            expected = {i for i in range(total) if i % workers == idx}
            if set(mine) != expected:
                print(f"worker {idx}: pulled {len(mine)} of its {len(expected)} messages", flush=True)
                return 1

            async def one(i: int, row: dict[str, Any], window: asyncio.Semaphore) -> None:
                plan = decide(seed, i)
                try:
                    for attempt in range(1, MAX_TRIES + 1):
                        note(f"T {i} {attempt}\n")
                        try:
                            await consumer.asend_back(row, plan.delay_level, max_reconsume_times=plan.max_reconsume)
                        except BrokerError as exc:
                            note(f"X {i} {attempt} {exc.code}\n")
                            print(f"message {i} try {attempt}: refused: {exc}", flush=True)
                            await asyncio.sleep(0.1)
                            continue
                        except Exception:  # noqa: BLE001 - the broker is down or the reply was cut: again
                            note(f"F {i} {attempt}\n")
                            await asyncio.sleep(0.1)
                            continue
                        note(f"S {i} {attempt}\n")
                        return
                finally:
                    window.release()

            async def run() -> None:
                window = asyncio.Semaphore(WINDOW)
                tasks = []
                for i in sorted(mine):
                    await window.acquire()
                    tasks.append(asyncio.ensure_future(one(i, mine[i], window)))
                    await asyncio.sleep(PACE_S)
                await asyncio.gather(*tasks)

            call(run())
        finally:
            consumer.close()
    return 0


# ---- the ledger and the check ------------------------------------------------------------------


@dataclass
class Ledger:
    tries: Counter[int] = field(default_factory=Counter)
    answered: set[int] = field(default_factory=set)
    refused: int = 0

    @classmethod
    def read(cls, path: Path) -> Ledger:
        led = cls()
        for line in path.read_text().splitlines() if path.exists() else []:
            f = line.split()
            if len(f) < 3 or not f[1].isdigit():
                continue
            if f[0] == "T":
                led.tries[int(f[1])] += 1
            elif f[0] == "S":
                led.answered.add(int(f[1]))
            elif f[0] == "X":
                led.refused += 1
        return led

    def merge(self, other: Ledger) -> None:
        self.tries.update(other.tries)
        self.answered |= other.answered
        self.refused += other.refused


@dataclass
class Counts(tc.Problems):
    answered: Counter[str] = field(default_factory=Counter)  # per mode
    retried: Counter[str] = field(default_factory=Counter)  # send-backs tried more than once, per mode
    retry_copies: Counter[str] = field(default_factory=Counter)
    lost: int = 0
    dup: int = 0
    bad: int = 0
    kills: int = 0


#: a stored copy: (body, properties, reconsumeTimes)
Copy = tuple[bytes, dict[str, str], int]


def check(
    seed: int, total: int, origin_ids: dict[int, str], led: Ledger, stored: dict[str, list[Copy]], counts: Counts
) -> None:
    """Count what ``stored`` (``%RETRY%`` and ``%DLQ%`` copies) says of the send-backs in ``led``."""
    copies: dict[str, Counter[int]] = {RETRY: Counter(), DLQ: Counter()}
    for topic, rows in stored.items():
        for body, props, reconsume in rows:
            i = body_id(body)
            if i is None or not 0 <= i < total or make_body(seed, i) != body:
                counts.problem("bad", f"{topic}: a body no one sent: {body[:40]!r}")
                continue
            copies[topic][i] += 1
            wrong = []
            if props.get("RETRY_TOPIC") != TOPIC:
                wrong.append(f"RETRY_TOPIC {props.get('RETRY_TOPIC')!r}")
            if props.get("ORIGIN_MESSAGE_ID") != origin_ids.get(i):
                wrong.append(f"ORIGIN_MESSAGE_ID {props.get('ORIGIN_MESSAGE_ID')!r} (not {origin_ids.get(i)!r})")
            if reconsume != 1:
                wrong.append(f"reconsumeTimes {reconsume}")
            if wrong:
                counts.problem("bad", f"message {i} in {topic}: " + ", ".join(wrong))
    if led.refused:
        counts.problem("bad", f"{led.refused} send-back tries refused")
    for i in range(total):
        plan = decide(seed, i)
        tries = led.tries.get(i, 0)
        n = copies[plan.topic][i]
        other = copies[DLQ if plan.topic == RETRY else RETRY][i]
        if other:
            counts.problem("bad", f"message {i} ({plan.mode}) has {other} copies in the wrong topic")
        if i not in led.answered:
            counts.problem("bad", f"message {i} ({plan.mode}): its send-back never answered after {tries} tries")
            if n > tries:
                counts.problem("dup", f"message {i} ({plan.mode}): {n} copies of {tries} unanswered tries")
            continue
        counts.answered[plan.mode] += 1
        counts.retried[plan.mode] += tries > 1
        if n == 0:
            counts.problem("lost", f"message {i} ({plan.mode}): send-back answered SUCCESS, not in {plan.topic}")
        elif n > tries:
            counts.problem("dup", f"message {i} ({plan.mode}): {n} copies in {plan.topic} from {tries} tries")
        else:
            counts.retry_copies[plan.mode] += n - 1


# ---- the store -----------------------------------------------------------------------------------


def undelivered(root: Path, conf: Path) -> int:
    """Messages of ``SCHEDULE_TOPIC_XXXX`` the scheduler has not delivered yet (read-only)."""
    with tc.open_store(root, conf, read_only=True, create=False) as store:
        if SCHEDULE not in store.topics():
            return 0
        done = store.replica.delay_offsets()
        return sum(
            max(0, store.max_offset(SCHEDULE, level - 1) - done.get(level, 0))
            for level in range(1, len(DELAY_LEVELS.split()) + 1)
        )


def read_copies(root: Path, conf: Path) -> dict[str, list[Copy]]:
    out: dict[str, list[Copy]] = {RETRY: [], DLQ: []}
    with tc.open_store(root, conf, read_only=True, create=False) as store:
        for topic in out:
            if topic not in store.topics():
                continue
            t = tc.read_whole_queue(store, topic, 0, check_crc=True)
            for body, props, reconsume in zip(
                t.column("body").to_pylist(),
                t.column("properties").to_pylist(),
                t.column("reconsumeTimes").to_pylist(),
                strict=True,
            ):
                out[topic].append((bytes(body), dict(props or []), int(reconsume)))
    return out


# ---- a trial -------------------------------------------------------------------------------------


def send_originals(namesrv: str, seed: int, total: int) -> dict[int, str]:
    """Message i of ``RT`` -> its offset msgId (every send answered SEND_OK)."""
    from rmqnet.client import Producer
    from rmqnet.client.loop import call

    producer = Producer("RT_PG", namesrv, timeout_s=10.0)
    producer.route_wait_s = 10.0  # the broker registers its topics a service round after "ready"

    async def send_all() -> dict[int, str]:
        out: dict[int, str] = {}
        for start in range(0, total, 16):
            idx = range(start, min(total, start + 16))
            results = await asyncio.gather(*(producer.asend(TOPIC, make_body(seed, i)) for i in idx))
            for i, res in zip(idx, results, strict=True):
                if res.status != "SEND_OK":
                    raise RuntimeError(f"message {i}: {res.status}")
                out[i] = res.offset_msg_id
        return out

    try:
        return call(send_all())
    finally:
        producer.close()


def _answered(ledgers: list[Path]) -> list[int]:
    return [len(Ledger.read(p).answered) for p in ledgers]


def trial(n: int, args: argparse.Namespace, work: Path, namesrv: str, rng: random.Random) -> Counts:
    counts = Counts()
    root, conf = work / "store", work / "broker.conf"
    work.mkdir(parents=True)
    tc.write_conf(conf, "RetryCluster", "rt", f"messageDelayLevel={DELAY_LEVELS}")
    tc.prepare_root(root, conf, TOPIC, QUEUES)
    seed = args.seed * 1000 + n
    total = args.workers * args.messages
    broker, addr = tc.start_broker(root, conf, "127.0.0.1:0", namesrv, work / "broker-1.log", "the broker")
    ledgers = [work / f"worker-{i}.ledger" for i in range(args.workers)]
    workers: list[subprocess.Popen[bytes]] = []
    origin_ids: dict[int, str] = {}
    try:
        origin_ids = send_originals(namesrv, seed, total)
        (work / "originals.json").write_text(json.dumps(origin_ids))
        for i in range(args.workers):
            spec = {
                "worker": i,
                "seed": seed,
                "ledger": str(ledgers[i]),
                "namesrv": namesrv,
                "workers": args.workers,
                "total": total,
            }
            workers.append(tc.spawn_child(__file__, "worker", spec, work / f"worker-{i}.log", stdin=subprocess.DEVNULL))
        tc.wait_for(
            lambda: all(a >= 1 for a in _answered(ledgers)),
            workers,
            "a first answered send-back",
            name="worker",
            exits_ok=True,
        )
        time.sleep(rng.uniform(0.0, args.run_s))
        broker = tc.kill_restart(broker, root, conf, addr, namesrv, work / "broker-2.log")
        counts.kills += 1
        tc.wait_for(
            lambda: all(p.poll() is not None for p in workers),
            workers,
            "the workers' end",
            name="worker",
            exits_ok=True,
        )
        if n % 2 == 0:  # once more, while the scheduler delivers the retries
            time.sleep(rng.uniform(0.0, 2.0))
            broker = tc.kill_restart(broker, root, conf, addr, namesrv, work / "broker-3.log")
            counts.kills += 1
        tc.wait_for(lambda: undelivered(root, conf) == 0, [], "delivery of every retry (settling)")
    except Exception as exc:  # noqa: BLE001 - counted; the broker is still stopped and the store read
        counts.problem("bad", f"{type(exc).__name__}: {exc}")
    tc.reap(workers, work, counts.problem, name="worker", hung="did not end")
    tc.stop_broker(broker, counts.problem)
    led = Ledger()
    for path in ledgers:
        led.merge(Ledger.read(path))
    if origin_ids:
        check(seed, total, origin_ids, led, read_copies(root, conf), counts)
    tries = sum(led.tries.values())
    print(
        f"trial {n}: {counts.kills} kills, {sum(counts.answered.values())} send-backs answered "
        f"(retry {counts.answered['retry']}, max {counts.answered['max']}, negative {counts.answered['negative']}), "
        f"{tries} tries, {sum(counts.retried.values())} tried again, {sum(counts.retry_copies.values())} retry copies: "
        f"{counts.lost} lost, {counts.dup} duplicated, {counts.bad} bad",
        flush=True,
    )
    counts.print_problems()
    return counts


def main(argv: list[str] | None = None) -> int:
    tc.run_child(argv, "worker", run_worker)  # a child process ends here
    args = tc.parse_trial_args(
        argv,
        __doc__,
        [
            ("--workers", {"type": int, "default": 3}),
            ("--messages", {"type": int, "default": 90, "help": "messages each worker sends back"}),
        ],
        1.0,
        "the kill comes 0..RUN_S s after every worker had an answer",
    )
    total = Counts()

    def summary() -> None:
        for mode in MODES:
            print(
                f"mode {mode}: {total.answered[mode]} answered send-backs to {RETRY if mode == 'retry' else DLQ}, "
                f"{total.retried[mode]} tried again, {total.retry_copies[mode]} retry copies",
                flush=True,
            )
        print(
            f"{args.trials} trials, {total.lost} lost, {total.dup} duplicated, {total.bad} bad "
            f"({sum(total.answered.values())} answered send-backs, {total.kills} kills, "
            f"{sum(total.retry_copies.values())} retry copies of unanswered tries)",
            flush=True,
        )

    return tc.run_trials(
        args,
        "torture-rt-",
        lambda base: (
            f"torture_send_back: {args.trials} trials, seed {args.seed}, {args.workers} "
            f"workers x {args.messages} messages, SYNC_FLUSH, delay levels {DELAY_LEVELS}, "
            f"work directory {base}"
        ),
        trial,
        total,
        lambda c: bool(c.lost or c.dup or c.bad),
        summary,
    )


if __name__ == "__main__":
    sys.exit(main())
