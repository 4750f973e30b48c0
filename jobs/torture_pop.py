"""Kill -9 torture of POP consumption: a consumer pops (200050) and acks (200051) while the broker
is killed with SIGKILL and restarted; the checker holds the history to at-least-once.

    python jobs/torture_pop.py [--trials N] [--seed S] [--messages 120] [--kills 2] [--run-s 2.0]
                               [--invisible-ms 1500] [--root DIR] [--keep]

A *trial*, on a fresh store root:

1. A broker process (``SYNC_FLUSH``, 1 MiB segments), topic ``PT`` with 4 queues, registered with a
   name server process that lives for the whole run. ``--messages`` messages are sent (each answered
   SEND_OK before anything else starts); message ``i``'s body names it.
2. One consumer (this process) pops ``PT`` for group ``PT_CG`` (any queue, 16 at most, invisible
   ``--invisible-ms``, no long polling) and acks each message it gets with a probability drawn from
   (seed, message, delivery): 0.6 for its first two deliveries, then 1. An ack counts as *confirmed*
   when it was answered SUCCESS before its handle's invisible time ended (``popTime +
   invisibleTime``, both clocks the machine's; 50 ms of margin): the broker applied it. A request
   that fails (the broker is down, the answer was cut by a kill) is dropped; the consumer pops again.
3. Meanwhile ``--kills`` times, each 0..``--run-s`` s after the previous (the first after consumption
   began), the broker is killed with SIGKILL and restarted on the same root and address.
4. It ends when every message is *settled* (or after 120 s: the rest are *lost*): it has a confirmed
   ack, or the ack of its last delivery was sent with an unknown outcome (cut by a kill, or answered
   after the invisible time) and 3 s after that delivery's invisible time nothing came again. Then
   the broker is stopped with SIGTERM (exit 0 expected). Counted, per message:

   - ``lost``: sent, and not settled: never delivered, or its last delivery not acked and not
     delivered again;
   - ``unexplained``: a delivery answered after a confirmed ack of the message (an ack undone by a
     kill, or a copy beyond the missed acks), or one whose ``popTime`` came before the previous
     delivery's invisible time ended (handed out while invisible);
   - ``bad``: a delivery whose topic and ``reconsumeTimes`` disagree (``%RETRY%PT_CG_PT`` exactly when
     ``reconsumeTimes`` > 0, and ``reconsumeTimes`` = the deliveries before it that had their
     invisible time run out; more only when a pop since the message's last delivery was cut by a
     kill: that pop may have handed it out unseen, reported as ``unseen``), a body no message has,
     a broker that does not restart or stop cleanly;
   - ``redelivered`` (reported, not a failure): deliveries after a first, each explained by a
     delivery before it without a confirmed ack.

   One line per trial; then ``N trials, L lost, U unexplained, B bad``; exit 1 if anything was wrong.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torture_common as tc  # noqa: E402

TOPIC = "PT"
QUEUES = 4
GROUP = "PT_CG"
RETRY = f"%RETRY%{GROUP}_{TOPIC}"
BATCH = 16
#: ms before a handle's invisible time ends by which an ack must be answered to count as confirmed
MARGIN_MS = 50
SETTLE_S = 120.0
#: ms after a delivery's invisible time by which its redelivery has come (revive rounds: 100 ms)
QUIET_MS = 3000


@dataclass
class Counts(tc.Problems):
    lost: int = 0
    unexplained: int = 0
    bad: int = 0
    kills: int = 0
    sent: int = 0
    deliveries: int = 0
    redelivered: int = 0
    confirmed: int = 0
    maybe: int = 0  # messages whose last ack's outcome is unknown (cut, or answered late): none came again
    unseen: int = 0  # deliveries made by pops a kill cut (counted by the reconsumeTimes after them)
    failed_requests: int = 0
    attempts: Counter[int] = field(default_factory=Counter)


def wants_ack(seed: int, i: int, delivery: int) -> bool:
    """Whether the consumer acks message ``i``'s ``delivery``-th delivery (0-based)."""
    return delivery >= 2 or random.Random(f"{seed}:{i}:{delivery}").random() < 0.6


