"""The broker benchmark's processes: the servers it measures and the load that drives them.

Run as a script, it serves (``bench_broker.py`` spawns it, 127.0.0.1 only, port 0):

    python jobs/broker_load.py broker ROOT broker.conf [--profile DIR]    # rmqnet's broker
    python jobs/broker_load.py bare                                      # the peer: no store

and prints ``ready at HOST:PORT`` once it listens; SIGTERM stops it (the broker cleanly, its
store closed; ``--profile``: SIGUSR1/SIGUSR2 switch a cProfile of its loop thread on and off,
writing ``DIR/profile.prof``). Or it measures, once, our own client shape's synchronous sends
(:func:`sync_rtts`; the C++ client's figure runs it inside the client's network namespace):

    python jobs/broker_load.py rtt PORT TOPIC N BODY_BYTES    # prints {"rtts_ms": [...]}

**The bare server** is :class:`rmqnet.transport.RemotingServer` with a handler that answers
every SEND with the reply extFields the broker gives (``msgId``, ``queueId``, ``queueOffset``,
``MSG_REGION``, ``TRACE_ON``) and stores nothing. It is built on the same transport as the
broker on purpose: the two then share the frame codec, the header parse, the per-connection
machinery and the reply encoding, so the ratio broker/bare is the cost of what the broker adds
(the send processor, the store's put, the group commit of replies), not a comparison of two
network stacks. A raw asyncio echo would also charge our transport to the broker.

**The load** (:func:`drive` in worker processes, :class:`Pipeline` per connection): request
frames are encoded before the clock starts (a pool of distinct frames per connection, cycled:
distinct opaques and bodies of the same size), then written as answers come back, so that
``window`` requests are in flight on each connection; several answers read at once are
followed by one write of as many frames. Per answer the only Python work is the reply
header's JSON decode (its code, and a pull's ``nextBeginOffset``), needed to count errors.
Worker processes start together on a barrier and report their own start and end
(``time.monotonic``, one clock for every process on the host): a figure's rate is every
worker's answers over the span from the first start to the last end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import peers_nats  # jobs/ is this script's directory
import peers_redis

from rmqnet.remoting import (
    FLAG_RESPONSE,
    ConsumerSendMsgBackHeader,
    FrameDecoder,
    PullMessageHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SendMessageHeader,
    encode_bytes,
)
from rmqnet.remoting.command import decode_json_header
from rmqnet.remoting.headers import PULL_SUBSCRIPTION, PULL_SUSPEND
from rmqnet.remoting.names import AUTO_CREATE_TOPIC, DEFAULT_TOPIC_QUEUE_NUMS

HOST = "127.0.0.1"
GROUP = "bench_pg"
CONSUMER_GROUP = "bench_cg"
#: frames encoded per connection, then cycled (distinct opaques and bodies)
FRAME_POOL = 256
#: the peers' load kinds (Redis Streams, NATS JetStream): see ``_peer_frames``
PEER_KINDS = ("xadd", "xread", "jspub", "jsfetch")


def raise_fd_limit(want: int) -> int:
    """Raise this process's open-file soft limit to ``want`` (never past the hard limit);
    returns the soft limit now in force. Children inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return int(soft)


# ---- request frames ------------------------------------------------------------------------


def send_cmd(
    topic: str,
    queue_id: int,
    body: bytes,
    opaque: int,
    *,
    code: int = RequestCode.SEND_MESSAGE_V2,
    batch: bool = False,
    uniq: str | None = None,
) -> RemotingCommand:
    """One SEND_MESSAGE_V2 (310) request as our producer sends it (or 320 with ``code``):
    one-letter header, ``WAIT=true`` and a 32-hex UNIQ_KEY in the properties."""
    props = "WAIT\x01true\x02" + (f"UNIQ_KEY\x01{uniq}\x02" if uniq else "")
    ext = SendMessageHeader(
        producer_group=GROUP,
        topic=topic,
        default_topic=AUTO_CREATE_TOPIC,
        default_topic_queue_nums=DEFAULT_TOPIC_QUEUE_NUMS,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=props,
        reconsume_times=0,
        unit_mode=False,
        batch=batch,
        max_reconsume_times=None,
        broker_name=None,
    ).to_ext(v2=True)
    return RemotingCommand(code, opaque, 0, None, ext, body)


