"""Benchmark of ``rmqlog export``: JSON lines beside Parquet, on the same store, in the same run.

    python jobs/bench_export.py [--root PATH] [--messages 1000000] [--rounds 2] [--json]

A store of ``--messages`` messages (topic ``orders``, 4 queues, ~60-byte JSON bodies, one
``KEYS`` token, tags) is made first (not timed); then ``export`` runs the way the command does
(:func:`rmqlog.admin.export.export`: the checked read path, 65,536 messages a batch), to
Parquet (the peer: Arrow's own writer) and to JSON lines (:mod:`rmqlog.admin.jsonl`, bodies as
text and as hex), rounds alternating, into files outside the store. Printed: msgs/s and
seconds per million for each, and JSON lines as a share of Parquet's rate.

Figures are wall-clock on this machine; nothing here is a test threshold.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from harness import Bench  # jobs/ is this script's directory

import rmqlog
from rmqlog.admin.export import ExportRange, export


def make_store(root: Path, n: int) -> None:
    cfg = rmqlog.StoreConfig(max_hash_slot_num=500_000, max_index_num=2_000_000, message_index_enable=False)
    with rmqlog.MessageStore.open(root, cfg) as s:
        s.create_topic("orders", 4)
        step = 65_536
        for start in range(0, n, step):
            k = min(step, n - start)
            ids = np.arange(start, start + k)
            bodies = pa.array([b'{"id": %d, "status": "paid", "amount": %d.50}' % (i, i % 997) for i in ids.tolist()])
            s.put_batch(
                pa.table(
                    {
                        "topic": pa.array(["orders"] * k),
                        "body": bodies,
                        "tags": pa.array(["paid"] * k),
                        "keys": pa.array([[f"order-{i}"] for i in ids.tolist()], pa.list_(pa.string())),
                        "queueId": pa.array((ids % 4).astype(np.int32)),
                    }
                )
            )
        s.dispatch()


def main() -> None:
    b = Bench("bench_export", __doc__, rounds=2, rounds_help="rounds of the three exports, alternating (best printed)")
    b.add_argument("--messages", type=int, default=1_000_000, help="messages in the store")
    with b.run() as base:
        args = b.args
        root = base / "store"
        t0 = time.perf_counter()
        make_store(root, args.messages)
        print(f"store of {args.messages:,} messages made in {time.perf_counter() - t0:.1f} s (not timed below)")
        best: dict[str, float] = {}
        with rmqlog.MessageStore.open(root, create=False, read_only=True) as s:
            for _ in range(args.rounds):
                for name, fmt, body in (
                    ("parquet", "parquet", "text"),
                    ("jsonl", "jsonl", "text"),
                    ("jsonl --body hex", "jsonl", "hex"),
                ):
                    out = base / f"out.{fmt}"
                    t0 = time.perf_counter()
                    with open(out, "wb") as f:
                        n = export(s, ExportRange("orders"), f, fmt, body=body)
                    seconds = time.perf_counter() - t0
                    assert n == args.messages, (n, args.messages)
                    best[name] = min(best.get(name, seconds), seconds)
                    out.unlink()
        for name, seconds in best.items():
            rate = args.messages / seconds
            print(f"export {name:<18} {rate:>12,.0f} msgs/s  {1e6 / rate:6.2f} s a million (best of {args.rounds})")
        share = best["parquet"] / best["jsonl"]
        print(
            f"-> JSON lines = {share:.0%} of Parquet's rate (text bodies); "
            f"{best['parquet'] / best['jsonl --body hex']:.0%} with hex bodies"
        )
        for name in ("jsonl", "jsonl --body hex"):
            b.figure(
                f"export {name}",
                args.messages / best[name],
                "msgs/s",
                peer="export parquet",
                peer_value=args.messages / best["parquet"],
            )


if __name__ == "__main__":
    main()
