"""A broker group's master killed (reads and sends fail over), as processes on 127.0.0.1: a name
server, broker-a's SYNC_MASTER and its SLAVE, and broker-b's master. After ``kill -9`` of
broker-a's master:

- a PullConsumer goes on reading broker-a's queue from the slave and gets every message
  (a SYNC_MASTER's SEND_OK means the slave held it): the first pull after the kill makes one
  request to the dead master (refused or reset), then asks the slave within the same call, and
  no later pull asks the master (asserted on the requests each pull made, not on time);
- its commits land on the slave (its offset table, persisted to its ``consumerOffset.json``
  on its schedule), ``Admin.max_offset`` and
  ``query_offset`` asked by broker name are answered by the slave;
- a GroupMember heartbeats the slave and broker-b, and its assignment (the consumer list
  asked of the slave) still shares broker-a's queues;
- a producer's sends all go to broker-b (a group without master has no queue to send to);
- broker-a's master restarted on its address is read again (the route without a master is
  kept ``down_ms``), and offsets are its own again (the commits the slave took are not on it).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmqnet.client import Admin, GroupMember, Producer, PullConsumer, parse_offset_msg_id
from rmqnet.transport import ConnectionLostError

from .failover_procs import Broker, start_groups, wait

TOPIC = "FO"
DOWN_MS = 2000
TIMEOUT_S = 60


def record_attempts(client: Any) -> list[tuple[str, str]]:
    """The requests ``client``'s failover makes from now on (``RemoteClient._attempt``), each
    ``(address, "answered" or the error's class name)``, in order."""
    made: list[tuple[str, str]] = []
    attempt = client._attempt

    async def recorded(topic: str, addr: str, send: Any) -> Any:
        try:
            result = await attempt(topic, addr, send)
        except OSError as exc:
            made.append((addr, type(exc).__name__))
            raise
        made.append((addr, "answered"))
        return result

    client._attempt = recorded
    return made


@pytest.fixture
def brokers(tmp_path: Path, namesrv: tuple[subprocess.Popen[str], str]) -> Iterator[dict[str, Broker]]:  # noqa: F811
    with start_groups(tmp_path, namesrv[1], flushConsumerOffsetInterval=200) as started:
        yield started


def test_reads_go_on_from_the_slave_when_the_master_is_killed(
    tmp_path: Path,
    namesrv: tuple[subprocess.Popen[str], str],  # noqa: F811
    brokers: dict[str, Broker],
) -> None:
    _, ns = namesrv
    a0, a1, b0 = brokers["a0"], brokers["a1"], brokers["b0"]
    admin = Admin(ns, down_ms=DOWN_MS)
    producer = Producer("PG", ns)
    consumer = PullConsumer("CG", ns, down_ms=DOWN_MS)
    member = GroupMember("CG", ns, client_id="cid-1", down_ms=DOWN_MS)
    try:
        for b in (a0, b0):
            admin.create_topic(b.address, TOPIC, 2)
        wait(
            "the route of both groups, broker-a with its slave",
            lambda: (
                {b.broker_name: sorted(b.broker_addrs) for b in admin.route(TOPIC).broker_datas}
                == {"broker-a": [0, 1], "broker-b": [0]}
            ),
        )
        # SEND_OK from the SYNC_MASTER: the slave holds the message (the first ones may be
        # SLAVE_NOT_AVAILABLE while it connects: stored on the master only, sent again)
        wait(
            "the slave acknowledging",
            lambda: producer.send(TOPIC, b"probe", broker_name="broker-a", queue_id=1).status == "SEND_OK",
        )
        sent = [f"m-{i}".encode() for i in range(40)]
        for body in sent:
            assert producer.send(TOPIC, body, broker_name="broker-a", queue_id=0).status == "SEND_OK"
        member.subscribe(TOPIC)
        assert member.heartbeat() == sorted([a0.address, a1.address, b0.address])  # every address
        first = consumer.pull(TOPIC, 0, 0, 10, broker_name="broker-a")
        assert (first.status, first.addr, first.messages.num_rows) == ("FOUND", a0.address, 10)
        consumer.commit(TOPIC, 0, 10, broker_name="broker-a")
        persisted = tmp_path / "a0" / "config" / "consumerOffset.json"  # before the kill: a kill -9 loses
        wait(
            "the master persists the commit",
            lambda: (
                persisted.exists()  # what its last persist had not written
                and json.loads(persisted.read_text())["offsetTable"][f"{TOPIC}@CG"]["0"] == 10
            ),
        )

        a0.kill()  # kill -9: its connections reset, its port refuses
        made = record_attempts(consumer)
        got, offset, answered_by, per_pull = [], 10, set(), []
        while offset < 40:
            r = consumer.pull(TOPIC, 0, offset, 32, broker_name="broker-a")
            per_pull.append(list(made))
            made.clear()
            assert r.status == "FOUND", r
            got += r.messages.column("body").to_pylist()
            answered_by.add((r.addr, r.broker_id))
            offset = r.next_begin_offset
        # the first pull: one request to the dead master, failed (no answer awaited), then the
        # slave in the same call; every later pull: the slave alone (the master marked down)
        assert [a for a, _ in per_pull[0]] == [a0.address, a1.address] and per_pull[0][0][1] != "answered"
        assert per_pull[0][1][1] == "answered"
        assert all(p == [(a1.address, "answered")] for p in per_pull[1:]), per_pull
        assert answered_by == {(a1.address, 1)} and got == sent[10:]  # every message, from the slave
        assert a0.address in consumer.down.snapshot()

        consumer.commit(TOPIC, 0, 40, broker_name="broker-a")  # lands on the slave
        path = tmp_path / "a1" / "config" / "consumerOffset.json"  # its file: at its next persist
        wait(
            "the slave persists the commit",
            lambda: path.exists() and json.loads(path.read_text())["offsetTable"][f"{TOPIC}@CG"]["0"] == 40,
        )
        assert consumer.committed(TOPIC, 0, broker_name="broker-a") == 40
        assert admin.max_offset("broker-a", TOPIC, 0) == 40  # by broker name: the slave answers
        assert admin.query_offset("broker-a", "CG", TOPIC, 0) == 40
        with pytest.raises(ConnectionLostError):
            admin.max_offset(a0.address, TOPIC, 0)  # by address: that broker alone

        assert member.heartbeat() == sorted([a1.address, b0.address])
        queues = [(q.broker_name, q.queue_id) for q in member.assignment(TOPIC)]
        assert queues == [("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)]  # from the slave's list

        results = [producer.send(TOPIC, f"after-{i}".encode()) for i in range(8)]
        assert {r.status for r in results} == {"SEND_OK"}
        assert {parse_offset_msg_id(r.offset_msg_id)[0] for r in results} == {b0.address}

        a0.start()  # back on its address: registers, and the route shows it again
        # its registration (the broker's first round), then the route without a master expires
        # (down_ms): the reads go back to it (the wait's timeout is a hang guard, not a bound)
        back = wait(
            "reads back on the master",
            lambda: consumer.pull(TOPIC, 0, 40, 32, broker_name="broker-a").addr == a0.address,
            timeout_s=TIMEOUT_S,
        )
        assert back and a0.address not in consumer.down.snapshot()
        # the master never saw the commits its slave took while it was gone
        assert consumer.committed(TOPIC, 0, broker_name="broker-a") == 10
    finally:
        for c in (producer, consumer, member, admin):
            c.close()
