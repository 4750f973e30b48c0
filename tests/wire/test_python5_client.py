"""The broker's gRPC endpoint accepted by RocketMQ's official Python 5.x client (PyPI
``rocketmq-python-client`` 5.1.2, in ``.venv-rocketmq5``, installed by ``make clients``).

The client's access point is the broker's ``grpcListenPort`` (no name server on its side: it
asks the endpoint for routes, and the routes name the same endpoint). A producer sends normal,
timed, FIFO and transactional messages (committed and rolled back); after the broker's clean
stop the store is opened and every message read back with its properties. A SimpleConsumer
receives and acks (POP): the unacked come again with their attempt count, a changed invisible
duration holds one back, a FIFO group's messages arrive in order. Fails (never skips)
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
    assert [bytes(r["body"]) for r in sorted(fifo, key=lambda r: r["queueOffset"])] == [
        f"fifo-{i}".encode() for i in range(5)
    ]
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


def _consumer(c: rcl.Cluster, group: str, topic: str) -> rcl.Client:
    consumer = c.python5(f"python5-consumer-{group}", "consume", stdin=True, group=group, topic=topic, awaitSeconds=5)
    consumer.wait_event("ready", "the simple consumer's start")
    return consumer


def _do(consumer: rcl.Client, event: str, **cmd: Any) -> dict[str, Any]:
    """One command of the consumer (python5_client.py ``consume``) and its answer."""
    before = len(consumer.events(event)) + len(consumer.events("failed"))
    consumer.write(json.dumps(cmd))
    consumer.wait_line(lambda _: len(consumer.events(event)) + len(consumer.events("failed")) > before, f"{cmd}")
    assert consumer.events("failed") == [], consumer.events("failed")
    return consumer.events(event)[-1]


def _receive_until(
    consumer: rcl.Client, count: int, invisible: int, *, n: int = 32, tries: int = 8
) -> list[dict[str, Any]]:
    """Receives until ``count`` messages came (each receive long-polls: an empty one waited)."""
    got: list[dict[str, Any]] = []
    for _ in range(tries):
        got += _do(consumer, "received", op="receive", n=n, invisible=invisible)["messages"]
        if len(got) >= count:
            break
    return got


def _send(c: rcl.Cluster, specs: list[dict[str, Any]], topics: list[str]) -> list[str]:
    producer = c.python5("python5-producer", "produce", stdin=True, topics=topics)
    producer.wait_event("ready")
    sent = rcl.send_all(producer, specs)
    producer.close_stdin()
    producer.wait_event("closed")
    return [e["messageId"] for e in sorted(sent, key=lambda e: e["i"])]


def _closed(consumer: rcl.Client) -> None:
    consumer.close_stdin()
    consumer.wait_event("closed")
    assert consumer.wait_exit() == 0


POP_CONF = {"minInvisibleTimeMillsForRecv": "1000"}


def test_python5_simple_consumer_receives_acks_and_gets_the_unacked_again_with_attempt_2(tmp_path: Path) -> None:
    """Three messages received (attempt 1, digests good); two acked; the third, not acked, is
    received again once its invisible time (2 s) passed, with delivery attempt 2 and the same
    id; acked then, nothing more comes (the acked are not redelivered)."""
    rcl.require_python5_client()
    conf = {"grpcListenPort": str(rcl.free_port()), **POP_CONF}
    with rcl.cluster(tmp_path, topics={TOPIC: 4}, conf=conf) as c:
        ids = _send(c, [{"topic": TOPIC, "body": f"m{i}", "tag": "TagA"} for i in range(3)], [TOPIC])
        consumer = _consumer(c, "CG_P5", TOPIC)
        first = _receive_until(consumer, 3, invisible=2)
        _do(consumer, "acked", op="ack", ids=[m["messageId"] for m in first[:2]])
        again = _receive_until(consumer, 1, invisible=30)
        _do(consumer, "acked", op="ack", ids=[m["messageId"] for m in again])
        after = _do(consumer, "received", op="receive", n=32, invisible=30)["messages"]
        _closed(consumer)

    assert sorted(m["messageId"] for m in first) == sorted(ids)
    assert {(m["attempt"], m["corrupted"]) for m in first} == {(1, False)}
    assert sorted(m["body"] for m in first) == ["m0", "m1", "m2"]
    assert [(m["messageId"], m["body"], m["attempt"]) for m in again] == [(first[2]["messageId"], first[2]["body"], 2)]
    assert after == []


def test_python5_change_invisible_duration_keeps_a_message_from_coming_back(tmp_path: Path) -> None:
    """A message received for 2 s, then changed to 60 s: a receive that long-polls past the
    first 2 s gets nothing; the ack with the handle the change gave succeeds."""
    rcl.require_python5_client()
    conf = {"grpcListenPort": str(rcl.free_port()), **POP_CONF}
    with rcl.cluster(tmp_path, topics={TOPIC: 4}, conf=conf) as c:
        _send(c, [{"topic": TOPIC, "body": "slow"}], [TOPIC])
        consumer = _consumer(c, "CG_P5C", TOPIC)
        (m,) = _receive_until(consumer, 1, invisible=2)
        _do(consumer, "changed", op="change", id=m["messageId"], invisible=60)
        during = _do(consumer, "received", op="receive", n=32, invisible=30)["messages"]
        _do(consumer, "acked", op="ack", ids=[m["messageId"]])
        _closed(consumer)
    assert during == []


def test_python5_fifo_group_arrives_in_order(tmp_path: Path) -> None:
    """A group with ``consumeMessageOrderly`` (RocketMQ 5's FIFO group): its messages of one
    message group come in the order sent, the next batch only after the first is acked."""
    from rmqnet.client.admin import Admin

    rcl.require_python5_client()
    conf = {"grpcListenPort": str(rcl.free_port()), **POP_CONF}
    with rcl.cluster(tmp_path, topics={FIFO_TOPIC: 4}, conf=conf) as c:
        with Admin(c.namesrv_addr) as admin:
            admin.create_group(c.broker_addr, "CG_P5F", consumeMessageOrderly=True)
        _send(c, [{"topic": FIFO_TOPIC, "body": f"fifo-{i}", "group": "order-1"} for i in range(5)], [FIFO_TOPIC])
        consumer = _consumer(c, "CG_P5F", FIFO_TOPIC)
        first = _receive_until(consumer, 1, invisible=30, n=2)
        _do(consumer, "acked", op="ack", ids=[m["messageId"] for m in first])
        rest = _receive_until(consumer, 3, invisible=30)
        _do(consumer, "acked", op="ack", ids=[m["messageId"] for m in rest])
        _closed(consumer)

    assert [m["body"] for m in first] == ["fifo-0", "fifo-1"]
    assert [m["body"] for m in rest] == ["fifo-2", "fifo-3", "fifo-4"]
    assert {m["group"] for m in first + rest} == {"order-1"}


def _sql_consumer(c: rcl.Cluster, group: str, sql: str) -> rcl.Client:
    consumer = c.python5(
        f"python5-consumer-{group}", "consume", stdin=True, group=group, topic=TOPIC, awaitSeconds=5, sql=sql
    )
    consumer.wait_event("ready", "the simple consumer's start")
    return consumer


def test_python5_simple_consumer_with_a_sql92_filter_receives_only_the_matching(tmp_path: Path) -> None:
    """``FilterExpression("n >= 3 AND color = 'red'", FilterType.SQL)`` on a broker with
    ``enablePropertyFilter=true``: of six messages (user properties ``n``, ``color``) the two
    that match are received and acked; nothing else comes, the others never handed out."""
    rcl.require_python5_client()
    conf = {"grpcListenPort": str(rcl.free_port()), "enablePropertyFilter": "true", **POP_CONF}
    with rcl.cluster(tmp_path, topics={TOPIC: 4}, conf=conf) as c:
        _send(
            c,
            [
                {"topic": TOPIC, "body": f"m{i}", "props": {"n": str(i), "color": "red" if i % 2 else "blue"}}
                for i in range(6)
            ],
            [TOPIC],
        )
        consumer = _sql_consumer(c, "CG_P5S", "n >= 3 AND color = 'red'")
        got = _receive_until(consumer, 2, invisible=30)
        _do(consumer, "acked", op="ack", ids=[m["messageId"] for m in got])
        after = _do(consumer, "received", op="receive", n=32, invisible=30)["messages"]
        _closed(consumer)

    assert sorted(m["body"] for m in got) == ["m3", "m5"]
    assert after == []


def test_python5_sql92_receive_without_enable_property_filter_fails_unsupported(tmp_path: Path) -> None:
    """The same subscription on a broker with ``enablePropertyFilter=false`` (the default): the
    client starts, and its receive fails with the status ``UNSUPPORTED`` (50500)."""
    rcl.require_python5_client()
    conf = {"grpcListenPort": str(rcl.free_port()), **POP_CONF}
    with rcl.cluster(tmp_path, topics={TOPIC: 4}, conf=conf) as c:
        _send(c, [{"topic": TOPIC, "body": "m", "props": {"n": "1"}}], [TOPIC])
        consumer = _sql_consumer(c, "CG_P5S", "n = 1")
        consumer.write(json.dumps({"op": "receive", "n": 32, "invisible": 30}))
        consumer.wait_line(lambda _: consumer.events("failed") != [], "the refused receive")
        (failed,) = consumer.events("failed")
        _closed(consumer)

    assert failed["code"] == 50500, failed


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
        sent["messageId"],
        TOPIC,
        "orphan",
        "TagO",
        False,
    )
    assert ended["code"] == 20000  # Code.OK
    store = rmqlog.MessageStore.open(c.root)
    try:
        store.dispatch()
        rows = [r for r in _rows(store, TOPIC) if _props(r)["UNIQ_KEY"] == sent["messageId"]]
    finally:
        store.close()
    assert [bytes(r["body"]) for r in rows] == [b"orphan"]
