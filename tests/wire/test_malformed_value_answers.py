"""Malformed values get typed answers, driven by raw frames over a
socket to a broker and a name server running in this process, the log captured: every answer
carries RocketMQ's code (SYSTEM_ERROR, as Java's ``NettyRemotingAbstract`` answers a request
whose decoding throws) and a remark naming the field or the body, nothing changes, and the log
holds no traceback and no error.

- nested bodies: a HeartbeatData (with and without ACL: its check reads the body first), a lock
  batch, a RegisterBrokerBody nested 100,000 deep (``json`` raised RecursionError);
- lone surrogates (``"\\ud800"`` as a JSON escape, which ``json`` decodes to a ``str`` no UTF-8
  can hold): a send's properties, the topic of 17 and 215, a SQL92 literal, and the values
  echoed in remarks (11, 36, 38, the name server's 105); a RegisterBrokerBody's topic;
- the answer path: a remark that cannot encode is escaped, never an exception.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rmqlog
from rmqnet.broker import launch
from rmqnet.broker.acl import ACL_EXCEPTION
from rmqnet.broker.config import BrokerConfig
from rmqnet.namesrv.process import NameServerProcess
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode, decode, encode_bytes
from rmqnet.remoting.frame import FrameDecoder
from rmqnet.remoting.register import RegisterBrokerHeader

from .broker_helpers import send_header
from .brokerpull_support import HANG_GUARD_S

LONE = "\ud800"
DEEP = 100_000
_II = struct.Struct(">iI")
ACL_HOME = """
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""


def _serve(tmp_path: Path, acl: bool) -> Iterator[dict[str, Any]]:
    root = tmp_path / "root"
    with rmqlog.MessageStore.open(root) as s:
        s.create_topic("T", 4)
    ready: dict[str, Any] = {}
    started, stop = threading.Event(), threading.Event()

    def serve() -> None:
        async def main() -> None:
            ns = NameServerProcess("127.0.0.1", 0)
            await ns.start()
            config = BrokerConfig(broker_name="broker-a", listen_port=0, acl_enable=acl, enable_property_filter=True)
            proc = launch.BrokerProcess(root, config)
            try:
                ready["broker"] = await proc.start()
                ready.update(namesrv=ns.address, proc=proc, ns=ns)
                started.set()
                await asyncio.get_running_loop().run_in_executor(None, stop.wait)
            finally:
                proc.request_stop()
                await proc.wait_stopped(grace_s=1.0)
                await ns.stop()

        try:
            asyncio.run(main())
        finally:
            started.set()

    thread = threading.Thread(target=serve, name="typed-values-servers")
    thread.start()
    assert started.wait(HANG_GUARD_S) and "proc" in ready, "the servers did not start"
    try:
        yield ready
    finally:
        stop.set()
        thread.join(HANG_GUARD_S)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[dict[str, Any]]:
    yield from _serve(tmp_path, acl=False)


@pytest.fixture
def acl_servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    home = tmp_path / "rmqhome"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(ACL_HOME)
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    yield from _serve(tmp_path, acl=True)


def raw_call(
    addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes = b"", opaque: int = 7
) -> tuple[dict[str, Any], bytes]:
    """One request as raw bytes: a JSON header written by ``json.dumps`` (a lone surrogate
    becomes the escape ``\\ud800``, as any JSON writer puts it), the answer's header object and
    body as read off the socket."""
    header = json.dumps(
        {
            "code": code,
            "language": "JAVA",
            "version": 435,
            "opaque": opaque,
            "flag": 0,
            "extFields": ext or {},
            "serializeTypeCurrentRPC": "JSON",
        }
    ).encode()
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=HANG_GUARD_S) as sock:
        sock.sendall(_II.pack(4 + len(header) + len(body), len(header)) + header + body)
        head = _read(sock, 8)
        length, word = _II.unpack(head)
        rest = _read(sock, length - 4)
    hlen = word & 0xFFFFFF
    obj = json.loads(rest[:hlen])  # (the answer must be JSON a reader takes)
    assert obj["opaque"] == opaque
    return obj, rest[hlen:]


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, f"the server closed the connection after {len(out)} of {n} bytes"
        out += chunk
    return out


def typed(answer: dict[str, Any], *names: str) -> str:
    """The answer is SYSTEM_ERROR with a remark naming each of ``names``, and the remark is
    text (no lone surrogate, no exception's class name as its start); returns the remark."""
    remark = answer.get("remark") or ""
    assert answer["code"] == ResponseCode.SYSTEM_ERROR, answer
    for name in names:
        assert name in remark, remark
    remark.encode("utf-8")  # no lone surrogate came back
    assert not remark.startswith(("RecursionError", "UnicodeEncodeError", "the answer does not encode")), remark
    return remark


