"""Benchmark of the broker on the wire (issue 29's targets), each figure beside its peer
measured in the same run.

    python jobs/bench_broker.py [--root DIR] [--rounds R] [--json] [--parts sends,sync,batch,pull,poll,idle,conns]
                                [--messages N] [--sync-messages N] [--batches N] [--pull-messages N]
                                [--poll-messages N] [--holds N] [--idle-s S] [--connections N]
                                [--conn-messages N] [--procs P] [--profile]

The broker runs in a process of its own (``jobs/broker_load.py broker``: ``rmqnet``'s
``launch.main``, 127.0.0.1, port 0, its store under ``ROOT/broker``, ``broker.conf`` written
there); so does the peer of the send figures, a bare server on the same transport that
answers the same frames without storing anything (``jobs/broker_load.py bare``; why that is the
fair peer: see broker_load's docstring). Load comes from ``--procs`` worker processes with
pre-encoded frames (``broker_load.drive``); the open-file limit is raised for the
connections (within the hard limit).

Figures (medians of ``--rounds`` rounds; each round measures the figure and its peer
back to back, so the two see the same machine):

- ``sends``: SEND_MESSAGE_V2 (310), 100-byte bodies, 64 in flight over 4 connections (one
  per worker process, 16 each): msgs/s; peer: the bare server under the same load;
- ``sync``: one producer, one 1 KiB message at a time (a blocking socket, the frame encoded
  beforehand): round trip p50 and p99; peer: the bare server's;
- ``batch``: SEND_BATCH_MESSAGE (320), 1,000 messages of 100 bytes per request, one at a
  time: msgs/s; peer: ``MessageStore.put_batch`` of the same messages in this process
  (a store of its own, the same config);
- ``pull``: PULL_MESSAGE (11) at ``maxMsgNums`` 32 and 1,000 over a filled topic (4 queues,
  a worker process each, 4 pulls in flight): msgs/s; peer: ``read_window(raw=True)`` of the
  same ranges in this process (the broker's byte budget of 256 KiB, read-only open);
- ``poll``: a pull held on an empty queue (suspend flag), then a send to that queue: the time
  from the send to the held pull's answer, p50 and p99; peer: the same sends' round trip;
- ``idle``: ``--holds`` pulls held while nothing arrives: the broker process's CPU time over
  ``--idle-s`` seconds (``/proc/PID/stat``), % of a core; peer: the same broker idle with no
  held pulls (measured first);
- ``conns``: ``--connections`` connections, opened first, then each sending
  ``--conn-messages`` messages one at a time, all at once: msgs/s and errors (non-SUCCESS
  answers, failed or lost connections, unanswered requests); peer: the bare server.

``--profile``: the broker runs under cProfile, switched on (SIGUSR1) for each part's measured
load only and written (SIGUSR2) to ``ROOT/profile-<part>.prof``; the top functions by own
time are printed per request of the part. Figures are wall-clock on this machine; nothing
here is a test threshold.
"""

from __future__ import annotations

import asyncio
import functools
import math
import multiprocessing as mp
import os
import pstats
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from broker_load import (  # jobs/ is this script's directory
    HOST,
    Load,
    Outcome,
    max_offset_cmd,
    parse_ready,
    pull_cmd,
    pull_frame,
    raise_fd_limit,
    send_cmd,
    send_frame,
    uniq_key,
    worker,
)
from harness import Bench

import rmqlog
from rmqnet.client.batch import encode_messages
from rmqnet.remoting import FrameDecoder, RequestCode, ResponseCode, encode_bytes
from rmqnet.remoting.command import decode_json_header
from rmqnet.transport import connect

LOAD = Path(__file__).resolve().parent / "broker_load.py"
PARTS = ("sends", "sync", "batch", "pull", "poll", "idle", "conns")
TOPICS = {"BenchTopic": 4, "BenchSync": 1, "BenchBatch": 4, "BenchPull": 4, "BenchPoll": 1, "BenchIdle": 4}
T = TypeVar("T")
PULL_BYTES = 256 * 1024  # the broker's maxTransferBytesOnMessageInMemory


