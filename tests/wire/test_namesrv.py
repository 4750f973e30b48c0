"""The name server's core (rmqnet.namesrv) and the registration bodies (rmqnet.remoting.register),
driven request by request with a ManualClock: registration, routes, expiry, unregistration,
cluster info, the topic list, and the refusals of bad headers and bodies. Bodies are laid out
by hand from RocketMQ 4.9.8's ``RegisterBrokerBody`` (fastjson JSON, and the compressed form's
int32-framed zlib stream), not by our encoder."""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqlog import ManualClock
from rmqnet.namesrv import BROKER_CHANNEL_EXPIRED_TIME, BrokerExpiry, NameServer
from rmqnet.remoting import FLAG_ONEWAY, FieldError, RemotingCommand, RequestCode, ResponseCode
from rmqnet.remoting import register as reg
from rmqnet.remoting.register import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    TopicConfigData,
    body_crc32,
    decode_topic_list,
)
from rmqnet.remoting.route import TopicRouteData

ADDR_A, ADDR_B, ADDR_A1 = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10931"
TIP = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def _topic_json(name: str, queues: int = 4, perm: int = 6) -> dict[str, Any]:
    # fastjson writes a TopicConfig's getters in name order
    return {
        "order": False,
        "perm": perm,
        "readQueueNums": queues,
        "topicFilterType": "SINGLE_TAG",
        "topicName": name,
        "topicSysFlag": 0,
        "writeQueueNums": queues,
    }


def _java_body(topics: dict[str, dict[str, Any]], version: tuple[int, int] = (1700000000000, 0)) -> bytes:
    """A RegisterBrokerBody as Java's fastjson writes it (uncompressed)."""
    return json.dumps(
        {
            "filterServerList": [],
            "topicConfigSerializeWrapper": {
                "dataVersion": {"counter": version[1], "timestamp": version[0]},
                "topicConfigTable": topics,
            },
        },
        separators=(",", ":"),
    ).encode()


def _java_compressed(version: bytes, lines: list[bytes], filters: bytes = b"[]") -> bytes:
    """``RegisterBrokerBody.encode(true)``: int32-framed parts in one zlib stream."""
    raw = struct.pack(">i", len(version)) + version + struct.pack(">i", len(lines))
    raw += b"".join(struct.pack(">i", len(x)) + x for x in lines)
    raw += struct.pack(">i", len(filters)) + filters
    return zlib.compress(raw, 9)


def _register(
    ns: NameServer,
    now_ms: int,
    *,
    name: str = "broker-a",
    addr: str = ADDR_A,
    broker_id: int = 0,
    cluster: str = "DefaultCluster",
    body: bytes | None = None,
    compressed: bool = False,
    crc: int | None = None,
    conn: object = None,
    opaque: int = 1,
) -> RemotingCommand:
    body = _java_body({"T1": _topic_json("T1")}) if body is None else body
    ext = {
        "brokerName": name,
        "brokerAddr": addr,
        "clusterName": cluster,
        "haServerAddr": addr.replace("0911", "0912"),
        "brokerId": str(broker_id),
        "compressed": "true" if compressed else "false",
        "bodyCrc32": str(body_crc32(body) if crc is None else crc),
    }
    res = ns.handle(RemotingCommand(RequestCode.REGISTER_BROKER, opaque, ext_fields=ext, body=body), now_ms, conn)
    assert res is not None and res.opaque == opaque and res.is_response
    return res


def _route(ns: NameServer, topic: str, now_ms: int = 0) -> RemotingCommand:
    res = ns.handle(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, 7, ext_fields={"topic": topic}), now_ms)
    assert res is not None
    return res


def _route_json(ns: NameServer, topic: str) -> dict[str, Any]:
    res = _route(ns, topic)
    assert res.code == ResponseCode.SUCCESS, res.remark
    return json.loads(res.body_bytes())


