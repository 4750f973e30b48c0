"""Spark across separate hosts (no host shared by two roles): on the test hosts
(:mod:`.hosts`), a name server (host n), two broker groups each a ``SYNC_MASTER`` and its slave
on hosts of their own (broker-a: a0, a1; broker-b: b0, b1), each broker its own store root; a
Spark standalone master (sm), two workers (w1, w2) and the driver (d) (:mod:`.spark_hosts`).
Jobs (:mod:`.spark_job`) run their tasks on the worker hosts and write and read through the
brokers (option ``nameServer``).

Checked: every row exactly once, read back through Spark (``spark.read`` and a
``readStream``) and in the brokers' stores afterwards (the stores' own reads, and the
reference decoder on the stores that were stopped cleanly), also across a failover: the
master of broker-b killed (kill -9) under a streaming write, its driver killed too, and the
query restarted from its checkpoint while the group has no master; the replayed micro-batch
waits for the group's master, the test promotes the slave (restarted as ``brokerId=0`` over
its own store root), and the union of the groups' stores holds every row once; and a
``readStream`` going on from a group's slave while its master is dead.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import subprocess_env, walk

import rmqlog

from .cluster import BROKER_PORT, Cluster, store_config
from .hosts import Hosts, netns_unavailable
from .spark_hosts import SparkCluster, results, wait_for_file

#: one worker runs them all under ``-n 2 --dist loadgroup`` (the Spark cluster is the module's)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark_hosts")]
TOPIC = "T"
#: the broker groups: name -> (master's host, slave's host)
GROUPS = {"broker-a": ("a0", "a1"), "broker-b": ("b0", "b1")}
HOSTS = ["n", "a0", "a1", "b0", "b1", "sm", "w1", "w2", "d"]
WAITING = "has no master in reach"  # what the sink logs when a chunk waits for a master (with its writer)


@dataclass
class Setup:
    hosts: Hosts
    brokers: Cluster
    spark: SparkCluster
    tmp: Path


@pytest.fixture(scope="module")
def spark_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Hosts, SparkCluster]]:
    """The hosts and the Spark cluster, shared by the module's tests (each test starts brokers
    of its own): JVMs start slowly, every test's job is an application of its own."""
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with Hosts(HOSTS) as hosts:
        spark = SparkCluster(hosts, tmp_path_factory.mktemp("spark"), master="sm", workers=["w1", "w2"], driver="d")
        try:
            spark.start()
            yield hosts, spark
        finally:
            left = spark.close()
            stray = stray_processes(hosts)
            assert left == [] and stray == [], f"left running: groups {left}, processes {stray}"


@pytest.fixture
def setup(spark_hosts: tuple[Hosts, SparkCluster], tmp_path: Path) -> Iterator[Setup]:
    hosts, spark = spark_hosts
    brokers = Cluster(hosts, tmp_path)
    try:
        yield Setup(hosts, brokers, spark, tmp_path)
    finally:
        brokers.close()
        hosts.kill_processes()  # this test's name server and brokers (hosts.popen), kill -9


