"""Real clients against a broker with ``aclEnable=true``: ali-ons 3.12.0 and the C++
client 1.0.1 sign in RocketMQ's 4.x form, with their own extra field (``OnsChannel``); every
request they make must still pass the ACL's binding of that form to the code's fields
(:mod:`rmqnet.broker.acl_fields`) and its checks of what a request touches (the record a
send-back copies, the queues an orderly consumer locks, the positions a consumer reads), and
the same client with the wrong account must be refused and store nothing.

The account of the right key is DENY by default for topics and groups: only what it is given
passes (its clients' ``CLIENT_INNER_PRODUCER`` in heartbeats beside their own group included).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import rmqlog

from . import real_clients as rcl

KEY, SECRET = "clientKey1", "clientSecret1"
WRONG_KEY, WRONG_SECRET = "wrongKey01", "wrongSecret1"
ACL = f"""
accounts:
  - accessKey: {KEY}
    secretKey: {SECRET}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [ACL_ALI=PUB|SUB, ACL_CPP=PUB|SUB]
    groupPerms: [PG_ACL=PUB, CG_ACL=SUB, CG_ACL_ORDER=SUB, CG_ACL_PULL=SUB]
  - accessKey: {WRONG_KEY}
    secretKey: {WRONG_SECRET}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [ACL_ELSEWHERE=PUB|SUB]
    groupPerms: [CG_VICTIM=DENY]
