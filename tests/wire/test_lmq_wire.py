"""Light message queues over real sockets (``enableLmq`` + ``enableMultiDispatch``): a name
server and a broker on 127.0.0.1, our client (``rmqnet.client``) sending messages that name
LMQs in ``INNER_MULTI_DISPATCH`` and pulling an LMQ (``%LMQ%x``, queue 0) from the broker's
address (no route names an LMQ: RocketMQ's LMQ consumers pull by address too); the refusals
as RocketMQ answers them: past ``maxLmqConsumeQueueNum`` SYSTEM_ERROR
``[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]...``, a bad LMQ name MESSAGE_ILLEGAL, an LMQ with
``enableLmq`` off TOPIC_NOT_EXIST; under ACL, the LMQs a send names need PUB and an LMQ
pulled SUB, as topics; a POP of an LMQ (its offsets in the handles, a redelivery through the
group's retry topic)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import rmqlog
from rmqnet.broker.acl import ACL_EXCEPTION
from rmqnet.broker.config import BrokerConfig
from rmqnet.broker.pop import AckStatus
from rmqnet.broker.pop_handle import ExtraInfo
from rmqnet.client import BrokerError, Producer, PullConsumer
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from rmqnet.remoting.acl_sign import sign

from .broker_helpers import (
    FakePeer,
    RecordingStore,
    encode_batch,
    live_cluster,
    make_broker,
    run,
    send_header,
    send_request,
)
from .brokerpull_support import HANG_GUARD_S, SEGMENT


def _serve(tmp_path: Path, **store: Any) -> Iterator[tuple[str, str, Any]]:
    """(name server, broker) addresses and the broker process, servers run on a thread of their own."""
    root = tmp_path / "root"
    store_config = rmqlog.StoreConfig(mapped_file_size_commit_log=SEGMENT, **store)
    with rmqlog.MessageStore.open(root, store_config) as s:
        s.create_topic("T", 2)
    config = BrokerConfig(broker_name="broker-a", listen_port=0, store=store_config)
    with live_cluster({"broker-a": (root, config)}, "servers") as live:
        yield live.namesrv, live.addresses["broker-a"], live.procs["broker-a"]


@pytest.fixture
def lmq_servers(tmp_path: Path) -> Iterator[tuple[str, str, Any]]:
    yield from _serve(tmp_path, enable_lmq=True, enable_multi_dispatch=True, max_lmq_consume_queue_num=3)


def _send(producer: Producer, body: bytes, lmqs: str, queue_id: int = 0) -> Any:
    return producer.send("T", body, properties={"INNER_MULTI_DISPATCH": lmqs}, queue_id=queue_id)


def test_pull_of_an_lmq_reads_the_messages_sent_to_it(lmq_servers: tuple[str, str, Any]) -> None:
    namesrv, broker, _ = lmq_servers
    producer, consumer = Producer("PG", namesrv), PullConsumer("CG", namesrv)
    try:
        _send(producer, b"one", "%LMQ%a,%LMQ%b", 0)
        _send(producer, b"two", "%LMQ%b", 1)
        producer.send("T", b"plain", queue_id=0)
        rows = _pull_all(consumer, "%LMQ%b", broker, 2)
        assert [(m["topic"], m["body"]) for m in rows] == [("T", b"one"), ("T", b"two")]  # the original records
        assert [dict(m["properties"])["INNER_MULTI_QUEUE_OFFSET"] for m in rows] == ["0,0", "1"]
        a = consumer.pull("%LMQ%a", 0, 0, suspend_ms=30_000, broker_name=broker)
        assert a.messages["body"].to_pylist() == [b"one"]
        assert consumer.pull("%LMQ%a", 0, 1, broker_name=broker).status != "FOUND"
        # the message's own queue has it as any message
        assert [m["body"] for m in _pull_all(consumer, "T", broker, 2)] == [b"one", b"plain"]
        consumer.commit("%LMQ%b", 0, 2, broker_name=broker)
        assert consumer.committed("%LMQ%b", 0, broker_name=broker) == 2
    finally:
        producer.close()
        consumer.close()


def _pull_all(consumer: PullConsumer, topic: str, broker: str, n: int) -> list[dict[str, Any]]:
    """The first ``n`` messages of queue 0 (a send is answered before its dispatch: a long poll waits for it)."""
    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        got = consumer.pull(topic, 0, len(rows), suspend_ms=30_000, broker_name=broker)
        assert got.status == "FOUND"
        rows += got.messages.to_pylist()
        assert got.next_begin_offset == len(rows)
    return rows


def test_a_held_pull_of_an_lmq_is_woken_by_a_send_naming_it(lmq_servers: tuple[str, str, Any]) -> None:
    namesrv, broker, proc = lmq_servers
    producer, consumer = Producer("PG", namesrv), PullConsumer("CG", namesrv)
    holds = proc.broker.holds
    held = threading.Event()
    hold = holds.hold

    def watched_hold(*a: Any, **kw: Any) -> Any:
        fut = hold(*a, **kw)
        held.set()
        return fut

    holds.hold = watched_hold
    try:
        with ThreadPoolExecutor(1) as pool:
            parked = pool.submit(consumer.pull, "%LMQ%w", 0, 0, suspend_ms=600_000, broker_name=broker)
            assert held.wait(HANG_GUARD_S), "the pull was not held"
            _send(producer, b"wake", "%LMQ%w")  # its own queue T/0 and %LMQ%w/0 get units
            woken = parked.result(HANG_GUARD_S)  # (long before the 600 s suspend: the arrival woke it)
        assert woken.status == "FOUND" and woken.messages["body"].to_pylist() == [b"wake"]
    finally:
        holds.hold = hold
        producer.close()
        consumer.close()


def test_refusals_answer_rocketmq_s_codes(lmq_servers: tuple[str, str, Any]) -> None:
    namesrv, _, _ = lmq_servers
    producer = Producer("PG", namesrv)
    try:
        with pytest.raises(BrokerError) as bad:
            _send(producer, b"x", "%LMQ%ok,../etc")
        assert bad.value.code == ResponseCode.MESSAGE_ILLEGAL and "light message queue" in str(bad.value)
        _send(producer, b"a", "%LMQ%1,%LMQ%2,%LMQ%3")  # 0 LMQs: not past 3
        _send(producer, b"b", "%LMQ%4")  # 3: not past 3 (RocketMQ's >)
        with pytest.raises(BrokerError) as over:
            _send(producer, b"c", "%LMQ%1")  # 4 LMQs
        assert over.value.code == ResponseCode.SYSTEM_ERROR
        assert "[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]" in str(over.value)
        assert producer.send("T", b"plain", queue_id=0).status == "SEND_OK"  # a send naming none goes on
    finally:
        producer.close()


def test_an_lmq_is_no_topic_with_lmq_off(tmp_path: Path) -> None:
    for namesrv, broker, _ in _serve(tmp_path):
        producer, consumer = Producer("PG", namesrv), PullConsumer("CG", namesrv)
        try:
            _send(producer, b"one", "%LMQ%a")
            with pytest.raises(BrokerError) as e:
                consumer.pull("%LMQ%a", 0, 0, broker_name=broker)
            assert e.value.code == ResponseCode.TOPIC_NOT_EXIST
        finally:
            producer.close()
            consumer.close()


LMQ_ACL = """
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - T=PUB|SUB
      - "%LMQ%ok=PUB|SUB"
