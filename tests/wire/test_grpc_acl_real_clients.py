"""RocketMQ's official 5.x clients against a broker with ``aclEnable=true`` over gRPC:
with the right account (DENY by default, given only its topic and group) the Python 5.x client
signs every call (``Credentials(ak, sk)``, RocketMQ 5's ``authorization`` metadata) and sends,
receives and acks; with a wrong secret or an unknown key its calls are refused
``UNAUTHORIZED``, and with the right key and a group it has no perm on ``FORBIDDEN``; nothing of
theirs is stored or consumed. The Node.js 5.x client the same. Fails (never
skips) when a client's environment is missing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import rmqlog

from . import real_clients as rcl

TOPIC, GROUP, DENIED_GROUP = "P5ACL", "CG_P5ACL", "CG_DENIED"
KEY, SECRET = "grpcKey01", "grpcSecret01"
ACL = f"""
accounts:
  - accessKey: {KEY}
    secretKey: {SECRET}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{TOPIC}=PUB|SUB]
    groupPerms: [{GROUP}=SUB]
"""
RIGHT = {"accessKey": KEY, "secretKey": SECRET}
WRONG_SECRET = {"accessKey": KEY, "secretKey": "notTheSecret1"}
UNKNOWN_KEY = {"accessKey": "nobodyKey1", "secretKey": SECRET}
CONF = {"minInvisibleTimeMillsForRecv": "1000"}


def _bodies(root: Path) -> list[bytes]:
    store = rmqlog.MessageStore.open(root)
    try:
        store.dispatch()
        return sorted(bytes(r["body"]) for q in range(2) for r in store.read_queue(TOPIC, q, 0, 100).to_pylist())
    finally:
        store.close()


def _command(consumer: rcl.Client, **cmd: Any) -> dict[str, Any]:
    """One command of python5_client.py ``consume``; its answer (an event or a failure)."""
    start = len(consumer.lines)
    consumer.write(json.dumps(cmd))
    _, line = consumer.wait_line(
        lambda line: json.loads(line).get("event") in ("received", "acked", "failed"),
        f"the answer to {cmd}",
        start=start,
    )
    answer: dict[str, Any] = json.loads(line)
    return answer


def _produce(c: rcl.Cluster, name: str, creds: dict[str, str], bodies: list[str]) -> tuple[list[Any], list[Any]]:
    """A Python 5.x producer with ``creds`` sends ``bodies``: (its sent events, its failures)."""
    producer = c.python5(name, "produce", stdin=True, topics=[TOPIC], credentials=creds)
    producer.wait_event("ready", "the producer's start")
    for body in bodies:
        producer.write(json.dumps({"topic": TOPIC, "body": body}))
    producer.wait_line(
        lambda _: len(producer.events("sent")) + len(producer.failures()) >= len(bodies), "every send answered"
    )
    producer.close_stdin()
    producer.wait_event("closed")
    assert producer.wait_exit() == 0
    return producer.events("sent"), producer.failures()


def _consumer(c: rcl.Cluster, name: str, creds: dict[str, str], group: str = GROUP) -> rcl.Client:
    consumer = c.python5(name, "consume", stdin=True, group=group, topic=TOPIC, awaitSeconds=5, credentials=creds)
    consumer.wait_event("ready", "the simple consumer's start")
    return consumer


def test_python5_client_signs_sends_receives_and_acks_wrong_keys_are_refused(tmp_path: Path) -> None:
    rcl.require_python5_client()
    conf = {"grpcListenPort": str(rcl.free_port()), **CONF}
    with rcl.cluster(tmp_path, topics={TOPIC: 2}, conf=conf, acl=ACL) as c:
        sent, failed = _produce(c, "p5-right", RIGHT, ["m0", "m1"])
        assert len(sent) == 2 and failed == []
        wrong_sent, wrong_failed = _produce(c, "p5-wrong-secret", WRONG_SECRET, ["bad0"])
        unknown_sent, unknown_failed = _produce(c, "p5-unknown-key", UNKNOWN_KEY, ["bad1"])
        assert wrong_sent == unknown_sent == [] and len(wrong_failed) == len(unknown_failed) == 1

        # the wrong accounts receive nothing (their receives refused); the right one gets both
        thief = _consumer(c, "p5-consumer-wrong", WRONG_SECRET)
        stolen = _command(thief, op="receive", n=32, invisible=30)
        denied = _consumer(c, "p5-consumer-denied-group", RIGHT, DENIED_GROUP)
        forbidden = _command(denied, op="receive", n=32, invisible=30)
        consumer = _consumer(c, "p5-consumer", RIGHT)
        got: list[dict[str, Any]] = []
        for _ in range(8):
            answer = _command(consumer, op="receive", n=32, invisible=30)
            assert answer["event"] == "received", answer
            got += answer["messages"]
            if len(got) >= 2:
                break
        acked = _command(consumer, op="ack", ids=[m["messageId"] for m in got])
        for client in (thief, denied, consumer):
            client.close_stdin()
            client.wait_event("closed")
        assert c.stop_servers()["broker"] == 0

    # the wrong secret's route query was refused: the client cannot receive (it logs the status)
    assert stolen["event"] == "failed" and "route" in stolen["error"], stolen
    assert forbidden["event"] == "failed" and forbidden["code"] == 40300, forbidden  # Code.FORBIDDEN
    assert sorted(m["body"] for m in got) == ["m0", "m1"] and acked["event"] == "acked"
    log = (c.home / "logs" / "rocketmq_python" / "rocketmq_client.log").read_text()
    assert "40100, Check signature failed for accessKey=grpcKey01" in log  # Code.UNAUTHORIZED, as the client logs it
    assert "40100, No acl config for nobodyKey1" in log
    assert _bodies(c.root) == [b"m0", b"m1"]  # nothing of the wrong accounts stored


def test_node5_client_signs_sends_receives_and_acks_wrong_keys_cannot_start(tmp_path: Path) -> None:
    """The Node.js 5.x producer and simple consumer with the right account send, receive and ack
    (routes, Settings, every call signed); with a wrong secret their route queries are refused,
    so their start fails (the route tried 3 times, then given up), and nothing of theirs is
    stored or consumed."""
    rcl.require_node5_client()
    conf = {"grpcListenPort": str(rcl.free_port()), **CONF}
    with rcl.cluster(tmp_path, topics={TOPIC: 2}, conf=conf, acl=ACL) as c:
        producer = c.node5("node5-right", topics=[TOPIC], credentials=RIGHT)
        producer.wait_event("ready", "the Node.js producer's start (routes and Settings, signed)")
        sent = rcl.send_all(producer, [{"topic": TOPIC, "body": f"n{i}"} for i in range(2)])
        producer.close_stdin()
        producer.wait_event("closed")
        assert producer.wait_exit() == 0
        wrong = c.node5("node5-wrong-secret", topics=[TOPIC], credentials=WRONG_SECRET)
        failed = wrong.wait_event("start_failed", "the wrong producer's start to fail")
        assert wrong.wait_exit() == 1
        thief = c.node5("node5-consumer-wrong", consumer=True, group=GROUP, topic=TOPIC, credentials=WRONG_SECRET)
        stolen = thief.wait_event("start_failed", "the wrong consumer's start to fail")
        assert thief.wait_exit() == 1
        consumer = c.node5("node5-consumer", consumer=True, group=GROUP, topic=TOPIC, awaitMs=5000, credentials=RIGHT)
        consumer.wait_event("ready", "the Node.js simple consumer's start (signed)")
        got: list[dict[str, Any]] = []
        for _ in range(8):
            answer = _command(consumer, op="receive", n=32, invisibleMs=30_000)
            assert answer["event"] == "received", answer
            got += answer["messages"]
            if len(got) >= 2:
                break
        acked = _command(consumer, op="ack", ids=[m["messageId"] for m in got])
        consumer.close_stdin()
        consumer.wait_event("closed")
        assert consumer.wait_exit() == 0
        assert c.stop_servers()["broker"] == 0

    assert len(sent) == 2 and sorted(m["body"] for m in got) == ["n0", "n1"] and acked["event"] == "acked"
    assert "route" in failed["error"] and "route" in stolen["error"], (failed, stolen)
    assert _bodies(c.root) == [b"n0", b"n1"]
