"""The ACL authorizes what a request touches, not only what it names (the record at an offset,
a half's group, retry topics' groups, locked queues, admin reads): raw frames built from
RocketMQ 4.9.8's field names, signed by the Java algorithm, handled by a broker over a real
store with ``aclEnable=true``. Each refusal is checked to read nothing back and to store and
change nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker.acl import ACL_EXCEPTION
from rmqnet.broker.broker import Broker
from rmqnet.remoting import ConsumerSendMsgBackHeader, RemotingCommand, RequestCode, ResponseCode
from rmqnet.remoting.acl_sign import sign, sign_bound
from rmqnet.remoting.command import encode_bytes
from wire.broker_helpers import FakePeer, make_broker, run, send_header, send_request
from wire.test_acl import (
    ADMIN_KEY,
    ADMIN_SECRET,
    EXTRA_ACL,
    PLAIN_ACL,
    USER_KEY,
    USER_SECRET,
    java_signature,
)

NOW = 1_700_000_000_000
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
COMMIT = 8


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "rmqhome"
    (home / "conf" / "acl").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    (home / "conf" / "acl" / "extra.yml").write_text(EXTRA_ACL)
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    return home


@pytest.fixture
def store(tmp_path: Path, home: Path) -> Iterator[rmqlog.MessageStore]:
    cfg = small_store_config(store_host="127.0.0.1:10911")
    with rmqlog.MessageStore.open(tmp_path / "store", cfg, clock=rmqlog.ManualClock(NOW)) as s:
        for topic in ("T", "topicA", "topicB", "topicC", "other"):
            s.create_topic(topic, 4)
        yield s


@pytest.fixture
def broker(store: rmqlog.MessageStore) -> Broker:
    return make_broker(store, clock=rmqlog.ManualClock(NOW), acl_enable=True)


def put(store: rmqlog.MessageStore, topic: str, body: bytes = b"secret") -> int:
    """One message stored and dispatched; its commitlog offset."""
    res = store.put_wire(
        pa.table(
            {
                "topic": [topic],
                "queueId": [0],
                "body": [body],
                "flag": pa.array([0], pa.int32()),
                "sysFlag": pa.array([0], pa.int32()),
                "bornHost": ["10.9.8.7:4321"],
                "properties": ["TAGS\x01a\x02"],
                "reconsumeTimes": pa.array([0], pa.int32()),
            }
        ),
        dispatch=True,
    )
    return int(res.to_pylist()[0]["commitLogOffset"])


def user(cmd: RemotingCommand) -> RemotingCommand:
    return sign(cmd, USER_KEY, USER_SECRET)


def admin(cmd: RemotingCommand) -> RemotingCommand:
    return sign(cmd, ADMIN_KEY, ADMIN_SECRET)


def refused(res: RemotingCommand | None, message: str) -> None:
    """An ACL refusal: SYSTEM_ERROR, RocketMQ's remark, nothing read back."""
    assert res is not None
    assert (res.code, res.remark) == (ResponseCode.SYSTEM_ERROR, f"{ACL_EXCEPTION}: {message}")
    assert not res.body and res.ext_fields == {}


def ok(res: RemotingCommand | None) -> RemotingCommand:
    assert res is not None and res.code == ResponseCode.SUCCESS, res
    return res


def messages(store: rmqlog.MessageStore, topic: str, queue_id: int = 0) -> list[dict[str, Any]]:
    store.dispatch()
    if topic not in store.topics():
        return []
    return store.read_queue(topic, queue_id, 0, 1 << 40).to_pylist()


def view(offset: int) -> RemotingCommand:
    return RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": str(offset)})


# ---- VIEW_MESSAGE_BY_ID ------------------------------------------------------------


def test_view_message_by_id_needs_sub_on_the_records_topic(broker: Broker, store: rmqlog.MessageStore) -> None:
    denied, allowed = put(store, "topicA", b"deny-listed"), put(store, "topicC", b"readable")
    (res,) = run(broker, FakePeer(), user(view(denied)))
    refused(res, "No default permission for topic:topicA")
    (res,) = run(broker, FakePeer(), user(view(allowed)))
    assert b"readable" in ok(res).body_bytes()
    # no message there: refused with the reason (the record a request points at is checked first)
    (res,) = run(broker, FakePeer(), user(view(denied + 1)))
    refused(res, f"no message starts at the offset {denied + 1}")
    # the admin reads any
    (res,) = run(broker, FakePeer(), admin(view(denied)))
    assert b"deny-listed" in ok(res).body_bytes()


