"""What the console's tests share: the console's application over a live cluster (the name
server and broker of test_broker_pull_over_the_wire.py's ``servers`` fixture) driven through
aiohttp's test client on a loop of the test's own, waiting for what the broker's rounds make
true, and a cluster of several brokers (:func:`cluster`) for the browser's test."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

import rmqlog
from rmqnet.broker import launch
from rmqnet.broker.config import BrokerConfig
from rmqnet.console import ConsoleApp, WireBackend, make_app
from rmqnet.namesrv.process import NameServerProcess

from .brokerpull_support import HANG_GUARD_S, SEGMENT


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
    ready: dict[str, Any] = {}
    started, stop = threading.Event(), threading.Event()

    def serve() -> None:
        async def main() -> None:
            ns = NameServerProcess("127.0.0.1", 0)
            await ns.start()
            seen: set[str] = set()
            all_in = asyncio.Event()
            register = ns.server.routes.register

            def watched(**kw: Any) -> Any:
                res = register(**kw)
                seen.add(kw.get("broker_name", ""))
                if seen >= stores.keys():
                    all_in.set()
                return res

            ns.server.routes.register = watched  # type: ignore[method-assign]
            procs = [
                launch.BrokerProcess(
                    tmp / name, BrokerConfig(broker_name=name, listen_port=0, namesrv_addr=ns.address, store=config)
                )
                for name in stores
            ]
            try:
                addrs = [await p.start() for p in procs]
                await all_in.wait()
                ready.update(namesrv=ns.address, brokers=dict(zip(stores, addrs, strict=True)))
                started.set()
                await asyncio.get_running_loop().run_in_executor(None, stop.wait)
            finally:
                for p in procs:
                    if not p._stop.is_set():
                        p.request_stop()
                    await p.wait_stopped(grace_s=1.0)
                await ns.stop()

        try:
            asyncio.run(main())
        finally:
            started.set()

    thread = threading.Thread(target=serve, name="cluster")
    thread.start()
    assert started.wait(HANG_GUARD_S) and "namesrv" in ready, "the cluster did not start"
    try:
        yield Cluster(ready["namesrv"], ready["brokers"])
    finally:
        stop.set()
        thread.join(HANG_GUARD_S)
