"""Fixtures of the cluster tests: ``hosts_factory`` builds test hosts (:mod:`.hosts`) and tears
them down after the test, failed or not; ``cluster`` is a :class:`~.cluster.Cluster` on five
of them (a, b, c, d, and p for a proxy). The tests skip, saying why, only where network
namespaces cannot be made at all (not root); CI runs as root, so there they run."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from .cluster import Cluster
from .hosts import Hosts, netns_unavailable


@pytest.fixture
def hosts_factory() -> Iterator[Callable[[Sequence[str]], Hosts]]:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    made: list[Hosts] = []

    def make(names: Sequence[str]) -> Hosts:
        h = Hosts(names)
        made.append(h)
        return h

    try:
        yield make
    finally:
        for h in made:
            h.close()


@pytest.fixture
def cluster(hosts_factory: Callable[[Sequence[str]], Hosts], tmp_path: Path) -> Iterator[Cluster]:
    hosts = hosts_factory(["a", "b", "c", "d", "p"])
    c = Cluster(hosts, tmp_path)
    try:
        yield c
    finally:
        c.close()