def test_a_half_message_is_viewed_as_its_real_topics(broker: Broker, store: rmqlog.MessageStore) -> None:
    half = send_half(broker, "topicA", "PGA")  # the admin sends it (topicA is DENY for the user)
    offset = int(half.ext_fields["msgId"][16:], 16)
    (res,) = run(broker, FakePeer(), user(view(offset)))
    refused(res, "No default permission for topic:topicA")
    # the carrier topic read by name is the admin's only
    pull = RemotingCommand(
        RequestCode.PULL_MESSAGE,
        ext_fields={
            "consumerGroup": "groupC",
            "topic": HALF_TOPIC,
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
    (res,) = run(broker, FakePeer(), user(pull))
    refused(res, f"topic:{HALF_TOPIC} holds other topics' messages: accessKey={USER_KEY} is not admin")


# ---- CONSUMER_SEND_MSG_BACK --------------------------------------------------------


def back(offset: int, group: str) -> RemotingCommand:
    h = ConsumerSendMsgBackHeader(
        offset=offset, group=group, delay_level=-1, origin_msg_id="X", origin_topic="T", max_reconsume_times=None
    )
    return RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, 1, 0, None, h.to_ext(), b"", "JAVA", 121)


def test_send_back_needs_sub_on_the_records_topic(broker: Broker, store: rmqlog.MessageStore) -> None:
    denied, allowed = put(store, "topicA", b"deny-listed"), put(store, "topicC", b"readable")
    # groupC is SUB for the user: its own retry group, but topicA's message is not its to copy
    (res,) = run(broker, FakePeer(), user(back(denied, "groupC")))
    refused(res, "No default permission for topic:topicA")
    assert messages(store, "%DLQ%groupC") == [] and messages(store, "%RETRY%groupC") == []
    (res,) = run(broker, FakePeer(), user(back(denied + 3, "groupC")))
    refused(res, f"no message starts at the offset {denied + 3}")
    ok(run(broker, FakePeer(), user(back(allowed, "groupC")))[0])  # delayLevel -1: the dead-letter topic
    assert [m["body"] for m in messages(store, "%DLQ%groupC")] == [b"readable"]


# ---- END_TRANSACTION ---------------------------------------------------------------


def send_half(
    broker: Broker, topic: str, group: str, key: str = ADMIN_KEY, secret: str = ADMIN_SECRET
) -> RemotingCommand:
    props = f"TRAN_MSG\x01true\x02PGROUP\x01{group}\x02UNIQ_KEY\x01U-{topic}-{group}\x02"
    req = send_request(send_header(topic, props=props, sys_flag=4), b"half body")
    req.ext_fields["a"] = group
    return ok(run(broker, FakePeer(), sign(req, key, secret))[0])


def end(half: RemotingCommand, group: str) -> RemotingCommand:
    ext = {
        "producerGroup": group,
        "tranStateTableOffset": half.ext_fields["queueOffset"],
        "commitLogOffset": str(int(half.ext_fields["msgId"][16:], 16)),
        "commitOrRollback": str(COMMIT),
        "fromTransactionCheck": "false",
        "msgId": "M",
    }
    return RemotingCommand(RequestCode.END_TRANSACTION, 7, 0, None, ext, b"", "JAVA")


def test_end_transaction_needs_pub_on_the_real_topic_and_the_halfs_group(
    broker: Broker, store: rmqlog.MessageStore
) -> None:
    theirs = send_half(broker, "topicC", "victimPG")  # topicC: SUB only for the user
    (res,) = run(broker, FakePeer(), user(end(theirs, "victimPG")))
    refused(res, "No default permission for topic:topicC")
    (res,) = run(broker, FakePeer(), user(end(theirs, "myPG")))
    offset = int(theirs.ext_fields["msgId"][16:], 16)
    refused(res, f"the half message at the commitLogOffset {offset} is not the producerGroup myPG's")
    assert messages(store, "topicC") == [] and broker.transactions.committed == 0
    # the user's own half, in a topic it publishes to: committed
    mine = send_half(broker, "topicB", "groupB", USER_KEY, USER_SECRET)
    (res,) = run(broker, FakePeer(), user(end(mine, "groupB")))
    ok(res)
    assert [m["body"] for m in messages(store, "topicB")] == [b"half body"]
    # the admin (every resource) ends the other, with its group
    ok(run(broker, FakePeer(), admin(end(theirs, "victimPG")))[0])
    assert [m["body"] for m in messages(store, "topicC")] == [b"half body"]


# ---- a 4.x signature bound to its code ---------------------------------------------


PULL_FIELDS = {
    "consumerGroup": "groupC",
    "topic": "topicC",
    "queueId": "0",
    "queueOffset": "0",
    "maxMsgNums": "32",
    "sysFlag": "0",
    "commitOffset": "5",
    "suspendTimeoutMillis": "0",
    "subscription": "*",
    "subVersion": "0",
}


def test_a_signed_pull_replayed_as_update_consumer_offset_is_refused(broker: Broker) -> None:
    pull = user(RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=dict(PULL_FIELDS)))
    assert run(broker, FakePeer(), pull)[0] is not None
    replay = RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=dict(pull.ext_fields))  # same signature
    (res,) = run(broker, FakePeer(), replay)
    refused(
        res,
        "request code=15 does not define the field(s) maxMsgNums, queueOffset, subVersion, subscription, "
        "suspendTimeoutMillis, sysFlag: a request signed in RocketMQ's 4.x form carries its code's fields only",
    )
    assert broker.consumer_offsets.query("groupC", "topicC", 0) == -1
    # a 4.x-signed request with a field its code does not define, however it was made
    extra = user(RemotingCommand(RequestCode.GET_MAX_OFFSET, ext_fields={"topic": "topicC", "queueId": "0", "x": "1"}))
    refused(
        run(broker, FakePeer(), extra)[0],
        "request code=30 does not define the field(s) x: a request signed in "
        "RocketMQ's 4.x form carries its code's fields only",
    )
    # the session fields and the C++ client's OnsChannel are every code's
    fine = {"topic": "topicC", "queueId": "0", "OnsChannel": "ALIYUN", "SecurityToken": "t"}
    ok(run(broker, FakePeer(), user(RemotingCommand(RequestCode.GET_MAX_OFFSET, ext_fields=fine)))[0])