def test_a_registered_topic_is_routed_in_standard_json() -> None:
    ns = NameServer()
    res = _register(ns, 1000)
    assert (res.code, res.remark, res.ext_fields) == (ResponseCode.SUCCESS, None, {})
    route = _route_json(ns, "T1")
    assert route == {
        "orderTopicConf": None,
        "queueDatas": [
            {"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSynFlag": 0}
        ],
        "brokerDatas": [{"cluster": "DefaultCluster", "brokerName": "broker-a", "brokerAddrs": {"0": ADDR_A}}],
        "filterServerTable": {},
    }
    assert TopicRouteData.decode(_route(ns, "T1").body_bytes()).broker_datas[0].master_addr() == ADDR_A


def test_an_unknown_topic_is_topic_not_exist_with_javas_remark() -> None:
    ns = NameServer()
    _register(ns, 0)
    res = _route(ns, "nope")
    assert (res.code, res.remark, res.body_bytes()) == (
        ResponseCode.TOPIC_NOT_EXIST,
        "No topic route info in name server for the topic: nope" + TIP,
        b"",
    )


def test_tbw102_and_retry_topics_are_routed_only_when_a_broker_registered_them() -> None:
    ns = NameServer()
    _register(ns, 0, body=_java_body({"T1": _topic_json("T1")}))
    assert _route(ns, "TBW102").code == ResponseCode.TOPIC_NOT_EXIST
    assert _route(ns, "%RETRY%G1").code == ResponseCode.TOPIC_NOT_EXIST
    body = _java_body(
        {"T1": _topic_json("T1"), "TBW102": _topic_json("TBW102", 8, 7), "%RETRY%G1": _topic_json("%RETRY%G1", 1)},
        version=(1700000000000, 1),
    )
    _register(ns, 10, body=body)
    assert _route_json(ns, "TBW102")["queueDatas"][0]["perm"] == 7
    assert _route_json(ns, "%RETRY%G1")["queueDatas"][0]["readQueueNums"] == 1


def test_two_brokers_of_a_topic_are_both_in_its_route_and_the_cluster_info() -> None:
    ns = NameServer()
    _register(
        ns, 0, name="broker-b", addr=ADDR_B, body=_java_body({"T1": _topic_json("T1", 2), "T2": _topic_json("T2")})
    )
    _register(ns, 0)
    route = _route_json(ns, "T1")
    assert [q["brokerName"] for q in route["queueDatas"]] == ["broker-a", "broker-b"]
    assert [q["readQueueNums"] for q in route["queueDatas"]] == [4, 2]
    assert [b["brokerAddrs"] for b in route["brokerDatas"]] == [{"0": ADDR_A}, {"0": ADDR_B}]
    assert [b["brokerName"] for b in _route_json(ns, "T2")["brokerDatas"]] == ["broker-b"]
    res = ns.handle(RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO, 3), 0)
    assert res is not None and res.code == ResponseCode.SUCCESS
    assert json.loads(res.body_bytes()) == {
        "brokerAddrTable": {
            "broker-a": {"cluster": "DefaultCluster", "brokerName": "broker-a", "brokerAddrs": {"0": ADDR_A}},
            "broker-b": {"cluster": "DefaultCluster", "brokerName": "broker-b", "brokerAddrs": {"0": ADDR_B}},
        },
        "clusterAddrTable": {"DefaultCluster": ["broker-a", "broker-b"]},
    }
    info = ClusterInfo.decode(res.body_bytes())
    assert info.broker_addr_table["broker-b"].broker_addrs == {0: ADDR_B}
    res = ns.handle(RemotingCommand(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 4), 0)
    assert res is not None and json.loads(res.body_bytes()) == {"topicList": ["T1", "T2"]}
    assert decode_topic_list(res.body_bytes()) == ["T1", "T2"]


