"""Transactional messages on the broker (rmqnet.broker.transactions, rmqnet.broker.transaction_check)
over a real store, handlers called with RemotingCommands built from RocketMQ's field names;
the check service driven by a manual clock (no sleeps)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker.broker import Broker
from rmqnet.broker.transaction_check import relabel
from rmqnet.broker.transactions import CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from wire.broker_helpers import FakePeer, make_broker, run, send_header, send_request

NOW = 1_700_000_000_000


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


def open_store(root: Path) -> rmqlog.MessageStore:
    return rmqlog.MessageStore.open(
        root, small_store_config(store_host="127.0.0.1:10911"), clock=rmqlog.ManualClock(NOW)
    )


@pytest.fixture
def store(root: Path) -> Iterator[rmqlog.MessageStore]:
    s = open_store(root)
    try:
        yield s
    finally:
        s.close()


def broker_over(store: rmqlog.MessageStore, **changes: Any) -> Broker:
    b = make_broker(store, clock=rmqlog.ManualClock(NOW), **changes)
    if b.topics.get("T1") is None:
        b.topics.update(rmqlog.TopicConfig("T1", 4, 4))
    return b


def half_props(uniq: str, group: str = "PG", extra: str = "") -> str:
    return f"TRAN_MSG\x01true\x02PGROUP\x01{group}\x02UNIQ_KEY\x01{uniq}\x02TAGS\x01ta\x02{extra}"


def send_half(
    broker: Broker, uniq: str, body: bytes = b"hello", queue_id: int = 2, group: str = "PG", extra: str = ""
) -> RemotingCommand:
    (r,) = run(
        broker,
        FakePeer(),
        send_request(send_header("T1", queue_id=queue_id, props=half_props(uniq, group, extra), sys_flag=4), body),
    )
    assert r is not None
    return r


def offsets_of(reply: RemotingCommand) -> tuple[int, int]:
    """(commitLogOffset, tranStateTableOffset) as a producer takes them from the half's reply."""
    return int(reply.ext_fields["msgId"][16:], 16), int(reply.ext_fields["queueOffset"])


def end_request(
    reply_or_offsets: RemotingCommand | tuple[int, int],
    outcome: int,
    *,
    group: str = "PG",
    from_check: bool = False,
    opaque: int = 7,
) -> RemotingCommand:
    off, qoff = offsets_of(reply_or_offsets) if isinstance(reply_or_offsets, RemotingCommand) else reply_or_offsets
    ext = {
        "producerGroup": group,
        "tranStateTableOffset": str(qoff),
        "commitLogOffset": str(off),
        "commitOrRollback": str(outcome),
        "fromTransactionCheck": "true" if from_check else "false",
        "msgId": "M",
    }
    return RemotingCommand(RequestCode.END_TRANSACTION, opaque, 0, None, ext, b"", "JAVA")


def messages(store: rmqlog.MessageStore, topic: str, queue_id: int = 0) -> list[dict[str, Any]]:
    store.dispatch()
    if topic not in store.topics():
        return []
    return store.read_queue(topic, queue_id, 0, 1 << 40).to_pylist()


COMMIT, ROLLBACK = 8, 12


# ----------------------------------------------------------------------- half and end
def test_half_message_is_stored_in_the_half_topic_invisible_to_its_topic(store: rmqlog.MessageStore) -> None:
    broker = broker_over(store)
    r = send_half(broker, "U1")
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["queueId"] == "2"
    assert messages(store, "T1", 2) == []
    (half,) = messages(store, HALF_TOPIC)
    props = dict(half["properties"])
    assert (props["REAL_TOPIC"], props["REAL_QID"], half["sysFlag"] & 0xC) == ("T1", "2", 0)
    assert int(r.ext_fields["queueOffset"]) == half["queueOffset"] == 0


