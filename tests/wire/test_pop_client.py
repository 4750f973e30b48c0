"""Our POP consumer (``rmqnet.client.PopConsumer``) against name server and broker processes on
127.0.0.1 (tests/wire/pop_servers.py): pops across two brokers' queues, acks, a message not
acked handed out again with ``reconsumeTimes + 1``, a changed invisible time, two consumers of
one group sharing a topic without duplicates, and the refusals typed as the client types them.
Every wait is a long poll the test's own actions end; nothing sleeps."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmqnet import cli
from rmqnet.client import BrokerError, PopConsumer, PopResult, Producer, TopicNotFoundError
from rmqnet.client.pop_consumer import Handle
from rmqnet.remoting import ResponseCode

from .pop_servers import PopServers, pop_servers
from .test_acl import USER_KEY, USER_SECRET, home, servers  # noqa: F401  (the ACL fixtures)

POLL_MS = 30_000  # a long poll: ended by the message it waits for, not by its time


@pytest.fixture
def two(tmp_path: Path) -> Iterator[PopServers]:
    with pop_servers(tmp_path, ("broker-a", "broker-b")) as s:
        yield s


def send(ns: str, n: int, prefix: str = "m") -> list[str]:
    """``n`` messages to T, round robin over both brokers' queues; their msgIds (UNIQ_KEY)."""
    with Producer("PG", ns) as producer:
        return [producer.send("T", f"{prefix}{i}".encode()).msg_id for i in range(n)]


def pop_all(consumer: PopConsumer, n: int, **kw: Any) -> list[dict[str, Any]]:
    """Pops (long polls) until ``n`` messages came."""
    got: list[dict[str, Any]] = []
    while len(got) < n:
        got += consumer.pop("T", 32, poll_ms=POLL_MS, **kw).rows
    return got


def uniq(row: dict[str, Any]) -> str:
    return str(dict(row["properties"])["UNIQ_KEY"])


def test_pop_reads_both_brokers_and_acked_messages_come_no_more(two: PopServers) -> None:
    ids = send(two.namesrv, 12)
    with PopConsumer("CG", two.namesrv) as consumer:
        rows = pop_all(consumer, 12)
        assert sorted(uniq(r) for r in rows) == sorted(ids)
        handles = [Handle.parse(r["receiptHandle"]) for r in rows]
        assert {h.broker_name for h in handles} == {"broker-a", "broker-b"}
        assert all(
            (h.queue_id, h.offset, h.topic_type) == (r["queueId"], r["queueOffset"], "0")
            for h, r in zip(handles, rows, strict=True)
        )
        assert two.inflight("CG") == 12
        consumer.ack_many("T", [r["receiptHandle"] for r in rows])
        assert two.inflight("CG") == 0
        empty = consumer.pop("T")
        assert (empty.status, len(empty)) == ("NO_NEW_MSG", 0)
        assert empty.messages.column_names[-1] == "receiptHandle" and empty.messages.num_rows == 0


def test_a_message_not_acked_comes_again_with_reconsume_times_raised(tmp_path: Path) -> None:
    with pop_servers(tmp_path) as s, PopConsumer("CG", s.namesrv) as consumer:
        [sent] = send(s.namesrv, 1)
        [first] = pop_all(consumer, 1, invisible_ms=1)  # not acked: visible again at the next revive
        [again] = pop_all(consumer, 1)
        assert (uniq(first), first["reconsumeTimes"]) == (sent, 0)
        assert (uniq(again), again["reconsumeTimes"], again["topic"]) == (sent, 1, "%RETRY%CG_T")
        assert dict(again["properties"])["RETRY_TOPIC"] == "T"
        assert Handle.parse(again["receiptHandle"]).topic_type == "1"
        consumer.ack("T", again["receiptHandle"])  # acked in the retry topic
        assert s.inflight("CG") == 0
        consumer.ack("T", first["receiptHandle"])  # late: changes nothing, answered SUCCESS (Java's)
        assert consumer.pop("T").status == "NO_NEW_MSG"