@dataclass
class Message:
    """What the consumer was told about one message."""

    deliveries: list[tuple[int, int]] = field(default_factory=list)  # (popTime, invisibleTime)
    acked_at: float | None = None  # wall ms the first confirmed ack was answered
    #: the last delivery's ack was sent and its outcome is unknown (cut by a kill, or answered
    #: after the handle's invisible time: applied or not)
    maybe_acked: bool = False
    #: the consumer's count of cut pops at this message's last delivery
    cut_pops_seen: int = 0

    def settled(self, now_ms: float) -> bool:
        """Nothing more is to come: a confirmed ack, or an ack of unknown outcome whose delivery's
        invisible time ended :data:`QUIET_MS` ago with no delivery since."""
        if self.acked_at is not None:
            return True
        if not self.maybe_acked or not self.deliveries:
            return False
        pop_time, invisible = self.deliveries[-1]
        return now_ms > pop_time + invisible + QUIET_MS


class Consumer:
    """The popping and acking client of one trial, over the wire (raw 200050/200051)."""

    def __init__(self, addr: str, seed: int, invisible_ms: int, counts: Counts, n: int) -> None:
        from rmqnet.client.remote import RemoteClient

        self.addr, self.seed, self.invisible_ms, self.counts = addr, seed, invisible_ms, counts
        self.messages = {i: Message() for i in range(n)}
        #: pops whose answer a kill cut (they may have handed messages out)
        self.cut_pops = 0
        self._client_type = RemoteClient
        self.client = RemoteClient("127.0.0.1:9", timeout_s=3.0)

    def close(self) -> None:
        self.client.close()

    def _invoke(self, code: int, ext: dict[str, str], ok: tuple[int, ...]) -> Any:
        from rmqnet.client.loop import call
        from rmqnet.remoting import RemotingCommand

        try:
            return call(self.client.invoke(self.addr, RemotingCommand(code, 0, 0, None, ext, b"", "JAVA"), ok=ok))
        except Exception:  # noqa: BLE001 - the broker was killed under the request: dropped
            self.counts.failed_requests += 1
            time.sleep(0.02)  # (the broker is restarting: no busy loop)
            self.client.close()
            self.client = self._client_type("127.0.0.1:9", timeout_s=3.0)
            return None

    def round(self) -> None:
        """One pop, and the acks of what it handed out."""
        import rmqlog
        from rmqnet.remoting import RequestCode, ResponseCode

        ext = {
            "consumerGroup": GROUP,
            "topic": TOPIC,
            "queueId": "-1",
            "maxMsgNums": str(BATCH),
            "invisibleTime": str(self.invisible_ms),
            "pollTime": "0",
            "bornTime": str(int(time.time() * 1000)),
            "initMode": "0",
            "expType": "TAG",
            "exp": "*",
            "order": "false",
        }
        res = self._invoke(RequestCode.POP_MESSAGE, ext, (ResponseCode.SUCCESS, ResponseCode.POLLING_TIMEOUT))
        if res is None:
            # a pop cut by a kill may have been made: its messages were handed out unseen (their
            # next delivery counts one more attempt than this consumer saw)
            self.cut_pops += 1
            return
        if res.code != ResponseCode.SUCCESS:
            return
        answered = time.time() * 1000
        h = res.ext_fields
        pop_time, invisible = int(h["popTime"]), int(h["invisibleTime"])
        starts = {}
        for entry in str(h["startOffsetInfo"]).split(";"):
            mark, qid, start = entry.split(" ")
            starts[(mark, int(qid))] = start
        for m in rmqlog.decode_records(res.body_bytes()).to_pylist():
            i = self._check_delivery(m, pop_time, invisible, answered)
            if i is None or not wants_ack(self.seed, i, len(self.messages[i].deliveries) - 1):
                continue
            mark = "1" if str(m["topic"]).startswith("%RETRY%") else "0"
            handle = (
                f"{starts[(mark, m['queueId'])]} {pop_time} {invisible} {h['reviveQid']} {mark} pop "
                f"{m['queueId']} {m['queueOffset']}"
            )
            ack = {
                "consumerGroup": GROUP,
                "topic": str(m["topic"]),
                "queueId": str(m["queueId"]),
                "extraInfo": handle,
                "offset": str(m["queueOffset"]),
            }
            msg = self.messages[i]
            msg.maybe_acked = True
            if self._invoke(RequestCode.ACK_MESSAGE, ack, (ResponseCode.SUCCESS,)) is None:
                continue
            if time.time() * 1000 <= pop_time + invisible - MARGIN_MS and msg.acked_at is None:
                msg.acked_at = time.time() * 1000
                self.counts.confirmed += 1

    def _check_delivery(self, m: dict[str, Any], pop_time: int, invisible: int, answered: float) -> int | None:
        c = self.counts
        body = bytes(m["body"])
        parts = body.split(b":")
        if len(parts) != 2 or parts[0] != b"pm" or not parts[1].isdigit() or int(parts[1]) not in self.messages:
            c.problem("bad", f"a body no message has: {body[:40]!r}")
            return None
        i = int(parts[1])
        msg = self.messages[i]
        c.deliveries += 1
        if msg.deliveries:
            c.redelivered += 1
        if msg.acked_at is not None:
            c.problem(
                "unexplained", f"message {i} delivered at {answered:.0f} after its ack confirmed at {msg.acked_at:.0f}"
            )
        if msg.deliveries and pop_time < msg.deliveries[-1][0] + msg.deliveries[-1][1]:
            c.problem(
                "unexplained",
                f"message {i} handed out at {pop_time} while invisible until "
                f"{msg.deliveries[-1][0] + msg.deliveries[-1][1]}",
            )
        expected = len(msg.deliveries)
        reconsume, topic = int(m["reconsumeTimes"]), str(m["topic"])
        # more attempts than seen: only if a pop was cut since this message's last delivery
        unseen = reconsume > expected and self.cut_pops > msg.cut_pops_seen
        if (reconsume != expected and not unseen) or (topic == RETRY) != (reconsume > 0) or topic not in (TOPIC, RETRY):
            c.problem("bad", f"message {i}: delivery {expected + 1} from {topic} with reconsumeTimes {reconsume}")
        if unseen:
            c.unseen += reconsume - expected
        msg.cut_pops_seen = self.cut_pops
        c.attempts[expected + 1] += 1
        msg.deliveries.append((pop_time, invisible))
        msg.maybe_acked = False
        return i

    def unsettled(self) -> list[int]:
        now = time.time() * 1000
        return [i for i, m in self.messages.items() if not m.settled(now)]


