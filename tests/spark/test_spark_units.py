"""Pure-Python parts of the data source: options, offsets, admission control, hashing."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from rmqlog.hashing import java_string_hash
from spark_rmq.errors import RmqLogOptionError
from spark_rmq.offsets import pack_ranges, plan_ranges, sorted_offsets, split_messages
from spark_rmq.options import SinkOptions, SourceOptions, parse_duration_ms, parse_timestamp_ms
from spark_rmq.routing import java_hash


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"topics": "a"}, "path"),
        ({"path": "/x"}, "topics"),
        ({"path": "/x", "topics": "a", "topicPattern": "a.*"}, "topics"),
        ({"path": "/x", "topics": "bad/topic"}, "topics"),
        ({"path": "/x", "topicPattern": "("}, "topicPattern"),
        ({"path": "/x", "assign": '{"a": [-1]}'}, "assign"),
        ({"path": "/x", "topics": "a", "startingOffsets": "{nope"}, "startingOffsets"),
        ({"path": "/x", "topics": "a", "startingOffsets": '{"a": 1}'}, "startingOffsets"),
        ({"path": "/x", "topics": "a", "startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({"path": "/x", "topics": "a", "maxMessagesPerTrigger": "0"}, "maxMessagesPerTrigger"),
        ({"path": "/x", "topics": "a", "maxBytesPerTrigger": "lots"}, "maxBytesPerTrigger"),
        ({"path": "/x", "topics": "a", "maxTriggerDelay": "soon"}, "maxTriggerDelay"),
        ({"path": "/x", "topics": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"path": "/x", "topics": "a", "group": "bad group!"}, "group"),
        ({"path": "/x", "topics": "a", "maxMessagePerTrigger": "5"}, "maxMessagePerTrigger"),
        ({"path": "/x", "topics": "a", "endingOffsets": "latest"}, "endingOffsets"),  # streaming only
        ({"path": "/x", "topics": "a", "packMessagesPerPartition": "-1"}, "packMessagesPerPartition"),
        ({"path": "/x", "topics": "a", "packMessagesPerPartition": "many"}, "packMessagesPerPartition"),
    ],
)
def test_bad_source_options_name_the_option(options: dict, option: str) -> None:
    with pytest.raises(RmqLogOptionError) as err:
        SourceOptions.parse(options, streaming=True)
    assert err.value.option == option
    assert option in str(err.value)


def test_source_options_parse() -> None:
    o = SourceOptions.parse(
        {
            "path": "/x",
            "topics": "b, a",
            "startingOffsets": '{"a/0": 5, "b/1": -2}',
            "maxtriggerdelay": "30s",
            "tags": "A || B",
            "maxMessagesPerPartition": "10",
            "failOnDataLoss": "false",
        },
        streaming=False,
    )
    assert o.topics == ("a", "b")
    assert o.starting == {"a/0": 5, "b/1": -2}
    assert o.max_trigger_delay_ms == 30_000
    assert o.tags == frozenset({"A", "B"})
    assert o.fail_on_data_loss is False
    assert SourceOptions.parse({"path": "/x", "topics": "a", "tags": "*"}, streaming=True).tags is None


def test_timestamps_and_durations() -> None:
    assert parse_timestamp_ms("t", "1700000000000") == 1_700_000_000_000
    assert parse_timestamp_ms("t", "2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_timestamp_ms("t", "2023-11-14T22:13:20") == 1_700_000_000_000  # no offset: UTC
    assert parse_duration_ms("d", "500ms") == 500
    assert parse_duration_ms("d", "15m") == 900_000
    assert parse_duration_ms("d", "250") == 250


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({}, "path"),
        ({"path": "/x", "topic": "a b"}, "topic"),
        ({"path": "/x", "queueSelector": "random"}, "queueSelector"),
        ({"path": "/x", "shardingKey": "user"}, "shardingKey"),
        ({"path": "/x", "compression": "lz4"}, "compression"),
    ],
)
def test_bad_sink_options_name_the_option(options: dict, option: str) -> None:
    with pytest.raises(RmqLogOptionError) as err:
        SinkOptions.parse(options)
    assert err.value.option == option


def test_offsets_are_sorted_by_topic_then_queue() -> None:
    assert list(sorted_offsets({"b/0": 1, "a/10": 2, "a/2": 3})) == ["a/2", "a/10", "b/0"]


def test_split_messages_is_proportional_and_starves_no_queue() -> None:
    start = {"t/0": 0, "t/1": 0, "t/2": 0, "t/3": 5}
    end = {"t/0": 1000, "t/1": 100, "t/2": 1, "t/3": 5}
    got = split_messages(start, end, 110)
    taken = {k: got[k] - start[k] for k in got}
    assert taken["t/2"] == 1  # tiny backlog still moves
    assert taken["t/3"] == 0  # no backlog, nothing
    assert sum(taken.values()) == 110
    assert taken["t/0"] > 5 * taken["t/1"]
    assert split_messages(start, end, 10_000) == end


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=12), st.integers(1, 5000))
@example(backlogs=[1, 2, 2], budget=4)  # the one left over must skip a queue already full
def test_split_messages_never_exceeds_backlog(backlogs: list[int], budget: int) -> None:
    start = {f"t/{i}": 7 for i in range(len(backlogs))}
    end = {f"t/{i}": 7 + b for i, b in enumerate(backlogs)}
    got = split_messages(start, end, budget)
    taken = [got[f"t/{i}"] - 7 for i in range(len(backlogs))]
    assert all(0 <= t <= b for t, b in zip(taken, backlogs, strict=True))
    assert all(t >= 1 for t, b in zip(taken, backlogs, strict=True) if b)
    assert sum(taken) <= max(budget, sum(1 for b in backlogs if b))
    assert sum(taken) == min(sum(backlogs), max(budget, sum(1 for b in backlogs if b)))  # the budget is used


def test_pack_ranges_groups_small_queues_in_order_up_to_the_budget() -> None:
    ranges = [("a/0", 0, 40), ("a/1", 5, 35), ("a/2", 0, 20), ("a/3", 0, 100), ("b/0", 7, 8)]
    planned = {k: b - a for k, a, b in ranges}
    assert pack_ranges(ranges, planned, 64) == [
        [("a/0", 0, 40)],  # a/1 would take the task to 70
        [("a/3", 0, 100)],  # over the budget: alone
        [("a/1", 5, 35), ("a/2", 0, 20), ("b/0", 7, 8)],
    ]
    assert pack_ranges(ranges, planned, 1000) == [ranges]
    assert pack_ranges(ranges, planned, 0) == [[r] for r in ranges]  # 0: a task per range
    assert pack_ranges([], {}, 64) == []


def test_pack_ranges_follows_the_planned_sizes_not_the_ranges() -> None:
    """A replayed micro-batch whose ranges retention shortened is cut into the same tasks:
    the grouping follows the sizes the logged offsets span."""
    planned = {"a/0": 40, "a/1": 30}
    first = pack_ranges([("a/0", 0, 40), ("a/1", 0, 30)], planned, 64)
    replay = pack_ranges([("a/0", 30, 40), ("a/1", 0, 30)], planned, 64)  # a/0's first 30 deleted since
    assert [[r[0] for r in g] for g in first] == [[r[0] for r in g] for g in replay] == [["a/0"], ["a/1"]]
    # a queue missing from the plan (new mid-stream) counts by its range
    assert pack_ranges([("a/0", 0, 40), ("n/0", 0, 10)], {"a/0": 40}, 64) == [[("a/0", 0, 40), ("n/0", 0, 10)]]


def test_pack_budget_never_exceeds_max_messages_per_partition() -> None:
    base = {"path": "/x", "topics": "a"}
    assert SourceOptions.parse(base, streaming=True).pack_budget == 65536
    assert SourceOptions.parse({**base, "packMessagesPerPartition": "0"}, streaming=True).pack_budget == 0
    assert SourceOptions.parse({**base, "maxMessagesPerPartition": "3"}, streaming=True).pack_budget == 3
    assert (
        SourceOptions.parse(
            {**base, "packMessagesPerPartition": "2", "maxMessagesPerPartition": "3"}, streaming=True
        ).pack_budget
        == 2
    )


def test_plan_ranges_cuts_large_ranges() -> None:
    assert plan_ranges({"t/0": 3, "t/1": 0}, {"t/0": 10, "t/1": 0}, 3) == [("t/0", 3, 6), ("t/0", 6, 9), ("t/0", 9, 10)]


@given(
    st.lists(
        st.one_of(
            st.none(),
            st.text(st.characters(max_codepoint=127), max_size=40),
            st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
        ),
        max_size=50,
    )
)
def test_vectorized_hash_is_java_hashcode(values: list[str | None]) -> None:
    """ASCII and any Unicode (2-, 3- and 4-byte UTF-8; surrogate pairs above U+FFFF, as Java)."""
    got = java_hash(pa.array(values, pa.string()))
    want = np.array([0 if v is None else java_string_hash(v) for v in values], np.int64)
    assert got.tolist() == want.tolist()


def test_java_hash_of_known_java_values() -> None:
    # "日本語".hashCode() and "😀".hashCode() (surrogates D83D DE00) as a JVM computes them
    assert java_hash(pa.array(["日本語", "😀", "TagA", "ü"])).tolist() == [25921943, 1772899, 2598919, 252]


def test_shared_store_is_reused_and_refuses_a_replaced_root(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    import rmqlog
    from spark_rmq.stores import shared_store

    root = str(tmp_path / "s")
    ms = shared_store(root)
    assert shared_store(root) is ms  # one open store per process: no recovery per task
    shutil.rmtree(root)
    rmqlog.MessageStore.open(root).close()  # a new store at the same path
    with pytest.raises(rmqlog.StoreError, match="deleted or replaced"):
        shared_store(root)


def _nn(t: pa.DataType) -> pa.Field:
    return pa.field("element", t, nullable=False)


#: Every list-of-strings shape a keys column can take: Spark's array of a non-nullable column
#: (list<element: string not null>), large offsets, large strings, nulls only.
KEY_LIST_TYPES = [
    pa.list_(pa.string()),
    pa.list_(_nn(pa.string())),
    pa.large_list(pa.string()),
    pa.large_list(_nn(pa.large_string())),
    pa.list_(pa.large_string()),
    pa.list_(_nn(pa.large_string())),
]


@pytest.mark.parametrize("keys_type", KEY_LIST_TYPES, ids=str)
def test_keys_of_any_string_list_type_hash_as_their_joined_string(keys_type: pa.DataType) -> None:
    from spark_rmq.routing import hash_queue, keys_as_string

    rows = [["order-1"], ["a", "b"], [], ["日本語"], ["order-1"]]
    keys = pa.array(rows, keys_type)
    for col in (keys, pa.chunked_array([keys[:2], keys[2:]])):
        joined = keys_as_string(col)
        assert joined.to_pylist() == ["order-1", "a b", None, "日本語", "order-1"]
        queues = hash_queue(joined, np.full(5, 4)).to_pylist()
        assert queues == [
            abs(java_string_hash(s)) % 4 if s else None for s in ["order-1", "a b", None, "日本語", "order-1"]
        ]


@pytest.mark.parametrize("keys_type", KEY_LIST_TYPES, ids=str)
def test_put_batch_takes_keys_and_properties_of_non_nullable_types(tmp_path, keys_type: pa.DataType) -> None:  # type: ignore[no-untyped-def]
    import rmqlog

    props = pa.map_(pa.string(), pa.field("value", pa.string(), nullable=False))
    table = pa.table(
        {
            "topic": ["t", "t"],
            "body": [b"1", b"2"],
            "queueId": pa.array([0, 0], pa.int32()),
            "keys": pa.array([["k1"], ["k2", "k3"]], keys_type),
            "properties": pa.array([[("p", "1")], [("p", "2"), ("q", "3")]], props),
        }
    )
    with rmqlog.MessageStore.open(tmp_path / "s") as ms:
        ms.put_batch(table)
        ms.dispatch()
        got = ms.read_queue("t", 0, 0, 2)
    assert got["keys"].to_pylist() == [["k1"], ["k2", "k3"]]
    assert [{k: v for k, v in p if k in ("p", "q")} for p in got["properties"].to_pylist()] == [
        {"p": "1"},
        {"p": "2", "q": "3"},
    ]
