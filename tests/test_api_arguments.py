"""Arguments of every public call: any value of any type.

Every public method of :class:`rmqlog.MessageStore` (found by introspection: a method added
later is driven too, and one this file does not know how to call fails
:func:`test_every_public_method_is_driven`), the package's top-level functions,
``StoreConfig(...)`` and its broker.conf loading, and every option parser of
``spark_rmq/options.py`` and ``option_values.py`` are called with arbitrary values: None, bools, ints of any size,
floats with nan/inf, bytes, text with lone surrogates and NULs, lists, dicts, plain objects,
numpy scalars and arrays, Arrow arrays, tables and scalars of odd types, strings that are not
UTF-8. Each parameter gets either such a value or a plausible one (a topic of the store, a
queue id in range...), so that calls also get past their first check.

What is asserted: only the typed families escape (:class:`rmqlog.StoreError`, of which the
Spark source's :class:`spark_rmq.errors.RmqLogOptionError` is one), and the store is unharmed
afterwards: ``verify()`` finds no problem and the messages put before are read back as they
were. ``RMQ_API_EXAMPLES`` sets the examples per call (default 25; the opt-in run uses more).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from conftest import (
    SMALL_CQ,
    SMALL_INDEX_ENTRIES,
    SMALL_INDEX_SLOTS,
    small_store_config,
    snapshot_files,
    walk,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmqlog
from rmqlog import InvalidMessageError, InvalidTopicError, StoreConfig, StoreError
from rmqlog.access.wire import WireCalls
from rmqlog.recovery.replication_calls import ReplicaCalls
from spark_rmq import option_values as spark_option_values
from spark_rmq import options as spark_options

EXAMPLES = int(os.environ.get("RMQ_API_EXAMPLES", "25"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=False,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)

# ------------------------------------------------------------------------ arbitrary values

#: text of any code point, lone surrogates and NUL included (hypothesis leaves surrogates out by default)
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
SURROGATE_TEXT = st.builds(lambda a, b: a + "\ud800" + b, st.text(max_size=3), st.text(max_size=3))
NOT_UTF8 = b"\xed\xa0\x80"  # a lone surrogate as UTF-8 would spell it: not UTF-8


def _not_utf8_strings(values: list[bytes], typ: pa.DataType | None = None) -> pa.Array:
    """A string array whose values are the given bytes, valid UTF-8 or not (Arrow lets one
    be made from binary buffers; Spark's CAST(binary AS STRING) makes such columns)."""
    arr = pa.array(values, pa.binary())
    if typ is not None and pa.types.is_large_string(typ):
        return arr.cast(pa.large_binary()).view(pa.large_string())
    return arr.view(pa.string())


NUMPY_VALUES = st.sampled_from(
    [
        np.int64(0),
        np.int32(-1),
        np.int64(2**63 - 1),
        np.uint64(2**64 - 1),
        np.int8(3),
        np.float64("nan"),
        np.float32("inf"),
        np.float64(1.5),
        np.bool_(True),
        np.bool_(False),
        np.str_("T"),
        np.str_("\ud800"),
        np.bytes_(b"T"),
        np.datetime64("2024-01-01"),
        np.timedelta64(5, "s"),
        np.array([1, 2]),
        np.array([]),
        np.array(["T"]),
        np.zeros((2, 2)),
        np.array(0),
        np.complex128(1j),
    ]
)


def _arrow_values() -> list[Any]:
    bad = _not_utf8_strings([b"T", NOT_UTF8])
    return [
        pa.array([1, 2]),
        pa.array([], pa.null()),
        pa.array([None, None]),
        pa.array(["T", None]),
        pa.array([b"x"], pa.binary()),
        pa.array([1.5, float("nan")]),
        pa.array([[1], None]),
        pa.array([{"a": 1}]),
        pa.scalar(1),
        pa.scalar("T"),
        pa.scalar(None),
        pa.scalar(b"x"),
        bad,
        pa.chunked_array([pa.array(["T"]), pa.array(["U"])]),
        pa.array(["T"]).dictionary_encode(),
        pa.table({"x": [1]}),
        pa.table({}),
        pa.table({"topic": [1], "body": [2]}),
        pa.table({"topic": bad, "body": [b"a", b"b"]}),
        pa.record_batch({"topic": ["T"], "body": [b"b"]}),
        pa.array([1], pa.decimal128(5, 2)),
        pa.array([0], pa.date32()),
        pa.array([1], pa.duration("s")),
        pa.array(["T"], pa.large_string()),
        pa.array([True]),
        pa.array([1], pa.uint64()),
    ]


ARROW_VALUES = st.sampled_from(_arrow_values())


class Opaque:
    """A plain object: no protocol of any kind."""

    def __repr__(self) -> str:
        return "Opaque()"


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**400, -1, 0]),
    st.floats(),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308]),
    st.binary(max_size=12),
    ANY_TEXT,
    SURROGATE_TEXT,
    st.sampled_from(["", "\x00", "T\x00", "*", "a || b", " "]),
    st.builds(Opaque),
    NUMPY_VALUES,
    ARROW_VALUES,
)
ANY = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.sets(st.integers(), max_size=2),
        st.dictionaries(st.one_of(ANY_TEXT, st.integers()), inner, max_size=3),
    ),
    max_leaves=6,
)

# ---------------------------------------------------------------- plausible values by name

TOPICS = ["T", "U"]
KEYS = ["k1", "k2", "order-1"]
NOW_MS = int(time.time() * 1000)


def _string_column(draw: st.DrawFn, n: int, values: list[str]) -> pa.Array | pa.ChunkedArray:
    """A string column of ``n`` rows in one of the forms Arrow can hold."""
    picked = [draw(st.sampled_from(values)) for _ in range(n)]
    form = draw(st.sampled_from(["string", "large", "dict", "chunked", "null", "not-utf8", "not-utf8-large", "binary"]))
    if form == "large":
        return pa.array(picked, pa.large_string())
    if form == "dict":
        return pa.array(picked).dictionary_encode()
    if form == "chunked" and n > 1:
        return pa.chunked_array([pa.array(picked[:1]), pa.array(picked[1:])])
    if form == "null":
        return pa.array([None if i % 2 else v for i, v in enumerate(picked)], pa.string())
    if form.startswith("not-utf8"):
        raw = [v.encode() for v in picked]
        raw[draw(st.integers(0, n - 1))] += NOT_UTF8
        return _not_utf8_strings(raw, pa.large_string() if form.endswith("large") else pa.string())
    if form == "binary":
        return pa.array([v.encode() for v in picked], pa.binary())
    return pa.array(picked, pa.string())