def send_frame(
    topic: str,
    queue_id: int,
    body: bytes,
    opaque: int,
    *,
    code: int = RequestCode.SEND_MESSAGE_V2,
    batch: bool = False,
    uniq: str | None = None,
) -> bytes:
    """:func:`send_cmd`'s frame."""
    return encode_bytes(send_cmd(topic, queue_id, body, opaque, code=code, batch=batch, uniq=uniq))


def pull_cmd(
    topic: str, queue_id: int, offset: int, max_msg_nums: int, opaque: int, *, suspend_ms: int = 0
) -> RemotingCommand:
    """One PULL_MESSAGE (11) request with its own subscription ``*`` (sysFlag 4), plus the
    suspend flag (2) when ``suspend_ms`` (a push consumer's long poll)."""
    h = PullMessageHeader(
        consumer_group=CONSUMER_GROUP,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=max_msg_nums,
        sys_flag=PULL_SUBSCRIPTION | (PULL_SUSPEND if suspend_ms else 0),
        commit_offset=0,
        suspend_timeout_millis=suspend_ms,
        subscription="*",
        sub_version=0,
        expression_type=None,
    )
    return RemotingCommand(RequestCode.PULL_MESSAGE, opaque, 0, None, h.to_ext())


def pull_frame(topic: str, queue_id: int, offset: int, max_msg_nums: int, opaque: int, *, suspend_ms: int = 0) -> bytes:
    """:func:`pull_cmd`'s frame."""
    return encode_bytes(pull_cmd(topic, queue_id, offset, max_msg_nums, opaque, suspend_ms=suspend_ms))


def max_offset_cmd(topic: str, queue_id: int) -> RemotingCommand:
    """GET_MAX_OFFSET (30): answered at once; on a connection it also proves that every
    request written before it has been processed (requests are started in order)."""
    return RemotingCommand(RequestCode.GET_MAX_OFFSET, 0, 0, None, {"topic": topic, "queueId": queue_id})


def uniq_key(conn: int, i: int) -> str:
    """A client msgId (UNIQ_KEY) of 32 upper-case hex digits, distinct per (connection, i)."""
    return f"7F000001{os.getpid() & 0xFFFF:04X}{conn & 0xFFFF:04X}{i:016X}"


