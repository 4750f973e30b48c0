"""The reading commands over the wire answer what was asked, and say when nothing is found
(not found is said, with why), against a name server and a broker on 127.0.0.1 (the servers of
test_broker_pull_over_the_wire.py; topic ``T`` with 4 queues): ``lag GROUP`` without
``--topic`` lists the group's own topics with their real lag, ``query --id`` and ``get`` find a
message by the offset msgId a send's result (and ali-ons) prints, and what finds nothing says
why, exit status 1."""

from __future__ import annotations

import json

import pytest

from rmqnet import cli
from rmqnet.client import Admin, Producer

from .test_broker_pull_over_the_wire import Servers, servers  # noqa: F401  (the fixture)
from .test_wire_admin import eventually


def rmqlog(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_lag_without_topic_lists_the_group_s_topics_with_their_lag(
    servers: Servers,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    with Admin(servers.namesrv) as admin, Producer("PG", servers.namesrv) as producer:
        admin.create_topic(servers.broker, "LAGT", 2)
        eventually(lambda: "LAGT" in admin.topic_list(), "LAGT routed")
        for i in range(6):
            producer.send("LAGT", b"m%d" % i, queue_id=i % 2)
            producer.send("T", b"other%d" % i, queue_id=0)  # a topic the group never read
        eventually(
            lambda: admin.max_offset("broker-a", "LAGT", 1) == 3 and admin.max_offset("broker-a", "T", 0) == 6,
            "dispatched",
        )
        admin.update_offset(servers.broker, "CGL", "LAGT", 0, 3)  # read everything
        admin.update_offset(servers.broker, "CGL", "LAGT", 1, 1)  # 2 behind
    code, out, err = rmqlog(capsys, "lag", "--namesrv", servers.namesrv, "CGL", "--json")
    assert code == 0, err
    report = json.loads(out)
    rows = {(r["topic"], r["queueId"]): (r["committed"], r["max"], r["lag"]) for r in report["offsets"]}
    assert rows == {("LAGT", 0): (3, 3, 0), ("LAGT", 1): (1, 3, 2)}
    assert report["totalLag"] == 2


def test_lag_of_a_group_with_no_offsets_says_so(servers: Servers, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    with Producer("PG", servers.namesrv) as producer:
        producer.send("T", b"x", queue_id=0)
    code, out, err = rmqlog(capsys, "lag", "--namesrv", servers.namesrv, "NOBODY")
    assert code == 1 and out == ""
    assert "'NOBODY' has no committed offsets" in err


def test_an_offset_msg_id_is_found_by_query_and_get(servers: Servers, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    with Admin(servers.namesrv) as admin, Producer("PG", servers.namesrv) as producer:
        sent = producer.send("T", b"find me", queue_id=2, keys=["k-1"])
        eventually(lambda: admin.max_offset("broker-a", "T", 2) == 1, "dispatched")
    assert sent.offset_msg_id != sent.msg_id
    for argv in (
        ("query", "--namesrv", servers.namesrv, "T", "--id", sent.offset_msg_id),
        ("get", "--namesrv", servers.namesrv, "--id", sent.offset_msg_id),
        ("get", "--namesrv", servers.namesrv, "--id", sent.msg_id, "--topic", "T"),
        ("query", "--namesrv", servers.namesrv, "T", "--id", sent.msg_id),
    ):
        code, out, err = rmqlog(capsys, *argv)
        assert code == 0, (argv, err)
        (line,) = out.splitlines()
        assert json.loads(line)["body"] == "find me", argv


def test_what_finds_nothing_says_why_with_status_1(servers: Servers, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    with Admin(servers.namesrv) as admin, Producer("PG", servers.namesrv) as producer:
        sent = producer.send("T", b"here", queue_id=1)
        eventually(lambda: admin.max_offset("broker-a", "T", 1) == 1, "dispatched")
    code, out, err = rmqlog(capsys, "query", "--namesrv", servers.namesrv, "T", "--key", "no-such-key")
    assert (code, out) == (1, "") and "no message with key 'no-such-key' in topic 'T'" in err
    # an offset msgId of this broker's address, past its log's end
    far = sent.offset_msg_id[:16] + f"{1 << 40:016X}"
    code, out, err = rmqlog(capsys, "get", "--namesrv", servers.namesrv, "--id", far)
    assert (code, out) == (1, "") and f"no message with msgId {far}" in err and "commitlog offset" in err
    code, out, err = rmqlog(
        capsys,
        "query",
        "--namesrv",
        servers.namesrv,
        "T",
        "--id",
        sent.msg_id[:-1] + "0" if sent.msg_id[-1] != "0" else sent.msg_id[:-1] + "1",
    )
    assert (code, out) == (1, "") and "no message with msgId" in err
