"""Benchmark of the index files: build rate per dispatched batch, and query latency at 10M keys.

    python jobs/bench_index.py [--root PATH] [--keys 10000000] [--batch 32768] [--queries 20000]
                               [--slots 5000000] [--entries 20000000] [--rounds 3] [--json]

Messages carry two keys each (the load docs/performance.md states the index's figures for): a
``UNIQ_KEY`` (32 uppercase hex, what RocketMQ's client makes) and one ``KEYS`` token
(``order-<n>``, 7 to 15 characters), topic ``TopicTest``. The columns are made up front (not timed), ``--batch``
messages per batch, as the
dispatcher hands them over (topic, commitlog offset, store time, UNIQ_KEY, KEYS).

Printed, each beside its peers measured in the same run on the same arrays:

1. build: ``IndexService.build`` for every batch until ``--keys`` keys are indexed (with the
   default counts one full-size file of 420,000,040 bytes, created sparse): msgs/s and keys/s;
2. its parts: making the keys (split KEYS, Java hashes of ``topic#key``) alone, and a plain
   numpy pass over the same arrays (sum of the key bytes and offsets): what one pass over the
   input costs on this machine;
3. query: ``IndexService.query(topic, key)`` for ``--queries`` random indexed keys (half
   UNIQ_KEYs, half tokens), p50/p99/max in microseconds, offsets only (reading the messages
   and removing hash collisions is the caller's part);
4. the whole dispatch (``MessageStore.dispatch``: consume-queue units and the index) of
   ``--dispatch-messages`` messages of a store (100-byte bodies, a ``KEYS`` token and the
   store's ``UNIQ_KEY`` each: two keys), with the index on, beside the same dispatch with
   ``message_index_enable`` off, rounds alternating; then ``MessageStore.query_by_key``
   (index query, records read and checked, collisions removed) p50/p99 on that store.

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


def make_batches(n_msgs: int, batch: int, seed: int = 7) -> list[tuple]:
    """Dispatcher-shaped columns per batch: (topics, offsets, store times, UNIQ_KEY, KEYS)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    hexdigits = np.frombuffer(b"0123456789ABCDEF", np.uint8)
    out = []
    phy = 0
    ts = 1_700_000_000_000
    for lo in range(0, n_msgs, batch):
        n = min(batch, n_msgs - lo)
        nibbles = rng.integers(0, 16, (n, 32), dtype=np.uint8)
        uniq = pa.StringArray.from_buffers(
            n,
            pa.py_buffer(np.arange(n + 1, dtype=np.int32) * 32),
            pa.py_buffer(hexdigits[nibbles].tobytes()),
        )
        numbers = pc.cast(pa.array(rng.integers(0, 10**9, n) >> rng.integers(0, 28, n)), pa.string())
        keys = pc.binary_join_element_wise("order-", numbers, "")
        sizes = rng.integers(150, 400, n)
        offsets = phy + np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(np.int64)
        phy = int(offsets[-1] + sizes[-1])
        times = ts + np.arange(n, dtype=np.int64) // 100  # ~100k msgs/s of store time
        ts = int(times[-1]) + 1
        topics = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array(["TopicTest"]))
        out.append((topics, offsets, times, uniq, keys))
    return out


def main() -> None:
    ap = Bench(
        "bench_index", __doc__, rounds=3, rounds_help="dispatch rounds, index on and off alternating (medians printed)"
    )
    ap.add_argument("--keys", type=int, default=10_000_000, help="keys to index (two per message)")
    ap.add_argument("--batch", type=int, default=32768, help="messages per dispatched batch")
    ap.add_argument("--queries", type=int, default=20000)
    ap.add_argument("--slots", type=int, default=5_000_000, help="max_hash_slot_num")
    ap.add_argument("--entries", type=int, default=20_000_000, help="max_index_num")
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout whose store package is measured")
    ap.add_argument("--dispatch-messages", type=int, default=1_000_000, help="messages per dispatch round (0: skip)")
    with ap.run() as work:
        _run(ap, work)


