"""The broker's gRPC endpoint accepted by RocketMQ's official Python 5.x client (PyPI
``rocketmq-python-client`` 5.1.2, in ``.venv-rocketmq5``, installed by ``make clients``).

The client's access point is the broker's ``grpcListenPort`` (no name server on its side: it
asks the endpoint for routes, and the routes name the same endpoint). A producer sends normal,
timed, FIFO and transactional messages (committed and rolled back); after the broker's clean
stop the store is opened and every message read back with its properties. Fails (never skips)
when the client's environment is missing, as the other real-client tests do.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import rmqlog
from rmqnet.broker.transactions import HALF_TOPIC
from rmqnet.grpc.convert import consistent_hash

from . import real_clients as rcl

TOPIC, FIFO_TOPIC = "P5", "P5F"
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


def test_python5_producer_sends_every_message_type(tmp_path: Path) -> None:
    rcl.require_python5_client()
    deliver_at = int(time.time()) + 3600  # whole seconds, as the client sends them; not due during the test
    specs: list[dict[str, Any]] = [
        {"topic": TOPIC, "body": "normal-0", "tag": "TagA", "keys": ["k0", "k00"], "props": {"color": "red"}},
        {"topic": TOPIC, "body": "normal-1", "tag": "TagB"},
        {"topic": TOPIC, "body": "timed-2", "tag": "TagT", "deliverAt": deliver_at},
        *({"topic": FIFO_TOPIC, "body": f"fifo-{i}", "group": "order-1"} for i in range(5)),
        {"topic": TOPIC, "body": "tx-commit", "tag": "TagX", "tx": "commit"},
        {"topic": TOPIC, "body": "tx-rollback", "tag": "TagX", "tx": "rollback"},
    ]
    conf = {"grpcListenPort": str(rcl.free_port())}
    with rcl.cluster(tmp_path, topics={TOPIC: 4, FIFO_TOPIC: 4}, conf=conf) as c:
        producer = c.python5("python5-producer", "produce", stdin=True, topics=[TOPIC, FIFO_TOPIC])
        producer.wait_event("ready", "the Python 5.x producer's start (routes and settings)")
        for spec in specs:
            producer.write(json.dumps(spec))
        sent = producer.wait_events("sent", len(specs), "every send answered")
        producer.close_stdin()
        producer.wait_event("closed", "the producer's shutdown")
        assert producer.wait_exit() == 0
        assert producer.failures() == []
        assert c.stop_servers()["broker"] == 0

    ids = [e["messageId"] for e in sorted(sent, key=lambda e: e["i"])]
    assert len(set(ids)) == len(ids)
    store = rmqlog.MessageStore.open(c.root)
    try:
        store.dispatch()
        by_id = {_props(r)["UNIQ_KEY"]: r for r in _rows(store, TOPIC) + _rows(store, FIFO_TOPIC)}
        timer = {_props(r)["UNIQ_KEY"]: r for r in _rows(store, TIMER_TOPIC)}
        halves = {_props(r)["UNIQ_KEY"] for r in _rows(store, HALF_TOPIC)}
    finally:
        store.close()

    # normal: body, tag, keys, user property, the client's id as UNIQ_KEY
    n0 = by_id[ids[0]]
    assert bytes(n0["body"]) == b"normal-0"
    p0 = _props(n0)
    assert (p0["TAGS"], sorted(p0["KEYS"].split(" ")), p0["color"]) == ("TagA", ["k0", "k00"], "red")
    assert bytes(by_id[ids[1]]["body"]) == b"normal-1"
    # timed: waiting in the timer with its delivery time, not yet in the topic
    assert ids[2] not in by_id
    assert _props(timer[ids[2]])["TIMER_DELIVER_MS"] == str(deliver_at * 1000)
    # FIFO: one queue (the group's), in the order sent, the group stored
    fifo = [by_id[i] for i in ids[3:8]]
    assert {r["queueId"] for r in fifo} == {consistent_hash("order-1", 4)}
    assert [bytes(r["body"]) for r in sorted(fifo, key=lambda r: r["queueOffset"])] == [f"fifo-{i}".encode() for i in range(5)]
    assert {_props(r)["__SHARDINGKEY"] for r in fifo} == {"order-1"}
    # transactions: both halves stored; the committed one delivered, the rolled back one not
    assert {ids[8], ids[9]} <= halves
    assert bytes(by_id[ids[8]]["body"]) == b"tx-commit" and ids[9] not in by_id
    assert [e.get("ended") for e in sorted(sent, key=lambda e: e["i"])][8:] == ["commit", "rollback"]


def test_python5_producer_takes_the_settings_and_sees_typed_refusals(tmp_path: Path) -> None:
    """The Settings answered on Telemetry reach the client (its body limit becomes the broker's
    maxMessageSize, which it then enforces itself); a send to a topic the broker does not know
    fails with the status the broker answered (TOPIC_NOT_FOUND, 40402), and the producer goes on."""
    rcl.require_python5_client()
    conf = {"grpcListenPort": str(rcl.free_port()), "maxMessageSize": "65536"}
    with rcl.cluster(tmp_path, topics={TOPIC: 4}, conf=conf) as c:
        producer = c.python5("python5-producer", "produce", stdin=True, topics=[TOPIC], awaitSettings=True)
        producer.wait_event("ready")
        assert producer.wait_event("settings")["maxBodySize"] == 65536
        producer.write(json.dumps({"topic": TOPIC, "body": "x" * 70_000}))
        producer.write(json.dumps({"topic": "Nope", "body": "to nowhere"}))
        producer.write(json.dumps({"topic": TOPIC, "body": "fits"}))
        producer.wait_events("sent", 1, "the last send")
        failed = producer.failures()
        producer.close_stdin()
        producer.wait_event("closed")
        assert producer.wait_exit() == 0

    assert [f["i"] for f in failed] == [0, 1]
    assert "exceeds the threshold" in failed[0]["error"] and "65536" in failed[0]["error"]
    assert "failed to fetch topic:Nope route" in failed[1]["error"], failed[1]
    # the client logs the status it got (its exception keeps only its own text)
    log = (c.home / "logs" / "rocketmq_python" / "rocketmq_client.log").read_text()
    assert "40402, topic Nope does not exist" in log


def test_python5_simple_consumer_starts_and_its_receive_is_refused_unsupported(tmp_path: Path) -> None:
    """POP consumption is not served yet: the simple consumer starts (route, heartbeat,
    settings) and its receive fails at once with the broker's UNSUPPORTED (50500), never hangs."""
    rcl.require_python5_client()
    conf = {"grpcListenPort": str(rcl.free_port())}
    with rcl.cluster(tmp_path, topics={TOPIC: 4}, conf=conf) as c:
        consumer = c.python5("python5-consumer", "receive", group="CG_P5", topic=TOPIC)
        consumer.wait_event("ready", "the simple consumer's start")
        failed = consumer.wait_event("receive_failed", "the receive to be refused")
        consumer.wait_event("closed")
        assert consumer.wait_exit() == 0
    assert "UnsupportedException" in failed["error"] and failed["code"] == 50500, failed
    assert "ReceiveMessage" in failed["error"]


