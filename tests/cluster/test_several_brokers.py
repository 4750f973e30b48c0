"""Several brokers across test hosts: a name server on host a, broker groups
broker-b and broker-c on hosts b and c (each its own store root), the producer and the
consumers on host d (:mod:`.agent`). Jepsen-style: the agent records what each send was told
(acknowledged, with its UNIQ_KEY and broker, or the error), faults are injected (kill -9, a
cut link, a stalled proxy direction), and the checker compares the history with the stores
afterwards: every acknowledged message is in the store of the broker that acknowledged it.

Guarantee checked: with ``sendLatencyFaultEnable`` a broker that dies or stops answering
costs at most the sends in flight when the fault came (a kill: none, the retry on the other
broker answers them; a silent link: the one send whose time budget it ate), after which every
send goes to the surviving broker with no error to the caller; a consumer group's queues on
both brokers are shared by AllocateMessageQueueAveragely and re-shared when a member leaves."""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import pytest
from conftest import subprocess_env

from .cluster import BROKER_PORT, Cluster

TOPIC = "T"
pytestmark = pytest.mark.slow  # processes on five hosts per test: ~5-7 s each


def start(c: Cluster, *, c_via_proxy: bool = False, timeout_s: float = 3.0) -> None:
    c.namesrv("a")
    c.broker("b", "broker-b", {TOPIC: 4})
    c.broker("c", "broker-c", {TOPIC: 4}, via_proxy="p" if c_via_proxy else None)
    c.agent("d")
    assert c.ask("route", namesrv=c.namesrv_addr, topic=TOPIC, brokers=2)["brokers"] == ["broker-b", "broker-c"]
    c.ask("producer", namesrv=c.namesrv_addr, fault=True, timeout_s=timeout_s)


def brokers_of(results: list[dict[str, Any]]) -> Counter[str]:
    return Counter(r["broker"] for r in results if r["ok"])


def check_history(c: Cluster, history: list[dict[str, Any]], addrs: dict[str, str]) -> None:
    """Every acknowledged send is in the root of the broker that acknowledged it, once."""
    for name, proc in c.brokers.items():
        if proc.poll() is None:
            c.kill(name)
    by_addr = {addr: name for name, addr in addrs.items()}
    for name in c.brokers:
        stored = Counter(c.stored_keys(name, TOPIC))
        acked = [r["key"] for r in history if r["ok"] and by_addr[r["broker"]] == name]
        assert all(stored[k] == 1 for k in acked), f"{name}: acknowledged messages missing from its store"


def test_sends_spread_over_both_brokers_and_skip_a_killed_one(cluster: Cluster) -> None:
    c = cluster
    start(c)
    addrs = {"broker-b": f"{c.hosts.addr('b')}:{BROKER_PORT}", "broker-c": f"{c.hosts.addr('c')}:{BROKER_PORT}"}
    before = c.ask("send", topic=TOPIC, n=16, prefix="before")["results"]
    assert all(r["ok"] and r["status"] == "SEND_OK" for r in before)
    # round robin over the 8 queues of the two brokers (sorted by broker name)
    assert [(r["broker"], r["queue"]) for r in before[:8]] == [(addrs["broker-b"], q) for q in range(4)] + [
        (addrs["broker-c"], q) for q in range(4)
    ]
    assert brokers_of(before) == {addrs["broker-b"]: 8, addrs["broker-c"]: 8}

    c.kill("broker-c")  # kill -9: its connections are reset, new ones refused
    after = c.ask("send", topic=TOPIC, n=24, prefix="after")["results"]
    assert all(r["ok"] for r in after), [r for r in after if not r["ok"]]  # no error reached the caller
    assert brokers_of(after) == {addrs["broker-b"]: 24}
    table = c.ask("fault")["table"]
    assert table["broker-c"][1] > 0  # broker-c is out for a while
    check_history(c, before + after, addrs)


def test_a_cut_link_costs_at_most_the_send_in_flight(cluster: Cluster) -> None:
    c = cluster
    start(c, timeout_s=1.0)
    addrs = {"broker-b": f"{c.hosts.addr('b')}:{BROKER_PORT}", "broker-c": f"{c.hosts.addr('c')}:{BROKER_PORT}"}
    before = c.ask("send", topic=TOPIC, n=8, prefix="before")["results"]
    assert brokers_of(before) == {addrs["broker-b"]: 4, addrs["broker-c"]: 4}
    c.hosts.cut("c")  # silence: no reset, the open connection just stops delivering
    after = c.ask("send", topic=TOPIC, n=24, prefix="after")["results"]
    failed = [i for i, r in enumerate(after) if not r["ok"]]
    # the one send that went to broker-c spent its whole budget waiting; Java answers it with
    # a timeout too (sendDefaultImpl's "call timeout"); every later send goes to broker-b
    assert len(failed) <= 1 and all(after[i]["error"] == "RemotingTimeoutError" for i in failed)
    assert all(r["ok"] for r in after[(failed[0] + 1) if failed else 0 :])
    assert set(brokers_of(after)) == {addrs["broker-b"]}
    assert c.ask("fault")["table"]["broker-c"][1] > 0  # broker-c was tried, and is out for a while
    c.hosts.heal("c")
    check_history(c, before + after, addrs)


