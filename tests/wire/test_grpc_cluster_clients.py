"""RocketMQ's official 5.x clients against two broker groups through one name server:
broker-a (127.0.0.1) and broker-b (127.0.0.2), each with a gRPC endpoint on the same port
(tests/wire/real_groups.py); the clients' access point is broker-a's. Its route names both
groups' queues, each at its own master's endpoint, so the clients send to and receive from both.

- The Python 5.x producer's messages land on both brokers (read back from both stores, each
  message in one); its simple consumer receives and acks every one.
- The Node.js 5.x PushConsumer of one group (push5.js) is assigned both groups (QueryAssignment)
  and consumes every message of both brokers, each once.

Waits are on what the clients print, each with a deadline. Fails (never skips) when a client
is missing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import rmqlog

from . import real_clients as rcl
from . import real_groups as rg

CONF = {"minInvisibleTimeMillsForRecv": "1000"}
#: the test topics' queues on each group
QUEUES = 2


def _stored_ids(root: Path, topic: str) -> list[str]:
    """The UNIQ_KEY of every message of ``topic`` in the store at ``root`` (the broker stopped)."""
    store = rmqlog.MessageStore.open(root)
    try:
        store.dispatch()
        if topic not in store.topics():
            return []
        out = []
        for q in range(QUEUES):
            out += [dict(r["properties"] or [])["UNIQ_KEY"] for r in store.read_queue(topic, q, 0, 1 << 40).to_pylist()]
        return out
    finally:
        store.close()


def _on_both(g: rg.Groups, topic: str, ids: list[str]) -> dict[str, list[str]]:
    """Each broker's stored ids of ``topic``; asserts every id is in exactly one, and both hold some."""
    held = {name: _stored_ids(root, topic) for name, root in g.roots.items()}
    assert sorted(held["broker-a"] + held["broker-b"]) == sorted(ids), held
    assert held["broker-a"] and held["broker-b"], f"the messages did not spread over both groups: {held}"
    return held


def _do(consumer: rcl.Client, event: str, **cmd: Any) -> dict[str, Any]:
    before = len(consumer.events(event)) + len(consumer.events("failed"))
    consumer.write(json.dumps(cmd))
    consumer.wait_line(lambda _: len(consumer.events(event)) + len(consumer.events("failed")) > before, f"{cmd}")
    assert consumer.events("failed") == [], consumer.events("failed")
    return consumer.events(event)[-1]


def test_python5_producer_and_simple_consumer_across_two_broker_groups(tmp_path: Path) -> None:
    rcl.require_python5_client()
    topic, n = "P5C", 12
    with rg.groups(tmp_path, topics={topic: QUEUES}, conf={"grpcListenPort": str(rg.free_port_on_both()), **CONF}) as g:
        producer = g.python5("python5-producer", "produce", stdin=True, topics=[topic])
        producer.wait_event("ready", "the Python 5.x producer's start")
        sent = rcl.send_all(producer, [{"topic": topic, "body": f"c{i}", "tag": "TagA"} for i in range(n)])
        producer.close_stdin()
        producer.wait_event("closed")
        ids = [e["messageId"] for e in sent]
        consumer = g.python5("python5-consumer", "consume", stdin=True, group="CG_P5C", topic=topic, awaitSeconds=2)
        consumer.wait_event("ready", "the simple consumer's start")
        got: list[dict[str, Any]] = []
        for _ in range(4 * n):  # (each receive asks one broker; an empty one long-polls its 2 s)
            batch = _do(consumer, "received", op="receive", n=32, invisible=30)["messages"]
            if batch:
                _do(consumer, "acked", op="ack", ids=[m["messageId"] for m in batch])
            got += batch
            if len(got) >= n:
                break
        consumer.close_stdin()
        consumer.wait_event("closed")
        assert consumer.wait_exit() == 0
        codes = g.stop_servers()
        assert (codes["broker-a"], codes["broker-b"]) == (0, 0)
    assert sorted(m["messageId"] for m in got) == sorted(ids)
    assert {(m["attempt"], m["corrupted"]) for m in got} == {(1, False)}
    _on_both(g, topic, ids)


def test_node5_push_consumer_of_one_group_consumes_both_brokers_messages_each_once(tmp_path: Path) -> None:
    rcl.require_node5_client()
    topic, n = "N5C", 10
    with rg.groups(tmp_path, topics={topic: QUEUES}, conf={"grpcListenPort": str(rg.free_port_on_both()), **CONF}) as g:
        producer = g.node5("node5-producer", topics=[topic])
        producer.wait_event("ready")
        sent = rcl.send_all(producer, [{"topic": topic, "body": f"p{i}", "tag": "TagA"} for i in range(n)])
        producer.close_stdin()
        producer.wait_event("closed")
        ids = [e["messageId"] for e in sent]
        push = g.push5("node5-push", group="CG_N5C", topic=topic)
        push.wait_event("ready", "the push consumer's start")
        g.wait_for(
            lambda: len({e["messageId"] for e in push.events("consumed")}) >= n, "every message consumed", timeout=60
        )
        push.close_stdin()
        push.wait_event("closed")
        assert push.wait_exit() == 0
        codes = g.stop_servers()
        assert (codes["broker-a"], codes["broker-b"]) == (0, 0)
    consumed = push.events("consumed")
    assert sorted(e["messageId"] for e in consumed) == sorted(ids)  # each once
    assert {(e["result"], e["attempt"]) for e in consumed} == {("SUCCESS", 1)}
    _on_both(g, topic, ids)
