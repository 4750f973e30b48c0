"""The fast paths of a wire put pinned to the general path: the
same stored bytes (commitlog records and consume-queue units) and the same typed errors (row,
field, message) for inputs that hit and that miss each guard.

Two stores on the same manual clock get the same puts, one with the fast paths as built, one
with them switched off (``joined_wire_properties`` answering ``None``: every put takes the
general parse); the generated UNIQ_KEYs are made deterministic in both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import rmqlog
from rmqlog.log.encode import wire_put

UNIQ = "0100007F0000000000000000000000AB"
T0 = 1_700_000_000_000


def _deterministic_uniq(store: rmqlog.MessageStore) -> None:
    counter = iter(range(10**9))

    def generate_property(n: int) -> pa.BinaryArray:
        return pa.array([b"UNIQ_KEY\x01%032X\x02" % next(counter) for _ in range(n)], pa.binary())

    store.appender.uniq.generate_property = generate_property  # type: ignore[method-assign]


class Pair:
    """The same puts into a store with the fast paths and one without."""

    def __init__(self, root: Path) -> None:
        self.fast = rmqlog.MessageStore.open(root / "fast", clock=rmqlog.ManualClock(T0))
        self.slow = rmqlog.MessageStore.open(root / "slow", clock=rmqlog.ManualClock(T0))
        for s in (self.fast, self.slow):
            _deterministic_uniq(s)
            s.create_topic("T", 4)
            s.create_topic("U", 2)

    def put(self, monkeypatch: pytest.MonkeyPatch, table: pa.Table, **kw: Any) -> tuple[object, object]:
        """(fast outcome, slow outcome): each the stored records or the error's fields."""
        fast = self._outcome(self.fast, table, kw)
        with monkeypatch.context() as m:
            m.setattr(wire_put, "joined_wire_properties", lambda *a: None)
            slow = self._outcome(self.slow, table, kw)
        return fast, slow

    @staticmethod
    def _outcome(store: rmqlog.MessageStore, table: pa.Table, kw: dict[str, Any]) -> object:
        try:
            res = store.put_wire(table, dispatch=True, **kw)
        except rmqlog.InvalidMessageError as exc:
            return (type(exc).__name__, exc.row, exc.field, str(exc))
        records = []
        for off in res.column("commitLogOffset").to_pylist():
            at = store.record_at(off)
            assert at is not None
            records.append(bytes(at.data))
        return records

    def same_queues(self) -> None:
        """Every consume-queue file of both stores holds the same bytes (tagsCode included)."""

        def files(root: Path) -> dict[str, bytes]:
            return {
                str(p.relative_to(root)): p.read_bytes()
                for p in sorted((root / "consumequeue").rglob("*"))
                if p.is_file()
            }

        assert files(Path(self.fast.paths.root)) == files(Path(self.slow.paths.root))

    def close(self) -> None:
        self.fast.close()
        self.slow.close()


@pytest.fixture
def pair(tmp_path: Path):
    p = Pair(tmp_path)
    yield p
    p.close()


def wire(props: list[str | None], **over: Any) -> pa.Table:
    n = len(props)
    cols: dict[str, Any] = {
        "topic": pa.array(["T"] * n),
        "queueId": pa.array([i % 4 for i in range(n)], pa.int32()),
        "body": pa.array([b"body-%d" % i for i in range(n)]),
        "flag": pa.array([i for i in range(n)], pa.int32()),
        "sysFlag": pa.array([0] * n, pa.int32()),
        "bornTimestamp": pa.array([T0 - i for i in range(n)], pa.int64()),
        "bornHost": pa.array(["10.0.0.1:5555"] * n),
        "properties": pa.array(props, pa.string()),
        "reconsumeTimes": pa.array([0] * n, pa.int32()),
    }
    cols.update(over)
    return pa.table(cols)