class Wire:
    """A blocking connection for one-at-a-time requests (no event loop: the least client time
    in a round trip). Requests the broker sends us (NOTIFY_CONSUMER_IDS_CHANGED after a
    heartbeat) are skipped: :meth:`call` returns the next *response*."""

    def __init__(self, port: int, host: str = HOST) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder()
        self.pending: list[Any] = []
        self.body = b""

    def send(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def read(self) -> dict[str, Any]:
        """The JSON header of the next response (its body then in :attr:`body`)."""
        while True:
            while not self.pending:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("the server closed the connection")
                self.pending.extend(self.decoder.feed(data))
            frame = self.pending.pop(0)
            head = decode_json_header(frame.header)
            if int(head.get("flag", 0)) & FLAG_RESPONSE:
                self.body = bytes(frame.body)
                return head

    def call(self, frame: bytes) -> dict[str, Any]:
        """Write ``frame``, read one answer; its JSON header."""
        self.sock.sendall(frame)
        return self.read()

    def take(self, data: bytes) -> list[dict[str, Any]]:
        """The responses completed by ``data`` (bytes this caller read from :attr:`sock`)."""
        heads = (decode_json_header(f.header) for f in self.decoder.feed(data))
        return [h for h in heads if int(h.get("flag", 0)) & FLAG_RESPONSE]

    def close(self) -> None:
        self.sock.close()


def check_ok(head: dict[str, Any], what: str) -> None:
    """``RuntimeError`` unless the answer is SUCCESS."""
    if int(head["code"]) != ResponseCode.SUCCESS:
        raise RuntimeError(f"{what}: answered {head['code']} {head.get('remark')!r}")


def sync_rtts(port: int, topic: str, n: int, body: bytes, warm: int = 50, host: str = HOST) -> list[float]:
    """``n`` SEND_MESSAGE_V2 of ``body`` to queue 0 of ``topic``, one at a time over one
    blocking connection (frames encoded first, ``warm`` sends before the clock): each round
    trip, ms."""
    frames = [send_frame(topic, 0, body, i + 1, uniq=uniq_key(0, i)) for i in range(min(n, 1024))]
    w = Wire(port, host)
    try:
        for f in frames[:warm]:
            check_ok(w.call(f), "warm-up send")
        out = []
        for i in range(n):
            t0 = time.perf_counter_ns()
            head = w.call(frames[i % len(frames)])
            out.append((time.perf_counter_ns() - t0) / 1e6)
            check_ok(head, "send")
        return out
    finally:
        w.close()


# ---- the pipelined load ------------------------------------------------------------------


@dataclass
class Load:
    """What one worker process drives. ``kind``: ``send`` (310, ``body_size`` bodies, queue
    ``i % queues`` on connection ``i``), ``back`` (36, one frame per offset of ``offsets``),
    ``pull`` (``max_msg_nums`` from ``start`` in steps of ``stride`` on queue
    ``queue_ids[i]``), or a peer's load of the same shape (``PEER_KINDS``: ``xadd`` and
    ``jspub`` as ``send``, ``xread`` and ``jsfetch`` as ``pull``)."""

    port: int
    kind: str
    connections: int
    window: int
    requests: int  # per connection
    topic: str
    queues: int = 4
    body_size: int = 100
    queue_ids: tuple[int, ...] = ()
    max_msg_nums: int = 32
    stride: int = 32
    start: int = 0
    timeout_s: float = 300.0
    #: ``back`` (CONSUMER_SEND_MSG_BACK 36 of group ``CONSUMER_GROUP``): the commitlog offsets
    #: sent back, connection ``i`` taking ``offsets[i::connections]``, each once
    offsets: tuple[int, ...] = ()


@dataclass
class Outcome:
    """A worker's report: its span, answers by code, messages (sends: acknowledged; pulls:
    received), connections that failed or were lost."""

    t0: float = 0.0
    t1: float = 0.0
    codes: dict[int, int] = field(default_factory=dict)
    messages: int = 0
    failed_connections: int = 0
    unanswered: int = 0

    @property
    def errors(self) -> int:
        bad = sum(n for c, n in self.codes.items() if c != ResponseCode.SUCCESS)
        return bad + self.failed_connections + self.unanswered


class RemotingCounter:
    """Counts the broker's (or the bare server's) answers on one connection: ``feed`` returns
    how many requests were answered (and what to write back: nothing) and books each answer's
    code on ``outcome``; ``offsets[opaque]`` (pulls) turns each FOUND answer into a message
    count. Requests the broker sends its clients (NOTIFY_CONSUMER_IDS_CHANGED) are skipped."""

    def __init__(self, outcome: Outcome, offsets: dict[int, int] | None = None) -> None:
        self.outcome, self.offsets = outcome, offsets
        self.decoder = FrameDecoder()

    def feed(self, data: bytes) -> tuple[int, bytes]:
        codes, offsets, answered = self.outcome.codes, self.offsets, 0
        for f in self.decoder.feed(data):
            head = decode_json_header(f.header)
            if not int(head.get("flag", 0)) & FLAG_RESPONSE:
                continue
            answered += 1
            code = int(head["code"])
            codes[code] = codes.get(code, 0) + 1
            if code == ResponseCode.SUCCESS:
                if offsets is None:
                    self.outcome.messages += 1
                else:
                    got = int(head["extFields"]["nextBeginOffset"]) - offsets[int(head["opaque"])]
                    self.outcome.messages += got
        return answered, b""


class Counter(Protocol):
    """What a :class:`Pipeline` counts answers with (:class:`RemotingCounter`, or a peer's:
    ``peers_redis.RespCounter``, ``peers_nats.NatsCounter``)."""

    def feed(self, data: bytes) -> tuple[int, bytes]: ...


class Pipeline(asyncio.Protocol):
    """One connection writing ``frames`` (cycled) until ``total`` are answered, ``window`` in
    flight; ``counter`` tells answers apart (and what to write back unasked: NATS's PONG);
    ``prelude`` is written once at the start (NATS's CONNECT and SUB)."""

    def __init__(
        self, frames: list[bytes], total: int, window: int, outcome: Outcome, counter: Counter, prelude: bytes = b""
    ) -> None:
        self.frames, self.total, self.window, self.outcome = frames, total, window, outcome
        self.counter, self.prelude = counter, prelude
        self.sent = self.answered = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.prelude:
            transport.write(self.prelude)

    def _write(self, n: int) -> None:
        n = min(n, self.total - self.sent)
        if n <= 0 or self.transport is None:
            return
        k = len(self.frames)
        start = self.sent % k
        chunk = self.frames[start : start + n]
        while len(chunk) < n:
            chunk += self.frames[: n - len(chunk)]
        self.sent += n
        self.transport.writelines(chunk)

    def begin(self) -> None:
        self._write(self.window)

    def data_received(self, data: bytes) -> None:
        answered, back = self.counter.feed(data)
        if back and self.transport is not None:
            self.transport.write(back)
        self.answered += answered
        if self.answered >= self.total:
            if not self.done.done():
                self.done.set_result(None)
            return
        self._write(answered)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.outcome.unanswered += self.total - self.answered
            self.done.set_result(None)


def back_frame(offset: int, opaque: int, group: str = CONSUMER_GROUP) -> bytes:
    """A CONSUMER_SEND_MSG_BACK (36) frame as ali-ons sends it (delayLevel 0, max 16)."""
    h = ConsumerSendMsgBackHeader(
        offset=offset, group=group, delay_level=0, origin_msg_id="", origin_topic="", max_reconsume_times=16
    )
    return encode_bytes(RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, opaque, 0, None, h.to_ext(), b"", "JAVA"))


