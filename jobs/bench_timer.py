"""Benchmark of timed messages (RocketMQ 5's timer): a million falling due together, the cost
of a pass with a million pending and a thousand falling due each second, and lateness.

    python jobs/bench_timer.py [--messages 1000000] [--rounds 3] [--root PATH] [--json]

Messages have 100-byte bodies, a tag and a key. The scheduler's clock is simulated (the
``wall_ms`` it reads is set per pass), so the delivery times can lie minutes ahead without
waiting for them. Printed, each beside its peer measured in the same run:

1. ``--messages`` messages with one delivery time, a pass once it is due: msgs/s, beside
   ``put_batch`` of the same messages into a fresh store (the append the delivery makes
   anyway); the pass that first indexes them (the wheel: enqueue) is timed apart;
2. ``--messages`` pending, due evenly over ``--messages / 1000`` seconds (a thousand a
   second), a pass each simulated second: the pass's time, p50 and p99 over 300 passes
   (each delivers about a thousand), beside a pass with nothing due;
3. lateness: 10,000 messages due at random times over 20 s, passes every second (of
   simulated clock, at a random phase): delivery time minus the time asked for, p50/p99/max.

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


def table(n: int, start: int, deliver):  # noqa: ANN001, ANN201 - numpy int64 array or None; a pyarrow Table
    import pyarrow as pa

    cols = {
        "topic": pa.array(["Orders"] * n),
        "body": pa.array([b"x" * 100] * n, pa.binary()),
        "tags": pa.array(["TagA"] * n),
        "keys": pa.array([[f"o{start + i}"] for i in range(n)], pa.list_(pa.string())),
    }
    if deliver is not None:
        cols["deliverTime"] = pa.array(deliver, pa.int64())
    return pa.table(cols)


def fill(ms, deliver) -> float:  # type: ignore[no-untyped-def]  # noqa: ANN001
    """Put one message per delivery time (``deliver``: int64 ms; ``None`` items: not timed);
    returns the seconds the puts took."""
    n = len(deliver)
    tables = [
        table(min(BATCH, n - lo), lo, None if deliver[0] is None else deliver[lo : lo + BATCH])
        for lo in range(0, n, BATCH)
    ]
    t0 = time.perf_counter()
    for t in tables:
        ms.put_batch(t)
    return time.perf_counter() - t0


def at(ms, clock: int) -> int:  # type: ignore[no-untyped-def]  # noqa: ANN001
    """A scheduler pass as if the wall clock read ``clock``."""
    ms.scheduler.wall_ms = lambda: clock
    return ms.deliver_due(clock)


def main() -> None:
    job = Bench("bench_timer", __doc__, rounds=3, rounds_help="rounds of part 1 (medians printed)")
    job.add_argument("--messages", type=int, default=1_000_000)
    with job.run() as work:
        _run(job, work)


def _run(job: Bench, work: Path) -> None:
    args = job.args
    sys.path.insert(0, str(REPO))
    import numpy as np

    import rmqlog

    n = args.messages
    cfg = rmqlog.StoreConfig(message_index_enable=False)
    deliver_s, enqueue_s, peer_s = [], [], []
    for _ in range(args.rounds):
        root = Path(tempfile.mkdtemp(prefix="bench-timer-", dir=work))
        proot = Path(tempfile.mkdtemp(prefix="bench-timer-peer-", dir=work))
        try:
            with rmqlog.MessageStore.open(root, cfg) as ms:
                when = int(time.time() * 1000) + 120_000
                fill(ms, np.full(n, when, np.int64))
                ms.dispatch()
                t0 = time.perf_counter()
                assert at(ms, when - 60_000) == 0  # indexes all of them, delivers none
                enqueue_s.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                got = at(ms, when + 1)
                deliver_s.append(time.perf_counter() - t0)
                assert got == n, got
            with rmqlog.MessageStore.open(proot, cfg) as ps:
                peer_s.append(fill(ps, [None] * n))
        finally:
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(proot, ignore_errors=True)
    d, e, p = statistics.median(deliver_s), statistics.median(enqueue_s), statistics.median(peer_s)
    print(
        f"timer: {n:,} due together, one pass: {n / d / 1e6:.2f} M msgs/s  "
        f"[{', '.join(f'{n / t / 1e6:.2f}' for t in deliver_s)}]"
    )
    print(f"  peer, put_batch of the same messages: {n / p / 1e6:.2f} M msgs/s  (delivery = {p / d:.0%} of it)")
    print(f"  the pass that indexed them first (enqueue into the wheel): {n / e / 1e6:.2f} M msgs/s")
    job.figure(
        f"timer: {n:,} due together, one pass", n / d, "msgs/s", peer="put_batch of the same messages", peer_value=n / p
    )
    job.figure("timer: the pass that indexes them (enqueue into the wheel)", n / e, "msgs/s")
    steady(job, rmqlog, np, n, cfg, work)
    lateness(job, rmqlog, np, cfg, work)


def steady(job: Bench, rmqlog, np, n: int, cfg, where: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: ANN001
    """Section 2 of the module docstring."""
    root = Path(tempfile.mkdtemp(prefix="bench-timer-steady-", dir=where))
    try:
        with rmqlog.MessageStore.open(root, cfg) as ms:
            start = int(time.time() * 1000) + 60_000
            seconds = max(1, n // 1000)
            rng = np.random.default_rng(3)
            fill(ms, np.sort(start + rng.integers(0, seconds * 1000, n)))
            ms.dispatch()
            at(ms, start - 30_000)  # indexes them all
            idle = []
            for k in range(50):
                t0 = time.perf_counter()
                at(ms, start - 20_000 + k)
                idle.append(time.perf_counter() - t0)
            busy, delivered = [], 0
            for k in range(1, min(300, seconds) + 1):
                t0 = time.perf_counter()
                delivered += at(ms, start + k * 1000)
                busy.append(time.perf_counter() - t0)
        b, i = np.array(busy) * 1e3, np.array(idle) * 1e3
        print(
            f"timer: {n:,} pending, ~1,000 due per second, a pass per second: p50 {np.percentile(b, 50):.2f} ms  "
            f"p99 {np.percentile(b, 99):.2f} ms  ({delivered / len(busy):,.0f} delivered per pass)"
        )
        print(f"  peer, a pass with nothing due: p50 {np.percentile(i, 50):.2f} ms  p99 {np.percentile(i, 99):.2f} ms")
        for q in (50, 99):
            job.figure(
                f"timer: a pass, {n:,} pending, ~1,000 due, p{q}",
                float(np.percentile(b, q)),
                "ms",
                peer=f"a pass with nothing due, p{q}",
                peer_value=float(np.percentile(i, q)),
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def lateness(job: Bench, rmqlog, np, cfg, where: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: ANN001
    """Section 3 of the module docstring."""
    root = Path(tempfile.mkdtemp(prefix="bench-timer-late-", dir=where))
    try:
        with rmqlog.MessageStore.open(root, cfg) as ms:
            start = int(time.time() * 1000) + 30_000
            rng = np.random.default_rng(5)
            want = np.sort(start + rng.integers(0, 20_000, 10_000))
            fill(ms, want)
            ms.dispatch()
            clock = start - 1000 + int(rng.integers(0, 1000))
            seen: dict[bytes, int] = {}
            while len(seen) < len(want):
                clock += 1000
                if at(ms, clock):
                    ms.dispatch()  # the copies are readable once dispatched
                    for q in range(ms.topics()["Orders"].write_queue_nums):
                        for key in ms.read_queue("Orders", q, 0, 1 << 40)["keys"].to_pylist():
                            seen.setdefault(key[0].encode(), clock)
            late = np.array([seen[f"o{i}".encode()] - want[i] for i in range(len(want))])
        print(
            f"timer lateness, a pass every second: p50 {np.percentile(late, 50):.0f} ms  p99 "
            f"{np.percentile(late, 99):.0f} ms  "
            f"max {late.max():.0f} ms  (min {late.min():.0f} ms: never early; {len(want):,} messages)"
        )
        for q in (50, 99):
            job.figure(f"timer lateness, a pass every second, p{q}", float(np.percentile(late, q)), "ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
