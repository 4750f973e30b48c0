"""The console in a real browser: Debian's Chromium, headless under chromium-driver
(tests/wire/browser.py; `make browser`), against a name server and two brokers holding
messages (topic ``T`` on both) and 2,000 topics. Each page is opened and a screenshot of it written under the test's
folder
(``screens/``); a topic is found among the 2,000 by the search form, messages are opened by key
and by both msgIds and their body shown as hex, a group's lag falls on the open page after a
consumer commits (the page's refresh, no reload), a reset of offsets is done through the form
with ``--admin`` and refused without it, and a dead letter chosen on its page is re-sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rmqnet.client import Admin, Producer, PullConsumer
from rmqnet.console import ConsoleApp, WireBackend

from .browser import GUARD_S, ServedConsole, chromium
from .console_support import Cluster, cluster, eventually

TOPICS = {f"TOPIC_{i:04d}": 1 for i in range(2000)}


def _wait(driver: Any, check: Any, what: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, GUARD_S, poll_frequency=0.05).until(lambda d: check(d), what)


def _text(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def test_every_page_in_chromium(tmp_path: Path) -> None:
    with cluster(tmp_path, {"broker-a": {"T": 4, **TOPICS}, "broker-b": {"T": 4}}) as servers:
        _every_page(servers, tmp_path)


def _every_page(servers: Cluster, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    screens = tmp_path / "screens"
    screens.mkdir()
    broker_a = servers.brokers["broker-a"]
    with Producer("PG", servers.namesrv) as producer, Admin(servers.namesrv) as admin:
        sent = [
            producer.send(
                "T",
                json.dumps({"order": i, "item": "book"}).encode(),
                tags="TB",
                keys=[f"order-{i}"],
                queue_id=1,
                broker_name="broker-a",
            )
            for i in range(3)
        ]
        producer.send("T", b"on b", queue_id=0, broker_name="broker-b")
        eventually(
            lambda: admin.max_offset("broker-a", "T", 1) >= 3 and admin.max_offset("broker-b", "T", 0) >= 1,
            "the messages dispatched",
        )
        admin.update_offset(broker_a, "CG_B", "T", 1, 0)
        with PullConsumer("CG_DEAD", servers.namesrv) as failing:  # two dead letters of another group
            for row in failing.pull("T", 1, 0, 2, broker_name="broker-a").rows:
                failing.send_back(row, -1)
        eventually(lambda: "%DLQ%CG_DEAD" in admin.topic_list(), "the dead letters' topic routed")
        topics = len(admin.topic_list())
    backend = WireBackend(servers.namesrv)
    served = ServedConsole(ConsoleApp(backend, admin=True, sample_s=0.5))
    try:
        with chromium() as driver:

            def shot(name: str) -> None:
                assert driver.save_screenshot(str(screens / f"{name}.png")), name

            driver.get(served.url + "/")
            _wait(driver, lambda d: _text(d, "#live").startswith("live"), "the cluster page refreshed itself")
            _wait(
                driver,
                lambda d: d.find_elements(By.CSS_SELECTOR, "svg[data-series='series.in'] polyline"),
                "the rate chart drawn from two samples",
            )
            assert all(
                name in _text(driver, "#brokers") and addr in _text(driver, "#brokers")
                for name, addr in servers.brokers.items()
            )
            shot("cluster")

            driver.get(served.url + "/topics")
            assert _text(driver, ".pager").startswith(f"{topics} in all · page 1 of {-(-topics // 50)}")
            box = driver.find_element(By.NAME, "q")
            box.send_keys("TOPIC_1234")
            box.submit()
            _wait(driver, lambda d: "q=TOPIC_1234" in d.current_url, "the search submitted")
            assert [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#topics a[href^='/topics/']")] == [
                "TOPIC_1234"
            ]
            shot("topics")
            driver.find_element(By.LINK_TEXT, "TOPIC_1234").click()
            _wait(driver, lambda d: _text(d, "#topic-name") == "TOPIC_1234", "the topic page")
            driver.get(served.url + "/topics/T")
            assert (
                "CG_B" in _text(driver, "#consumers")
                and len(driver.find_elements(By.CSS_SELECTOR, "#queues tbody tr")) == 8
            )
            shot("topic")

            driver.get(served.url + "/messages?topic=T&key=order-1")
            assert _text(driver, "#summary").startswith("1 message")
            body = driver.find_element(By.CSS_SELECTOR, "td.body")
            body.find_element(By.CSS_SELECTOR, "button[data-view=hex]").click()
            hex_view = body.find_element(By.CSS_SELECTOR, "pre[data-body=hex]")
            assert hex_view.is_displayed() and hex_view.text.startswith("7b 22 6f 72 64 65 72")  # {"order
            body.find_element(By.CSS_SELECTOR, "button[data-view=json]").click()
            assert '"item": "book"' in body.find_element(By.CSS_SELECTOR, "pre[data-body=json]").text
            shot("messages-by-key")
            for msg_id in (sent[2].msg_id, sent[2].offset_msg_id):
                driver.get(served.url + f"/messages?topic=T&msgId={msg_id}")
                assert "order-2" in _text(driver, "table.messages"), msg_id
            shot("message-by-id")
            driver.get(served.url + "/messages?topic=T&queue=1&count=2")
            assert "on broker(s) broker-a, broker-b" in _text(driver, "#error")  # queue 1 is on both: name one
            driver.get(served.url + "/messages?topic=T&broker=broker-a&queue=1&count=2")
            assert len(driver.find_elements(By.CSS_SELECTOR, "tr.message")) == 2
            driver.find_element(By.CSS_SELECTOR, "a[rel=next]").click()
            _wait(driver, lambda d: "offset=2" in d.current_url, "the next page")
            assert "order-2" in _text(driver, "table.messages")

            driver.get(served.url + "/groups/CG_B")
            assert _text(driver, "#total-lag") == "3"
            _wait(driver, lambda d: _text(d, "#live").startswith("live"), "the group page refreshed itself")
            with PullConsumer("CG_B", servers.namesrv) as consumer:  # the consumer runs: pulls and commits
                got = consumer.pull("T", 1, 0, 32, broker_name="broker-a")
                consumer.commit("T", 1, got.next_begin_offset, broker_name="broker-a")
            _wait(driver, lambda d: _text(d, "#total-lag") == "0", "the lag fell on the open page")
            shot("group")

            driver.find_element(By.NAME, "offset").send_keys("1")
            driver.find_element(By.CSS_SELECTOR, "form[action$='/reset'] button").submit()
            _wait(driver, lambda d: _alert(d), "the reset's confirmation").accept()
            _wait(driver, lambda d: d.find_elements(By.ID, "done"), "the reset done")
            assert "reset to offset 1 on 8 queues" in _text(driver, "#done")  # (both brokers' queues of T)
            shot("reset-done")
            driver.get(served.url + "/groups/CG_B")
            assert _text(driver, "#total-lag") == "2"

            driver.get(served.url + "/dlq?group=CG_B")
            assert "%DLQ%CG_B" in _text(driver, "#error")  # (no dead letters: the page says there is no such topic)
            driver.get(served.url + "/dlq?group=CG_DEAD")
            assert len(driver.find_elements(By.CSS_SELECTOR, "tr.message")) == 2 and "→ T" in _text(driver, "#resend")
            shot("dead-letters")
            driver.find_elements(By.CSS_SELECTOR, "#resend input[name=msgId]")[0].click()
            driver.find_element(By.CSS_SELECTOR, "#resend button").submit()
            _wait(driver, lambda d: _alert(d), "the re-send's confirmation").accept()
            _wait(driver, lambda d: d.find_elements(By.ID, "done"), "the re-send done")
            assert "1 of 1 dead letter(s) of CG_DEAD re-sent" in _text(driver, "#done")

        read_only = ServedConsole(ConsoleApp(backend, admin=False, sample_s=0))
        try:
            with chromium() as driver:
                driver.get(read_only.url + "/groups/CG_B")
                assert (
                    not driver.find_elements(By.CSS_SELECTOR, "form.admin-form") and "read-only" in driver.page_source
                )
                lag = _text(driver, "#total-lag")
                status = driver.execute_async_script(
                    "const done = arguments[0]; const f = new FormData(); f.append('topic', 'T'); f.append('offset', "
                    "'0');"
                    "fetch('/admin/groups/CG_B/reset', {method: 'POST', body: f}).then(r => r.text().then("
                    "t => done([r.status, t])));"
                )
                assert status[0] == 403 and "start it with --admin" in status[1]
                driver.get(read_only.url + "/groups/CG_B")
                assert _text(driver, "#total-lag") == lag  # unchanged
                shot_path = screens / "read-only-group.png"
                assert driver.save_screenshot(str(shot_path))
        finally:
            read_only.close()
    finally:
        served.close()
        backend.close()
    assert sorted(p.name for p in screens.iterdir()) == sorted(
        f"{n}.png"
        for n in (
            "cluster",
            "topics",
            "topic",
            "messages-by-key",
            "message-by-id",
            "group",
            "reset-done",
            "dead-letters",
            "read-only-group",
        )
    )


def _alert(driver: Any) -> Any:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        return driver.switch_to.alert
    except NoAlertPresentException:
        return None
