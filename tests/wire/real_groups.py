"""Two broker groups through one name server, for the RocketMQ 5 clients (test_grpc_cluster_clients.py):
:class:`Groups`, a :class:`~tests.wire.real_clients.Cluster` with broker-a and broker-b.

RocketMQ 5's proxy in a broker names another group's gRPC endpoint as that group's master host
with its own ``grpcServerPort`` (every broker's the same): so broker-a listens on 127.0.0.1 and
broker-b on 127.0.0.2 (both loopback), each with its own store root and the same
``grpcListenPort``. The clients' access point is broker-a's gRPC endpoint (``conf``'s
``grpcListenPort``, as :meth:`Cluster.python5` and :meth:`Cluster.push5` give it).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import real_clients as rcl

HOSTS = {"broker-a": "127.0.0.1", "broker-b": "127.0.0.2"}


def free_port_on_both() -> int:
    """A TCP port free on 127.0.0.1 and on 127.0.0.2 now."""
    for _ in range(50):
        port = rcl.free_port()
        with socket.socket() as s:
            try:
                s.bind((HOSTS["broker-b"], port))
            except OSError:
                continue
        return port
    raise AssertionError("no port free on both 127.0.0.1 and 127.0.0.2")


@dataclass
class Groups(rcl.Cluster):
    """A name server, broker-a (127.0.0.1) and broker-b (127.0.0.2), each a master over a store
    root of its own (``roots``) with ``topics`` created in both; ``conf`` (``grpcListenPort``
    among it) applies to both."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.roots = {name: self.tmp / f"store-{name}" for name in HOSTS}
        self.ports = {"broker-a": self.broker_port, "broker-b": free_port_on_both()}

    def start(self) -> Groups:
        import rmqlog

        for root in self.roots.values():
            store = rmqlog.MessageStore.open(root)
            try:
                for topic, queues in self.topics.items():
                    store.create_topic(topic, queues)
            finally:
                store.close()
        namesrv = self._server("namesrv", [str(rcl.RMQLOG), "namesrv", "--listen", self.namesrv_addr])
        for name in HOSTS:
            self._server(name, self._group_argv(name))
        for name in HOSTS:  # (a client asking before a group registered would not see it)
            namesrv.wait_stderr(lambda line, n=name: f"broker registered: {n} " in line, f"{name}'s first registration")
        return self

    def _group_argv(self, name: str) -> list[str]:
        addr = f"{HOSTS[name]}:{self.ports[name]}"
        values = {
            "brokerClusterName": "DefaultCluster",
            "brokerName": name,
            "brokerId": "0",
            "listenPort": str(self.ports[name]),
            "namesrvAddr": self.namesrv_addr,
            "brokerIP1": HOSTS[name],
            "autoCreateTopicEnable": "true",
            "longPollingEnable": "true",
            "flushDiskType": "ASYNC_FLUSH",
            **self.conf,
        }
        conf = self.tmp / f"{name}.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        return [
            str(rcl.RMQLOG),
            "broker",
            str(self.roots[name]),
            "-c",
            str(conf),
            "--listen",
            addr,
            "--namesrv",
            self.namesrv_addr,
        ]

    def stop_servers(self) -> dict[str, int | None]:
        """Stop both brokers, then the name server (SIGTERM: a clean stop); their exit codes."""
        return {name: self.server(name).stop() for name in (*HOSTS, "namesrv")}


@contextlib.contextmanager
def groups(tmp: Path, *, topics: dict[str, int], conf: dict[str, str]) -> Iterator[Groups]:
    """A started :class:`Groups`, every child stopped at the end."""
    g = Groups(tmp, None, dict(topics), dict(conf))
    try:
        yield g.start()
    finally:
        g.close()
