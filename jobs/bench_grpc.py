"""The gRPC endpoint's send beside the remoting send, on the same broker (issue 45's first
target: the gRPC send's p50, one at a time, 1 KiB, at most 1.5x the remoting send's).

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
  answer parsed and checked ``OK``.

Figures: round trip p50 and p99 (ms), medians of the rounds, and the ratio gRPC / remoting.
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
from broker_load import sync_rtts  # jobs/ is the scripts' directory
from broker_servers import med, pct
from harness import Bench

import rmqlog
from rmqnet.grpc.convert import Code
from rmqnet.grpc.v2 import definition_pb2 as pb
from rmqnet.grpc.v2 import service_pb2 as svc

TOPIC = "BenchGrpc"
WARM = 50


def start_broker(root: Path) -> tuple[subprocess.Popen[str], int, str]:
    """The broker process, its remoting port and its gRPC address."""
    store = rmqlog.MessageStore.open(root / "store")
    try:
        store.create_topic(TOPIC, 4)
    finally:
        store.close()
    conf = root / "broker.conf"
    conf.write_text("brokerName=bench-grpc\ngrpcListenPort=0\nflushDiskType=ASYNC_FLUSH\n")
    rmqlog_cmd = str(Path(sys.executable).with_name("rmqlog"))
    proc = subprocess.Popen([rmqlog_cmd, "broker", str(root / "store"), "-c", str(conf), "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
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
        sp = pb.SystemProperties(message_id=f"7F000001{os.getpid() & 0xFFFF:04X}0000{i:016X}", tag="bench",
                                 message_type=pb.NORMAL)
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
    with bench.run() as work:
        a = bench.args
        proc, port, address = start_broker(work)
        body = os.urandom(a.body)
        figs: dict[str, list[tuple[float, float]]] = {"remoting": [], "grpc heartbeat": [], "grpc": []}
        try:
            for _ in range(a.rounds):
                r = sync_rtts(port, TOPIC, a.messages, body, warm=WARM)
                figs["remoting"].append((pct(r, 50), pct(r, 99)))
                h = heartbeat_rtts(address, a.messages)
                figs["grpc heartbeat"].append((pct(h, 50), pct(h, 99)))
                g = grpc_rtts(address, a.messages, body)
                figs["grpc"].append((pct(g, 50), pct(g, 99)))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        print(f"one {a.body}-byte send at a time, {a.messages:,} a round after {WARM} unmeasured, medians of {a.rounds} rounds")
        print(f"{'':16} {'p50 ms':>9} {'p99 ms':>9}")
        fig = {k: (med([x[0] for x in v]), med([x[1] for x in v])) for k, v in figs.items()}
        for k, (p50, p99) in fig.items():
            print(f"{k:16} {p50:9.3f} {p99:9.3f}")
        print(f"gRPC / remoting: p50 {fig['grpc'][0] / fig['remoting'][0]:.2f}x, p99 {fig['grpc'][1] / fig['remoting'][1]:.2f}x"
              " (target: p50 at most 1.5x)")
        for name, i in (("p50", 0), ("p99", 1)):
            bench.figure(f"gRPC SendMessage 1 KiB, one at a time, round trip {name}", fig["grpc"][i], "ms",
                         peer="remoting SEND_MESSAGE_V2 on the same broker", peer_value=fig["remoting"][i])
            bench.figure(f"gRPC Heartbeat (no work), round trip {name}", fig["grpc heartbeat"][i], "ms",
                         peer="remoting SEND_MESSAGE_V2 on the same broker", peer_value=fig["remoting"][i])


if __name__ == "__main__":
    main()
