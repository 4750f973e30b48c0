"""RocketMQ 5's gRPC authorization on the broker's endpoint (rmqnet.broker.acl_grpc over the
remoting ACL's accounts): the signature against a vector of the clients' algorithm, the
``authorization`` header's forms, then calls through a grpc.aio channel with the right key, an
unknown key, a wrong secret, no header, no date (``UNAUTHORIZED``) and without a permission
(``FORBIDDEN``), each refusal reading and changing nothing: no message stored, popped, acked,
changed, ended, no producer registered."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import small_store_config

import rmqlog
from rmqnet.broker.acl import AccessValidator, AclRefusal
from rmqnet.broker.acl_files import Account, AclConfig
from rmqnet.broker.acl_grpc import authenticate, parse_authorization, signature
from rmqnet.broker.broker import Broker
from rmqnet.broker.grpc_producers import GrpcProducers
from rmqnet.broker.transactions import HALF_TOPIC
from rmqnet.grpc.convert import Code
from rmqnet.grpc.v2 import definition_pb2 as pb
from rmqnet.grpc.v2 import service_pb2 as svc
from wire.broker_helpers import make_broker
from wire.grpc_helpers import Client, serve

NOW = 1_700_000_000_000
DATE = "20261207T140000Z"

PLAIN_ACL = """
globalWhiteRemoteAddresses:
  - 10.10.103.*

accounts:
  - accessKey: producerAK
    secretKey: producerSK
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [T1=PUB, T2=SUB]

  - accessKey: consumerAK
    secretKey: consumerSK
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [T1=SUB]
    groupPerms: [G=SUB, H=DENY]

  - accessKey: otherAK
    secretKey: otherSK1
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [T2=PUB]

  - accessKey: localAK
    secretKey: localSK1
    whiteRemoteAddress: 127.0.0.1