"""


def test_the_lmqs_a_send_names_and_an_lmq_pulled_are_topics_under_acl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(LMQ_ACL)
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    with rmqlog.MessageStore.open(
        tmp_path / "s", rmqlog.StoreConfig(enable_lmq=True, enable_multi_dispatch=True)
    ) as store:
        store.create_topic("T", 4)
        puts = RecordingStore(store)
        broker = make_broker(puts, acl_enable=True)
        peer = FakePeer()

        def send(props: str, batch: bool = False) -> RemotingCommand:
            if batch:
                body = encode_batch([(b"m", 0, {"INNER_MULTI_DISPATCH": props})])
                req = send_request(send_header("T", batch=True), body, code=RequestCode.SEND_BATCH_MESSAGE)
            else:
                req = send_request(send_header("T", props=f"INNER_MULTI_DISPATCH\x01{props}\x02"), b"m")
            (res,) = run(broker, peer, sign(req, "RocketMQ", "12345678"))
            assert res is not None
            return res

        def pull(topic: str) -> RemotingCommand:
            req = RemotingCommand(
                RequestCode.PULL_MESSAGE,
                ext_fields={
                    "consumerGroup": "G",
                    "topic": topic,
                    "queueId": 0,
                    "queueOffset": 0,
                    "maxMsgNums": 32,
                    "sysFlag": 0,
                    "commitOffset": 0,
                    "suspendTimeoutMillis": 0,
                    "subscription": "*",
                    "subVersion": 0,
                },
            )
            (res,) = run(broker, peer, sign(req, "RocketMQ", "12345678"))
            assert res is not None
            return res

        assert send("%LMQ%ok").code == ResponseCode.SUCCESS
        for res in (send("%LMQ%ok,%LMQ%no"), send("%LMQ%no", batch=True), pull("%LMQ%no")):
            assert res.code == ResponseCode.SYSTEM_ERROR
            assert res.remark == f"{ACL_EXCEPTION}: No default permission for topic:%LMQ%no"
        assert sum(t.num_rows for t in puts.puts) == 1  # the refused sends stored nothing
        assert pull("%LMQ%ok").code != ResponseCode.SYSTEM_ERROR  # allowed: the pull ran


def test_pop_of_an_lmq_hands_out_its_offsets_and_redelivers_through_the_retry_topic(tmp_path: Path) -> None:
    t0 = 1_800_000_000_000
    clock = rmqlog.ManualClock(t0)
    config = rmqlog.StoreConfig(enable_lmq=True, enable_multi_dispatch=True)
    with rmqlog.MessageStore.open(tmp_path / "s", config, clock=clock) as store:
        store.create_topic("T", 2)
        store.wire.put_wire(
            pa.table(
                {
                    "topic": ["T"] * 3,
                    "queueId": [0, 1, 0],
                    "body": [b"a", b"b", b"c"],
                    "properties": ["INNER_MULTI_DISPATCH\x01%LMQ%a\x02"] * 3,
                }
            ),
            dispatch=True,
        )
        broker = make_broker(store, broker_name="bk", clock=clock)
        got = broker.pop.pop("G", "%LMQ%a", -1, 32, 60_000, t0)
        assert [m["body"] for m in _popped(got)] == [b"a", b"b", b"c"]
        # the LMQ's offsets 0, 1, 2 (the records' own are 0, 0, 1 in T's queues)
        assert got.handles == [f"0 {t0} 60000 0 0 bk 0 {i}" for i in range(3)]
        assert [broker.pop.ack("G", "%LMQ%a", ExtraInfo.parse(h), t0) for h in got.handles[:2]] == [AckStatus.OK] * 2
        assert broker.pop.pop("G", "%LMQ%a", -1, 32, 60_000, t0 + 1).queues == []
        now = t0 + 200_000  # past the invisible time: the unacked one comes back
        assert broker.pop.run_once(now) == 1
        store.dispatch()
        again = broker.pop.pop("G", "%LMQ%a", -1, 32, 60_000, now)
        assert [(m["topic"], m["body"], m["reconsumeTimes"]) for m in _popped(again)] == [("%RETRY%G_%LMQ%a", b"c", 1)]
        assert store.verify().problems == []


def _popped(result: Any) -> list[dict[str, Any]]:
    return [m for q in result.queues for m in rmqlog.decode_records(bytes(q.records.data)).to_pylist()]


def test_a_broker_never_stores_lmqs_as_topics(tmp_path: Path) -> None:
    config = rmqlog.StoreConfig(enable_lmq=True, enable_multi_dispatch=True)
    with rmqlog.MessageStore.open(tmp_path / "s", config) as store:
        store.create_topic("T", 2)
        store.wire.put_wire(
            pa.table(
                {"topic": ["T"], "queueId": [0], "body": [b"a"], "properties": ["INNER_MULTI_DISPATCH\x01%LMQ%a\x02"]}
            ),
            dispatch=True,
        )
        assert "%LMQ%a" in store.topics()  # its consume queue, on disk
        broker = make_broker(store)  # at start: topics found from consume queues only are adopted, LMQs not
        store.wire.put_wire(
            pa.table(
                {"topic": ["T"], "queueId": [1], "body": [b"b"], "properties": ["INNER_MULTI_DISPATCH\x01%LMQ%b\x02"]}
            ),
            dispatch=True,
        )  # an arrival
        assert not [t for t in broker.topics.all() if t.startswith("%LMQ%")]
        assert broker.topics.get("%LMQ%b") == rmqlog.TopicConfig("%LMQ%b", 1, 1, 6)
        broker.state.persist_all()
        assert not [t for t in store.topic_table() if t.startswith("%LMQ%")]
