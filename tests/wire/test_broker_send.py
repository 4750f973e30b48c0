"""The broker's send path (rmqnet.broker.send), handlers called with RemotingCommands built
from RocketMQ's field names; the store's ``put_wire`` is recorded (``RecordingStore``) until
the store's own lands, topics are the real store's."""

from __future__ import annotations

import asyncio
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import small_store_config, walk

import rmqlog
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from wire.broker_helpers import (
    FakePeer,
    RecordingStore,
    encode_batch,
    make_broker,
    run,
    send_header,
    send_request,
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RecordingStore]:
    s = rmqlog.MessageStore.open(tmp_path / "store", small_store_config())
    try:
        yield RecordingStore(s)
    finally:
        s.close()


def _code(r: RemotingCommand | None) -> int:
    assert r is not None
    return r.code


def test_single_send_v2_is_stored_with_rocketmq_fields(store: RecordingStore) -> None:
    broker = make_broker(store)
    peer = FakePeer("10.1.2.3:40000")
    props = "WAIT\x01true\x02UNIQ_KEY\x017F0000010001\x02TAGS\x01TagA\x02"
    (r,) = run(
        broker, peer, send_request(send_header("T1", queue_id=2, props=props, sys_flag=1, flag=7), b"zlib-bytes")
    )
    assert r is not None and r.code == ResponseCode.SUCCESS and r.opaque == 1 and r.is_response
    assert r.ext_fields == {
        "msgId": "7F00000100002A9F0000000000000000",
        "queueId": "2",
        "queueOffset": "0",
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    }
    (table,) = store.puts
    row = table.to_pylist()[0]
    # WAIT is not stored, CLUSTER is added (RocketMQ's asyncSendMessage); the compressed bit is kept
    assert row == {
        "topic": "T1",
        "queueId": 2,
        "body": b"zlib-bytes",
        "flag": 7,
        "sysFlag": 1,
        "bornTimestamp": 1_700_000_000_123,
        "bornHost": "10.1.2.3:40000",
        "properties": "UNIQ_KEY\x017F0000010001\x02TAGS\x01TagA\x02CLUSTER\x01DefaultCluster\x02",
        "reconsumeTimes": 0,
    }


def test_send_v1_and_the_cpp_clients_string_fields(store: RecordingStore) -> None:
    broker = make_broker(store)
    ext = send_header("T1", queue_id=1).to_ext(False)
    ext = {
        k: str(v) if not isinstance(v, bool) else ("1" if v else "0") for k, v in ext.items()
    }  # C++: all strings, "0"/"1"
    ext.update(AccessKey="", OnsChannel="ALIYUN", Signature="x")
    (r,) = run(broker, FakePeer(), RemotingCommand(RequestCode.SEND_MESSAGE, 9, 0, None, ext, b"b", "CPP"))
    assert _code(r) == ResponseCode.SUCCESS and r is not None and r.ext_fields["queueId"] == "1"
    assert store.puts[0].column("topic").to_pylist() == ["T1"]


def test_sends_arriving_together_are_one_put_each_answered_from_its_row(store: RecordingStore) -> None:
    broker = make_broker(store)
    reqs = [send_request(send_header("T1", queue_id=i % 2), f"m{i}".encode(), opaque=100 + i) for i in range(10)]
    replies = run(broker, FakePeer(), *reqs)
    assert len(store.puts) == 1 and store.puts[0].num_rows == 10
    assert [r.opaque for r in replies if r] == list(range(100, 110))
    # queue offsets per queue, in arrival order: queue 0 gets 0..4, queue 1 gets 0..4
    assert [int(r.ext_fields["queueOffset"]) for r in replies if r] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert len({r.ext_fields["msgId"] for r in replies if r}) == 10
    assert store.puts[0].column("body").to_pylist() == [f"m{i}".encode() for i in range(10)]


def test_unknown_topic_without_auto_create_is_topic_not_exist(store: RecordingStore) -> None:
    broker = make_broker(store, auto_create_topic_enable=False)
    (r,) = run(broker, FakePeer(), send_request(send_header("NEW"), b"x"))
    assert r is not None and r.code == ResponseCode.TOPIC_NOT_EXIST
    assert r.remark is not None and r.remark.startswith("topic[NEW] not exist, apply first please!")
    assert store.puts == [] and "NEW" not in store.topics()
    assert broker.topics.get("TBW102") is None