def test_change_invisible_gives_a_new_handle_and_the_old_one_is_refused(tmp_path: Path) -> None:
    with pop_servers(tmp_path) as s, PopConsumer("CG", s.namesrv) as consumer:
        send(s.namesrv, 1)
        [row] = pop_all(consumer, 1, invisible_ms=600_000)
        old = row["receiptHandle"]
        new = consumer.change_invisible("T", old, 1)  # visible again at once
        assert new != old and new.split(" ")[2] == "1" and new.split(" ")[5:] == old.split(" ")[5:]
        with pytest.raises(BrokerError) as err:
            consumer.change_invisible("T", old, 60_000)
        assert err.value.code == ResponseCode.NO_MESSAGE and "not in flight" in str(err.value)
        [again] = pop_all(consumer, 1)
        assert (again["body"], again["reconsumeTimes"]) == (row["body"], 1)
        kept = consumer.change_invisible("T", again["receiptHandle"], 600_000)
        consumer.ack("T", kept)
        assert s.inflight("CG") == 0
        with pytest.raises(ValueError, match="not RocketMQ's extraInfo"):
            consumer.ack("T", "no handle")


def test_two_consumers_of_one_group_share_the_topic_without_duplicates(two: PopServers) -> None:
    ids = send(two.namesrv, 40)
    seen: dict[str, list[str]] = {"c1": [], "c2": []}
    with PopConsumer("CG", two.namesrv) as c1, PopConsumer("CG", two.namesrv) as c2:
        consumers = {"c1": c1, "c2": c2}
        while sum(map(len, seen.values())) < 40:
            for name, c in consumers.items():
                got: PopResult = c.pop("T", 5, poll_ms=POLL_MS)
                seen[name] += [uniq(r) for r in got.rows]
                c.ack_many("T", [r["receiptHandle"] for r in got.rows])
        both = seen["c1"] + seen["c2"]
        assert sorted(both) == sorted(ids) and len(set(both)) == 40
        assert seen["c1"] and seen["c2"]
        assert two.inflight("CG") == 0


def test_refusals_are_typed(tmp_path: Path) -> None:
    with pop_servers(tmp_path, auto_create_subscription_group=False) as s, PopConsumer("NOPE", s.namesrv) as c:
        with pytest.raises(TopicNotFoundError) as missing:
            c.pop("NoSuchTopic")
        assert missing.value.topic == "NoSuchTopic"
        with pytest.raises(BrokerError) as err:
            c.pop("T")
        assert err.value.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "NOPE" in str(err.value)
        with pytest.raises(BrokerError) as err:
            c.pop("T", 33)
        assert err.value.code == ResponseCode.SYSTEM_ERROR and "greater than 32" in str(err.value)
        with pytest.raises(ValueError, match="init_mode"):
            c.pop("T", init_mode="LATEST")


def test_an_acl_refusal_is_a_broker_error(servers: dict[str, Any]) -> None:  # noqa: F811
    ns = servers["namesrv"]
    with (
        PopConsumer("groupA", ns, access_key=USER_KEY, secret_key=USER_SECRET) as denied,
        PopConsumer("groupC", ns, access_key=USER_KEY, secret_key=USER_SECRET) as allowed,
    ):
        with pytest.raises(BrokerError) as err:
            denied.pop("T")
        assert err.value.code == ResponseCode.SYSTEM_ERROR and "groupA" in str(err.value)
        assert allowed.pop("T").status == "NO_NEW_MSG"


# ---- rmqlog pop-status: GET_POP_INFLIGHT (200950) ------------------------------------------