#: items every client sends, and names near the slow ones (same first byte and length)
GOOD_ITEMS = [
    f"UNIQ_KEY\x01{UNIQ}\x02",
    "TAGS\x01a\x02",
    "KEYS\x01k1 k2\x02",
    "PGROUP\x01pg\x02",
    "CLUSTER\x01C0\x02",
    "MY_UNIQ_KEY\x01x\x02",
    "XTAGS\x01y\x02",
    "TAGSX\x01z\x02",
    "RETRY_TOPIC\x01%RETRY%g\x02",
    "REAL_TOPICS\x01no\x02",
    "DELAYS\x011\x02",
    "WAITS\x01w\x02",
    "MAX_RECONSUME_TIMES\x0116\x02",
    "TRACE_ON\x01true\x02",
    "a\x01b\x02",
    "UNIQ_KEZ\x01q\x02",
    "TAGZ\x01q\x02",
]

#: one item each that the fast path must leave to the general path
MISSES = {
    "DELAY routes": "DELAY\x013\x02",
    "DELAY 0 is taken out": "DELAY\x010\x02",
    "a timer input routes": "TIMER_DELAY_SEC\x0110\x02",
    "a timer property is refused": "TIMER_OUT_MS\x011\x02",
    "REAL_TOPIC is refused": "REAL_TOPIC\x01x\x02",
    "the store's prefix is refused": "RMQLOG_X\x01x\x02",
    "an empty value is dropped": "k\x01\x02",
    "an empty name is dropped": "\x01v\x02",
    "no trailing separator": "k\x01v",
    "a value holding \\x01": "k\x01v\x01w\x02",
    "an item without a value": "junk\x02",
    "two separators": "k\x01v\x02\x02",
    "not ASCII": "k\x01v\u00e9\x02",
    "a NUL byte": "k\x01v\x00\x02",
}


def _rows(rng: np.random.Generator, n: int, extra: str | None = None) -> list[str | None]:
    rows: list[str | None] = []
    for _ in range(n):
        k = int(rng.integers(0, 5))
        rows.append("".join(GOOD_ITEMS[j] for j in rng.choice(len(GOOD_ITEMS), k, replace=False)))
    if extra is not None:
        rows[int(rng.integers(0, n))] += extra  # type: ignore[operator]
    return rows


def test_well_formed_properties_take_the_fast_path_and_store_the_same_bytes(pair, monkeypatch) -> None:
    rng = np.random.default_rng(29)
    for n in (1, 2, 7, 64):
        for cluster in (None, "DefaultCluster"):
            props = _rows(rng, n)
            if cluster is not None:
                props = [p.replace("CLUSTER\x01C0\x02", "") for p in props]  # type: ignore[union-attr]
            col = pa.array(props, pa.string())
            assert wire_put.joined_wire_properties(col, n, cluster) is not None
            fast, slow = pair.put(monkeypatch, wire(props), cluster=cluster)
            assert isinstance(fast, list) and fast == slow
    pair.same_queues()


@pytest.mark.parametrize("what", sorted(MISSES))
def test_each_guard_sends_its_input_to_the_general_path(pair, monkeypatch, what) -> None:
    rng = np.random.default_rng(len(what))
    props = _rows(rng, 5, MISSES[what])
    assert wire_put.joined_wire_properties(pa.array(props, pa.string()), 5, None) is None
    fast, slow = pair.put(monkeypatch, wire(props))
    assert fast == slow
    pair.same_queues()


WAIT = "WAIT\x01true\x02"
DROPS = {
    "first": [WAIT + "TAGS\x01a\x02", "TAGS\x01b\x02"],
    "middle and last": ["TAGS\x01a\x02" + WAIT + "KEYS\x01k\x02", "a\x01b\x02" + WAIT],
    "the only item": [WAIT, WAIT, "", WAIT],
    "every row, twice": [WAIT + WAIT + f"UNIQ_KEY\x01{UNIQ}\x02", "WAIT\x01false\x02TAGS\x01t\x02WAIT\x01x\x02"],
    "with a client CLUSTER": ["CLUSTER\x01theirs\x02TAGS\x01a\x02" + WAIT, "TAGS\x01b\x02CLUSTER\x01x\x02"],
    "near names": ["WAITS\x01x\x02WAI\x01y\x02" + WAIT + "CLUSTERS\x01z\x02", "XWAIT\x01w\x02"],
}


