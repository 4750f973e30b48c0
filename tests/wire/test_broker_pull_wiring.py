"""The pull side in the real :class:`rmqnet.broker.broker.Broker` (its processor table):
its codes and services registered, the TopicManager's %RETRY% creation, and a held pull woken
by a send through the broker's own send processor."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmqlog
from rmqnet.broker.broker import Broker
from rmqnet.broker.config import BrokerConfig
from rmqnet.broker.consumers import ClientRegistry
from rmqnet.broker.holds import PullHoldService
from rmqnet.remoting import RequestCode, ResponseCode

from .broker_helpers import send_header, send_request
from .brokerpull_support import FakePeer, open_store, request, run, segment_bytes

PULL_SIDE = {11, 12, 14, 15, 29, 30, 31, 32, 33, 34, 35, 38}


def make(tmp_path: Path, **changes: Any) -> Broker:
    store = open_store(tmp_path / "store", rmqlog.ManualClock(1_700_000_000_000))
    config = BrokerConfig(broker_name="broker-a", store=store.config).replace(**changes)
    return Broker(store, config, clock=rmqlog.ManualClock(1_700_000_000_000))


def pull_req(topic: str, offset: int, timeout_ms: int = 15000) -> Any:
    return request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "CG",
            "topic": topic,
            "queueId": 0,
            "queueOffset": offset,
            "maxMsgNums": 32,
            "sysFlag": 6,
            "commitOffset": 0,
            "suspendTimeoutMillis": timeout_ms,
            "subscription": "*",
            "subVersion": 0,
        },
    )


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    b = make(tmp_path_factory.mktemp("fuzz"))
    b.store.create_topic("T", 4)
    b.store.put("T", b"one", tags="A", keys=["k"])
    yield b
    assert b.store.verify().ok, "requests from the network harmed the store"
    b.store.close()


def test_codes_and_services_installed(tmp_path: Path) -> None:
    b = make(tmp_path)
    try:
        assert set(b.table.codes()) >= PULL_SIDE
        assert any(isinstance(s, PullHoldService) for s in b.services)
        assert any(isinstance(s, ClientRegistry) for s in b.services)
        b.run_services()  # a round of every service, the pull side's included, raises nothing
    finally:
        b.store.close()


def test_heartbeat_creates_retry_through_the_topic_manager(tmp_path: Path) -> None:
    b = make(tmp_path)
    try:
        body = json.dumps({"clientID": "c1", "consumerDataSet": [{"groupName": "CG", "subscriptionDataSet": []}]})
        assert b.table.process(b, FakePeer(), request(RequestCode.HEART_BEAT, body=body.encode())).code == 0
        tc = b.topics.get("%RETRY%CG")
        assert tc is not None and tc.read_queue_nums == 1 and tc.write_queue_nums == 1
    finally:
        b.store.close()


def test_held_pull_woken_by_a_send_through_the_broker(tmp_path: Path) -> None:
    b = make(tmp_path)
    b.store.create_topic("T", 4)

    async def go() -> None:
        consumer, producer = FakePeer(), FakePeer()
        fut = b.table.process(b, consumer, pull_req("T", 0))
        assert isinstance(fut, asyncio.Future) and not fut.done()
        sent = b.table.process(b, producer, send_request(send_header("T", queue_id=0), b"over the wire"))
        ack = await sent if asyncio.isfuture(sent) or asyncio.iscoroutine(sent) else sent
        assert ack.code == ResponseCode.SUCCESS
        # the send's put dispatched itself (its units from its own fields, no dispatcher
        # round): its arrival signal has woken the held pull already
        assert b.store.parts.dispatcher.position() == b.store.published_tail()
        await asyncio.sleep(0)
        assert fut.done()
        res = await fut
        assert res.code == ResponseCode.SUCCESS
        table = rmqlog.decode_records(res.body_bytes())
        assert table["body"].to_pylist() == [b"over the wire"]
        offset = table["commitLogOffset"][0].as_py()
        assert res.body_bytes() == segment_bytes(tmp_path / "store", offset, len(res.body_bytes()))

    try:
        run(go())
    finally:
        b.store.close()


def test_a_stop_answers_the_held_pulls_and_holds_no_new_one(tmp_path: Path) -> None:
    b = make(tmp_path)
    b.store.create_topic("T", 4)

    async def go() -> None:
        fut = b.table.process(b, FakePeer(), pull_req("T", 0))
        assert isinstance(fut, asyncio.Future)
        b.begin_stop()  # what the process calls first on SIGTERM: the held pulls are answered
        answered = await fut
        assert b.stopping, "the broker's own begin_stop ran"
        res = b.table.process(b, FakePeer(), pull_req("T", 0))
        assert res.code == ResponseCode.PULL_NOT_FOUND  # not held: answered at once
        assert answered.code == ResponseCode.PULL_NOT_FOUND and int(answered.ext_fields["nextBeginOffset"]) == 0
        assert len(b.holds) == 0

    try:
        run(go())
    finally:
        b.store.close()


FIELDS = [
    "consumerGroup",
    "topic",
    "queueId",
    "queueOffset",
    "maxMsgNums",
    "sysFlag",
    "commitOffset",
    "suspendTimeoutMillis",
    "subscription",
    "subVersion",
    "expressionType",
    "clientID",
    "producerGroup",
    "timestamp",
    "offset",
    "key",
    "maxNum",
    "beginTimestamp",
    "endTimestamp",
    "_UNIQUE_KEY_QUERY",
]
_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 70), 1 << 70),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.sampled_from(["T", "0", "1", "-1", "*", "A || B", "%RETRY%G", "../x"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
_bodies = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(
        [
            b"{}",
            b"[]",
            b"null",
            b'{"clientID": 5}',
            b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"topic":7}]}]}',
        ]
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    code=st.sampled_from(sorted(PULL_SIDE)),
    ext=st.dictionaries(st.sampled_from(FIELDS), _values, max_size=12),
    body=_bodies,
    oneway=st.booleans(),
)
def test_any_request_is_answered_with_a_code_never_an_exception(
    shared_broker: Broker, code: int, ext: dict[str, Any], body: bytes, oneway: bool
) -> None:
    """Whatever a peer puts in the fields and body of the pull side's requests: an answer with
    a response code (a oneway request: none), never an exception, the store unharmed."""
    res = shared_broker.table.process(shared_broker, FakePeer(), request(code, ext, body, oneway=oneway))
    if oneway:
        assert res is None
    else:
        assert res is not None and not asyncio.isfuture(res), "nothing here is held: no loop runs"
        assert res.is_response and res.opaque is not None and int(res.code) >= 0