@st.composite
def put_tables(draw: st.DrawFn) -> pa.Table | pa.RecordBatch:
    """Tables a put takes, or nearly: every column in the forms Arrow can hold, with values
    that are not UTF-8, nulls, wrong types; sometimes a column of anything."""
    n = draw(st.integers(0, 4))
    cols: dict[str, Any] = {
        "topic": _string_column(draw, n, TOPICS) if n else pa.array([], pa.string()),
        "body": pa.array([draw(st.binary(max_size=20)) for _ in range(n)], pa.binary()),
    }
    for name in draw(
        st.sets(
            st.sampled_from(
                ["tags", "keys", "properties", "queueId", "flag", "bornTimestamp", "delayLevel", "deliverTime"]
            ),
            max_size=3,
        )
    ):
        if n == 0:
            continue
        if name == "tags":
            cols[name] = _string_column(draw, n, ["a", "b", ""])
        elif name == "keys":
            flat = _string_column(draw, n, KEYS)
            if draw(st.booleans()):
                flat = flat.combine_chunks() if isinstance(flat, pa.ChunkedArray) else flat
                if pa.types.is_dictionary(flat.type):
                    flat = flat.dictionary_decode()
                cols[name] = (
                    pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), flat)
                    if not pa.types.is_large_string(flat.type)
                    else pa.LargeListArray.from_arrays(pa.array(np.arange(n + 1)), flat)
                )
            else:
                cols[name] = flat
        elif name == "properties":
            names = _string_column(draw, n, ["p", "q", "UNIQ_KEY", "TAGS"])
            values = _string_column(draw, n, ["v", "w"])
            names = names.combine_chunks() if isinstance(names, pa.ChunkedArray) else names
            values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
            names = names.dictionary_decode() if pa.types.is_dictionary(names.type) else names
            values = values.dictionary_decode() if pa.types.is_dictionary(values.type) else values
            try:
                cols[name] = pa.MapArray.from_arrays(
                    pa.array(np.arange(n + 1, dtype=np.int32)), names.cast(pa.string()), values.cast(pa.string())
                )
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # a form a map cannot hold: keep it as it is
                cols[name] = names
        elif name in ("queueId", "flag", "delayLevel"):
            cols[name] = pa.array([draw(st.one_of(st.none(), st.integers(-2, 5))) for _ in range(n)], pa.int64())
        elif name == "bornTimestamp":
            cols[name] = pa.array([draw(st.integers(0, 2**40)) for _ in range(n)], pa.timestamp("ms"))
        else:
            cols[name] = pa.array(
                [draw(st.integers(NOW_MS - 10_000, NOW_MS + 60_000)) for _ in range(n)], pa.timestamp("ms")
            )
    if draw(st.booleans()) and draw(st.booleans()):
        cols[draw(st.sampled_from(["topic", "body", "tags", "keys", "properties", "queueId", "other"]))] = draw(
            ARROW_VALUES
        )
    try:
        table = pa.table(cols)
    except (pa.ArrowException, TypeError, ValueError):  # columns of different lengths, a scalar: no table holds them
        return pa.table({"topic": pa.array(["T"] * n), "body": pa.array([b"b"] * n)})
    return table.to_batches()[0] if draw(st.booleans()) and table.num_rows else table


PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "topic": st.sampled_from(TOPICS),
    "topics": st.one_of(st.none(), st.lists(st.sampled_from(TOPICS), max_size=2)),
    "queue_id": st.integers(-1, 4),
    "group": st.sampled_from(["g", "G-1"]),
    "offset": st.integers(-1, 10),
    "start": st.integers(-1, 10),
    "end": st.integers(-1, 12),
    "max_count": st.integers(-1, 40),
    "max_bytes": st.one_of(st.none(), st.integers(-1, 4096)),
    "until": st.one_of(st.none(), st.integers(-1, 12)),
    "raw": st.booleans(),
    "disk": st.one_of(
        st.none(),
        st.builds(rmqlog.results.DiskLimits, st.integers(-1, 1 << 20), st.integers(0, 40), st.integers(0, 4096)),
    ),
    "tags": st.sampled_from([None, "*", "a", "a || b", ""]),
    "sql92": st.one_of(
        st.none(),
        st.sampled_from(
            [
                rmqlog.filter.compile_filter("p = 'v'"),
                rmqlog.filter.compile_filter("q > 1 AND p IS NOT NULL"),
                "p = 'v'",
                1,
            ]
        ),
    ),
    "keys": st.one_of(st.lists(st.sampled_from(KEYS), max_size=2), st.sampled_from(["k1 k2", ""])),
    "key": st.sampled_from(KEYS),
    "msg_id": st.sampled_from(["0A0B0C0D1234ABCDEF0123456789ABCD", "x"]),
    "properties": st.one_of(
        st.none(), st.dictionaries(st.sampled_from(["p", "q"]), st.sampled_from(["v", "w"]), max_size=2)
    ),
    "body": st.one_of(st.binary(max_size=20), st.text(max_size=5)),
    "flag": st.integers(-2, 2),
    "delay_level": st.one_of(st.none(), st.integers(0, 3)),
    "deliver_time_ms": st.one_of(st.none(), st.integers(NOW_MS - 1000, NOW_MS + 60_000)),
    "now_ms": st.one_of(st.none(), st.integers(NOW_MS - 10_000, NOW_MS + 3_600_000)),
    "ts_ms": st.integers(0, NOW_MS + 10_000),
    "begin_ms": st.integers(0, NOW_MS),
    "end_ms": st.one_of(st.none(), st.integers(0, NOW_MS + 10_000)),
    "commit_log_offset": st.integers(-1, 4096),
    "queues": st.one_of(st.none(), st.integers(1, 6)),
    "read_queues": st.one_of(st.none(), st.integers(1, 6)),
    "check_crc": st.one_of(st.none(), st.booleans()),
    "force": st.booleans(),
    "dispatch": st.booleans(),
    "writer": st.sampled_from(["w1", "w2"]),
    "sequence": st.integers(0, 50),
    "progress": st.one_of(st.none(), st.just(lambda done, total: None)),
    "table": put_tables(),
    "cluster": st.one_of(st.none(), st.sampled_from(["C1", "", "a\x02b"])),
    "callback": st.one_of(st.none(), st.just(lambda topics, queue_ids, max_offsets: None)),
    "tables": st.lists(put_tables(), max_size=3),
    "buffer_bytes": st.one_of(st.integers(-1, 200), st.just(256 << 20)),
    "columns": st.one_of(
        st.none(),
        st.lists(st.sampled_from(["body", "keys", "queueOffset", "msgId", "nope"]), max_size=3),
        st.just("body"),
    ),
    # open(): roots are made under the test's folder (see _root), never elsewhere
    "root": st.sampled_from(["new", "store", "file", "nul", "under-file", "long", "empty-dir"]),
    "config": st.one_of(st.none(), st.just("small")),
    "repair": st.booleans(),
    "create": st.booleans(),
    "read_only": st.booleans(),
    "scheduler": st.booleans(),
    "data": st.one_of(st.binary(max_size=64), st.just(b"\x00" * 12)),
    "clock": st.one_of(st.none(), st.builds(rmqlog.SystemClock), st.builds(rmqlog.ManualClock, st.just(NOW_MS))),
    "offsets": st.dictionaries(st.integers(-1, 20), st.integers(-1, 10), max_size=3),
    "queue_offsets": st.lists(st.integers(-1, 10), max_size=3),
    "drop": st.lists(st.sampled_from(["REAL_TOPIC", "p", "UNIQ_KEY"]), max_size=2).map(tuple),
    "find": st.lists(st.sampled_from(["REAL_QID", "q", "TAGS"]), max_size=2).map(tuple),
    "system": st.booleans(),
    "wait_flush": st.booleans(),
    "defer_dispatch": st.booleans(),
    "rows": st.one_of(
        st.none(),
        st.builds(rmqlog.PutRows, st.just([0]), st.just([0]), st.just(["x"]), st.just(0), st.just(0), st.just(0)),
    ),
    "messages": st.lists(
        st.one_of(
            st.builds(
                rmqlog.WireMessage,
                st.sampled_from(TOPICS),
                st.integers(-1, 4),
                st.binary(max_size=20),
                st.integers(-2, 2),
                st.sampled_from([0, 1, 4, 64]),
                st.integers(-1, NOW_MS),
                st.sampled_from([None, "127.0.0.1:1", "x", b"\x7f\x00\x00\x01\x00\x00\x00\x01"]),
                st.sampled_from(
                    [
                        "",
                        "p\x01v\x02",
                        "WAIT\x01true\x02TAGS\x01a\x02",
                        "DELAY\x012\x02",
                        "x\x02",
                        "UNIQ_KEY\x01AB\x02KEYS\x01k1 k2\x02",
                        "RMQLOG_X\x01v\x02",
                    ]
                ),
                st.integers(-1, 3),
            ),
            st.tuples(st.sampled_from(TOPICS), st.integers(0, 3), st.binary(max_size=4)),
            ANY,
        ),
        max_size=4,
    ),
    "topic_config": st.builds(
        rmqlog.TopicConfig,
        st.sampled_from(TOPICS),
        st.integers(0, 6),
        st.integers(0, 6),
        st.integers(-1, 8),
        st.sampled_from(["SINGLE_TAG", 1]),
        st.integers(-1, 2),
        st.booleans(),
    ),
    "persist": st.booleans(),
    "changes": st.one_of(
        st.dictionaries(
            st.sampled_from(["T@g", "T@G-1", "bad/t@g", "T", "T@bad/g"]),
            st.one_of(st.none(), st.dictionaries(st.integers(-1, 4), st.integers(-1, 10), max_size=2)),
            max_size=2,
        ),
        st.dictionaries(
            st.sampled_from(["g", "G-1", "bad/g"]),
            st.one_of(
                st.none(),
                st.builds(
                    rmqlog.SubscriptionGroupConfig,
                    st.sampled_from(["g", "G-1"]),
                    st.booleans(),
                    retry_queue_nums=st.integers(-1, 3),
                ),
            ),
            max_size=2,
        ),
    ),
    "base": st.one_of(st.none(), st.just({})),
    "since": st.one_of(st.none(), st.just(rmqlog.FileStamp(0, 0, 0, 0, 0))),
    "applied": st.one_of(st.booleans(), st.sampled_from([0, "yes", None])),
}
#: parameters a plausible value is always given for: any other would be a path on this machine
ONLY_PLAUSIBLE = {"root"}