def _frames(load: Load, conn: int, out: Outcome) -> tuple[list[bytes], Counter, bytes]:
    """Connection ``conn``'s request frames, the counter of their answers, its prelude."""
    if load.kind in PEER_KINDS:
        return _peer_frames(load, conn, out)
    if load.kind == "back":
        mine = load.offsets[conn :: load.connections]
        return [back_frame(off, i + 1) for i, off in enumerate(mine)], RemotingCounter(out), b""
    if load.kind == "send":
        q = conn % load.queues
        pool = min(FRAME_POOL, load.requests)
        return (
            [send_frame(load.topic, q, os.urandom(load.body_size), i + 1, uniq=uniq_key(conn, i)) for i in range(pool)],
            RemotingCounter(out),
            b"",
        )
    q = load.queue_ids[conn % len(load.queue_ids)]
    offsets = {i + 1: load.start + i * load.stride for i in range(load.requests)}
    frames = [pull_frame(load.topic, q, off, load.max_msg_nums, op) for op, off in offsets.items()]
    return frames, RemotingCounter(out, offsets), b""


def _peer_frames(load: Load, conn: int, out: Outcome) -> tuple[list[bytes], Counter, bytes]:
    """The peers' loads: ``xadd`` / ``xread`` (Redis Streams ``<topic>:<queue>``, reads from the
    explicit ids ``0-1, 0-2, ...`` in steps of ``stride``), ``jspub`` (acked publishes to
    ``bench.<topic>.<queue>``) / ``jsfetch`` (a pull consumer named ``<topic>-<queue>``)."""
    pool = min(FRAME_POOL, load.requests)
    if load.kind == "xadd":
        stream = f"{load.topic}:{conn % load.queues}"
        return (
            [peers_redis.xadd(stream, os.urandom(load.body_size)) for _ in range(pool)],
            peers_redis.RespCounter(out, entries=False),
            b"",
        )
    if load.kind == "xread":
        stream = f"{load.topic}:{load.queue_ids[conn % len(load.queue_ids)]}"
        frames = [
            peers_redis.xread(stream, f"0-{load.start + i * load.stride}", load.max_msg_nums)
            for i in range(load.requests)
        ]
        return frames, peers_redis.RespCounter(out, entries=True), b""
    inbox = f"_INBOX.w{os.getpid()}c{conn}"
    prelude = peers_nats.CONNECT + peers_nats.sub(f"{inbox}.*", 1)
    if load.kind == "jspub":
        subj = peers_nats.subject(load.topic, conn % load.queues)
        frames = [peers_nats.pub(subj, os.urandom(load.body_size), f"{inbox}.{i}") for i in range(pool)]
        return frames, peers_nats.NatsCounter(out, batch=None), prelude
    q = load.queue_ids[conn % len(load.queue_ids)]
    frame = peers_nats.fetch(peers_nats.STREAM, f"{load.topic}-{q}", load.max_msg_nums, f"{inbox}.f")
    return [frame], peers_nats.NatsCounter(out, batch=load.max_msg_nums), prelude