# ---- the server processes ----------------------------------------------------------------

class Server:
    """A server process of ``broker_load.py`` (its ready line read; SIGTERM to stop)."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = open(log, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen([sys.executable, str(LOAD), *args], stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        try:
            self.port = parse_ready(line)
        except ValueError:
            self.stop()
            raise RuntimeError(f"{args[0]} did not start ({line!r}); see {log}") from None

    def cpu_s(self) -> float:
        """The process's CPU time so far (user + system), from ``/proc/PID/stat``."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Profiler:
    """The broker's cProfile switched on for one part's measured load (``--profile``)."""

    def __init__(self, broker: Server | None, root: Path) -> None:
        self.broker, self.root, self.requests = broker, root, 0

    def __enter__(self) -> Profiler:
        if self.broker is not None:
            self.broker.signal(signal.SIGUSR1)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.broker is None:
            return
        out = self.root / "profile.prof"
        out.unlink(missing_ok=True)
        self.broker.signal(signal.SIGUSR2)
        for _ in range(600):  # the broker writes it from its signal handler
            if out.exists() and out.stat().st_size:
                break
            time.sleep(0.05)
        self.done = out


def print_profile(path: Path, part: str, requests: int, top: int = 15) -> None:
    """The broker's top functions during ``part``, per request: by own time (the loop's wait
    in ``epoll.poll`` left out: that is idle time), then rmqnet's and the store's functions
    by cumulative time."""
    st = pstats.Stats(str(path))
    items = [(k, v) for k, v in st.stats.items() if "epoll" not in k[2]]  # type: ignore[attr-defined]
    busy = sum(v[2] for _, v in items)
    per = 1e6 / max(requests, 1)
    print(f"  profile of the broker's loop thread during {part}: {requests:,} requests, "
          f"{busy * per:,.1f} us busy per request (under cProfile, which inflates Python calls)")

    def show(rows: list[Any]) -> None:
        for (fn, line, name), (_cc, nc, tt, ct, _callers) in rows:
            where = f"{Path(fn).parent.name}/{Path(fn).name}:{line}" if fn != "~" else "builtin"
            print(f"    {tt * per:8.1f} us own {ct * per:9.1f} us cum {nc / max(requests, 1):7.2f} calls  {name}  ({where})")

    print("   by own time:")
    show(sorted(items, key=lambda kv: kv[1][2], reverse=True)[:top])
    ours = [kv for kv in items if "/rmqnet/" in kv[0][0] or "/store/" in kv[0][0]]
    print("   rmqnet's and the store's functions by cumulative time:")
    show(sorted(ours, key=lambda kv: kv[1][3], reverse=True)[:top])


# ---- loads ---------------------------------------------------------------------------------

def run_loads(loads: list[Load]) -> Outcome:
    """Run each load in a worker process of its own, started together; the merged outcome
    (span from the first start to the last end)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(loads))
    results = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(load, barrier, results), daemon=True) for load in loads]
    for p in procs:
        p.start()
    outs = []
    for _ in procs:
        got = results.get(timeout=max(load.timeout_s for load in loads) + 120)
        if isinstance(got, BaseException):
            raise RuntimeError(f"a load worker failed: {got!r}")
        outs.append(got)
    for p in procs:
        p.join()
    merged = Outcome(t0=min(o.t0 for o in outs), t1=max(o.t1 for o in outs))
    for o in outs:
        for c, n in o.codes.items():
            merged.codes[c] = merged.codes.get(c, 0) + n
        merged.messages += o.messages
        merged.failed_connections += o.failed_connections
        merged.unanswered += o.unanswered
    return merged


def rate(o: Outcome) -> float:
    return o.messages / max(o.t1 - o.t0, 1e-9)


class Wire:
    """A blocking connection for one-at-a-time requests (no event loop: the least client time
    in a round trip)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder()
        self.pending: list[Any] = []

    def call(self, frame: bytes) -> dict[str, Any]:
        """Write ``frame``, read one answer; its JSON header."""
        self.sock.sendall(frame)
        while not self.pending:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the server closed the connection")
            self.pending.extend(self.decoder.feed(data))
        return decode_json_header(self.pending.pop(0).header)

    def close(self) -> None:
        self.sock.close()


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def med(xs: list[float]) -> float:
    return float(np.median(np.asarray(xs)))