def test_a_slave_learns_its_master_and_does_not_change_the_topics() -> None:
    ns = NameServer()
    res = _register(ns, 0, addr=ADDR_A1, broker_id=1, body=_java_body({"S": _topic_json("S")}))
    assert res.code == ResponseCode.SUCCESS and res.ext_fields == {}  # no master yet
    assert _route(ns, "S").code == ResponseCode.TOPIC_NOT_EXIST  # a slave's topics are not read
    _register(ns, 0)
    res = _register(ns, 5, addr=ADDR_A1, broker_id=1, body=_java_body({"S": _topic_json("S")}))
    assert res.ext_fields == {"haServerAddr": "127.0.0.1:10912", "masterAddr": ADDR_A}
    assert _route_json(ns, "T1")["brokerDatas"][0]["brokerAddrs"] == {"0": ADDR_A, "1": ADDR_A1}


def test_topic_configs_are_reread_only_when_the_data_version_changes() -> None:
    ns = NameServer()
    _register(ns, 0, body=_java_body({"T1": _topic_json("T1", 4)}, version=(5, 1)))
    _register(ns, 1, body=_java_body({"T1": _topic_json("T1", 8)}, version=(5, 1)))
    assert _route_json(ns, "T1")["queueDatas"][0]["readQueueNums"] == 4  # same version: Java skips the table
    _register(ns, 2, body=_java_body({"T1": _topic_json("T1", 8)}, version=(6, 2)))
    assert _route_json(ns, "T1")["queueDatas"][0]["readQueueNums"] == 8


def test_a_topic_the_master_no_longer_lists_leaves_its_part_of_the_route() -> None:
    """A topic deleted on a broker (DELETE_TOPIC_IN_BROKER) leaves the route at the broker's
    next registration (RocketMQ 5's rule); another broker's part stays."""
    ns = NameServer()
    _register(ns, 0, name="broker-b", addr=ADDR_B, body=_java_body({"T1": _topic_json("T1")}))
    _register(ns, 0, body=_java_body({"T1": _topic_json("T1"), "T2": _topic_json("T2")}, version=(5, 1)))
    _register(ns, 1, body=_java_body({"T1": _topic_json("T1")}, version=(5, 1)))  # same version: not re-read
    assert _route(ns, "T2").code == ResponseCode.SUCCESS
    _register(ns, 2, body=_java_body({}, version=(6, 2)))
    assert _route(ns, "T2").code == ResponseCode.TOPIC_NOT_EXIST
    assert [q["brokerName"] for q in _route_json(ns, "T1")["queueDatas"]] == ["broker-b"]


def test_delete_topic_in_namesrv_drops_the_route_or_a_clusters_part_of_it() -> None:
    """DELETE_TOPIC_IN_NAMESRV (216), ``mqadmin deleteTopic``'s second step."""
    ns = NameServer()
    _register(ns, 0, name="broker-b", addr=ADDR_B, cluster="Other", body=_java_body({"T1": _topic_json("T1")}))
    _register(ns, 0, body=_java_body({"T1": _topic_json("T1"), "T2": _topic_json("T2")}))

    def delete(ext: dict[str, Any]) -> RemotingCommand:
        res = ns.handle(RemotingCommand(RequestCode.DELETE_TOPIC_IN_NAMESRV, 9, ext_fields=ext), 0)
        assert res is not None
        return res

    assert delete({"topic": "T1", "clusterName": "DefaultCluster"}).code == ResponseCode.SUCCESS
    assert [q["brokerName"] for q in _route_json(ns, "T1")["queueDatas"]] == ["broker-b"]
    assert delete({"topic": "T2"}).code == ResponseCode.SUCCESS
    assert _route(ns, "T2").code == ResponseCode.TOPIC_NOT_EXIST
    assert delete({"topic": "NEVER"}).code == ResponseCode.SUCCESS  # Java's answer too
    assert delete({}).code == ResponseCode.SYSTEM_ERROR  # topic is @CFNotNull


