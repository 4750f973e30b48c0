"""The broker benchmark's send and wake figures beside Redis Streams and NATS JetStream
(``jobs/bench_broker.py`` parts ``sync``, ``inflight`` and ``poll``; what each measures is in
that script's docstring).

Every system is driven by the same client shape: for the one-at-a-time figures a blocking
socket with TCP_NODELAY and requests encoded before the clock starts (ours: SEND_MESSAGE_V2
frames; Redis: ``XADD``; NATS: ``PUB`` with a reply inbox, answered by JetStream's ack); for the
concurrent ones the same worker processes, connections and requests in flight
(``broker_load.run_loads``). Each round measures every system back to back, so they see the
same machine; figures are medians of the rounds' figures.
"""

from __future__ import annotations

import functools
import os
import select
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker_load import (  # jobs/ is the scripts' directory
    Load,
    Wire,
    check_ok,
    max_offset_cmd,
    pull_frame,
    rate,
    run_loads,
    send_frame,
    uniq_key,
)
from broker_servers import LABELS, CpuMeter, PeerServer, Server, med, pct, report
from peers_nats import NatsWire, push_consumer, sub, subject
from peers_redis import RedisWire, blocked_clients, xadd, xread

from rmqnet.remoting import encode_bytes

if TYPE_CHECKING:
    from bench_broker import Run

#: the systems of the one-at-a-time figure, in the order each round measures them
SYNC_KEYS = ("async", "sync", "nats", "redis-always", "redis-everysec", "bare")
#: the peers of each of our figures, the target's first
ASYNC_PEERS = ("bare", "nats", "redis-everysec", "redis-always")
SYNC_PEERS = ("redis-always", "redis-everysec", "nats", "bare")
WARM = 50


def _client(
    key: str, srv: Server | PeerServer, topic: str, body: bytes, n: int
) -> tuple[Any, list[bytes], Callable[[Any], None]]:
    """A blocking connection to ``srv``, ``n`` requests storing ``body`` (a pool of frames, cycled),
    and the check of an answer."""
    if key in ("async", "sync", "bare"):
        frames = [send_frame(topic, 0, body, i + 1, uniq=uniq_key(0, i)) for i in range(min(n, 1024))]
        return Wire(srv.port), frames, lambda head: check_ok(head, f"send to {LABELS[key]}")
    if key.startswith("redis"):
        return RedisWire(srv.port), [xadd(f"{topic}:0", body)], lambda _reply: None  # errors raise in read
    w = NatsWire(srv.port, f"sync{os.getpid()}")
    return w, [w.pub_frame(subject(topic, 0), body) for _ in range(min(n, 1024))], lambda _msg: None


def _one_at_a_time(key: str, srv: Server | PeerServer, topic: str, body: bytes, n: int) -> tuple[list[float], float]:
    """``n`` requests one at a time after ``WARM``: each round trip (ms), and the server's CPU
    over the measured ones (s)."""
    w, frames, check = _client(key, srv, topic, body, n + WARM)
    try:
        for i in range(WARM):
            check(w.call(frames[i % len(frames)]))
        out = []
        cpu = CpuMeter(srv.pid).start()
        for i in range(n):
            f = frames[(WARM + i) % len(frames)]
            t0 = time.perf_counter_ns()
            reply = w.call(f)
            out.append((time.perf_counter_ns() - t0) / 1e6)
            check(reply)
        return out, cpu.stop()
    finally:
        w.close()


def sync(run: Run) -> None:
    """One producer, one 1 KiB send at a time: p50, p99, server CPU per message."""
    n, body = run.a.sync_messages, os.urandom(1024)
    per: dict[str, list[tuple[float, float, float]]] = {}
    for _ in range(run.a.rounds):
        for key in SYNC_KEYS:
            srv = run.servers.get(key)
            if srv is None:
                continue
            if key == "async":
                rtts, cpu = run.profiled(
                    "sync", n + WARM, functools.partial(_one_at_a_time, "async", srv, "BenchSync", body, n)
                )
            else:
                rtts, cpu = _one_at_a_time(key, srv, "BenchSync", body, n)
            per.setdefault(key, []).append((pct(rtts, 50), pct(rtts, 99), cpu / n * 1e6))
    fig = {k: tuple(med([r[i] for r in rs]) for i in range(3)) for k, rs in per.items()}
    print(
        f"\n== one producer, one 1 KiB message at a time ({n:,} a round after {WARM} unmeasured, medians of "
        f"{run.a.rounds} rounds); ours SEND_MESSAGE_V2, Redis XADD, NATS PUB with a reply inbox (JetStream's ack)"
    )
    print(f"{'':52} {'p50 ms':>9} {'p99 ms':>9} {'server CPU us/msg':>18}")
    for k, (p50, p99, cpu) in fig.items():
        print(f"{LABELS[k]:52} {p50:9.3f} {p99:9.3f} {cpu:18.1f}")
    for ours, peers, label in (("async", ASYNC_PEERS, ""), ("sync", SYNC_PEERS, " under SYNC_FLUSH")):
        for i, (what, unit) in enumerate(
            (("round trip p50", "ms"), ("round trip p99", "ms"), ("server CPU per message", "us"))
        ):
            peer_figs: list[tuple[str, float | None]] = [(_peer_name(p, what), fig[p][i]) for p in peers if p in fig]
            report(run.b, f"sync send 1 KiB{label}, {what}", fig[ours][i], unit, peer_figs)


