"""A name server and brokers on 127.0.0.1 for the Spark-over-the-wire tests, served by an event
loop in a thread of the test process (Spark's Python workers reach them over TCP as they would
reach other hosts). Brokers can be stopped and started again on the same port (a restart).
Every wait is on an event the servers set (a registration), never a sleep."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import rmqlog
from rmqnet.broker import launch
from rmqnet.broker.config import BrokerConfig
from rmqnet.namesrv.process import NameServerProcess

HANG_GUARD_S = 60.0
#: pulls of up to this many messages (the broker's transfer limits, raised for Spark)
TRANSFER_COUNT = 100_000


class WireServers:
    """``namesrv``: the name server's address; :meth:`start_broker` / :meth:`stop_broker`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="wire-servers", daemon=True)
        self._thread.start()
        self.brokers: dict[str, launch.BrokerProcess] = {}
        self._registered: dict[str, asyncio.Event] = {}
        self.ns = self._run(self._start_namesrv())
        self.namesrv: str = self.ns.address

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(HANG_GUARD_S)

    async def _start_namesrv(self) -> NameServerProcess:
        ns = NameServerProcess("127.0.0.1", 0)
        await ns.start()
        register = ns.server.routes.register

        def watched(**kw: Any) -> Any:
            res = register(**kw)
            event = self._registered.get(kw.get("broker_name", ""))
            if event is not None:
                event.set()
            return res

        ns.server.routes.register = watched  # type: ignore[method-assign]
        return ns

    def start_broker(
        self, name: str, root: Path, *, port: int = 0, topics: dict[str, int] | None = None, **changes: Any
    ) -> str:
        """Start broker ``name`` on ``root`` (created if needed) with ``topics`` (name: queues)
        created first, wait for its registration; its address."""
        store_config = rmqlog.StoreConfig(**changes.pop("store", {}))
        if topics:
            with rmqlog.MessageStore.open(root, store_config) as store:  # routed from the first registration
                for topic, queues in topics.items():
                    store.create_topic(topic, queues)

        async def start() -> str:
            config = BrokerConfig(
                broker_name=name,
                listen_port=port,
                namesrv_addr=self.namesrv,
                store=store_config,
                max_transfer_count_on_message_in_memory=TRANSFER_COUNT,
                max_transfer_bytes_on_message_in_memory=8 << 20,
                max_transfer_count_on_message_in_disk=TRANSFER_COUNT,
                max_transfer_bytes_on_message_in_disk=8 << 20,
            ).replace(**changes)
            registered = self._registered[name] = asyncio.Event()
            proc = launch.BrokerProcess(root, config)
            address = await proc.start()
            self.brokers[name] = proc
            await registered.wait()
            return address

        return self._run(start())

    def stop_broker(self, name: str) -> None:
        """Stop broker ``name`` cleanly (unregistered, its store closed)."""

        async def stop() -> None:
            proc = self.brokers.pop(name)
            proc.request_stop()
            await proc.wait_stopped(grace_s=1.0)

        self._run(stop())

    def dispatched(self, name: str) -> None:
        """Make everything broker ``name`` stored readable now (its dispatcher runs on its own
        otherwise, a moment after each send is answered)."""

        async def dispatch() -> None:
            store = self.brokers[name].store
            assert store is not None
            store.dispatch()

        self._run(dispatch())

    def store(self, name: str) -> rmqlog.MessageStore:
        store = self.brokers[name].store
        assert store is not None
        return store

    def port(self, name: str) -> int:
        proc = self.brokers[name]
        assert proc.broker is not None
        return int(proc.broker.address.rpartition(":")[2])

    def close(self) -> None:
        for name in list(self.brokers):
            self.stop_broker(name)
        self._run(self.ns.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(HANG_GUARD_S)


@contextmanager
def wire_servers() -> Iterator[WireServers]:
    servers = WireServers()
    try:
        yield servers
    finally:
        servers.close()