def test_a_broker_expires_120_s_after_its_last_registration_with_its_topics() -> None:
    clock = ManualClock(1_700_000_000_000)
    ns = NameServer()
    expiry = BrokerExpiry(ns)
    conn_a, conn_b = object(), object()
    _register(ns, clock.wall_ms(), conn=conn_a, body=_java_body({"T1": _topic_json("T1"), "A": _topic_json("A")}))
    clock.advance(60_000)
    _register(ns, clock.wall_ms(), name="broker-b", addr=ADDR_B, conn=conn_b)
    clock.advance(BROKER_CHANNEL_EXPIRED_TIME - 60_000)
    assert expiry.run_once(clock.wall_ms()) == []  # exactly 120 s: still alive (Java: last + 120 s < now)
    clock.advance(1)
    assert expiry.run_once(clock.wall_ms()) == [(ADDR_A, conn_a)]
    assert _route(ns, "A").code == ResponseCode.TOPIC_NOT_EXIST
    assert [b["brokerName"] for b in _route_json(ns, "T1")["brokerDatas"]] == ["broker-b"]
    # a registration renews the lease
    clock.advance(59_000)
    _register(ns, clock.wall_ms(), name="broker-b", addr=ADDR_B, conn=conn_b)
    clock.advance(119_000)
    assert expiry.run_once(clock.wall_ms()) == []
    clock.advance(1_001)
    assert expiry.run_once(clock.wall_ms()) == [(ADDR_B, conn_b)]
    assert ns.routes.topics == {} and ns.routes.brokers == {} and ns.routes.clusters == {}


def test_a_closed_connection_drops_the_broker_registered_over_it() -> None:
    ns = NameServer()
    conn_a, conn_b = object(), object()
    _register(ns, 0, conn=conn_a, body=_java_body({"T1": _topic_json("T1"), "A": _topic_json("A")}))
    _register(ns, 0, name="broker-b", addr=ADDR_B, conn=conn_b)
    assert ns.connection_closed(object()) == []
    assert ns.connection_closed(conn_a) == [ADDR_A]
    assert _route(ns, "A").code == ResponseCode.TOPIC_NOT_EXIST
    assert [b["brokerName"] for b in _route_json(ns, "T1")["brokerDatas"]] == ["broker-b"]
    assert list(ns.routes.live) == [ADDR_B]


def test_unregister_drops_the_broker_and_the_topics_only_it_served() -> None:
    ns = NameServer()
    _register(ns, 0, body=_java_body({"T1": _topic_json("T1"), "A": _topic_json("A")}))
    _register(ns, 0, name="broker-b", addr=ADDR_B, cluster="Other")
    ext = {"brokerName": "broker-a", "brokerAddr": ADDR_A, "clusterName": "DefaultCluster", "brokerId": 0}
    res = ns.handle(RemotingCommand(RequestCode.UNREGISTER_BROKER, 9, ext_fields=ext), 0)
    assert res is not None and (res.code, res.opaque) == (ResponseCode.SUCCESS, 9)
    assert _route(ns, "A").code == ResponseCode.TOPIC_NOT_EXIST
    assert [b["brokerName"] for b in _route_json(ns, "T1")["brokerDatas"]] == ["broker-b"]
    assert ns.routes.cluster_info().cluster_addr_table == {"Other": ["broker-b"]}
    # unregistering again (or an unknown broker) is still SUCCESS, as in Java
    res = ns.handle(RemotingCommand(RequestCode.UNREGISTER_BROKER, 10, ext_fields=ext), 0)
    assert res is not None and res.code == ResponseCode.SUCCESS