def test_commit_stores_the_message_once_in_its_real_queue(store: rmqlog.MessageStore) -> None:
    broker = broker_over(store)
    r = send_half(broker, "U1", b"body-1", extra="KEYS\x01k1\x02")
    (a, b) = run(broker, FakePeer(), end_request(r, COMMIT), end_request(r, COMMIT, opaque=8))  # a client's retry
    assert a is not None and a.code == ResponseCode.SUCCESS
    assert b is not None and b.code == ResponseCode.SUCCESS and "already committed" in (b.remark or "")
    (msg,) = messages(store, "T1", 2)
    props = dict(msg["properties"])
    assert msg["body"] == b"body-1" and msg["sysFlag"] & 0xC == 8 and msg["keys"] == ["k1"]
    assert props["UNIQ_KEY"] == "U1" and "REAL_TOPIC" not in props and "REAL_QID" not in props
    (op,) = messages(store, OP_TOPIC)
    assert op["tags"] == "d" and op["body"] == b"0" and dict(op["properties"])["TRAN_END"] == "COMMIT"
    # once more, later: still one message
    (c,) = run(broker, FakePeer(), end_request(r, COMMIT))
    assert c is not None and c.code == ResponseCode.SUCCESS and len(messages(store, "T1", 2)) == 1


def test_rollback_stores_only_the_op_record_and_a_later_commit_is_refused(store: rmqlog.MessageStore) -> None:
    broker = broker_over(store)
    r = send_half(broker, "U1")
    (a,) = run(broker, FakePeer(), end_request(r, ROLLBACK))
    (b,) = run(broker, FakePeer(), end_request(r, COMMIT))
    assert a is not None and a.code == ResponseCode.SUCCESS
    assert b is not None and b.code == ResponseCode.SYSTEM_ERROR and "rolled back" in (b.remark or "")
    assert messages(store, "T1", 2) == [] and len(messages(store, OP_TOPIC)) == 1


def test_rollback_after_commit_is_refused(store: rmqlog.MessageStore) -> None:
    broker = broker_over(store)
    r = send_half(broker, "U1")
    (a,) = run(broker, FakePeer(), end_request(r, COMMIT))
    (b,) = run(broker, FakePeer(), end_request(r, ROLLBACK))
    assert a is not None and a.code == ResponseCode.SUCCESS
    assert b is not None and b.code == ResponseCode.SYSTEM_ERROR and "committed" in (b.remark or "")
    assert len(messages(store, "T1", 2)) == 1


def test_ends_arriving_together_are_one_store_put(store: rmqlog.MessageStore) -> None:
    broker = broker_over(store)
    halves = [send_half(broker, f"U{i}", f"b{i}".encode(), queue_id=i % 4) for i in range(40)]
    puts: list[int] = []
    real_put = store.put_wire

    def counting(table: Any, **kw: Any) -> Any:
        puts.append(table.num_rows)
        return real_put(table, **kw)

    store.put_wire = counting  # type: ignore[method-assign]
    replies = run(
        broker,
        FakePeer(),
        *[end_request(h, COMMIT if i % 2 == 0 else ROLLBACK, opaque=i) for i, h in enumerate(halves)],
    )
    assert all(r is not None and r.code == ResponseCode.SUCCESS for r in replies)
    assert puts == [20 + 40]  # 20 committed messages and 40 op records, one all-or-nothing put
    bodies = sorted(m["body"] for q in range(4) for m in messages(store, "T1", q))
    assert bodies == sorted(f"b{i}".encode() for i in range(0, 40, 2))


