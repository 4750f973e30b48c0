"""Master/slave replication across test hosts (link faults and kills, across separate
hosts): the name server on host a, broker group broker-b's master on host b and its slave on
host c (each its own store root), the producer on host d (:mod:`.agent`); for link faults
the slave reaches its master's HA port through a :class:`~.proxy.FaultProxy` on host p.

Jepsen-style: the agent records what each send was told (status, commitlog offset, UNIQ_KEY),
faults are injected (kill -9 of the master, a cut link, delay, loss and stalls on the
replication link), and the checker compares the history with the stores afterwards.

Guarantees checked:

- ``SYNC_MASTER``: no send is answered ``SEND_OK`` that the slave does not hold, whatever the
  fault; after it, the slave's commitlog is byte for byte the master's up to the slave's end.
- ``ASYNC_MASTER``: the slave's commitlog is a byte prefix of the master's, so what a killed
  master's acknowledged sends lack on the slave is only its unreplicated tail (every such
  send lies past the slave's end).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from .cluster import BROKER_PORT, Cluster

TOPIC = "T"
HA_PORT = BROKER_PORT + 1
pytestmark = pytest.mark.slow  # processes on five hosts per test: a few seconds each

#: what the faults need to be quick: a silent slave is dropped after 2 s, a send waits 1 s for it
MASTER_CONF = {"haHousekeepingInterval": "2000", "haSendHeartbeatInterval": "500", "slaveTimeout": "1000"}


def start(c: Cluster, role: str, *, via_proxy: bool = False) -> None:
    """Name server, broker-b's master (``role``) and slave, the agent with a producer; returns
    once a send has been acknowledged by the slave (``SEND_OK`` under SYNC_MASTER)."""
    c.namesrv("a")
    c.broker("b", "broker-b", {TOPIC: 2}, conf={"brokerRole": role, **MASTER_CONF})
    master_ha = f"{c.hosts.addr('b')}:{HA_PORT}"
    if via_proxy:
        c.proxies.append(proxy := _proxy(c))
        master_ha = proxy.address
    c.broker(
        "c",
        "broker-b",
        {},
        root_name="slave-b",
        conf={
            "brokerId": "1",
            "brokerRole": "SLAVE",
            "haMasterAddress": master_ha,
            "haSendHeartbeatInterval": "500",
            "haHousekeepingInterval": "2000",
        },
    )
    c.agent("d")
    c.ask("route", namesrv=c.namesrv_addr, topic=TOPIC, brokers=1)
    c.ask("producer", namesrv=c.namesrv_addr, fault=False, timeout_s=3.0)
    deadline = time.monotonic() + 30
    while True:  # the slave connects a round after it starts; SYNC_MASTER says when it holds a send
        r = c.ask("send", topic=TOPIC, n=1, prefix="ready")["results"][0]
        if r["ok"] and (r["status"] == "SEND_OK" and role == "SYNC_MASTER" or role != "SYNC_MASTER"):
            break
        assert time.monotonic() < deadline, f"the slave never acknowledged a send: {r}"
        time.sleep(0.1)


def _proxy(c: Cluster) -> Any:
    from .proxy import FaultProxy

    return FaultProxy(c.hosts, "p", HA_PORT, (c.hosts.addr("b"), HA_PORT))


def send_during(c: Cluster, n: int, fault: Callable[[], None], after_s: float, prefix: str) -> list[dict[str, Any]]:
    """Sends one after the other from the agent, ``fault`` injected ``after_s`` into them: runs
    of 5 until it has landed, then ``n`` more, so that the fault falls inside the sends however
    fast they are (a fixed number could all be answered before it)."""
    landed = threading.Event()

    def inject() -> None:
        try:
            fault()
        finally:
            landed.set()

    timer = threading.Timer(after_s, inject)
    timer.start()
    out: list[dict[str, Any]] = []
    try:
        while not landed.is_set():
            out += c.ask("send", topic=TOPIC, n=5, prefix=f"{prefix}-{len(out)}")["results"]
        out += c.ask("send", topic=TOPIC, n=n, prefix=f"{prefix}-after")["results"]
        return out
    finally:
        timer.join()


def stop_all(c: Cluster) -> None:
    """kill -9 of every broker still running (the checks read the roots)."""
    for name, proc in c.brokers.items():
        if proc.poll() is None:
            c.kill(name)


def check_replica(c: Cluster, history: list[dict[str, Any]], *, sync: bool) -> dict[str, int]:
    """The checker (module docstring); returns counts for the failure messages and the note."""
    stop_all(c)
    slave_end = c.published_tail("slave-b")
    master_end = c.published_tail("broker-b")
    assert slave_end <= master_end
    assert c.commitlog_bytes("slave-b", slave_end) == c.commitlog_bytes("broker-b", slave_end), (
        "the slave's commitlog is not the master's up to the slave's end"
    )
    on_slave = set(c.stored_keys("slave-b", TOPIC))
    acked = [r for r in history if r["ok"] and r["status"] == "SEND_OK"]
    missing = [r for r in acked if r["key"] not in on_slave]
    if sync:
        assert not missing, f"SEND_OK but not on the slave: {missing[:5]} ({len(missing)} of {len(acked)})"
    else:  # only the unreplicated tail: every acknowledged send the slave lacks lies past its end
        assert all(r["offset"] >= slave_end for r in missing), [r for r in missing if r["offset"] < slave_end]
    on_master = set(c.stored_keys("broker-b", TOPIC))
    assert all(r["key"] in on_master for r in history if r["ok"]), "a send answered with a status is not stored"
    return {"acked": len(acked), "missing": len(missing), "slave_end": slave_end, "master_end": master_end}


@pytest.mark.parametrize("role", ["SYNC_MASTER", "ASYNC_MASTER"])
def test_master_killed_while_sending(cluster: Cluster, role: str) -> None:
    """kill -9 of the master in the middle of a run of sends: under SYNC_MASTER every SEND_OK
    is on the slave; under ASYNC_MASTER what the slave lacks is only the tail."""
    c = cluster
    start(c, role)
    history = send_during(c, 50, lambda: c.kill("broker-b"), 0.4, "kill")
    ok = [r for r in history if r["ok"]]
    assert ok and len(ok) < len(history), "the kill did not land inside the run of sends"
    assert all(not r["ok"] for r in history[len(ok) :]), "a send succeeded after the master died"
    check_replica(c, history, sync=role == "SYNC_MASTER")


def test_sync_master_with_its_slave_cut_off(cluster: Cluster) -> None:
    """The slave's host cut off: sends are answered FLUSH_SLAVE_TIMEOUT (waiting), then
    SLAVE_NOT_AVAILABLE once the master drops the silent slave, never SEND_OK; healed, the
    slave catches up and SEND_OK comes back."""
    c = cluster
    start(c, "SYNC_MASTER")
    c.hosts.cut("c")
    cut = c.ask("send", topic=TOPIC, n=6, prefix="cut")["results"]
    statuses = [r["status"] for r in cut if r["ok"]]
    assert len(statuses) == 6 and "SEND_OK" not in statuses, statuses
    assert statuses[-1] == "SLAVE_NOT_AVAILABLE", statuses
    c.hosts.heal("c")
    deadline = time.monotonic() + 30
    after: list[dict[str, Any]] = []
    while not (after and after[-1]["ok"] and after[-1]["status"] == "SEND_OK"):
        assert time.monotonic() < deadline, after[-3:]
        after += c.ask("send", topic=TOPIC, n=1, prefix="healed")["results"]
        time.sleep(0.05)
    counts = check_replica(c, cut + after, sync=True)
    assert counts["slave_end"] == counts["master_end"]  # caught up: the cut sends are on the slave too


@pytest.mark.parametrize(
    ("fault", "direction"), [("delay", "down"), ("stall", "down"), ("stall", "up"), ("drop", "down"), ("drop", "up")]
)
def test_sync_master_over_a_faulty_replication_link(cluster: Cluster, fault: str, direction: str) -> None:
    """The replication link through the proxy: transfers (down) or the slave's reports (up)
    delayed, held or lost for a while, then the master is killed: no SEND_OK the slave lacks."""
    c = cluster
    start(c, "SYNC_MASTER", via_proxy=True)
    proxy = c.proxies[0]

    def inject() -> None:
        if fault == "delay":
            proxy.delay(direction, 0.3)
        elif fault == "stall":
            proxy.stall(direction)
        else:
            proxy.drop(direction)

    history = send_during(c, 30, inject, 0.2, fault)
    statuses = {r["status"] for r in history if r["ok"]}
    if fault == "delay":
        assert statuses == {"SEND_OK"}  # slower, still replicated within slaveTimeout
    else:
        assert statuses - {"SEND_OK"}, "the fault changed nothing"
    c.kill("broker-b")
    check_replica(c, history, sync=True)


def test_failover_promotes_the_slave_and_the_old_master_rejoins_without_divergence(cluster: Cluster) -> None:
    """A slave promoted after a divergent tail, across hosts: the slave cut off while the master stores sends it never
    gets (SLAVE_NOT_AVAILABLE / FLUSH_SLAVE_TIMEOUT: a divergent tail), the master killed, a
    group member on host d reading every SEND_OK from the slave, the slave promoted (restarted
    with brokerId=0, SYNC_MASTER), the old master restarted as its slave: it cuts the tail the
    new master never had, then replicates: both logs byte for byte the same, every SEND_OK on
    them, no divergent message left."""
    c = cluster
    start(c, "SYNC_MASTER")
    before = c.ask("send", topic=TOPIC, n=20, prefix="before")["results"]
    assert {r["status"] for r in before} == {"SEND_OK"}
    c.hosts.cut("c")
    tail = c.ask("send", topic=TOPIC, n=3, prefix="tail")["results"]
    assert all(r["ok"] and r["status"] != "SEND_OK" for r in tail)  # stored on the master alone
    c.kill("broker-b")
    c.hosts.heal("c")

    c.ask("member", id="cid-1", group="G", topic=TOPIC, namesrv=c.namesrv_addr)
    read = c.ask("consume", id="cid-1", topic=TOPIC)["messages"]  # from the slave: its master is dead
    assert {f"before-{i}" for i in range(20)} <= {m[2] for m in read}
    assert not any(m[2].startswith("tail") for m in read)

    c.stop("slave-b")  # promoted: restarted as the group's master on its own root
    promoted = c.broker("c", "broker-b", {}, root_name="slave-b", conf={"brokerRole": "SYNC_MASTER", **MASTER_CONF})
    c.broker(
        "b",
        "broker-b",
        {},
        root_name="broker-b",  # the old master, now its slave
        conf={
            "brokerId": "1",
            "brokerRole": "SLAVE",
            "haMasterAddress": f"{c.hosts.addr('c')}:{HA_PORT}",
            "haSendHeartbeatInterval": "500",
            "haHousekeepingInterval": "2000",
        },
    )
    deadline = time.monotonic() + 60
    after: list[dict[str, Any]] = []
    while not (after and after[-1]["ok"] and after[-1]["status"] == "SEND_OK"):  # the rejoined slave acknowledges
        assert time.monotonic() < deadline, after[-3:]
        after += c.ask("send", topic=TOPIC, n=1, prefix="after")["results"]
        time.sleep(0.1)
    assert after[-1]["broker"] == promoted
    more = c.ask("send", topic=TOPIC, n=10, prefix="more")["results"]
    assert {r["status"] for r in more} == {"SEND_OK"}

    stop_all(c)
    new_end = c.published_tail("slave-b")
    assert c.published_tail("broker-b") == new_end  # caught up, nothing of its own left past it
    assert c.commitlog_bytes("broker-b", new_end) == c.commitlog_bytes("slave-b", new_end)
    on_new = c.stored_keys("slave-b", TOPIC)
    on_old = c.stored_keys("broker-b", TOPIC)
    acked = [r["key"] for r in before + after + more if r["ok"] and r["status"] == "SEND_OK"]
    assert all(on_new.count(k) == 1 and on_old.count(k) == 1 for k in acked)
    assert not {r["key"] for r in tail} & (set(on_new) | set(on_old))  # the divergent tail is gone