def test_a_crc_mismatch_is_refused_as_java_does_and_changes_nothing() -> None:
    ns = NameServer()
    body = _java_body({"T1": _topic_json("T1")})
    res = _register(ns, 0, body=body, crc=body_crc32(body) ^ 1)
    assert (res.code, res.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    assert ns.routes.live == {} and _route(ns, "T1").code == ResponseCode.TOPIC_NOT_EXIST
    assert _register(ns, 0, body=body, crc=0).code == ResponseCode.SUCCESS  # 0: not checked (Java)


def test_the_crc_is_javas_with_the_sign_bit_cleared() -> None:
    # a body whose CRC-32 has the top bit set: the case where Java's & 0x7FFFFFFF matters
    body = next(b for i in range(256) if zlib.crc32(b := b"body " + bytes([i])) & 0x80000000)
    assert body_crc32(body) == zlib.crc32(body) - 0x80000000


def test_a_compressed_body_laid_out_as_java_writes_it_is_decoded() -> None:
    ns = NameServer()
    body = _java_compressed(
        b'{"counter":3,"timestamp":1700000000123}',
        [b"T1 4 4 6 SINGLE_TAG", b"%RETRY%G1 1 1 6 SINGLE_TAG", b"RO 8 2 4 MULTI_TAG"],
    )
    assert _register(ns, 0, body=body, compressed=True).code == ResponseCode.SUCCESS
    assert ns.routes.live[ADDR_A].data_version == DataVersion(1700000000123, 3)
    assert _route_json(ns, "RO")["queueDatas"] == [
        {"brokerName": "broker-a", "readQueueNums": 8, "writeQueueNums": 2, "perm": 4, "topicSynFlag": 0}
    ]
    assert _route_json(ns, "%RETRY%G1")["queueDatas"][0]["writeQueueNums"] == 1
    decoded = RegisterBrokerBody.decode(body, compressed=True)
    assert decoded.topics["RO"] == TopicConfigData("RO", 8, 2, 4, "MULTI_TAG")
    assert decoded.filter_server_list == []


@pytest.mark.parametrize("compressed", [False, True])
def test_our_encoding_reads_back_in_both_forms(compressed: bool) -> None:
    body = RegisterBrokerBody(
        {
            "T": TopicConfigData("T", 4, 4, 6, "SINGLE_TAG", 0, False),
            "U": TopicConfigData("U", 2, 1, 2, "MULTI_TAG", 0, False),
        },
        DataVersion(9, 4),
        ["f:1"],
    )
    assert RegisterBrokerBody.decode(body.encode(compressed), compressed) == body


def test_our_compressed_encoding_is_javas_layout() -> None:
    body = RegisterBrokerBody({"T": TopicConfigData("T", 4, 4, 6)}, DataVersion(9, 4))
    version = b'{"counter":4,"timestamp":9}'  # fastjson: fields in name order
    assert zlib.decompress(body.encode(compressed=True)) == (
        struct.pack(">i", len(version))
        + version
        + struct.pack(">i", 1)
        + struct.pack(">i", 18)
        + b"T 4 4 6 SINGLE_TAG"
        + struct.pack(">i", 2)
        + b"[]"
    )


def test_an_empty_body_registers_a_broker_without_topics() -> None:
    ns = NameServer()
    assert _register(ns, 0, body=b"").code == ResponseCode.SUCCESS
    assert ns.routes.live[ADDR_A].data_version == DataVersion(0, 0) and ns.routes.topics == {}
    assert ns.routes.cluster_info().broker_addr_table["broker-a"].broker_addrs == {0: ADDR_A}


BAD_BODIES = [
    (b"{not json", False, "is not a RegisterBrokerBody JSON"),
    (b"[1,2]", False, "is a JSON list, not a RegisterBrokerBody object"),
    (b'{"topicConfigSerializeWrapper":{"topicConfigTable":[]}}', False, "topicConfigTable is not an object"),
    (
        _java_body({"T": {**_topic_json("T"), "readQueueNums": "four"}}),
        False,
        "readQueueNums is 'four', not a Java int",
    ),
    (_java_body({"T": {**_topic_json("T"), "perm": 1 << 40}}), False, "perm is 1099511627776, not a Java int"),
    (_java_body({"T": {**_topic_json("T"), "topicFilterType": "SQL"}}), False, "topicFilterType is 'SQL'"),
    (_java_body({"T": {**_topic_json("T"), "topicName": ""}}), False, "topicName is '', not a non-empty string"),
    (_java_body({"T": 5}), False, "topic config 'T' is a int, not an object"),
    (b'{"filterServerList":{"a":1}}', False, "filterServerList is"),
    (b"\x00\x01 not zlib", True, "is not a zlib stream"),
    (zlib.compress(struct.pack(">i", 100) + b"{}"), True, "the data version of 100 bytes"),
    (
        zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1_000_000)),
        True,
        "1000000 topic configs cannot fit",
    ),
    (_java_compressed(b"{}", [b"T1 4 4 6"]), True, "has 4 fields, not 5"),
    (_java_compressed(b"{}", [b"T1 4 x 6 SINGLE_TAG"]), True, "is not an int"),
    (_java_compressed(b"{}", [b"T1 4 4 6 SINGLE_TAG"])[:-6] + b"\x00" * 6, True, "is not a zlib stream"),
    (_java_compressed(b"{}", [b"T1 4 4 6 SINGLE_TAG"], b"[]xx"), True, "is not a filter server list JSON"),
]