def send_all(addr: str, n: int) -> None:
    """``n`` messages to ``PT``, each answered SEND_OK (round robin over the queues)."""
    from rmqnet.client.loop import call
    from rmqnet.client.remote import RemoteClient
    from rmqnet.remoting import RemotingCommand, RequestCode, SendMessageHeader

    client = RemoteClient("127.0.0.1:9", timeout_s=10.0)
    try:
        for i in range(n):
            h = SendMessageHeader(
                producer_group="PT_PG",
                topic=TOPIC,
                default_topic="TBW102",
                default_topic_queue_nums=4,
                queue_id=i % QUEUES,
                sys_flag=0,
                born_timestamp=int(time.time() * 1000),
                flag=0,
                properties="",
                reconsume_times=0,
                unit_mode=False,
                batch=False,
                max_reconsume_times=None,
                broker_name=None,
            )
            cmd = RemotingCommand(RequestCode.SEND_MESSAGE_V2, 0, 0, None, h.to_ext(True), b"pm:%d" % i, "JAVA")
            call(client.invoke(addr, cmd))
    finally:
        client.close()


def trial(n: int, args: argparse.Namespace, work: Path, namesrv: str, rng: random.Random) -> Counts:
    counts = Counts()
    root, conf = work / "store", work / "broker.conf"
    work.mkdir(parents=True)
    tc.write_conf(conf, "PopCluster", "pop")
    tc.prepare_root(root, conf, TOPIC, QUEUES)
    seed = args.seed * 1000 + n
    broker, addr = tc.start_broker(root, conf, "127.0.0.1:0", namesrv, work / "broker-1.log", "the broker")
    lock = threading.Lock()
    state = {"broker": broker, "error": None}
    consumer: Consumer | None = None
    try:
        send_all(addr, args.messages)
        counts.sent = args.messages
        consumer = Consumer(addr, seed, args.invisible_ms, counts, args.messages)
        pauses = [rng.uniform(0, args.run_s) for _ in range(args.kills)]

        def killer() -> None:
            try:
                for k, pause in enumerate(pauses, 2):
                    time.sleep(pause)
                    with lock:
                        state["broker"] = tc.kill_restart(
                            state["broker"], root, conf, addr, namesrv, work / f"broker-{k}.log"
                        )
                        counts.kills += 1
            except Exception as exc:  # noqa: BLE001 - the trial reports it
                state["error"] = exc

        thread = threading.Thread(target=killer, name="killer", daemon=True)
        thread.start()
        deadline = time.monotonic() + SETTLE_S
        while (consumer.unsettled() or thread.is_alive()) and time.monotonic() < deadline:
            consumer.round()
            time.sleep(0.01)
        thread.join(tc.GUARD_S)
        if state["error"] is not None:
            counts.problem("bad", f"the broker did not restart: {state['error']}")
        for i in consumer.unsettled():
            m = consumer.messages[i]
            counts.problem(
                "lost",
                f"message {i}: not acked and not delivered again after {SETTLE_S:.0f} s "
                f"({len(m.deliveries)} deliveries, the last {m.deliveries[-1] if m.deliveries else None})",
            )
        counts.maybe = sum(1 for m in consumer.messages.values() if m.acked_at is None)
    finally:
        if consumer is not None:
            consumer.close()
        with lock:
            proc = state["broker"]
        assert isinstance(proc, tc.subprocess.Popen)
        if proc.poll() is None:
            tc.stop_broker(proc, counts.problem)
    print(
        f"trial {n}: {counts.kills} kills, {counts.sent} sent, {counts.deliveries} deliveries "
        f"({counts.redelivered} redelivered), {counts.confirmed} confirmed acks, {counts.maybe} acks of "
        f"unknown outcome, {counts.unseen} unseen deliveries, {counts.failed_requests} requests cut; {counts.lost} "
        f"lost, {counts.unexplained} unexplained, {counts.bad} bad",
        flush=True,
    )
    counts.print_problems()
    return counts