def test_unknown_transaction_wrong_offsets_and_wrong_group(store: rmqlog.MessageStore) -> None:
    broker = broker_over(store)
    r = send_half(broker, "U1")
    off, qoff = offsets_of(r)
    replies = run(
        broker,
        FakePeer(),
        end_request((off + 1, qoff), COMMIT, opaque=1),  # no record starts there
        end_request((off, qoff + 5), COMMIT, opaque=2),  # not that half's queue offset
        end_request((1 << 40, 0), COMMIT, opaque=3),  # past the log
        end_request(r, COMMIT, group="OTHER", opaque=4),
    )
    remarks = [(x.code, x.remark) for x in replies if x is not None]
    assert remarks[:3] == [(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")] * 3
    assert remarks[3] == (ResponseCode.SYSTEM_ERROR, "The producer group wrong")
    assert messages(store, "T1", 2) == [] and messages(store, OP_TOPIC) == []
    # a plain message's offsets are no half message either
    (plain,) = run(broker, FakePeer(), send_request(send_header("T1", queue_id=1), b"plain"))
    assert plain is not None
    (x,) = run(broker, FakePeer(), end_request(plain, COMMIT))
    assert x is not None and x.code == ResponseCode.SYSTEM_ERROR


@pytest.mark.parametrize(
    "ext",
    [
        {
            "producerGroup": "PG",
            "commitLogOffset": "0",
            "commitOrRollback": "8",
            "msgId": "M",
        },  # no tranStateTableOffset
        {
            "producerGroup": "PG",
            "tranStateTableOffset": "0",
            "commitLogOffset": "0",
            "commitOrRollback": "5",
            "msgId": "M",
        },
        {
            "producerGroup": "PG",
            "tranStateTableOffset": "x",
            "commitLogOffset": "0",
            "commitOrRollback": "8",
            "msgId": "M",
        },
    ],
)
def test_bad_header_is_system_error(store: rmqlog.MessageStore, ext: dict[str, str]) -> None:
    broker = broker_over(store)
    (r,) = run(broker, FakePeer(), RemotingCommand(RequestCode.END_TRANSACTION, 1, 0, None, ext, b"", "JAVA"))
    assert r is not None and r.code == ResponseCode.SYSTEM_ERROR


def test_unknown_outcome_is_not_answered_and_a_slave_refuses(store: rmqlog.MessageStore) -> None:
    broker = broker_over(store)
    r = send_half(broker, "U1")
    assert run(broker, FakePeer(), end_request(r, 0)) == [None]
    slave = broker_over(store, broker_role="SLAVE")
    (s,) = run(slave, FakePeer(), end_request(r, COMMIT))
    assert s is not None and s.code == ResponseCode.SLAVE_NOT_AVAILABLE


def test_half_refusals(store: rmqlog.MessageStore) -> None:
    broker = broker_over(store)
    no_group = "TRAN_MSG\x01true\x02UNIQ_KEY\x01U9\x02"
    (a,) = run(broker, FakePeer(), send_request(send_header("T1", props=no_group), b"x"))
    b = send_half(broker, "U8", extra="DELAY\x013\x02")
    rejecting = broker_over(store, reject_transaction_message=True)
    c = send_half(rejecting, "U7")
    assert a is not None and a.code == ResponseCode.MESSAGE_ILLEGAL and "PGROUP" in (a.remark or "")
    assert b.code == ResponseCode.MESSAGE_ILLEGAL and "DELAY" in (b.remark or "")
    assert c.code == ResponseCode.NO_PERMISSION
    assert messages(store, HALF_TOPIC) == []


def test_half_without_uniq_key_gets_one(store: rmqlog.MessageStore) -> None:
    broker = broker_over(store)
    (r,) = run(broker, FakePeer(), send_request(send_header("T1", props="TRAN_MSG\x01true\x02PGROUP\x01PG\x02"), b"x"))
    assert r is not None and r.code == ResponseCode.SUCCESS
    (half,) = messages(store, HALF_TOPIC)
    assert dict(half["properties"]).get("UNIQ_KEY")


def test_recover_after_restart_an_end_replayed_stores_nothing(root: Path) -> None:
    s = open_store(root)
    broker = broker_over(s)
    r1, r2, r3 = (send_half(broker, f"U{i}") for i in range(3))
    run(broker, FakePeer(), end_request(r1, COMMIT), end_request(r2, ROLLBACK, opaque=2))
    s.close()
    s = open_store(root)
    try:
        broker = broker_over(s)
        assert broker.transactions.resolved == {"U0": "COMMIT", "U1": "ROLLBACK"}
        a, b, c = run(
            broker,
            FakePeer(),
            end_request(r1, COMMIT),
            end_request(r2, COMMIT, opaque=2),
            end_request(r3, COMMIT, opaque=3),
        )
        assert a is not None and "already committed" in (a.remark or "")
        assert b is not None and b.code == ResponseCode.SYSTEM_ERROR
        assert c is not None and c.code == ResponseCode.SUCCESS and c.remark is None
        assert sorted(dict(m["properties"])["UNIQ_KEY"] for m in messages(s, "T1", 2)) == ["U0", "U2"]
    finally:
        s.close()


def test_the_put_is_all_or_nothing_when_the_store_fails(store: rmqlog.MessageStore) -> None:
    broker = broker_over(store)
    r = send_half(broker, "U1")

    def full(table: Any, **kw: Any) -> Any:
        raise rmqlog.DiskFullError("disk full")

    real = store.put_wire
    store.put_wire = full  # type: ignore[method-assign]
    (a,) = run(broker, FakePeer(), end_request(r, COMMIT))
    store.put_wire = real  # type: ignore[method-assign]
    assert a is not None and a.code == ResponseCode.SERVICE_NOT_AVAILABLE
    (b,) = run(broker, FakePeer(), end_request(r, COMMIT))  # the retry commits it
    assert b is not None and b.code == ResponseCode.SUCCESS and b.remark is None
    assert len(messages(store, "T1", 2)) == 1


# ------------------------------------------------------------------------- check-backs
def heartbeat(broker: Broker, peer: FakePeer, group: str = "PG") -> None:
    body = json.dumps({"clientID": "c1", "producerDataSet": [{"groupName": group}], "consumerDataSet": []}).encode()
    res = broker.table.process(broker, peer, RemotingCommand(RequestCode.HEART_BEAT, 1, 0, None, {}, body, "JAVA"))
    assert isinstance(res, RemotingCommand) and res.code == ResponseCode.SUCCESS


def test_check_back_after_the_timeout_to_a_producer_of_the_group(store: rmqlog.MessageStore) -> None:
    broker = broker_over(store)
    producer = FakePeer("127.0.0.1:50002")
    heartbeat(broker, producer)
    send_half(broker, "U1", b"checked")
    store.dispatch()
    checker = broker.transaction_check
    assert checker.run_once(NOW + 1000) == 0 and producer.sent == []  # younger than transactionTimeOut
    assert checker.run_once(NOW + 7000) == 0  # the next round waits for transactionCheckInterval
    assert checker.run_once(NOW + 61_000) == 1
    (check,) = producer.sent
    assert check.code == RequestCode.CHECK_TRANSACTION_STATE
    (msg,) = rmqlog.decode_records(check.body_bytes()).to_pylist()
    assert (msg["topic"], msg["queueId"], msg["body"]) == ("T1", 2, b"checked")
    assert dict(msg["properties"])["TRANSACTION_CHECK_TIMES"] == "1"
    renewed = (int(check.ext_fields["commitLogOffset"]), int(check.ext_fields["tranStateTableOffset"]))
    assert renewed[1] == 1 and check.ext_fields["transactionId"] == "U1"
    # the producer answers with the renewed offsets (fromTransactionCheck)
    (a,) = run(broker, producer, end_request(renewed, COMMIT, from_check=True))
    assert a is not None and a.code == ResponseCode.SUCCESS
    assert [m["body"] for m in messages(store, "T1", 2)] == [b"checked"]
    # a late commit of the first half's offsets: the same transaction, not stored again
    (b,) = run(broker, producer, end_request((0, 0), COMMIT))
    assert b is not None and "already committed" in (b.remark or "")
    assert checker.run_once(NOW + 200_000) == 0 and len(producer.sent) == 1
    assert broker.consumer_offsets.query("CID_RMQ_SYS_TRANS", HALF_TOPIC, 0) == 2


def test_a_transaction_checked_too_often_is_discarded(store: rmqlog.MessageStore) -> None:
    broker = broker_over(store, transaction_check_max=2)
    producer = FakePeer()
    heartbeat(broker, producer)
    r = send_half(broker, "U1")
    checker = broker.transaction_check
    now = NOW + 10_000
    for _ in range(3):  # checks 1 and 2, then the discard
        store.dispatch()
        checker.run_once(now)
        now += 60_000
    assert len(producer.sent) == 2 and checker.discarded == 1
    (copy,) = messages(store, CHECK_MAX_TOPIC)
    assert dict(copy["properties"])["REAL_TOPIC"] == "T1"
    assert dict(messages(store, OP_TOPIC)[0]["properties"])["TRAN_END"] == "DISCARD"
    (late,) = run(broker, producer, end_request(r, COMMIT))
    assert late is not None and late.code == ResponseCode.SYSTEM_ERROR and "discarded" in (late.remark or "")
    assert messages(store, "T1", 2) == []
    store.dispatch()
    checker.run_once(now)
    assert len(producer.sent) == 2  # never checked again


def test_check_back_with_no_producer_connection(store: rmqlog.MessageStore) -> None:
    """The half's group (``PG``) has a producer whose connection is closed, another group a
    live one: no check-back is sent to either (a check service sending to closed connections,
    or to another group's, fails here)."""
    broker = broker_over(store)
    gone, other = FakePeer("127.0.0.1:50003"), FakePeer("127.0.0.1:50004")
    heartbeat(broker, gone, "PG")
    heartbeat(broker, other, "OTHER")
    gone.closed = True
    send_half(broker, "U1")
    store.dispatch()
    checker = broker.transaction_check
    assert "PG" in broker.consumers.producer_groups  # (the group knows the closed connection)
    assert checker.run_once(NOW + 10_000) == 1
    assert checker.no_channel == 1 and checker.checked == 0 and gone.sent == [] and other.sent == []
    assert len(messages(store, HALF_TOPIC)) == 2  # renewed all the same: checked again next round


def test_the_check_back_test_catches_a_check_service_sending_to_closed_connections(
    store: rmqlog.MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutant of the check service (every connection of the group, closed ones too) sends
    to the closed connection of the test above: that test's setup sees it."""
    from rmqnet.broker.transaction_check import TransactionCheckService

    def any_channel(self: TransactionCheckService, group: str | None) -> Any:
        clients = self.broker.consumers.producer_groups.get(group) if group else None
        peers = [c.peer for c in (clients or {}).values()]
        return peers[0] if peers else None

    monkeypatch.setattr(TransactionCheckService, "_channel", any_channel)
    with pytest.raises(AssertionError):
        test_check_back_with_no_producer_connection(store)


def test_resolved_halves_are_passed_over_and_young_ones_stop_the_round(store: rmqlog.MessageStore) -> None:
    broker = broker_over(store)
    producer = FakePeer()
    heartbeat(broker, producer)
    r0 = send_half(broker, "U0")
    run(broker, producer, end_request(r0, ROLLBACK))
    send_half(broker, "U1")
    store.dispatch()
    checker = broker.transaction_check
    checker.run_once(NOW + 3000)
    assert producer.sent == [] and broker.consumer_offsets.query("CID_RMQ_SYS_TRANS", HALF_TOPIC, 0) == 1


def test_relabel_keeps_the_record_whole() -> None:
    import refcodec as rc

    record = rc.encode_record(
        topic=HALF_TOPIC, body=b"abc", queue_id=0, queue_offset=4, physical_offset=0, properties={"A": "1"}
    )
    out = relabel(record, "T1", 3)
    (msg,) = rmqlog.decode_records(out).to_pylist()
    assert (msg["topic"], msg["queueId"], msg["body"], dict(msg["properties"])["A"]) == ("T1", 3, b"abc", "1")