def test_python5_orphaned_transaction_is_recovered_by_the_producers_checker(tmp_path: Path) -> None:
    """A transaction the producer leaves open is checked back over its Telemetry stream
    (RecoverOrphanedTransactionCommand): its checker sees the half message (id, body, tag, the
    digest good) and commits it; the message is then delivered, once."""
    rcl.require_python5_client()
    conf = {"grpcListenPort": str(rcl.free_port()), "transactionTimeOut": "1000", "transactionCheckInterval": "1000"}
    with rcl.cluster(tmp_path, topics={TOPIC: 4}, conf=conf) as c:
        producer = c.python5("python5-producer", "produce", stdin=True, topics=[TOPIC], checkerResolution="COMMIT")
        producer.wait_event("ready")
        producer.write(json.dumps({"topic": TOPIC, "body": "orphan", "tag": "TagO", "tx": "none"}))
        (sent,) = producer.wait_events("sent", 1, "the half message's send")
        checked = producer.wait_event("checked", "the broker's check-back to reach the checker")
        ended = producer.wait_event("check_ended", "the broker's answer to the checker's commit")
        producer.close_stdin()
        producer.wait_event("closed")
        assert producer.wait_exit() == 0
        assert c.stop_servers()["broker"] == 0

    assert "ended" not in sent
    assert (checked["messageId"], checked["topic"], checked["body"], checked["tag"], checked["corrupted"]) == (
        sent["messageId"], TOPIC, "orphan", "TagO", False)
    assert ended["code"] == 20000  # Code.OK
    store = rmqlog.MessageStore.open(c.root)
    try:
        store.dispatch()
        rows = [r for r in _rows(store, TOPIC) if _props(r)["UNIQ_KEY"] == sent["messageId"]]
    finally:
        store.close()
    assert [bytes(r["body"]) for r in rows] == [b"orphan"]
