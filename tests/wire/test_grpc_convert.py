"""rmqnet.grpc.convert on its own: any gRPC message either is refused with a typed code or
becomes a properties string that reads back as exactly what was sent (no separator slips in,
no system name is shadowed), and a stored message reads back as the client sent it."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from rmqnet.broker.send import parse_properties
from rmqnet.grpc.convert import _NOT_USER, Code, GrpcStatusError, message_of, outgoing
from rmqnet.grpc.v2 import definition_pb2 as pb

TEXT = st.text(st.characters(codec="utf-8"), max_size=20)
#: every code outgoing may refuse with (the typed refusals of docs/broker.md)
REFUSALS = {
    Code.MESSAGE_CORRUPTED,
    Code.ILLEGAL_TOPIC,
    Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    Code.MESSAGE_PROPERTIES_TOO_LARGE,
    Code.ILLEGAL_MESSAGE_TAG,
    Code.ILLEGAL_MESSAGE_KEY,
    Code.ILLEGAL_MESSAGE_ID,
    Code.ILLEGAL_MESSAGE_GROUP,
    Code.MESSAGE_BODY_EMPTY,
    Code.MESSAGE_BODY_TOO_LARGE,
    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    Code.BAD_REQUEST,
}


@st.composite
def messages(draw: st.DrawFn) -> pb.Message:
    sp = pb.SystemProperties(
        message_id=draw(TEXT),
        keys=draw(st.lists(TEXT, max_size=3)),
        message_type=draw(st.sampled_from([pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION])),
    )
    if draw(st.booleans()):
        sp.tag = draw(TEXT)
    if draw(st.booleans()):
        sp.message_group = draw(TEXT)
    if draw(st.booleans()):
        sp.delivery_timestamp.FromMilliseconds(draw(st.integers(0, 2**41)))
    if draw(st.booleans()):
        sp.trace_context = draw(TEXT)
    user = draw(st.dictionaries(st.one_of(TEXT, st.sampled_from([*sorted(_NOT_USER), "RMQLOG_X"])), TEXT, max_size=4))
    return pb.Message(
        topic=pb.Resource(name=draw(st.sampled_from(["T1", "T1", "bad topic"]))),
        body=draw(st.binary(max_size=40)),
        user_properties=user,
        system_properties=sp,
    )


@settings(max_examples=400, deadline=None)
@given(messages())
def test_a_message_is_refused_typed_or_its_properties_read_back_exactly(msg: pb.Message) -> None:
    try:
        out = outgoing(msg, topic="T1", max_body_size=32)
    except GrpcStatusError as exc:
        assert exc.code in REFUSALS and exc.message
        return
    props = parse_properties(out.properties)
    sp = msg.system_properties
    assert props["UNIQ_KEY"] == sp.message_id and props["PGROUP"] == "T1"
    assert {k: props[k] for k in msg.user_properties} == dict(msg.user_properties)
    assert props.get("TAGS") == (sp.tag if sp.HasField("tag") else None)
    assert props.get("KEYS") == (" ".join(sp.keys) if sp.keys else None)
    assert props.get("__SHARDINGKEY") == (sp.message_group if sp.HasField("message_group") else None)
    assert ("TRAN_MSG" in props) == (sp.message_type == pb.TRANSACTION)
    # each entry is one name and one value: the string holds exactly the entries read back
    assert out.properties.count("\x02") == len(props) and out.properties.count("\x01") == len(props)
    assert out.body == msg.body and 0 < len(out.body) <= 32
    # and the message a client would read back carries what was sent
    back = message_of(
        {"topic": "T1", "body": out.body, "properties": list(props.items())}, message_type=sp.message_type
    )
    assert dict(back.user_properties) == dict(msg.user_properties)
    assert back.system_properties.message_id == sp.message_id
    assert back.system_properties.message_group == (sp.message_group if sp.HasField("message_group") else "")


def test_a_stored_message_reads_back_as_sent() -> None:
    msg = pb.Message(
        topic=pb.Resource(name="T1"),
        body=b"payload",
        user_properties={"color": "red"},
        system_properties=pb.SystemProperties(
            message_id="AB" * 16, tag="TagA", keys=["k1", "k2"], message_group="g", message_type=pb.FIFO
        ),
    )
    out = outgoing(msg, topic="T1", max_body_size=100)
    stored_props = {**parse_properties(out.properties), "CLUSTER": "DefaultCluster"}
    row = {
        "topic": "T1",
        "queueId": 2,
        "queueOffset": 7,
        "body": out.body,
        "properties": list(stored_props.items()),
        "reconsumeTimes": 1,
        "sysFlag": 0,
        "bornHost": "127.0.0.1:5",
        "storeHost": "127.0.0.1:10911",
    }
    back = message_of(row, message_type=pb.FIFO)
    sp = back.system_properties
    assert (back.topic.name, back.body, dict(back.user_properties)) == ("T1", b"payload", {"color": "red"})
    assert (sp.message_id, sp.tag, list(sp.keys), sp.message_group) == ("AB" * 16, "TagA", ["k1", "k2"], "g")
    assert (sp.queue_id, sp.queue_offset, sp.delivery_attempt) == (2, 7, 2)
    assert sp.body_digest.type == pb.MD5 and sp.body_digest.checksum == hashlib.md5(b"payload").hexdigest().upper()


def test_a_user_property_may_not_take_a_name_the_conversion_sets() -> None:
    """``__SHARDINGKEY`` (the message group) and ``TRACE_CONTEXT`` are not in RocketMQ's list of
    system names, but the conversion sets them: a user property of that name would become the
    message's group (or lose to it), so it is refused; so is the store's ``RMQLOG_`` prefix."""
    for name in ("__SHARDINGKEY", "TRACE_CONTEXT", "CHECK_IMMUNITY_TIME_IN_SECONDS", "RMQLOG_WRITER", "UNIQ_KEY"):
        msg = pb.Message(
            topic=pb.Resource(name="T1"),
            body=b"b",
            user_properties={name: "x"},
            system_properties=pb.SystemProperties(message_id="A" * 32),
        )
        try:
            outgoing(msg, topic="T1", max_body_size=10)
        except GrpcStatusError as exc:
            assert exc.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY and name in exc.message
        else:
            raise AssertionError(f"user property {name} accepted")
