"""Failed deliveries re-stored: CONSUMER_SEND_MSG_BACK (36) against a plain send of the same
messages, measured in the same run (the target: >= 0.5x).

    python jobs/bench_send_back.py [--messages 100000] [--rounds 1] [--root DIR] [--json]

Each round, on a fresh store: the broker runs in a process of its own (``broker_load.py broker``,
127.0.0.1, port 0, ASYNC_FLUSH, 1 GiB segments). **The peer**: ``--messages`` sends (310,
100-byte bodies) from 4 worker processes, one connection each with 16 requests in flight (the
load of ``bench_broker.py``'s send figure). **The figure**: every one of those messages sent back
once (36, ``delayLevel`` 0 and ``maxReconsumeTimes`` 16, as ali-ons sends a failed delivery), by
the same load shape; their commitlog offsets are read from the store (a read-only open) between
the two. Each send-back is a re-store: the record read at its offset, rewritten
(``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID``, ``DELAY``, ``reconsumeTimes + 1``) and put to the
schedule topic's level 3 queue, bound for ``%RETRY%bench_cg``. Request frames are encoded
before the clock starts; a rate is every answer over the span from the first worker's start
to the last one's end. After the round the job checks the store holds one delayed copy per
message.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
from broker_load import (  # jobs/ is this script's directory
    CONSUMER_GROUP,
    HOST,
    Load,
    rate,
    run_loads,
)
from broker_servers import Server, med
from harness import Bench

import rmqlog

TOPIC = "BenchBack"
QUEUES = 4
WORKERS = 4
WINDOW = 16
SCHEDULE = "SCHEDULE_TOPIC_XXXX"


def _round(work: Path, n: int) -> tuple[float, float]:
    root = work / "broker"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    conf = work / "broker.conf"
    conf.write_text(
        "brokerName=bench\nbrokerClusterName=BenchCluster\nflushDiskType=ASYNC_FLUSH\n"
        f"mappedFileSizeCommitLog={1 << 30}\n"
    )
    config = rmqlog.StoreConfig(mapped_file_size_commit_log=1 << 30)
    with rmqlog.MessageStore.open(root, config) as store:
        store.create_topic(TOPIC, QUEUES)
    broker = Server(["broker", str(root), str(conf)], work / "broker.log")
    try:
        per = max(1, n // WORKERS)
        sent = run_loads(
            [Load(broker.port, "send", 1, WINDOW, per, TOPIC, queues=QUEUES, body_size=100) for _ in range(WORKERS)]
        )
        if sent.errors:
            raise RuntimeError(f"sends: {sent.errors} errors ({sent.codes})")
        with rmqlog.MessageStore.open(root, config, read_only=True) as ro:
            offsets = np.concatenate(
                [ro.read_queue(TOPIC, q, 0, 1 << 40).column("commitLogOffset").to_numpy() for q in range(QUEUES)]
            )
        if len(offsets) != per * WORKERS:
            raise RuntimeError(f"{len(offsets)} messages stored, {per * WORKERS} sent")
        back = run_loads(
            [
                Load(broker.port, "back", 1, WINDOW, per, TOPIC, offsets=tuple(int(o) for o in offsets[w::WORKERS]))
                for w in range(WORKERS)
            ]
        )
        if back.errors:
            raise RuntimeError(f"send-backs: {back.errors} errors ({back.codes})")
    finally:
        broker.stop()
    with rmqlog.MessageStore.open(root, config) as s:  # (the broker stopped cleanly: no recovery)
        s.dispatch()
        delayed = s.max_offset(SCHEDULE, 2)  # level 3: 3 + reconsumeTimes 0
        if delayed != len(offsets):
            raise RuntimeError(f"{delayed} re-stored copies on the schedule topic, {len(offsets)} sent back")
    return rate(back), rate(sent)


def main() -> None:
    bench = Bench("bench_send_back", __doc__, rounds=1, rounds_help="rounds (medians are reported; default 1)")
    bench.add_argument("--messages", type=int, default=100_000, help="messages sent, then sent back (default 100,000)")
    with bench.run() as work:
        a = bench.args
        print(
            f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; broker on {HOST}, {a.messages:,} messages a "
            "round, "
            f"{WORKERS} connections x {WINDOW} in flight; group {CONSUMER_GROUP}"
        )
        backs, sends = [], []
        for r in range(a.rounds):
            b, s = _round(work, a.messages)
            backs.append(b)
            sends.append(s)
            print(f"round {r + 1}: send-back {b:,.0f} msgs/s, send {s:,.0f} msgs/s")
        b, s = med(backs), med(sends)
        print(
            f"\n== {a.messages:,} failed deliveries re-stored (CONSUMER_SEND_MSG_BACK 36) against the plain send "
            "(310) of the same messages, 100-byte bodies"
        )
        print(f"send-back     {b:>12,.0f} msgs/s   median of {len(backs)} rounds, 0 errors")
        print(f"plain send    {s:>12,.0f} msgs/s   the same load shape, the same run")
        print(f"  -> send-back = {b / s:.2f}x the plain send (target >= 0.5x)")
        bench.figure(
            f"CONSUMER_SEND_MSG_BACK, {a.messages:,} failed deliveries re-stored",
            b,
            "msgs/s",
            peer="SEND_MESSAGE_V2 of the same messages, same load, same run",
            peer_value=s,
        )


if __name__ == "__main__":
    main()