#: the public methods of MessageStore and of its faces (``store.wire``, ``store.replica``) this
#: file drives, a face's named ``face.method`` (a new one must be added here)
METHODS = {
    "append_state",
    "clean_expired",
    "close",
    "commit_offset",
    "committed_offset",
    "consume_queue",
    "create_topic",
    "delete_topic",
    "deliver_due",
    "dispatch",
    "flush",
    "flushed_offset",
    "get_messages",
    "max_offset",
    "message_by_id",
    "message_by_offset",
    "min_offset",
    "offset_for_timestamp",
    "open",
    "published_tail",
    "put",
    "put_batch",
    "put_batches",
    "put_stream",
    "query_by_key",
    "query_by_time",
    "query_by_unique_key",
    "read_queue",
    "read_window",
    "record_sizes",
    "wire.put_wire",
    "wire.on_arrival",
    "wire.record_at",
    "wire.index_last_update",
    "wire.earliest_store_time",
    "start_services",
    "stop_services",
    "topics",
    "verify",
    "writer_sequence",
    "replica.replica_read",
    "replica.replica_end",
    "replica.replica_append",
    "replica.commit_log_min_offset",
    "replica.consumer_offset_table",
    "replica.replica_truncate",
    "replica.record_boundary",
    "replica.replication_checkpoint",
    "replica.set_replication_checkpoint",
    "replica.delay_offsets",
    "replica.set_delay_offsets",
    "wire.stored_rows",
    "wire.wire_records",
    "wire.put_messages",
    "wire.flush_to",
    "wire.dispatch_put",
    "put_topic",
    "remove_topic_config",
    "persist_topics",
    "topic_table",
    "merge_consumer_offsets",
    "merge_subscription_groups",
    "wire.record_head",
    "wire.dispatched_offset",
}


#: where the methods are: the store's own, then each face's (an attribute of the store)
FACES: dict[str, type] = {"": rmqlog.MessageStore, "wire.": WireCalls, "replica.": ReplicaCalls}


def public_methods() -> dict[str, Callable[..., Any]]:
    return {
        prefix + name: member
        for prefix, cls in FACES.items()
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and callable(member)
    }


def _bound(store: rmqlog.MessageStore, name: str) -> Callable[..., Any]:
    """The method ``name`` of ``store`` (``face.method``: of that face)."""
    target: Any = store
    for part in name.split("."):
        target = getattr(target, part)
    return target


def _value(name: str) -> st.SearchStrategy[Any]:
    plausible = PLAUSIBLE[name]
    return plausible if name in ONLY_PLAUSIBLE else st.one_of(plausible, ANY)


@st.composite
def call_arguments(draw: st.DrawFn, method: Callable[..., Any]) -> dict[str, Any]:
    """Keyword arguments for ``method``: every required parameter, some optional ones."""
    out: dict[str, Any] = {}
    for p in inspect.signature(method).parameters.values():
        if p.name in ("self", "cls") or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is p.empty or draw(st.booleans()):
            out[p.name] = draw(_value(p.name))
    return out


# ------------------------------------------------------------------------- the store


def _config() -> StoreConfig:
    # one commitlog segment for the whole run (a forced retention pass never deletes the
    # segment being written, so the seed messages stay), small queues and index files
    return StoreConfig(
        mapped_file_size_commit_log=16 << 20,
        mapped_file_size_consume_queue=SMALL_CQ,
        max_hash_slot_num=SMALL_INDEX_SLOTS,
        max_index_num=SMALL_INDEX_ENTRIES,
        message_delay_level="1s 2s 3s",
    )