def clean_log(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, "\n".join(f"{r.levelname} {r.getMessage()}" for r in bad)
    assert "Traceback" not in caplog.text


def nested(what: bytes = b"[") -> bytes:
    return what * DEEP


# ---- nested bodies ----------------------------------------------------------------------


def test_a_heartbeat_nested_deep_is_a_typed_answer(servers: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    body = (
        b'{"clientID":"c1","consumerDataSet":[{"groupName":"G","subscriptionDataSet":' + nested() + b"]" * DEEP + b"}]}"
    )
    answer, _ = raw_call(servers["broker"], RequestCode.HEART_BEAT, {}, body)
    assert "nested" in typed(answer, "HeartbeatData")
    assert servers["proc"].broker.consumers.consumer_ids("G") == []
    clean_log(caplog)


def test_a_heartbeat_nested_deep_is_refused_by_the_acl_check_typed(
    acl_servers: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    from rmqnet.remoting.acl_sign import sign

    req = RemotingCommand(RequestCode.HEART_BEAT, 7, 0, None, {}, nested(b'{"a":'), "JAVA")
    req = sign(req, "RocketMQ", "12345678")
    answer, _ = raw_call(acl_servers["broker"], RequestCode.HEART_BEAT, req.ext_fields, bytes(req.body_bytes()))
    remark = typed(answer, "HeartbeatData", "nested")
    assert remark.startswith(ACL_EXCEPTION)
    clean_log(caplog)


@pytest.mark.parametrize("code", [RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ])
def test_a_lock_body_nested_deep_is_a_typed_answer(
    servers: dict[str, Any], caplog: pytest.LogCaptureFixture, code: int
) -> None:
    body = b'{"consumerGroup":"G","clientId":"c","mqSet":' + nested() + b"}"
    answer, _ = raw_call(servers["broker"], code, {}, body)
    assert "nested" in typed(answer, "LockBatchRequestBody")
    clean_log(caplog)


def _register_ext(name: str = "broker-x") -> dict[str, Any]:
    return RegisterBrokerHeader(
        broker_name=name,
        broker_addr="127.0.0.1:1",
        cluster_name="C",
        ha_server_addr="",
        broker_id=0,
        compressed=False,
        body_crc32=0,
    ).to_ext()


def test_a_register_broker_body_nested_deep_is_a_typed_answer(
    servers: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    body = b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":' + nested(b'{"a":') + b"}}}"
    answer, _ = raw_call(servers["namesrv"], RequestCode.REGISTER_BROKER, _register_ext(), body)
    assert "nested" in typed(answer, "RegisterBrokerBody")
    assert "broker-x" not in servers["ns"].server.routes.cluster_info().encode().decode()
    clean_log(caplog)


def test_a_register_broker_body_with_a_lone_surrogate_is_a_typed_answer(
    servers: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # it was registered, and every later topic list (206) and cluster info answer failed to encode
    wrapper = {
        "topicConfigSerializeWrapper": {
            "topicConfigTable": {
                f"T{LONE}": {"topicName": f"T{LONE}", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}
            },
            "dataVersion": {"timestamp": 1, "counter": 1},
        },
        "filterServerList": [],
    }
    answer, _ = raw_call(servers["namesrv"], RequestCode.REGISTER_BROKER, _register_ext(), json.dumps(wrapper).encode())
    assert "lone surrogate" in typed(answer, "RegisterBrokerBody")
    listed, body = raw_call(servers["namesrv"], RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert listed["code"] == ResponseCode.SUCCESS and "T\\ud800" not in body.decode()
    clean_log(caplog)


# ---- lone surrogates in the header's strings --------------------------------------------


def test_a_lone_surrogate_in_a_sends_properties_is_refused_typed(
    servers: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    ext = send_header("T", props=f"KEYS\x01k{LONE}\x02").to_ext(True)
    answer, _ = raw_call(servers["broker"], RequestCode.SEND_MESSAGE_V2, ext, b"hello")
    assert "lone surrogate" in typed(answer, "'i'")
    assert servers["proc"].store.max_offset("T", 0) == 0  # nothing stored
    clean_log(caplog)


@pytest.mark.parametrize("code", [RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.DELETE_TOPIC_IN_BROKER])
def test_a_lone_surrogate_in_a_topic_of_17_and_215_is_refused_typed(
    servers: dict[str, Any], caplog: pytest.LogCaptureFixture, code: int
) -> None:
    ext = {
        "topic": f"A{LONE}",
        "defaultTopic": "TBW102",
        "readQueueNums": 4,
        "writeQueueNums": 4,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }
    answer, _ = raw_call(servers["broker"], code, ext)
    typed(answer, "'topic'", "lone surrogate")
    assert servers["proc"].broker.topics.get(f"A{LONE}") is None
    clean_log(caplog)


def test_a_lone_surrogate_in_a_sql92_literal_is_refused_typed(
    servers: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    sent, _ = raw_call(
        servers["broker"], RequestCode.SEND_MESSAGE_V2, send_header("T", props="a\x01x\x02").to_ext(True), b"m"
    )
    assert sent["code"] == ResponseCode.SUCCESS
    # the subscription of the request itself (sysFlag 4), held until the message is dispatched (2)
    ext = {
        "consumerGroup": "G",
        "topic": "T",
        "queueId": 0,
        "queueOffset": 0,
        "maxMsgNums": 32,
        "sysFlag": 6,
        "commitOffset": 0,
        "suspendTimeoutMillis": 5000,
        "subscription": f"a = 'x{LONE}'",
        "subVersion": 1,
        "expressionType": "SQL92",
    }
    answer, _ = raw_call(servers["broker"], RequestCode.PULL_MESSAGE, ext)
    typed(answer, "'subscription'", "lone surrogate")
    clean_log(caplog)


ECHOED = [
    (
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": f"N{LONE}",
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 32,
            "sysFlag": 2,
            "commitOffset": 0,
            "suspendTimeoutMillis": 0,
            "subVersion": 1,
        },
        "'topic'",
    ),
    (
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {"offset": 0, "group": f"G{LONE}", "delayLevel": 0, "originMsgId": "x", "originTopic": "T"},
        "'group'",
    ),
    (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": f"G{LONE}"}, "'consumerGroup'"),
]


@pytest.mark.parametrize(("code", "ext", "field"), ECHOED, ids=["11", "36", "38"])
def test_a_lone_surrogate_a_remark_would_echo_is_refused_typed(
    servers: dict[str, Any], caplog: pytest.LogCaptureFixture, code: int, ext: dict[str, Any], field: str
) -> None:
    answer, _ = raw_call(servers["broker"], code, ext)
    typed(answer, field, "lone surrogate")
    clean_log(caplog)


def test_a_lone_surrogate_in_a_route_query_is_refused_typed(
    servers: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    answer, _ = raw_call(servers["namesrv"], RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": f"T{LONE}"})
    typed(answer, "'topic'", "lone surrogate")
    clean_log(caplog)


def test_a_lone_surrogate_in_a_heartbeat_body_is_refused_typed(
    servers: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # registered, the client id came back in 38's body, which did not encode
    body = json.dumps(
        {
            "clientID": f"c{LONE}",
            "producerDataSet": [],
            "consumerDataSet": [{"groupName": "G", "subscriptionDataSet": [{"topic": "T", "subString": "*"}]}],
        }
    ).encode()
    answer, _ = raw_call(servers["broker"], RequestCode.HEART_BEAT, {}, body)
    typed(answer, "HeartbeatData", "lone surrogate")
    listed, _ = raw_call(servers["broker"], RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
    assert listed["code"] != ResponseCode.SUCCESS  # nobody registered
    clean_log(caplog)


def test_a_valid_surrogate_pair_is_text() -> None:
    # "\ud83d\ude00" is one character (U+1F600): read as such, never refused
    header = json.dumps({"code": 38, "opaque": 1, "flag": 0, "extFields": {"consumerGroup": "G\U0001f600"}}).encode()
    (frame,) = FrameDecoder().feed(_II.pack(4 + len(header), len(header)) + header)
    assert decode(frame).ext_fields["consumerGroup"] == "G\U0001f600"


# ---- the answer path ---------------------------------------------------------------------------


def test_an_answer_whose_remark_cannot_encode_is_sent_escaped() -> None:
    res = RemotingCommand(ResponseCode.TOPIC_NOT_EXIST, 3, 1, f"topic T{LONE} not exist")
    (frame,) = FrameDecoder().feed(encode_bytes(res))
    back = decode(frame)
    assert back.code == ResponseCode.TOPIC_NOT_EXIST and back.remark == "topic T\\ud800 not exist"


def test_a_oneway_request_holding_a_lone_surrogate_is_dropped_and_the_connection_kept(
    servers: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    def frame(code: int, ext: dict[str, Any], opaque: int, flag: int) -> bytes:
        header = json.dumps({"code": code, "opaque": opaque, "flag": flag, "extFields": ext}).encode()
        return _II.pack(4 + len(header), len(header)) + header

    host, port = servers["broker"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=HANG_GUARD_S) as sock:
        # one write: the oneway refusal (nothing to answer), then a request answered on the same connection
        sock.sendall(
            frame(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": f"G{LONE}"}, 1, 2)
            + frame(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": f"H{LONE}"}, 2, 0)
        )
        length, word = _II.unpack(_read(sock, 8))
        answer = json.loads(_read(sock, length - 4)[: word & 0xFFFFFF])
    assert answer["opaque"] == 2  # the oneway one got nothing, the connection served the next
    typed(answer, "'consumerGroup'", "lone surrogate")
    clean_log(caplog)
