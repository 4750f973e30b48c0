"""Benchmark of transactional messages on the broker, each figure beside its
peer measured in the same run.

    python jobs/bench_transactions.py [--root DIR] [--rounds R] [--json] [--messages N] [--body B]
                                      [--connections C] [--window W]

The broker runs in a process of its own (``jobs/broker_load.py broker``: ``launch.main`` on
127.0.0.1, ASYNC_FLUSH, its store under ``ROOT/broker``); this process drives it over
``--connections`` sockets with ``--window`` requests in flight each, frames encoded beforehand
(one asyncio loop, no client library in the measured path). Per round, on a topic of 4 queues:

1. ``plain``: ``--messages`` SEND_MESSAGE_V2 (310) of ``--body``-byte bodies: msgs/s. The peer of
   everything below.
2. ``half``: the same messages as half messages (``TRAN_MSG=true``, ``PGROUP``): msgs/s.
3. ``commit``: END_TRANSACTION (37, commit) of every half of step 2, with the offsets each half's
   answer gave: transactions/s, against step 1 (the target: at least 0.5x). Each commit reads its
   half back and stores the message in its topic plus an op record.
4. ``rollback``: step 2 and an END_TRANSACTION rollback of each: transactions/s.

After each round every committed message is counted in its topic (pulls by the store's own
reader in the broker are not needed: GET_MAX_OFFSET of the four queues). Medians of ``--rounds``
rounds. Figures are wall-clock on this machine; nothing here is a test threshold.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

from broker_load import HOST, max_offset_cmd  # jobs/ is this script's directory
from broker_servers import Server
from harness import Bench

import rmqlog
from rmqnet.remoting import (
    FrameDecoder,
    RemotingCommand,
    RequestCode,
    SendMessageHeader,
    encode_bytes,
)
from rmqnet.remoting.command import decode_json_header

TOPIC = "BenchTxn"
QUEUES = 4
GROUP = "BenchTxnPG"


def send_frames(n: int, body: int, half: bool, tag: str) -> list[bytes]:
    out = []
    for i in range(n):
        props = f"WAIT\x01true\x02UNIQ_KEY\x01{os.getpid():08X}{tag}{i:016X}\x02TAGS\x01t\x02"
        if half:
            props = f"TRAN_MSG\x01true\x02PGROUP\x01{GROUP}\x02" + props
        ext = SendMessageHeader(
            producer_group=GROUP,
            topic=TOPIC,
            default_topic="TBW102",
            default_topic_queue_nums=4,
            queue_id=i % QUEUES,
            sys_flag=4 if half else 0,
            born_timestamp=int(time.time() * 1000),
            flag=0,
            properties=props,
            reconsume_times=0,
            unit_mode=False,
            batch=False,
            max_reconsume_times=None,
            broker_name=None,
        ).to_ext(v2=True)
        out.append(
            encode_bytes(
                RemotingCommand(
                    RequestCode.SEND_MESSAGE_V2,
                    i + 1,
                    0,
                    None,
                    ext,
                    i.to_bytes(8, "big") + os.urandom(max(0, body - 8)),
                )
            )
        )
    return out


def end_frames(answers: dict[int, dict[str, Any]], outcome: int) -> list[bytes]:
    out = []
    for opaque in sorted(answers):
        ext = answers[opaque]
        ext_fields = {
            "producerGroup": GROUP,
            "tranStateTableOffset": ext["queueOffset"],
            "commitLogOffset": str(int(ext["msgId"][16:], 16)),
            "commitOrRollback": str(outcome),
            "fromTransactionCheck": "false",
            "msgId": ext["msgId"],
        }
        out.append(encode_bytes(RemotingCommand(RequestCode.END_TRANSACTION, opaque, 0, None, ext_fields, b"")))
    return out


class Pipe(asyncio.Protocol):
    """One connection writing its frames with ``window`` in flight; every answer's header kept."""

    def __init__(self, frames: list[bytes], window: int) -> None:
        self.frames, self.window = frames, window
        self.decoder = FrameDecoder()
        self.sent = 0
        self.answers: dict[int, dict[str, Any]] = {}
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def write(self, n: int) -> None:
        chunk = self.frames[self.sent : self.sent + n]
        self.sent += len(chunk)
        if chunk and self.transport is not None:
            self.transport.writelines(chunk)

    def data_received(self, data: bytes) -> None:
        frames = self.decoder.feed(data)
        for f in frames:
            head = decode_json_header(f.header)
            if int(head["code"]) != 0:
                raise RuntimeError(f"answered {head['code']} {head.get('remark')!r}")
            self.answers[int(head["opaque"])] = head.get("extFields") or {}
        if len(self.answers) >= len(self.frames):
            if not self.done.done():
                self.done.set_result(None)
            return
        self.write(len(frames))


