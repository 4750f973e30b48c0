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
    MAX_BODY_SHOWN,
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
    for call, words in ((lambda: topic_arg("a b"), "topic"), (lambda: topic_arg(""), "topic is empty"),
                        (lambda: int_arg("count", "101", 1, 100), "count"), (lambda: int_arg("q", "1e3", 0, 9), "q"),
                        (lambda: int_arg("q", "٣", 0, 9), "q"),  # not an ASCII digit
                        (lambda: time_arg("end", "soon"), "end"), (lambda: text_arg("key", "a\nb"), "key"),
                        (lambda: text_arg("key", "x" * 1025), "key")):
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
    assert [topic_kind(t) for t in ("orders", "%RETRY%g", "%DLQ%g", "TBW102", "rmq_sys_wheel_timer",
                                     "RMQ_SYS_TRANS_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX")] == [
        "normal", "retry", "dlq", "system", "system", "system", "system"]


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
