"""A consumer reads only its own group's retry topics. A POP retry topic is named
``%RETRY%<group>_<topic>``; read as a resource by its name it would be the group
``<group>_<topic>``, which no account lists, so an account whose default group permission
reads could consume another group's retries under a group of its own. The ACL refuses a
pull, a pop (200050, 200051, 200053) or a gRPC consumer call of group X naming a ``%RETRY%``
topic that is not X's own, before anything is read."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker.acl_files import SUB
from rmqnet.broker.acl_resources import AclRefusal, consumed_topic, named
from rmqnet.broker.broker import Broker
from rmqnet.grpc.convert import Code
from rmqnet.grpc.v2 import definition_pb2 as pb
from rmqnet.grpc.v2 import service_pb2 as svc
from rmqnet.remoting import RemotingCommand, RequestCode
from wire.broker_helpers import make_broker
from wire.grpc_helpers import Client, serve

NOW = 1_700_000_000_000
DATE = "20261207T140000Z"
PLAIN_ACL = """
accounts:
  - accessKey: looseAK
    secretKey: looseSK1
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
    groupPerms: [H=DENY]
"""


@pytest.mark.parametrize(
    "topic, group, resource",
    [
        ("T", "X", "T"),
        ("%RETRY%X", "X", "%RETRY%X"),
        ("%RETRY%X_T", "X", "T"),
        ("%RETRY%X+T", "X", "T"),
    ],
)
def test_a_groups_own_retry_topics_are_its_topics(topic: str, group: str, resource: str) -> None:
    assert consumed_topic(topic, group) == resource


@pytest.mark.parametrize("topic", ["%RETRY%H_T", "%RETRY%H+T", "%RETRY%H", "%RETRY%XY_T"])
def test_another_groups_retry_topic_is_refused(topic: str) -> None:
    with pytest.raises(AclRefusal, match="another consumer group's retry topic"):
        consumed_topic(topic, "X")


def _pop(topic: str, group: str, code: int = RequestCode.POP_MESSAGE) -> RemotingCommand:
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": "-1",
        "maxMsgNums": "1",
        "invisibleTime": "60000",
        "pollTime": "0",
        "bornTime": str(NOW),
        "initMode": "0",
        "expType": "TAG",
        "exp": "*",
        "extraInfo": "0 0 60000 0 1 broker-a 0 0",
        "offset": "0",
    }
    return RemotingCommand(code, 1, 0, None, ext, b"", "JAVA")


def _pull(topic: str, group: str) -> RemotingCommand:
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "0",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": "0",
    }
    return RemotingCommand(RequestCode.PULL_MESSAGE, 1, 0, None, ext, b"", "JAVA")


@pytest.mark.parametrize(
    "cmd",
    [
        _pop("%RETRY%H_T", "X"),
        _pop("%RETRY%H_T", "X", RequestCode.ACK_MESSAGE),
        _pop("%RETRY%H_T", "X", RequestCode.CHANGE_MESSAGE_INVISIBLETIME),
        _pull("%RETRY%H_T", "X"),
    ],
    ids=["pop", "ack", "change", "pull"],
)
def test_remoting_reads_of_another_groups_retry_topic_are_refused(cmd: RemotingCommand) -> None:
    with pytest.raises(AclRefusal, match="%RETRY%H_T is another consumer group's retry topic"):
        named(cmd)


def test_remoting_reads_of_the_groups_own_retry_topic_need_its_topic() -> None:
    assert named(_pop("%RETRY%X_T", "X")).perms == {"T": SUB, "%RETRY%X": SUB}
    assert named(_pull("%RETRY%X", "X")).perms == {"%RETRY%X": SUB}


# --------------------------------------------------------------------------- over gRPC


def _md() -> list[tuple[str, str]]:
    sig = hmac.new(b"looseSK1", DATE.encode(), hashlib.sha1).hexdigest()
    return [
        ("x-mq-date-time", DATE),
        ("authorization", f"MQv2-HMAC-SHA1 Credential=looseAK, SignedHeaders=x-mq-date-time, Signature={sig}"),
    ]


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    (tmp_path / "rmqhome" / "conf").mkdir(parents=True)
    (tmp_path / "rmqhome" / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    monkeypatch.setenv("ROCKETMQ_HOME", str(tmp_path / "rmqhome"))
    clock = rmqlog.ManualClock(NOW)
    with rmqlog.MessageStore.open(
        tmp_path / "store", small_store_config(store_host="127.0.0.1:10911"), clock=clock
    ) as store:
        store.create_topic("%RETRY%H_T", 1)
        store.wire.put_wire(
            pa.table(
                {"topic": ["%RETRY%H_T"], "queueId": [0], "body": [b"H's retry"], "properties": ["TAGS\x01a\x02"]}
            ),
            dispatch=True,
        )
        b = make_broker(store, clock=clock, acl_enable=True)
        b.topics.update(rmqlog.TopicConfig("%RETRY%H_T", 1, 1))
        yield b


def test_a_grpc_receive_of_another_groups_retry_topic_is_forbidden_and_pops_nothing(broker: Broker) -> None:
    req = svc.ReceiveMessageRequest(
        group=pb.Resource(name="X"),
        batch_size=32,
        message_queue=pb.MessageQueue(topic=pb.Resource(name="%RETRY%H_T"), id=0),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
    )
    req.invisible_duration.FromMilliseconds(10_000)
    req.long_polling_timeout.FromMilliseconds(0)

    async def body(c: Client, _: Any) -> Any:
        return await c.call("ReceiveMessage", req, metadata=_md())

    answer = serve(broker, body)
    (first,) = [r for r in answer if r.HasField("status")][:1]
    assert first.status.code == Code.FORBIDDEN and "another consumer group's retry topic" in first.status.message
    assert not any(r.HasField("message") for r in answer)
    assert broker.pop.inflight() == 0