def test_the_bound_form_is_verified_by_that_form_only(broker: Broker) -> None:
    commit = {"consumerGroup": "groupC", "topic": "topicC", "queueId": "0", "commitOffset": "3"}
    req = sign_bound(
        RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=dict(commit)), USER_KEY, USER_SECRET
    )
    ok(run(broker, FakePeer(), req)[0])
    assert broker.consumer_offsets.query("groupC", "topicC", 0) == 3
    # it binds the code: the same fields under another code fail the signature
    moved = RemotingCommand(RequestCode.QUERY_CONSUMER_OFFSET, ext_fields=dict(req.ext_fields))
    refused(run(broker, FakePeer(), moved)[0], f"Check signature failed for accessKey={USER_KEY}")
    # and the names: a boundary moved between two values fails too
    shifted = dict(req.ext_fields, consumerGroup="groupCtopic", topic="C")
    refused(
        run(broker, FakePeer(), RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=shifted))[0],
        f"Check signature failed for accessKey={USER_KEY}",
    )
    # a bound request is not held to its code's fields (the code is signed)
    extra = sign_bound(
        RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=dict(commit, commitOffset="4", rmqlogNote="x")),
        USER_KEY,
        USER_SECRET,
    )
    ok(run(broker, FakePeer(), extra)[0])
    # a 4.x signature marked as bound, or an unknown form: refused
    marked = RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=dict(commit, SignatureForm="bound-1"))
    refused(run(broker, FakePeer(), user(marked))[0], f"Check signature failed for accessKey={USER_KEY}")
    other = RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, ext_fields=dict(commit, SignatureForm="bound-9"))
    refused(run(broker, FakePeer(), user(other))[0], f"Check signature failed for accessKey={USER_KEY}")
    assert broker.consumer_offsets.query("groupC", "topicC", 0) == 4


# ---- the retry and dead-letter topics are their group's ----------------------------


