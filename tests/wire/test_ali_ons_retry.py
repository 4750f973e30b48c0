"""Retries and dead letters with ali-ons 3.12.0: a push consumer whose handler throws
sends the message back (CONSUMER_SEND_MSG_BACK 36); it comes again from ``%RETRY%<group>`` (which
ali-ons subscribes by itself) with ``reconsumeTimes`` counting the failures, and past the
consumer's ``maxReconsumeTimes`` it lands in ``%DLQ%<group>``, which ``rmqlog dlq`` shows and
``rmqlog dlq-resend`` sends back to its topic. Delay levels are 1 s here (``messageDelayLevel``
in broker.conf): the waits are on the consumer's events and on long polls, never on the clock."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import rmqlog
from rmqnet.client import PullConsumer

from . import real_clients as rcl

LEVELS = " ".join(["1s"] * 18)
QUICK = {"messageDelayLevel": LEVELS}


def _ready(c: rcl.Cluster, consumer: rcl.Client) -> None:
    """The consumer holds the topic's queue and has a pull of it out (the broker holds it)."""
    consumer.wait_event("rebalance", "the topic's queue", where=lambda e: e["queues"] == [0])
    consumer.wait_event("pulling", "a pull of queue 0")


def test_a_failing_handler_gets_the_message_again_from_the_retry_topic(tmp_path: Path) -> None:
    topic, group = "ALI_RETRY", "CG_ALI_RETRY"
    spec = rcl.message(topic, 0, tags="TagR", keys=["kr"])
    with rcl.cluster(tmp_path, topics={topic: 1}, conf=QUICK) as c:
        consumer = c.ali_ons_consumer("consumer", group, topic, count=3, failUntil=2)
        producer = c.ali_ons_producer()
        producer.wait_event("ready")
        _ready(c, consumer)
        [sent] = rcl.send_all(producer, [spec])
        consumer.wait_event("closed", "3 deliveries (2 failed), then close()")
        assert consumer.wait_exit() == 0
        producer.close_stdin()
        assert producer.wait_exit() == 0
        assert c.stop_servers()["broker"] == 0
    got = consumer.events("message")
    assert [e["reconsumeTimes"] for e in got] == [0, 1, 2]
    assert [bool(e.get("failed")) for e in got] == [True, True, False]
    assert {e["bodySha256"] for e in got} == {rcl.sha256(spec["body"])}
    assert [e["tags"] for e in got] == ["TagR"] * 3 and [e["keys"] for e in got] == ["kr"] * 3
    assert got[0]["msgId"] == sent["msgId"]
    assert [e["originMsgId"] for e in got[1:]] == [sent["msgId"]] * 2  # ORIGIN_MESSAGE_ID: the first msgId
    assert all(e["topic"] == topic for e in got)  # ali-ons resets a retry's topic from RETRY_TOPIC
    with rmqlog.MessageStore.open(tmp_path / "store", read_only=True) as s:
        retries = s.read_queue(f"%RETRY%{group}", 0, 0, 100).to_pylist()
        assert [m["reconsumeTimes"] for m in retries] == [1, 2]
        assert all(dict(m["properties"])["RETRY_TOPIC"] == topic for m in retries)
        assert f"%DLQ%{group}" not in s.topics()
        assert s.committed_offset(group, topic, 0) == 1


def test_after_the_maximum_it_lands_in_the_dead_letter_topic(tmp_path: Path) -> None:
    topic, group = "ALI_DLQ", "CG_ALI_DLQ"
    body = rcl.big_body(7)  # ali-ons deflates it: the dead letter keeps the compressed body and its bit
    spec = rcl.message(topic, 0, body=body)
    with rcl.cluster(tmp_path, topics={topic: 1}, conf=QUICK) as c:
        consumer = c.ali_ons_consumer("consumer", group, topic, failUntil=100, maxReconsumeTimes=2)
        producer = c.ali_ons_producer()
        producer.wait_event("ready")
        _ready(c, consumer)
        [sent] = rcl.send_all(producer, [spec])
        consumer.wait_events("message", 3, "3 failed deliveries")
        with PullConsumer("rmqlog_test", c.client_namesrv_addr) as reader:  # a long poll on the DLQ
            for _ in range(30):
                got = reader.pull(f"%DLQ%{group}", 0, 0, suspend_ms=5_000)
                if got.status == "FOUND":
                    break
            [dead] = got.messages.to_pylist()
        consumer.stop()
        producer.close_stdin()
        assert producer.wait_exit() == 0
        assert c.stop_servers()["broker"] == 0
    deliveries = consumer.events("message")
    assert [e["reconsumeTimes"] for e in deliveries[:3]] == [0, 1, 2] and all(e["failed"] for e in deliveries)
    props = dict(dead["properties"])
    assert dead["reconsumeTimes"] == 3 and props["RETRY_TOPIC"] == topic and props["ORIGIN_MESSAGE_ID"] == sent["msgId"]
    assert dead["sysFlag"] & 1 and zlib.decompress(dead["body"]) == body.encode()  # stored as ali-ons sent it

    # rmqlog shows it, and sends it back to its topic
    cli = [sys.executable, "-m", "rmqlog"]
    shown = subprocess.run(
        [*cli, "dlq", str(tmp_path / "store"), group, "--body", "none"], capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    [line] = [json.loads(x) for x in shown.stdout.splitlines()]
    assert line["properties"]["ORIGIN_MESSAGE_ID"] == sent["msgId"] and f"first sent to: {topic}: 1" in shown.stderr
    resent = subprocess.run(
        [*cli, "dlq-resend", str(tmp_path / "store"), group, "--json"], capture_output=True, text=True
    )
    assert resent.returncode == 0, resent.stderr
    assert json.loads(resent.stdout)["topics"] == {topic: 1}
    with rmqlog.MessageStore.open(tmp_path / "store") as s:
        s.dispatch()
        [first, again] = s.read_queue(topic, 0, 0, 10).to_pylist()
        assert again["body"] == first["body"] and again["reconsumeTimes"] == 0 and again["sysFlag"] & 1
        assert dict(again["properties"])["ORIGIN_MESSAGE_ID"] == sent["msgId"]