def main(argv: list[str] | None = None) -> int:
    args = tc.parse_trial_args(
        argv,
        __doc__,
        [
            ("--messages", {"type": int, "default": 120}),
            ("--kills", {"type": int, "default": 2}),
            ("--invisible-ms", {"type": int, "default": 1500}),
        ],
        2.0,
        "each kill comes 0..RUN_S s after the previous one",
    )
    total = Counts()

    def summary() -> None:
        spread = ", ".join(f"{k}: {v}" for k, v in sorted(total.attempts.items()))
        print(f"deliveries by attempt: {spread}", flush=True)
        print(
            f"{args.trials} trials, {total.lost} lost, {total.unexplained} unexplained, {total.bad} bad "
            f"({total.kills} kills, {total.sent} messages, {total.deliveries} deliveries, {total.redelivered} "
            f"redelivered, each after a delivery without a confirmed ack)",
            flush=True,
        )

    return tc.run_trials(
        args,
        "torture-pop-",
        lambda base: (
            f"torture_pop: {args.trials} trials, seed {args.seed}, {args.messages} messages, "
            f"{args.kills} kills each, invisible {args.invisible_ms} ms, SYNC_FLUSH, "
            f"work directory {base}"
        ),
        trial,
        total,
        lambda c: bool(c.lost or c.unexplained or c.bad),
        summary,
    )


if __name__ == "__main__":
    sys.exit(main())