class Harness:
    """One store shared by every example, its seed messages, and the folder open() may use."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "store"
        self.store = rmqlog.MessageStore.open(self.root, _config())
        self.store.create_topic("T", 4)
        seeds = pa.table(
            {
                "topic": ["T"] * 4,
                "body": [b"seed%d" % i for i in range(4)],
                "keys": [["k1"], ["k2"], ["k1"], ["order-1"]],
                "tags": ["a", "b", "a", None],
            }
        )
        result = self.store.put_batch(seeds, dispatch=True)
        self.seeds = list(
            zip(result.column("commitLogOffset").to_pylist(), seeds.column("body").to_pylist(), strict=True)
        )
        (base / "file").write_bytes(b"not a store")
        (base / "empty-dir").mkdir()
        self.count = 0
        self.seen: dict[tuple[str, int], int] = {}

    def root_for(self, name: str) -> Any:
        self.count += 1
        return {
            "new": self.base / f"new-{self.count}",
            "store": self.root,
            "file": self.base / "file",
            "nul": str(self.base / "a\x00b"),
            "under-file": self.base / "file" / "sub",
            "long": self.base / ("x" * 300),
            "empty-dir": self.base / "empty-dir",
        }[name]

    def check(self) -> None:
        """The store is open, not dispatching in the background, and unharmed."""
        if self.store._closed:
            self.store = rmqlog.MessageStore.open(self.root, _config())
        self.store.stop_services()
        report = self.store.verify()
        assert report.problems == [], report.problems
        for offset, body in self.seeds:
            row = self.store.message_by_offset(offset)
            assert row is not None and row["body"] == body, (offset, row)
        self.store.dispatch()
        for topic, config in self.store.topics().items():  # what was put since: readable, UTF-8
            for q in range(max(config.read_queue_nums, config.write_queue_nums)):
                seen, end = self.seen.get((topic, q), 0), self.store.max_offset(topic, q)
                table = self.store.read_queue(topic, q, seen, end)
                table.validate(full=True)
                table.to_pylist()
                self.seen[(topic, q)] = end

    def close(self) -> None:
        self.store.close()


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    h = Harness(tmp_path_factory.mktemp("api"))
    try:
        yield h
    finally:
        h.close()


def _call_store_method(h: Harness, name: str, kwargs: dict[str, Any]) -> None:
    """Call ``name`` with ``kwargs``: only the StoreError family may escape."""
    kwargs = dict(kwargs)
    try:
        if name == "open":
            kwargs["root"] = h.root_for(kwargs["root"])
            if kwargs.get("config") == "small":
                kwargs["config"] = _config()
            opened = rmqlog.MessageStore.open(**kwargs)
            opened.close()
        elif name == "replica.replica_truncate":
            # a cut keeps the seeds: a record is put to be cut, and an offset in range lands in it
            tail = h.store.published_tail()
            h.store.put("T", b"to be cut")
            offset = kwargs.get("offset")
            if (
                isinstance(offset, int | np.integer)
                and not isinstance(offset, bool | np.bool_)
                and 0 <= offset < 1 << 40
            ):
                kwargs["offset"] = tail + int(offset)
            h.store.replica.replica_truncate(**kwargs)
        else:
            _bound(h.store, name)(**kwargs)
    except StoreError:
        pass
    h.check()


def test_every_public_method_is_driven() -> None:
    """A public method this file does not know how to call fails here: add it to METHODS
    (and a plausible value for each new parameter name to PLAUSIBLE)."""
    found = set(public_methods())
    assert found - METHODS == set(), f"public methods the argument test does not drive: {sorted(found - METHODS)}"
    assert METHODS - found == set(), f"methods gone from MessageStore: {sorted(METHODS - found)}"
    for name, method in public_methods().items():
        for p in inspect.signature(method).parameters.values():
            if p.name not in ("self", "cls"):
                assert p.name in PLAUSIBLE, f"MessageStore.{name}: no strategy for parameter {p.name!r}"


@pytest.mark.parametrize("name", sorted(METHODS))
def test_public_method_with_any_arguments(harness: Harness, name: str) -> None:
    method = public_methods()[name]

    @SETTINGS
    @given(call_arguments(method))
    def run(kwargs: dict[str, Any]) -> None:
        _call_store_method(harness, name, kwargs)

    run()


# --------------------------------------------------------------- top-level functions


def test_top_level_functions_with_any_arguments() -> None:
    """Every function of the package's namespace (today: pin_malloc_thresholds) takes what
    its signature says, or raises only the typed family."""
    functions = {name: f for name, f in vars(rmqlog).items() if inspect.isfunction(f) and not name.startswith("_")}
    assert functions, "the package exports no function: drop this test"
    for f in functions.values():
        _drive(f)


def _drive(f: Callable[..., Any]) -> None:
    @SETTINGS
    @given(call_arguments_for(f))
    def run(kwargs: dict[str, Any]) -> None:
        with contextlib.suppress(StoreError):
            f(**kwargs)

    run()


def call_arguments_for(f: Callable[..., Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Arbitrary values for every parameter of ``f`` (no plausible values: none is known)."""
    params = [p for p in inspect.signature(f).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return st.fixed_dictionaries(
        {p.name: ANY for p in params if p.default is p.empty},
        optional={p.name: ANY for p in params if p.default is not p.empty},
    )


# ------------------------------------------------------------------------- StoreConfig

CONFIG_FIELDS = [f.name for f in StoreConfig.__dataclass_fields__.values()]
DEFAULTS = StoreConfig()


def _plausible_field(name: str) -> st.SearchStrategy[Any]:
    """Values near a field's default and its edges (of its own type), for the parse past the type check."""
    default = getattr(DEFAULTS, name)
    if isinstance(default, bool):
        return st.booleans()
    if isinstance(default, int):
        return st.one_of(
            st.integers(-2, 200), st.sampled_from([default, default * 2, 2**31 - 1, 2**31, 2**63, 4096, 20])
        )
    return st.sampled_from(
        [
            "SYNC_FLUSH",
            "ASYNC_FLUSH",
            "04",
            "04;16",
            "1s 2h",
            "127.0.0.1:1",
            "[::1]:10911",
            "999.1.1.1:5",
            "h:0",
            "",
            " ",
            "1x",
            "25",
            "1.2.3.4:99999",
            default if default is not None else "",
        ]
    )


@SETTINGS
@given(
    st.dictionaries(
        st.sampled_from(CONFIG_FIELDS),
        st.deferred(lambda: st.one_of(ANY, st.sampled_from(CONFIG_FIELDS).flatmap(_plausible_field))),
        max_size=4,
    )
)
def test_store_config_with_any_values(values: dict[str, Any]) -> None:
    try:
        config = StoreConfig(**values)
    except rmqlog.ConfigError:
        return
    for name, value in values.items():  # what was accepted is what was given
        assert getattr(config, name) is value


PROPERTY_KEYS = [
    "flushDiskType",
    "mappedFileSizeCommitLog",
    "maxMessageSize",
    "brokerIP1",
    "listenPort",
    "deleteWhen",
    "messageDelayLevel",
    "checkCRCOnRecover",
    "autoCreateTopicEnable",
    "storePathRootDir",
    "unknownKey",
    "timerPrecisionMs",
    "destroyMapedFileIntervalForcibly",
]
PROPERTY_LINE = st.one_of(
    st.builds(
        lambda k, sep, v: f"{k}{sep}{v}",
        st.sampled_from(PROPERTY_KEYS),
        st.sampled_from(["=", " = ", ":", " "]),
        st.one_of(
            st.sampled_from(
                [
                    "true",
                    "false",
                    "SYNC_FLUSH",
                    "4096",
                    "-1",
                    "1e3",
                    "99999999999999999999",
                    "",
                    "0x10",
                    "1s 5s",
                    "04",
                    "127.0.0.1",
                    "10911",
                    "\\u0041",
                ]
            ),
            ANY_TEXT,
        ),
    ),
    ANY_TEXT,
    st.just("#comment"),
    st.just("!comment"),
    st.just("key=value\\"),
)


@SETTINGS
@given(
    st.one_of(
        st.lists(PROPERTY_LINE, max_size=6).map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")),
        st.binary(max_size=64),
    ),
    st.sampled_from(["file", "missing", "folder", "str", "bytes-path", "nul"]),
    st.dictionaries(st.one_of(st.sampled_from(CONFIG_FIELDS), ANY_TEXT), ANY, max_size=2),
)
def test_broker_conf_loading_with_any_file(
    tmp_path_factory: pytest.TempPathFactory, content: bytes, kind: str, overrides: dict[str, Any]
) -> None:
    base = tmp_path_factory.mktemp("conf")
    path: Any = base / "broker.conf"
    path.write_bytes(content)
    if kind == "missing":
        path = base / "nothing.conf"
    elif kind == "folder":
        path = base
    elif kind == "str":
        path = str(path)
    elif kind == "bytes-path":
        path = os.fsencode(path)
    elif kind == "nul":
        path = str(path) + "\x00"
    with contextlib.suppress(rmqlog.ConfigError):
        StoreConfig.from_properties(path, **overrides)


@SETTINGS
@given(ANY, st.dictionaries(ANY_TEXT, ANY, max_size=2))
def test_broker_conf_loading_with_any_path(path: Any, overrides: dict[str, Any]) -> None:
    if isinstance(path, str | bytes | os.PathLike):  # a path of this machine: the test above makes them
        return
    with contextlib.suppress(rmqlog.ConfigError):
        StoreConfig.from_properties(path, **overrides)


# ------------------------------------------------------------------ Spark option parsers

SOURCE_NAMES = sorted(spark_options.SOURCE_OPTIONS | spark_options._SPARK_OPTIONS)
SINK_NAMES = sorted(spark_options.SINK_OPTIONS | spark_options._SPARK_OPTIONS)
OPTION_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "path": st.just("/nonexistent/rmq"),
    "topics": st.sampled_from(["T", "T,U", " ", "T,,", "bad topic"]),
    "topicpattern": st.sampled_from(["T.*", "(", "[a-"]),
    "assign": st.sampled_from(['{"T": [0, 1]}', '{"T": [-1]}', "[]", "{", '{"T": [1e400]}']),
    "startingoffsets": st.sampled_from(
        [
            "earliest",
            "latest",
            '{"T/0": 5}',
            '{"T/x": 1}',
            '{"T/0": -3}',
            '{"T/0": 1e999}',
            '{"T/99999999999999999999": 1}',
        ]
    ),
    "endingoffsets": st.sampled_from(
        ["latest", '{"T/0": 50}', '{"T/0": 9223372036854775807}', '{"T/0": 1' + "0" * 5000 + "}"]
    ),
    "startingtimestamp": st.sampled_from(["0", "2024-01-01T00:00:00Z", "-1", "9" * 5000, "2024-13-01", "99999-01-01"]),
    "endingtimestamp": st.sampled_from(["1700000000000", "2024-01-01", "x", "1" * 30]),
    "maxmessagespertrigger": st.sampled_from(["1", "0", "-1", "1" * 5000, "1.5", " 7 "]),
    "maxtriggerdelay": st.sampled_from(["5s", "1h", "99999999999999999999999h", "1" * 5000, "x"]),
    "tags": st.sampled_from(["*", "a || b", "\ud800", ""]),
    "group": st.sampled_from(["g", "bad group", "\ud800"]),
    "failondataloss": st.sampled_from(["true", "false", "maybe"]),
    "readonly": st.sampled_from(["true", "false"]),
    "key": st.sampled_from(["k1", ""]),
    "msgid": st.sampled_from(["0A0B0C0D1234ABCDEF0123456789ABCD", "x"]),
    "topic": st.sampled_from(["T", "bad topic"]),
    "queueselector": st.sampled_from(["hash", "roundRobin", "x"]),
    "shardingkey": st.sampled_from(["k", ""]),
    "writerid": st.sampled_from(["w", "", "\x00", "\ud800", "x" * 600]),
    "nameserver": st.sampled_from(
        ["127.0.0.1:9876", "h:1;h:2", "h", "h:0", "h:" + "9" * 5000, " ; ", "[::1]:9", "\ud800:1"]
    ),
    "consumemode": st.sampled_from(["pop", "offsets", "POP", " pop", "push"]),
    "invisibletime": st.sampled_from(["30s", "0", "1ms", "1" * 5000, "x"]),
}
#: over the wire (nameServer), offsets JSON is keyed topic/brokerName/queueId
WIRE_OFFSETS = [
    '{"T/b/0": 5}',
    '{"T/0": 5}',
    '{"T/b/c/0": 1}',
    '{"T/b a/0": 1}',
    '{"T/b/99999999999}": 1}',
    '{"T/b/0": -3}',
    '{"T/b/0": 1e999}',
    '{"T/\ud800/0": 1}',
    '{"T/b/0": 1' + "0" * 5000 + "}",
]


