"""SQL92 property filters on the broker (RocketMQ 4.9.8's ``PullMessageProcessor`` with an
``ExpressionMessageFilter``, ``ConsumerFilterManager``, ``enablePropertyFilter``): pulls with
their own SQL92 subscription and pulls that use the heartbeat's, refusals in Java's order and
codes, the offset advancing past a window with no match; then the real client ali-ons (its
consumer subscribes with ``{expressionType: 'SQL92', subString}``) and our own PullConsumer
against ``rmqlog broker`` processes. The C++ client 1.0.1 (PyPI rocketmq 0.4.4) has no SQL92
subscription (its ``Subscribe`` takes a tag expression only), so it is not driven here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import rmqlog
from rmqnet.remoting import RequestCode, ResponseCode

from . import real_clients as rcl
from .broker_helpers import make_broker
from .brokerpull_support import FakePeer, open_store, request


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    clock = rmqlog.ManualClock(1_700_000_000_000)
    store = open_store(tmp_path / "store", clock)
    b = make_broker(store, clock, enable_property_filter=True)
    yield b
    store.close()


def put(broker: Any, n: int, *, start: int = 0, topic: str = "T") -> None:
    """``n`` messages on queue 0: property ``i`` = their number, ``color`` red on every 10th."""
    if topic not in broker.store.topics():
        broker.store.create_topic(topic, 4)
    props = [[("i", str(i)), *([("color", "red")] if i % 10 == 0 else [])] for i in range(start, start + n)]
    broker.store.put_batch(
        pa.table(
            {
                "topic": [topic] * n,
                "body": [f"m{i}".encode() for i in range(start, start + n)],
                "queueId": [0] * n,
                "properties": pa.array(props, pa.map_(pa.string(), pa.string())),
            }
        ),
        dispatch=True,
    )


def pull_req(
    offset: int = 0,
    *,
    expression: str | None = None,
    expression_type: str | None = "SQL92",
    sys_flag: int = 4,
    max_nums: int = 32,
    sub_version: int = 0,
    group: str = "G",
) -> Any:
    ext: dict[str, Any] = {
        "consumerGroup": group,
        "topic": "T",
        "queueId": "0",
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": str(sys_flag),
        "commitOffset": "0",
        "suspendTimeoutMillis": "15000",
        "subVersion": str(sub_version),
    }
    if expression is not None:
        ext["subscription"] = expression
    if expression_type is not None:
        ext["expressionType"] = expression_type
    return request(RequestCode.PULL_MESSAGE, ext)


def do_pull(broker: Any, req: Any) -> Any:
    res = broker.table.process(broker, FakePeer(), req)
    assert res is not None and not hasattr(res, "__await__")
    return res


def bodies(res: Any) -> list[str]:
    return [b.decode() for b in rmqlog.decode_records(res.body_bytes())["body"].to_pylist()]


def nxt(res: Any) -> int:
    return int(res.ext_fields["nextBeginOffset"])


# --------------------------------------------------------------------- pulls
def test_sql92_pull_sends_only_matching_records(broker: Any) -> None:
    put(broker, 100)
    res = do_pull(broker, pull_req(0, expression="color = 'red' AND i >= 20"))
    assert res.code == ResponseCode.SUCCESS
    assert bodies(res) == ["m20", "m30", "m40", "m50", "m60", "m70", "m80", "m90"]
    assert nxt(res) == 100
    # the count limit counts matches; the scan stops at the unit after the last one taken
    res = do_pull(broker, pull_req(0, expression="i BETWEEN 5 AND 50 AND color IS NULL", max_nums=3))
    assert bodies(res) == ["m5", "m6", "m7"] and nxt(res) == 8
    # the body is the stored records byte-exact, as for a tag pull
    tagless = do_pull(broker, pull_req(5, expression="*", expression_type="TAG", max_nums=3))
    assert res.body_bytes() == tagless.body_bytes()


def test_a_window_without_a_match_still_advances_the_offset(broker: Any) -> None:
    put(broker, 1000)
    res = do_pull(broker, pull_req(0, expression="i > 995"))
    # Java: NO_MATCHED_MESSAGE -> PULL_RETRY_IMMEDIATELY, nextBeginOffset past the units scanned
    assert res.code == ResponseCode.PULL_RETRY_IMMEDIATELY and res.remark == "NO_MATCHED_MESSAGE"
    assert 0 < nxt(res) < 1000 and not res.body_bytes()
    offset, rounds = nxt(res), 1
    while True:
        res = do_pull(broker, pull_req(offset, expression="i > 995"))
        rounds += 1
        if res.code == ResponseCode.SUCCESS:
            break
        assert res.code == ResponseCode.PULL_RETRY_IMMEDIATELY and nxt(res) > offset
        offset = nxt(res)
    assert bodies(res) == ["m996", "m997", "m998", "m999"] and nxt(res) == 1000 and rounds >= 2


def test_property_filter_off_is_refused_with_rocketmqs_code(broker: Any) -> None:
    put(broker, 3)
    broker.config = broker.config.replace(enable_property_filter=False)
    res = do_pull(broker, pull_req(0, expression="i > 1"))
    assert res.code == ResponseCode.SYSTEM_ERROR
    assert res.remark == "The broker does not support consumer to filter message by SQL92"
    # Java parses first: a malformed expression is 23 even with the switch off
    assert do_pull(broker, pull_req(0, expression="i >")).code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    # a tag pull is unaffected
    assert do_pull(broker, pull_req(0, expression="*", expression_type="TAG")).code == ResponseCode.SUCCESS


@pytest.mark.parametrize(
    "expression",
    [
        None,
        "",
        "i >",
        "i = NULL",
        "i > 'x'",
        "i BETWEEN 9 AND 1",
        "5 IN ('a')",
        "i = 1 j = 2",
        "i LIKE 'a%'",
        "(" * 1000 + "i = 1" + ")" * 1000,
        "i IN (" + ",".join(["'v'"] * 20000) + ")",
        "a > 0.0",
        "i != 1",
    ],
)
def test_malformed_sql92_is_subscription_parse_failed(broker: Any, expression: str | None) -> None:
    put(broker, 3)
    res = do_pull(broker, pull_req(0, expression=expression))
    assert res.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert res.remark == "parse the consumer's subscription failed"


def test_type_mismatches_match_nothing_rather_than_fail(broker: Any) -> None:
    put(broker, 30)
    # 'red' is no number: Java's evaluation throws for those messages, which then do not match
    res = do_pull(broker, pull_req(0, expression="color > 1 OR i = 3"))
    assert res.code == ResponseCode.SUCCESS and bodies(res) == ["m3"]
    res = do_pull(broker, pull_req(0, expression="color = TRUE"))  # Boolean.valueOf('red'): FALSE
    assert res.code == ResponseCode.PULL_RETRY_IMMEDIATELY


def test_other_expression_types_are_refused(broker: Any) -> None:
    put(broker, 3)
    res = do_pull(broker, pull_req(0, expression="i > 1", expression_type="sql92"))
    assert res.code == ResponseCode.SYSTEM_ERROR and "sql92" in res.remark


# ----------------------------------------------------------- heartbeat filters
def heartbeat(broker: Any, peer: Any, expression: str, version: int, *, kind: str = "SQL92") -> Any:
    body = json.dumps(
        {
            "clientID": "c1",
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": "G",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "unitMode": False,
                    "subscriptionDataSet": [
                        {
                            "topic": "T",
                            "subString": expression,
                            "tagsSet": [],
                            "codeSet": [],
                            "subVersion": version,
                            "classFilterMode": False,
                            "expressionType": kind,
                        }
                    ],
                }
            ],
        }
    ).encode()
    return broker.table.process(broker, peer, request(RequestCode.HEART_BEAT, body=body))


def test_heartbeat_sql92_is_used_by_pulls_without_their_own(broker: Any) -> None:
    put(broker, 50)
    peer = FakePeer()
    assert heartbeat(broker, peer, "color = 'red'", 1).code == ResponseCode.SUCCESS
    res = do_pull(broker, pull_req(0, sys_flag=0, expression_type=None, sub_version=1))
    assert res.code == ResponseCode.SUCCESS and bodies(res) == ["m0", "m10", "m20", "m30", "m40"]
    # a newer version replaces it
    assert heartbeat(broker, peer, "i = 7", 2).code == ResponseCode.SUCCESS
    res = do_pull(broker, pull_req(0, sys_flag=0, expression_type=None, sub_version=2))
    assert bodies(res) == ["m7"]
    # an older version does not
    heartbeat(broker, peer, "i = 8", 1)
    assert bodies(do_pull(broker, pull_req(0, sys_flag=0, expression_type=None, sub_version=2))) == ["m7"]


def test_heartbeat_with_a_malformed_sql92_then_pull_is_filter_data_not_exist(broker: Any) -> None:
    put(broker, 5)
    peer = FakePeer()
    # the heartbeat itself succeeds (Java logs the parse error); the pull then says the filter is missing
    assert heartbeat(broker, peer, "i >", 1).code == ResponseCode.SUCCESS
    res = do_pull(broker, pull_req(0, sys_flag=0, expression_type=None, sub_version=1))
    assert res.code == ResponseCode.FILTER_DATA_NOT_EXIST
    # a good one, then a newer bad one: the old is dropped, as FilterDataMapByTopic.register does
    heartbeat(broker, peer, "i = 1", 2)
    assert bodies(do_pull(broker, pull_req(0, sys_flag=0, expression_type=None, sub_version=2))) == ["m1"]
    heartbeat(broker, peer, "i = = 1", 3)
    res = do_pull(broker, pull_req(0, sys_flag=0, expression_type=None, sub_version=3))
    assert res.code == ResponseCode.FILTER_DATA_NOT_EXIST
    # and with the switch off, the refusal of the pull is Java's SYSTEM_ERROR
    heartbeat(broker, peer, "i = 1", 4)
    broker.config = broker.config.replace(enable_property_filter=False)
    assert (
        do_pull(broker, pull_req(0, sys_flag=0, expression_type=None, sub_version=4)).code == ResponseCode.SYSTEM_ERROR
    )


def test_sixty_kilobytes_of_dashes_are_refused_in_one_pass_by_pull_and_heartbeat(broker: Any, monkeypatch: Any) -> None:
    """Linear scanning on the wire: one 40-60 KB pull or heartbeat of ``-`` froze the broker 7-26 s (the tokenizer
    looked for a comment's line break from every ``-``), even with property filters off. The
    characters the scanner examines are counted: one pass at most, whatever the request."""
    from rmqlog.filter import sql92, tokens

    scanned: list[tokens.Scanner] = []

    class Counted(tokens.Scanner):
        def __init__(self, text: str) -> None:
            super().__init__(text)
            scanned.append(self)

    monkeypatch.setattr(sql92, "Scanner", Counted)
    put(broker, 3)
    dashes = "-" * 60_000
    for switch in (False, True):
        broker.config = broker.config.replace(enable_property_filter=switch)
        res = do_pull(broker, pull_req(0, expression=dashes))
        assert res.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert res.remark == "parse the consumer's subscription failed"
    peer = FakePeer()
    assert heartbeat(broker, peer, dashes, 1).code == ResponseCode.SUCCESS  # Java's: the filter is not kept
    res = do_pull(broker, pull_req(0, sys_flag=0, expression_type=None, sub_version=1))
    assert res.code == ResponseCode.FILTER_DATA_NOT_EXIST
    assert len(scanned) == 3
    assert all(s.visited <= len(dashes) + 1_000 for s in scanned), [s.visited for s in scanned]


# ------------------------------------------------------------- real clients
def test_ali_ons_sql92_subscription_and_our_pull_consumer(tmp_path: Path) -> None:
    rcl.require_ali_ons()
    from rmqnet.client import BrokerError, PullConsumer

    with rcl.cluster(tmp_path, topics={"SQ": 1}, conf={"enablePropertyFilter": "true"}) as c:
        consumer = c.ali_ons_consumer("ali-ons-sql92", "CG_SQL92", "SQ", sql92="shade = 'red' AND n > 3")
        consumer.wait_event("ready")
        consumer.wait_event("pulling")
        producer = c.ali_ons_producer()
        specs = [
            {**rcl.message("SQ", i), "properties": {"n": str(i), "shade": "red" if i % 2 else "blue"}}
            for i in range(12)
        ]
        rcl.send_all(producer, specs)
        got = consumer.wait_events("message", 4, "the matching messages")
        assert sorted(e["queueOffset"] for e in got) == [5, 7, 9, 11]
        assert all(e["properties"]["shade"] == "red" and int(e["properties"]["n"]) > 3 for e in got)
        # our own client: the same filter with expression_type SQL92
        pc = PullConsumer("CG_PY", c.namesrv_addr)
        try:
            r = pc.pull("SQ", 0, 0, expression_type="SQL92", subscription="shade = 'red' AND n > 3")
            assert r.status == "FOUND" and r.messages["queueOffset"].to_pylist() == [5, 7, 9, 11]
            r = pc.pull("SQ", 0, 0, expression_type="SQL92", subscription="n > 100")
            assert r.status == "NO_MATCHED_MSG" and r.next_begin_offset == 12
            with pytest.raises(BrokerError) as info:
                pc.pull("SQ", 0, 0, expression_type="SQL92", subscription="n >")
            assert info.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        finally:
            pc.close()


def test_held_sql92_pull_is_answered_only_by_a_matching_arrival(broker: Any) -> None:
    import asyncio

    from .brokerpull_support import run

    broker.store.create_topic("T", 4)

    async def go() -> None:
        req = pull_req(0, expression="i >= 3", sys_flag=6)
        fut = broker.table.process(broker, FakePeer(), req)
        assert isinstance(fut, asyncio.Future) and not fut.done()
        put(broker, 2)  # i = 0, 1: no match, the pull stays held
        broker.holds.notify_arrival("T", 0, 2)
        await asyncio.sleep(0)
        assert not fut.done()
        put(broker, 3, start=2)  # i = 2, 3, 4
        broker.holds.notify_arrival("T", 0, 5)
        res = await fut
        assert res.code == ResponseCode.SUCCESS and bodies(res) == ["m3", "m4"] and nxt(res) == 5

    run(go())
