"""A property over every request code the broker serves (no code left unguarded by the ACL): a request signed by an
account with no permission on any resource (DENY by default for topics and groups, not admin)
changes no file of the store and no table of the broker, and reads nothing back, whatever its
fields and body, in either signature form.

The broker holds something to take first (messages of several topics, a half message, a dead
letter, committed offsets, a registered consumer and producer, a held queue lock), made by the
admin account; the requests are drawn from each code's 4.9.8 header fields
(:data:`rmqnet.broker.acl_fields.DEFINED_FIELDS`) with values naming those resources, offsets
pointing at those records, and bodies of the codes that read one."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import small_store_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmqlog
from rmqnet.broker.acl_fields import DEFINED_FIELDS
from rmqnet.broker.broker import Broker
from rmqnet.remoting import RemotingCommand, RequestCode, ResponseCode
from rmqnet.remoting.acl_sign import sign, sign_bound
from wire.broker_helpers import FakePeer, make_broker, run, send_header, send_request
from wire.test_acl import ADMIN_KEY, ADMIN_SECRET, PLAIN_ACL

NOW = 1_700_000_000_000
NOBODY_KEY, NOBODY_SECRET = "nobody01", "nothing-at-all"
NOBODY_ACL = f"""
accounts:
  - accessKey: {NOBODY_KEY}
    secretKey: {NOBODY_SECRET}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