def _options(names: list[str]) -> st.SearchStrategy[dict[Any, Any]]:
    value = st.one_of(ANY, *(st.sampled_from(names).flatmap(lambda n: OPTION_VALUES.get(n, st.just("1"))),))
    known = st.dictionaries(st.sampled_from(names), value, max_size=6)
    return st.one_of(
        known.map(lambda d: {"path": "/nonexistent/rmq", "topics": "T", **d}),
        known,
        st.dictionaries(st.one_of(ANY_TEXT, st.integers(), st.none(), st.binary(max_size=4)), ANY, max_size=3),
        ANY,
    )


def _option_parsers() -> dict[str, Callable[..., Any]]:
    """The option parsers of spark_rmq/options.py and spark_rmq/option_values.py: their parse_*
    functions and each options class's ``parse``; found by name, so a new one is driven (and
    must be known below)."""
    out: dict[str, Callable[..., Any]] = {
        name: f
        for module in (spark_options, spark_option_values)
        for name, f in vars(module).items()
        if inspect.isfunction(f) and name.startswith("parse") and f.__module__ == module.__name__
    }
    for name, cls in vars(spark_options).items():
        if inspect.isclass(cls) and cls.__module__ == spark_options.__name__ and hasattr(cls, "parse"):
            out[f"{name}.parse"] = cls.parse
    return out


PARSER_ARGUMENTS: dict[str, st.SearchStrategy[tuple[tuple[Any, ...], dict[str, Any]]]] = {
    "SourceOptions.parse": st.tuples(
        st.tuples(_options(SOURCE_NAMES)), st.fixed_dictionaries({"streaming": st.one_of(st.booleans(), ANY)})
    ),
    "SinkOptions.parse": st.tuples(st.tuples(_options(SINK_NAMES)), st.just({})),
    **{
        name: st.tuples(
            st.tuples(
                st.one_of(st.sampled_from(["maxTriggerDelay", "endingOffsets"]), ANY),
                st.one_of(
                    st.sampled_from(
                        [
                            v
                            for s in ("startingoffsets", "endingoffsets", "startingtimestamp", "maxtriggerdelay")
                            for v in OPTION_VALUES[s].elements
                        ]
                    ),  # type: ignore[attr-defined]
                    ANY,
                ),
            ),
            st.just({}),
        )
        for name in ("parse_duration_ms", "parse_timestamp_ms", "parse_offsets_json")
    },
    "parse_wire_offsets_json": st.tuples(
        st.tuples(st.one_of(st.just("startingOffsets"), ANY), st.one_of(st.sampled_from(WIRE_OFFSETS), ANY)),
        st.just({}),
    ),
    "parse_name_server": st.tuples(st.tuples(st.one_of(OPTION_VALUES["nameserver"], ANY)), st.just({})),
    "parse_columns": st.tuples(
        st.tuples(
            st.one_of(
                st.dictionaries(
                    st.just("columns"),
                    st.one_of(
                        st.sampled_from(["body", "body,keys", "nope", "", "body,body", " queueOffset , body"]),
                        st.text(max_size=10),
                    ),
                ),
                ANY,
            )
        ),
        st.just({}),
    ),
    "parse_sql92": st.tuples(
        st.tuples(
            st.one_of(
                st.sampled_from(["a = 1", "a > 'x'", "b IN ('x', 'y') AND c IS NULL", "(", "a BETWEEN 1 AND", ""]),
                st.text(max_size=20),
                ANY,
            )
        ),
        st.just({}),
    ),
}