@pytest.mark.parametrize(("body", "compressed", "remark"), BAD_BODIES)
def test_a_malformed_body_is_system_error_naming_it_and_changes_nothing(
    body: bytes, compressed: bool, remark: str
) -> None:
    ns = NameServer()
    res = _register(ns, 0, body=body, compressed=compressed)
    assert res.code == ResponseCode.SYSTEM_ERROR
    assert res.remark is not None and res.remark.startswith("Failed to decode RegisterBrokerBody: ")
    assert remark in res.remark
    assert ns.routes.live == {} and ns.routes.brokers == {} and ns.routes.topics == {}


def test_a_compressed_body_that_inflates_past_the_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reg, "MAX_INFLATED", 1000)
    bomb = zlib.compress(b"\x00" * 100_000)
    with pytest.raises(FieldError, match="inflates to more than 1000 bytes"):
        RegisterBrokerBody.decode(bomb, compressed=True)


@pytest.mark.parametrize(
    ("code", "ext", "field"),
    [
        (
            RequestCode.REGISTER_BROKER,
            {"brokerAddr": ADDR_A, "clusterName": "c", "haServerAddr": "", "brokerId": 0},
            "brokerName",
        ),
        (
            RequestCode.REGISTER_BROKER,
            {"brokerName": "b", "brokerAddr": ADDR_A, "clusterName": "c", "haServerAddr": "", "brokerId": "zero"},
            "brokerId",
        ),
        (
            RequestCode.REGISTER_BROKER,
            {
                "brokerName": "b",
                "brokerAddr": ADDR_A,
                "clusterName": "c",
                "haServerAddr": "",
                "brokerId": 0,
                "compressed": "maybe",
            },
            "compressed",
        ),
        (RequestCode.UNREGISTER_BROKER, {"brokerName": "b", "brokerAddr": ADDR_A, "clusterName": "c"}, "brokerId"),
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, {}, "topic"),
        (RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG"}, "key"),
    ],
)
def test_a_missing_or_mistyped_field_is_system_error_naming_it(code: int, ext: dict[str, Any], field: str) -> None:
    ns = NameServer()
    res = ns.handle(RemotingCommand(code, 5, ext_fields=ext), 0)
    assert res is not None and (res.code, res.opaque) == (ResponseCode.SYSTEM_ERROR, 5)
    assert res.remark is not None and repr(field) in res.remark
    assert ns.routes.live == {}


