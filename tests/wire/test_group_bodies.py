"""A consumer group's bodies (rmqnet/remoting/group_bodies.py), written by the client and read
by the broker with the same code: round trips, Java's form, refusals naming the field."""

from __future__ import annotations

import json

import pytest

from rmqnet.remoting import FieldError
from rmqnet.remoting.admin_bodies import QueueKey
from rmqnet.remoting.group_bodies import (
    MAX_QUEUES_PER_REQUEST,
    LockBatchBody,
    LockBodyError,
    decode_consumer_ids,
    decode_lock_ok,
    encode_consumer_ids,
    encode_lock_ok,
)

Q1, Q2 = QueueKey("T", "broker-a", 0), QueueKey("T", "broker-a", 1)


def test_a_lock_body_round_trips_in_fastjsons_form() -> None:
    body = LockBatchBody("G", "client@1", (Q1, Q2)).encode()
    assert body == (
        b'{"clientId":"client@1","consumerGroup":"G","mqSet":['
        b'{"brokerName":"broker-a","queueId":0,"topic":"T"},{"brokerName":"broker-a","queueId":1,"topic":"T"}]}'
    )
    assert LockBatchBody.decode(body) == LockBatchBody("G", "client@1", (Q1, Q2))


def test_repeated_queues_are_read_once_in_order() -> None:
    body = LockBatchBody("G", "c", (Q2, Q1, Q2)).encode()
    assert LockBatchBody.decode(body).mq_set == (Q2, Q1)


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        ([], "not a JSON object"),
        ({"consumerGroup": "G", "mqSet": []}, "clientId is None"),
        ({"clientId": "", "mqSet": []}, "clientId is ''"),
        ({"clientId": "c", "mqSet": {"a": 1}}, "mqSet is not a list"),
        ({"clientId": "c", "mqSet": [{"topic": ["T"], "brokerName": "b", "queueId": 0}]}, r"mqSet\[\].topic"),
        ({"clientId": "c", "mqSet": [{"topic": "T", "brokerName": "", "queueId": 0}]}, r"brokerName is ''"),
        ({"clientId": "c", "mqSet": [{"topic": "T", "brokerName": "b", "queueId": 2**31}]}, "not a queue id"),
        ({"clientId": "c", "mqSet": [{"topic": "T", "brokerName": "b", "queueId": True}]}, "not a queue id"),
    ],
)
def test_a_lock_body_not_of_its_shape_is_refused_naming_the_field(obj: object, problem: str) -> None:
    with pytest.raises(LockBodyError, match=problem):
        LockBatchBody.decode(json.dumps(obj).encode())


def test_a_lock_body_naming_too_many_queues_is_refused() -> None:
    mqs = [{"topic": "T", "brokerName": "b", "queueId": 0}] * (MAX_QUEUES_PER_REQUEST + 1)
    with pytest.raises(LockBodyError, match="more than"):
        LockBatchBody.decode(json.dumps({"clientId": "c", "mqSet": mqs}).encode())


def test_not_json_is_refused() -> None:
    with pytest.raises(LockBodyError, match="is not LockBatchRequestBody JSON"):
        LockBatchBody.decode(b"not json")


def test_the_lock_answer_round_trips() -> None:
    assert decode_lock_ok(encode_lock_ok([Q1, Q2])) == [Q1, Q2]
    assert decode_lock_ok(encode_lock_ok([])) == []
    with pytest.raises(FieldError, match="lockOKMQSet"):
        decode_lock_ok(b'{"lockOK":[]}')


def test_the_consumer_list_round_trips() -> None:
    assert decode_consumer_ids(encode_consumer_ids(["a", "b"])) == ["a", "b"]
    with pytest.raises(FieldError, match="consumerIdList"):
        decode_consumer_ids(b'{"consumerIdList":"a"}')
