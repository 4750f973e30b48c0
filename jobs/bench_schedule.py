"""Benchmark of delay messages: delivering a million messages that fall due together, and the
cost of a pass while they are all pending.

    python jobs/bench_schedule.py [--messages 1000000] [--root PATH] [--rounds 3] [--json]

A store gets ``--messages`` messages with 100-byte bodies, a tag and a key, spread over delay
levels 5 to 8 (1 to 4 minutes: none is due while they are put) (put in batches of 65,536, then dispatched: not timed).
Printed, each
beside its peer measured in the same run:

1. a pass while nothing is due (every message pending): median and p99 over 200 passes;
2. ``deliver_due`` of all of them at once (the clock set past their delivery times): msgs/s,
   beside ``put_batch`` of the same messages into a fresh store (no delay): the append the
   delivery has to make anyway;
3. lateness: with passes every 100 ms of (simulated) clock over a stream of messages due at
   random times within 10 s, how late each is delivered, p50/p99.

Figures are wall-clock on this machine; nothing here is a test threshold.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness import Bench  # jobs/ is this script's directory

REPO = Path(__file__).resolve().parents[1]
BATCH = 65_536


def table(n: int, start: int, delayed: bool):  # noqa: ANN201 - a pyarrow Table
    import pyarrow as pa

    cols = {
        "topic": pa.array(["Orders"] * n),
        "body": pa.array([b"x" * 100] * n, pa.binary()),
        "tags": pa.array(["TagA"] * n),
        "keys": pa.array([[f"o{start + i}"] for i in range(n)], pa.list_(pa.string())),
    }
    if delayed:
        # levels 5-8 (1 to 4 minutes): none falls due while the store is filled
        cols["delayLevel"] = pa.array([5 + (start + i) % 4 for i in range(n)], pa.int32())
    return pa.table(cols)


def fill(ms, n: int, delayed: bool) -> float:  # type: ignore[no-untyped-def]
    """Put ``n`` messages; returns the seconds the puts took."""
    tables = [table(min(BATCH, n - lo), lo, delayed) for lo in range(0, n, BATCH)]
    t0 = time.perf_counter()
    for t in tables:
        ms.put_batch(t)
    return time.perf_counter() - t0


def main() -> None:
    job = Bench("bench_schedule", __doc__, rounds=3, rounds_help="rounds of parts 1 and 2 (medians printed)")
    job.add_argument("--messages", type=int, default=1_000_000)
    with job.run() as work:
        _run(job, work)


def _run(job: Bench, work: Path) -> None:
    args = job.args
    sys.path.insert(0, str(REPO))
    import numpy as np

    import rmqlog

    n = args.messages
    far = 1 << 50
    deliver, peer, idle = [], [], []
    for _ in range(args.rounds):
        root = Path(tempfile.mkdtemp(prefix="bench-schedule-", dir=work))
        proot = Path(tempfile.mkdtemp(prefix="bench-schedule-peer-", dir=work))
        try:
            with rmqlog.MessageStore.open(root) as ms:
                fill(ms, n, True)
                ms.dispatch()
                now = int(time.time() * 1000)
                for _ in range(200):
                    t0 = time.perf_counter()
                    ms.deliver_due(now)
                    idle.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                got = ms.deliver_due(far)
                deliver.append(time.perf_counter() - t0)
                assert got == n, got
            with rmqlog.MessageStore.open(proot) as ps:
                peer.append(fill(ps, n, False))
        finally:
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(proot, ignore_errors=True)
    d, p = statistics.median(deliver), statistics.median(peer)
    us = np.array(idle) * 1e6
    print(
        f"pass with {n:,} pending, none due: p50 {np.percentile(us, 50):.0f} us  p99 {np.percentile(us, 99):.0f} us "
        f"(18 levels: one bound and one unit read per level)"
    )
    print(
        f"deliver_due, {n:,} due together: {n / d / 1e6:.2f} M msgs/s  "
        f"[{', '.join(f'{n / t / 1e6:.2f}' for t in deliver)}]"
    )
    print(
        f"  peer, put_batch of the same messages: {n / p / 1e6:.2f} M msgs/s  "
        f"[{', '.join(f'{n / t / 1e6:.2f}' for t in peer)}]"
        f"  (delivery = {p / d:.0%} of it)"
    )
    for q in (50, 99):
        job.figure(f"a pass with {n:,} pending, none due, p{q}", float(np.percentile(us, q)), "us")
    job.figure(
        f"deliver_due, {n:,} due together", n / d, "msgs/s", peer="put_batch of the same messages", peer_value=n / p
    )
    lateness(job, rmqlog, work)


def lateness(job: Bench, rmqlog, where: Path) -> None:  # type: ignore[no-untyped-def]
    """Section 3: messages of level 1 (1 s) put over 10 s of simulated clock (by stamping the
    clock the scheduler sees), passes every 100 ms: delivery time minus due time."""
    import numpy as np
    import pyarrow as pa

    root = Path(tempfile.mkdtemp(prefix="bench-schedule-late-", dir=where))
    try:
        with rmqlog.MessageStore.open(root) as ms:
            for _ in range(100):
                ms.put_batch(pa.table({"topic": ["Orders"] * 100, "body": [b"x" * 100] * 100, "delayLevel": [1] * 100}))
                time.sleep(0.01)
            ms.dispatch()
            units = ms.consume_queue("SCHEDULE_TOPIC_XXXX", 0).read(0, 10_000)
            due = units["tagsCode"].astype(np.int64)
            late = np.zeros(len(due))
            done = 0
            clock = int(due.min()) - 500
            while done < len(due):
                clock += 100
                k = ms.deliver_due(clock)
                late[done : done + k] = clock - due[done : done + k]
                done += k
        print(
            f"lateness, passes every 100 ms: p50 {np.percentile(late, 50):.0f} ms  p99 {np.percentile(late, 99):.0f} "
            "ms  "
            f"max {late.max():.0f} ms ({len(due):,} messages; the pass interval bounds it)"
        )
        for q in (50, 99):
            job.figure(f"lateness, passes every 100 ms, p{q}", float(np.percentile(late, q)), "ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
