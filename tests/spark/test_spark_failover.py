"""Spark over the wire across a master killed (reads fail over to the slave): broker-a's SYNC_MASTER and
SLAVE and broker-b's master as ``rmqlog broker`` processes on 127.0.0.1
(tests/wire/failover_procs.py). A streaming query runs (AvailableNow, a checkpoint and a
group), broker-a's master is killed with ``kill -9``, and the query run again from its
checkpoint reads what broker-a's master had replicated before the kill from its slave (the
planner asks the slave for the offsets, the executors pull from it) and what was sent to
broker-b since: every message once, the offsets carried over (they are keyed
``topic/brokerName/queueId``); the group's offsets are committed on the slave; a batch read
planned after the kill reads everything too."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmqnet.client import Admin, Producer, parse_offset_msg_id
from tests.wire.failover_procs import Broker, start_groups, wait

TOPIC = "T"
#: the brokers' transfer limits raised for Spark's pulls (docs/spark.md, "Over the wire")
LIMITS = {
    "maxTransferCountOnMessageInMemory": 10_000,
    "maxTransferBytesOnMessageInMemory": 8 << 20,
    "maxTransferCountOnMessageInDisk": 10_000,
    "maxTransferBytesOnMessageInDisk": 8 << 20,
}


@pytest.fixture
def brokers(tmp_path: Path, namesrv: tuple[subprocess.Popen[str], str]) -> Iterator[dict[str, Broker]]:  # noqa: F811
    with start_groups(tmp_path, namesrv[1], **LIMITS) as started:
        yield started


def _send(p: Producer, n: int, prefix: str, broker: str | None = None) -> list[str]:
    """``n`` messages per queue of ``broker`` (queues 0 and 1), or round robin over the route
    (``broker`` None); every one SEND_OK (a SYNC_MASTER's: the slave holds it)."""
    out = []
    for i in range(n):
        for q in (0, 1) if broker is not None else (None,):
            body = f"{prefix}-{q}-{i}"
            r = p.send(TOPIC, body.encode(), broker_name=broker, queue_id=q)
            assert r.status == "SEND_OK", r
            out.append(body)
    return out


def test_a_stream_goes_on_across_a_master_killed(
    spark,
    tmp_path: Path,
    namesrv: tuple[subprocess.Popen[str], str],  # noqa: F811
    brokers: dict[str, Broker],
) -> None:
    _, ns = namesrv
    a0, a1, b0 = brokers["a0"], brokers["a1"], brokers["b0"]
    ck, out = str(tmp_path / "ck"), str(tmp_path / "out")
    with Admin(ns) as admin, Producer("PG", ns) as p:
        for b in (a0, b0):
            admin.create_topic(b.address, TOPIC, 2)
        wait(
            "the route of both groups, broker-a with its slave",
            lambda: (
                {b.broker_name: sorted(b.broker_addrs) for b in admin.route(TOPIC).broker_datas}
                == {"broker-a": [0, 1], "broker-b": [0]}
            ),
        )
        wait("the slave acknowledging", lambda: p.send("PROBE", b"x", broker_name="broker-a").status == "SEND_OK")
        sent = _send(p, 10, "a1", "broker-a") + _send(p, 5, "b1", "broker-b")

        def run() -> list[str]:
            q = (
                spark.readStream.format("rmqlog")
                .option("nameServer", ns)
                .option("topics", TOPIC)
                .option("startingOffsets", "earliest")
                .option("group", "g1")
                .load()
                .select("body")
                .writeStream.format("parquet")
                .option("path", out)
                .option("checkpointLocation", ck)
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            return sorted(bytes(r.body).decode() for r in spark.read.parquet(out).collect())

        assert run() == sorted(sent)
        sent += _send(p, 10, "a2", "broker-a")  # replicated (SEND_OK), not read yet
        a0.kill()
        after = [p.send(TOPIC, f"b2-{i}".encode()) for i in range(6)]  # broker-a has no master: broker-b takes them
        assert {parse_offset_msg_id(r.offset_msg_id)[0] for r in after} == {b0.address}
        sent += [f"b2-{i}" for i in range(6)]
        assert run() == sorted(sent)  # every message once: broker-a's new ones from its slave
        # the group's progress on broker-a, committed on its slave (the master is gone)
        assert [admin.query_offset("broker-a", "g1", TOPIC, q) for q in (0, 1)] == [20, 20]
        assert a1.address in {a for b in admin.route(TOPIC).broker_datas for a in b.broker_addrs.values()}
        batch = spark.read.format("rmqlog").option("nameServer", ns).option("topics", TOPIC).load()
        assert sorted(bytes(r.body).decode() for r in batch.collect()) == sorted(sent)


def test_a_range_the_slave_ends_below_is_unreplicated_data_loss() -> None:
    """A range planned from the master (its end the master's max offset) and pulled from its
    slave after the master went away: the slave never got the master's last messages."""
    from rmqlog import CorruptStoreError
    from spark_rmq.errors import UnreplicatedError
    from spark_rmq.wire_read import WireRange, consumer, read_wire_range
    from tests.wire.test_failover import Group

    grp = Group()  # a name server and broker-a's master and slave in the test; pulls answer "ends at 5"
    try:
        grp.routed = {"broker-a": {1: grp.slave.addr}}  # the master gone
        part = WireRange(grp.ns.addr, "T", "broker-a", 0, 5, 9)
        with pytest.raises(UnreplicatedError, match="its slave ends at offset 5, below offset 5") as err:
            list(read_wire_range(part))
        assert (err.value.queue, err.value.start, err.value.available) == ("T/broker-a/0", 5, 5)
        assert list(read_wire_range(WireRange(grp.ns.addr, "T", "broker-a", 0, 5, 9, fail_on_data_loss=False))) == []
        grp.routed = {"broker-a": {0: grp.master.addr}}  # a master that ends below the range: its log was cut
        consumer(grp.ns.addr).route("T")  # (the executor's consumer sees the new route)
        with pytest.raises(CorruptStoreError, match="ends at offset 5, below offset 5") as cut:
            list(read_wire_range(WireRange(grp.ns.addr, "T", "broker-a", 1, 5, 9)))
        assert type(cut.value) is CorruptStoreError
    finally:
        grp.close()
