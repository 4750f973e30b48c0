"""CONSUMER_SEND_MSG_BACK over real sockets: a name server and a broker (``rmqnet.broker.launch``)
on 127.0.0.1 (the fixture of ``test_broker_pull_over_the_wire``), driven by our client's
``PullConsumer.send_back``: a retry that comes back through the broker's scheduler (delay level
1, 1 s) on ``%RETRY%<group>``, a dead letter on ``%DLQ%<group>``, and refusals as BrokerError.
Waits are long polls on the retry and dead-letter queues, nothing sleeps."""

from __future__ import annotations

import json

import pytest

from rmqnet.cli import main as cli_main
from rmqnet.client import BrokerError, Producer, PullConsumer
from rmqnet.remoting import ResponseCode

from .test_broker_pull_over_the_wire import Servers, servers  # noqa: F401 - the fixture


def _pull_one(consumer: PullConsumer, topic: str, offset: int = 0) -> dict:
    for _ in range(20):  # each a long poll; a first retry is due ~1 s after its send-back
        got = consumer.pull(topic, 0, offset, suspend_ms=5_000)
        if got.status == "FOUND":
            return got.messages.to_pylist()[0]
    raise AssertionError(f"nothing arrived on {topic}")


def test_send_back_retries_then_dead_letters_over_the_wire(
    servers: Servers,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    with Producer("PG", servers.namesrv) as producer, PullConsumer("CG", servers.namesrv) as consumer:
        sent = producer.send("T", b"fails", tags="A", keys=["k1"], queue_id=0)
        [msg] = consumer.pull("T", 0, 0, suspend_ms=5_000).messages.to_pylist()
        assert msg["msgId"] == sent.offset_msg_id
        consumer.send_back(msg, delay_level=1)  # level 1: 1 s with the default levels
        retry = _pull_one(consumer, "%RETRY%CG")
        props = dict(retry["properties"])
        assert (retry["body"], retry["reconsumeTimes"], retry["tags"]) == (b"fails", 1, "A")
        assert props["RETRY_TOPIC"] == "T" and props["ORIGIN_MESSAGE_ID"] == sent.offset_msg_id
        # the retry fails too, and the group allows one: a dead letter at once
        consumer.send_back(retry, max_reconsume_times=1)
        dead = _pull_one(consumer, "%DLQ%CG")
        assert (dead["body"], dead["reconsumeTimes"]) == (b"fails", 2)
        assert dict(dead["properties"])["ORIGIN_MESSAGE_ID"] == sent.offset_msg_id
        # rmqlog dlq over the wire shows it
        capsys.readouterr()
        assert cli_main(["dlq", "--namesrv", servers.namesrv, "CG", "--json", "--body", "none"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["origins"] == {"T": 1} and [m["reconsumeTimes"] for m in shown["messages"]] == [2]
        assert cli_main(["dlq", "--namesrv", servers.namesrv, "NoSuchGroup"]) == 2
        with pytest.raises(BrokerError) as err:
            consumer.send_back({**msg, "commitLogOffset": msg["commitLogOffset"] + 1})
        assert err.value.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in str(err.value)
    with PullConsumer("bad/group", servers.namesrv) as bad, pytest.raises(BrokerError) as err:
        bad.send_back(msg)
    assert err.value.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
