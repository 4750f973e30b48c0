"""A master cut off (failover across test hosts): broker-b's SYNC_MASTER on host b and
its slave on host c, the name server on a, the consumer on d (:mod:`.agent`). Host b's link is
cut: no reset, nothing refused; the name server keeps routing the master for 120 s (its
connection from b is only silent), so the route cannot save the consumer. Its down-mark does:
the first pull after the cut makes one request to the master, which times out, then goes to
the slave at once, and every later pull goes to the slave without asking the master (down for
``down_ms``): asserted on the requests each pull made, not on how long it took."""

from __future__ import annotations

import time

import pytest

from .cluster import Cluster
from .test_replication import TOPIC, start

pytestmark = pytest.mark.slow
TIMEOUT_S = 1.0  # the consumer's request timeout: what a pull to the silent master costs once
DOWN_MS = 60_000  # longer than the test: the master stays down once it failed


def test_a_cut_master_costs_one_timeout_then_its_slave_serves_the_reads(cluster: Cluster) -> None:
    c = cluster
    start(c, "SYNC_MASTER")
    deadline = time.monotonic() + 30
    while c.ask("route_ids", namesrv=c.namesrv_addr, topic=TOPIC)["ids"] != {"broker-b": [0, 1]}:
        assert time.monotonic() < deadline, "the slave never came into the route"
        time.sleep(0.05)  # the name server's state is remote: asked again
    sent = c.ask("send", topic=TOPIC, n=20, prefix="m")["results"]
    assert {r["status"] for r in sent} == {"SEND_OK"}  # every one on the slave too
    on_q0 = [f"m-{i}" for i, r in enumerate(sent) if r["queue"] == 0]

    def pull(offset: int) -> dict:  # type: ignore[type-arg]
        return c.ask(
            "pull",
            namesrv=c.namesrv_addr,
            group="G",
            topic=TOPIC,
            queue=0,
            offset=offset,
            max=4,
            broker="broker-b",
            timeout_s=TIMEOUT_S,
            down_ms=DOWN_MS,
        )

    first = pull(0)
    assert first["status"] == "FOUND" and first["broker_id"] == 0
    got, offset = first["bodies"], first["next"]
    c.hosts.cut("b")  # silence both ways: the master neither answers nor resets
    try:
        after = pull(offset)
        assert after["status"] == "FOUND" and after["broker_id"] == 1  # the slave
        # one request to the master, which timed out, then the slave at once
        assert [a[0] for a in after["attempts"]] == [first["addr"], after["addr"]], after["attempts"]
        assert after["attempts"][0][1] != "answered" and after["attempts"][1][1] == "answered"
        got, offset = got + after["bodies"], after["next"]
        while True:
            r = pull(offset)
            assert r["attempts"] == [[after["addr"], "answered"]], r["attempts"]  # the master down: never asked again
            if r["status"] != "FOUND":
                break
            assert r["broker_id"] == 1
            got, offset = got + r["bodies"], r["next"]
        assert [b for b in got if not b.startswith("ready")] == on_q0  # every message of the queue, once, in order
    finally:
        c.hosts.heal("b")