def send_to(topic: str, group: str) -> RemotingCommand:
    req = send_request(send_header(topic), b"into a retry topic")
    req.ext_fields["a"] = group
    return req


@pytest.mark.parametrize("topic", ["%RETRY%groupA", "%DLQ%groupA"])
def test_a_send_into_a_groups_retry_or_dead_letter_topic_is_checked_against_that_group(
    broker: Broker, store: rmqlog.MessageStore, topic: str
) -> None:
    (res,) = run(broker, FakePeer(), user(send_to(topic, "groupC")))  # groupA=DENY, groupC SUB
    refused(res, "No default permission for group:groupA")
    assert messages(store, topic) == []
    # the topic's group decides, whatever the producerGroup field says
    ok(run(broker, FakePeer(), user(send_to(topic.replace("groupA", "groupC"), "groupA")))[0])


# ---- queue locks are the group's and the topics' -----------------------------------


def lock_body(group: str, topic: str) -> bytes:
    return json.dumps(
        {
            "consumerGroup": group,
            "clientId": "attacker",
            "mqSet": [{"brokerName": "broker-a", "queueId": 0, "topic": topic}],
        }
    ).encode()


@pytest.mark.parametrize("code", [RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ])
def test_lock_and_unlock_need_sub_on_the_group_and_each_topic(broker: Broker, code: int) -> None:
    owner = RemotingCommand(RequestCode.LOCK_BATCH_MQ, body=lock_body("groupA", "topicC"))
    ok(run(broker, FakePeer(), admin(owner))[0])  # the group's orderly consumer holds queue 0
    held = len(broker.queue_locks)
    (res,) = run(broker, FakePeer(), user(RemotingCommand(code, body=lock_body("groupA", "topicC"))))
    refused(res, "No default permission for group:groupA")
    (res,) = run(broker, FakePeer(), user(RemotingCommand(code, body=lock_body("groupC", "other"))))
    refused(res, "No default permission for topic:other")
    assert len(broker.queue_locks) == held == 1
    for body in (b"[1]", b'{"consumerGroup": 5}', b'{"consumerGroup": "g", "mqSet": [{}]}', b"\xff"):
        (res,) = run(broker, FakePeer(), user(RemotingCommand(code, body=body)))
        assert (
            res is not None and res.code == ResponseCode.SYSTEM_ERROR and (res.remark or "").startswith(ACL_EXCEPTION)
        )
    ok(run(broker, FakePeer(), user(RemotingCommand(code, body=lock_body("groupC", "topicC"))))[0])


# ---- the other codes that touch what they do not name --------------------------------------


def test_codes_reading_a_group_or_topic_need_its_sub(broker: Broker, store: rmqlog.MessageStore) -> None:
    cases = [
        (
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": "groupA", "topic": "topicC", "queueId": "0"},
            "group:groupA",
        ),
        (
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": "groupC", "topic": "topicA", "queueId": "0"},
            "topic:topicA",
        ),
        (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "topicA", "queueId": "0", "timestamp": "0"}, "topic:topicA"),
        (RequestCode.GET_MIN_OFFSET, {"topic": "topicA", "queueId": "0"}, "topic:topicA"),
        (RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": "topicA", "queueId": "0"}, "topic:topicA"),
        (RequestCode.GET_TOPIC_STATS_INFO, {"topic": "topicA"}, "topic:topicA"),
        (RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "groupA"}, "group:groupA"),
        (RequestCode.GET_CONSUME_STATS, {"consumerGroup": "groupA", "topic": "topicC"}, "group:groupA"),
        (RequestCode.GET_CONSUME_STATS, {"consumerGroup": "groupC", "topic": "topicA"}, "topic:topicA"),
        (RequestCode.UNREGISTER_CLIENT, {"clientID": "c", "producerGroup": "groupA"}, "group:groupA"),
    ]
    for code, ext, what in cases:
        (res,) = run(broker, FakePeer(), user(RemotingCommand(code, ext_fields=ext)))
        refused(res, f"No default permission for {what}")