def test_extfields_as_json_numbers_and_booleans_are_read() -> None:
    ns = NameServer()
    body = _java_body({"T1": _topic_json("T1")})
    ext = {
        "brokerName": "broker-a",
        "brokerAddr": ADDR_A,
        "clusterName": "c",
        "haServerAddr": "",
        "brokerId": 0,
        "compressed": False,
        "bodyCrc32": body_crc32(body),
        "AccessKey": "ignored",
    }
    res = ns.handle(RemotingCommand(RequestCode.REGISTER_BROKER, 1, ext_fields=ext, body=body), 0)
    assert res is not None and res.code == ResponseCode.SUCCESS
    assert _route(ns, "T1").code == ResponseCode.SUCCESS


def test_get_kv_config_is_query_not_found_as_java_answers_an_absent_key() -> None:
    ns = NameServer()
    res = ns.handle(
        RemotingCommand(RequestCode.GET_KV_CONFIG, 2, ext_fields={"namespace": "ORDER_TOPIC_CONFIG", "key": "T1"}), 0
    )
    assert res is not None and (res.code, res.remark) == (
        ResponseCode.QUERY_NOT_FOUND,
        "No config item, Namespace: ORDER_TOPIC_CONFIG Key: T1",
    )


def test_an_unknown_code_is_not_supported_and_a_oneway_request_gets_no_answer() -> None:
    ns = NameServer()
    res = ns.handle(RemotingCommand(34, 11), 0)
    assert res is not None and (res.code, res.remark) == (
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        " request type 34 not supported",
    )
    body = _java_body({"T1": _topic_json("T1")})
    ext = {"brokerName": "broker-a", "brokerAddr": ADDR_A, "clusterName": "c", "haServerAddr": "", "brokerId": "0"}
    oneway = RemotingCommand(RequestCode.REGISTER_BROKER, 12, FLAG_ONEWAY, ext_fields=ext, body=body)
    assert ns.handle(oneway, 0) is None
    assert _route(ns, "T1").code == ResponseCode.SUCCESS  # processed all the same
    assert ns.handle(RemotingCommand(999, 13, FLAG_ONEWAY), 0) is None


def test_json_nested_too_deep_is_refused_not_raised() -> None:
    ns = NameServer()
    res = _register(ns, 0, body=b"[" * 100_000)
    assert res.code == ResponseCode.SYSTEM_ERROR and res.remark is not None and "nested too deep" in res.remark


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=300), compressed=st.booleans(), wrap=st.booleans())
def test_any_body_is_registered_or_refused_with_a_field_error(body: bytes, compressed: bool, wrap: bool) -> None:
    data = zlib.compress(body) if wrap else body
    try:
        RegisterBrokerBody.decode(data, compressed)
    except FieldError as exc:
        assert exc.field == "body"


_ext_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(
    code=st.sampled_from([101, 103, 104, 105, 106, 206, 0, -1, 1 << 20]),
    ext=st.dictionaries(
        st.sampled_from(
            [
                "brokerName",
                "brokerAddr",
                "clusterName",
                "haServerAddr",
                "brokerId",
                "compressed",
                "bodyCrc32",
                "topic",
                "namespace",
                "key",
            ]
        ),
        _ext_values,
    ),
    body=st.binary(max_size=64),
)
def test_any_request_is_answered_with_a_code_never_an_exception(code: int, ext: dict[str, Any], body: bytes) -> None:
    res = NameServer().handle(RemotingCommand(code, 3, ext_fields=ext, body=body), 0)
    assert res is not None and res.opaque == 3 and res.is_response
    assert res.code in {c.value for c in ResponseCode}


def test_a_broker_that_reregistered_over_a_new_connection_survives_the_old_ones_close() -> None:
    ns = NameServer()
    old, new = object(), object()
    _register(ns, 0, conn=old)
    _register(ns, 1, conn=new)  # the broker reconnected
    assert ns.connection_closed(old) == []
    assert _route(ns, "T1").code == ResponseCode.SUCCESS
    assert ns.connection_closed(new) == [ADDR_A]
    assert _route(ns, "T1").code == ResponseCode.TOPIC_NOT_EXIST