"""
LEVELS = " ".join(["1s"] * 18)
CREDS = {"accessKey": KEY, "secretKey": SECRET}
WRONG = {"accessKey": WRONG_KEY, "secretKey": WRONG_SECRET}


def _refused(producer: rcl.Client, specs: list[dict[str, str]]) -> list[dict[str, object]]:
    """Write ``specs`` and wait for as many answers: each a failure (a refused send)."""
    sent, failed = len(producer.events("sent")), len(producer.failures())
    for spec in specs:
        producer.write(rcl.message_line(spec))
    producer.wait_line(
        lambda _: len(producer.failures()) + len(producer.events("sent")) >= sent + failed + len(specs),
        f"{len(specs)} send results",
    )
    assert len(producer.events("sent")) == sent, producer.describe()
    return producer.failures()[failed:]


def test_ali_ons_signs_sends_consumes_retries_and_commits_the_wrong_account_is_refused(tmp_path: Path) -> None:
    """ali-ons with the right account: sends (310), a push consumer's pulls (11 with the commit
    flag), heartbeats, offsets (14, 15, 30), a failing handler's send-back (36) and its retry
    from ``%RETRY%CG_ACL``; with the wrong account its sends are refused, nothing stored."""
    topic, group = "ACL_ALI", "CG_ACL"
    specs = [rcl.message(topic, i) for i in range(6)]
    with rcl.cluster(tmp_path, topics={topic: 2}, conf={"messageDelayLevel": LEVELS}, acl=ACL) as c:
        producer = c.ali_ons_producer(group="PG_ACL", **CREDS)
        producer.wait_event("ready")
        sent = rcl.send_all(producer, specs)
        consumer = c.ali_ons_consumer("consumer", group, topic, count=2 * len(specs), failUntil=1, **CREDS)
        consumer.wait_event("closed", "each message twice (failed once, then from the retry topic), then close()")
        assert consumer.wait_exit() == 0
        producer.close_stdin()
        assert producer.wait_exit() == 0
        wrong = c.ali_ons_producer("wrong-producer", group="PG_ACL", **WRONG)
        wrong.wait_event("ready")
        failures = _refused(wrong, [rcl.message(topic, 99)])
        wrong.close_stdin()
        wrong.wait_exit()
        assert c.stop_servers()["broker"] == 0
    assert len(failures) == 1, failures  # (ali-ons reports "Send [4] times, still failed", not the remark)
    got = consumer.events("message")
    assert sorted({e["bodySha256"] for e in got}) == sorted({rcl.sha256(s["body"]) for s in specs})
    assert Counter(e["reconsumeTimes"] for e in got) == {0: len(specs), 1: len(specs)}  # each failed once
    with rmqlog.MessageStore.open(tmp_path / "store", read_only=True) as s:
        assert sum(s.max_offset(topic, q) for q in range(2)) == len(specs)  # the wrong account's send: not stored
        ends = Counter(e["queueId"] for e in sent)
        assert {q: s.committed_offset(group, topic, q) for q in range(2)} == {q: ends[q] for q in range(2)}
        assert len(s.read_queue(f"%RETRY%{group}", 0, 0, 100)) == len(specs)


def test_cpp_client_signs_sends_orderly_and_pull_consumers_the_wrong_account_is_refused(tmp_path: Path) -> None:
    """The C++ client with the right account: sends (10), the orderly push consumer's locks (41)
    and pulls, the pull consumer's queue positions (29-32) and pulls; with the wrong account its
    send is refused and nothing is stored."""
    topic = "ACL_CPP"
    specs = [rcl.message(topic, i) for i in range(8)]
    with rcl.cluster(tmp_path, netns=True, topics={topic: 4}, acl=ACL) as c:
        producer = c.cpp("send-sync", "send_sync", stdin=True, group="PG_ACL", **CREDS)
        producer.wait_event("ready")
        sent = rcl.send_all(producer, specs)
        producer.close_stdin()
        assert producer.wait_exit() == 0
        orderly = c.cpp("push-orderly", "push", group="CG_ACL_ORDER", topic=topic, orderly=True, **CREDS)
        orderly.wait_events("message", len(specs), "every message through the orderly consumer")
        assert orderly.stop() == 0, orderly.describe()
        puller = c.cpp("pull", "pull", group="CG_ACL_PULL", topic=topic, **CREDS)
        done = puller.wait_event("done", "the pull consumer to read the topic to its end")
        assert puller.wait_exit() == 0
        wrong = c.cpp("wrong-send", "send_sync", stdin=True, group="PG_ACL", **WRONG)
        wrong.wait_event("ready")
        failures = _refused(wrong, [rcl.message(topic, 99)])
        wrong.close_stdin()
        wrong.wait_exit()
        assert c.stop_servers()["broker"] == 0
    assert failures, "the wrong account's send was not refused"
    ids = sorted(e["msgId"] for e in sent)
    assert sorted(m["uniqKey"] for m in orderly.events("message")) == ids
    assert done["count"] == len(specs) and sorted(m["uniqKey"] for m in puller.events("message")) == ids
    with rmqlog.MessageStore.open(tmp_path / "store", read_only=True) as s:
        assert sum(s.max_offset(topic, q) for q in range(4)) == len(specs)


def test_ali_ons_with_the_wrong_account_cannot_send_into_another_groups_retry_topic(tmp_path: Path) -> None:
    """Item 8 with a real client: an account denied the group CG_VICTIM sends into
    ``%RETRY%CG_VICTIM`` (which the group's consumers read) under a producer group it may use;
    the send is checked against CG_VICTIM, refused, and nothing is stored (RocketMQ 4.9.8 checks
    the producerGroup and lets it in)."""
    retry = "%RETRY%CG_VICTIM"
    with rcl.cluster(tmp_path, topics={retry: 1, "ACL_ELSEWHERE": 1}, acl=ACL) as c:
        producer = c.ali_ons_producer("wrong-producer", group="PG_ANY", **WRONG)
        producer.wait_event("ready")
        (ok,) = rcl.send_all(producer, [rcl.message("ACL_ELSEWHERE", 0)])  # the account works...
        failures = _refused(producer, [rcl.message(retry, 1)])  # ...but not in CG_VICTIM's retry topic
        producer.close_stdin()
        producer.wait_exit()
        assert c.stop_servers()["broker"] == 0
    assert ok["status"] == "SEND_OK" and len(failures) == 1, failures
    with rmqlog.MessageStore.open(tmp_path / "store", read_only=True) as s:
        assert s.max_offset(retry, 0) == 0 and s.max_offset("ACL_ELSEWHERE", 0) == 1
