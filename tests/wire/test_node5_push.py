"""RocketMQ's official Node.js 5.x client's PushConsumer (``tests/wire/clients/node5/push5.js``)
against the broker's gRPC endpoint: it asks for its queues (QueryAssignment), receives by POP
with long polling, acks what its listener consumed, and has a message its listener failed
delivered again (ChangeInvisibleDuration by its retry policy's delay, from the Settings the
broker answered) with the next attempt; nothing is lost and no consumed message comes
again (none consumed twice at SUCCESS). Waits are on what the client prints, each with a deadline. Fails (never skips)
when the
client is missing."""

from __future__ import annotations

import subprocess
from pathlib import Path

from . import real_clients as rcl

TOPIC, GROUP = "N5P", "CG_N5_PUSH"


def test_node5_push_consumer_consumes_acks_and_gets_a_failed_message_again(tmp_path: Path) -> None:
    rcl.require_node5_client()
    conf = {"grpcListenPort": str(rcl.free_port()), "minInvisibleTimeMillsForRecv": "1000"}
    with rcl.cluster(tmp_path, topics={TOPIC: 2}, conf=conf) as c:
        producer = c.node5("node5-producer", topics=[TOPIC])
        producer.wait_event("ready")
        sent = rcl.send_all(producer, [{"topic": TOPIC, "body": f"p{i}", "tag": "TagA"} for i in range(8)])
        producer.close_stdin()
        producer.wait_event("closed")
        push = c.push5("node5-push", group=GROUP, topic=TOPIC, fail=["p3"])
        push.wait_event("ready", "the push consumer's start")
        # every message once, p3 failed once and then consumed at attempt 2
        c.wait_for(
            lambda: len({e["body"] for e in push.events("consumed") if e["result"] == "SUCCESS"}) == 8,
            "every message consumed",
            timeout=60,
        )
        push.close_stdin()
        push.wait_event("closed")
        assert push.wait_exit() == 0
    consumed = push.events("consumed")
    assert sorted(e["messageId"] for e in sent) == sorted({e["messageId"] for e in consumed})
    failed = [e for e in consumed if e["result"] == "FAILURE"]
    assert [(e["body"], e["attempt"]) for e in failed] == [("p3", 1)]
    p3 = [e for e in consumed if e["body"] == "p3"]
    assert [(e["attempt"], e["result"]) for e in p3] == [(1, "FAILURE"), (2, "SUCCESS")]
    others = [e for e in consumed if e["body"] != "p3"]
    assert sorted(e["body"] for e in others) == [f"p{i}" for i in range(8) if i != 3] and {
        e["attempt"] for e in others
    } == {1}


def test_push5_refuses_bad_options() -> None:
    node = rcl.require_node5_client()
    out = subprocess.run([node, str(rcl.NODE5_PUSH), '{"endpoints": "127.0.0.1:1"}'], capture_output=True, text=True)
    assert out.returncode == 2 and "usage: push5.js" in out.stderr and out.stdout == ""