async def _drive(load: Load, start: Callable[[], None]) -> Outcome:
    """Connect ``load``'s connections and encode their frames, call ``start`` (which returns
    when every worker of the load is ready), then drive them."""
    loop = asyncio.get_running_loop()
    out = Outcome()
    pipes: list[Pipeline] = []
    for i in range(load.connections):
        frames, counter, prelude = _frames(load, i, out)
        pipe = Pipeline(frames, load.requests, load.window, out, counter, prelude)
        try:
            await loop.create_connection(lambda p=pipe: p, HOST, load.port)  # type: ignore[misc]
        except OSError:
            out.failed_connections += 1
            continue
        pipes.append(pipe)
    start()  # every worker connected and its frames encoded: start together
    out.t0 = time.monotonic()
    for p in pipes:
        p.begin()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(p.done for p in pipes)), load.timeout_s)
    out.t1 = time.monotonic()
    for p in pipes:
        if not p.done.done():
            out.unanswered += p.total - p.answered
        if p.transport is not None:
            p.transport.close()
    return out


def run_loads(loads: list[Load], pool: LoadPool | None = None) -> Outcome:
    """Run each load in a worker process of its own, started together; the merged outcome
    (span from the first start to the last end). Without ``pool``, the workers are spawned
    for this call and end with it."""
    if pool is not None:
        return pool.run(loads)
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
    return _merge(outs)


def _merge(outs: list[Outcome]) -> Outcome:
    merged = Outcome(t0=min(o.t0 for o in outs), t1=max(o.t1 for o in outs))
    for o in outs:
        for c, n in o.codes.items():
            merged.codes[c] = merged.codes.get(c, 0) + n
        merged.messages += o.messages
        merged.failed_connections += o.failed_connections
        merged.unanswered += o.unanswered
    return merged


class LoadPool:
    """Worker processes spawned once and reused by every :func:`run_loads` of a run (a spawned
    worker imports the job's modules first: ~1 s a process on a loaded 2-core machine). Each
    call gives worker ``i`` load ``i``; every worker connects and encodes its frames and says
    so, then all are told to start at once (the parent's go, instead of a barrier, which
    cannot be handed to a process already running). :meth:`close` ends them."""

    def __init__(self) -> None:
        self.ctx = mp.get_context("spawn")
        self.results: Any = self.ctx.Queue()
        self.workers: list[tuple[Any, Any]] = []  # (process, its task queue)

    def run(self, loads: list[Load]) -> Outcome:
        while len(self.workers) < len(loads):
            tasks = self.ctx.Queue()
            proc = self.ctx.Process(target=pooled_worker, args=(len(self.workers), tasks, self.results), daemon=True)
            proc.start()
            self.workers.append((proc, tasks))
        used = self.workers[: len(loads)]
        for (_, tasks), load in zip(used, loads, strict=True):
            tasks.put(load)
        timeout = max(load.timeout_s for load in loads) + 120
        said = [self.results.get(timeout=timeout) for _ in loads]
        failed = [got for got in said if isinstance(got, BaseException)]
        for got in said:
            if not isinstance(got, BaseException):
                used[got[1]][1].put("go")  # a worker that failed before it was ready waits for its next load
        outs = [self.results.get(timeout=timeout) for _ in range(len(loads) - len(failed))]
        failed += [o for o in outs if isinstance(o, BaseException)]
        if failed:
            raise RuntimeError(f"a load worker failed: {failed[0]!r}")
        return _merge(outs)

    def close(self) -> None:
        for _, tasks in self.workers:
            tasks.put(None)
        for proc, _ in self.workers:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.workers.clear()


