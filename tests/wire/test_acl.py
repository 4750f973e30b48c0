"""The broker's access control (RocketMQ 4.9.8's plain ACL): signatures checked against values
computed here from the Java algorithm (``AclUtils.combineRequestContent`` + ``AclSigner``),
every refusal and allowance of ``PlainPermissionManager.validate``, nothing stored from a
refused send, the files (missing, malformed, where they are read), and a run over a socket
with our client signing."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rmqlog
from rmqnet.broker import launch
from rmqnet.broker.acl import ACL_EXCEPTION, AccessValidator, AclRefusal
from rmqnet.broker.acl_address import AclPatternError, address_pattern
from rmqnet.broker.acl_files import AclConfigError, acl_files, load_home
from rmqnet.broker.config import BrokerConfig
from rmqnet.client import BrokerError, Producer, PullConsumer
from rmqnet.remoting import FLAG_ONEWAY, RemotingCommand, RequestCode, ResponseCode
from rmqnet.remoting.acl_sign import content, sign, signature

from .broker_helpers import (
    FakePeer,
    RecordingStore,
    live_cluster,
    make_broker,
    run,
    send_header,
    send_request,
)

ADMIN_KEY, ADMIN_SECRET = "rocketmq2", "12345678"
USER_KEY, USER_SECRET = "RocketMQ", "12345678"
WHITE_KEY = "whitelisted"

PLAIN_ACL = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.{1,2}

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
      - T=PUB|SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""

EXTRA_ACL = """
accounts:
  - accessKey: whitelisted
    secretKey: abcdefgh
    whiteRemoteAddress: 172.16.5.1-5
    defaultTopicPerm: PUB