@pytest.mark.parametrize(("fault", "direction"), [("stall", "down"), ("stall", "up"), ("drop", "down"), ("drop", "up")])
def test_a_stalled_or_lossy_proxy_direction_is_handled_as_a_cut(cluster: Cluster, fault: str, direction: str) -> None:
    """Answers or requests held (stall) or lost (drop) on the way to broker-c: the send caught
    there times out, broker-c is out, the rest go to broker-b."""
    c = cluster
    start(c, c_via_proxy=True, timeout_s=1.0)
    proxy = c.proxies[0]
    addrs = {"broker-b": f"{c.hosts.addr('b')}:{BROKER_PORT}", "broker-c": f"{c.hosts.addr('p')}:{BROKER_PORT}"}
    before = c.ask("send", topic=TOPIC, n=8, prefix="before")["results"]
    assert brokers_of(before) == {addrs["broker-b"]: 4, addrs["broker-c"]: 4}
    if fault == "stall":
        proxy.stall(direction)
    else:
        proxy.drop(direction)
    after = c.ask("send", topic=TOPIC, n=24, prefix="after")["results"]
    failed = [i for i, r in enumerate(after) if not r["ok"]]
    assert len(failed) <= 1 and all(after[i]["error"] == "RemotingTimeoutError" for i in failed)
    assert set(brokers_of(after)) == {addrs["broker-b"]}
    assert c.ask("fault")["table"]["broker-c"][1] > 0
    assert proxy.stats()["accepted"] == 1  # every send to broker-c went through the proxy, on one connection
    proxy.resume(direction)
    proxy.drop(direction, False)
    check_history(c, before + after, addrs)


def test_consumers_share_both_brokers_queues_and_rebalance_when_one_leaves(cluster: Cluster) -> None:
    c = cluster
    start(c)
    masters = sorted(f"{c.hosts.addr(h)}:{BROKER_PORT}" for h in "bc")
    # a topic created over the wire on every master of the cluster (mqadmin updateTopic -c)
    assert (
        c.ask("create_topic", namesrv=c.namesrv_addr, cluster="DefaultCluster", topic="T2", queues=4)["masters"]
        == masters
    )
    assert c.ask("route", namesrv=c.namesrv_addr, topic="T2", brokers=2)["brokers"] == ["broker-b", "broker-c"]
    for cid in ("cid-1", "cid-2", "cid-3"):
        assert c.ask("member", id=cid, group="G", topic="T2", namesrv=c.namesrv_addr)["brokers"] == masters
    shares = {cid: c.ask("assignment", id=cid, topic="T2")["queues"] for cid in ("cid-1", "cid-2", "cid-3")}
    # 8 queues sorted (broker-b 0..3, broker-c 0..3) among 3 sorted ids: 3, 3, 2
    assert shares == {
        "cid-1": [["broker-b", 0], ["broker-b", 1], ["broker-b", 2]],
        "cid-2": [["broker-b", 3], ["broker-c", 0], ["broker-c", 1]],
        "cid-3": [["broker-c", 2], ["broker-c", 3]],
    }
    c.ask("leave", id="cid-2", how="unregister")
    assert c.ask("assignment", id="cid-1", topic="T2")["queues"] == [["broker-b", q] for q in range(4)]
    assert c.ask("assignment", id="cid-3", topic="T2")["queues"] == [["broker-c", q] for q in range(4)]
    c.ask("leave", id="cid-3", how="close")  # gone without a word: its connections closed
    assert c.ask("assignment", id="cid-1", topic="T2")["queues"] == [
        [b, q] for b in ("broker-b", "broker-c") for q in range(4)
    ]


def test_a_slow_broker_is_avoided_for_a_while(cluster: Cluster) -> None:
    """A broker answering in 600 ms (a delay on the proxy's answers) is not an error, but
    ``latencyMax`` 550 ms puts it out for 30 s: the sends after the slow one go to broker-b."""
    c = cluster
    start(c, c_via_proxy=True, timeout_s=3.0)
    proxy = c.proxies[0]
    addrs = {"broker-b": f"{c.hosts.addr('b')}:{BROKER_PORT}", "broker-c": f"{c.hosts.addr('p')}:{BROKER_PORT}"}
    proxy.delay("down", 0.6)
    history = c.ask("send", topic=TOPIC, n=16, prefix="slow")["results"]
    assert all(r["ok"] for r in history)
    # sends 1-4 on broker-b's queues, the 5th answered slowly by broker-c, the rest on broker-b
    assert [r["broker"] for r in history] == [addrs["broker-b"]] * 4 + [addrs["broker-c"]] + [addrs["broker-b"]] * 11
    latency, left = c.ask("fault")["table"]["broker-c"]
    assert latency >= 600 and 0 < left <= 30_000
    check_history(c, history, addrs)


