"""Quickstart (the README's first command): write order events into a store, dispatch, read back.

    python jobs/quickstart.py [--root PATH] [--messages N]

Until the Spark data source lands this is a store demo: it appends generated order events
with keys and tags through ``put_batch``, runs the dispatcher, prints per-queue counts, reads
a few messages back with a tag filter, looks one up by msgId and commits a consumer offset.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import store


def order_events(n: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    order_id = np.arange(n)
    kind = rng.choice(np.array(["created", "paid", "shipped"]), n)
    amount = rng.integers(100, 100_000, n)
    body = pa.array([f'{{"order":{o},"event":"{k}","cents":{a}}}' for o, k, a in zip(order_id, kind, amount, strict=True)])
    return pa.table({
        "topic": pa.array(["orders"] * n),
        "body": body.cast(pa.binary()),
        "tags": pa.array(kind),
        "keys": pa.array([[f"order-{o}"] for o in order_id], pa.list_(pa.string())),
        "properties": pa.array([[("source", "quickstart")]] * n, pa.map_(pa.string(), pa.string())),
    })


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=None, help="store directory (default: a new temp dir)")
    ap.add_argument("--messages", type=int, default=100_000)
    args = ap.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="rmq-quickstart-"))

    with store.MessageStore.open(root) as s:
        events = order_events(args.messages)
        t0 = time.perf_counter()
        result = s.put_batch(events)
        t_put = time.perf_counter() - t0
        t0 = time.perf_counter()
        dispatched = s.dispatch()
        t_dispatch = time.perf_counter() - t0
        print(f"store: {root}")
        print(f"appended {result.num_rows:,} messages in {t_put:.3f}s, dispatched {dispatched:,} in {t_dispatch:.3f}s")
        print("\nqueue  min  max")
        for q in range(s.topics()["orders"].read_queue_nums):
            print(f"orders/{q}  {s.min_offset('orders', q)}  {s.max_offset('orders', q):,}")

        r = s.get_messages("quickstart", "orders", 0, 0, max_count=3, tags="paid || shipped")
        print(f"\nget_messages(orders/0, tags='paid || shipped'): {r.status.name}, next offset {r.next_begin_offset}")
        for row in r.messages.select(["queueOffset", "msgId", "tags", "keys", "body"]).to_pylist():
            row["body"] = row["body"].decode()
            print("  ", row)
        s.commit_offset("quickstart", "orders", 0, r.next_begin_offset)
        print(f"committed offset of group 'quickstart' on orders/0: {s.committed_offset('quickstart', 'orders', 0)}")

        msg_id = result["msgId"][0].as_py()
        found = s.message_by_id(msg_id)
        assert found is not None
        print(f"\nmessage_by_id({msg_id}) -> queue {found['queueId']} offset {found['queueOffset']}: {found['body'].decode()}")


if __name__ == "__main__":
    main()
