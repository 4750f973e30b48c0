"""The broker's gRPC endpoint accepted by RocketMQ's official Node.js 5.x client (npm
``rocketmq-client-nodejs`` 1.0.8, installed by ``make clients`` from the committed lock file in
``tests/wire/clients/node5/``).

Its access point is the broker's ``grpcListenPort``; it waits at start for the Settings the
broker answers on Telemetry (and needs their exponential back-off). A producer sends normal,
timed (millisecond delivery time), FIFO and transactional messages; after the broker's clean
stop the store is read back. Its SimpleConsumer (``consumer5.js``) receives and acks by POP. Fails (never skips) when
the client is missing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import rmqlog
from rmqnet.grpc.convert import consistent_hash

from . import real_clients as rcl

TOPIC, FIFO_TOPIC = "N5", "N5F"
TIMER_TOPIC = "rmq_sys_wheel_timer"


def _rows(store: rmqlog.MessageStore, topic: str) -> list[dict[str, Any]]:
    if topic not in store.topics():
        return []
    out: list[dict[str, Any]] = []
    for q in range(8):
        try:
            out += store.read_queue(topic, q, 0, 1 << 40).to_pylist()
        except rmqlog.StoreError:
            continue
    return out


def _props(row: dict[str, Any]) -> dict[str, str]:
    return dict(row["properties"] or [])


def test_node5_producer_sends_every_message_type(tmp_path: Path) -> None:
    rcl.require_node5_client()
    deliver_at_ms = int(time.time() * 1000) + 3_600_123  # milliseconds, as the Node.js client sends them
    specs: list[dict[str, Any]] = [
        {"topic": TOPIC, "body": "normal-0", "tag": "TagA", "keys": ["k0"], "props": {"color": "red"}},
        {"topic": TOPIC, "body": "timed-1", "deliverAt": deliver_at_ms},
        *({"topic": FIFO_TOPIC, "body": f"fifo-{i}", "group": "order-9"} for i in range(4)),
        {"topic": TOPIC, "body": "tx-commit", "tx": "commit"},
        {"topic": TOPIC, "body": "tx-rollback", "tx": "rollback"},
        {"topic": "Nope", "body": "to nowhere"},
    ]
    conf = {"grpcListenPort": str(rcl.free_port())}
    with rcl.cluster(tmp_path, topics={TOPIC: 4, FIFO_TOPIC: 4}, conf=conf) as c:
        producer = c.node5("node5-producer", topics=[TOPIC, FIFO_TOPIC])
        producer.wait_event("ready", "the Node.js 5.x producer's start (routes and the Settings it waits for)")
        for spec in specs:
            producer.write(json.dumps(spec))
        sent = producer.wait_events("sent", len(specs) - 1, "every send to a known topic answered")
        (failed,) = producer.wait_events("failed", 1, "the send to an unknown topic refused")
        producer.close_stdin()
        producer.wait_event("closed")
        assert producer.wait_exit() == 0
        assert c.stop_servers()["broker"] == 0

    assert failed["i"] == len(specs) - 1 and "40402" in failed["error"]
    ids = [e["messageId"] for e in sorted(sent, key=lambda e: e["i"])]
    store = rmqlog.MessageStore.open(c.root)
    try:
        store.dispatch()
        by_id = {_props(r)["UNIQ_KEY"]: r for r in _rows(store, TOPIC) + _rows(store, FIFO_TOPIC)}
        timer = {_props(r)["UNIQ_KEY"]: r for r in _rows(store, TIMER_TOPIC)}
    finally:
        store.close()
    p0 = _props(by_id[ids[0]])
    assert (bytes(by_id[ids[0]]["body"]), p0["TAGS"], p0["KEYS"], p0["color"]) == (b"normal-0", "TagA", "k0", "red")
    assert ids[1] not in by_id and _props(timer[ids[1]])["TIMER_DELIVER_MS"] == str(deliver_at_ms)
    fifo = [by_id[i] for i in ids[2:6]]
    assert {r["queueId"] for r in fifo} == {consistent_hash("order-9", 4)}  # the broker's choice, not the client's
    assert [bytes(r["body"]) for r in sorted(fifo, key=lambda r: r["queueOffset"])] == [
        f"fifo-{i}".encode() for i in range(4)
    ]
    assert bytes(by_id[ids[6]]["body"]) == b"tx-commit" and ids[7] not in by_id


def _do(consumer: rcl.Client, event: str, **cmd: Any) -> dict[str, Any]:
    """One command of consumer5.js and its answer (a failed one fails the test)."""
    before = len(consumer.events(event)) + len(consumer.events("failed"))
    consumer.write(json.dumps(cmd))
    consumer.wait_line(lambda _: len(consumer.events(event)) + len(consumer.events("failed")) > before, f"{cmd}")
    assert consumer.events("failed") == [], consumer.events("failed")
    return consumer.events(event)[-1]


def test_node5_simple_consumer_receives_acks_and_gets_the_unacked_again(tmp_path: Path) -> None:
    """The Node.js SimpleConsumer (it waits at start for the consumer Settings) receives two
    messages sent by the Node.js producer (attempt 1), acks one; the other comes again after its
    2 s invisible time with delivery attempt 2; once acked, a receive finds nothing."""
    rcl.require_node5_client()
    conf = {"grpcListenPort": str(rcl.free_port()), "minInvisibleTimeMillsForRecv": "1000"}
    with rcl.cluster(tmp_path, topics={TOPIC: 4}, conf=conf) as c:
        producer = c.node5("node5-producer", topics=[TOPIC])
        producer.wait_event("ready")
        for i in range(2):
            producer.write(json.dumps({"topic": TOPIC, "body": f"n{i}", "tag": "TagA"}))
        sent = producer.wait_events("sent", 2, "both sends")
        producer.close_stdin()
        producer.wait_event("closed")
        consumer = c.node5("node5-consumer", consumer=True, group="CG_N5", topic=TOPIC, awaitMs=5000)
        consumer.wait_event("ready", "the Node.js simple consumer's start")
        first: list[dict[str, Any]] = []
        for _ in range(8):
            first += _do(consumer, "received", op="receive", n=32, invisibleMs=2000)["messages"]
            if len(first) >= 2:
                break
        _do(consumer, "acked", op="ack", ids=[first[0]["messageId"]])
        again: list[dict[str, Any]] = []
        for _ in range(8):
            again += _do(consumer, "received", op="receive", n=32, invisibleMs=30_000)["messages"]
            if again:
                break
        _do(consumer, "acked", op="ack", ids=[m["messageId"] for m in again])
        after = _do(consumer, "received", op="receive", n=32, invisibleMs=30_000)["messages"]
        consumer.close_stdin()
        consumer.wait_event("closed")
        assert consumer.wait_exit() == 0

    assert sorted(m["messageId"] for m in first) == sorted(e["messageId"] for e in sent)
    assert sorted((m["body"], m["attempt"]) for m in first) == [("n0", 1), ("n1", 1)]
    assert [(m["messageId"], m["attempt"]) for m in again] == [(first[1]["messageId"], 2)]
    assert after == []