def test_every_option_parser_is_driven() -> None:
    assert set(_option_parsers()) == set(PARSER_ARGUMENTS), "add the new option parser to PARSER_ARGUMENTS"


@pytest.mark.parametrize("name", sorted(PARSER_ARGUMENTS))
def test_option_parser_with_any_values(name: str) -> None:
    parser = _option_parsers()[name]

    @SETTINGS
    @given(PARSER_ARGUMENTS[name])
    def run(call: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
        args, kwargs = call
        with contextlib.suppress(StoreError):  # RmqLogOptionError is one
            parser(*args, **kwargs)

    run()


# ======================================================================================
# Each fix the property test led to, pinned by a plain test (each failed on main's code).

S = "\ud800"  # a lone surrogate: a Python str no UTF-8 encoder takes


@pytest.fixture
def ts(root: Path) -> Iterator[rmqlog.MessageStore]:
    """A store with topic T (4 queues) holding 4 dispatched messages keyed k1."""
    s = rmqlog.MessageStore.open(root, small_store_config())
    s.create_topic("T", 4)
    s.put_batch(
        pa.table({"topic": ["T"] * 4, "body": [b"seed%d" % i for i in range(4)], "keys": [["k1"]] * 4}), dispatch=True
    )
    try:
        yield s
    finally:
        s.close()


def _unchanged(s: rmqlog.MessageStore, root: Path, call: Callable[[], Any], err: type[Exception]) -> Exception:
    """``call`` raises exactly ``err`` (or a subclass) and writes nothing."""
    before = snapshot_files(root, "append.state", "config/topics.json", "config/consumerOffset.json")
    with pytest.raises(err) as info:
        call()
    assert snapshot_files(root, "append.state", "config/topics.json", "config/consumerOffset.json") == before
    assert s.dispatch() == 0 and len(walk(root)) == 4
    return info.value


# ----------------------------------------------------- put() with Python strings


@pytest.mark.parametrize(
    ("kwargs", "err", "field"),
    [
        pytest.param({"topic": "T" + S}, InvalidTopicError, "topic", id="topic"),
        pytest.param({"topic": 5}, InvalidTopicError, "topic", id="topic-int"),
        pytest.param({"topic": b"T"}, InvalidTopicError, "topic", id="topic-bytes"),
        pytest.param({"tags": S}, InvalidMessageError, "tags", id="tags"),
        pytest.param({"keys": ["k", S]}, InvalidMessageError, "keys", id="keys-list"),
        pytest.param({"keys": "k " + S}, InvalidMessageError, "keys", id="keys-string"),
        pytest.param({"properties": {S: "v"}}, InvalidMessageError, "properties", id="property-name"),
        pytest.param({"properties": {"p": "v" + S}}, InvalidMessageError, "properties", id="property-value"),
        pytest.param({"properties": [("p", "v")]}, InvalidMessageError, "properties", id="properties-not-a-mapping"),
        pytest.param({"body": "text" + S}, InvalidMessageError, "body", id="body-str"),
    ],
)
def test_put_with_a_string_that_is_not_utf8_names_the_field(
    ts: rmqlog.MessageStore, root: Path, kwargs: dict[str, Any], err: type[Exception], field: str
) -> None:
    call = {"topic": "T", "body": b"b", **kwargs}
    e = _unchanged(ts, root, lambda: ts.put(call.pop("topic"), call.pop("body"), **call), err)
    assert isinstance(e, InvalidMessageError) and (e.row, e.field) == (0, field), str(e)


# ------------------------------------------ put_batch columns that are not UTF-8


def _column(form: str, values: list[bytes]) -> pa.Array | pa.ChunkedArray:
    """``values`` (bytes, UTF-8 or not) as a string column of the given Arrow form."""
    if form == "large_string":
        return _not_utf8_strings(values, pa.large_string())
    if form == "dictionary":
        return pa.DictionaryArray.from_arrays(pa.array(range(len(values)), pa.int32()), _not_utf8_strings(values))
    if form == "chunked":
        return pa.chunked_array([_not_utf8_strings(values[:1]), _not_utf8_strings(values[1:])])
    if form == "sliced":
        return _not_utf8_strings([b"pad", *values]).slice(1)
    return _not_utf8_strings(values)


FORMS = ["string", "large_string", "dictionary", "chunked", "sliced"]
BAD = [b"ok", b"ok", b"x" + NOT_UTF8, b"ok"]  # row 2 is not UTF-8


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("field", "err"), [("topic", InvalidTopicError), ("tags", InvalidMessageError), ("keys", InvalidMessageError)]
)
def test_a_string_column_value_that_is_not_utf8_names_its_row(
    ts: rmqlog.MessageStore, root: Path, form: str, field: str, err: type[Exception]
) -> None:
    values = [b"T", b"T", b"T" + NOT_UTF8, b"T"] if field == "topic" else BAD
    cols: dict[str, Any] = {"topic": ["T"] * 4, "body": [b"b"] * 4, field: _column(form, values)}
    e = _unchanged(ts, root, lambda: ts.put_batch(pa.table(cols)), err)
    assert isinstance(e, InvalidMessageError) and (e.row, e.field) == (2, field), str(e)


@pytest.mark.parametrize("part", ["keys-list", "keys-large-list", "property-name", "property-value"])
def test_a_list_or_map_value_that_is_not_utf8_names_its_row(ts: rmqlog.MessageStore, root: Path, part: str) -> None:
    offsets = pa.array([0, 1, 2, 3, 4], pa.int32())
    good = pa.array(["a", "b", "c", "d"])
    if part == "keys-list":
        col, field = pa.ListArray.from_arrays(offsets, _not_utf8_strings(BAD)), "keys"
    elif part == "keys-large-list":
        col, field = (
            pa.LargeListArray.from_arrays(offsets.cast(pa.int64()), _not_utf8_strings(BAD, pa.large_string())),
            "keys",
        )
    elif part == "property-name":
        col, field = pa.MapArray.from_arrays(offsets, _not_utf8_strings(BAD), good), "properties"
    else:
        col, field = pa.MapArray.from_arrays(offsets, good, _not_utf8_strings(BAD)), "properties"
    table = pa.table({"topic": ["T"] * 4, "body": [b"b"] * 4, field: col})
    e = _unchanged(ts, root, lambda: ts.put_batch(table), InvalidMessageError)
    assert (e.row, e.field) == (2, field), str(e)


def test_values_cut_inside_a_character_are_refused_though_their_bytes_join_into_utf8(
    ts: rmqlog.MessageStore, root: Path
) -> None:
    """'é' is C3 A9: two values b'\\xc3' and b'\\xa9' are each not UTF-8, all their bytes together are."""
    table = pa.table({"topic": ["T"] * 3, "body": [b"b"] * 3, "tags": _not_utf8_strings([b"caf\xc3", b"\xa9", b"x"])})
    e = _unchanged(ts, root, lambda: ts.put_batch(table), InvalidMessageError)
    assert (e.row, e.field) == (0, "tags"), str(e)