def test_auto_create_through_tbw102_takes_the_clients_queue_count(store: RecordingStore) -> None:
    broker = make_broker(store)  # TBW102: 8 queues, perm 7; the client asks for 4
    tbw = broker.topics.get("TBW102")
    assert tbw is not None and tbw.perm == 7 and tbw.write_queue_nums == 8
    (r,) = run(broker, FakePeer(), send_request(send_header("AUTO", queue_id=3), b"x"))
    assert _code(r) == ResponseCode.SUCCESS
    tc = store.topics()["AUTO"]  # in the store's topics.json
    assert (tc.write_queue_nums, tc.read_queue_nums, tc.perm) == (4, 4, 6)


def test_default_topic_without_inherit_perm_creates_nothing(store: RecordingStore) -> None:
    store.create_topic("PLAIN", 4)
    broker = make_broker(store)
    (r,) = run(broker, FakePeer(), send_request(send_header("NEW2", default_topic="PLAIN"), b"x"))
    assert _code(r) == ResponseCode.TOPIC_NOT_EXIST and "NEW2" not in store.topics()


def test_queue_id_past_the_topics_queues_is_system_error(store: RecordingStore) -> None:
    store.create_topic("T4", 4)
    broker = make_broker(store)
    (r,) = run(broker, FakePeer("1.2.3.4:5"), send_request(send_header("T4", queue_id=4), b"x"))
    assert r is not None and r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark == (
        "request queueId[4] is illegal, TopicConfig [topicName=T4, readQueueNums=4, writeQueueNums=4, "
        "perm=RW-, topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false] Producer: 1.2.3.4:5"
    )
    assert store.puts == []


def test_negative_queue_id_picks_a_write_queue(store: RecordingStore) -> None:
    store.create_topic("T4", 4)
    broker = make_broker(store)
    replies = run(
        broker, FakePeer(), *[send_request(send_header("T4", queue_id=-1), b"x", opaque=i) for i in range(20)]
    )
    qids = {int(r.ext_fields["queueId"]) for r in replies if r}
    assert qids <= {0, 1, 2, 3}
    assert store.puts[0].column("queueId").to_pylist() == [int(r.ext_fields["queueId"]) for r in replies if r]


@pytest.mark.parametrize("missing", ["b", "e", "g"])
def test_missing_required_field_is_system_error_naming_it(store: RecordingStore, missing: str) -> None:
    broker = make_broker(store)
    req = send_request(send_header("T1"), b"x")
    del req.ext_fields[missing]
    (r,) = run(broker, FakePeer(), req)
    assert r is not None and r.code == ResponseCode.SYSTEM_ERROR and repr(missing) in (r.remark or "")
    assert store.puts == []


def test_bad_topic_names_and_forbidden_topics(store: RecordingStore) -> None:
    broker = make_broker(store)
    bad, long_, sched = (
        send_request(send_header(t), b"x", opaque=i) for i, t in enumerate(["a/b", "x" * 128, "SCHEDULE_TOPIC_XXXX"])
    )
    r1, r2, r3 = run(broker, FakePeer(), bad, long_, sched)
    assert r1 is not None and r1.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in (r1.remark or "")
    assert r2 is not None and r2.remark == "The specified topic is longer than topic max length."
    assert r3 is not None and r3.code == ResponseCode.NO_PERMISSION
    assert r3.remark == "Sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden."
    assert store.puts == []


def test_over_size_body_and_properties_are_message_illegal(store: RecordingStore) -> None:
    broker = make_broker(store, store_config=small_store_config(max_message_size=1000))
    big = send_request(send_header("T1"), b"x" * 1001, opaque=1)
    props = send_request(send_header("T1", props="k\x01" + "v" * 33000 + "\x02"), b"x", opaque=2)
    ok = send_request(send_header("T1"), b"x" * 1000, opaque=3)
    r1, r2, r3 = run(broker, FakePeer(), big, props, ok)
    assert r1 is not None and r1.code == ResponseCode.MESSAGE_ILLEGAL and "limit 1000B" in (r1.remark or "")
    assert r2 is not None and r2.code == ResponseCode.MESSAGE_ILLEGAL
    assert _code(r3) == ResponseCode.SUCCESS
    assert sum(t.num_rows for t in store.puts) == 1