async def drive(port: int, per_conn: list[list[bytes]], window: int) -> tuple[float, list[dict[int, dict[str, Any]]]]:
    """(seconds from the first write to the last answer, each connection's answers by opaque)."""
    loop = asyncio.get_running_loop()
    pipes = [Pipe(frames, window) for frames in per_conn]
    for p in pipes:
        await loop.create_connection(lambda p=p: p, HOST, port)  # type: ignore[misc]
    t0 = time.perf_counter()
    for p in pipes:
        p.write(window)
    await asyncio.wait_for(asyncio.gather(*(p.done for p in pipes)), 600)
    took = time.perf_counter() - t0
    for p in pipes:
        assert p.transport is not None
        p.transport.close()
    return took, [p.answers for p in pipes]


def split(frames: list[bytes], conns: int) -> list[list[bytes]]:
    return [frames[i::conns] for i in range(conns)]


def renumber(frames: list[list[bytes]]) -> list[list[bytes]]:
    return frames  # opaques are unique across the whole list already


def topic_total(port: int) -> int:
    async def ask() -> int:
        from rmqnet.transport import connect

        conn = await connect(HOST, port)
        total = 0
        for q in range(QUEUES):
            cmd = max_offset_cmd(TOPIC, q)
            res = await conn.invoke(cmd)
            total += int(res.ext_fields["offset"])
        conn.close()
        return total

    return asyncio.run(ask())


def main() -> None:
    bench = Bench("bench_transactions", __doc__, rounds=3, rounds_help="rounds (the median is reported)")
    bench.add_argument("--messages", type=int, default=10_000)
    bench.add_argument("--body", type=int, default=100)
    bench.add_argument("--connections", type=int, default=4)
    bench.add_argument("--window", type=int, default=64)
    with bench.run() as work:
        a = bench.args
        root = work / "broker"
        conf = work / "broker.conf"
        conf.write_text("brokerName=bench-txn\nbrokerIP1=127.0.0.1\nautoCreateTopicEnable=true\n")
        with rmqlog.MessageStore.open(root, rmqlog.StoreConfig()) as store:
            store.create_topic(TOPIC, QUEUES)
        broker = Server(["broker", str(root), str(conf)], work / "broker.log")
        figures: dict[str, list[float]] = {"plain": [], "half": [], "commit": [], "rollback": []}
        try:
            expected = 0
            for r in range(a.rounds):
                n, c, w = a.messages, a.connections, a.window
                plain_s, _ = asyncio.run(drive(broker.port, split(send_frames(n, a.body, False, f"P{r:03d}"), c), w))
                half_s, answers = asyncio.run(
                    drive(broker.port, split(send_frames(n, a.body, True, f"H{r:03d}"), c), w)
                )
                merged = {k: v for part in answers for k, v in part.items()}
                commit_s, _ = asyncio.run(drive(broker.port, split(end_frames(merged, 8), c), w))
                _, answers2 = asyncio.run(drive(broker.port, split(send_frames(n, a.body, True, f"R{r:03d}"), c), w))
                merged2 = {k: v for part in answers2 for k, v in part.items()}
                rollback_s, _ = asyncio.run(drive(broker.port, split(end_frames(merged2, 12), c), w))
                expected += 2 * n  # the plain sends and the commits
                stored = topic_total(broker.port)
                if stored != expected:
                    raise RuntimeError(f"round {r}: {stored} messages in {TOPIC}, expected {expected}")
                for name, s in (("plain", plain_s), ("half", half_s), ("commit", commit_s), ("rollback", rollback_s)):
                    figures[name].append(n / s)
                print(
                    f"round {r + 1}: plain {n / plain_s:,.0f}/s, half {n / half_s:,.0f}/s, "
                    f"commit {n / commit_s:,.0f}/s, rollback {n / rollback_s:,.0f}/s",
                    flush=True,
                )
        finally:
            broker.stop()
        med = {k: statistics.median(v) for k, v in figures.items()}
        peer = f"SEND_MESSAGE_V2 of the same {a.messages:,} messages ({a.body} B), same connections and window"
        print(f"\nplain sends:          {med['plain']:>10,.0f} msgs/s")
        for name, what in (
            ("half", "half messages sent"),
            ("commit", "END_TRANSACTION commits"),
            ("rollback", "END_TRANSACTION rollbacks"),
        ):
            print(
                f"{what:<26}{med[name]:>10,.0f} /s   {med[name] / med['plain']:.2f}x plain sends "
                f"({med['plain']:,.0f} msgs/s)"
            )
            bench.figure(
                f"{what}, {a.messages:,} x {a.body} B", med[name], "msgs/s", peer=peer, peer_value=med["plain"]
            )


if __name__ == "__main__":
    main()