"""


def java_signature(ext: dict[str, Any], body: bytes, secret: str) -> str:
    """The Java algorithm written out independently: the values as Java strings, TreeMap order
    of the keys, Signature left out, then the body; base64(HmacSHA1)."""

    def text(v: Any) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else str(v)

    data = "".join(text(ext[k]) for k in sorted(ext) if k != "Signature").encode() + body
    return base64.b64encode(hmac.new(secret.encode(), data, hashlib.sha1).digest()).decode()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "rmqhome"
    (home / "conf" / "acl").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    (home / "conf" / "acl" / "extra.yml").write_text(EXTRA_ACL)
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    return home


@pytest.fixture
def store(tmp_path: Path) -> Iterator[rmqlog.MessageStore]:
    with rmqlog.MessageStore.open(tmp_path / "store") as s:
        for topic in ("T", "topicA", "topicB", "topicC", "other"):
            s.create_topic(topic, 4)
        yield s


@pytest.fixture
def puts(store: rmqlog.MessageStore) -> RecordingStore:
    """The store under the broker: every put recorded (the dispatcher does not run here)."""
    return RecordingStore(store)


@pytest.fixture
def broker(puts: RecordingStore, home: Path) -> Any:
    return make_broker(puts, acl_enable=True)


def stored(puts: RecordingStore, topic: str) -> int:
    return sum(t.column("topic").to_pylist().count(topic) for t in puts.puts)


def signed(cmd: RemotingCommand, key: str = USER_KEY, secret: str = USER_SECRET) -> RemotingCommand:
    return sign(cmd, key, secret)


def refused(res: RemotingCommand | None, message: str) -> None:
    assert res is not None
    assert res.code == ResponseCode.SYSTEM_ERROR
    assert res.remark == f"{ACL_EXCEPTION}: {message}"


def send_to(topic: str, body: bytes = b"hello", group: str = "PG") -> RemotingCommand:
    header = send_header(topic)
    req = send_request(header, body)
    req.ext_fields["a"] = group
    return req


# ---- the signature -------------------------------------------------------------------------


def test_signature_matches_the_java_algorithm_for_strings_numbers_and_booleans() -> None:
    ext: dict[str, Any] = {"topic": "T", "queueId": 0, "k": False, "b": "x", "AccessKey": "RocketMQ", "Zeta": "z"}
    body = b"\x00\x01body"
    want = java_signature(ext, body, "12345678")
    assert signature(content(ext, body), "12345678") == want
    # the content is the values only, sorted by key (AccessKey < Zeta < b < k < queueId < topic)
    assert content(ext, body) == b"RocketMQzxfalse0T" + body
    cmd = RemotingCommand(RequestCode.SEND_MESSAGE, ext_fields=dict(ext), body=body)
    sign(cmd, "RocketMQ", "12345678")
    assert cmd.ext_fields["Signature"] == want
    # a body given as buffers is signed as their concatenation
    assert signature(content(ext, [b"\x00\x01", memoryview(b"body")]), "12345678") == want


def test_a_cpp_client_style_request_is_checked_as_strings_with_its_ons_channel(broker: Any) -> None:
    # the C++ client: every value a string, booleans "0"/"1", OnsChannel signed like any field
    ext = {
        "producerGroup": "PG",
        "topic": "T",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": "1700000000000",
        "flag": "0",
        "properties": "",
        "reconsumeTimes": "0",
        "unitMode": "0",
        "batch": "0",
        "AccessKey": USER_KEY,
        "OnsChannel": "ALIYUN",
    }
    ext["Signature"] = java_signature(ext, b"cpp body", USER_SECRET)
    req = RemotingCommand(RequestCode.SEND_MESSAGE, opaque=7, ext_fields=ext, body=b"cpp body", language="CPP")
    (res,) = run(broker, FakePeer(), req)
    assert res is not None and res.code == ResponseCode.SUCCESS, res
    # the C++ client without credentials: an empty AccessKey
    ext2 = dict(ext, AccessKey="")
    ext2["Signature"] = java_signature(ext2, b"cpp body", "")
    (res2,) = run(broker, FakePeer(), RemotingCommand(RequestCode.SEND_MESSAGE, ext_fields=ext2, body=b"cpp body"))
    refused(res2, "No acl config for ")


# ---- refusals ------------------------------------------------------------------------------


def test_unsigned_unknown_key_and_wrong_signature_are_refused_and_nothing_is_stored(broker: Any, puts: Any) -> None:
    peer = FakePeer()
    (res,) = run(broker, peer, send_to("T"))
    refused(res, "No accessKey is configured")
    (res,) = run(broker, peer, signed(send_to("T"), "nobody-here", "whatever1"))
    refused(res, "No acl config for nobody-here")
    (res,) = run(broker, peer, signed(send_to("T"), USER_KEY, "wrong-secret"))
    refused(res, f"Check signature failed for accessKey={USER_KEY}")
    tampered = signed(send_to("T", b"original"))
    tampered.body = b"tampered"
    (res,) = run(broker, peer, tampered)
    refused(res, f"Check signature failed for accessKey={USER_KEY}")
    assert puts.puts == []  # nothing stored from any refused send
    (ok,) = run(broker, peer, signed(send_to("T")))
    assert ok is not None and ok.code == ResponseCode.SUCCESS
    assert stored(puts, "T") == 1


def test_topic_and_group_perms_and_the_deny_default(broker: Any, store: Any, puts: Any) -> None:
    peer = FakePeer()
    (res,) = run(broker, peer, signed(send_to("topicA")))  # topicA=DENY
    refused(res, "No default permission for topic:topicA")
    (res,) = run(broker, peer, signed(send_to("topicC")))  # SUB only: no PUB
    refused(res, "No default permission for topic:topicC")
    (res,) = run(broker, peer, signed(send_to("other")))  # defaultTopicPerm: DENY
    refused(res, "No default permission for topic:other")
    assert puts.puts == []

    def pull(topic: str, group: str) -> RemotingCommand:
        return signed(
            RemotingCommand(
                RequestCode.PULL_MESSAGE,
                ext_fields={
                    "consumerGroup": group,
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
        )

    (res,) = run(broker, peer, pull("topicC", "groupA"))  # groupA=DENY
    refused(res, "No default permission for group:groupA")
    (res,) = run(broker, peer, pull("topicC", "groupC"))
    assert res is not None and res.code != ResponseCode.SYSTEM_ERROR  # allowed: the pull ran
    (res,) = run(broker, peer, pull("other", "groupC"))
    refused(res, "No default permission for topic:other")

    # a heartbeat of a consumer of a denied group, and a commit on a denied group
    hb = {
        "clientID": "c1",
        "producerDataSet": [],
        "consumerDataSet": [{"groupName": "groupA", "subscriptionDataSet": [{"topic": "topicC", "subString": "*"}]}],
    }
    (res,) = run(broker, peer, signed(RemotingCommand(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())))
    refused(res, "No default permission for group:groupA")
    commit = {"consumerGroup": "groupA", "topic": "topicC", "queueId": 0, "commitOffset": 1}
    (res,) = run(broker, peer, signed(RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=commit)))
    refused(res, "No default permission for group:groupA")
    assert store.committed_offset("groupA", "topicC", 0) is None or store.committed_offset("groupA", "topicC", 0) < 0
    # a missing field the resources are read from is refused with its name
    (res,) = run(broker, peer, signed(RemotingCommand(RequestCode.GET_CONSUMER_LIST_BY_GROUP)))
    assert res is not None and res.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in (res.remark or "")
    (res,) = run(broker, peer, signed(RemotingCommand(RequestCode.HEART_BEAT, body=b"{not json")))
    assert res is not None and res.code == ResponseCode.SYSTEM_ERROR and "HeartbeatData" in (res.remark or "")


def test_admin_only_codes_need_an_admin(broker: Any, store: Any) -> None:
    create = {
        "topic": "NewTopic",
        "defaultTopic": "TBW102",
        "readQueueNums": 2,
        "writeQueueNums": 2,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }
    (res,) = run(
        broker, FakePeer(), signed(RemotingCommand(RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=dict(create)))
    )
    refused(res, f"Need admin permission for request code=17, but accessKey={USER_KEY} is not")
    assert "NewTopic" not in store.topics()
    req = signed(RemotingCommand(RequestCode.UPDATE_AND_CREATE_TOPIC, ext_fields=dict(create)), ADMIN_KEY, ADMIN_SECRET)
    (res,) = run(broker, FakePeer(), req)
    assert res is not None and res.code == ResponseCode.SUCCESS, res
    assert "NewTopic" in store.topics()
    # an admin without explicit perms has every resource
    (res,) = run(broker, FakePeer(), signed(send_to("other"), ADMIN_KEY, ADMIN_SECRET))
    assert res is not None and res.code == ResponseCode.SUCCESS


def test_topic_delete_and_config_update_need_an_admin_locks_do_not(broker: Any, store: Any) -> None:
    store.create_topic("Doomed", 1)
    delete = RemotingCommand(RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields={"topic": "Doomed"})
    (res,) = run(broker, FakePeer(), signed(delete))
    refused(res, f"Need admin permission for request code=215, but accessKey={USER_KEY} is not")
    assert "Doomed" in store.topics()
    update = RemotingCommand(RequestCode.UPDATE_BROKER_CONFIG, body=b"traceOn=false\n")
    (res,) = run(broker, FakePeer(), signed(update))
    refused(res, f"Need admin permission for request code=25, but accessKey={USER_KEY} is not")
    assert broker.config.trace_on is True
    for req in (
        RemotingCommand(RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields={"topic": "Doomed"}),
        RemotingCommand(RequestCode.UPDATE_BROKER_CONFIG, body=b"traceOn=false\n"),
    ):
        (res,) = run(broker, FakePeer(), signed(req, ADMIN_KEY, ADMIN_SECRET))
        assert res is not None and res.code == ResponseCode.SUCCESS, res
    assert "Doomed" not in json.loads((store.paths.config_dir / "topics.json").read_text())["topicConfigTable"]
    assert broker.config.trace_on is False
    # locking queues is not admin-only (RocketMQ 4.9.8's ADMIN_CODE): the group's and the topics' SUB
    # (test_acl_touched.py) are enough
    lock = json.dumps(
        {"consumerGroup": "G", "clientId": "c", "mqSet": [{"brokerName": "b", "queueId": 0, "topic": "T"}]}
    ).encode()
    (res,) = run(broker, FakePeer(), RemotingCommand(RequestCode.LOCK_BATCH_MQ, body=lock))
    refused(res, "No accessKey is configured")
    (res,) = run(broker, FakePeer(), signed(RemotingCommand(RequestCode.LOCK_BATCH_MQ, body=lock)))
    assert res is not None and res.code == ResponseCode.SUCCESS


def test_a_refused_oneway_request_gets_no_answer(broker: Any, puts: Any) -> None:
    req = send_to("T")
    req.flag |= FLAG_ONEWAY
    assert run(broker, FakePeer(), req) == [None]
    assert puts.puts == []


def test_queue_position_codes_need_the_topic_sub(broker: Any) -> None:
    req = RemotingCommand(RequestCode.GET_MAX_OFFSET, ext_fields={"topic": "other", "queueId": 0})
    (res,) = run(broker, FakePeer(), req)
    refused(res, "No accessKey is configured")
    # ours, stricter than 4.9.8 (signature only): a queue's positions are the topic's, SUB
    (res,) = run(
        broker,
        FakePeer(),
        signed(RemotingCommand(RequestCode.GET_MAX_OFFSET, ext_fields={"topic": "other", "queueId": 0})),
    )
    refused(res, "No default permission for topic:other")
    (res,) = run(
        broker,
        FakePeer(),
        signed(RemotingCommand(RequestCode.GET_MAX_OFFSET, ext_fields={"topic": "topicC", "queueId": 0})),
    )
    assert res is not None and res.code == ResponseCode.SUCCESS
    # an unknown code passes the ACL first (RocketMQ's default processor is behind the hook)
    (res,) = run(broker, FakePeer(), RemotingCommand(9999))
    refused(res, "No accessKey is configured")


def test_the_trace_topic_is_published_without_a_perm(broker: Any, store: Any) -> None:
    store.create_topic("RMQ_SYS_TRACE_TOPIC", 1)
    (res,) = run(broker, FakePeer(), signed(send_to("RMQ_SYS_TRACE_TOPIC")))
    assert res is not None and res.code == ResponseCode.SUCCESS, res


# ---- allowances by address -----------------------------------------------------------------


def test_white_listed_addresses_pass_without_a_signature(broker: Any, store: Any) -> None:
    # the global white list: 10.10.103.* and 192.168.0.{1,2}; no AccessKey at all
    for remote in ("10.10.103.77:4000", "192.168.0.2:4000"):
        (res,) = run(broker, FakePeer(remote), send_to("other"))
        assert res is not None and res.code == ResponseCode.SUCCESS, (remote, res)
    (res,) = run(broker, FakePeer("192.168.0.3:4000"), send_to("other"))
    refused(res, "No accessKey is configured")
    # an account's white address: its key, no signature, no perm check (admin's 192.168.1.*)
    req = send_to("topicA")
    req.ext_fields["AccessKey"] = ADMIN_KEY
    (res,) = run(broker, FakePeer("192.168.1.200:4000"), req)
    assert res is not None and res.code == ResponseCode.SUCCESS
    # the second file's account (conf/acl/extra.yml): 172.16.5.1-5
    req = send_to("other")
    req.ext_fields["AccessKey"] = WHITE_KEY
    (res,) = run(broker, FakePeer("172.16.5.3:4000"), req)
    assert res is not None and res.code == ResponseCode.SUCCESS
    req = send_to("other")
    req.ext_fields["AccessKey"] = WHITE_KEY
    (res,) = run(broker, FakePeer("172.16.5.6:4000"), req)
    refused(res, f"Check signature failed for accessKey={WHITE_KEY}")


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("192.168.0.1", ["192.168.0.1"], ["192.168.0.2"]),
        ("*", ["1.2.3.4", "::1"], []),
        ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3", "192.168.1.1"]),
        ("192.168.1.1-5", ["192.168.1.1", "192.168.1.5"], ["192.168.1.6", "192.168.2.3"]),
        ("192.168.*.*", ["192.168.0.1", "192.168.255.9"], ["192.169.0.1"]),
        ("192.168.1.*", ["192.168.1.0", "192.168.1.255"], ["192.168.10.1"]),
        ("10.*.1.1", ["10.200.7.7"], ["11.0.1.1"]),  # RocketMQ: the parts after the range are ignored
        ("1.1.1.1,2.2.2.2", ["2.2.2.2"], ["3.3.3.3"]),
        ("::1", ["0:0:0:0:0:0:0:1"], ["::2"]),
        ("1:2:3:4:5:6:7:*", ["1:2:3:4:5:6:7:ffff"], ["1:2:3:4:5:6:8:1"]),
        ("", [], ["1.2.3.4"]),
    ],
)
def test_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    match = address_pattern(pattern)
    assert all(match(ip) for ip in yes) and not any(match(ip) for ip in no)


@pytest.mark.parametrize(
    "pattern",
    [
        "192.168.*",
        "192.168.1.5-1",
        "192.168.1.-5",
        "192.168.1.300-301",
        "1.2.{1,2}",
        "300.1.1.1",
        "not-an-ip",
        "1.2.3.{a,b}",
    ],
)
def test_patterns_rocketmq_refuses(pattern: str) -> None:
    with pytest.raises(AclPatternError):
        address_pattern(pattern)


# ---- the files -----------------------------------------------------------------------------


def test_the_files_read_and_their_order(home: Path) -> None:
    perms = load_home().accounts[USER_KEY].perms
    assert perms["%RETRY%groupB"] == 4 | 8 and perms["topicA"] == 1 and perms["T"] == 4 | 8  # groups are %RETRY%G
    (home / "conf" / "acl" / "dup.yaml").write_text("accounts:\n  - {accessKey: RocketMQ, secretKey: otherSecret}\n")
    files = acl_files(home)
    assert files[-1] == home / "conf" / "plain_acl.yml" and len(files) == 3
    config = load_home()
    assert set(config.accounts) == {USER_KEY, ADMIN_KEY, WHITE_KEY}
    # the folder's files come first: its definition of the key is kept whole
    assert config.accounts[USER_KEY].secret_key == "otherSecret" and config.accounts[USER_KEY].perms == {}


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("accounts: [\n", "not valid YAML"),
        ("- just\n- a list\n", "not a mapping"),
        ("accounts:\n  - {accessKey: short, secretKey: 12345678}\n", "length should longer than 6"),
        (
            "accounts:\n  - {accessKey: longenough, secretKey: 12345678, topicPerms: [noequals]}\n",
            "Parse resource permission failed for topic:noequals",
        ),
        ("globalWhiteRemoteAddresses: [192.168.*]\n", "globalWhiteRemoteAddresses[0]"),
    ],
)
def test_a_malformed_file_is_an_error_naming_it(home: Path, text: str, what: str) -> None:
    path = home / "conf" / "plain_acl.yml"
    path.write_text(text)
    with pytest.raises(AclConfigError) as err:
        load_home()
    assert str(path) in str(err.value) and what in str(err.value)
    assert "12345678" not in str(err.value)  # never a secret in a message


def test_missing_file_or_home_stops_the_broker(home: Path, store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (home / "conf" / "plain_acl.yml").unlink()
    with pytest.raises(AclConfigError, match="plain_acl.yml: the ACL file is missing"):
        make_broker(store, acl_enable=True)
    monkeypatch.delenv("ROCKETMQ_HOME")
    with pytest.raises(AclConfigError, match="ROCKETMQ_HOME is not set"):
        make_broker(store, acl_enable=True)
    plain = make_broker(RecordingStore(store))  # aclEnable=false: no files read, nothing checked
    (res,) = run(plain, FakePeer(), send_to("T"))
    assert res is not None and res.code == ResponseCode.SUCCESS and plain.acl is None


def test_rmqlog_broker_exits_2_on_a_bad_acl_file(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("aclEnable=true\nbrokerName=broker-a\n")
    (home / "conf" / "plain_acl.yml").write_text("accounts: {{{\n")
    assert launch.main(str(tmp_path / "root"), str(conf), "127.0.0.1:0", None) == 2
    err = capsys.readouterr().err
    assert "plain_acl.yml" in err and "not valid YAML" in err
    (home / "conf" / "plain_acl.yml").unlink()
    assert launch.main(str(tmp_path / "root"), str(conf), "127.0.0.1:0", None) == 2
    assert "the ACL file is missing" in capsys.readouterr().err
    # the store was opened and closed cleanly: it opens again without recovery trouble
    with rmqlog.MessageStore.open(tmp_path / "root") as s:
        assert s.topics() is not None


def test_validator_refusals_are_exceptions_with_rocketmq_messages(home: Path) -> None:
    v = AccessValidator(load_home())
    with pytest.raises(AclRefusal, match="No accessKey is configured"):
        v.validate(RemotingCommand(RequestCode.GET_MAX_OFFSET), "127.0.0.1:1")
    v.validate(RemotingCommand(RequestCode.GET_MAX_OFFSET), "10.10.103.1:1")  # global white list


# ---- over a socket -------------------------------------------------------------------------


@pytest.fixture
def servers(tmp_path: Path, home: Path) -> Iterator[dict[str, Any]]:
    """The name server (``namesrv``), broker ``broker-a`` (its address ``broker``, its process
    ``proc``) with ``aclEnable=true``, its store holding topics ``T`` and ``topicC``."""
    root = tmp_path / "root"
    with rmqlog.MessageStore.open(root) as s:
        s.create_topic("T", 4)
        s.create_topic("topicC", 4)
    config = BrokerConfig(broker_name="broker-a", listen_port=0, acl_enable=True)
    with live_cluster({"broker-a": (root, config)}, "acl-servers") as live:
        yield {"namesrv": live.namesrv, "broker": live.addresses["broker-a"], "proc": live.procs["broker-a"]}


def test_over_a_socket_our_client_signs_and_the_unsigned_one_is_refused(servers: dict[str, Any]) -> None:
    ns, store = servers["namesrv"], servers["proc"].store
    producer = Producer("groupB", ns, access_key=USER_KEY, secret_key=USER_SECRET)
    consumer = PullConsumer("groupC", ns, access_key=USER_KEY, secret_key=USER_SECRET)
    anonymous = Producer("PG", ns)
    try:
        sent = producer.send("T", b"signed body", tags="A", queue_id=0)
        assert sent.status == "SEND_OK"
        got = consumer.pull("T", 0, 0, suspend_ms=60_000)  # a long poll: dispatch follows SEND_OK
        assert got.status == "FOUND" and got.messages["body"].to_pylist() == [b"signed body"]
        consumer.commit("T", 0, 1)
        assert servers["proc"].broker.consumer_offsets.query("groupC", "T", 0) == 1
        with pytest.raises(BrokerError) as err:
            anonymous.send("T", b"unsigned", queue_id=0)
        assert err.value.code == ResponseCode.SYSTEM_ERROR
        assert f"{ACL_EXCEPTION}: No accessKey is configured" in str(err.value)
        with pytest.raises(BrokerError, match="No default permission for topic:topicC"):
            producer.send("topicC", b"no PUB on topicC", queue_id=0)
        assert store.max_offset("T", 0) == 1 and store.max_offset("topicC", 0) == 0
    finally:
        for c in (producer, consumer, anonymous):
            c.close()


def test_batches_and_retry_topic_sends_are_checked(broker: Any, puts: Any) -> None:
    batch = send_to("topicC")
    batch.code = RequestCode.SEND_BATCH_MESSAGE
    (res,) = run(broker, FakePeer(), signed(batch))
    refused(res, "No default permission for topic:topicC")  # 320 checked like 310 (4.9.8: signature only)
    retry = send_to("%RETRY%groupA", group="groupA")  # a %RETRY% topic needs the producer group's SUB
    (res,) = run(broker, FakePeer(), signed(retry))
    refused(res, "No default permission for group:groupA")
    assert puts.puts == []


def test_unique_key_queries_verify_in_both_signed_forms(broker: Any) -> None:
    ext = {
        "topic": "topicC",
        "key": "k",
        "maxNum": 32,
        "beginTimestamp": 0,
        "endTimestamp": 1,
        "_UNIQUE_KEY_QUERY": "true",
    }
    ours = signed(RemotingCommand(RequestCode.QUERY_MESSAGE, ext_fields=dict(ext)))  # left out, as the broker does
    java = RemotingCommand(RequestCode.QUERY_MESSAGE, ext_fields=dict(ext, AccessKey=USER_KEY))
    java.ext_fields["Signature"] = java_signature(java.ext_fields, b"", USER_SECRET)  # the Java client signs it
    assert ours.ext_fields["Signature"] != java.ext_fields["Signature"]
    for req in (ours, java):
        (res,) = run(broker, FakePeer(), req)
        assert res is not None and res.code != ResponseCode.SYSTEM_ERROR, res.remark
    forged = RemotingCommand(RequestCode.QUERY_MESSAGE, ext_fields=dict(ext, AccessKey=USER_KEY, Signature="AAAA"))
    (res,) = run(broker, FakePeer(), forged)
    refused(res, f"Check signature failed for accessKey={USER_KEY}")


def test_heartbeats_of_allowed_groups_and_producers_pass(broker: Any) -> None:
    hb = {
        "clientID": "c1",
        "producerDataSet": [{"groupName": "anyProducer"}],
        "consumerDataSet": [
            {
                "groupName": "groupC",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [
                    {"topic": "topicC", "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 0}
                ],
            }
        ],
    }
    (res,) = run(broker, FakePeer(), signed(RemotingCommand(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())))
    assert res is not None and res.code == ResponseCode.SUCCESS, res.remark
    hb["consumerDataSet"][0]["subscriptionDataSet"][0]["topic"] = "other"  # type: ignore[index]
    (res,) = run(broker, FakePeer(), signed(RemotingCommand(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())))
    refused(res, "No default permission for topic:other")


def test_a_heartbeat_the_handler_cannot_read_is_refused_in_its_words(broker: Any) -> None:
    # (one reader of HeartbeatData: the ACL does not read a topic 5 as "5" where the handler refuses it)
    hb = {"clientID": "c1", "consumerDataSet": [{"groupName": "groupC", "subscriptionDataSet": [{"topic": 5}]}]}
    (res,) = run(broker, FakePeer(), signed(RemotingCommand(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())))
    refused(res, "subscriptionDataSet[].topic is 5, not a non-empty string")
    hb["consumerDataSet"] = "groupC"
    (res,) = run(broker, FakePeer(), signed(RemotingCommand(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())))
    refused(res, "consumerDataSet is not a list of objects")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
_codes = st.sampled_from(
    [10, 11, 12, 14, 15, 17, 21, 29, 30, 33, 34, 35, 36, 37, 38, 41, 42, 202, 203, 208, 310, 320, 9999]
)
_names = st.sampled_from(
    [
        "topic",
        "b",
        "a",
        "group",
        "consumerGroup",
        "clientID",
        "queueId",
        "commitOffset",
        "AccessKey",
        "Signature",
        "producerGroup",
        "_UNIQUE_KEY_QUERY",
        "offset",
        "commitLogOffset",
        "tranStateTableOffset",
        "SignatureForm",
        "OnsChannel",
    ]
)


def test_any_fields_are_refused_or_allowed_never_an_exception(home: Path) -> None:
    v = AccessValidator(load_home())

    @settings(max_examples=200, deadline=None)
    @given(
        code=_codes,
        ext=st.dictionaries(_names, _json, max_size=6),
        body=st.binary(max_size=40),
        remote=st.sampled_from(["127.0.0.1:1", "10.10.103.9:2", "::1:3", "garbage"]),
    )
    def check(code: int, ext: dict[str, Any], body: bytes, remote: str) -> None:
        req = RemotingCommand(code, ext_fields=ext, body=body)
        try:
            v.validate(req, remote)
        except AclRefusal as exc:
            assert str(exc)
        res = v.check(None, FakePeer(remote), req)
        assert res is None or (res.code == ResponseCode.SYSTEM_ERROR and (res.remark or "").startswith(ACL_EXCEPTION))

    check()


def test_pop_ack_and_change_need_sub_on_the_topic_and_the_group(broker: Any) -> None:
    """RocketMQ 5's PlainAccessResource for 200050, 200051, 200053: the topic and the group's
    retry topic, SUB; a refusal changes nothing."""
    peer = FakePeer()

    def pop(topic: str, group: str) -> RemotingCommand:
        return signed(
            RemotingCommand(
                RequestCode.POP_MESSAGE,
                ext_fields={
                    "consumerGroup": group,
                    "topic": topic,
                    "queueId": -1,
                    "maxMsgNums": 32,
                    "invisibleTime": 60000,
                    "pollTime": 0,
                    "bornTime": 0,
                    "initMode": 0,
                },
            )
        )

    (res,) = run(broker, peer, pop("topicC", "groupA"))  # groupA=DENY
    refused(res, "No default permission for group:groupA")
    (res,) = run(broker, peer, pop("other", "groupC"))  # defaultTopicPerm: DENY
    refused(res, "No default permission for topic:other")
    (res,) = run(broker, peer, pop("topicC", "groupC"))
    assert res is not None and res.code == ResponseCode.POLLING_TIMEOUT  # allowed: the pop ran, found nothing
    for code, extra in (
        (RequestCode.ACK_MESSAGE, {}),
        (RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {"invisibleTime": 1}),
    ):
        (res,) = run(
            broker,
            peer,
            signed(
                RemotingCommand(
                    code,
                    ext_fields={
                        "consumerGroup": "groupA",
                        "topic": "topicC",
                        "queueId": 0,
                        "extraInfo": "0 1 2 0 0 b 0 0",
                        "offset": 0,
                        **extra,
                    },
                )
            ),
        )
        refused(res, "No default permission for group:groupA")

    # an ack of a retried message names the group's POP retry topic: its topic is what is checked
    def ack(topic: str) -> RemotingCommand:
        return signed(
            RemotingCommand(
                RequestCode.ACK_MESSAGE,
                ext_fields={
                    "consumerGroup": "groupC",
                    "topic": topic,
                    "queueId": 0,
                    "extraInfo": "0 1 2 0 1 b 0 0",
                    "offset": 0,
                },
            )
        )

    (res,) = run(broker, peer, ack("%RETRY%groupC_other"))
    refused(res, "No default permission for topic:other")
    (res,) = run(broker, peer, ack("%RETRY%groupC_topicC"))
    assert res is not None and res.code == ResponseCode.TOPIC_NOT_EXIST  # allowed: the handler ran
    assert broker.pop.state.log.records == 0