@pytest.mark.parametrize("what", sorted(DROPS))
def test_dropped_items_are_cut_out_on_the_fast_path(pair, monkeypatch, what) -> None:
    props = DROPS[what]
    for cluster in (None, "ours"):
        joined = wire_put.joined_wire_properties(pa.array(props), len(props), cluster)
        assert joined is not None
        kept = joined.items.to_pylist()
        assert not any(b"WAIT\x01" in k and not (b"XWAIT" in k or b"WAITS" in k) for k in kept)
        if cluster:
            assert not any(b"CLUSTER\x01" in k and b"CLUSTERS" not in k for k in kept)
        fast, slow = pair.put(monkeypatch, wire(props), cluster=cluster)
        assert isinstance(fast, list) and fast == slow
    pair.same_queues()


def test_a_random_mix_of_dropped_items_stores_the_same_bytes(pair, monkeypatch) -> None:
    rng = np.random.default_rng(7)
    pool = [*GOOD_ITEMS, WAIT, WAIT, "WAIT\x01false\x02"]
    for n in (1, 3, 50, 300):
        props = ["".join(pool[j] for j in rng.choice(len(pool), int(rng.integers(0, 6)))) for _ in range(n)]
        for cluster in (None, "C9"):
            assert wire_put.joined_wire_properties(pa.array(props), n, cluster) is not None
            fast, slow = pair.put(monkeypatch, wire(props), cluster=cluster)
            assert isinstance(fast, list) and fast == slow
    pair.same_queues()


@pytest.mark.parametrize("shape", ["nulls", "binary", "sliced", "chunked", "empty rows", "no column", "all null"])
def test_other_column_shapes_store_the_same_bytes(pair, monkeypatch, shape) -> None:
    props = ["TAGS\x01a\x02", "", f"UNIQ_KEY\x01{UNIQ}\x02", "KEYS\x01k\x02TAGS\x01b\x02"]
    col: Any = pa.array(props, pa.string())
    table = wire(props)
    if shape == "nulls":
        table = wire([props[0], None, props[2], None])
    elif shape == "binary":
        table = table.set_column(7, "properties", col.cast(pa.binary()))
    elif shape == "sliced":
        table = wire(["x\x01y\x02", *props, "z\x01w\x02"]).slice(1, 4)
    elif shape == "chunked":
        table = table.set_column(7, "properties", pa.chunked_array([col.slice(0, 2), col.slice(2)]))
    elif shape == "empty rows":
        table = wire(["", "", "", ""])
    elif shape == "no column":
        table = table.drop_columns(["properties"])
    elif shape == "all null":
        table = table.set_column(7, "properties", pa.nulls(4, pa.string()))
    fast, slow = pair.put(monkeypatch, table)
    assert isinstance(fast, list) and fast == slow
    pair.same_queues()


def test_errors_are_the_same_on_both_paths(pair, monkeypatch) -> None:
    big = b"x" * (rmqlog.StoreConfig().max_message_size + 1)
    cases = [
        # the timer topic named before the encoder's checks (a body too large on a later row)
        wire(
            ["TAGS\x01a\x02", "TAGS\x01b\x02"], topic=pa.array(["rmq_sys_wheel_timer", "T"]), body=pa.array([b"a", big])
        ),
        wire(["TAGS\x01a\x02"], topic=pa.array(["rmq_sys_wheel_timer"])),
        wire(["TAGS\x01a\x02", "TAGS\x01a\x02"], topic=pa.array(["T", "rmq_sys_wheel_timer"])),
        wire(["TAGS\x01a\x02"], topic=pa.array(["SCHEDULE_TOPIC_XXXX"])),
        wire(["TAGS\x01a\x02", "TAGS\x01a\x02"], topic=pa.array(["T", "SCHEDULE_TOPIC_XXXX"])),
        wire(["TAGS\x01a\x02"], topic=pa.array(["SCHEDULE_TOPIC_XXXX"]).dictionary_encode()),
        wire(["TAGS\x01a\x02"], topic=pa.array(["rmq_sys_wheel_timer"]).dictionary_encode()),
        wire(["TAGS\x01a\x02", "TAGS\x01a\x02"], body=pa.array([b"a", big])),
        wire(["TAGS\x01a\x02", "TAGS\x01a\x02"], queueId=pa.array([0, 9], pa.int32())),
        wire(["TAGS\x01a\x02", "TAGS\x01a\x02"], topic=pa.array(["T", "bad topic"])),
        wire(["TAGS\x01a\x02", "TAGS\x01a\x02"], reconsumeTimes=pa.array([0, -1], pa.int32())),
        wire(["TAGS\x01a\x02", "TAGS\x01a\x02"], sysFlag=pa.array([0, 4], pa.int32())),
        wire(["TAGS\x01a\x02", "TAGS\x01a\x02"], bornHost=pa.array(["10.0.0.1:1", "nohost"])),
        wire(["TAGS\x01a\x02", "TAGS\x01a\x02"], bornTimestamp=pa.array([0, -5], pa.int64())),
        wire(["k\x01" + "v" * 32767 + "\x02"]),
        wire(["TAGS\x01a\x02", "REAL_QID\x011\x02"]),
    ]
    for table in cases:
        fast, slow = pair.put(monkeypatch, table)
        assert isinstance(fast, tuple), fast
        assert fast == slow


