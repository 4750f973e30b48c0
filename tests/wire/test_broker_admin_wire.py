"""Topic and group admin over the wire (rmqnet.broker.admin, admin_stats, admin_config):
DELETE_TOPIC_IN_BROKER 215, GET_TOPIC_STATS_INFO 202, GET_CONSUME_STATS 208,
GET_CONSUMER_CONNECTION_LIST 203, GET_BROKER_CONFIG 26, UPDATE_BROKER_CONFIG 25, built from
RocketMQ 4.9.8's ``AdminBrokerProcessor`` and the bodies its fastjson writes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import javaproperties
import pytest
from conftest import small_store_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmqlog
from rmqnet.broker.broker import Broker
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from rmqnet.remoting.admin_bodies import (
    QueueKey,
    decode_consume_stats,
    decode_consumer_connection,
    decode_topic_stats,
)
from rmqnet.remoting.route import loads_fastjson
from wire.broker_helpers import FakePeer, make_broker, run, send_header, send_request

T0 = 1_700_000_000_000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[rmqlog.MessageStore]:
    s = rmqlog.MessageStore.open(tmp_path / "store", small_store_config())
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def broker(store: rmqlog.MessageStore) -> Broker:
    return make_broker(store, clock=rmqlog.ManualClock(T0))


def _call(
    broker: Broker, code: int, ext: dict[str, Any] | None = None, body: bytes = b"", peer: FakePeer | None = None
) -> RemotingCommand:
    r = broker.table.process(broker, peer or FakePeer(), RemotingCommand(code, 3, 0, None, ext or {}, body, "JAVA"))
    assert isinstance(r, RemotingCommand)
    return r


def _send(broker: Broker, topic: str, n: int, queue_id: int = 0) -> None:
    res = run(
        broker,
        FakePeer(),
        *[send_request(send_header(topic, queue_id=queue_id), b"m%d" % i, opaque=i) for i in range(n)],
    )
    assert all(r is not None and r.code == ResponseCode.SUCCESS for r in res), [r and r.remark for r in res]
    broker.store.dispatch()


def _heartbeat(broker: Broker, peer: FakePeer, group: str, topic: str, client: str = "10.0.0.1@1") -> None:
    body = {
        "clientID": client,
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [
                    {
                        "topic": topic,
                        "subString": "*",
                        "tagsSet": [],
                        "codeSet": [],
                        "subVersion": 5,
                        "classFilterMode": False,
                        "expressionType": "TAG",
                    }
                ],
            }
        ],
    }
    assert _call(broker, RequestCode.HEART_BEAT, body=json.dumps(body).encode(), peer=peer).code == ResponseCode.SUCCESS


# ------------------------------------------------------------------------------------ 202


def test_topic_stats_per_queue_min_max_and_last_update(broker: Broker, store: rmqlog.MessageStore) -> None:
    store.create_topic("ST", 3)
    _send(broker, "ST", 4, queue_id=1)
    r = _call(broker, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "ST"})
    assert r.code == ResponseCode.SUCCESS
    text = bytes(r.body).decode()
    # fastjson's form: the MessageQueue object itself is the key
    assert text.startswith(
        '{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"ST"}:'
        '{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0}'
    )
    stats = decode_topic_stats(bytes(r.body))
    assert sorted(stats) == [QueueKey("ST", "broker-a", q) for q in range(3)]
    q1 = stats[QueueKey("ST", "broker-a", 1)]
    assert (q1.min_offset, q1.max_offset) == (0, 4)
    last = store.read_queue("ST", 1, 3, 4).column("storeTimestamp").cast("int64")[0].as_py() // 1000
    assert q1.last_update_timestamp == last > 0


def test_topic_stats_of_an_unknown_topic_is_topic_not_exist(broker: Broker) -> None:
    r = _call(broker, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "NOPE"})
    assert (r.code, r.remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[NOPE] not exist")
    r = _call(broker, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "../x"})
    assert r.code == ResponseCode.SYSTEM_ERROR


# ------------------------------------------------------------------------------------ 208


def test_consume_stats_broker_and_consumer_offsets(broker: Broker, store: rmqlog.MessageStore) -> None:
    store.create_topic("CS", 2)
    _send(broker, "CS", 5, queue_id=0)
    _send(broker, "CS", 2, queue_id=1)
    broker.consumer_offsets.commit("CG1", "CS", 0, 3)
    r = _call(broker, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "CG1", "topic": "CS"})
    assert r.code == ResponseCode.SUCCESS
    assert bytes(r.body).startswith(
        b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"CS"}:'
    )
    stats = decode_consume_stats(bytes(r.body))
    q0, q1 = stats.offset_table[QueueKey("CS", "broker-a", 0)], stats.offset_table[QueueKey("CS", "broker-a", 1)]
    assert (q0.broker_offset, q0.consumer_offset) == (5, 3)
    assert (
        q0.last_timestamp == store.read_queue("CS", 0, 2, 3).column("storeTimestamp").cast("int64")[0].as_py() // 1000
    )
    assert (q1.broker_offset, q1.consumer_offset, q1.last_timestamp) == (2, 0, 0)
    assert stats.total_diff() == 4
    # without a topic: every topic the group has offsets of
    r = _call(broker, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "CG1"})
    assert {q.topic for q in decode_consume_stats(bytes(r.body)).offset_table} == {"CS"}


def test_consume_tps_counts_the_groups_pulls_of_the_last_minute(broker: Broker, store: rmqlog.MessageStore) -> None:
    store.create_topic("TPS", 1)
    _send(broker, "TPS", 6)
    pull = {
        "consumerGroup": "CGT",
        "topic": "TPS",
        "queueId": 0,
        "queueOffset": 0,
        "maxMsgNums": 32,
        "sysFlag": 4,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
        "expressionType": "TAG",
    }
    (res,) = run(broker, FakePeer(), RemotingCommand(RequestCode.PULL_MESSAGE, 1, 0, None, pull, b"", "JAVA"))
    assert res is not None and res.code == ResponseCode.SUCCESS
    stats = decode_consume_stats(
        bytes(_call(broker, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "CGT", "topic": "TPS"}).body)
    )
    assert stats.consume_tps == pytest.approx(6 / 60)
    clock = broker.clock
    assert isinstance(clock, rmqlog.ManualClock)
    clock.advance(61_000)
    stats = decode_consume_stats(
        bytes(_call(broker, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "CGT", "topic": "TPS"}).body)
    )
    assert stats.consume_tps == 0.0


def test_consume_stats_refusals(broker: Broker) -> None:
    assert _call(broker, RequestCode.GET_CONSUME_STATS, {}).code == ResponseCode.SYSTEM_ERROR  # group required
    r = _call(broker, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "a b"})
    assert r.code == ResponseCode.SYSTEM_ERROR
    # a topic the broker does not know is left out, as Java does
    r = _call(broker, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G", "topic": "NOPE"})
    assert r.code == ResponseCode.SUCCESS and decode_consume_stats(bytes(r.body)).offset_table == {}


# ------------------------------------------------------------------------------------ 203


def test_consumer_connections_of_a_live_group(broker: Broker, store: rmqlog.MessageStore) -> None:
    store.create_topic("CC", 1)
    peer = FakePeer("10.0.0.1:40000")
    _heartbeat(broker, peer, "CGC", "CC")
    r = _call(broker, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "CGC"})
    assert r.code == ResponseCode.SUCCESS
    body = decode_consumer_connection(bytes(r.body))
    assert body["connectionSet"] == [
        {"clientAddr": "10.0.0.1:40000", "clientId": "10.0.0.1@1", "language": "JAVA", "version": 435}
    ]
    assert (body["consumeType"], body["messageModel"], body["consumeFromWhere"]) == (
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_LAST_OFFSET",
    )
    assert body["subscriptionTable"]["CC"]["subVersion"] == 5
    assert list(json.loads(bytes(r.body))) == sorted(json.loads(bytes(r.body)))  # fastjson's field order


def test_consumer_connections_of_a_group_not_online(broker: Broker) -> None:
    r = _call(broker, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "GONE"})
    assert (r.code, r.remark) == (ResponseCode.CONSUMER_NOT_ONLINE, "the consumer group[GONE] not online")
    assert (
        _call(broker, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "../g"}).code
        == ResponseCode.SYSTEM_ERROR
    )


# ------------------------------------------------------------------------------------ 215


def test_delete_topic_removes_config_offsets_and_the_route_entry(broker: Broker, store: rmqlog.MessageStore) -> None:
    store.create_topic("DEL", 2)
    _send(broker, "DEL", 3)
    broker.consumer_offsets.commit("CGD", "DEL", 0, 2)
    broker.consumer_offsets.commit("CGD", "KEEP", 0, 1)
    broker.state.persist_all()
    version = broker.topics.data_version["counter"]
    r = _call(broker, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "DEL"})
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert "DEL" not in broker.topics.all() and broker.topics.get("DEL") is None
    assert broker.topics.data_version["counter"] > version  # registered again at the next round
    assert store.committed_offset("CGD", "DEL", 0) == -1 and store.committed_offset("CGD", "KEEP", 0) == 1
    assert broker.consumer_offsets.query("CGD", "DEL", 0) == -1 and broker.consumer_offsets.query("CGD", "KEEP", 0) == 1
    assert "DEL" not in json.loads((store.paths.config_dir / "topics.json").read_text())["topicConfigTable"]
    # pulls and stats see no topic; a send through TBW102 creates it again
    assert _call(broker, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "DEL"}).code == ResponseCode.TOPIC_NOT_EXIST
    _send(broker, "DEL", 1)
    assert broker.topics.get("DEL") is not None
    # deleting a topic the broker does not know is SUCCESS, as Java's deleteTopicConfig
    assert _call(broker, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "NEVER"}).code == ResponseCode.SUCCESS


def test_a_deleted_topic_stays_deleted_across_a_broker_restart(tmp_path: Path) -> None:
    """Its messages go with it (RocketMQ's ``cleanUnusedTopic``): a broker started again on the
    store lists no such topic, and a send makes it again with only the new messages."""
    root = tmp_path / "restart"
    with rmqlog.MessageStore.open(root, small_store_config()) as store:
        broker = make_broker(store, clock=rmqlog.ManualClock(T0))
        _send(broker, "GONE", 3)
        assert _call(broker, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "GONE"}).code == ResponseCode.SUCCESS
    with rmqlog.MessageStore.open(root, small_store_config()) as store:
        broker = make_broker(store, clock=rmqlog.ManualClock(T0))
        listed = loads_fastjson(bytes(_call(broker, RequestCode.GET_ALL_TOPIC_CONFIG).body))["topicConfigTable"]
        assert "GONE" not in listed and "GONE" not in store.topics()
        assert _call(broker, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "GONE"}).code == ResponseCode.TOPIC_NOT_EXIST
        _send(broker, "GONE", 1)
        assert store.min_offset("GONE", 0) == 3 and store.read_queue("GONE", 0, 3, 4)["body"].to_pylist() == [b"m0"]


@pytest.mark.parametrize(
    ("topic", "remark"),
    [
        ("TBW102", "The topic[TBW102] is conflict with system topic."),
        ("SCHEDULE_TOPIC_XXXX", "conflict with system topic"),
        ("rmq_sys_x", "conflict with system topic"),
        ("DefaultCluster", "conflict with system topic"),
        ("../etc", "illegal characters"),
        ("", "blank"),
    ],
)
def test_delete_topic_refusals(broker: Broker, store: rmqlog.MessageStore, topic: str, remark: str) -> None:
    before = set(broker.topics.all())
    r = _call(broker, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
    assert r.code == ResponseCode.SYSTEM_ERROR and remark in (r.remark or ""), r.remark
    assert set(broker.topics.all()) == before


def test_a_slave_refuses_delete(store: rmqlog.MessageStore) -> None:
    slave = make_broker(store, broker_role="SLAVE", broker_id=1)
    store.create_topic("S1", 1)
    r = _call(slave, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "S1"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "slave" in (r.remark or "")
    assert "S1" in store.topics()


# ------------------------------------------------------------------------------- 25 / 26


def test_broker_config_is_properties_text_with_a_version(broker: Broker) -> None:
    r = _call(broker, RequestCode.GET_BROKER_CONFIG)
    assert r.code == ResponseCode.SUCCESS
    text = bytes(r.body).decode()
    assert all("=" in line for line in text.splitlines()) and text.endswith("\n")
    props = javaproperties.loads(text)
    assert props["brokerName"] == "broker-a" and props["brokerPermission"] == "6"
    assert props["flushDiskType"] in ("ASYNC_FLUSH", "SYNC_FLUSH") and props["brokerIP1"] == "127.0.0.1"
    assert json.loads(r.ext_fields["version"])["counter"] == 0


def test_update_broker_config_takes_effect_and_moves_the_version(broker: Broker, store: rmqlog.MessageStore) -> None:
    r = _call(
        broker,
        RequestCode.UPDATE_BROKER_CONFIG,
        body=b"brokerPermission=4\nmaxTransferCountOnMessageInMemory=64\nlongPollingEnable=false\n",
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert broker.config.broker_permission == 4 and broker.config.max_transfer_count_on_message_in_memory == 64
    assert broker.config.long_polling_enable is False
    props = javaproperties.loads(bytes(_call(broker, RequestCode.GET_BROKER_CONFIG).body).decode())
    assert props["brokerPermission"] == "4"
    assert json.loads(_call(broker, RequestCode.GET_BROKER_CONFIG).ext_fields["version"])["counter"] == 1
    # the send path reads the new perm: an ordered topic on a broker without the write bit refuses
    assert (
        _call(
            broker,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": "ORD",
                "defaultTopic": "TBW102",
                "readQueueNums": 1,
                "writeQueueNums": 1,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": True,
            },
        ).code
        == ResponseCode.SUCCESS
    )
    (s,) = run(broker, FakePeer(), send_request(send_header("ORD"), b"x"))
    assert s is not None and s.code == ResponseCode.NO_PERMISSION


@pytest.mark.parametrize(
    ("body", "code", "remark"),
    [
        (b"brokerConfigPath=/tmp/x\n", ResponseCode.NO_PERMISSION, "Can not update config in black list."),
        (b"rocketmqHome=/\n", ResponseCode.NO_PERMISSION, "black list"),
        (b"listenPort=1\n", ResponseCode.NO_PERMISSION, "'listenPort' is read at start only"),
        (b"flushDiskType=SYNC_FLUSH\n", ResponseCode.NO_PERMISSION, "'flushDiskType' is read at start only"),
        (b"noSuchKey=1\n", ResponseCode.SYSTEM_ERROR, "unknown config key 'noSuchKey'"),
        (b"brokerPermission=many\n", ResponseCode.SYSTEM_ERROR, "not an integer"),
        (b"brokerPermission=9\n", ResponseCode.SYSTEM_ERROR, "broker_permission must be a perm mask"),
        (b"longPollingEnable=yes\n", ResponseCode.SYSTEM_ERROR, "not a boolean"),
        (b"accessMessageInMemoryMaxRatio=101\n", ResponseCode.SYSTEM_ERROR, "percentage"),
        (b"traceOn=false\nlistenPort=1\n", ResponseCode.NO_PERMISSION, "listenPort"),  # all or nothing
    ],
)
def test_update_broker_config_refusals_change_nothing(broker: Broker, body: bytes, code: int, remark: str) -> None:
    before = broker.config
    r = _call(broker, RequestCode.UPDATE_BROKER_CONFIG, body=body)
    assert r.code == code and remark in (r.remark or ""), r.remark
    assert broker.config is before and broker.config_version["counter"] == 0


# --------------------------------------------------------------------------------- bodies


def test_fastjson_reader_takes_object_keys_bare_integers_and_standard_json() -> None:
    assert loads_fastjson(b'{"a":{1:2,"b":[1,2.5,null,true]}}') == {"a": {"1": 2, "b": [1, 2.5, None, True]}}
    pairs = loads_fastjson('{ {"topic":"T","brokerName":"b","queueId":3} : {"x":1} }')
    assert list(pairs) == [({"topic": "T", "brokerName": "b", "queueId": 3}, {"x": 1})]
    for bad in (b"{", b'{"a":1,}', b"{x:1}", b'{"a":1} x'):
        with pytest.raises(Exception, match="fastjson|after"):
            loads_fastjson(bad)


_VALUES = st.one_of(
    st.text(max_size=12),
    st.integers(-3, 2**40),
    st.booleans(),
    st.none(),
    st.sampled_from(["T", "TBW102", "../x", "%RETRY%G", " ", "G", "brokerPermission"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    code=st.sampled_from(
        [
            RequestCode.LOCK_BATCH_MQ,
            RequestCode.UNLOCK_BATCH_MQ,
            RequestCode.UPDATE_BROKER_CONFIG,
            RequestCode.GET_BROKER_CONFIG,
            RequestCode.GET_TOPIC_STATS_INFO,
            RequestCode.GET_CONSUMER_CONNECTION_LIST,
            RequestCode.GET_CONSUME_STATS,
            RequestCode.DELETE_TOPIC_IN_BROKER,
        ]
    ),
    ext=st.dictionaries(st.sampled_from(["topic", "consumerGroup", "clientId"]), _VALUES, max_size=3),
    body=st.one_of(
        st.binary(max_size=80),
        st.text(max_size=80).map(str.encode),
        st.builds(
            lambda g, c, m: json.dumps({"consumerGroup": g, "clientId": c, "mqSet": m}).encode(),
            _VALUES,
            _VALUES,
            st.lists(st.dictionaries(st.sampled_from(["topic", "brokerName", "queueId"]), _VALUES), max_size=3),
        ),
    ),
)
def test_any_admin_or_lock_request_is_answered_never_raised(
    broker: Broker, code: int, ext: dict[str, Any], body: bytes
) -> None:
    """Whatever the fields and body, each of these codes answers a code (the dispatch table
    turns field errors into SYSTEM_ERROR); no exception escapes a handler."""
    config = broker.config
    r = _call(broker, code, ext, body)
    assert isinstance(r.code, int)
    broker.config = config  # (a body that was a valid update changed it: the next example starts afresh)