def pooled_worker(index: int, tasks: Any, results: Any) -> None:
    """A :class:`LoadPool` worker: for each load from ``tasks`` (None: exit), connect, put
    ``("ready", index)`` on ``results``, wait for ``"go"``, drive it, put its :class:`Outcome`
    (or the exception that ended it; an exception before "ready" is put instead of it)."""
    while (load := tasks.get()) is not None:
        raise_fd_limit(load.connections + 64)

        def start() -> None:
            results.put(("ready", index))
            if tasks.get() != "go":
                raise RuntimeError("a pooled worker was sent a load before its go")

        try:
            results.put(asyncio.run(_drive(load, start)))
        except BaseException as exc:  # reported once (in place of "ready" or of the outcome): the parent raises it
            results.put(exc)
            if not isinstance(exc, Exception):
                raise


def rate(o: Outcome) -> float:
    """Messages per second of an outcome's span."""
    return o.messages / max(o.t1 - o.t0, 1e-9)


def worker(load: Load, barrier: Any, results: Any) -> None:
    """A worker process: drive ``load`` and put its :class:`Outcome` on ``results``."""
    raise_fd_limit(load.connections + 64)
    try:
        results.put(asyncio.run(_drive(load, barrier.wait)))
    except BaseException as exc:  # reported, not lost: the parent counts it as an error
        barrier.abort()
        results.put(exc)
        raise


# ---- the servers -------------------------------------------------------------------------


def _bare_handler(conn: Any, req: RemotingCommand) -> RemotingCommand:
    """Answer as the broker answers a send (same reply fields), storing nothing."""
    state = conn.attrs
    n = state["n"] = state.get("n", 0) + 1
    ext = req.ext_fields
    return req.reply(
        ResponseCode.SUCCESS,
        None,
        {
            "msgId": "7F00000100002A9F" + f"{n:016X}",
            "queueId": ext.get("e", ext.get("queueId", 0)),
            "queueOffset": n,
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true",
        },
    )


async def _serve_bare() -> None:
    from rmqnet.transport import RemotingServer

    server = RemotingServer(_bare_handler, host=HOST, port=0)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"bare ready at {server.address}", flush=True)
    await stop.wait()
    await server.stop(1.0)


def _serve_broker(root: str, conf: str, profile_dir: str | None) -> int:
    """The broker (``launch.main``); with ``profile_dir``, a cProfile of its loop thread that
    SIGUSR1 switches on and SIGUSR2 switches off and writes to ``profile_dir/profile.prof``
    (written to a temporary name, then renamed: a reader never sees half a file)."""
    from rmqnet.broker import launch

    if profile_dir is not None:
        import cProfile

        prof = [cProfile.Profile()]

        def on(signum: int, frame: Any) -> None:
            prof[0].enable()

        def off(signum: int, frame: Any) -> None:
            prof[0].disable()
            tmp = os.path.join(profile_dir, "profile.tmp")
            prof[0].dump_stats(tmp)
            os.replace(tmp, os.path.join(profile_dir, "profile.prof"))
            prof[0] = cProfile.Profile()

        signal.signal(signal.SIGUSR1, on)
        signal.signal(signal.SIGUSR2, off)
    return launch.main(root, conf, f"{HOST}:0", None)


def main(argv: list[str]) -> int:
    raise_fd_limit(4096)
    if argv[:1] == ["bare"]:
        asyncio.run(_serve_bare())
        return 0
    if argv[:1] == ["rtt"] and len(argv) == 5:
        rtts = sync_rtts(int(argv[1]), argv[2], int(argv[3]), os.urandom(int(argv[4])))
        print(json.dumps({"rtts_ms": rtts}), flush=True)
        return 0
    if argv[:1] == ["broker"] and len(argv) in (3, 5):
        profile = argv[4] if len(argv) == 5 and argv[3] == "--profile" else None
        return _serve_broker(argv[1], argv[2], profile)
    print(__doc__, file=sys.stderr)
    return 2


def parse_ready(line: str) -> int:
    """The port of a ``... ready at HOST:PORT`` line (``ValueError`` if it is not one)."""
    if " ready at " not in line:
        raise ValueError(f"not a ready line: {line!r}")
    return int(line.strip().rsplit(":", 1)[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
