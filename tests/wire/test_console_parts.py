"""The console's parts without a cluster: request values checked, bodies shown (text, JSON,
hex, cut at 64 KiB), topics sorted into kinds, paging, the charts' bounded history, and a
broker that cannot be reached shown as a page naming it."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp.test_utils import TestClient, TestServer

from rmqlog import ManualClock
from rmqnet.console import BadRequest, ConsoleApp, WireBackend, make_app
from rmqnet.console.backend import (
    CONSUMED_BY_MAX,
    MAX_BODY_SHOWN,
    ConsoleBackend,
    body_views,
    int_arg,
    jsonl_line,
    text_arg,
    time_arg,
    topic_arg,
)
from rmqnet.console.history import MAX_SERIES, History
from rmqnet.console.pages import rates, topic_kind


def test_values_are_checked_naming_them() -> None:
    assert topic_arg("Orders_1") == "Orders_1" and int_arg("count", "100", 1, 100) == 100
    assert time_arg("begin", "1970-01-01T00:00:01") == 1000
    for call, words in (
        (lambda: topic_arg("a b"), "topic"),
        (lambda: topic_arg(""), "topic is empty"),
        (lambda: int_arg("count", "101", 1, 100), "count"),
        (lambda: int_arg("q", "1e3", 0, 9), "q"),
        (lambda: int_arg("q", "٣", 0, 9), "q"),  # not an ASCII digit
        (lambda: time_arg("end", "soon"), "end"),
        (lambda: text_arg("key", "a\nb"), "key"),
        (lambda: text_arg("key", "x" * 1025), "key"),
    ):
        with pytest.raises(BadRequest, match=words):
            call()


def test_bodies_as_text_json_and_hex() -> None:
    v = body_views(b'{"a": [1, 2]}')
    assert v["bodyText"] == '{"a": [1, 2]}' and json.loads(v["bodyJson"]) == {"a": [1, 2]} and "\n" in v["bodyJson"]
    assert v["bodyHex"].startswith("7b 22 61") and (v["bodySize"], v["bodyCut"]) == (13, False)
    raw = body_views(b"\xff\xfeplain")
    assert raw["bodyJson"] is None and raw["bodyText"] == "\ufffd\ufffdplain" and raw["bodyHex"].startswith("ff fe")
    big = body_views(b"[" + b"1," * MAX_BODY_SHOWN + b"1]")
    assert big["bodyCut"] and big["bodyJson"] is None and len(big["bodyText"]) == MAX_BODY_SHOWN
    line = json.loads(jsonl_line({"topic": "T", "bodyText": "x", "_body": b"?"}, b"\xff"))
    assert line == {"topic": "T", "bodyHex": "ff"}  # a body that is not UTF-8 downloads as hex, whole


def test_topic_kinds() -> None:
    assert [
        topic_kind(t)
        for t in (
            "orders",
            "%RETRY%g",
            "%DLQ%g",
            "TBW102",
            "rmq_sys_wheel_timer",
            "RMQ_SYS_TRANS_HALF_TOPIC",
            "SCHEDULE_TOPIC_XXXX",
        )
    ] == ["normal", "retry", "dlq", "system", "system", "system", "system"]


def test_rates_from_counts() -> None:
    assert rates([[0, 10], [2000, 30], [2000, 31], [4000, 5]]) == [[2000, 10.0], [4000, 0.0]]
    assert rates([[0, 1]]) == []


def test_history_is_bounded() -> None:
    h = History(every_ms=1000, points=3)
    for t in (0, 500, 1000, 2000, 3000):
        h.add("s", t, t / 1000)
    assert h.series("s") == [[1000, 1.0], [2000, 2.0], [3000, 3.0]]  # 500 too soon; the oldest dropped
    for i in range(MAX_SERIES + 1):
        h.add(f"g{i}", 0, 1)
    assert h.series("s") == [] and h.series(f"g{MAX_SERIES}") == [[0, 1.0]]  # the first followed forgotten


def test_a_cluster_that_does_not_answer_is_a_page_naming_it() -> None:
    backend = WireBackend("127.0.0.1:1", timeout_s=1.0)  # (port 1: nothing listens there)
    console = ConsoleApp(backend, sample_s=0, clock=ManualClock())

    async def run() -> None:
        async with TestClient(TestServer(make_app(console))) as client:
            res = await client.get("/cluster")
            text = await res.text()
            assert res.status == 502 and "cannot be asked" in text and "Traceback" not in text
            api = await client.get("/api/topics")
            assert api.status == 502 and "the topic list" in (await api.json())["error"]
            static = await client.get("/static/console.js")
            assert static.status == 200 and "fetch(" in await static.text()  # served by the package
            assert (await client.get("/static/../app.py")).status in (403, 404)

    try:
        asyncio.run(run())
    finally:
        backend.close()


class _Offsets:
    """What :meth:`ConsoleBackend.consumed_by` asks of a backend: committed offsets by group."""

    def __init__(self, groups: int) -> None:
        self.groups = groups

    def committed_offsets(self, topic: str) -> dict[str, dict[tuple[str, int], int]]:
        # group i committed offset i on queue 0 of broker-a: groups 6.. are past offset 5
        return {f"G{i:04d}": {("broker-a", 0): i} for i in range(self.groups)}


def test_a_message_names_a_few_of_a_thousand_groups_and_counts_them_all() -> None:
    """A page of twenty messages of a topic a thousand groups read is twenty short lines, not
    twenty thousand rows (the messages page took 0.4-0.6 s of rendering at 1,000 groups)."""
    messages = [{"topic": "T", "brokerName": "broker-a", "queueId": 0, "queueOffset": 5}]
    ConsoleBackend.consumed_by(_Offsets(1000), messages)  # type: ignore[arg-type]
    (m,) = messages
    assert len(m["consumedBy"]) == CONSUMED_BY_MAX == 10
    assert [c["group"] for c in m["consumedBy"]] == [f"G{i:04d}" for i in range(10)]
    assert [c["consumed"] for c in m["consumedBy"]] == [False] * 6 + [True] * 4
    assert (m["consumedCount"], m["groupCount"]) == (994, 1000)
    console = ConsoleApp(WireBackend("127.0.0.1:1", timeout_s=1.0), sample_s=0, clock=ManualClock())
    try:
        macro = console.templates.get_template("macros.html").module.messages_table  # type: ignore[attr-defined]
        shown = {
            **m,
            "properties": {},
            "bodyText": "",
            "bodyJson": None,
            "bodyHex": "",
            "bodyCut": False,
            "bodySize": 0,
            "msgId": "A" * 32,
            "uniqKey": None,
            "storeTimestamp": "",
            "tags": None,
            "keys": [],
            "bornTimestamp": "",
            "bornHost": "",
            "storeHost": "",
            "reconsumeTimes": 0,
        }
        html = str(macro([shown]))
    finally:
        console.backend.close()
    assert html.count('class="yes"') + html.count('class="no"') == 10
    assert "and 990 more: 994 of 1000 groups consumed it" in html
    few = [{"topic": "T", "brokerName": "broker-a", "queueId": 0, "queueOffset": 0}]
    ConsoleBackend.consumed_by(_Offsets(2), few)  # type: ignore[arg-type]
    assert few[0]["consumedBy"] == [{"group": "G0000", "consumed": False}, {"group": "G0001", "consumed": True}]
    assert (few[0]["consumedCount"], few[0]["groupCount"]) == (1, 2)
