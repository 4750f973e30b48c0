"""Topic and group admin and queue locks over real sockets: our client (``Admin``,
``GroupMember.lock``/``unlock``) and the ``rmqlog`` admin commands (``--broker``,
rmqnet/commands/broker_admin.py) against a name server and a broker process on 127.0.0.1 (the servers of
test_broker_pull_over_the_wire.py; topic ``T`` with 4 queues)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from rmqnet import cli
from rmqnet.client import Admin, BrokerError, GroupMember, Producer, QueueRef, TopicNotFoundError
from rmqnet.remoting import ResponseCode
from rmqnet.remoting.admin_bodies import QueueKey

from .test_broker_pull_over_the_wire import Servers, servers  # noqa: F401  (the fixture)


def eventually(check: Any, what: str, timeout: float = 10.0) -> Any:
    """``check()`` until it returns a true value (the broker's dispatcher and registration run
    on their own rounds); AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.02)
    return got


def rmqlog(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_admin_client_topics_stats_and_config(servers: Servers) -> None:  # noqa: F811
    b = servers.broker
    with Admin(servers.namesrv) as admin, Producer("PG", servers.namesrv) as producer:
        admin.create_topic(b, "ADM", 2, read_queues=3)
        assert admin.topic_configs(b)["ADM"]["readQueueNums"] == 3
        for i in range(3):
            producer.send("T", b"m%d" % i, queue_id=1)
        q1 = eventually(
            lambda: (o := admin.topic_stats(b, "T")[QueueKey("T", "broker-a", 1)]).max_offset == 3 and o,
            "the 3 messages dispatched",
        )
        assert (q1.min_offset, q1.max_offset) == (0, 3) and q1.last_update_timestamp > 0
        with pytest.raises(BrokerError) as info:
            admin.topic_stats(b, "NOPE")
        assert info.value.code == ResponseCode.TOPIC_NOT_EXIST

        admin.update_offset(b, "CGA", "T", 1, 2)
        cs = admin.consume_stats(b, "CGA", "T")
        assert cs.offset_table[QueueKey("T", "broker-a", 1)].consumer_offset == 2 and cs.total_diff() == 1
        assert admin.consumer_connections(b, "CGA") is None  # nobody online

        assert admin.broker_config(b)["brokerName"] == "broker-a"
        admin.update_broker_config(b, {"maxTransferCountOnMessageInMemory": "64"})
        assert admin.broker_config(b)["maxTransferCountOnMessageInMemory"] == "64"
        with pytest.raises(BrokerError, match="listenPort"):
            admin.update_broker_config(b, {"listenPort": "1"})


def test_delete_topic_leaves_the_route_at_the_next_registration(servers: Servers) -> None:  # noqa: F811
    with Admin(servers.namesrv) as admin:
        admin.create_topic(servers.broker, "GONE", 2)

        def routed() -> bool:
            try:
                admin.route("GONE")
            except TopicNotFoundError:
                return False
            return True

        # the broker registers a moved data version at its next round (100 ms)
        eventually(routed, "the topic reached the name server")
        admin.delete_topic(servers.broker, "GONE")
        assert "GONE" not in admin.topic_configs(servers.broker)
        eventually(lambda: not routed(), "the name server dropped the deleted topic")
        with pytest.raises(BrokerError, match="conflict with system topic"):
            admin.delete_topic(servers.broker, "TBW102")
        # mqadmin deleteTopic -c: 215 to the cluster's masters, 216 to the name servers: gone at once
        admin.create_topic(servers.broker, "GONE2", 1)
        eventually(lambda: "GONE2" in admin.topic_list(), "the topic reached the name server")
        assert admin.delete_topic_in_cluster("DefaultCluster", "GONE2") == [servers.broker]
        assert "GONE2" not in admin.topic_list()


def test_two_members_lock_disjoint_queues(servers: Servers) -> None:  # noqa: F811
    queues = [QueueRef("T", "broker-a", i) for i in range(4)]
    with (
        GroupMember("CG_ORD", servers.namesrv, client_id="10.0.0.1@1") as one,
        GroupMember("CG_ORD", servers.namesrv, client_id="10.0.0.1@2") as two,
    ):
        assert one.lock(queues[:2]) == queues[:2]
        assert two.lock(queues) == queues[2:]  # the first two are one's
        one.unlock(queues[:1])
        assert two.lock(queues) == [queues[0], *queues[2:]]
        assert one.lock(queues) == [queues[1]]
        one.subscribe("T")
        one.heartbeat()
        with Admin(servers.namesrv) as admin:
            conns = admin.consumer_connections(servers.broker, "CG_ORD")
        assert conns is not None and [c["clientId"] for c in conns["connectionSet"]] == ["10.0.0.1@1"]


def test_rmqlog_admin_commands(servers: Servers, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    b = servers.broker
    code, out, err = rmqlog(capsys, "topic-create", "--broker", b, "CLI_T", "--queues", "2")
    assert code == 0 and "CLI_T" in out, err
    code, out, _ = rmqlog(capsys, "topic-list", "--broker", b, "--json")
    listed: dict[str, Any] = {t["topic"]: t for t in json.loads(out)["topics"]}
    assert code == 0 and listed["CLI_T"]["writeQueueNums"] == 2
    with Producer("PG", servers.namesrv) as producer, Admin(servers.namesrv) as admin:
        producer.send("T", b"x", queue_id=0)
        eventually(lambda: admin.max_offset(b, "T", 0) >= 1, "the message dispatched")
    code, out, _ = rmqlog(capsys, "topic-stats", "--broker", b, "T")
    assert code == 0 and out.splitlines()[0].startswith("T/broker-a/0  min 0  max ")
    code, out, _ = rmqlog(capsys, "topic-stats", "--broker", b, "T", "--json")
    assert json.loads(out)["queues"][0]["max"] >= 1

    with Admin(servers.namesrv) as admin:
        admin.update_offset(b, "CG_CLI", "T", 0, 1)
    code, out, _ = rmqlog(capsys, "consumer-status", "--broker", b, "CG_CLI", "--json")
    status = json.loads(out)
    assert code == 0 and status["online"] is False and status["offsets"][0]["consumerOffset"] == 1
    code, out, _ = rmqlog(capsys, "consumer-status", "--broker", b, "CG_CLI")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("CG_CLI  T/broker-a/0  broker ") and " consumer 1  lag " in lines[0]
    assert lines[-2].startswith("total lag ") and lines[-1] == "consumers 0 (not online)"
    code, _, err = rmqlog(capsys, "consumer-status", "--broker", b, "NOBODY")
    assert code == 1 and "NOBODY" in err

    code, out, _ = rmqlog(capsys, "broker-config", "--broker", b)
    assert code == 0 and "brokerName=broker-a" in out.splitlines()
    code, out, _ = rmqlog(capsys, "broker-config", "--broker", b, "--set", "traceOn=false", "--json")
    assert code == 0 and json.loads(out)["updated"] == {"traceOn": "false"}
    code, _, err = rmqlog(capsys, "broker-config", "--broker", b, "--set", "noSuchKey=1")
    assert code == 2 and "noSuchKey" in err

    code, out, _ = rmqlog(capsys, "topic-delete", "--broker", b, "CLI_T")
    assert code == 0 and "deleted" in out
    code, _, err = rmqlog(capsys, "topic-delete", "--broker", b, "TBW102")
    assert code == 2 and "system topic" in err
    code, _, err = rmqlog(capsys, "topic-stats", "--broker", b, "CLI_T")
    assert code == 2 and "not exist" in err
    code, _, err = rmqlog(capsys, "topic-create", "--broker", b, "a/b")
    assert code == 2 and "illegal characters" in err


def test_admin_client_subscription_groups(servers: Servers) -> None:  # noqa: F811
    """``mqadmin updateSubGroup`` / ``deleteSubGroup`` through our client (codes 200, 201, 207):
    a group made with a field, listed, refused for a bad field, deleted with its offsets."""
    b = servers.broker
    with Admin(servers.namesrv) as admin:
        admin.create_group(b, "ADMG", retryMaxTimes=3, consumeEnable=True)
        assert admin.group_configs(b)["ADMG"]["retryMaxTimes"] == 3
        with pytest.raises(BrokerError, match="retryMaxTimes") as info:
            admin.create_group(b, "ADMG", retryMaxTimes="many")
        assert info.value.code == ResponseCode.SYSTEM_ERROR
        admin.update_offset(b, "ADMG", "T", 0, 1)
        assert admin.query_offset(b, "ADMG", "T", 0) == 1
        admin.delete_group(b, "ADMG", remove_offset=True)
        assert "ADMG" not in admin.group_configs(b)
        # no committed offset any more: Java's answer for a queue whose first message is in memory, 0
        assert admin.query_offset(b, "ADMG", "T", 0) == 0


def test_group_commands(servers: Servers, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """``rmqlog group-create / group-list / group-delete --broker`` (200, 201, 207)."""
    b = servers.broker
    code, out, err = rmqlog(capsys, "group-create", "--broker", b, "CLIG", "--retry-max-times", "4", "--disable")
    assert code == 0 and "CLIG" in out and "disabled" in out, err
    code, out, err = rmqlog(capsys, "group-list", "--broker", b, "--json")
    assert code == 0, err
    g = {x["groupName"]: x for x in json.loads(out)["groups"]}["CLIG"]
    assert (g["consumeEnable"], g["retryMaxTimes"], g["consumeMessageOrderly"]) == (False, 4, False)
    code, out, err = rmqlog(capsys, "group-create", "--broker", b, "FIFOG", "--orderly")
    assert code == 0 and "orderly" in out, err
    code, out, err = rmqlog(capsys, "group-list", "--broker", b, "--json")
    assert {x["groupName"]: x for x in json.loads(out)["groups"]}["FIFOG"]["consumeMessageOrderly"] is True
    code, out, err = rmqlog(capsys, "group-create", "--broker", b, "bad/name")
    assert code == 2 and "bad/name" in err  # the broker's refusal, its remark printed
    code, out, err = rmqlog(capsys, "group-delete", "--broker", b, "CLIG", "--remove-offset")
    assert code == 0 and "deleted" in out, err
    code, out, err = rmqlog(capsys, "group-list", "--broker", b)
    assert code == 0 and "CLIG" not in out and "TOOLS_CONSUMER" in out
    code, out, err = rmqlog(capsys, "group-create", "--broker", b, "X", "--retry-max-times", "many")
    assert code == 2 and "retry-max-times" in err