def stray_processes(hosts: Hosts, wait_s: float = 15) -> list[str]:
    """Processes still in the hosts once every group was stopped (a Python worker's daemon runs
    in a group of its own: it ends when its executor does); after ``wait_s``, killed (SIGKILL)
    and named."""
    deadline = time.monotonic() + wait_s
    while True:
        stray = sorted(
            {
                int(p)
                for h in hosts.names
                for p in subprocess.run(
                    ["ip", "netns", "pids", hosts.ns(h)], capture_output=True, text=True
                ).stdout.split()
            }
        )
        if not stray or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # (waits for the processes to end)
    names = []
    for pid in stray:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200]
            os.kill(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            continue
        names.append(f"{pid}: {cmdline!r}")
    return names


def start_brokers(s: Setup) -> None:
    """The name server and both groups: each a SYNC_MASTER and a SLAVE replicating it."""
    c = s.brokers
    c.namesrv("n")
    with ThreadPoolExecutor(4) as pool:  # (each start waits for its broker's ready line)
        for f in [
            pool.submit(c.broker, master, group, {TOPIC: 4}, conf={"brokerRole": "SYNC_MASTER"})
            for group, (master, _) in GROUPS.items()
        ] + [
            pool.submit(
                c.broker,
                slave,
                group,
                {TOPIC: 4},
                root_name=f"{group}-slave",
                conf={
                    "brokerId": "1",
                    "brokerRole": "SLAVE",
                    "haMasterAddress": f"{s.hosts.addr(master)}:{BROKER_PORT + 1}",
                },
            )
            for group, (master, slave) in GROUPS.items()
        ]:
            f.result()
    wait_route(s, lambda r: r == {g: [0, 1] for g in GROUPS})


def route(s: Setup) -> dict[str, list[int]]:
    """The broker ids the name server routes ``TOPIC`` to, per group (asked from host d)."""
    code = (
        "import json, sys\nfrom rmqnet.client import Admin\nwith Admin(sys.argv[1]) as a:\n"
        " r = a.route(sys.argv[2])\nprint(json.dumps({b.broker_name: sorted(b.broker_addrs) for b in r.broker_datas}))"
    )
    out = s.hosts.run("d", [sys.executable, "-c", code, s.brokers.namesrv_addr, TOPIC], env=subprocess_env())
    assert out.returncode == 0, out.stderr
    return {k: v for k, v in json.loads(out.stdout).items()}


def wait_route(s: Setup, ok: Callable[[dict[str, list[int]]], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ok(r := route(s)):
        assert time.monotonic() < deadline, f"route {r}"
        time.sleep(0.2)  # (waits for registrations)


def stored(root: Path) -> list[str]:
    """The bodies of ``TOPIC`` in a store root (its broker ended), by the store's checked reads
    (a killed broker's root is recovered by this open, as its restart would)."""
    out: list[str] = []
    with rmqlog.MessageStore.open(root, store_config(), create=False) as store:
        store.dispatch()
        for qid in range(store.topics()[TOPIC].read_queue_nums):
            offset = store.min_offset(TOPIC, qid)
            while True:
                res = store.get_messages("checker", TOPIC, qid, offset, max_count=512)
                if res.status != rmqlog.GetMessageStatus.FOUND:
                    break
                out.extend(bytes(b).decode() for b in res.messages.column("body").to_pylist())
                offset = res.next_begin_offset
    return out


def decoded(root: Path) -> list[str]:
    """The same by the reference decoder (the commitlog's records)."""
    return [rec.body.decode() for rec in walk(root) if rec.topic == TOPIC]


def rows(first: int, n: int) -> list[str]:
    return [f"row-{i}" for i in range(first, first + n)]


def once(bodies: list[str], expected: list[str]) -> None:
    """Every expected row exactly once, nothing else."""
    counts = Counter(bodies)
    twice = sorted(b for b, k in counts.items() if k > 1)
    missing = sorted(set(expected) - set(counts))
    extra = sorted(set(counts) - set(expected))
    assert not twice and not missing and not extra, (
        f"{len(twice)} twice {twice[:5]}, {len(missing)} missing {missing[:5]}, {len(extra)} extra {extra[:5]}"
    )


def stop_brokers(s: Setup) -> None:
    """Every broker still running stopped cleanly (SIGTERM), slaves last."""
    for key in sorted(s.brokers.brokers, key=lambda k: k.endswith("-slave")):
        if s.brokers.brokers[key].poll() is None:
            assert s.brokers.stop(key) == 0, key


# ------------------------------------------------------------------------------- tests


def test_a_job_on_worker_hosts_writes_through_both_groups_and_reads_back_once(setup: Setup) -> None:
    s = setup
    start_brokers(s)
    n = 6000
    apps = s.spark.apps()
    proc, name, _ = s.spark.submit(
        {
            "namesrv": s.brokers.namesrv_addr,
            "steps": [
                {"name": "write", "op": "write", "topic": TOPIC, "n": n, "partitions": 4},
                {"name": "read", "op": "read", "topic": TOPIC},
                {
                    "name": "stream",
                    "op": "read_stream",
                    "topic": TOPIC,
                    "checkpoint": str(s.tmp / "read-ckpt"),
                    "max_per_trigger": n // 3,
                },
            ],
        }
    )
    out = s.spark.wait(proc, name)
    # the tasks ran on both worker hosts
    for w in s.spark.worker_hosts:
        assert "Running task" in s.spark.executor_log(apps, [w]), w
    expected = rows(0, n)
    once([r[0] for r in out["read"]], expected)
    once(out["stream"], expected)
    # spread over both groups' masters, each queue's offsets dense from 0
    masters = {f"{s.hosts.addr(m)}:{BROKER_PORT}" for m, _ in GROUPS.values()}
    assert {r[1] for r in out["read"]} == masters
    per_queue: dict[tuple[str, int], list[int]] = {}
    for _, host, qid, offset in out["read"]:
        per_queue.setdefault((host, qid), []).append(offset)
    assert len(per_queue) == 8 and all(sorted(v) == list(range(len(v))) for v in per_queue.values())
    # the stores: every row once over the masters; each slave holds what its master holds
    stop_brokers(s)
    by_group = {g: stored(s.brokers.roots[g]) for g in GROUPS}
    once([b for v in by_group.values() for b in v], expected)
    for g in GROUPS:
        assert sorted(decoded(s.brokers.roots[g])) == sorted(by_group[g])
        assert sorted(stored(s.brokers.roots[f"{g}-slave"])) == sorted(by_group[g]), f"{g}'s slave"


def offsets(s: Setup, group: str) -> int:
    """The messages of ``TOPIC`` on ``group``'s master (the sum of its queues' max offsets), asked
    over the wire from host d."""
    code = (
        "import sys\nfrom rmqnet.client import Admin\nwith Admin(sys.argv[1]) as a:\n"
        " b = next(b for b in a.route(sys.argv[2]).broker_datas if b.broker_name == sys.argv[3])\n"
        " print(sum(a.max_offset(b.master_addr(), sys.argv[2], q) for q in range(4)))"
    )
    out = s.hosts.run("d", [sys.executable, "-c", code, s.brokers.namesrv_addr, TOPIC, group], env=subprocess_env())
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


def waiting(log: str) -> set[int]:
    """The partitions whose chunks the sink logged waiting for a master (writer names are
    ``<query>/<partition>/<layout digest>``)."""
    return {
        int(m) for m in re.findall(r"writer '[^']*/(\d+)/[0-9a-f]{8}'\): broker group 'broker-b' .*" + WAITING, log)
    }


def drop_files(s: Setup, batch: int, per_batch: int) -> range:
    """The input of micro-batch ``batch`` of the streaming write: a folder of two files
    (``{"id": i}`` lines) of unequal sizes (Spark orders a micro-batch's files by size), moved
    into the input folder in one rename (so a trigger sees both or neither); the ids."""
    ids = range(batch * per_batch, (batch + 1) * per_batch)
    staged = s.tmp / f"staged-{batch}"
    staged.mkdir()
    for part, chunk in enumerate((ids[: per_batch // 3], ids[per_batch // 3 :])):
        (staged / f"{part}.json").write_text("".join(f'{{"id": {i}}}\n' for i in chunk))
    (s.tmp / "in").mkdir(exist_ok=True)
    staged.rename(s.tmp / "in" / f"b{batch:03d}")
    return ids


def test_a_streaming_write_across_a_master_failover_ends_exactly_once(setup: Setup) -> None:
    """broker-b's master is killed under a streaming write, then the query's driver is killed
    while the micro-batch waits for broker-b's chunks, and the query restarted from its
    checkpoint while broker-b still has no master: the replayed micro-batch routes its rows as
    the first attempt did (broker-a's chunks are duplicates there) and waits; the test promotes
    broker-b's slave (restarted over its own root as ``brokerId=0``); every row ends once."""
    s = setup
    start_brokers(s)
    per_batch = 600
    for batch in range(2):
        drop_files(s, batch, per_batch)
    ckpt = s.tmp / "write-ckpt"
    stream = {
        "op": "stream_write",
        "input": str(s.tmp / "in" / "*"),
        "checkpoint": str(ckpt),
        "topic": TOPIC,
        "extra": {"sendRetryTimeout": "120s"},
    }
    apps = s.spark.apps()
    first, first_name, _ = s.spark.submit(
        {"namesrv": s.brokers.namesrv_addr, "steps": [{**stream, "trigger": "500 milliseconds"}]}
    )
    wait_for_file(ckpt / "commits" / "1", first, timeout=120)  # micro-batches 0 and 1 written
    before = offsets(s, "broker-a")

    s.brokers.kill("broker-b")  # kill -9: the name server routes broker-b to its slave alone
    wait_route(s, lambda r: r.get("broker-b") == [1])
    drop_files(s, 2, per_batch)
    # both tasks of micro-batch 2 wait with their chunks for broker-b, their chunks for broker-a stored
    s.spark.wait_for_executors(lambda log: waiting(log) == {0, 1}, "both tasks waiting", skip=apps)
    deadline = time.monotonic() + 30
    while offsets(s, "broker-a") == before:
        assert time.monotonic() < deadline, "micro-batch 2 stored nothing on broker-a"
    assert not (ckpt / "commits" / "2").exists()
    s.spark.kill_driver(first)  # the query dies with micro-batch 2 half stored

    drop_files(s, 3, per_batch)
    apps = s.spark.apps()
    second, second_name, _ = s.spark.submit(
        {
            "namesrv": s.brokers.namesrv_addr,
            "steps": [
                {**stream, "name": "write", "trigger": "available"},
                {"name": "read", "op": "read", "topic": TOPIC},
            ],
        }
    )
    # the replay's tasks routed as the first attempt did, and wait for broker-b (the promotion
    # must not start before every task has its route: while no broker of broker-b is
    # registered the name server routes the topic without it, docs/spark.md)
    s.spark.wait_for_executors(lambda log: waiting(log) == {0, 1}, "both tasks waiting", skip=apps, timeout=120)
    assert results(s.tmp / f"{second_name}.result.json") == {}
    # the slave promoted: restarted as broker-b's master over its own root (replicated records
    # and markers); the waiting chunks go there
    assert s.brokers.stop("broker-b-slave") == 0
    s.brokers.broker(
        "b1", "broker-b", {TOPIC: 4}, root_name="broker-b-slave", conf={"brokerId": "0", "brokerRole": "ASYNC_MASTER"}
    )
    out = s.spark.wait(second, second_name, timeout=180)

    expected = rows(0, 4 * per_batch)
    once([r[0] for r in out["read"]], expected)
    assert {r[1] for r in out["read"]} >= {f"{s.hosts.addr(h)}:{BROKER_PORT}" for h in ("a0", "b0")}
    stop_brokers(s)
    a, b_old, b_new = (stored(s.brokers.roots[k]) for k in ("broker-a", "broker-b", "broker-b-slave"))
    once(a + b_new, expected)  # the union of the groups' stores (broker-b's now being its old slave's)
    assert set(b_old) <= set(b_new)  # what the dead master stored went on to the group's new master
    assert sorted(decoded(s.brokers.roots["broker-a"])) == sorted(a)
    assert sorted(stored(s.brokers.roots["broker-a-slave"])) == sorted(a)


def test_a_stream_read_goes_on_from_the_slave_while_a_master_is_dead(setup: Setup) -> None:
    """A ``readStream`` over the wire reading both groups, a few hundred rows a trigger;
    broker-b's master killed (kill -9) after the first micro-batch and not brought back: the
    stream goes on with broker-b's rows from its slave (replicated by ``SYNC_MASTER`` before
    the writes were acknowledged; reads fall over within a group, docs/spark.md), every row
    once, without waiting for the master; broker-b's rows were not all read when its master
    died (the end offsets of the micro-batches done by then, against the stream's last ones),
    so the slave served the rest: one running query, never restarted."""
    s = setup
    start_brokers(s)
    n = 2400
    sign, killed = s.tmp / "first-batch", s.tmp / "killed"
    proc, name, _ = s.spark.submit(
        {
            "namesrv": s.brokers.namesrv_addr,
            "steps": [
                {"name": "write", "op": "write", "topic": TOPIC, "n": n, "partitions": 2},
                {
                    "name": "follow",
                    "op": "follow",
                    "topic": TOPIC,
                    "checkpoint": str(s.tmp / "follow-ckpt"),
                    "n": n,
                    "max_per_trigger": n // 4,
                    "sign": str(sign),
                    "killed": str(killed),
                },
            ],
        }
    )
    wait_for_file(sign, proc, timeout=120)
    s.brokers.kill("broker-b")
    killed.touch()
    out = s.spark.wait(proc, name)["follow"]
    assert out["error"] is None, out["error"]
    once(out["bodies"], rows(0, n))
    assert out["in_time"]
    at_kill, end = out["at_kill"], out["end"]
    assert at_kill is not None and 0 < at_kill["count"] < n, at_kill

    def of_b(offsets: dict[str, int]) -> int:
        return sum(v for k, v in offsets.items() if k.split("/")[1] == "broker-b")

    assert of_b(at_kill["end"]) < of_b(end), (at_kill, end)  # broker-b's rows read after its master died