def test_utf8_beyond_ascii_and_junk_under_nulls_are_stored(ts: rmqlog.MessageStore) -> None:
    """The check refuses only what is not UTF-8: multi-byte characters pass, and bytes a null
    value spans (Arrow allows it) are no value."""
    junk = pa.StringArray.from_buffers(
        3,
        pa.py_buffer(np.array([0, 3, 6, 9], np.int32)),
        pa.py_buffer("标".encode() + NOT_UTF8 + b"abc"),
        pa.py_buffer(np.packbits([1, 0, 1], bitorder="little")),
        null_count=1,
    )
    table = pa.table({"topic": ["T"] * 3, "body": [b"b"] * 3, "tags": junk, "keys": [["键-1"], ["🔑"], ["k"]]})
    offsets = ts.put_batch(table).column("commitLogOffset").to_pylist()
    rows = [ts.message_by_offset(o) for o in offsets]
    assert [(r["tags"], r["keys"]) for r in rows] == [("标", ["键-1"]), (None, ["🔑"]), ("abc", ["k"])]


def test_an_idempotent_writer_that_is_not_utf8_is_refused(ts: rmqlog.MessageStore, root: Path) -> None:
    table = pa.table({"topic": ["T"], "body": [b"b"]})
    e = _unchanged(ts, root, lambda: ts.put_batch(table, writer="w" + S, sequence=1), InvalidMessageError)
    assert e.field == "writer"  # type: ignore[attr-defined]
    for bad in ("w" + S, 5, None, ["w"]):
        with pytest.raises(rmqlog.InvalidArgumentError):
            ts.writer_sequence(bad)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s: s.get_messages("g" + S, "T", 0, 0), id="get_messages"),
        pytest.param(lambda s: s.commit_offset("g" + S, "T", 0, 1), id="commit_offset"),
        pytest.param(lambda s: s.committed_offset("g" + S, "T", 0), id="committed_offset"),
    ],
)
def test_a_group_that_is_not_utf8_is_an_invalid_group(
    ts: rmqlog.MessageStore, root: Path, call: Callable[[Any], Any]
) -> None:
    _unchanged(ts, root, lambda: call(ts), rmqlog.InvalidGroupError)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s: s.query_by_key("T", "k" + S), id="query_by_key"),
        pytest.param(lambda s: s.query_by_unique_key("T", S), id="query_by_unique_key"),
        pytest.param(lambda s: s.message_by_id(S), id="message_by_id"),
        pytest.param(lambda s: s.message_by_id(None), id="message_by_id-none"),
        pytest.param(lambda s: s.get_messages("g", "T", 0, 0, tags="a || " + S), id="tag-subscription"),
        pytest.param(lambda s: s.get_messages("g", "T", 0, 0, tags=5), id="tag-subscription-int"),
        pytest.param(lambda s: s.min_offset("T" + S, 0), id="topic-of-a-read"),
        pytest.param(lambda s: s.consume_queue({}, 0), id="consume_queue-dict-topic"),
    ],
)
def test_a_text_argument_that_is_not_utf8_or_not_text_is_refused(
    ts: rmqlog.MessageStore, root: Path, call: Callable[[Any], Any]
) -> None:
    e = _unchanged(ts, root, lambda: call(ts), StoreError)
    assert isinstance(e, rmqlog.InvalidArgumentError | rmqlog.InvalidTopicError), repr(e)


def test_the_spark_sink_checks_the_strings_it_hashes(ts: rmqlog.MessageStore, root: Path) -> None:
    """Spark's CAST(binary AS STRING) makes string columns that are not UTF-8; the sink hashes
    topics and sharding keys before the store sees the rows."""
    from spark_rmq.options import SinkOptions
    from spark_rmq.sink import to_put_table

    opts = SinkOptions.parse({"path": str(root), "queueSelector": "hash"})
    table = pa.table(
        {"topic": _not_utf8_strings([b"T", b"T" + NOT_UTF8]), "body": [b"a", b"b"], "keys": [["k"], ["k"]]}
    )
    with pytest.raises(InvalidTopicError) as info:
        to_put_table(table, opts, ts)
    assert (info.value.row, info.value.field) == (1, "topic")
    opts = SinkOptions.parse({"path": str(root), "queueSelector": "hash", "shardingKey": "sk"})
    table = pa.table({"topic": ["T", "T"], "body": [b"a", b"b"], "sk": _not_utf8_strings([b"k" + NOT_UTF8, b"k"])})
    with pytest.raises(InvalidMessageError) as info:
        to_put_table(table, opts, ts)
    assert (info.value.row, info.value.field) == (0, "sk")


# ------------------------------------------------------------- arguments of any type


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s: s.get_messages("g", "T", 0, 0, check_crc=np.array([1, 2])), id="check_crc-array"),
        pytest.param(lambda s: s.read_queue("T", 0, 0, 5, check_crc="no"), id="check_crc-str"),
        pytest.param(
            lambda s: s.put_batch(pa.table({"topic": ["T"], "body": [b"b"]}), dispatch=np.array([1, 2])),
            id="dispatch-array",
        ),
        pytest.param(lambda s: s.put_batches(None), id="tables-none"),
        pytest.param(lambda s: s.put_batches(pa.table({"topic": ["T"], "body": [b"b"]})), id="tables-one-table"),
        pytest.param(lambda s: s.deliver_due([]), id="now_ms-list"),
        pytest.param(lambda s: s.deliver_due(float("inf")), id="now_ms-inf"),
        pytest.param(lambda s: s.clean_expired("x"), id="clean-now_ms-str"),
        pytest.param(lambda s: s.clean_expired(force=np.array([True, False])), id="force-array"),
        pytest.param(lambda s: s.verify(progress=[]), id="progress-not-callable"),
        pytest.param(lambda s: s.consume_queue("T", None), id="consume_queue-none"),
        pytest.param(lambda s: s.offset_for_timestamp("T", np.timedelta64(5, "s"), 0), id="queue_id-timedelta"),
        pytest.param(lambda s: s.query_by_time(0, topics=5), id="topics-int"),
        pytest.param(lambda s: s.query_by_time(0, topics="TU"), id="topics-str"),
        pytest.param(lambda s: s.writer_sequence({}), id="writer-dict"),
    ],
)
def test_arguments_of_a_wrong_type_are_typed_errors(
    ts: rmqlog.MessageStore, root: Path, call: Callable[[Any], Any]
) -> None:
    _unchanged(ts, root, lambda: call(ts), rmqlog.InvalidArgumentError)


