"""The gRPC endpoint beside the remoting protocol, on the same broker (the targets: the
gRPC send's p50, one at a time, 1 KiB, at most 1.5x the remoting send's; receive of 32 + ack at
least 0.5x the remoting pull of 32; a message not acked redelivered within 1 s after its
invisible time ends, p99).

    python jobs/bench_grpc.py [--root DIR] [--rounds R] [--messages N] [--body BYTES]

One broker process (``rmqlog broker``: 127.0.0.1, ASYNC_FLUSH, ``grpcListenPort=0``) over a store
under ROOT with topic ``BenchGrpc`` (4 queues). Each round measures, back to back:

- **remoting**: SEND_MESSAGE_V2 (310) of one ``--body`` message at a time over a blocking socket
  with TCP_NODELAY, frames encoded before the clock (``broker_load.sync_rtts``, the same client as
  ``bench_broker.py``'s ``sync`` part);
- **gRPC Heartbeat**: ``Heartbeat`` one at a time (a call the broker answers with no work: the
  floor of a round trip through grpcio's client and ``grpc.aio`` server);
- **gRPC**: ``SendMessage`` of one message (a NORMAL message with a tag, a message id and its
  body) at a time over grpcio's blocking channel, requests serialized before the clock, each
  answer parsed and checked ``OK``;
- **consume** (``jobs/grpc_consume_load.py``): over ``--consume`` messages stored in topic
  ``BenchPop`` before the broker starts, remoting pulls of 32 one at a time beside gRPC
  receive-32-then-ack pairs one at a time (a new group each round); then the 32 messages of
  topic ``BenchRedeliver`` received by a new group with a 1 s invisible time
  (``minInvisibleTimeMillsForRecv=1000``) and not acked, and each one's redelivery after that
  second.

Figures: round trip p50 and p99 (ms), medians of the rounds, and the ratio gRPC / remoting;
messages a second of the consume loops (medians); the redelivery's lateness, p50 and p99 over
every round's messages.
The broker is stopped by its PID (SIGTERM) at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pyarrow as pa
from broker_load import sync_rtts  # jobs/ is the scripts' directory
from broker_servers import med, pct
from grpc_consume_load import pull_rate, receive_ack_rate, redelivery_lateness
from harness import Bench

import rmqlog
from rmqnet.grpc.convert import Code
from rmqnet.grpc.v2 import definition_pb2 as pb
from rmqnet.grpc.v2 import service_pb2 as svc

TOPIC = "BenchGrpc"
POP_TOPIC = "BenchPop"
REDELIVER_TOPIC = "BenchRedeliver"
REDELIVER_N = 32
INVISIBLE_MS = 1000
WARM = 50


def _fill(store: rmqlog.MessageStore, topic: str, n: int, body: bytes) -> None:
    """``n`` messages of ``body`` (tag ``bench``) into queue 0 of ``topic``, dispatched."""
    for start in range(0, n, 4096):
        k = min(4096, n - start)
        store.put_wire(
            pa.table(
                {"topic": [topic] * k, "queueId": [0] * k, "body": [body] * k, "properties": ["TAGS\x01bench\x02"] * k}
            ),
            dispatch=True,
        )


def start_broker(root: Path, consume: int = 0, body: bytes = b"") -> tuple[subprocess.Popen[str], int, str]:
    """The broker process, its remoting port and its gRPC address; ``consume`` messages in
    ``BenchPop`` and :data:`REDELIVER_N` in ``BenchRedeliver`` (one queue each)."""
    store = rmqlog.MessageStore.open(root / "store")
    try:
        store.create_topic(TOPIC, 4)
        if consume:
            store.create_topic(POP_TOPIC, 1)
            store.create_topic(REDELIVER_TOPIC, 1)
            _fill(store, POP_TOPIC, consume, body)
            _fill(store, REDELIVER_TOPIC, REDELIVER_N, body)  # (a new group each round reads them)
    finally:
        store.close()
    conf = root / "broker.conf"
    conf.write_text(
        "brokerName=bench-grpc\ngrpcListenPort=0\nflushDiskType=ASYNC_FLUSH\n"
        f"minInvisibleTimeMillsForRecv={INVISIBLE_MS}\n"
    )
    rmqlog_cmd = str(Path(sys.executable).with_name("rmqlog"))
    proc = subprocess.Popen(
        [rmqlog_cmd, "broker", str(root / "store"), "-c", str(conf), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    grpc_address, port = "", 0
    for line in proc.stdout:
        if " grpc at " in line:
            grpc_address = line.strip().rsplit(" ", 1)[1]
        if " ready at " in line:
            port = int(line.strip().rsplit(":", 1)[1])
            break
    if not port or not grpc_address:
        proc.kill()
        raise RuntimeError("the broker did not start")
    return proc, port, grpc_address


def grpc_rtts(address: str, n: int, body: bytes) -> list[float]:
    """``n`` SendMessage calls of ``body``, one at a time (``WARM`` unmeasured first): each
    round trip, ms."""
    requests = []
    for i in range(min(n + WARM, 1024)):
        sp = pb.SystemProperties(
            message_id=f"7F000001{os.getpid() & 0xFFFF:04X}0000{i:016X}", tag="bench", message_type=pb.NORMAL
        )
        msg = pb.Message(topic=pb.Resource(name=TOPIC), body=body, system_properties=sp)
        requests.append(svc.SendMessageRequest(messages=[msg]).SerializeToString())
    with grpc.insecure_channel(address) as channel:
        send = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage")  # bytes in, bytes out
        out = []
        for i in range(n + WARM):
            t0 = time.perf_counter_ns()
            raw = send(requests[i % len(requests)], timeout=10)
            reply = svc.SendMessageResponse.FromString(raw)
            if reply.status.code != Code.OK:
                raise RuntimeError(f"gRPC send answered {reply.status}")
            if i >= WARM:
                out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


def heartbeat_rtts(address: str, n: int) -> list[float]:
    """``n`` Heartbeat calls one at a time (``WARM`` unmeasured first): each round trip, ms."""
    req = svc.HeartbeatRequest(client_type=pb.PRODUCER).SerializeToString()
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary("/apache.rocketmq.v2.MessagingService/Heartbeat")
        out = []
        for i in range(n + WARM):
            t0 = time.perf_counter_ns()
            if svc.HeartbeatResponse.FromString(call(req, timeout=10)).status.code != Code.OK:
                raise RuntimeError("Heartbeat refused")
            if i >= WARM:
                out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


def main() -> None:
    bench = Bench("bench_grpc", __doc__, rounds=3, rounds_help="rounds, each protocol in turn (medians printed)")
    bench.add_argument("--messages", type=int, default=2000, help="sends measured per round and protocol")
    bench.add_argument("--body", type=int, default=1024)
    bench.add_argument("--consume", type=int, default=8192, help="messages a consume loop takes a round (0: none)")
    with bench.run() as work:
        a = bench.args
        body = os.urandom(a.body)
        proc, port, address = start_broker(work, a.consume, body)
        figs: dict[str, list[tuple[float, float]]] = {"remoting": [], "grpc heartbeat": [], "grpc": []}
        pulls: list[float] = []
        receives: list[float] = []
        late: list[float] = []
        try:
            for i in range(a.rounds):
                r = sync_rtts(port, TOPIC, a.messages, body, warm=WARM)
                figs["remoting"].append((pct(r, 50), pct(r, 99)))
                h = heartbeat_rtts(address, a.messages)
                figs["grpc heartbeat"].append((pct(h, 50), pct(h, 99)))
                g = grpc_rtts(address, a.messages, body)
                figs["grpc"].append((pct(g, 50), pct(g, 99)))
                if a.consume:
                    pulls.append(pull_rate(port, POP_TOPIC, a.consume))
                    receives.append(receive_ack_rate(address, POP_TOPIC, f"BenchPopGroup{i}", a.consume))
                    late += redelivery_lateness(
                        address, REDELIVER_TOPIC, f"BenchRedeliverGroup{i}", REDELIVER_N, INVISIBLE_MS
                    )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        print(
            f"one {a.body}-byte send at a time, {a.messages:,} a round after {WARM} unmeasured, medians of {a.rounds} "
            "rounds"
        )
        print(f"{'':16} {'p50 ms':>9} {'p99 ms':>9}")
        fig = {k: (med([x[0] for x in v]), med([x[1] for x in v])) for k, v in figs.items()}
        for k, (p50, p99) in fig.items():
            print(f"{k:16} {p50:9.3f} {p99:9.3f}")
        print(
            f"gRPC / remoting: p50 {fig['grpc'][0] / fig['remoting'][0]:.2f}x, p99 "
            f"{fig['grpc'][1] / fig['remoting'][1]:.2f}x"
            " (target: p50 at most 1.5x)"
        )
        if a.consume:
            pull, recv = med(pulls), med(receives)
            print(
                f"consume 32 at a time, {a.consume:,} messages a round: remoting pull {pull:,.0f} msgs/s, "
                f"gRPC receive + ack {recv:,.0f} msgs/s: {recv / pull:.2f}x (target: at least 0.5x)"
            )
            print(
                f"redelivery after a {INVISIBLE_MS} ms invisible time, {len(late)} messages: "
                f"p50 {pct(late, 50):.0f} ms, p99 {pct(late, 99):.0f} ms late (target: p99 within 1000 ms)"
            )
            bench.figure(
                "gRPC ReceiveMessage 32 + AckMessage, one pair at a time",
                recv,
                "msgs/s",
                peer="remoting PULL_MESSAGE 32 one at a time on the same broker",
                peer_value=pull,
            )
            bench.figure("redelivery of an unacked message after its invisible time, p99", pct(late, 99), "ms")
        for name, i in (("p50", 0), ("p99", 1)):
            bench.figure(
                f"gRPC SendMessage 1 KiB, one at a time, round trip {name}",
                fig["grpc"][i],
                "ms",
                peer="remoting SEND_MESSAGE_V2 on the same broker",
                peer_value=fig["remoting"][i],
            )
            bench.figure(
                f"gRPC Heartbeat (no work), round trip {name}",
                fig["grpc heartbeat"][i],
                "ms",
                peer="remoting SEND_MESSAGE_V2 on the same broker",
                peer_value=fig["remoting"][i],
            )


if __name__ == "__main__":
    main()
