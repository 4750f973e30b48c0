"""A name server and broker processes (``rmqnet.broker.launch``) on 127.0.0.1, on an event loop
of their own in a thread, for the POP client's tests: each broker's root holds topic ``T``
(4 queues) before its first registration; the fixture returns once every broker registered."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rmqlog
from rmqnet.broker import launch
from rmqnet.broker.config import BrokerConfig
from rmqnet.namesrv.process import NameServerProcess

from .brokerpull_support import HANG_GUARD_S, SEGMENT


@dataclass
class PopServers:
    namesrv: str
    procs: list[launch.BrokerProcess]
    loop: asyncio.AbstractEventLoop

    def on_loop(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` run on the servers' loop (where the brokers' state lives)."""

        async def call() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(HANG_GUARD_S)

    def dispatch(self) -> None:
        """Make what every broker stored readable now (their dispatchers run on their own otherwise)."""
        for p in self.procs:
            store = p.store
            assert store is not None
            self.on_loop(store.dispatch)

    def inflight(self, group: str) -> int:
        """The group's messages in flight on every broker."""
        return sum(self.on_loop(p.broker.pop.inflight, group) for p in self.procs)  # type: ignore[union-attr]


@contextmanager
def pop_servers(tmp_path: Path, names: tuple[str, ...] = ("broker-a",), **changes: Any) -> Iterator[PopServers]:
    """The servers (module docstring); ``changes``: BrokerConfig fields of every broker."""
    store_config = rmqlog.StoreConfig(mapped_file_size_commit_log=SEGMENT)
    roots = []
    for name in names:
        root = tmp_path / name
        with rmqlog.MessageStore.open(root, store_config) as store:
            store.create_topic("T", 4)
        roots.append(root)
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
                if seen >= set(names):
                    all_in.set()
                return res

            ns.server.routes.register = watched  # type: ignore[method-assign]
            procs = []
            try:
                for name, root in zip(names, roots, strict=True):
                    config = BrokerConfig(
                        broker_name=name, listen_port=0, namesrv_addr=ns.address, store=store_config
                    ).replace(**changes)
                    proc = launch.BrokerProcess(root, config)
                    procs.append(proc)
                    await proc.start()
                await all_in.wait()
                ready.update(namesrv=ns.address, procs=procs, loop=asyncio.get_running_loop())
                started.set()
                await asyncio.get_running_loop().run_in_executor(None, stop.wait)
            finally:
                for proc in procs:
                    proc.request_stop()
                    await proc.wait_stopped(grace_s=1.0)
                await ns.stop()

        try:
            asyncio.run(main())
        finally:
            started.set()

    thread = threading.Thread(target=serve, name="pop-servers")
    thread.start()
    assert started.wait(HANG_GUARD_S) and "loop" in ready, "the servers did not start"
    try:
        yield PopServers(ready["namesrv"], ready["procs"], ready["loop"])
    finally:
        stop.set()
        thread.join(HANG_GUARD_S)