def test_topic_without_write_perm_is_no_permission(store: RecordingStore) -> None:
    broker = make_broker(store)
    broker.topics.update(rmqlog.TopicConfig("RO", 4, 4, 4))
    (r,) = run(broker, FakePeer(), send_request(send_header("RO"), b"x"))
    assert r is not None and r.code == ResponseCode.NO_PERMISSION and store.puts == []


def test_transactional_message_is_refused_with_reject_transaction_message(store: RecordingStore) -> None:
    broker = make_broker(store, reject_transaction_message=True)
    (r,) = run(broker, FakePeer(), send_request(send_header("T1", props="TRAN_MSG\x01true\x02"), b"x"))
    assert r is not None and r.code == ResponseCode.NO_PERMISSION and "transaction" in (r.remark or "")


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (rmqlog.DiskFullError("disk full"), ResponseCode.SERVICE_NOT_AVAILABLE),
        (rmqlog.StoreClosedError("closed"), ResponseCode.SERVICE_NOT_AVAILABLE),
        (rmqlog.StoreBusyError("busy", path="lock", holders=[]), ResponseCode.SYSTEM_BUSY),
        (rmqlog.MessageTooLargeError("too big", row=0, field="body"), ResponseCode.MESSAGE_ILLEGAL),
        (OSError(5, "EIO"), ResponseCode.SYSTEM_ERROR),
    ],
)
def test_store_errors_are_mapped(store: RecordingStore, error: Exception, code: int) -> None:
    broker = make_broker(store)
    store.fail = error
    (r,) = run(broker, FakePeer(), send_request(send_header("T1"), b"x"))
    assert (
        r is not None and r.code == code and type(error).__name__ in (r.remark or "") or str(error) in (r.remark or "")
    )
    assert "msgId" not in (r.ext_fields if r else {})


def test_one_bad_message_does_not_fail_the_others_put_with_it(store: RecordingStore) -> None:
    broker = make_broker(store)

    def refuse_poison(table):  # the store refuses any batch holding the poison body
        if b"poison" in table.column("body").to_pylist():
            return rmqlog.InvalidMessageError("bad", row=0, field="body")
        return None

    store.fail = refuse_poison
    replies = run(
        broker,
        FakePeer(),
        *[send_request(send_header("T1"), b, opaque=i) for i, b in enumerate([b"a", b"poison", b"c"])],
    )
    assert [r.code for r in replies if r] == [ResponseCode.SUCCESS, ResponseCode.MESSAGE_ILLEGAL, ResponseCode.SUCCESS]
    assert [t.column("body").to_pylist() for t in store.puts] == [[b"a"], [b"c"]]


def test_a_stopping_broker_refuses_sends(store: RecordingStore) -> None:
    broker = make_broker(store)
    broker.begin_stop()
    (r,) = run(broker, FakePeer(), send_request(send_header("T1"), b"x"))
    assert r is not None and r.code == ResponseCode.SERVICE_NOT_AVAILABLE and store.puts == []


def test_back_pressure_is_system_busy(store: RecordingStore) -> None:
    broker = make_broker(store, send_queue_capacity=2)
    replies = run(broker, FakePeer(), *[send_request(send_header("T1"), b"x", opaque=i) for i in range(3)])
    assert [r.code for r in replies if r] == [ResponseCode.SUCCESS, ResponseCode.SUCCESS, ResponseCode.SYSTEM_BUSY]
    assert replies[2] is not None and replies[2].remark == "[OVERLOAD]system busy, start flow control for a while"
    assert store.puts[0].num_rows == 2


def test_sync_flush_answers_after_the_group_commit(store: RecordingStore) -> None:
    broker = make_broker(store, store_config=small_store_config(flush_disk_type=rmqlog.SYNC_FLUSH))
    gate = store.flush_gate = threading.Event()

    async def main() -> None:
        futs = [
            broker.table.process(broker, FakePeer(), send_request(send_header("T1"), b"x", opaque=i)) for i in range(3)
        ]
        put = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(put.set_result, None)
        await put  # the put ran (its call_soon came first); the flush is held by the gate
        assert store.puts and not any(f.done() for f in futs)  # type: ignore[union-attr]
        gate.set()
        replies = [await f for f in futs]  # type: ignore[misc]
        assert [r.code for r in replies] == [ResponseCode.SUCCESS] * 3
        assert store.flushes == 1  # one flush for the three

    asyncio.run(main())


