"""Benchmark of retention: what a pass costs, and what read pins cost readers.

    python jobs/bench_retention.py [--segments N] [--queues Q] [--passes P] [--rounds 5] [--root PATH] [--json]

- **A pass that deletes nothing** (the background service runs one every
  ``clean_resource_interval``): the median and p99 of ``clean_expired`` on a store of
  ``--segments`` commitlog segments and ``--queues`` consume queues, at an hour outside
  ``delete_when``, and at a deletion hour with nothing expired (the oldest segment's mtime is
  then read). Target: <= 1 ms.
- **A pass that deletes** one segment and the consume-queue files below it, and how long it
  holds the append lock (the writers' wait).
- **Read pins** (:mod:`rmqlog.log.pins`): ``get_messages`` (32 messages, RocketMQ's pull batch)
  and ``read_queue`` (ranges of 4,096) over 100-byte messages with pins and with pins
  replaced by a no-op, alternating, in one run: the pins' cost per read and in percent.

Figures are wall-clock on this machine; nothing here is a test threshold.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
from harness import Bench  # jobs/ is this script's directory

import rmqlog
import rmqlog.log.commitlog as commitlog_mod
import rmqlog.queue.checked_read as checked_read_mod
import rmqlog.queue.consume_queue as consume_queue_mod

SEG = 64 << 10  # small segments: many of them, quickly


def _local_ms(hour: int) -> int:
    return int(dt.datetime(2031, 5, 6, hour, 30).timestamp() * 1000)


def _fill(s: rmqlog.MessageStore, segments: int, queues: int, body: int = 100) -> int:
    per = SEG // (body + 160)
    n = segments * per
    s.create_topic("BenchRetention", queues)
    for lo in range(0, n, 100_000):
        k = min(100_000, n - lo)
        s.put_batch(
            pa.table(
                {
                    "topic": ["BenchRetention"] * k,
                    "body": pa.array([b"x" * body] * k, pa.binary()),
                    "queueId": pa.array(np.arange(lo, lo + k) % queues, pa.int32()),
                }
            )
        )
    s.dispatch()
    s.flush()
    return n


def _timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _ms(xs: list[float], q: float = 0.5) -> float:
    return float(np.quantile(np.array(xs), q)) * 1000


@contextlib.contextmanager
def _no_pins() -> Iterator[None]:
    """Pins replaced by a no-op in the modules that read (the 'before' of the comparison)."""

    @contextlib.contextmanager
    def held(seg: object) -> Iterator[bool]:
        yield True

    mods = (commitlog_mod, checked_read_mod, consume_queue_mod)
    saved = [m.pinned for m in mods]
    for m in mods:
        m.pinned = held  # type: ignore[assignment]
    try:
        yield
    finally:
        for m, p in zip(mods, saved, strict=True):
            m.pinned = p  # type: ignore[assignment]


def bench_passes(job: Bench, workdir: Path, segments: int, queues: int, passes: int) -> None:
    root = workdir / "passes"
    cfg = rmqlog.StoreConfig(
        mapped_file_size_commit_log=SEG,
        mapped_file_size_consume_queue=20 * 1000,
        delete_when="04",
        delete_commit_log_files_max_num=1,
    )
    with rmqlog.MessageStore.open(root, cfg) as s:
        n = _fill(s, segments, queues)
        s.retention.disk_used = lambda path: 10.0  # this VM's disk use must not decide the rule
        now = _local_ms(4) / 1000  # every segment written "just now" as the passes see it
        for p in (root / "commitlog").iterdir():
            os.utime(p, (now, now))
        s.clean_expired(_local_ms(10))  # the first pass writes retention.state
        outside = _timed(lambda: s.clean_expired(_local_ms(10)), passes)
        at_hour = _timed(lambda: s.clean_expired(_local_ms(4)), passes)
        assert s.commitlog.min_offset() == 0
        print(
            f"store: {n:,} messages, {len(os.listdir(root / 'commitlog'))} commitlog segments of {SEG >> 10} KiB, "
            f"{queues} consume queues"
        )
        print(
            f"pass, nothing due (hour outside delete_when)  median {_ms(outside):.3f} ms  p99 "
            f"{_ms(outside, 0.99):.3f} ms"
            f"  ({passes} passes)"
        )
        print(
            f"pass, deletion hour, nothing expired          median {_ms(at_hour):.3f} ms  p99 "
            f"{_ms(at_hour, 0.99):.3f} ms"
        )
        for q, label in ((0.5, "median"), (0.99, "p99")):
            job.figure(
                f"retention pass, nothing due, {label}",
                _ms(outside, q),
                "ms",
                peer=f"a pass at a deletion hour, nothing expired, {label}",
                peer_value=_ms(at_hour, q),
            )
        held: list[float] = []
        lock = s.parts.append_lock
        real_held = lock.held

        @contextlib.contextmanager
        def timed_held(shared: bool = False) -> Iterator[None]:
            with real_held(shared):
                t0 = time.perf_counter()
                try:
                    yield
                finally:
                    held.append(time.perf_counter() - t0)

        lock.held = timed_held  # type: ignore[method-assign]
        old = now - 100 * 3600
        deleting = []
        for p in sorted((root / "commitlog").iterdir())[:20]:
            os.utime(p, (old, old))
        for _ in range(10):
            t0 = time.perf_counter()
            report = s.clean_expired(_local_ms(4))
            deleting.append(time.perf_counter() - t0)
            assert len(report.segments) == 1, report
        lock.held = real_held  # type: ignore[method-assign]
        print(
            f"pass deleting 1 segment (+ queue files)       median {_ms(deleting):.3f} ms; append lock held "
            f"median {_ms(held):.3f} ms, max {max(held) * 1000:.3f} ms"
        )
        job.figure(
            "retention pass deleting 1 segment (+ queue files), median",
            _ms(deleting),
            "ms",
            peer="the append lock held by it, median",
            peer_value=_ms(held),
        )


def _pin_once(seg: object) -> None:
    with commitlog_mod.pinned(seg):  # type: ignore[arg-type]
        pass


def bench_pins(job: Bench, workdir: Path, rounds: int) -> None:
    root = workdir / "pins"
    cfg = rmqlog.StoreConfig(mapped_file_size_commit_log=64 << 20)
    with rmqlog.MessageStore.open(root, cfg) as s:
        n = 400_000
        s.put_batch(
            pa.table(
                {
                    "topic": ["BenchPins"] * n,
                    "body": pa.array([b"y" * 100] * n, pa.binary()),
                    "queueId": pa.array(np.zeros(n, np.int32)),
                }
            )
        )
        s.dispatch()

        def pulls() -> int:
            got = 0
            for off in range(0, 40_000, 32):
                got += s.get_messages("g", "BenchPins", 0, off, 32).messages.num_rows
            return got

        def ranges() -> int:
            return sum(s.read_queue("BenchPins", 0, a, a + 4096).num_rows for a in range(0, n, 4096))

        results: dict[str, dict[str, list[float]]] = {
            "get_messages x32": {"on": [], "off": []},
            "read_queue x4096": {"on": [], "off": []},
        }
        calls = {"get_messages x32": 40_000 // 32, "read_queue x4096": -(-n // 4096)}
        for _ in range(rounds):
            for mode in ("off", "on"):
                ctx = _no_pins() if mode == "off" else contextlib.nullcontext()
                with ctx:
                    results["get_messages x32"][mode].append(_timed(pulls, 1)[0])
                    results["read_queue x4096"][mode].append(_timed(ranges, 1)[0])
        seg = s.commitlog.segments.for_offset(0)
        assert seg is not None
        pins = _timed(lambda: [_pin_once(seg) for _ in range(10_000)], rounds)
        print(f"one pin (shared flock + release, per segment per read): {min(pins) / 10_000 * 1e6:.2f} us")
        for name, r in results.items():
            on, off = statistics.median(r["on"]), statistics.median(r["off"])
            per_call = (on - off) / calls[name] * 1e6
            print(
                f"{name:<18} pins on {on * 1000:8.1f} ms  off {off * 1000:8.1f} ms  -> {on / off - 1:+.1%} "
                f"({per_call:+.2f} us per call, {calls[name]} calls, median of {rounds} rounds)"
            )
            job.figure(
                f"{name}, read pins on", on * 1000, "ms", peer="the same with the pins a no-op", peer_value=off * 1000
            )


def main() -> None:
    ap = Bench(
        "bench_retention", __doc__, rounds=5, rounds_help="rounds of the read pins' comparison (medians printed)"
    )
    ap.add_argument("--segments", type=int, default=500)
    ap.add_argument("--queues", type=int, default=256)
    ap.add_argument("--passes", type=int, default=1000)
    with ap.run() as work:
        args = ap.args
        print("== retention passes")
        bench_passes(ap, work, args.segments, args.queues, args.passes)
        print("\n== read pins (100-byte messages)")
        bench_pins(ap, work, args.rounds)


if __name__ == "__main__":
    main()
