"""The web console (``rmqlog console``, rmqnet/console/) over a live name server and broker
(test_broker_pull_over_the_wire.py's ``servers``: topic ``T`` with 4 queues), through aiohttp's
test client: every page and its JSON, messages by queue, key, both msgIds and time, the JSON
lines download, paging and filtering among 2,000 topics, input refused with a page naming it,
and the admin actions refused without ``--admin`` and done with it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from rmqnet.client import Admin, BrokerError, Producer, PullConsumer, TopicNotFoundError
from rmqnet.console import ConsoleApp

from .console_support import eventually, token_of, with_console
from .test_broker_pull_over_the_wire import Servers, servers  # noqa: F401  (the fixture)


def _send(servers: Servers, n: int) -> list[Any]:  # noqa: F811
    """``n`` messages to T queue 1, keys ``k<i>``, bodies JSON; each dispatched before return."""
    with Producer("PG", servers.namesrv) as producer, Admin(servers.namesrv) as admin:
        sent = [
            producer.send("T", json.dumps({"i": i}).encode(), tags="TA", keys=[f"k{i}"], queue_id=1) for i in range(n)
        ]
        eventually(lambda: admin.max_offset("broker-a", "T", 1) >= n, "the messages dispatched")
    return sent


def test_pages_and_their_json_over_a_cluster(servers: Servers) -> None:  # noqa: F811
    sent = _send(servers, 3)
    with Admin(servers.namesrv) as admin:
        admin.update_offset(servers.broker, "CG_C", "T", 1, 1)

    async def body(client: TestClient, console: ConsoleApp) -> None:
        res = await client.get("/")
        assert res.status == 200 and res.url.path == "/cluster"
        assert res.headers["Server-Timing"].startswith("app;dur=")  # (jobs/bench_console.py reads it)
        page = await res.text()
        assert "broker-a" in page and servers.broker in page and "read-only" in page
        cluster = await (await client.get("/api/cluster")).json()
        [row] = cluster["brokers"]
        assert (row["brokerName"], row["role"], row["address"]) == ("broker-a", "ASYNC_MASTER", servers.broker)
        assert cluster["series"]["in"] and cluster["series"]["in"][0][1] >= 0  # the page's answer was sampled

        topic = await (await client.get("/api/topics/T")).json()
        assert [(q["queueId"], q["min"], q["max"]) for q in topic["queues"]] == [
            (0, 0, 0),
            (1, 0, 3),
            (2, 0, 0),
            (3, 0, 0),
        ]
        assert topic["series"]["rate"] == []  # one sample: no rate yet
        assert topic["messages"] == 3 and topic["route"]["brokerDatas"][0]["brokerName"] == "broker-a"
        assert "consumers" not in topic  # the refresh leaves the groups out; the page has them
        page = await (await client.get("/topics/T")).text()
        assert 'href="/groups/CG_C"' in page and "broker-a" in page

        group = await (await client.get("/api/groups/CG_C")).json()
        # every queue of the topics the group committed on (RocketMQ's 208 counts the others from 0)
        assert group["totalLag"] == 2 and (1, 1, 3) in [
            (r["queueId"], r["committed"], r["max"]) for r in group["offsets"]
        ]
        assert group["series"]["lag"][-1][1] == 2.0
        assert "CG_C" in (await (await client.get("/api/groups")).json())["items"]
        assert "total lag" in await (await client.get("/groups/CG_C")).text()

        browse = await (
            await client.get("/api/messages", params={"topic": "T", "queue": "1", "offset": "1", "count": "1"})
        ).json()
        assert [m["queueOffset"] for m in browse["messages"]] == [1] and browse["nextOffset"] == 2
        m = browse["messages"][0]
        assert m["bodyText"] == '{"i": 1}' and json.loads(m["bodyJson"]) == {"i": 1} and m["bodyHex"].startswith("7b")
        assert m["uniqKey"] == sent[1].msg_id and m["keys"] == ["k1"] and "_body" not in m
        page = await (await client.get("/messages", params={"topic": "T", "queue": "1", "count": "2"})).text()
        assert 'rel="next"' in page and "offset=2" in page  # the next page's link

        by_key = await (await client.get("/api/messages", params={"topic": "T", "key": "k2"})).json()
        assert [m["bodyText"] for m in by_key["messages"]] == ['{"i": 2}']
        for msg_id in (sent[0].offset_msg_id, sent[0].msg_id):  # the broker's id and the client's
            got = await (await client.get("/api/messages", params={"topic": "T", "msgId": msg_id})).json()
            assert [m["bodyText"] for m in got["messages"]] == ['{"i": 0}'], msg_id
            assert got["messages"][0]["brokerName"] == "broker-a"
            assert got["messages"][0]["consumedBy"] == [{"group": "CG_C", "consumed": True}]  # CG_C committed 1
        assert [m["consumedBy"] for m in by_key["messages"]] == [[{"group": "CG_C", "consumed": False}]]
        page = await (await client.get("/messages", params={"topic": "T", "msgId": sent[0].msg_id})).text()
        assert "k0" in page and "UNIQ_KEY" in page

        by_time = await (await client.get("/api/messages", params={"topic": "T", "begin": "0", "count": "2"})).json()
        assert [m["bodyText"] for m in by_time["messages"]] == ['{"i": 0}', '{"i": 1}']
        rest = await (await client.get(by_time["next"].replace("/messages", "/api/messages", 1))).json()
        assert [m["bodyText"] for m in rest["messages"]] == ['{"i": 2}'] and "next" not in rest  # the last page

        res = await client.get("/messages.jsonl", params={"topic": "T", "queue": "1"})
        lines = [json.loads(line) for line in (await res.text()).splitlines()]
        assert res.content_type == "application/x-ndjson" and [d["body"] for d in lines] == [
            '{"i": 0}',
            '{"i": 1}',
            '{"i": 2}',
        ]

        res = await client.get("/dlq", params={"group": "CG_C"})
        assert res.status == 404 and "%DLQ%CG_C" in await res.text()  # no dead letters: no such topic

        with Producer("PG", servers.namesrv) as producer, Admin(servers.namesrv) as admin:
            for _ in range(2):
                producer.send("T", b"more", queue_id=2)
            eventually(lambda: admin.max_offset("broker-a", "T", 2) >= 2, "the messages dispatched")
        again = await (await client.get("/api/topics/T")).json()
        # every answer a sample (the console's sampling is off here): the last rate saw the 2 messages
        assert again["series"]["rate"][-1][1] > 0 and again["messages"] == 5

    with_console(servers.namesrv, body)


def test_bad_input_and_what_is_not_there_are_pages_not_tracebacks(servers: Servers) -> None:  # noqa: F811
    async def body(client: TestClient, console: ConsoleApp) -> None:
        cases = [
            ("/topics/NOPE", 404, "NOPE"),
            ("/topics/bad%20name", 400, "topic"),
            ("/messages?topic=T&queue=1&count=101", 400, "count"),
            ("/messages?topic=T&queue=-1", 400, "queue"),
            ("/messages?topic=T&queue=9", 400, "queue 9"),
            ("/messages?topic=T&key=nokey", 404, "nokey"),
            ("/messages?topic=T&msgId=zz", 400, "not a message id"),
            ("/messages?topic=T&begin=yesterday", 400, "begin"),
            ("/messages?topic=T&begin=0&after=1,2", 400, "after"),
            ("/topics?size=201", 400, "size"),
            ("/topics?kind=odd", 400, "kind"),
            ("/groups/NOGROUP", 404, "NOGROUP"),
            ("/messages?key=k", 400, "topic"),
        ]
        for url, status, words in cases:
            res = await client.get(url)
            text = await res.text()
            assert (res.status, words in text, "Traceback" in text) == (status, True, False), (url, text[-400:])
            api = await client.get("/api" + url)
            assert api.status == status and words in (await api.json())["error"], url

    with_console(servers.namesrv, body)


@pytest.mark.parametrize("servers", [{f"TOPIC_{i:04d}": 1 for i in range(2000)}], indirect=True, ids=["2000"])
def test_2000_topics_found_paged_and_filtered_on_the_server(servers: Servers) -> None:  # noqa: F811
    with Admin(servers.namesrv) as admin:
        assert len(admin.topic_list()) >= 2001  # (registered before the fixture returned)

    async def body(client: TestClient, console: ConsoleApp) -> None:
        page = await (await client.get("/api/topics", params={"q": "topic_12", "size": "50"})).json()
        assert page["total"] == 100 and page["pages"] == 2 and len(page["items"]) == 50  # TOPIC_1200..1299
        assert page["items"][0]["topic"] == "TOPIC_1200"
        second = await (await client.get("/api/topics", params={"q": "topic_12", "size": "50", "page": "2"})).json()
        assert second["items"][-1]["topic"] == "TOPIC_1299"
        found = await (await client.get("/topics", params={"q": "TOPIC_1234"})).text()
        assert 'href="/topics/TOPIC_1234"' in found and "TOPIC_1235" not in found
        every = await (await client.get("/api/topics", params={"size": "200"})).json()
        assert every["total"] >= 2001 and len(every["items"]) == 200
        system = await (await client.get("/api/topics", params={"kind": "system"})).json()
        assert "TBW102" in [t["topic"] for t in system["items"]] and all(t["kind"] == "system" for t in system["items"])

    with_console(servers.namesrv, body)


def test_admin_actions_refused_without_admin(servers: Servers) -> None:  # noqa: F811
    with Admin(servers.namesrv) as admin:
        admin.update_offset(servers.broker, "CG_R", "T", 0, 0)

    async def body(client: TestClient, console: ConsoleApp) -> None:
        page = await (await client.get("/groups/CG_R")).text()
        assert "reset offsets" not in page and 'name="token"' not in page  # no admin form is shown
        for path, form in (
            ("/admin/groups/CG_R/reset", {"topic": "T", "offset": "5"}),
            ("/admin/groups/CG_R/delete", {}),
            ("/admin/topics", {"topic": "NEW_T"}),
            ("/admin/topics/T/delete", {}),
            ("/admin/topics/T/send", {"body": "x"}),
            ("/admin/dlq/CG_R/resend", {"msgId": "00" * 16}),
        ):
            res = await client.post(path, data={**form, "token": console.token})
            text = await res.text()
            assert res.status == 403 and "start it with --admin" in text, path
            api = await client.post("/api" + path, data={**form, "token": console.token})
            assert api.status == 403 and "--admin" in (await api.json())["error"]
        with Admin(servers.namesrv) as admin:
            assert "NEW_T" not in admin.topic_configs(servers.broker)
            assert admin.query_offset("broker-a", "CG_R", "T", 0) == 0

    with_console(servers.namesrv, body)


def test_admin_reset_send_create_and_delete_with_admin(servers: Servers) -> None:  # noqa: F811
    _send(servers, 4)
    with Admin(servers.namesrv) as admin:
        admin.update_offset(servers.broker, "CG_A", "T", 1, 4)

    async def body(client: TestClient, console: ConsoleApp) -> None:
        page = await (await client.get("/groups/CG_A")).text()
        token = token_of(page)
        assert (await (await client.get("/api/groups/CG_A")).json())["totalLag"] == 0
        res = await client.post("/admin/groups/CG_A/reset", data={"topic": "T", "offset": "1", "token": "forged"})
        assert res.status == 403 and "token" in await res.text()
        res = await client.post(
            "/admin/groups/CG_A/reset", data={"topic": "T", "offset": "1", "time": "0", "token": token}
        )
        assert res.status == 400 and "one of them" in await res.text()

        res = await client.post("/admin/groups/CG_A/reset", data={"topic": "T", "offset": "1", "token": token})
        assert res.status == 200 and "reset to offset 1 on 4 queues" in await res.text()
        group = await (await client.get("/api/groups/CG_A")).json()
        # each queue at offset 1 kept within its [min, max]: queue 1 (4 messages) lags 3
        assert {(r["queueId"], r["committed"]) for r in group["offsets"]} >= {(1, 1)} and group["totalLag"] == 3
        res = await client.post("/api/admin/groups/CG_A/reset", data={"topic": "T", "time": "0", "token": token})
        assert res.status == 200 and {q["offset"] for q in (await res.json())["result"]["queues"]} == {0}

        res = await client.post(
            "/api/admin/topics", data={"topic": "CONSOLE_T", "queues": "2", "perm": "6", "token": token}
        )
        assert res.status == 200, await res.text()
        with Admin(servers.namesrv) as admin:
            assert admin.topic_configs(servers.broker)["CONSOLE_T"]["writeQueueNums"] == 2
            eventually(lambda: "CONSOLE_T" in admin.topic_list(), "the new topic reached the name server")
        res = await client.post("/api/admin/topics/CONSOLE_T/send", data={"body": "hi", "keys": "hk", "token": token})
        sent = (await res.json())["result"]
        assert res.status == 200 and sent["status"] == "SEND_OK"
        with Admin(servers.namesrv) as admin:
            eventually(lambda: admin.max_offset("broker-a", "CONSOLE_T", sent["queueId"]) >= 1, "the test message")
        got = await (await client.get("/api/messages", params={"topic": "CONSOLE_T", "msgId": sent["msgId"]})).json()
        assert [m["bodyText"] for m in got["messages"]] == ["hi"]
        res = await client.post("/api/admin/topics", data={"topic": "X", "perm": "5", "token": token})
        assert res.status == 400 and "perm" in (await res.json())["error"]

        res = await client.post("/admin/topics/CONSOLE_T/delete", data={"token": token})
        assert res.status == 200 and "deleted" in await res.text()
        with Admin(servers.namesrv) as admin:
            assert "CONSOLE_T" not in admin.topic_configs(servers.broker)
        assert "CG_A" in (await (await client.get("/api/groups")).json())["items"]  # (by its offsets)
        res = await client.post("/admin/groups/CG_A/delete", data={"token": token})
        assert res.status == 200
        assert "CG_A" not in (await (await client.get("/api/groups")).json())["items"]
        with Admin(servers.namesrv) as admin:
            assert ("T", "CG_A") not in admin.consumer_offsets(servers.broker)

    with_console(servers.namesrv, body, admin=True)


def test_dead_letters_listed_and_chosen_ones_re_sent(servers: Servers) -> None:  # noqa: F811
    sent = _send(servers, 2)
    with PullConsumer("CG_D", servers.namesrv) as consumer, Admin(servers.namesrv) as admin:
        for row in consumer.pull("T", 1, 0, 32, broker_name="broker-a").rows:
            consumer.send_back(row, -1)  # (a negative delay level: straight to the group's dead letters)

        def routed() -> bool:
            try:
                return admin.max_offset("broker-a", "%DLQ%CG_D", 0) >= 2
            except (BrokerError, TopicNotFoundError):
                return False

        eventually(routed, "the dead letters stored and routed")

    async def body(client: TestClient, console: ConsoleApp) -> None:
        dlq = await (await client.get("/api/dlq", params={"group": "CG_D"})).json()
        assert [(m["originTopic"], m["bodyText"]) for m in dlq["messages"]] == [("T", '{"i": 0}'), ("T", '{"i": 1}')]
        page = await (await client.get("/dlq", params={"group": "CG_D"})).text()
        first = dlq["messages"][0]["msgId"]
        assert f'name="msgId" value="{first}"' in page
        res = await client.post(
            "/api/admin/dlq/CG_D/resend",
            data=[("token", console.token), ("msgId", first), ("msgId", sent[1].offset_msg_id)],
        )
        rows = (await res.json())["result"]
        assert res.status == 200 and rows[0]["topic"] == "T" and "not of '%DLQ%CG_D'" in rows[1]["skipped"]
        with Admin(servers.namesrv) as admin:
            eventually(
                lambda: (
                    admin.max_offset("broker-a", "T", 0)
                    + admin.max_offset("broker-a", "T", 1)
                    + admin.max_offset("broker-a", "T", 2)
                    + admin.max_offset("broker-a", "T", 3)
                    >= 3
                ),
                "the re-sent message stored",
            )
        again = await (await client.get("/api/messages", params={"topic": "T", "msgId": rows[0]["newMsgId"]})).json()
        [m] = again["messages"]
        assert m["bodyText"] == '{"i": 0}' and m["keys"] == ["k0"] and m["tags"] == "TA"
        assert m["properties"]["ORIGIN_MESSAGE_ID"] and "RETRY_TOPIC" not in m["properties"]
        res = await client.post("/api/admin/dlq/CG_D/resend", data={"token": console.token})
        assert res.status == 400 and "choose" in (await res.json())["error"]

    with_console(servers.namesrv, body, admin=True)