def check_ok(head: dict[str, Any], what: str) -> None:
    if int(head["code"]) != ResponseCode.SUCCESS:
        raise RuntimeError(f"{what}: answered {head['code']} {head.get('remark')!r}")


# ---- the parts -----------------------------------------------------------------------------

class Run:
    """One run: the servers, the flags, the figures."""

    def __init__(self, bench: Bench, work: Path) -> None:
        self.b, self.a, self.work = bench, bench.args, work
        self.broker: Server | None = None
        self.bare: Server | None = None
        self.root = work / "broker"

    # -- set-up

    def start(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        conf = self.root.parent / "broker.conf"
        # maxTransferCountOnMessageInMemory 1,000: a pull at maxMsgNums 1,000 gets 1,000 (RocketMQ's
        # default 32 would answer 32 whatever it asks; 1,000 x 100-byte records fit the 256 KiB)
        conf.write_text("brokerName=bench\nbrokerClusterName=BenchCluster\nflushDiskType=ASYNC_FLUSH\n"
                        f"mappedFileSizeCommitLog={self.a.segment_mib << 20}\nmaxTransferCountOnMessageInMemory=1000\n")
        self.store_config = rmqlog.StoreConfig(mapped_file_size_commit_log=self.a.segment_mib << 20)
        with rmqlog.MessageStore.open(self.root, self.store_config) as store:  # the topics exist before the broker
            for topic, queues in TOPICS.items():
                store.create_topic(topic, queues)
        profile = ["--profile", str(self.work)] if self.a.profile else []
        self.broker = Server(["broker", str(self.root), str(conf), *profile], self.work / "broker.log")
        self.bare = Server(["bare"], self.work / "bare.log")
        print(f"broker pid {self.broker.proc.pid} at {HOST}:{self.broker.port}; bare server pid "
              f"{self.bare.proc.pid} at {HOST}:{self.bare.port}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")

    def stop(self) -> None:
        for s in (self.broker, self.bare):
            if s is not None:
                s.stop()

    def profiled(self, part: str, requests: int, fn: Callable[[], T]) -> T:
        """``fn()`` (which sends the broker ``requests`` requests), under the broker's profiler
        with ``--profile`` (the top costs then printed per request)."""
        if not self.a.profile:
            return fn()
        prof = Profiler(self.broker, self.work)
        with prof:
            result = fn()
        target = self.work / f"profile-{part}.prof"
        os.replace(prof.done, target)
        print_profile(target, part, requests)
        return result

    # -- sends (310, 64 in flight over 4 connections)

    def sends(self) -> None:
        per_conn = max(1, self.a.messages // 4)

        def load(port: int) -> Outcome:
            return run_loads([Load(port, "send", 1, 16, per_conn, "BenchTopic", queues=4, body_size=100)
                              for _ in range(4)])

        assert self.broker is not None and self.bare is not None
        broker, bare, port = [], [], self.broker.port
        for _ in range(self.a.rounds):
            bare.append(load(self.bare.port))
            broker.append(self.profiled("sends", 4 * per_conn, lambda: load(port)))
        for name, outs in (("broker", broker), ("bare", bare)):
            errors = sum(o.errors for o in outs)
            if errors:
                raise RuntimeError(f"sends to the {name} server: {errors} errors ({outs[-1].codes})")
        r, p = med([rate(o) for o in broker]), med([rate(o) for o in bare])
        print(f"\n== single sends (310), 100-byte bodies, 64 in flight over 4 connections, {4 * per_conn:,} a round")
        print(f"broker        {r:>12,.0f} msgs/s   median of {len(broker)} rounds, 0 errors")
        print(f"bare server   {p:>12,.0f} msgs/s   the same frames answered without storing (rmqnet.transport)")
        print(f"  -> broker = {r / p:.0%} of the bare server")
        self.b.figure("SEND_MESSAGE_V2, 100-byte bodies, 64 in flight over 4 connections", r, "msgs/s",
                      peer="bare server (rmqnet.transport, nothing stored), same load", peer_value=p)

    # -- one producer, one 1 KiB message at a time

    def sync(self) -> None:
        n = self.a.sync_messages
        body = os.urandom(1024)
        frames = [send_frame("BenchSync", 0, body, i + 1, uniq=uniq_key(0, i)) for i in range(min(n, 1024))]

        def rtts(port: int) -> list[float]:
            w = Wire(port)
            try:
                for f in frames[:50]:  # a warm-up (connection, first segment pages)
                    check_ok(w.call(f), "sync send")
                out = []
                for i in range(n):
                    f = frames[i % len(frames)]
                    t0 = time.perf_counter_ns()
                    head = w.call(f)
                    out.append((time.perf_counter_ns() - t0) / 1e6)
                    check_ok(head, "sync send")
                return out
            finally:
                w.close()

        assert self.broker is not None and self.bare is not None
        broker: list[float] = []
        bare: list[float] = []
        port = self.broker.port
        for _ in range(self.a.rounds):
            bare.extend(rtts(self.bare.port))
            broker.extend(self.profiled("sync", n + 50, lambda: rtts(port)))
        print(f"\n== one producer, synchronous, 1 KiB bodies: {len(broker):,} round trips each")
        for q in (50, 99):
            r, p = pct(broker, q), pct(bare, q)
            print(f"round trip p{q}  broker {r:.3f} ms   bare server {p:.3f} ms   (+{(r - p) * 1000:.0f} us)")
            self.b.figure(f"sync send 1 KiB, round trip p{q}", r, "ms",
                          peer=f"bare server round trip p{q}", peer_value=p)

    # -- batches (320) beside put_batch

    def batch(self) -> None:
        n, size = self.a.batches, 1000
        bodies = [pa.array([os.urandom(100) for _ in range(size)], pa.binary()) for _ in range(4)]
        empty = pa.array([""] * size, pa.string())
        frames = [send_frame("BenchBatch", i % 4, encode_messages(bodies[i % 4], empty), i + 1,
                             code=RequestCode.SEND_BATCH_MESSAGE, batch=True) for i in range(8)]
        tables = [pa.table({"topic": pa.array(["BenchBatch"] * size), "body": bodies[i % 4],
                            "queueId": pa.array([i % 4] * size, pa.int32())}) for i in range(8)]
        peer_root = self.work / "put_batch"
        shutil.rmtree(peer_root, ignore_errors=True)

        def wire() -> float:
            assert self.broker is not None
            w = Wire(self.broker.port)
            try:
                check_ok(w.call(frames[0]), "batch")
                t0 = time.perf_counter()
                for i in range(n):
                    check_ok(w.call(frames[i % len(frames)]), "batch")
                return n * size / (time.perf_counter() - t0)
            finally:
                w.close()

        def local(store: rmqlog.MessageStore) -> float:
            store.put_batch(tables[0])
            t0 = time.perf_counter()
            for i in range(n):
                store.put_batch(tables[i % len(tables)])
            return n * size / (time.perf_counter() - t0)

        broker, peer = [], []
        with rmqlog.MessageStore.open(peer_root, self.store_config) as store:
            store.create_topic("BenchBatch", 4)
            for _ in range(self.a.rounds):
                peer.append(local(store))
                broker.append(self.profiled("batch", n + 1, wire))
        shutil.rmtree(peer_root, ignore_errors=True)
        r, p = med(broker), med(peer)
        print(f"\n== batch sends (320), {size:,} messages of 100 bytes each, one at a time, {n:,} batches a round")
        print(f"broker        {r:>12,.0f} msgs/s   median of {len(broker)} rounds")
        print(f"put_batch     {p:>12,.0f} msgs/s   the same messages in this process (a store of its own)")
        print(f"  -> broker = {r / p:.0%} of put_batch")
        self.b.figure("SEND_BATCH_MESSAGE, 1,000 x 100-byte bodies", r, "msgs/s",
                      peer="MessageStore.put_batch of the same messages, in-process", peer_value=p)

    # -- pulls at maxMsgNums 32 and 1,000 beside read_window(raw=True)

    def pull(self) -> None:
        assert self.broker is not None
        per_queue = max(1000, self.a.pull_messages // 4)
        bodies = pa.array([os.urandom(100) for _ in range(1000)], pa.binary())
        empty = pa.array([""] * 1000, pa.string())
        w = Wire(self.broker.port)
        try:  # fill: 320 batches of 1,000 to each queue
            for q in range(4):
                frame = send_frame("BenchPull", q, encode_messages(bodies, empty), q + 1,
                                   code=RequestCode.SEND_BATCH_MESSAGE, batch=True)
                for _ in range(math.ceil(per_queue / 1000)):
                    check_ok(w.call(frame), "fill")
            # every message dispatched before a pull (the dispatcher runs behind the puts)
            while any(int(w.call(_frame30("BenchPull", q))["extFields"]["offset"]) < per_queue for q in range(4)):
                time.sleep(0.01)
            strides = {}
            for m in (32, 1000):
                head = w.call(pull_frame("BenchPull", 0, 0, m, 1))
                check_ok(head, "pull probe")
                strides[m] = int(head["extFields"]["nextBeginOffset"])
        finally:
            w.close()
        print(f"\n== pulls (11), 4 queues of {per_queue:,} messages (100-byte bodies), a worker process per queue, "
              "4 pulls in flight each")
        for m in (32, 1000):
            stride = strides[m]
            requests = per_queue // stride
            got: list[Outcome] = []
            peer = []
            for _ in range(self.a.rounds):
                peer.append(self._read_window_rate("BenchPull", m, requests * stride))
                loads = [Load(self.broker.port, "pull", 1, 4, requests, "BenchPull", queue_ids=(q,), max_msg_nums=m,
                              stride=stride) for q in range(4)]
                got.append(self.profiled(f"pull-{m}", 4 * requests, functools.partial(run_loads, loads)))
            errors = sum(o.errors for o in got)
            if errors or any(o.messages != 4 * requests * stride for o in got):
                raise RuntimeError(f"pulls at {m}: {errors} errors, {[o.messages for o in got]} messages")
            r, p = med([rate(o) for o in got]), med(peer)
            print(f"maxMsgNums {m:>5}: broker {r:>12,.0f} msgs/s ({stride} messages per answer)   "
                  f"read_window(raw=True) {p:>12,.0f} msgs/s ({min(m, 1000)} per read)  -> {r / p:.0%}")
            self.b.figure(f"PULL_MESSAGE, maxMsgNums {m}", r, "msgs/s",
                          peer=f"read_window(raw=True) of the same ranges, max_count {m}, in-process", peer_value=p)

    def _read_window_rate(self, topic: str, max_count: int, per_queue: int) -> float:
        """read_window(raw=True) of each queue's first ``per_queue`` messages, windows of
        ``max_count`` within the broker's byte budget, through a read-only open."""
        with rmqlog.MessageStore.open(self.root, self.store_config, read_only=True) as store:
            store.read_window(topic, 0, 0, max_count=max_count, max_bytes=PULL_BYTES, raw=True)
            n = 0
            t0 = time.perf_counter()
            for q in range(4):
                off = 0
                while off < per_queue:
                    res = store.read_window(topic, q, off, max_count=min(max_count, per_queue - off),
                                            max_bytes=PULL_BYTES, raw=True)
                    assert res.records is not None and len(res.records), res.status
                    n += len(res.records)
                    off = res.next_begin_offset
            return n / (time.perf_counter() - t0)

    # -- long polling: a send to a held consumer's hand

    def poll(self) -> None:
        assert self.broker is not None
        n = self.a.poll_messages

        async def measure() -> tuple[list[float], list[float]]:
            assert self.broker is not None
            cons = await connect(HOST, self.broker.port)
            prod = await connect(HOST, self.broker.port)
            hand, rtt = [], []
            try:
                head = await cons.invoke(max_offset_cmd("BenchPoll", 0), 10)
                offset = int(head.ext_fields["offset"])
                body = os.urandom(100)
                for i in range(n + 10):
                    pull = asyncio.ensure_future(cons.invoke(pull_cmd("BenchPoll", 0, offset, 32, 0, suspend_ms=60_000), 90))
                    await cons.invoke(max_offset_cmd("BenchPoll", 0), 10)  # the pull before it is held now
                    if pull.done():
                        raise RuntimeError(f"the pull at {offset} was not held: {pull.result()}")
                    stamps: dict[str, int] = {}
                    pull.add_done_callback(functools.partial(_stamp, stamps))
                    t0 = time.perf_counter_ns()
                    sent = await prod.invoke(send_cmd("BenchPoll", 0, body, 0, uniq=uniq_key(1, i)), 10)
                    t_sent = time.perf_counter_ns()
                    got = await pull
                    if sent.code != ResponseCode.SUCCESS or got.code != ResponseCode.SUCCESS:
                        raise RuntimeError(f"send {sent.code} {sent.remark!r}, held pull {got.code} {got.remark!r}")
                    offset = int(got.ext_fields["nextBeginOffset"])
                    if i >= 10:  # the first ten warm up
                        hand.append((stamps["pull"] - t0) / 1e6)
                        rtt.append((t_sent - t0) / 1e6)
            finally:
                cons.close()
                prod.close()
            return hand, rtt

        hand: list[float] = []
        rtt: list[float] = []
        for _ in range(self.a.rounds):
            got = self.profiled("poll", 3 * (n + 10), lambda: asyncio.run(measure()))
            hand.extend(got[0])
            rtt.extend(got[1])
        print(f"\n== long polling: a pull held on an empty queue, then one send to it, {len(hand):,} times")
        for q in (50, 99):
            h, r = pct(hand, q), pct(rtt, q)
            print(f"send to the held consumer's hand p{q} {h:.3f} ms   the send's own round trip p{q} {r:.3f} ms")
            self.b.figure(f"long polling, send to a held consumer's hand p{q}", h, "ms",
                          peer=f"the same sends' round trip p{q}", peer_value=r)

    # -- CPU of held pulls while idle

    def idle(self) -> None:
        assert self.broker is not None
        holds, idle_s = self.a.holds, self.a.idle_s
        per_conn = 500
        conns = math.ceil(holds / per_conn)

        def cpu_over(seconds: float) -> float:
            assert self.broker is not None
            c0, t0 = self.broker.cpu_s(), time.monotonic()
            time.sleep(seconds)  # the measured interval itself: the broker idle
            return (self.broker.cpu_s() - c0) / (time.monotonic() - t0)

        async def held_then_idle() -> float:
            assert self.broker is not None
            opened = [await connect(HOST, self.broker.port) for _ in range(conns)]
            pulls = []
            try:
                for i, c in enumerate(opened):
                    k = min(per_conn, holds - i * per_conn)
                    pulls += [asyncio.ensure_future(c.invoke(pull_cmd("BenchIdle", j % 4, 0, 32, 0, suspend_ms=3_600_000), None))
                              for j in range(k)]
                for c in opened:  # every pull written before this is held
                    await c.invoke(max_offset_cmd("BenchIdle", 0), 30)
                early = [p for p in pulls if p.done()]
                if early:
                    raise RuntimeError(f"{len(early)} pulls were answered instead of held: {early[0].result()}")
                return await asyncio.get_running_loop().run_in_executor(None, cpu_over, idle_s)
            finally:
                for c in opened:
                    c.close()
                for p in pulls:
                    p.cancel()

        base, held = [], []
        for _ in range(self.a.rounds):
            base.append(cpu_over(idle_s))
            held.append(asyncio.run(held_then_idle()))
        r, p = med(held) * 100, med(base) * 100
        print(f"\n== {holds:,} pulls held ({conns} connections), nothing arriving: the broker's CPU over {idle_s:g} s")
        print(f"held pulls    {r:6.2f} % of a core   (median of {len(held)} rounds)")
        print(f"no held pull  {p:6.2f} % of a core   the same broker idle, measured first")
        self.b.figure(f"{holds:,} held pulls, broker CPU while idle", r, "% of a core",
                      peer="the broker idle with no held pulls", peer_value=p)

    # -- many connections sending at once

    def conns(self) -> None:
        assert self.broker is not None and self.bare is not None
        total, k, procs = self.a.connections, self.a.conn_messages, self.a.procs
        raise_fd_limit(total + 256)
        split = [total // procs + (1 if i < total % procs else 0) for i in range(procs)]

        def load(port: int) -> Outcome:
            return run_loads([Load(port, "send", c, 1, k, "BenchTopic", queues=4, body_size=100)
                              for c in split if c])

        broker: list[Outcome] = []
        bare: list[Outcome] = []
        port = self.broker.port
        for _ in range(self.a.rounds):
            bare.append(load(self.bare.port))
            broker.append(self.profiled("conns", total * k, lambda: load(port)))
        r, p = med([rate(o) for o in broker]), med([rate(o) for o in bare])
        e, pe = sum(o.errors for o in broker), sum(o.errors for o in bare)
        print(f"\n== {total:,} connections ({procs} worker processes), opened first, then each sending {k} messages "
              "one at a time, all at once")
        print(f"broker        {r:>12,.0f} msgs/s   {e} errors {dict(sorted(broker[-1].codes.items()))}")
        print(f"bare server   {p:>12,.0f} msgs/s   {pe} errors")
        self.b.figure(f"{total:,} connections sending at once", r, "msgs/s",
                      peer="bare server, same connections and load", peer_value=p)
        self.b.figure(f"{total:,} connections sending at once, errors", float(e), "errors",
                      peer="bare server errors", peer_value=float(pe))


def _stamp(stamps: dict[str, int], _fut: Any) -> None:
    stamps.setdefault("pull", time.perf_counter_ns())


def _frame30(topic: str, queue_id: int) -> bytes:
    return encode_bytes(max_offset_cmd(topic, queue_id))


def main() -> None:
    b = Bench("bench_broker", __doc__, rounds=3, rounds_help="rounds of each figure and its peer (medians printed)")
    b.add_argument("--parts", default=",".join(PARTS), help=f"which figures, comma-separated (of {','.join(PARTS)})")
    b.add_argument("--messages", type=int, default=20_000, help="single sends (310) a round, over 4 connections")
    b.add_argument("--sync-messages", type=int, default=1000, help="synchronous 1 KiB sends a round")
    b.add_argument("--batches", type=int, default=50, help="320 batches of 1,000 messages a round")
    b.add_argument("--pull-messages", type=int, default=100_000, help="messages pulled, over 4 queues")
    b.add_argument("--poll-messages", type=int, default=200, help="sends to a held pull a round")
    b.add_argument("--holds", type=int, default=10_000, help="pulls held for the idle CPU figure")
    b.add_argument("--idle-s", type=float, default=5.0, help="seconds of each idle CPU measurement")
    b.add_argument("--connections", type=int, default=1000, help="connections sending at once")
    b.add_argument("--conn-messages", type=int, default=10, help="messages each of those connections sends")
    b.add_argument("--procs", type=int, default=4, help="worker processes for the many connections")
    b.add_argument("--segment-mib", type=int, default=1024, help="commitlog segment size (mappedFileSizeCommitLog)")
    b.add_argument("--profile", action="store_true", help="profile the broker per part (see above)")
    args = b.parse()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        b.parser.error(f"--parts: unknown {unknown[0]!r} (of {','.join(PARTS)})")
    with b.run(parsed=True) as work:
        raise_fd_limit(args.connections + 256)
        run = Run(b, work)
        try:
            run.start()
            for part in parts:
                getattr(run, part)()
        finally:
            run.stop()


if __name__ == "__main__":
    main()
