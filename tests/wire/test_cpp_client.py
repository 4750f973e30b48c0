"""The broker and name server accepted by Apache's C++ RocketMQ client 1.0.1 (PyPI ``rocketmq``
0.4.4, in ``.venv-rocketmq``, installed by ``make clients``).

The client's libevent probes an outside address at start-up, so every test runs it in a
loopback-only network namespace of its own, with the name server and the broker started inside
the same namespace (tests/wire/real_clients.py). The client shows the producer's ``UNIQ_KEY`` as
a message's id; assertions are on content (bodies, tags, keys, queues and offsets).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from . import real_clients as rcl

OK = "OK"


def _pull_all(c: rcl.Cluster, group: str, topic: str, n: int) -> list[dict[str, Any]]:
    """Every message of ``topic`` through the C++ PullConsumer (pulls without suspend, from
    offset 0 of each queue). It retries a refused pull forever: a deadline, then it is killed."""
    puller = c.cpp(f"pull-{group}", "pull", group=group, topic=topic)
    done = puller.wait_event("done", f"the pull consumer to read {topic} to its end")
    assert puller.wait_exit() == 0
    messages = puller.events("message")
    assert done["count"] == len(messages) == n, puller.describe()
    return messages


def _check_dense(messages: list[dict[str, Any]]) -> None:
    by_queue: dict[int, list[int]] = defaultdict(list)
    for m in messages:
        by_queue[m["queueId"]].append(m["queueOffset"])
    for qid, offsets in by_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), (qid, offsets)


def test_send_sync_to_a_new_topic_and_pull_consumer(tmp_path: Path) -> None:
    """send_sync (code 10) to a topic the first send creates through TBW102; the pull consumer
    (code 11 without suspend) reads every message back, a 6 KB body included."""
    topic = "CPP_SYNC"
    specs = [rcl.message(topic, i) for i in range(6)]
    specs[3]["body"] = rcl.big_body(3)
    with rcl.cluster(tmp_path, netns=True) as c:
        producer = c.cpp("send-sync", "send_sync", stdin=True, group="PG_CPP_SYNC")
        producer.wait_event("ready")
        sent = rcl.send_all(producer, specs)
        producer.close_stdin()
        assert producer.wait_exit() == 0
        got = _pull_all(c, "CG_CPP_PULL", topic, len(specs))

    assert [e["status"] for e in sent] == [OK] * len(specs)
    ids = [e["msgId"] for e in sent]
    assert len(set(ids)) == len(ids) and all(len(i) == 32 for i in ids)  # the client's UNIQ_KEYs
    assert sorted(rcl.received(got)) == sorted(rcl.expected(specs))
    assert {m["uniqKey"]: rcl.received([m])[0] for m in got} == dict(zip(ids, rcl.expected(specs), strict=True))
    assert {m["queueId"] for m in got} <= {0, 1, 2, 3}
    _check_dense(got)


def test_send_batch_is_stored_as_separate_messages(tmp_path: Path) -> None:
    """send_batch (code 10 with ``batch`` set; a body of encoded messages): one answer, and the
    broker stores each message of the batch on its own, in order, on consecutive offsets of
    one queue."""
    topic = "CPP_BATCH"
    specs = [rcl.message(topic, i, tags="TagB") for i in range(5)]
    with rcl.cluster(tmp_path, netns=True, topics={topic: 4}) as c:
        producer = c.cpp("send-batch", "send_batch", stdin=True, group="PG_CPP_BATCH")
        producer.wait_event("ready")
        (answer,) = rcl.send_all(producer, [specs], kind="sent_batch")
        producer.close_stdin()
        assert producer.wait_exit() == 0
        got = _pull_all(c, "CG_CPP_BATCH", topic, len(specs))

    assert answer["status"] == OK and answer["count"] == len(specs)
    assert len({m["queueId"] for m in got}) == 1, "a batch goes to one queue"
    got.sort(key=lambda m: m["queueOffset"])
    assert [m["queueOffset"] for m in got] == list(range(len(specs)))
    assert rcl.received(got) == rcl.expected(specs)
    assert len({m["uniqKey"] for m in got}) == len(specs)


def test_push_consumer_gets_stored_and_new_messages(tmp_path: Path, record_property: Any) -> None:
    """A push consumer of a new group gets the 4 messages already stored, then 2 sent while its
    pulls are held (the delivery latency of the first is printed and recorded, not asserted);
    SIGTERM shuts it down, committing its offsets: a second consumer of the group gets nothing
    old, only a message sent after."""
    topic, group = "CPP_PUSH", "CG_CPP_PUSH"
    specs = [rcl.message(topic, i) for i in range(7)]
    with rcl.cluster(tmp_path, netns=True, topics={topic: 4}) as c:
        producer = c.cpp("send-sync", "send_sync", stdin=True, group="PG_CPP_PUSH")
        producer.wait_event("ready")
        sent = rcl.send_all(producer, specs[:4])
        # a new group starts at offset 0 of a queue that still begins at 0 (RocketMQ's
        # QUERY_CONSUMER_OFFSET), although the client's default is CONSUME_FROM_LAST_OFFSET
        consumer = c.cpp("push-1", "push", group=group, topic=topic)
        consumer.wait_events("message", 4, "the 4 stored messages")
        new = rcl.send_all(producer, specs[4:5])[0]
        got_new = consumer.wait_event(
            "message", "the message sent while its pulls were held", where=lambda e: e["uniqKey"] == new["msgId"]
        )
        latency_ms = got_new["receivedAt"] - new["sentAt"]
        print(f"C++ client delivery latency through a held pull: {latency_ms:.1f} ms (send to callback)")
        record_property("cpp_held_pull_latency_ms", round(latency_ms, 2))
        sent += [new, *rcl.send_all(producer, specs[5:6])]
        consumer.wait_events("message", 6, "6 messages")
        assert consumer.stop() == 0, consumer.describe()
        assert consumer.events()[-1]["event"] == "closed", consumer.describe()

        sent += rcl.send_all(producer, specs[6:])
        second = c.cpp("push-2", "push", group=group, topic=topic, count=1)
        second.wait_event("closed", "one message, then shutdown")
        assert second.wait_exit() == 0
        producer.close_stdin()
        assert producer.wait_exit() == 0

    ids = [e["msgId"] for e in sent]
    want = dict(zip(ids, rcl.expected(specs), strict=True))
    first = consumer.events("message")
    assert {m["uniqKey"]: rcl.received([m])[0] for m in first} == dict(list(want.items())[:6])
    assert len(first) == 6, "a message came twice"
    (late,) = second.events("message")
    assert (late["uniqKey"], rcl.received([late])[0]) == list(want.items())[6], "redelivered a committed message"


def test_orderly_push_consumer_locks_its_queues_and_reads_each_in_order(tmp_path: Path) -> None:
    """The C++ client's orderly PushConsumer locks the queues it consumes (LOCK_BATCH_MQ 41,
    its own body) before it pulls them: every message arrives, each queue's in offset order,
    and while it runs our client (another client id of the same group, a process in the same
    namespace) can lock none of them. At shutdown the client unlocks what it holds (UNLOCK_BATCH_MQ
    42; 1.0.1 was seen to name 3 of its 4 queues in it, [run] with RMQ_WIRE_DUMP=1): those are
    free for another client at once, the rest until their lock expires (60 s)."""
    topic, group = "CPP_ORDER", "CG_CPP_ORDER"
    specs = [rcl.message(topic, i) for i in range(12)]
    probe_opts = {"group": group, "clientId": "10.9.9.9@probe", "topic": topic, "brokerName": "broker-a", "queues": 4}
    with rcl.cluster(tmp_path, netns=True, topics={topic: 4}) as c:
        producer = c.cpp("send-sync", "send_sync", stdin=True, group="PG_CPP_ORDER")
        producer.wait_event("ready")
        sent = rcl.send_all(producer, specs)
        producer.close_stdin()
        assert producer.wait_exit() == 0
        consumer = c.cpp("push-orderly", "push", group=group, topic=topic, orderly=True)
        consumer.wait_events("message", len(specs), "every message through the orderly consumer")
        probe = c.ours("lock-probe", rcl.LOCK_PROBE, json.dumps({"nameSrv": c.client_namesrv_addr, **probe_opts}))
        locked = probe.wait_event("locked", "our client's lock attempt")
        assert probe.wait_exit() == 0
        assert consumer.stop() == 0, consumer.describe()
        after = c.ours("lock-probe-after", rcl.LOCK_PROBE, json.dumps({"nameSrv": c.client_namesrv_addr, **probe_opts}))
        freed = after.wait_event("locked", "our client's lock attempt after the shutdown")
        assert after.wait_exit() == 0

    assert locked["queueIds"] == [], "a queue the orderly consumer holds was locked by another client"
    assert set(freed["queueIds"]) <= {0, 1, 2, 3} and freed["queueIds"], freed
    print(f"queues free after the C++ orderly consumer's shutdown: {freed['queueIds']}")
    got = consumer.events("message")
    assert sorted(m["uniqKey"] for m in got) == sorted(e["msgId"] for e in sent)
    by_queue: dict[int, list[int]] = defaultdict(list)
    for m in got:
        by_queue[m["queueId"]].append(m["queueOffset"])
    assert all(offsets == sorted(offsets) for offsets in by_queue.values()), dict(by_queue)
