"""RocketMQ's official Python 5.x client's simple consumer through a ``kill -9`` of the broker
(the promise: "after kill -9 of the broker and restart, the unacked are redelivered and the acked
are not"). The client stays up; the broker process is killed with SIGKILL after the client's
acks were answered, and started again over the same store and ports. Waits are on what the
client prints, each with a deadline."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

from . import real_clients as rcl
from .test_python5_client import POP_CONF, TOPIC, _closed, _consumer, _receive_until, _send

DEADLINE_S = 60.0


def _command(consumer: rcl.Client, answer: str, **cmd: Any) -> dict[str, Any]:
    """One command of the consumer (python5_client.py ``consume``) and the event it printed
    for it: ``answer`` or ``failed``."""
    before = len(consumer.events())
    consumer.write(json.dumps(cmd))
    consumer.wait_line(lambda _: any(e["event"] in (answer, "failed") for e in consumer.events()[before:]), f"{cmd}")
    return next(e for e in consumer.events()[before:] if e["event"] in (answer, "failed"))


def _receive_through_restart(consumer: rcl.Client, count: int) -> list[dict[str, Any]]:
    """Receives until ``count`` messages came, as an application does across a broker's restart:
    a receive that failed ``UNAVAILABLE`` (the client's channel still backing off after the
    refused connections of the kill) is tried again; any other failure fails the test."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"{len(got)} of {count} messages came again within {DEADLINE_S:.0f} s"
        e = _command(consumer, "received", op="receive", n=32, invisible=30)
        if e["event"] == "failed":
            assert e["code"] == "UNAVAILABLE", e
            time.sleep(0.2)  # the channel's reconnect back-off (the deadline bounds the loop)
            continue
        got += e["messages"]
    return got


def test_python5_consumer_gets_the_unacked_again_after_a_kill_9_and_never_the_acked(tmp_path: Path) -> None:
    rcl.require_python5_client()
    conf = {"grpcListenPort": str(rcl.free_port()), **POP_CONF}
    with rcl.cluster(tmp_path, topics={TOPIC: 2}, conf=conf) as c:
        ids = _send(c, [{"topic": TOPIC, "body": f"k{i}", "tag": "TagA"} for i in range(6)], [TOPIC])
        consumer = _consumer(c, "CG_P5_KILL", TOPIC)
        first = _receive_until(consumer, 6, invisible=3)
        acked = sorted(first, key=lambda m: m["body"])[:3]
        assert _command(consumer, "acked", op="ack", ids=[m["messageId"] for m in acked])["event"] == "acked"

        assert c.restart_broker(signal.SIGKILL) == -signal.SIGKILL  # after the acks were answered

        again = _receive_through_restart(consumer, 3)
        assert _command(consumer, "acked", op="ack", ids=[m["messageId"] for m in again])["event"] == "acked"
        after = _command(consumer, "received", op="receive", n=32, invisible=30)
        _closed(consumer)

    assert sorted(m["messageId"] for m in first) == sorted(ids)
    unacked = {m["messageId"] for m in first} - {m["messageId"] for m in acked}
    assert sorted(m["messageId"] for m in again) == sorted(unacked), (
        "an unacked message was lost, or an acked one came again"
    )
    assert {m["attempt"] for m in again} == {2} and sorted(m["body"] for m in again) == ["k3", "k4", "k5"]
    assert after["event"] == "received" and after["messages"] == [], "a message came a third time after its ack"