def test_the_fast_path_marks_own_uniq_keys_and_tags_exactly() -> None:
    props = pa.array(
        [f"UNIQ_KEY\x01{UNIQ}\x02", "MY_UNIQ_KEY\x01x\x02", "XTAGS\x01a\x02", "a\x01b\x02TAGS\x01t\x02", ""]
    )
    joined = wire_put.joined_wire_properties(props, 5, None)
    assert joined is not None and joined.has_tags and joined.suffix == b""
    assert joined.own_uniq is not None and joined.own_uniq.tolist() == [True, False, False, False, False]
    assert joined.items.to_pylist() == [p.encode() for p in props.to_pylist()]
    none = wire_put.joined_wire_properties(pa.array(["XTAGS\x01a\x02"]), 1, "C")
    assert none is not None and none.own_uniq is None and not none.has_tags and none.suffix == b"CLUSTER\x01C\x02"


# ------------------------------------------- integer and host columns without Arrow kernels
def _two(**over: Any) -> pa.Table:
    cols: dict[str, Any] = {"topic": pa.array(["T", "T"]), "body": pa.array([b"a", b"b"])}
    cols.update(over)
    return pa.table(cols)


_RANGE = "is not in [-2147483648, 2147483647]"
_BORN = "ms is outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59.999Z (0..253402300799999 ms)"


#: (table, put_wire's error, put_batch's error (None: not a put_batch column)): the errors of
#: main before this part (the uint64 flag/sysFlag of put_wire raised Arrow's untyped error then)
def _both(table: pa.Table, error: tuple[Any, ...]) -> tuple[pa.Table, tuple[Any, ...], tuple[Any, ...]]:
    return table, error, error