def test_sync_flush_timeout_is_flush_disk_timeout_with_the_msgid(store: RecordingStore) -> None:
    broker = make_broker(
        store, store_config=small_store_config(flush_disk_type=rmqlog.SYNC_FLUSH), sync_flush_timeout=1
    )
    gate = store.flush_gate = threading.Event()

    async def main() -> RemotingCommand | None:
        fut = broker.table.process(broker, FakePeer(), send_request(send_header("T1"), b"x"))
        try:
            return await fut  # type: ignore[misc]  # answered while the flush is still held
        finally:
            gate.set()  # (the flush thread ends before asyncio.run returns)

    r = asyncio.run(main())
    assert r is not None and r.code == ResponseCode.FLUSH_DISK_TIMEOUT
    assert r.ext_fields["msgId"] == "7F00000100002A9F0000000000000000" and r.ext_fields["queueOffset"] == "0"


@pytest.mark.parametrize("form", ["320", "cpp-batch-flag"])
def test_batch_is_one_put_of_its_messages(store: RecordingStore, form: str) -> None:
    broker = make_broker(store)
    body = encode_batch(
        [(b"one", 0, {"UNIQ_KEY": "A1", "KEYS": "k1"}), (b"two", 3, {}), (b"three", 0, {"UNIQ_KEY": "A3\x02"[:2]})]
    )
    if form == "320":
        req = send_request(
            send_header("TB", queue_id=1, props="WAIT\x01true\x02"), body, code=RequestCode.SEND_BATCH_MESSAGE
        )
    else:  # the C++ client 1.0.1: code 10 with batch "1"
        ext = send_header("TB", queue_id=1, props="WAIT\x01true\x02").to_ext(False)
        ext["batch"] = "1"
        req = RemotingCommand(RequestCode.SEND_MESSAGE, 5, 0, None, ext, body, "CPP")
    single = send_request(send_header("TB", queue_id=1), b"single", opaque=77)
    r, r2 = run(broker, FakePeer(), req, single)
    assert r is not None and r.code == ResponseCode.SUCCESS
    ids = r.ext_fields["msgId"].split(",")
    assert len(ids) == 3 and r.ext_fields["queueOffset"] == "0" and r.ext_fields["queueId"] == "1"
    assert r2 is not None and r2.ext_fields["queueOffset"] == "3"
    (table,) = store.puts  # the batch and the single send: one put
    rows = table.to_pylist()
    assert [x["body"] for x in rows] == [b"one", b"two", b"three", b"single"]
    assert [x["flag"] for x in rows][:3] == [0, 3, 0]
    cluster = "WAIT\x01true\x02CLUSTER\x01DefaultCluster\x02"  # the request's properties, appended
    assert [x["properties"] for x in rows][:3] == [
        "UNIQ_KEY\x01A1\x02KEYS\x01k1\x02" + cluster,
        cluster,
        "UNIQ_KEY\x01A3\x02" + cluster,
    ]


def test_batch_over_the_size_limit_or_to_a_retry_topic_is_illegal(store: RecordingStore) -> None:
    broker = make_broker(store, store_config=small_store_config(max_message_size=64))
    big = send_request(send_header("TB"), encode_batch([(b"x" * 60, 0, {})]), code=RequestCode.SEND_BATCH_MESSAGE)
    retry = send_request(
        send_header("%RETRY%G"), encode_batch([(b"x", 0, {})]), code=RequestCode.SEND_BATCH_MESSAGE, opaque=2
    )
    r1, r2 = run(broker, FakePeer(), big, retry)
    assert _code(r1) == ResponseCode.MESSAGE_ILLEGAL and _code(r2) == ResponseCode.MESSAGE_ILLEGAL
    assert store.puts == []