def test_reading_commands_over_the_wire_see_both_brokers(cluster: Cluster) -> None:
    """``rmqlog topic-status|lag|info --namesrv`` run on host d: every broker's queues."""
    c = cluster
    start(c)
    addrs = {"broker-b": f"{c.hosts.addr('b')}:{BROKER_PORT}", "broker-c": f"{c.hosts.addr('c')}:{BROKER_PORT}"}
    sent = c.ask("send", topic=TOPIC, n=16)["results"]
    assert all(r["ok"] for r in sent)  # 2 on each of the 8 queues
    c.ask("commit", namesrv=c.namesrv_addr, group="G", topic=TOPIC, broker=addrs["broker-c"], queue=3, offset=1)

    def rmqlog(*args: str) -> tuple[int, Any]:  # the command's code, in the agent's process on host d
        r = c.ask("cli", args=[*args, "--namesrv", c.namesrv_addr, "--json"])
        return r["code"], (json.loads(r["stdout"]) if r["code"] == 0 else r["stderr"])

    # once as the command itself, a process on host d
    r = c.hosts.run(
        "d", [sys.executable, "-m", "rmqnet", "topic-status", TOPIC, "--namesrv", c.namesrv_addr], env=subprocess_env()
    )
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == f"{TOPIC}/broker-c/3  min 0  max 2  messages 2"
    code, status = rmqlog("topic-status", TOPIC)
    assert code == 0 and status == {
        "topic": TOPIC,
        "queues": [
            {"brokerName": b, "queueId": q, "min": 0, "max": 2, "messages": 2}
            for b in ("broker-b", "broker-c")
            for q in range(4)
        ],
    }
    code, lag = rmqlog("lag", "G", "--topic", TOPIC)
    # the group committed on broker-c's queue 3 only; the brokers answer 0 for the other queues
    # (they still start at 0: RocketMQ's QUERY_CONSUMER_OFFSET rule), which count as committed 0
    assert code == 0 and lag["totalLag"] == 15
    assert {(r["brokerName"], r["queueId"]): (r["committed"], r["lag"]) for r in lag["offsets"]}[("broker-c", 3)] == (
        1,
        1,
    )
    code, info = rmqlog("info")
    assert code == 0 and info["clusters"] == {"DefaultCluster": ["broker-b", "broker-c"]}
    assert {n: b["addrs"] for n, b in info["brokers"].items()} == {n: {"0": a} for n, a in addrs.items()}
    assert [q["max"] for q in info["topics"][TOPIC]["queues"]] == [2] * 8
    code, err = rmqlog("topic-status", "nope")
    assert code == 2 and "no topic 'nope' routed by the name server; topics:" in err and TOPIC in err
    code, err = rmqlog("read", TOPIC, "3")
    assert code == 2 and "on brokers broker-b, broker-c: name one (--broker)" in err
    code, page = rmqlog("read", TOPIC, "3", "--broker", "broker-c")
    assert code == 0 and (page["status"], page["nextOffset"], page["maxOffset"]) == ("FOUND", 2, 2)
    assert [m["body"] for m in page["messages"]] == ["m-7", "m-15"]  # broker-c's queue 3: sends 8 and 16
    by_id = next(r for r in sent if r["queue"] == 1 and r["broker"] == addrs["broker-b"])
    code, found = rmqlog("query", TOPIC, "--id", by_id["key"])
    assert code == 0 and [(m["queueId"], m["body"]) for m in found["messages"]] == [(1, "m-1")]
    code, err = rmqlog("query", TOPIC, "--key", "never-sent")
    assert code == 1


def test_a_group_consumes_both_brokers_once_between_its_members(cluster: Cluster) -> None:
    """Two members pull their shares (one broker each) and commit: together every message once;
    after one leaves, the other takes its queues from the committed offsets: only new ones."""
    c = cluster
    start(c)
    sent = c.ask("send", topic=TOPIC, n=16, prefix="first")["results"]
    assert all(r["ok"] for r in sent)
    for cid in ("cid-1", "cid-2"):
        c.ask("member", id=cid, group="G", topic=TOPIC, namesrv=c.namesrv_addr)
    one = c.ask("consume", id="cid-1", topic=TOPIC)["messages"]
    two = c.ask("consume", id="cid-2", topic=TOPIC)["messages"]
    assert {b for b, _, _ in one} == {"broker-b"} and {b for b, _, _ in two} == {"broker-c"}
    bodies = sorted(m[2] for m in one + two)
    assert bodies == sorted(f"first-{i}" for i in range(16))  # every message, once
    c.ask("leave", id="cid-2", how="close")
    assert all(r["ok"] for r in c.ask("send", topic=TOPIC, n=8, prefix="second")["results"])
    rest = c.ask("consume", id="cid-1", topic=TOPIC)["messages"]
    assert sorted(m[2] for m in rest) == sorted(f"second-{i}" for i in range(8))
    assert {b for b, _, _ in rest} == {"broker-b", "broker-c"}
