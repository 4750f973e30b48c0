"""A name server and broker processes (``rmqnet.broker.launch``) on 127.0.0.1, on an event loop
of their own in a thread, for the POP client's tests: each broker's root holds topic ``T``
(4 queues) before its first registration; the fixture returns once every broker registered."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import rmqlog
from rmqnet.broker.config import BrokerConfig

from .broker_helpers import LiveCluster, live_cluster
from .brokerpull_support import SEGMENT


class PopServers(LiveCluster):
    """The cluster, and what the POP client's tests ask of every broker."""

    def dispatch(self) -> None:
        """Make what every broker stored readable now (their dispatchers run on their own otherwise)."""
        for p in self.procs.values():
            store = p.store
            assert store is not None
            self.on_loop(store.dispatch)

    def inflight(self, group: str) -> int:
        """The group's messages in flight on every broker."""
        return sum(self.on_loop(p.broker.pop.inflight, group) for p in self.procs.values())  # type: ignore[union-attr]


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
    brokers = {
        name: (root, BrokerConfig(broker_name=name, listen_port=0, store=store_config).replace(**changes))
        for name, root in zip(names, roots, strict=True)
    }
    with live_cluster(brokers, "pop-servers") as live:
        yield PopServers(live.namesrv, live.procs, live.addresses, live.loop, live.ns)