def _run(job: Bench, work: Path) -> None:
    args = job.args
    sys.path.insert(0, str(args.repo))
    import numpy as np
    import pyarrow as pa

    from rmqlog.index import IndexConfig, IndexService, message_keys

    n_msgs = args.keys // 2
    t = time.perf_counter()
    batches = make_batches(n_msgs, args.batch)
    import os

    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work shares them)")
    print(
        f"input: {n_msgs:,} messages x 2 keys in {len(batches)} batches of {args.batch:,} "
        f"(made in {time.perf_counter() - t:.1f} s, not timed below)"
    )

    # peers over the same arrays: one numpy pass, and making the keys alone
    def peer_numpy() -> float:
        t0 = time.perf_counter()  # wall clock, as the build
        acc = 0
        for _topics, offsets, times, uniq, keys in batches:
            acc += int(np.frombuffer(uniq.buffers()[2], np.uint8).sum(dtype=np.uint64))
            acc += int(np.frombuffer(keys.buffers()[2], np.uint8).sum(dtype=np.uint64))
            acc += int(offsets.sum()) + int(times.sum())
        return time.perf_counter() - t0

    def keys_only() -> float:
        t0 = time.perf_counter()
        for topics, _offsets, _times, uniq, keys in batches:
            message_keys(topics, uniq, keys)
        return time.perf_counter() - t0

    root = Path(tempfile.mkdtemp(prefix="bench-index-", dir=work))
    cfg = IndexConfig(max_hash_slot_num=args.slots, max_index_num=args.entries)
    try:
        t_numpy = peer_numpy()
        t_keys = keys_only()
        svc = IndexService.open(root, cfg, writable=True)
        per_batch = []
        t0, c0 = time.perf_counter(), time.process_time()
        added = 0
        for b in batches:
            t1 = time.perf_counter()
            added += svc.build(*b)
            per_batch.append(time.perf_counter() - t1)
        t_build, c_build = time.perf_counter() - t0, time.process_time() - c0
        t_flush0 = time.perf_counter()
        svc.flush()
        t_flush = time.perf_counter() - t_flush0
        files = svc.files()
        print(
            f"index: {added:,} keys in {len(files)} file(s) of {files[0].path.stat().st_size:,} bytes "
            f"({sum(f.path.stat().st_blocks * 512 for f in files) / 2**20:.0f} MiB allocated); flush "
            f"{t_flush * 1000:.0f} ms"
        )
        print(
            f"build (IndexService.build): {n_msgs / t_build / 1e6:6.2f} M msgs/s  {added / t_build / 1e6:6.2f} M "
            "keys/s  "
            f"(median batch {statistics.median(per_batch) * 1000:.2f} ms, p99 "
            f"{np.percentile(per_batch, 99) * 1000:.2f} ms; "
            f"CPU {n_msgs / c_build / 1e6:.2f} M msgs/s)"
        )
        print(
            f"  peer, making the keys alone:  {n_msgs / t_keys / 1e6:6.2f} M msgs/s  ({t_keys / t_build:.0%} of build)"
        )
        print(
            f"  peer, one numpy pass:         {n_msgs / t_numpy / 1e6:6.2f} M msgs/s  ({t_numpy / t_build:.0%} of "
            "build)"
        )
        job.figure(
            "IndexService.build", n_msgs / t_build, "msgs/s", peer="making the keys alone", peer_value=n_msgs / t_keys
        )
        job.figure(
            "IndexService.build, vs one numpy pass",
            n_msgs / t_build,
            "msgs/s",
            peer="one numpy pass over the input",
            peer_value=n_msgs / t_numpy,
        )

        # queries: random keys that are indexed, half UNIQ_KEYs, half tokens
        rng = np.random.default_rng(3)
        picks = []
        for _ in range(args.queries):
            topics, offsets, times, uniq, keys = batches[int(rng.integers(0, len(batches)))]
            i = int(rng.integers(0, len(uniq)))
            col = uniq if len(picks) % 2 == 0 else keys
            picks.append((col[i].as_py(), int(offsets[i])))
        reader = IndexService.open(root, cfg)
        lat = []
        misses = 0
        for key, offset in picks:
            q0 = time.perf_counter()
            got = reader.query("TopicTest", key)
            lat.append(time.perf_counter() - q0)
            # a token shared by more than 64 messages may return 64 others: not a miss
            misses += offset not in got and len(got) < cfg.max_msgs_num_batch
        us = np.array(lat) * 1e6
        print(
            f"query (IndexService.query, {args.queries:,} keys, {added:,} indexed): p50 {np.percentile(us, 50):.1f} "
            "us  "
            f"p99 {np.percentile(us, 99):.1f} us  max {us.max():.0f} us  (misses: {misses})"
        )
        for q in (50, 99):
            job.figure(f"IndexService.query, {added:,} keys indexed, p{q}", float(np.percentile(us, q)), "us")
        reader.close()
        svc.close()
        del pa
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.dispatch_messages:
        bench_dispatch(job, args.dispatch_messages, args.rounds, work)