def rmqlog(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_pop_status_lists_what_is_in_flight_on_every_broker(
    two: PopServers, capsys: pytest.CaptureFixture[str]
) -> None:
    send(two.namesrv, 6)
    ns = two.namesrv
    with PopConsumer("CG", ns) as consumer:
        rows = pop_all(consumer, 6, invisible_ms=600_000)
        consumer.ack("T", rows[0]["receiptHandle"])
        code, out, err = rmqlog(capsys, "pop-status", "--namesrv", ns, "--group", "CG", "--topic", "T", "--json")
        assert code == 0, err
        got = json.loads(out)
        assert got["total"] == 5
        listed = sorted((m["brokerName"], m["queueId"], m["offset"]) for m in got["messages"])
        held = sorted((Handle.parse(r["receiptHandle"]).broker_name, r["queueId"], r["queueOffset"]) for r in rows[1:])
        assert listed == held
        assert all(
            m["topic"] == "T"
            and m["invisibleTime"] == 600_000
            and m["attempt"] is None
            and m["inflightMs"] >= 0
            and m["visibleInMs"] == 600_000 - m["inflightMs"]
            for m in got["messages"]
        )
        code, out, _ = rmqlog(capsys, "pop-status", "--namesrv", ns, "--group", "CG", "--topic", "T", "--max", "1")
        assert code == 0 and out.count("in flight") == 2 + 1  # one listed per broker, then the total line
        assert out.splitlines()[-1] == "total in flight 5 (2 listed)"
        consumer.ack_many("T", [r["receiptHandle"] for r in rows[1:]])
        code, out, err = rmqlog(capsys, "pop-status", "--namesrv", ns, "--group", "CG", "--topic", "T")
        assert (code, out) == (1, "") and "no POP message of 'T' in flight" in err
        code, _, err = rmqlog(capsys, "pop-status", "--namesrv", ns, "--group", "CG", "--topic", "Nope")
        assert code == 2 and "no topic 'Nope'" in err
        code, _, err = rmqlog(capsys, "pop-status", "--namesrv", ns, "--topic", "T")
        assert code == 2 and "--group" in err
        code, _, err = rmqlog(capsys, "pop-status", "--namesrv", ns, "--group", "CG", "--topic", "T", "--max", "10001")
        assert code == 2 and "--max" in err


def test_pop_status_lists_a_retried_message_in_its_retry_topic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pop_servers(tmp_path) as s, PopConsumer("CG", s.namesrv) as consumer:
        send(s.namesrv, 1)
        pop_all(consumer, 1, invisible_ms=1)
        [again] = pop_all(consumer, 1, invisible_ms=600_000)
        code, out, err = rmqlog(capsys, "pop-status", "--namesrv", s.namesrv, "--group", "CG", "--topic", "T")
        assert code == 0, err
        assert out.splitlines()[0].startswith(f"CG  %RETRY%CG_T/broker-a/0  offset {again['queueOffset']}  in flight ")


def test_pop_status_is_authorized_under_acl(
    servers: dict[str, Any],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    ns = servers["namesrv"]
    creds = ("--access-key", USER_KEY, "--secret-key", USER_SECRET)
    code, _, err = rmqlog(capsys, "pop-status", "--namesrv", ns, "--group", "groupA", "--topic", "T", *creds)
    # the ACL's refusal: what was asked is wrong (2, rmqlog.admin.exits; 3 before the one table)
    assert code == 2 and "AclException" in err and "groupA" in err, err
    code, _, err = rmqlog(capsys, "pop-status", "--namesrv", ns, "--group", "groupC", "--topic", "T", *creds)
    assert code == 1 and "no POP message" in err


def test_an_orderly_pop_blocks_its_queue_and_counts_attempts(tmp_path: Path) -> None:
    with pop_servers(tmp_path) as s, PopConsumer("CG", s.namesrv) as consumer:
        with Producer("PG", s.namesrv) as producer:
            for body in (b"1", b"2", b"3"):
                producer.send("T", body, queue_id=0)
        s.dispatch()  # all three readable by the first pop
        first = consumer.pop("T", 32, order=True, invisible_ms=1).rows  # not acked: due again at once
        assert [r["body"] for r in first] == [b"1", b"2", b"3"] and {r["reconsumeTimes"] for r in first} == {0}
        again: list[dict[str, Any]] = []
        while not again:  # the queue is blocked until the batch's invisible time passed
            again = consumer.pop("T", 32, order=True, invisible_ms=600_000, poll_ms=1000).rows
        assert [(r["body"], r["reconsumeTimes"]) for r in again] == [(b"1", 1), (b"2", 1), (b"3", 1)]
        assert consumer.pop("T", order=True).status == "NO_NEW_MSG"  # blocked while in flight
        consumer.ack_many("T", [r["receiptHandle"] for r in again])
        assert consumer.pop("T", order=True).status == "NO_NEW_MSG" and s.inflight("CG") == 0