INT_CASES: dict[str, tuple[pa.Table, tuple[Any, ...], tuple[Any, ...] | None]] = {
    "queueId int8 negative": _both(
        _two(queueId=pa.array([0, -1], pa.int8())), ("QueueIdError", "queueId", "queue id -1 is negative")
    ),
    "queueId null then negative": _both(
        _two(queueId=pa.array([None, -2], pa.int64())), ("QueueIdError", "queueId", "queue id -2 is negative")
    ),
    "queueId uint64 past int64": _both(
        _two(queueId=pa.array([0, 2**63], pa.uint64())),
        ("QueueIdError", "queueId", "9223372036854775808 does not fit a 64-bit signed integer"),
    ),
    "queueId int16 over": _both(
        _two(queueId=pa.array([0, 4], pa.int16())),
        ("QueueIdError", "queueId", "queue id 4 is not below 'T''s 4 queues"),
    ),
    "queueId uint32 over": _both(
        _two(queueId=pa.array([0, 2**32 - 1], pa.uint32())),
        ("QueueIdError", "queueId", "queue id 4294967295 is not below 'T''s 4 queues"),
    ),
    "flag int64 over": (
        _two(flag=pa.array([0, 2**31], pa.int64())),
        ("InvalidMessageError", "flag", f"2147483648 {_RANGE}"),
        ("InvalidMessageError", "flag", "flag does not fit in 32 bits"),
    ),
    "flag uint32 over": (
        _two(flag=pa.array([0, 2**31], pa.uint32())),
        ("InvalidMessageError", "flag", f"2147483648 {_RANGE}"),
        ("InvalidMessageError", "flag", "flag does not fit in 32 bits"),
    ),
    "flag int64 under": (
        _two(flag=pa.array([0, -(2**31) - 1], pa.int64())),
        ("InvalidMessageError", "flag", f"-2147483649 {_RANGE}"),
        ("InvalidMessageError", "flag", "flag does not fit in 32 bits"),
    ),
    "flag uint64 past int64": (
        _two(flag=pa.array([0, 2**64 - 1], pa.uint64())),
        ("InvalidMessageError", "flag", f"18446744073709551615 {_RANGE}"),
        ("InvalidMessageError", "flag", "18446744073709551615 does not fit a 64-bit signed integer"),
    ),
    "sysFlag uint32 big": (
        _two(sysFlag=pa.array([0, 2**31], pa.uint32())),
        ("InvalidMessageError", "sysFlag", f"2147483648 {_RANGE}"),
        None,
    ),
    "sysFlag uint64 past int64": (
        _two(sysFlag=pa.array([0, 2**64 - 1], pa.uint64())),
        ("InvalidMessageError", "sysFlag", f"18446744073709551615 {_RANGE}"),
        None,
    ),
    "reconsumeTimes int8 negative": (
        _two(reconsumeTimes=pa.array([0, -1], pa.int8())),
        ("InvalidMessageError", "reconsumeTimes", "-1 is not in [0, 2147483647]"),
        None,
    ),
    "reconsumeTimes uint32 big": (
        _two(reconsumeTimes=pa.array([0, 2**31], pa.uint32())),
        ("InvalidMessageError", "reconsumeTimes", "2147483648 is not in [0, 2147483647]"),
        None,
    ),
    "bornTimestamp uint64": _both(
        _two(bornTimestamp=pa.array([0, 2**64 - 1], pa.uint64())),
        ("InvalidMessageError", "bornTimestamp", f"18446744073709551615 {_BORN}"),
    ),
    "bornTimestamp int8 negative": _both(
        _two(bornTimestamp=pa.array([3, -1], pa.int8())), ("InvalidMessageError", "bornTimestamp", f"-1 {_BORN}")
    ),
}


@pytest.mark.parametrize("case", sorted(INT_CASES))
def test_integer_columns_are_refused_as_before(tmp_path: Path, case: str) -> None:
    table, wire_error, batch_error = INT_CASES[case]
    with rmqlog.MessageStore.open(tmp_path / "s", clock=rmqlog.ManualClock(T0)) as s:
        s.create_topic("T", 4)
        for put, expected in ((s.put_wire, wire_error), (s.put_batch, batch_error)):
            if expected is None:
                continue
            with pytest.raises(rmqlog.InvalidMessageError) as info:
                put(table)
            assert (type(info.value).__name__, info.value.row, info.value.field, info.value.reason) == (
                expected[0],
                1,
                expected[1],
                expected[2],
            )
            assert s.published_tail() == 0  # nothing written


def test_integer_columns_of_every_width_store_the_same_values(tmp_path: Path) -> None:
    """The numpy views (no nulls) and Arrow's fill (nulls) give the same header fields."""
    with rmqlog.MessageStore.open(tmp_path / "s", clock=rmqlog.ManualClock(T0)) as s:
        s.create_topic("T", 4)
        for typ in (pa.int8(), pa.uint8(), pa.int16(), pa.int32(), pa.uint32(), pa.int64(), pa.uint64()):
            for nulls in (False, True):
                mask = pa.array([nulls, False])
                t = _two(
                    queueId=pa.array([1, 2], typ, mask=mask),
                    flag=pa.array([7, 8], typ, mask=mask),
                    sysFlag=pa.array([1, 8], typ, mask=mask),
                    reconsumeTimes=pa.array([3, 4], typ, mask=mask),
                    bornTimestamp=pa.array([5, 6], typ, mask=mask),
                    bornHost=pa.array(["10.0.0.9:7", "10.0.0.9:7"]),
                )
                res = s.put_wire(t, dispatch=True)
                got = s.read_window("T", 2, int(res.column("queueOffset")[1].as_py())).messages.to_pylist()[0]
                assert (got["flag"], got["bornHost"], got["reconsumeTimes"]) == (8, "10.0.0.9:7", 4)
                assert int(got["bornTimestamp"].timestamp() * 1000) == 6
                assert res.num_rows == 2
                first_q = 0 if nulls else 1  # a null queue id takes the round robin
                if not nulls:
                    row0 = s.read_window("T", first_q, int(res.column("queueOffset")[0].as_py())).messages.to_pylist()[
                        0
                    ]
                    assert (row0["flag"], row0["reconsumeTimes"], row0["sysFlag"] & 1) == (7, 3, 1)