def bench_dispatch(job: Bench, n: int, rounds: int, where: Path) -> None:
    """Section 4 of the module docstring."""
    import numpy as np
    import pyarrow as pa

    import rmqlog

    batch = 65536
    bodies = pa.array([b"x" * 100] * batch, pa.binary())
    times: dict[bool, list[float]] = {True: [], False: []}
    query_us: list[float] = []
    for r in range(rounds):
        for indexed in (True, False) if r % 2 == 0 else (False, True):
            root = Path(tempfile.mkdtemp(prefix="bench-dispatch-", dir=where))
            try:
                cfg = rmqlog.StoreConfig(message_index_enable=indexed)
                with rmqlog.MessageStore.open(root, cfg) as s:
                    for lo in range(0, n, batch):
                        k = min(batch, n - lo)
                        keys = pa.array([[f"order-{lo + i}"] for i in range(k)], pa.list_(pa.string()))
                        s.put_batch(pa.table({"topic": ["TopicTest"] * k, "body": bodies.slice(0, k), "keys": keys}))
                    t0 = time.perf_counter()
                    done = s.dispatch()
                    times[indexed].append(time.perf_counter() - t0)
                    assert done == n, done
                    if indexed and r == 0:
                        rng = np.random.default_rng(5)
                        for i in rng.integers(0, n, 2000):
                            q0 = time.perf_counter()
                            got = s.query_by_key("TopicTest", f"order-{int(i)}")
                            query_us.append((time.perf_counter() - q0) * 1e6)
                            assert got.num_rows == 1
            finally:
                shutil.rmtree(root, ignore_errors=True)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(
        f"dispatch with index ({n:,} msgs, 2 keys each): {n / on / 1e6:5.2f} M msgs/s  "
        f"[{', '.join(f'{n / t / 1e6:.2f}' for t in times[True])}]"
    )
    print(
        f"  peer, dispatch without index:        {n / off / 1e6:5.2f} M msgs/s  "
        f"[{', '.join(f'{n / t / 1e6:.2f}' for t in times[False])}]  (index costs {on / off - 1:.0%})"
    )
    q = np.array(query_us)
    print(
        f"query_by_key (facade: index + read + check, {len(q):,} keys of {n:,}): p50 {np.percentile(q, 50):.0f} us  "
        f"p99 {np.percentile(q, 99):.0f} us"
    )
    job.figure(
        "dispatch with the index, 2 keys a message",
        n / on,
        "msgs/s",
        peer="the same dispatch without the index",
        peer_value=n / off,
    )
    for p in (50, 99):
        job.figure(f"query_by_key, p{p}", float(np.percentile(q, p)), "us")


if __name__ == "__main__":
    main()
