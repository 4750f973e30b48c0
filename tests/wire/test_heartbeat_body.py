"""HEART_BEAT's body read and written in one place (rmqnet.remoting.heartbeat): what the
clients write the broker reads back; a body that is not HeartbeatData is refused naming the
field, by the handler and by the ACL in the same words."""

from __future__ import annotations

import json

import pytest

from rmqnet.remoting.heartbeat import ConsumerData, HeartbeatData, HeartbeatError, Subscription


def test_what_a_client_writes_reads_back() -> None:
    data = HeartbeatData(
        "c1",
        ("PG",),
        (
            ConsumerData(
                "G",
                "CONSUME_ACTIVELY",
                "CLUSTERING",
                "CONSUME_FROM_LAST_OFFSET",
                False,
                (Subscription("T", "a || b", "TAG", 3, ("a", "b")),),
            ),
        ),
    )
    assert HeartbeatData.decode(data.encode()) == data
    body = json.loads(data.encode())
    assert body["consumerDataSet"][0]["subscriptionDataSet"][0] == {
        "topic": "T",
        "subString": "a || b",
        "tagsSet": ["a", "b"],
        "codeSet": [],
        "subVersion": 3,
        "classFilterMode": False,
        "expressionType": "TAG",
    }
    assert body["producerDataSet"] == [{"groupName": "PG"}]


def test_javas_defaults_and_lenient_values() -> None:
    body = {
        "clientID": "c",
        "consumerDataSet": [
            {"groupName": "G", "unitMode": "true", "subscriptionDataSet": [{"topic": "T", "subVersion": "7"}]}
        ],
    }
    got = HeartbeatData.decode(json.dumps(body).encode())
    assert got.producer_groups == () and got.consumers[0].unit_mode is True
    assert got.consumers[0].subscriptions == (Subscription("T", "*", "TAG", 7, ()),)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"{not json", "HeartbeatData"),
        (b"[]", "not a JSON object"),
        (json.dumps({"producerDataSet": []}).encode(), "HeartbeatData.clientID is None"),
        (json.dumps({"clientID": "c", "producerDataSet": [1]}).encode(), "producerDataSet is not a list of objects"),
        (
            json.dumps({"clientID": "c", "consumerDataSet": [{"groupName": 5}]}).encode(),
            "consumerDataSet[].groupName is 5",
        ),
        (
            json.dumps(
                {
                    "clientID": "c",
                    "consumerDataSet": [{"groupName": "G", "subscriptionDataSet": [{"topic": "T", "subVersion": 1.5}]}],
                }
            ).encode(),
            "subVersion of 'T' is 1.5",
        ),
    ],
)
def test_a_body_that_is_not_heartbeat_data_is_refused_naming_it(body: bytes, words: str) -> None:
    with pytest.raises(HeartbeatError, match=words.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        HeartbeatData.decode(body)
