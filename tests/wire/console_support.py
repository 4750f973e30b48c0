"""What the console's tests share: the console's application over a live cluster (the name
server and broker of test_broker_pull_over_the_wire.py's ``servers`` fixture) driven through
aiohttp's test client on a loop of the test's own, waiting for what the broker's rounds make
true, and a cluster of several brokers (:func:`cluster`) for the browser's test."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

import rmqlog
from rmqnet.broker.config import BrokerConfig
from rmqnet.console import ConsoleApp, WireBackend, make_app

from .broker_helpers import live_cluster
from .brokerpull_support import SEGMENT


def eventually(check: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """``check()`` until it returns a true value (the broker's dispatcher and registration run
    on their own rounds); AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.02)
    return got


def with_console(
    namesrv: str, body: Callable[[TestClient, ConsoleApp], Awaitable[None]], *, admin: bool = False
) -> None:
    """Run ``body(client, console)`` against a console over ``namesrv`` (no sampler task: the
    pages' answers feed the history)."""
    backend = WireBackend(namesrv)
    console = ConsoleApp(backend, admin=admin, sample_s=0)

    async def run() -> None:
        async with TestClient(TestServer(make_app(console))) as client:
            await body(client, console)

    try:
        asyncio.run(run())
    finally:
        backend.close()


def token_of(page: str) -> str:
    """The admin token an admin form of ``page`` carries."""
    found = re.search(r'name="token" value="([^"]+)"', page)
    assert found, "the page has no admin form"
    return found.group(1)


@dataclass
class Cluster:
    """A name server and brokers (by name: address) on one event loop of a thread."""

    namesrv: str
    brokers: dict[str, str]


@contextmanager
def cluster(tmp: Path, stores: dict[str, dict[str, int]]) -> Iterator[Cluster]:
    """A name server and one broker per entry of ``stores`` (broker name: the topics, name:
    queues, its store holds before it starts), each registered before this returns; stopped
    (brokers first) at the end."""
    config = rmqlog.StoreConfig(mapped_file_size_commit_log=SEGMENT)
    for name, topics in stores.items():
        with rmqlog.MessageStore.open(tmp / name, config) as store:
            for topic, queues in topics.items():
                store.put_topic(rmqlog.TopicConfig(topic, queues, queues), persist=False)
            store.persist_topics()
    brokers = {name: (tmp / name, BrokerConfig(broker_name=name, listen_port=0, store=config)) for name in stores}
    with live_cluster(brokers) as live:
        yield Cluster(live.namesrv, live.addresses)