@pytest.mark.parametrize(
    ("where", "kwargs"),
    [
        ("file", {}),
        ("under-file", {}),
        ("nul", {}),
        ("long", {}),
        ("bytes", {}),
        ("int", {}),
        ("new", {"config": 5}),
        ("new", {"repair": np.array([1, 2])}),
        ("new", {"create": "no"}),
        ("new", {"read_only": 1}),
    ],
)
def test_open_with_a_root_or_flag_it_cannot_use_is_an_invalid_argument(
    tmp_path: Path, where: str, kwargs: dict[str, Any]
) -> None:
    (tmp_path / "file").write_bytes(b"x")
    root: Any = {
        "file": tmp_path / "file",
        "under-file": tmp_path / "file" / "sub",
        "nul": str(tmp_path / "a\x00b"),
        "long": tmp_path / ("x" * 300),
        "bytes": os.fsencode(tmp_path / "b"),
        "int": 7,
        "new": tmp_path / "new",
    }[where]
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(rmqlog.InvalidArgumentError):
        rmqlog.MessageStore.open(root, **kwargs)
    assert sorted(p.name for p in tmp_path.iterdir()) == before and (tmp_path / "file").read_bytes() == b"x"


@pytest.mark.parametrize(
    "values",
    [
        {"max_message_size": None},
        {"mapped_file_size_commit_log": "1g"},
        {"flush_disk_type": b"SYNC_FLUSH"},
        {"store_host": 5},
        {"message_delay_level": None},
        {"delete_when": None},
        {"auto_create_topic_enable": "yes"},
        {"max_index_num": 2**64},
        {"store_host": "127.0.0.1:1" + S},
        # accepted before, then failed at open: a segment the file system refuses (EFBIG), a
        # delay the time wheel's fields cannot hold (struct.error); RocketMQ's fields are Java ints
        {"mapped_file_size_commit_log": 2**40},
        {"mapped_file_size_consume_queue": 20 * 2**36},
        {"timer_max_delay_sec": 2**40},
        {"max_message_size": 2**31},
        {"reput_interval_ms": -1},
        {"flush_interval_commit_log": -5},
    ],
)
def test_store_config_values_of_a_wrong_type_are_config_errors(values: dict[str, Any]) -> None:
    with pytest.raises(rmqlog.ConfigError):
        StoreConfig(**values)


def test_store_config_unknown_names_and_unreadable_broker_conf_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(rmqlog.ConfigError):
        StoreConfig().replace(no_such_field=1)
    conf = tmp_path / "broker.conf"
    conf.write_bytes(b"flushDiskType=SYNC_FLUSH\n")
    with pytest.raises(rmqlog.ConfigError):
        StoreConfig.from_properties(conf, no_such_field=1)
    for path in (tmp_path / "missing.conf", tmp_path, str(conf) + "\x00", os.fsencode(conf), None):
        with pytest.raises(rmqlog.ConfigError):
            StoreConfig.from_properties(path)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "option"),
    [
        pytest.param(
            lambda: spark_options.SourceOptions.parse({"path": "/p", "topics": 5}, streaming=False),
            "topics",
            id="value-int",
        ),
        pytest.param(
            lambda: spark_options.SourceOptions.parse({"path": "/p", "topics": "T", 5: "x"}, streaming=False),
            "5",
            id="name-int",
        ),
        pytest.param(lambda: spark_options.SourceOptions.parse(None, streaming=False), "options", id="not-a-mapping"),
        pytest.param(
            lambda: spark_options.SourceOptions.parse({"path": "/p", "topics": "T", "tags": S}, streaming=False),
            "tags",
            id="tags-surrogate",
        ),
        pytest.param(
            lambda: spark_options.SourceOptions.parse({"path": "/p\x00", "topics": "T"}, streaming=False),
            "path",
            id="path-nul",
        ),
        pytest.param(
            lambda: spark_options.SourceOptions.parse(
                {"path": "/p", "topics": "T", "maxMessagesPerTrigger": "1" * 5000}, streaming=True
            ),
            "maxMessagesPerTrigger",
            id="int-5000-digits",
        ),
        pytest.param(
            lambda: spark_options.SourceOptions.parse(
                {"path": "/p", "assign": '{"T": [' + "1" * 5000 + "]}"}, streaming=False
            ),
            "assign",
            id="assign-5000-digits",
        ),
        pytest.param(
            lambda: spark_options.SourceOptions.parse({"path": "/p", "assign": '{"T": [2147483648]}'}, streaming=False),
            "assign",
            id="assign-queue-over-int",
        ),
        pytest.param(
            lambda: spark_options.SourceOptions.parse({"path": "/p", "topicPattern": "a{4294967296}"}, streaming=False),
            "topicPattern",
            id="regex-repeat-too-large",
        ),
        pytest.param(
            lambda: spark_options.parse_offsets_json("endingOffsets", '{"T/0": 1' + "0" * 5000 + "}"),
            "endingOffsets",
            id="offset-5000-digits",
        ),
        pytest.param(
            lambda: spark_options.parse_offsets_json("endingOffsets", '{"T/0": 9223372036854775808}'),
            "endingOffsets",
            id="offset-over-long",
        ),
        pytest.param(
            lambda: spark_options.parse_offsets_json("endingOffsets", '{"T/2147483648": 1}'),
            "endingOffsets",
            id="queue-over-int",
        ),
        pytest.param(
            lambda: spark_options.parse_offsets_json("endingOffsets", "[" * 100_000),
            "endingOffsets",
            id="json-too-deep",
        ),
        pytest.param(lambda: spark_options.parse_offsets_json("endingOffsets", None), "endingOffsets", id="json-none"),
        pytest.param(
            lambda: spark_options.parse_timestamp_ms("endingTimestamp", "9" * 5000),
            "endingTimestamp",
            id="timestamp-5000-digits",
        ),
        pytest.param(
            lambda: spark_options.parse_timestamp_ms("endingTimestamp", 5), "endingTimestamp", id="timestamp-int"
        ),
        pytest.param(
            lambda: spark_options.parse_duration_ms("maxTriggerDelay", "1" * 5000 + "s"),
            "maxTriggerDelay",
            id="duration-5000-digits",
        ),
        pytest.param(
            lambda: spark_options.parse_duration_ms("maxTriggerDelay", None), "maxTriggerDelay", id="duration-none"
        ),
        pytest.param(
            lambda: spark_options.SinkOptions.parse({"path": "/p", "writerId": "é" * 300}),
            "writerId",
            id="writerId-bytes",
        ),
        pytest.param(
            lambda: spark_options.SinkOptions.parse({"path": "/p", "writerId": "w" + S}),
            "writerId",
            id="writerId-surrogate",
        ),
    ],
)
def test_option_values_of_any_type_are_option_errors(call: Callable[[], Any], option: str) -> None:
    from spark_rmq.errors import RmqLogOptionError

    with pytest.raises(RmqLogOptionError) as info:
        call()
    assert info.value.option == option


@pytest.mark.parametrize("column", ["delayLevel", "deliverTime"])
def test_a_waiting_row_whose_topic_is_not_utf8_names_its_row(ts: rmqlog.MessageStore, root: Path, column: str) -> None:
    """Delay and timer routing read the real topics before the encoder does (found by the
    argument test: its UnicodeDecodeError came from there)."""
    later = pa.array([NOW_MS + 60_000] * 3, pa.timestamp("ms"))
    table = pa.table(
        {
            "topic": _not_utf8_strings([b"T", b"T" + NOT_UTF8, b"T"]),
            "body": [b"a", b"b", b"c"],
            column: pa.array([1, 1, 1]) if column == "delayLevel" else later,
        }
    )
    e = _unchanged(ts, root, lambda: ts.put_batch(table), InvalidTopicError)
    assert (e.row, e.field) == (1, "topic"), str(e)  # type: ignore[attr-defined]
