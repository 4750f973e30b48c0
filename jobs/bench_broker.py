"""Benchmark of the broker on the wire (the broker's targets), each figure beside its
peers measured in the same run.

    python jobs/bench_broker.py [--root DIR] [--rounds R] [--json] [--profile]
        [--parts sends,sync,inflight,batch,pull,poll,idle,conns,state,cpp,namesrv]
        [--redis-server PATH] [--nats-server PATH] [--cpp-python PATH]  (sizes: --help)

Our broker runs in a process of its own (``jobs/broker_load.py broker``: ``rmqnet``'s
``launch.main``, 127.0.0.1, port 0, its store under ``ROOT/broker``, ASYNC_FLUSH); a second
one under SYNC_FLUSH (``ROOT/broker-sync``) starts when a part needs it. The peers, each in a
process of its own on 127.0.0.1 with a port and a data folder under ROOT, stopped by PID at
the end (``jobs/broker_servers.py``):

- the **bare server** (``broker_load.py bare``): our transport answering the same frames
  without storing anything (why that is the fair peer: broker_load's docstring);
- **Redis Streams** (``redis-server``, two instances: the AOF on with ``appendfsync always``
  and with ``everysec``; RESP over a socket: ``jobs/peers_redis.py``);
- **NATS JetStream** (``nats-server -js``, file storage, stream ``BENCH``; acked publishes:
  ``PUB`` with a reply inbox answered by JetStream's ack; ``jobs/peers_nats.py``).

A peer whose binary is missing (not on PATH, or ``--redis-server``/``--nats-server``/
``--cpp-python`` naming nothing) is said once, and its figures go on without it. Every
system is driven by the same client shape: one-at-a-time figures over a blocking socket with
TCP_NODELAY and requests encoded before the clock starts; concurrent figures by the same
worker processes (spawned once per run, ``broker_load.LoadPool``), connections and requests
in flight, frames encoded before the start, one JSON (or RESP) decode per answer.

Figures: medians of ``--rounds`` rounds (each round measures a figure and its peers back to
back, so they see the same machine), one printed line ``ours X  peer Y (ratio)`` per present
peer, and under ``--json`` one line per (figure, peer):

- ``sends``: SEND_MESSAGE_V2 (310), 100-byte bodies, 64 in flight over 4 connections (one
  per worker process, 16 each): msgs/s; peer: the bare server under the same load;
- ``sync``: one producer, one 1 KiB message at a time: round trip p50 and p99 and the server's
  CPU per message (all its threads, ``/proc/PID/task/*/schedstat``, over the measured sends),
  of our ASYNC_FLUSH and SYNC_FLUSH brokers; peers: the bare server, NATS (acked publish),
  Redis ``XADD`` under ``always`` and ``everysec``;
- ``inflight``: 1 KiB sends, 64 in flight over 4 connections: msgs/s of both our brokers;
  peers: Redis (``everysec``, ``always``) and NATS under the same load;
- ``batch``: SEND_BATCH_MESSAGE (320) of 1,000 x 100 bytes, one at a time, beside
  ``MessageStore.put_batch`` of the same messages in this process; and 320 of 100 x 1 KiB
  beside Redis ``everysec`` with a pipeline of 100 ``XADD`` at a time;
- ``pull``: PULL_MESSAGE (11) at ``maxMsgNums`` 32 and 1,000 over 4 filled queues (100-byte
  bodies, a worker process per queue, 4 pulls in flight): msgs/s; peers:
  ``read_window(raw=True)`` of the same ranges in this process (the broker's 256 KiB budget);
  at 32 also Redis ``XREAD COUNT 32`` (``everysec``) and a NATS pull consumer's fetch of 32,
  same load; at 1,000 the target's 0.4 M msgs/s (a 4.x broker's figure, printed for
  reference, not measured);
- ``poll``: a consumer waiting on an empty queue (ours: a held pull, proven held by a
  GET_MAX_OFFSET answered behind it; Redis: ``XREAD BLOCK``, proven blocked by ``INFO
  clients``; NATS: a JetStream push consumer, subscribed), then one send from another
  connection: the time from the send's write to the consumer's complete answer, p50 and p99;
  peers: our send's own round trip, Redis's and NATS's consumers measured the same way;
- ``idle``: ``--holds`` pulls held while nothing arrives: the broker's CPU over ``--idle-s``
  seconds, % of a core; peer: the same broker idle with no held pulls (measured first);
- ``conns``: ``--connections`` connections, opened first, then each sending
  ``--conn-messages`` messages one at a time, all at once: msgs/s and errors; peer: the bare
  server;
- ``state``: a send, a pull with the commit flag, an offset query (14) and a heartbeat (34),
  one at a time: p50 at ``--state-topics`` topics, ``--state-groups`` groups and
  ``--state-offsets`` offset entries beside p50 at 10 topics, and each broker's start time
  (the state written into the stores' files before the brokers start: ``jobs/broker_state.py``);
- ``cpp``: our client shape's sync send of 1 KiB beside Apache's C++ client's ``send_sync``
  (PyPI ``rocketmq`` 0.4.4 in ``.venv-rocketmq``: ``make clients``), p50 and p99, against one
  broker, all in a loopback-only network namespace (``jobs/broker_clients.py``; needs root);
- ``namesrv``: ``rmqlog namesrv``'s resident memory after start and after registrations and
  route queries; peers: Redis's and NATS's after their start and now.

``--profile``: our ASYNC_FLUSH broker runs under cProfile, switched on (SIGUSR1) for each
part's measured load only and written (SIGUSR2) to ``ROOT/profile-<part>.prof``; the top
functions by own time are printed per request of the part. Figures are wall-clock on this
machine; nothing here is a test threshold.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
import pstats
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import broker_clients
import broker_latency
import broker_state
import pyarrow as pa
from broker_load import (  # jobs/ is this script's directory
    HOST,
    Load,
    LoadPool,
    Outcome,
    Wire,
    check_ok,
    max_offset_cmd,
    pull_cmd,
    pull_frame,
    raise_fd_limit,
    rate,
    run_loads,
    send_frame,
)
from broker_servers import LABELS, Peers, Server, Servers, med, report
from harness import Bench
from peers_nats import NatsWire, pub, pull_consumer, stream_messages, subject
from peers_redis import RedisWire, command, xadd

import rmqlog
from rmqnet.client import encode_messages
from rmqnet.remoting import RequestCode, encode_bytes
from rmqnet.transport import connect

CPP_PYTHON = Path(__file__).resolve().parent.parent / ".venv-rocketmq" / "bin" / "python"
PARTS = ("sends", "sync", "inflight", "batch", "pull", "poll", "idle", "conns", "state", "cpp", "namesrv")
T = TypeVar("T")
PULL_BYTES = 256 * 1024  # the broker's maxTransferBytesOnMessageInMemory
#: the target for pulls at 1,000 (a 4.x broker's figure), printed beside ours for reference
PULL_1000_REFERENCE = 400_000.0


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
    print(
        f"  profile of the broker's loop thread during {part}: {requests:,} requests, "
        f"{busy * per:,.1f} us busy per request (under cProfile, which inflates Python calls)"
    )

    def show(rows: list[Any]) -> None:
        for (fn, line, name), (_cc, nc, tt, ct, _callers) in rows:
            where = f"{Path(fn).parent.name}/{Path(fn).name}:{line}" if fn != "~" else "builtin"
            print(
                f"    {tt * per:8.1f} us own {ct * per:9.1f} us cum {nc / max(requests, 1):7.2f} calls  {name}  "
                f"({where})"
            )

    print("   by own time:")
    show(sorted(items, key=lambda kv: kv[1][2], reverse=True)[:top])
    ours = [kv for kv in items if "/rmqnet/" in kv[0][0] or "/store/" in kv[0][0]]
    print("   rmqnet's and the store's functions by cumulative time:")
    show(sorted(ours, key=lambda kv: kv[1][3], reverse=True)[:top])


# ---- the parts -----------------------------------------------------------------------------


class Run:
    """One run: the servers, the flags, the figures."""

    def __init__(self, bench: Bench, work: Path) -> None:
        self.b, self.a, self.work = bench, bench.args, work
        self.peers = Peers(self.a.redis_server, self.a.nats_server, self.a.cpp_python)
        self.servers = Servers(work, self.peers, segment_mib=self.a.segment_mib, profile=self.a.profile)
        self.store_config = self.servers.store_config()
        self.root = self.servers.root("async")
        self.broker: Server | None = None
        self.bare: Server | None = None
        #: the load's worker processes, spawned once for the run
        self.pool = LoadPool()

    # -- set-up

    def start(self) -> None:
        """Our ASYNC_FLUSH broker and the bare server; the other servers start when a part
        first needs them."""
        broker, bare = self.servers.get("async"), self.servers.get("bare")
        assert isinstance(broker, Server) and isinstance(bare, Server)
        self.broker, self.bare = broker, bare
        print(
            f"broker pid {broker.pid} at {HOST}:{broker.port}; bare server pid "
            f"{bare.pid} at {HOST}:{bare.port}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}"
        )

    def stop(self) -> None:
        self.pool.close()
        self.servers.stop_all()

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
            return run_loads(
                [Load(port, "send", 1, 16, per_conn, "BenchTopic", queues=4, body_size=100) for _ in range(4)],
                self.pool,
            )

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
        self.b.figure(
            "SEND_MESSAGE_V2, 100-byte bodies, 64 in flight over 4 connections",
            r,
            "msgs/s",
            peer="bare server (rmqnet.transport, nothing stored), same load",
            peer_value=p,
        )

    # -- the parts of other modules

    def sync(self) -> None:
        broker_latency.sync(self)

    def inflight(self) -> None:
        broker_latency.inflight(self)

    def poll(self) -> None:
        broker_latency.poll(self)

    def state(self) -> None:
        broker_state.state(self)

    def cpp(self) -> None:
        broker_clients.cpp(self)

    def namesrv(self) -> None:
        broker_clients.namesrv(self)

    # -- batches (320) beside put_batch

    def batch(self) -> None:
        n, size = self.a.batches, 1000
        bodies = [pa.array([os.urandom(100) for _ in range(size)], pa.binary()) for _ in range(4)]
        empty = pa.array([""] * size, pa.string())
        frames = [
            send_frame(
                "BenchBatch",
                i % 4,
                encode_messages(bodies[i % 4], empty),
                i + 1,
                code=RequestCode.SEND_BATCH_MESSAGE,
                batch=True,
            )
            for i in range(8)
        ]
        tables = [
            pa.table(
                {
                    "topic": pa.array(["BenchBatch"] * size),
                    "body": bodies[i % 4],
                    "queueId": pa.array([i % 4] * size, pa.int32()),
                }
            )
            for i in range(8)
        ]
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
        self.b.figure(
            "SEND_BATCH_MESSAGE, 1,000 x 100-byte bodies",
            r,
            "msgs/s",
            peer="MessageStore.put_batch of the same messages, in-process",
            peer_value=p,
        )
        self._batch100()

    def _batch100(self) -> None:
        """320 requests of 100 x 1 KiB, one at a time, beside a pipeline of 100 XADD to Redis
        (appendfsync everysec), one at a time."""
        n, size = self.a.batches100, 100
        bodies = [pa.array([os.urandom(1024) for _ in range(size)], pa.binary()) for _ in range(4)]
        empty = pa.array([""] * size, pa.string())
        frames = [
            send_frame(
                "BenchBatch100",
                i % 4,
                encode_messages(bodies[i % 4], empty),
                i + 1,
                code=RequestCode.SEND_BATCH_MESSAGE,
                batch=True,
            )
            for i in range(8)
        ]
        pipes = [b"".join(xadd(f"BenchBatch100:{i % 4}", b) for b in bodies[i % 4].to_pylist()) for i in range(8)]

        def ours() -> float:
            assert self.broker is not None
            w = Wire(self.broker.port)
            try:
                check_ok(w.call(frames[0]), "batch of 100")
                t0 = time.perf_counter()
                for i in range(n):
                    check_ok(w.call(frames[i % len(frames)]), "batch of 100")
                return n * size / (time.perf_counter() - t0)
            finally:
                w.close()

        def redis(port: int) -> float:
            w = RedisWire(port)
            try:
                t0 = time.perf_counter()
                for i in range(n):
                    w.send(pipes[i % len(pipes)])
                    for _ in range(size):
                        w.read()  # an error reply raises
                return n * size / (time.perf_counter() - t0)
            finally:
                w.close()

        broker, peer = [], []
        for _ in range(self.a.rounds):
            if (srv := self.servers.get("redis-everysec")) is not None:
                peer.append(redis(srv.port))
            broker.append(self.profiled("batch100", n + 1, ours))
        print(
            f"\n== batch sends (320), {size} messages of 1 KiB each, one at a time, {n:,} batches a round, "
            f"medians of {self.a.rounds} rounds"
        )
        report(
            self.b,
            "SEND_BATCH_MESSAGE, 100 x 1 KiB bodies",
            med(broker),
            "msgs/s",
            [(f"{LABELS['redis-everysec']}, a pipeline of 100 XADD at a time", med(peer) if peer else None)],
        )

    # -- pulls at maxMsgNums 32 and 1,000 beside read_window(raw=True)

    def pull(self) -> None:
        assert self.broker is not None
        per_queue = max(1000, self.a.pull_messages // 4)
        bodies = pa.array([os.urandom(100) for _ in range(1000)], pa.binary())
        empty = pa.array([""] * 1000, pa.string())
        w = Wire(self.broker.port)
        try:  # fill: 320 batches of 1,000 to each queue
            for q in range(4):
                frame = send_frame(
                    "BenchPull",
                    q,
                    encode_messages(bodies, empty),
                    q + 1,
                    code=RequestCode.SEND_BATCH_MESSAGE,
                    batch=True,
                )
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
        redis, nats = self._fill_peers(per_queue)
        print(
            f"\n== pulls (11), 4 queues of {per_queue:,} messages (100-byte bodies), a worker process per queue, "
            f"4 pulls in flight each, medians of {self.a.rounds} rounds"
        )
        for m in (32, 1000):
            stride = strides[m]
            requests = per_queue // stride
            got: list[Outcome] = []
            peer, redis_rates, nats_rates = [], [], []
            for rnd in range(self.a.rounds):
                peer.append(self._read_window_rate("BenchPull", m, requests * stride))
                loads = [
                    Load(
                        self.broker.port,
                        "pull",
                        1,
                        4,
                        requests,
                        "BenchPull",
                        queue_ids=(q,),
                        max_msg_nums=m,
                        stride=stride,
                    )
                    for q in range(4)
                ]
                got.append(self.profiled(f"pull-{m}", 4 * requests, functools.partial(run_loads, loads, self.pool)))
                if m == 32 and redis is not None:
                    redis_rates.append(self._peer_pull_rate(redis, "xread", "BenchPull", per_queue))
                if m == 32 and nats is not None:
                    nats_rates.append(self._peer_pull_rate(nats, "jsfetch", f"BenchPull-r{rnd}", per_queue))
            errors = sum(o.errors for o in got)
            if errors or any(o.messages != 4 * requests * stride for o in got):
                raise RuntimeError(f"pulls at {m}: {errors} errors, {[o.messages for o in got]} messages")
            r, p = med([rate(o) for o in got]), med(peer)
            print(
                f"maxMsgNums {m:>5}: broker {r:>12,.0f} msgs/s ({stride} messages per answer)   "
                f"read_window(raw=True) {p:>12,.0f} msgs/s ({min(m, 1000)} per read)  -> {r / p:.0%}"
            )
            peers: list[tuple[str, float | None]] = [
                (f"read_window(raw=True) of the same ranges, max_count {m}, in-process", p)
            ]
            if m == 32:
                peers += [
                    (
                        f"{LABELS['redis-everysec']}, XREAD COUNT 32, same load",
                        med(redis_rates) if redis_rates else None,
                    ),
                    (
                        f"{LABELS['nats']}, pull consumer fetch of 32, same load",
                        med(nats_rates) if nats_rates else None,
                    ),
                ]
            else:
                peers.append(
                    (
                        "the target's 0.4 M msgs/s, a 4.x broker's figure (for reference, not measured here)",
                        PULL_1000_REFERENCE,
                    )
                )
            report(self.b, f"PULL_MESSAGE, maxMsgNums {m}", r, "msgs/s", peers)

    def _fill_peers(self, per_queue: int) -> tuple[int | None, int | None]:
        """The pull figures' peers filled with ``per_queue`` 100-byte messages in each of 4
        queues: Redis (everysec) streams ``BenchPull:<q>`` with ids ``0-1, 0-2, ...`` (pipelines
        of 1,000 XADD); NATS subjects ``bench.BenchPull.<q>`` (publishes without a reply, then
        the stream's count waited for). Their ports (None: absent)."""
        body = os.urandom(100)
        redis = self.servers.get("redis-everysec")
        if redis is not None:
            w = RedisWire(redis.port)
            try:
                for q in range(4):
                    w.call(command("DEL", f"BenchPull:{q}"))
                    for lo in range(0, per_queue, 1000):
                        hi = min(per_queue, lo + 1000)
                        w.send(b"".join(xadd(f"BenchPull:{q}", body, f"0-{i + 1}") for i in range(lo, hi)))
                        for _ in range(lo, hi):
                            w.read()
            finally:
                w.close()
        nats = self.servers.get("nats")
        if nats is not None:
            nw = NatsWire(nats.port, "fill")
            try:
                want = stream_messages(nw) + 4 * per_queue
                for q in range(4):
                    frame = pub(subject("BenchPull", q), body)
                    for lo in range(0, per_queue, 1000):
                        nw.send(frame * (min(per_queue, lo + 1000) - lo))
                deadline = time.monotonic() + 120
                while stream_messages(nw) < want:  # JetStream stores a publish without a reply after the PUB is read
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"NATS holds {stream_messages(nw)} messages, not {want}")
                    time.sleep(0.01)
                for r in range(self.a.rounds):
                    for q in range(4):
                        pull_consumer(nw, f"BenchPull-r{r}-{q}", subject("BenchPull", q))
            finally:
                nw.close()
        return (None if redis is None else redis.port), (None if nats is None else nats.port)

    def _peer_pull_rate(self, port: int, kind: str, topic: str, per_queue: int) -> float:
        """Reads of 32 of each of 4 queues, a worker process per queue, 4 in flight: msgs/s."""
        requests = per_queue // 32
        out = run_loads(
            [Load(port, kind, 1, 4, requests, topic, queue_ids=(q,), max_msg_nums=32, stride=32) for q in range(4)],
            self.pool,
        )
        if out.errors or out.messages != 4 * requests * 32:
            raise RuntimeError(f"{kind} reads of 32: {out.errors} errors ({out.codes}), {out.messages} messages")
        return rate(out)

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
                    res = store.read_window(
                        topic, q, off, max_count=min(max_count, per_queue - off), max_bytes=PULL_BYTES, raw=True
                    )
                    assert res.records is not None and len(res.records), res.status
                    n += len(res.records)
                    off = res.next_begin_offset
            return n / (time.perf_counter() - t0)

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
                    pulls += [
                        asyncio.ensure_future(
                            c.invoke(pull_cmd("BenchIdle", j % 4, 0, 32, 0, suspend_ms=3_600_000), None)
                        )
                        for j in range(k)
                    ]
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
        self.b.figure(
            f"{holds:,} held pulls, broker CPU while idle",
            r,
            "% of a core",
            peer="the broker idle with no held pulls",
            peer_value=p,
        )

    # -- many connections sending at once

    def conns(self) -> None:
        assert self.broker is not None and self.bare is not None
        total, k, procs = self.a.connections, self.a.conn_messages, self.a.procs
        raise_fd_limit(total + 256)
        split = [total // procs + (1 if i < total % procs else 0) for i in range(procs)]

        def load(port: int) -> Outcome:
            return run_loads(
                [Load(port, "send", c, 1, k, "BenchTopic", queues=4, body_size=100) for c in split if c], self.pool
            )

        broker: list[Outcome] = []
        bare: list[Outcome] = []
        port = self.broker.port
        for _ in range(self.a.rounds):
            bare.append(load(self.bare.port))
            broker.append(self.profiled("conns", total * k, lambda: load(port)))
        r, p = med([rate(o) for o in broker]), med([rate(o) for o in bare])
        e, pe = sum(o.errors for o in broker), sum(o.errors for o in bare)
        print(
            f"\n== {total:,} connections ({procs} worker processes), opened first, then each sending {k} messages "
            "one at a time, all at once"
        )
        print(f"broker        {r:>12,.0f} msgs/s   {e} errors {dict(sorted(broker[-1].codes.items()))}")
        print(f"bare server   {p:>12,.0f} msgs/s   {pe} errors")
        self.b.figure(
            f"{total:,} connections sending at once",
            r,
            "msgs/s",
            peer="bare server, same connections and load",
            peer_value=p,
        )
        self.b.figure(
            f"{total:,} connections sending at once, errors",
            float(e),
            "errors",
            peer="bare server errors",
            peer_value=float(pe),
        )


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
    b.add_argument("--inflight-messages", type=int, default=8000, help="1 KiB sends a round with 64 in flight")
    b.add_argument("--batches100", type=int, default=100, help="320 batches of 100 x 1 KiB a round")
    b.add_argument("--state-topics", type=int, default=10_000, help="topics of the large state")
    b.add_argument("--state-groups", type=int, default=10_000, help="consumer groups of the large state")
    b.add_argument("--state-offsets", type=int, default=100_000, help="offset entries of the large state")
    b.add_argument("--state-filled", type=int, default=0, help="topics of the large state holding a message each")
    b.add_argument("--state-requests", type=int, default=200, help="requests of each kind and state a round, at most")
    b.add_argument("--state-seconds", type=float, default=2.0, help="seconds of each kind and state a round, at most")
    b.add_argument("--cpp-messages", type=int, default=500, help="synchronous sends a round from the C++ client")
    b.add_argument("--namesrv-brokers", type=int, default=10, help="brokers registering with the name server")
    b.add_argument("--namesrv-topics", type=int, default=1000, help="topics each of those brokers registers")
    b.add_argument("--namesrv-routes", type=int, default=1000, help="route queries the name server answers")
    b.add_argument("--redis-server", default=None, help="redis-server binary (default: redis-server on PATH)")
    b.add_argument("--nats-server", default=None, help="nats-server binary (default: nats-server on PATH)")
    b.add_argument(
        "--cpp-python",
        default=str(CPP_PYTHON),
        help="the Python of the C++ client's environment (default: .venv-rocketmq of this checkout)",
    )
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
