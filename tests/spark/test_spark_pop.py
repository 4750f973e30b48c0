"""``consumeMode=pop``: a stream of a group's POP through brokers (spark_rmq.pop_source), acked
when its micro-batch commits. A name server and a broker run on 127.0.0.1 in this process
(``wire_servers``); Spark's Python workers reach them over TCP. What the brokers hold in flight
is asked over the wire (GET_POP_INFLIGHT, our ``Admin.pop_inflight``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_until
from pyspark import cloudpickle

from rmqnet.client import Admin, Producer
from spark_rmq.errors import RmqLogOptionError
from spark_rmq.options import DEFAULT_INVISIBLE_MS, SourceOptions

from .wire_servers import WireServers, wire_servers

BROKER = "broker-a"
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # executors cannot import tests/
POP = {"consumeMode": "pop", "nameServer": "127.0.0.1:9876", "topics": "T", "group": "sg"}


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[WireServers]:
    """(Asks for ``tmp_path`` so that its broker stops before its folder is deleted.)"""
    with wire_servers() as s:
        s.start_broker(BROKER, tmp_path / "a", topics={"T": 2})
        yield s


def produce(servers: WireServers, n: int) -> list[str]:
    with Producer("PG", servers.namesrv) as p:
        sent = [f"m{i}" for i in range(n)]
        for body in sent:
            p.send("T", body.encode())
    servers.dispatched(BROKER)
    return sent


def inflight(servers: WireServers) -> int:
    with Admin(servers.namesrv) as admin:
        addr = admin.route("T").broker_datas[0].master_addr()
        return int(admin.pop_inflight(addr, "sg", "T")["total"])


def stream(spark: Any, servers: WireServers, **options: str) -> Any:
    reader = spark.readStream.format("rmqlog")
    for k, v in {**POP, "nameServer": servers.namesrv, **options}.items():
        reader = reader.option(k, v)
    return reader.load()


def test_pop_options_are_checked_strictly() -> None:
    opts = SourceOptions.parse(
        {**POP, "invisibleTime": "30s", "maxMessagesPerTrigger": "5", "tags": "a || b"}, streaming=True
    )
    assert (opts.consume_mode, opts.group, opts.topics, opts.invisible_ms, opts.max_messages, opts.tags) == (
        "pop",
        "sg",
        ("T",),
        30_000,
        5,
        frozenset({"a", "b"}),
    )
    assert SourceOptions.parse(POP, streaming=True).invisible_ms == DEFAULT_INVISIBLE_MS
    assert (
        SourceOptions.parse({"path": "/tmp/x", "topics": "T", "consumeMode": "OFFSETS"}, streaming=True).consume_mode
        == "offsets"
    )
    refused = [
        ({**POP, "consumeMode": "push"}, "consumeMode", "not one of offsets, pop"),
        ({**POP, "invisibleTime": "soon"}, "invisibleTime", "not a duration"),
        ({**POP, "invisibleTime": "0"}, "invisibleTime", "at least 1 ms"),
        (
            {"path": "/tmp/x", "topics": "T", "invisibleTime": "1s"},
            "invisibleTime",
            "only applies with consumeMode=pop",
        ),
        ({k: v for k, v in POP.items() if k != "group"}, "group", "is required with consumeMode=pop"),
        ({k: v for k, v in POP.items() if k != "nameServer"}, "nameServer", "is required"),
        ({**POP, "group": "bad/group"}, "group", "invalid group"),
        ({**POP, "startingOffsets": "earliest"}, "startingOffsets", "does not apply with consumeMode=pop"),
        ({**POP, "SQL92": "a > 1"}, "sql92", "does not apply with consumeMode=pop"),
        ({**POP, "path": "/tmp/x"}, "path", "does not apply with consumeMode=pop"),
        ({**POP, "maxMessagesPerTrigger": "0"}, "maxMessagesPerTrigger", "not a positive integer"),
    ]
    for options, name, text in refused:
        with pytest.raises(RmqLogOptionError, match=text) as err:
            SourceOptions.parse(options, streaming=True)
        assert err.value.option == name, options
    with pytest.raises(RmqLogOptionError, match="pop is for streams") as err:
        SourceOptions.parse(POP, streaming=False)
    assert err.value.option == "consumeMode"


def test_a_pop_stream_acks_each_batch_once_it_committed(spark: Any, servers: WireServers, tmp_path: Path) -> None:
    sent = produce(servers, 20)
    q = (
        stream(spark, servers, maxMessagesPerTrigger="8")
        .select("body", "reconsumeTimes")
        .writeStream.format("memory")
        .queryName("pop_ok")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    rows = spark.sql("select body, reconsumeTimes from pop_ok").collect()
    assert sorted(bytes(r.body).decode() for r in rows) == sorted(sent)
    assert {r.reconsumeTimes for r in rows} == {0}
    assert len(q.recentProgress) >= 3  # 20 messages, 8 a trigger
    assert inflight(servers) == 0  # every batch acked, the last one too


def test_a_failed_batch_is_not_acked_and_its_messages_come_again(
    spark: Any, servers: WireServers, tmp_path: Path
) -> None:
    sent = produce(servers, 6)

    def fail(df: Any, batch_id: int) -> None:
        raise RuntimeError(f"batch {batch_id} fails")

    q = (
        stream(spark, servers, invisibleTime="1ms")
        .writeStream.foreachBatch(fail)
        .option("checkpointLocation", str(tmp_path / "ck1"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="batch 0 fails"):
        q.awaitTermination()
    # not acked: the broker's revive stores them again in the group's POP retry topic
    store = servers.store(BROKER)
    assert wait_until(lambda: store.max_offset("%RETRY%sg_T", 0) == 6 and inflight(servers) == 0, timeout=60)
    q = (
        stream(spark, servers)
        .select("body", "topic", "reconsumeTimes")
        .writeStream.format("memory")
        .queryName("pop_again")
        .option("checkpointLocation", str(tmp_path / "ck2"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    rows = spark.sql("select body, topic, reconsumeTimes from pop_again").collect()
    assert sorted(bytes(r.body).decode() for r in rows) == sorted(sent)
    assert {(r.topic, r.reconsumeTimes) for r in rows} == {("%RETRY%sg_T", 1)}
    assert inflight(servers) == 0