"""
TOPICS = [
    "T",
    "topicA",
    "topicC",
    "%RETRY%G",
    "%DLQ%G",
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC",
    "TBW102",
]
GROUPS = ["G", "PG", "groupC", "CLIENT_INNER_PRODUCER", ""]


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Broker, Path, dict[str, int]]]:
    home = tmp_path / "rmqhome"
    (home / "conf" / "acl").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    (home / "conf" / "acl" / "nobody.yml").write_text(NOBODY_ACL)
    monkeypatch.setenv("ROCKETMQ_HOME", str(home))
    root = tmp_path / "store"
    with rmqlog.MessageStore.open(
        root, small_store_config(store_host="127.0.0.1:10911"), clock=rmqlog.ManualClock(NOW)
    ) as store:
        for topic in ("T", "topicA", "topicC", "RMQ_SYS_TRACE_TOPIC"):
            store.create_topic(topic, 2)
        b = make_broker(store, clock=rmqlog.ManualClock(NOW), acl_enable=True)
        yield b, root, _populate(b, store)


def _admin(b: Broker, req: RemotingCommand) -> RemotingCommand:
    (res,) = run(b, FakePeer("127.0.0.1:40000"), sign(req, ADMIN_KEY, ADMIN_SECRET))
    assert res is not None and res.code == ResponseCode.SUCCESS, res
    return res


def _populate(b: Broker, store: rmqlog.MessageStore) -> dict[str, int]:
    """What there is to take; the commitlog offsets of some records, by name."""
    offsets: dict[str, int] = {}
    for topic in ("T", "topicA", "topicC"):
        req = send_request(send_header(topic), f"body of {topic}".encode())
        offsets[topic] = int(_admin(b, req).ext_fields["msgId"][16:], 16)
    half = send_request(
        send_header("topicA", props="TRAN_MSG\x01true\x02PGROUP\x01PG\x02UNIQ_KEY\x01U1\x02", sys_flag=4), b"half"
    )
    offsets["half"] = int(_admin(b, half).ext_fields["msgId"][16:], 16)
    store.dispatch()
    hb = {
        "clientID": "owner",
        "producerDataSet": [{"groupName": "PG"}],
        "consumerDataSet": [
            {
                "groupName": "G",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [
                    {"topic": "T", "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 0}
                ],
            }
        ],
    }
    _admin(b, RemotingCommand(RequestCode.HEART_BEAT, body=json.dumps(hb).encode()))
    _admin(
        b,
        RemotingCommand(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            ext_fields={"consumerGroup": "G", "topic": "T", "queueId": "0", "commitOffset": "1"},
        ),
    )
    lock = {
        "consumerGroup": "G",
        "clientId": "owner",
        "mqSet": [{"brokerName": "broker-a", "queueId": 0, "topic": "T"}],
    }
    _admin(b, RemotingCommand(RequestCode.LOCK_BATCH_MQ, body=json.dumps(lock).encode()))
    back = {"offset": str(offsets["T"]), "group": "G", "delayLevel": "-1", "originMsgId": "X", "originTopic": "T"}
    _admin(b, RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=back))
    store.dispatch()
    return offsets


def files(root: Path) -> dict[str, tuple[int, str]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, hashlib.sha1(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def tables(b: Broker) -> Any:
    """Every table a request can change, as plain values."""
    c = b.consumers
    return copy.deepcopy(
        {
            "offsets": {k: dict(v) for k, v in b.consumer_offsets.table().items()},
            "consumers": {g: (sorted(i.clients), sorted(i.subscriptions)) for g, i in c.consumer_groups.items()},
            "producers": {g: sorted(v) for g, v in c.producer_groups.items()},
            "locks": [(g, q, e.client_id, e.last_update_ms) for (g, q), e in b.queue_locks._order.items()],
            "topics": sorted(b.topics.all()),
            "groups": len(b.subscription_groups),
            "transactions": (dict(b.transactions.resolved), b.transactions.committed, b.transactions.rolled_back),
            "send_back": (b.send_back.retried, b.send_back.dead),
            "config": b.config,
            "delay": b.store.delay_offsets(),
            "tail": b.store.published_tail(),
        }
    )


_int = st.sampled_from(["0", "1", "-1", "5", "9223372036854775807", "x", ""])


def _value(name: str, offsets: list[int]) -> st.SearchStrategy[str]:
    if name in ("topic", "b", "c", "defaultTopic", "originTopic"):
        return st.sampled_from(TOPICS)
    if name in ("consumerGroup", "producerGroup", "group", "a"):
        return st.sampled_from(GROUPS)
    if name in ("offset", "commitLogOffset"):
        return st.sampled_from([str(o) for o in offsets] + ["0", "-1"])
    if name in ("properties", "i"):
        return st.sampled_from(
            ["", "TRAN_MSG\x01true\x02PGROUP\x01PG\x02", "DELAY\x013\x02", "REAL_TOPIC\x01topicA\x02"]
        )
    if name in ("subscription", "expressionType", "key", "clientID", "msgId", "transactionId"):
        return st.sampled_from(["*", "TAG", "k", "owner", "U1"])
    return _int


def _body(code: int) -> st.SearchStrategy[bytes]:
    group, topic = st.sampled_from(GROUPS), st.sampled_from(TOPICS)
    if code == RequestCode.HEART_BEAT:
        return st.builds(
            lambda p, g, t: json.dumps(
                {
                    "clientID": "evil",
                    "producerDataSet": [{"groupName": x} for x in p],
                    "consumerDataSet": [{"groupName": g, "subscriptionDataSet": [{"topic": t, "subString": "*"}]}]
                    if g
                    else [],
                }
            ).encode(),
            st.lists(group, max_size=2),
            group,
            topic,
        )
    if code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        return st.builds(
            lambda g, t: json.dumps(
                {
                    "consumerGroup": g,
                    "clientId": "evil",
                    "mqSet": [{"brokerName": "broker-a", "queueId": 0, "topic": t}],
                }
            ).encode(),
            group,
            topic,
        )
    if code == RequestCode.UPDATE_BROKER_CONFIG:
        return st.just(b"traceOn=false\n")
    return st.sampled_from([b"", b"body"])


@st.composite
def requests(draw: st.DrawFn, code: int, offsets: list[int]) -> RemotingCommand:
    names = sorted(DEFINED_FIELDS[code])
    chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names))) if names else []
    ext = {n: draw(_value(n, offsets)) for n in chosen}
    if draw(st.booleans()):
        ext.update({n: draw(_value(n, offsets)) for n in names})  # often every field, well formed
    req = RemotingCommand(code, ext_fields=ext, body=draw(_body(code)))
    return (sign_bound if draw(st.booleans()) else sign)(req, NOBODY_KEY, NOBODY_SECRET)


def test_the_field_table_lists_every_served_code(broker: tuple[Broker, Path, dict[str, int]]) -> None:
    assert sorted(DEFINED_FIELDS) == broker[0].table.codes()


@pytest.mark.parametrize("code", sorted(DEFINED_FIELDS))
def test_a_request_of_an_account_without_perms_changes_nothing_and_reads_nothing(
    broker: tuple[Broker, Path, dict[str, int]], code: int
) -> None:
    b, root, offsets = broker
    before_files, before_tables = files(root), tables(b)
    answers: set[str] = set()

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(req=requests(code, list(offsets.values())))
    def check(req: RemotingCommand) -> None:
        (res,) = run(b, FakePeer("127.0.0.1:40001"), req)
        assert res is not None
        answers.add(res.remark or "")
        assert not res.body and res.ext_fields == {}, (req, res)  # nothing read back
        b.store.dispatch()
        assert tables(b) == before_tables, req
        assert files(root) == before_files, req

    check()
    assert answers and not any("Check signature failed" in a for a in answers)  # both forms verified