def test_retry_send_past_max_reconsume_goes_to_the_dlq(store: RecordingStore) -> None:
    broker = make_broker(store)
    again = send_request(send_header("%RETRY%G1", reconsume=2, max_reconsume=3, props="DELAY\x013\x02"), b"r", opaque=1)
    dead = send_request(send_header("%RETRY%G1", reconsume=3, max_reconsume=3, props="DELAY\x013\x02"), b"d", opaque=2)
    r1, r2 = run(broker, FakePeer(), again, dead)
    assert _code(r1) == ResponseCode.SUCCESS and _code(r2) == ResponseCode.SUCCESS
    rows = store.puts[0].to_pylist()
    assert [(x["topic"], x["reconsumeTimes"]) for x in rows] == [("%RETRY%G1", 2), ("%DLQ%G1", 3)]
    assert "DELAY" in rows[0]["properties"] and "DELAY" not in rows[1]["properties"]
    assert {"%RETRY%G1", "%DLQ%G1"} <= set(store.topics())


# ----------------------------------------------------------- through the store's own put_wire
def test_sends_stored_for_real_read_back_by_refcodec(tmp_path: Path) -> None:
    root = tmp_path / "real"
    s = rmqlog.MessageStore.open(root, small_store_config(store_host="127.0.0.1:10911"))
    try:
        broker = make_broker(s)
        compressed = zlib.compress(b"a" * 5000)
        single = send_request(
            send_header(
                "TR", queue_id=1, sys_flag=1, flag=3, props="WAIT\x01true\x02UNIQ_KEY\x01AC1100010001\x02KEYS\x01k1\x02"
            ),
            compressed,
        )
        batch = send_request(
            send_header("TR", queue_id=2),
            encode_batch([(b"b1", 0, {"UNIQ_KEY": "U1"}), (b"b2", 0, {})]),
            code=RequestCode.SEND_BATCH_MESSAGE,
            opaque=2,
        )
        r1, r2 = run(broker, FakePeer("10.0.0.9:4321"), single, batch)
        assert _code(r1) == ResponseCode.SUCCESS and _code(r2) == ResponseCode.SUCCESS
        s.flush()
    finally:
        s.close()
    records = walk(root)
    assert [r.body for r in records] == [compressed, b"b1", b"b2"]
    first = records[0]
    assert (first.topic, first.queue_id, first.sys_flag, first.flag, first.born_host) == (
        "TR",
        1,
        1,
        3,
        "10.0.0.9:4321",
    )
    assert first.properties["UNIQ_KEY"] == "AC1100010001" and first.properties["CLUSTER"] == "DefaultCluster"
    assert "WAIT" not in first.properties
    assert r1 is not None and r1.ext_fields["msgId"] == first.msg_id
    assert r2 is not None and r2.ext_fields["msgId"] == f"{records[1].msg_id},{records[2].msg_id}"
    assert [r.queue_id for r in records[1:]] == [2, 2] and records[1].properties["UNIQ_KEY"] == "U1"


def test_a_malformed_batch_body_is_message_illegal_and_stores_nothing(tmp_path: Path) -> None:
    s = rmqlog.MessageStore.open(tmp_path / "real", small_store_config())
    try:
        broker = make_broker(s)
        body = encode_batch([(b"ok", 0, {})])[:-3]  # truncated
        (r,) = run(broker, FakePeer(), send_request(send_header("TR"), body, code=RequestCode.SEND_BATCH_MESSAGE))
        assert r is not None and r.code == ResponseCode.MESSAGE_ILLEGAL and "batch body" in (r.remark or "")
        assert s.published_tail() == 0
    finally:
        s.close()


def test_the_wait_property_is_read_as_javas_parse_reads_it() -> None:
    """``waits_for_store`` finds WAIT's value from its item without parsing the rest; pinned to the
    parse (``string2messageProperties``, the last item wins) on random properties."""
    import random

    from rmqnet.broker.send_rows import parse_properties, waits_for_store

    items = [
        "WAIT\x01true",
        "WAIT\x01false",
        "WAIT\x01TRUE",
        "XWAIT\x01false",
        "WAIT\x01",
        "WAIT\x01a\x01b",
        "TAGS\x01t",
        "K\x01vWAIT\x01false",
        "WAIT\x01FaLse",
        "",
    ]
    rng = random.Random(7)
    for _ in range(5000):
        p = "".join(rng.choice(items) + rng.choice(["\x02", "\x02", ""]) for _ in range(rng.randint(0, 4)))
        value = parse_properties(p).get("WAIT")
        assert waits_for_store(p) == (value is None or value.lower() == "true"), repr(p)