#: sysFlag -> put_wire's error as main gave it (None: stored); the screen for the usual flags
#: (no bit but COMPRESSED, MULTI_TAGS, TRANSACTION_COMMIT) must leave every refusal to the checks
SYS_FLAGS: dict[int, str | None] = {
    0: None,
    1: None,
    2: None,
    8: None,
    3: None,
    11: None,
    4: "sysFlag 4: TRANSACTION_PREPARED (4) is not stored by this store (no transactional messages)",
    12: "sysFlag 12: TRANSACTION_ROLLBACK (12) is not stored by this store (no transactional messages)",
    16: "sysFlag 16: BORNHOST_V6 (16) does not match the host",
    32: "sysFlag 32: STOREHOST_V6 (32) does not match the host",
    64: "sysFlag 64 has bits no put may set: 0x40",
    -1: "sysFlag -1 has bits no put may set: -0x40",
    1 << 30: "sysFlag 1073741824 has bits no put may set: 0x40000000",
}


@pytest.mark.parametrize("value", sorted(SYS_FLAGS))
def test_sys_flags_are_kept_or_refused_as_before(tmp_path: Path, value: int) -> None:
    with rmqlog.MessageStore.open(tmp_path / "s", clock=rmqlog.ManualClock(T0)) as s:
        s.create_topic("T", 4)
        t = _two(sysFlag=pa.array([1, value], pa.int32()), queueId=pa.array([0, 0], pa.int32()))
        expected = SYS_FLAGS[value]
        if expected is None:
            s.put_wire(t, dispatch=True)
            got = [m["sysFlag"] for m in s.read_window("T", 0, 0).messages.to_pylist()]
            assert got == [1, value]
        else:
            with pytest.raises(rmqlog.InvalidMessageError) as info:
                s.put_wire(t)
            assert (info.value.row, info.value.field, info.value.reason) == (1, "sysFlag", expected)


def test_random_property_strings_give_the_same_outcome_on_both_paths(pair, monkeypatch) -> None:
    """Strings made of separators, names of every kind and plain text, well formed or not:
    the fast path (when it takes them) stores what the general path stores, or raises what
    it raises."""
    rng = np.random.default_rng(2929)
    tokens = [
        "a",
        "b1",
        "\x01",
        "\x02",
        "\x01",
        "\x02",
        "WAIT",
        "CLUSTER",
        "TAGS",
        "UNIQ_KEY",
        "KEYS",
        "DELAY",
        "3",
        "REAL_QID",
        "RMQLOG_X",
        "TIMER_DELAY_MS",
        "RETRY_TOPIC",
        "W",
        "\u00e9",
        " ",
    ]
    taken = 0
    for _ in range(150):
        n = int(rng.integers(1, 5))
        props = ["".join(tokens[j] for j in rng.integers(0, len(tokens), int(rng.integers(0, 9)))) for _ in range(n)]
        if rng.random() < 0.6:  # mostly well formed: name \x01 value \x02 items of those tokens
            props = [
                "".join(
                    f"{tokens[int(rng.integers(4, 19))]}\x01{tokens[int(rng.integers(0, 2))]}\x02"
                    for _ in range(int(rng.integers(0, 4)))
                )
                for _ in range(n)
            ]
        cluster = "C1" if rng.random() < 0.5 else None
        taken += wire_put.joined_wire_properties(pa.array(props), n, cluster) is not None
        fast, slow = pair.put(monkeypatch, wire(props), cluster=cluster)
        assert fast == slow, props
    assert 15 < taken < 150  # both paths were exercised (22 of 150 fast with this seed)
    pair.same_queues()
