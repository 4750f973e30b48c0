"""The source's ``sql92`` option: RocketMQ's SQL92 selector over the messages' properties,
evaluated by the store over each whole window (rmqlog.filter), with the tags option and in a
stream; a malformed expression is the option error naming ``sql92``, the position and the token.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import rmqlog
from rmqlog.filter import sql92 as q
from spark_rmq.errors import RmqLogOptionError
from spark_rmq.options import SourceOptions
from spark_rmq.read import QueueRange, read_range


def _fill(root: str, n: int = 200) -> list[dict[str, str]]:
    props = [{"n": str(i), **({"region": ["eu", "us", "ap"][i % 3]} if i % 4 else {})} for i in range(n)]
    with rmqlog.MessageStore.open(root) as ms:
        ms.create_topic("orders", 2)
        ms.put_batch(
            pa.table(
                {
                    "topic": ["orders"] * n,
                    "body": [f"b{i}".encode() for i in range(n)],
                    "queueId": [i % 2 for i in range(n)],
                    "tags": ["A" if i % 5 else "B" for i in range(n)],
                    "properties": pa.array([list(p.items()) for p in props], pa.map_(pa.string(), pa.string())),
                }
            ),
            dispatch=True,
        )
    return props


def read(spark, root: str, **options: str):
    return spark.read.format("rmqlog").option("path", root).options(**options).load()


def test_batch_read_keeps_what_the_expression_matches(spark, store_root: str) -> None:
    props = _fill(store_root)
    expr = "region IN ('eu', 'us') AND n BETWEEN 10 AND 150 OR region IS NULL AND n > 190"
    tree = rmqlog.compile_filter(expr).tree
    want = sorted(f"b{i}" for i, p in enumerate(props) if q.matches(tree, p))
    got = sorted(
        bytes(r.body).decode() for r in read(spark, store_root, topics="orders", sql92=expr).select("body").collect()
    )
    assert got == want and 0 < len(got) < len(props)
    # with tags too: both apply
    got = sorted(
        bytes(r.body).decode() for r in read(spark, store_root, topics="orders", sql92=expr, tags="B").collect()
    )
    assert got == [b for b in want if int(b[1:]) % 5 == 0]
    # a type mismatch matches nothing (Java's evaluation throws for that message), and only
    # that message (a filter that dropped everything, or failed the read, gives 0 too): b7's
    # region "us" > 1 throws, so b7 is not read though n = 7; b8 has no region (unknown, not
    # a throw): read; an OR decided before the mismatch is evaluated reads b7
    assert read(spark, store_root, topics="orders", sql92="region > 1").count() == 0

    def bodies(expr: str) -> list[str]:
        return sorted(
            bytes(r.body).decode()
            for r in read(spark, store_root, topics="orders", sql92=expr).select("body").collect()
        )

    assert bodies("region > 1 OR n = 7 OR n = 8") == ["b8"]
    assert bodies("n = 7 OR region > 1") == ["b7"]


@pytest.mark.parametrize(
    ("expr", "where"),
    [
        ("n >", "position 3"),
        ("region = NULL", "position 7"),
        ("n BETWEEN 9 AND 1", "position 2"),
        ("n = 1 m = 2", "position 6 (token 'm')"),
        ("", "empty"),
        ("(" * 300 + "n = 1" + ")" * 300, "deeper"),
    ],
)
def test_a_malformed_expression_is_the_option_error(spark, store_root: str, expr: str, where: str) -> None:
    _fill(store_root, 4)
    with pytest.raises(RmqLogOptionError) as info:
        SourceOptions.parse({"path": store_root, "topics": "orders", "sql92": expr}, streaming=False)
    assert info.value.option == "sql92" and where in str(info.value)
    with pytest.raises(Exception, match=r"sql92.*invalid SQL92 expression"):
        read(spark, store_root, topics="orders", sql92=expr).collect()
    with pytest.raises(RmqLogOptionError, match="sql92"):
        SourceOptions.parse({"path": store_root, "topics": "orders", "key": "k", "sql92": "n = 1"}, streaming=False)


def test_the_task_reads_whole_windows(store_root: str) -> None:
    props = _fill(store_root)
    part = QueueRange(store_root, "orders", 0, 0, 100, batch_rows=64, sql92="n >= 100 AND region = 'ap'")
    got = [b for batch in read_range(part) for b in batch.column("body").to_pylist()]
    assert got == [f"b{i}".encode() for i in range(0, 200, 2) if i >= 100 and props[i].get("region") == "ap"]


def test_stream_with_sql92(spark, store_root: str, tmp_path) -> None:
    _fill(store_root)
    out = []
    q_ = (
        spark.readStream.format("rmqlog")
        .option("path", store_root)
        .option("topics", "orders")
        .option("startingOffsets", "earliest")
        .option("sql92", "n < 5")
        .load()
        .writeStream.foreachBatch(lambda df, _: out.extend(bytes(r.body).decode() for r in df.collect()))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q_.awaitTermination()
    assert sorted(out) == [f"b{i}" for i in range(5)]


def test_a_wire_range_is_pulled_with_the_sql92_expression(tmp_path) -> None:
    """Over the wire the broker filters (expressionType SQL92, enablePropertyFilter=true); the
    tags option is then kept by the task; a broker with the switch off refuses the pull."""
    from rmqnet.client import BrokerError, Producer
    from spark_rmq.wire_read import WireRange, read_wire_range

    from .wire_servers import wire_servers

    with wire_servers() as servers:
        servers.start_broker("broker-a", tmp_path / "a", topics={"T": 1}, enable_property_filter=True)
        with Producer("PG", servers.namesrv) as p:
            for i in range(60):
                p.send(
                    "T",
                    f"m{i}".encode(),
                    tags="x" if i % 2 else "y",
                    properties={"n": str(i)},
                    queue_id=0,
                    broker_name="broker-a",
                )
        servers.dispatched("broker-a")
        ns = servers.namesrv
        got = pa.Table.from_batches(
            list(read_wire_range(WireRange(ns, "T", "broker-a", 0, 0, 60, batch_rows=7, sql92="n >= 40")))
        )
        assert got["queueOffset"].to_pylist() == list(range(40, 60))
        got = pa.Table.from_batches(
            list(read_wire_range(WireRange(ns, "T", "broker-a", 0, 0, 50, ("x",), batch_rows=7, sql92="n >= 40")))
        )
        assert got["queueOffset"].to_pylist() == [41, 43, 45, 47, 49]
        servers.start_broker("broker-b", tmp_path / "b", topics={"U": 1})
        with Producer("PG", servers.namesrv) as p:
            p.send_batch("U", {"body": [b"u"]}, queue_id=0, broker_name="broker-b")
        servers.dispatched("broker-b")
        with pytest.raises(BrokerError, match="does not support consumer to filter message by SQL92"):
            list(read_wire_range(WireRange(ns, "U", "broker-b", 0, 0, 1, sql92="n >= 40")))