def _peer_name(key: str, what: str) -> str:
    return f"{LABELS[key]} {what}"


# ---- 64 in flight ----------------------------------------------------------------------

INFLIGHT_KEYS = ("async", "sync", "redis-everysec", "redis-always", "nats")
KINDS = {"async": "send", "sync": "send", "redis-everysec": "xadd", "redis-always": "xadd", "nats": "jspub"}


def inflight(run: Run) -> None:
    """1 KiB sends, 16 in flight on each of 4 connections (a worker process each): msgs/s."""
    per_conn = max(1, run.a.inflight_messages // 4)
    rates: dict[str, list[float]] = {}
    for _ in range(run.a.rounds):
        for key in INFLIGHT_KEYS:
            srv = run.servers.get(key)
            if srv is None:
                continue
            loads = [
                Load(srv.port, KINDS[key], 1, 16, per_conn, "BenchFlight", queues=4, body_size=1024) for _ in range(4)
            ]
            if key == "async":
                out = run.profiled("inflight", 4 * per_conn, functools.partial(run_loads, loads, run.pool))
            else:
                out = run_loads(loads, run.pool)
            if out.errors:
                raise RuntimeError(f"64 in flight to {LABELS[key]}: {out.errors} errors ({out.codes})")
            rates.setdefault(key, []).append(rate(out))
    fig = {k: med(v) for k, v in rates.items()}
    print(
        f"\n== 1 KiB sends, 64 in flight over 4 connections (a worker process each, 16 in flight on each), "
        f"{4 * per_conn:,} a round, medians of {run.a.rounds} rounds; every answer a success"
    )
    for ours, peers, label in (
        ("async", ("redis-everysec", "redis-always", "nats"), "ASYNC_FLUSH"),
        ("sync", ("redis-always", "redis-everysec", "nats"), "SYNC_FLUSH"),
    ):
        report(
            run.b,
            f"1 KiB sends, 64 in flight over 4 connections, {label}",
            fig[ours],
            "msgs/s",
            [
                (f"{LABELS[p]}, {'acked publishes' if p == 'nats' else 'XADD'}, same load", fig[p])
                for p in peers
                if p in fig
            ],
        )


# ---- long polling: a send to a held consumer's hand --------------------------------------


def _wake(cons: Any, prod: Any, frame: bytes) -> tuple[float, float, Any, Any]:
    """Write ``frame`` on ``prod``; read both connections as their bytes arrive: ms from the
    write to the consumer's first complete answer and to the producer's, and the two answers."""
    got: dict[Any, tuple[int, Any]] = {}
    t0 = time.perf_counter_ns()
    prod.send(frame)
    while len(got) < 2:
        ready, _, _ = select.select([w.sock for w in (cons, prod) if w not in got], [], [], 30)
        if not ready:
            raise RuntimeError("neither the held consumer nor the producer answered within 30 s")
        for w in (cons, prod):
            if w.sock in ready:
                data = w.sock.recv(1 << 20)
                now = time.perf_counter_ns()
                if not data:
                    raise ConnectionError("a server closed the connection")
                replies = w.take(data)
                if replies and w not in got:
                    got[w] = (now, replies[0])
    return (got[cons][0] - t0) / 1e6, (got[prod][0] - t0) / 1e6, got[cons][1], got[prod][1]


def _wake_ours(port: int, n: int) -> tuple[list[float], list[float]]:
    cons, prod = Wire(port), Wire(port)
    try:
        offset = int(cons.call(encode_bytes(max_offset_cmd("BenchPoll", 0)))["extFields"]["offset"])
        body = os.urandom(100)
        hand, rtt = [], []
        for i in range(n + 10):
            cons.send(pull_frame("BenchPoll", 0, offset, 32, i + 1, suspend_ms=60_000))
            head = cons.call(encode_bytes(max_offset_cmd("BenchPoll", 0)))  # answered behind the pull: it is held
            if int(head["opaque"]) != 0:
                raise RuntimeError(f"the pull at {offset} was not held: {head}")
            h, r, pulled, sent = _wake(cons, prod, send_frame("BenchPoll", 0, body, i + 1, uniq=uniq_key(1, i)))
            check_ok(sent, "send to the held pull's queue")
            check_ok(pulled, "held pull")
            offset = int(pulled["extFields"]["nextBeginOffset"])
            if i >= 10:  # the first ten warm up
                hand.append(h)
                rtt.append(r)
        return hand, rtt
    finally:
        cons.close()
        prod.close()


def _wake_redis(port: int, n: int) -> list[float]:
    cons, prod = RedisWire(port), RedisWire(port)
    try:
        stream, last, body = "BenchPoll:0", "$", os.urandom(100)
        hand = []
        for i in range(n + 10):
            cons.send(xread(stream, last, 32, block_ms=60_000))
            while blocked_clients(prod) < 1:  # the XREAD is blocked now
                pass
            h, _r, got, last_id = _wake(cons, prod, xadd(stream, body))
            if not got or got[0][1][0][0] != last_id:
                raise RuntimeError(f"XREAD BLOCK answered {got!r}, not the entry {last_id!r}")
            last = last_id.decode()
            if i >= 10:
                hand.append(h)
        return hand
    finally:
        cons.close()
        prod.close()


def _wake_nats(port: int, n: int) -> list[float]:
    cons, prod = NatsWire(port, f"pollc{os.getpid()}"), NatsWire(port, f"pollp{os.getpid()}")
    try:
        deliver = f"deliver.poll{os.getpid()}"  # outside the stream's subjects (bench.>)
        cons.send(sub(deliver, 2) + b"PING\r\n")
        while cons.next() != "PONG":  # subscribed
            pass
        push_consumer(cons, subject("BenchPoll", 0), deliver)
        body = os.urandom(100)
        hand = []
        for i in range(n + 10):
            h, _r, got, ack = _wake(cons, prod, prod.pub_frame(subject("BenchPoll", 0), body))
            if got.sid != 2 or got.payload != body or ack.headers is not None:  # sid 2: the deliver subject
                raise RuntimeError(f"the push consumer got {got!r} (ack {ack!r})")
            if i >= 10:
                hand.append(h)
        return hand
    finally:
        cons.close()
        prod.close()


def poll(run: Run) -> None:
    """A consumer waiting (held pull; XREAD BLOCK; a JetStream push consumer), then one send
    from another connection: the time from the send to the consumer's hand."""
    n = run.a.poll_messages
    ours, rtt, redis, nats = [], [], [], []
    for _ in range(run.a.rounds):
        srv = run.servers.get("async")
        assert srv is not None
        h, r = run.profiled("poll", 3 * (n + 10), functools.partial(_wake_ours, srv.port, n))
        ours.append(h)
        rtt.append(r)
        if (rsrv := run.servers.get("redis-everysec")) is not None:
            redis.append(_wake_redis(rsrv.port, n))
        if (nsrv := run.servers.get("nats")) is not None:
            nats.append(_wake_nats(nsrv.port, n))
    print(
        f"\n== long polling: a consumer waiting on an empty queue, then one 100-byte send to it from another "
        f"connection, {n:,} times a round (after 10 unmeasured), medians of {run.a.rounds} rounds"
    )
    for q in (50, 99):

        def fig(rounds: list[list[float]]) -> float | None:
            return med([pct(xs, q) for xs in rounds]) if rounds else None  # noqa: B023 (q of this pass)

        ours_q = fig(ours)
        assert ours_q is not None
        report(
            run.b,
            f"long polling, send to a held consumer's hand p{q}",
            ours_q,
            "ms",
            [
                (f"the same sends' round trip p{q}", fig(rtt)),
                (f"Redis Streams XREAD BLOCK (appendfsync everysec), send to its hand p{q}", fig(redis)),
                (f"NATS JetStream push consumer, publish to its hand p{q}", fig(nats)),
            ],
        )