"""


def md(
    key: str | None = "producerAK", secret: str = "producerSK", date: str | None = DATE, credential: str | None = None
) -> list[tuple[str, str]]:
    """The metadata a RocketMQ 5 client sends, signed here with ``hmac`` directly."""
    out = [("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2")]
    if date is not None:
        out.append(("x-mq-date-time", date))
    if key is not None:
        sig = hmac.new(secret.encode(), (date or "").encode(), hashlib.sha1).hexdigest()
        out.append(
            (
                "authorization",
                f"MQv2-HMAC-SHA1 Credential={credential if credential is not None else key}, "
                f"SignedHeaders=x-mq-date-time, Signature={sig}",
            )
        )
    return out


PRODUCER, CONSUMER, OTHER = md(), md("consumerAK", "consumerSK"), md("otherAK", "otherSK1")


@pytest.fixture
def clock() -> rmqlog.ManualClock:
    return rmqlog.ManualClock(NOW)


@pytest.fixture
def store(tmp_path: Path, clock: rmqlog.ManualClock) -> Iterator[rmqlog.MessageStore]:
    with rmqlog.MessageStore.open(
        tmp_path / "store", small_store_config(store_host="127.0.0.1:10911"), clock=clock
    ) as s:
        yield s


def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str = PLAIN_ACL) -> None:
    (tmp_path / "rmqhome" / "conf").mkdir(parents=True)
    (tmp_path / "rmqhome" / "conf" / "plain_acl.yml").write_text(text)
    monkeypatch.setenv("ROCKETMQ_HOME", str(tmp_path / "rmqhome"))


@pytest.fixture
def broker(
    store: rmqlog.MessageStore, clock: rmqlog.ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Broker:
    home(tmp_path, monkeypatch)
    b = make_broker(store, clock=clock, acl_enable=True)
    for topic in ("T1", "T2"):
        b.topics.update(rmqlog.TopicConfig(topic, 1, 1))
    return b


def stored(store: rmqlog.MessageStore, topic: str) -> list[dict[str, Any]]:
    store.dispatch()
    return store.read_queue(topic, 0, 0, 1 << 40).to_pylist() if topic in store.topics() else []


def message(topic: str = "T1", msg_id: str = "A" * 32, kind: int = pb.NORMAL) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=b"hello",
        system_properties=pb.SystemProperties(message_id=msg_id, message_type=kind),
    )  # type: ignore[arg-type]


def send_req(topic: str = "T1", kind: int = pb.NORMAL) -> svc.SendMessageRequest:
    return svc.SendMessageRequest(messages=[message(topic, kind=kind)])


def receive_req(group: str = "G", topic: str = "T1") -> svc.ReceiveMessageRequest:
    req = svc.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        batch_size=32,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
    )
    req.invisible_duration.FromMilliseconds(10_000)
    req.long_polling_timeout.FromMilliseconds(0)
    return req


def calls(broker: Broker, *items: tuple[str, Any, Any]) -> list[Any]:
    """Each ``(method, request, metadata)`` called in order over one channel."""

    async def body(c: Client, _: Any) -> list[Any]:
        return [await c.call(method, request, metadata=metadata) for method, request, metadata in items]

    return serve(broker, body)


def status_of(answer: Any) -> Any:
    return answer[0].status if isinstance(answer, list) else answer.status


# ------------------------------------------------------------------------ the signature


def test_the_signature_is_the_clients_known_vector() -> None:
    # rocketmq-python-client 5.1.2's Signature.sign("12345678", "20210309T195445Z"), run once
    vector = "d562e74c663b361c5ee9ef059e28469ac198adcf"
    assert signature("12345678", "20210309T195445Z") == bytes.fromhex(vector)
    validator = AccessValidator(AclConfig({"RocketMQ": Account("RocketMQ", "12345678")}))

    def caller(sig: str, date: str = "20210309T195445Z") -> Any:
        return authenticate(
            validator,
            [
                ("x-mq-date-time", date),
                ("authorization", f"MQv2-HMAC-SHA1 Credential=RocketMQ, SignedHeaders=x-mq-date-time, Signature={sig}"),
            ],
            "127.0.0.1:5",
        )

    # the Python client's lower-case hex and Node.js's upper-case are the same signature
    assert caller(vector).account.access_key == caller(vector.upper()).account.access_key == "RocketMQ"
    with pytest.raises(AclRefusal, match="Check signature failed for accessKey=RocketMQ"):
        caller(vector, date="20210309T195446Z")
    assert parse_authorization("MQv2-HMAC-SHA1 Credential=ak/2026/region, Signature=00").access_key == "ak"
    assert (
        parse_authorization("MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=").access_key is None
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("MQv2-HMAC-SHA1", "authorization header is incorrect"),
        ("MQv2-HMAC-SHA1 Credential", "keyValues length is incorrect"),
        ("MQv2-HMAC-SHA1 Credential=ak, Signature=xyz1", "not hexadecimal"),
        ("MQv2-HMAC-SHA1 Credential=ak, Signature=abc", "not hexadecimal"),
    ],
)
def test_a_malformed_authorization_header_is_refused_naming_why(text: str, says: str) -> None:
    with pytest.raises(AclRefusal, match=says):
        parse_authorization(text)


# --------------------------------------------------------------------- authentication


def test_the_right_key_routes_and_sends(broker: Broker, store: rmqlog.MessageStore) -> None:
    route, sent = calls(
        broker,
        ("QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name="T1")), PRODUCER),
        ("SendMessage", send_req(), PRODUCER),
    )
    assert route.status.code == Code.OK and route.message_queues
    assert sent.status.code == Code.OK
    assert [r["body"] for r in stored(store, "T1")] == [b"hello"]


@pytest.mark.parametrize(
    ("metadata", "says"),
    [
        (md("nobodyAK", "producerSK"), "No acl config for nobodyAK"),
        (md(secret="wrongSK1"), "Check signature failed for accessKey=producerAK"),
        (md(None), "No accessKey is configured"),
        (md(credential=""), "No accessKey is configured"),  # the Python client without credentials
        (md(date=None), "Check signature failed for accessKey=producerAK"),
        ([("x-mq-date-time", DATE), ("authorization", "MQv2-HMAC-SHA1")], "authorization header is incorrect"),
    ],
)
def test_a_call_not_authenticated_is_unauthorized_and_stores_nothing(
    broker: Broker, store: rmqlog.MessageStore, metadata: Any, says: str
) -> None:
    sent, route, received = calls(
        broker,
        ("SendMessage", send_req(), metadata),
        ("QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name="T1")), metadata),
        ("ReceiveMessage", receive_req(), metadata),
    )
    for answer in (sent, route, received):
        assert status_of(answer).code == Code.UNAUTHORIZED and says in status_of(answer).message
    assert stored(store, "T1") == []


def test_a_signature_of_another_date_is_unauthorized(broker: Broker, store: rmqlog.MessageStore) -> None:
    signed = md(date="20261207T140001Z")
    replayed = [(k, DATE if k == "x-mq-date-time" else v) for k, v in signed]
    (sent,) = calls(broker, ("SendMessage", send_req(), replayed))
    assert sent.status.code == Code.UNAUTHORIZED
    assert stored(store, "T1") == []


def test_white_listed_addresses_need_no_signature(
    broker: Broker,
    store: rmqlog.MessageStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    clock: rmqlog.ManualClock,
) -> None:
    # the account's whiteRemoteAddress (127.0.0.1): no signature, no perm check, as on remoting
    (sent,) = calls(broker, ("SendMessage", send_req("T2"), [("authorization", "MQv2-HMAC-SHA1 Credential=localAK")]))
    assert sent.status.code == Code.OK and len(stored(store, "T2")) == 1
    # a global white list: no key at all
    home(tmp_path / "global", monkeypatch, "globalWhiteRemoteAddresses: [127.0.0.*]\naccounts: []\n")
    b = make_broker(store, clock=clock, acl_enable=True)
    b.topics.update(rmqlog.TopicConfig("T2", 1, 1))
    (sent,) = calls(b, ("SendMessage", send_req("T2"), None))
    assert sent.status.code == Code.OK and len(stored(store, "T2")) == 2


# ---------------------------------------------------------------------- authorization


def test_a_send_without_pub_is_forbidden_and_stores_nothing(broker: Broker, store: rmqlog.MessageStore) -> None:
    (t2,) = calls(broker, ("SendMessage", send_req("T2"), PRODUCER))  # T2: SUB only
    (route,) = calls(
        broker, ("QueryRoute", svc.QueryRouteRequest(topic=pb.Resource(name="T1")), md("otherAK", "otherSK1"))
    )
    assert t2.status.code == Code.FORBIDDEN and "topic:T2" in t2.status.message
    assert route.status.code == Code.FORBIDDEN and "topic:T1" in route.status.message
    assert stored(store, "T2") == []


def test_receive_ack_and_change_need_the_group_and_the_topic(broker: Broker, store: rmqlog.MessageStore) -> None:
    calls(broker, ("SendMessage", send_req(), PRODUCER))
    denied_group, denied_topic = calls(
        broker, ("ReceiveMessage", receive_req("H"), CONSUMER), ("ReceiveMessage", receive_req("G"), PRODUCER)
    )
    assert status_of(denied_group).code == Code.FORBIDDEN and "group:H" in status_of(denied_group).message
    assert status_of(denied_topic).code == Code.FORBIDDEN
    assert broker.pop.inflight() == 0  # nothing popped by the refused receives
    (got,) = calls(broker, ("ReceiveMessage", receive_req("G"), CONSUMER))
    (msg,) = [r.message for r in got if r.HasField("message")]
    handle = msg.system_properties.receipt_handle
    ack = svc.AckMessageRequest(
        group=pb.Resource(name="G"),
        topic=pb.Resource(name="T1"),
        entries=[svc.AckMessageEntry(message_id=msg.system_properties.message_id, receipt_handle=handle)],
    )
    change = svc.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="G"),
        topic=pb.Resource(name="T1"),
        receipt_handle=handle,
        message_id=msg.system_properties.message_id,
    )
    change.invisible_duration.FromMilliseconds(20_000)
    refused_ack, refused_change = calls(
        broker, ("AckMessage", ack, PRODUCER), ("ChangeInvisibleDuration", change, OTHER)
    )
    assert refused_ack.status.code == refused_change.status.code == Code.FORBIDDEN
    assert broker.pop.inflight("G") == 1  # neither acked nor changed: the handle still acks
    (acked,) = calls(broker, ("AckMessage", ack, CONSUMER))
    assert acked.status.code == Code.OK and broker.pop.inflight("G") == 0


def test_heartbeat_and_query_assignment_need_the_consumer_group(broker: Broker) -> None:
    hb = svc.HeartbeatRequest(group=pb.Resource(name="H"), client_type=pb.SIMPLE_CONSUMER)
    qa = svc.QueryAssignmentRequest(topic=pb.Resource(name="T1"), group=pb.Resource(name="H"))
    producer_hb = svc.HeartbeatRequest(client_type=pb.PRODUCER)
    a, b, c, d = calls(
        broker,
        ("Heartbeat", hb, CONSUMER),
        ("QueryAssignment", qa, CONSUMER),
        ("Heartbeat", producer_hb, PRODUCER),
        (
            "QueryAssignment",
            svc.QueryAssignmentRequest(topic=pb.Resource(name="T1"), group=pb.Resource(name="G")),
            CONSUMER,
        ),
    )
    assert a.status.code == b.status.code == Code.FORBIDDEN
    assert c.status.code == d.status.code == Code.OK


def test_telemetry_authorizes_each_settings_command(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[list[str]] = []
    register = GrpcProducers.register

    def spy(self: GrpcProducers, client_id: str, language: str, peer: Any, settings: pb.Settings) -> None:
        registered.append([t.name for t in settings.publishing.topics])
        register(self, client_id, language, peer, settings)

    monkeypatch.setattr(GrpcProducers, "register", spy)

    def pub(topic: str) -> svc.TelemetryCommand:
        return svc.TelemetryCommand(
            settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=topic)]))
        )

    sub = svc.TelemetryCommand(
        settings=pb.Settings(
            client_type=pb.SIMPLE_CONSUMER,
            subscription=pb.Subscription(
                group=pb.Resource(name="G"), subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="T1"))]
            ),
        )
    )

    async def body(c: Client, _: Any) -> Any:
        return (
            await c.telemetry([pub("T1")], metadata=PRODUCER),
            await c.telemetry([pub("T2")], metadata=PRODUCER),
            await c.telemetry([sub], metadata=CONSUMER),
            await c.telemetry([sub], metadata=PRODUCER),
            await c.telemetry([svc.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER))], metadata=PRODUCER),
        )

    ok, denied, sub_ok, sub_denied, neither = serve(broker, body)
    assert ok[0].status.code == Code.OK and ok[0].HasField("settings")
    assert sub_ok[0].status.code == Code.OK and sub_ok[0].HasField("settings")
    for refused in (denied, sub_denied, neither):
        assert len(refused) == 1 and refused[0].status.code == Code.FORBIDDEN and not refused[0].HasField("settings")
    assert "publishing or subscription" in neither[0].status.message
    assert registered == [["T1"]]  # the refused producers were not registered for the check-back


def test_end_transaction_needs_pub_and_the_halfs_own_topic(broker: Broker, store: rmqlog.MessageStore) -> None:
    (half,) = calls(broker, ("SendMessage", send_req(kind=pb.TRANSACTION), PRODUCER))
    (entry,) = half.entries

    def end(topic: str) -> svc.EndTransactionRequest:
        return svc.EndTransactionRequest(
            topic=pb.Resource(name=topic),
            message_id=entry.message_id,
            transaction_id=entry.transaction_id,
            resolution=pb.COMMIT,
            source=pb.SOURCE_CLIENT,
        )

    # no PUB on T1; then PUB on T2 naming T1's half (the half's producer group is T1: the
    # remoting END_TRANSACTION rule, checked by the ACL hook for the caller)
    no_pub, other_half = calls(broker, ("EndTransaction", end("T1"), CONSUMER), ("EndTransaction", end("T2"), OTHER))
    assert no_pub.status.code == other_half.status.code == Code.FORBIDDEN
    assert "producerGroup T2" in other_half.status.message
    assert stored(store, "T1") == [] and len(stored(store, HALF_TOPIC)) == 1
    (ok,) = calls(broker, ("EndTransaction", end("T1"), PRODUCER))
    assert ok.status.code == Code.OK and len(stored(store, "T1")) == 1


def test_a_send_naming_a_light_message_queue_needs_its_pub(broker: Broker, store: rmqlog.MessageStore) -> None:
    req = send_req()
    req.messages[0].user_properties["INNER_MULTI_DISPATCH"] = "%LMQ%x"  # T1 PUB, %LMQ%x none
    (sent,) = calls(broker, ("SendMessage", req, PRODUCER))
    assert sent.status.code == Code.FORBIDDEN and "topic:%LMQ%x" in sent.status.message
    assert stored(store, "T1") == []