def test_consume_stats_without_a_topic_needs_every_topic_of_the_group(broker: Broker) -> None:
    broker.consumer_offsets.commit("groupC", "topicA", 0, 1)  # groupC's offsets hold a deny-listed topic
    (res,) = run(
        broker, FakePeer(), user(RemotingCommand(RequestCode.GET_CONSUME_STATS, ext_fields={"consumerGroup": "groupC"}))
    )
    refused(res, "No default permission for topic:topicA")


@pytest.mark.parametrize(
    "code",
    [
        RequestCode.GET_ALL_TOPIC_CONFIG,
        RequestCode.GET_ALL_CONSUMER_OFFSET,
        RequestCode.GET_ALL_DELAY_OFFSET,
        RequestCode.GET_BROKER_CONFIG,
        RequestCode.GET_BROKER_RUNTIME_INFO,
    ],
)
def test_whole_broker_reads_need_an_admin(broker: Broker, code: int) -> None:
    (res,) = run(broker, FakePeer(), user(RemotingCommand(code)))
    refused(res, f"Need admin permission for request code={code}, but accessKey={USER_KEY} is not")
    (res,) = run(broker, FakePeer(), admin(RemotingCommand(code)))
    assert res is not None and not (res.remark or "").startswith(ACL_EXCEPTION)


def test_a_producer_heartbeat_needs_a_perm_on_its_group(broker: Broker) -> None:
    def hb(*producers: str, consumer: str | None = None) -> RemotingCommand:
        consumers = [] if consumer is None else [{"groupName": consumer, "subscriptionDataSet": []}]
        body = {
            "clientID": "c1",
            "producerDataSet": [{"groupName": p} for p in producers],
            "consumerDataSet": consumers,
        }
        return user(RemotingCommand(RequestCode.HEART_BEAT, body=json.dumps(body).encode()))

    # groupA=DENY: registering as its producer would take its half messages' check-backs
    refused(run(broker, FakePeer(), hb("groupA", "CLIENT_INNER_PRODUCER"))[0], "No default permission for group:groupA")
    assert "groupA" not in broker.consumers.producer_groups
    ok(run(broker, FakePeer(), hb("groupB", "CLIENT_INNER_PRODUCER"))[0])
    assert set(broker.consumers.producer_groups) == {"groupB", "CLIENT_INNER_PRODUCER"}


def test_signature_java_helper_agrees() -> None:
    # the tests above sign with rmqnet's sign(); the independent Java algorithm agrees
    req = user(view(5))
    assert req.ext_fields["Signature"] == java_signature({k: v for k, v in req.ext_fields.items()}, b"", USER_SECRET)


def test_a_refusal_naming_what_the_request_sent_always_encodes(broker: Broker) -> None:
    """Field names and a group echoed in a refusal: a lone surrogate is escaped, the answer encodes."""
    req = user(
        RemotingCommand(RequestCode.GET_MAX_OFFSET, ext_fields={"topic": "topicC", "queueId": "0", "x\udc80": "1"})
    )
    (res,) = run(broker, FakePeer(), req)
    refused(
        res,
        "request code=30 does not define the field(s) x\\udc80: a request signed in RocketMQ's 4.x form "
        "carries its code's fields only",
    )
    assert res is not None and encode_bytes(res)


def test_the_unsigned_unique_key_flag_is_the_querys_only(broker: Broker) -> None:
    """``_UNIQUE_KEY_QUERY`` is left out of the 4.x content, so anyone can add it to a signed
    request: only QUERY_MESSAGE (12) may carry it."""
    req = user(RemotingCommand(RequestCode.GET_MAX_OFFSET, ext_fields={"topic": "topicC", "queueId": "0"}))
    req.ext_fields["_UNIQUE_KEY_QUERY"] = "true"  # added after signing: the signature still verifies
    refused(
        run(broker, FakePeer(), req)[0],
        "request code=30 does not define the field(s) _UNIQUE_KEY_QUERY: a "
        "request signed in RocketMQ's 4.x form carries its code's fields only",
    )
    query = {
        "topic": "topicC",
        "key": "k",
        "maxNum": "32",
        "beginTimestamp": "0",
        "endTimestamp": "1",
        "_UNIQUE_KEY_QUERY": "true",
    }
    (res,) = run(broker, FakePeer(), user(RemotingCommand(RequestCode.QUERY_MESSAGE, ext_fields=query)))
    assert res is not None and not (res.remark or "").startswith(ACL_EXCEPTION), res
