"""MessageStore.read_window with a SQL92 filter (RocketMQ's getMessage with an
ExpressionMessageFilter): the same statuses, next offsets and batch limits as a tag filter of
the same selectivity (filtered-out units are scanned past, nextBeginOffset counts them), both
forms (table and stored records) the same messages, the exact tags when both filters apply.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from conftest import SMALL_CQ, batch

import rmqlog
from rmqlog import GetMessageStatus as S
from rmqlog.filter import compile_filter

PER_FILE = SMALL_CQ // 20  # units in one consume-queue file of the small config (50)


@pytest.fixture
def ps(ms: rmqlog.MessageStore) -> rmqlog.MessageStore:
    """Topic P, queue 0: 120 messages; property ``n`` = i, ``m`` = 'yes' and tag ``m`` where
    i % 5 == 1, ``odd`` only on odd i; every record over several commitlog segments."""
    ms.create_topic("P", 1)
    n = 120
    props = [{"n": str(i), **({"m": "yes"} if i % 5 == 1 else {}), **({"odd": "1"} if i % 2 else {})} for i in range(n)]
    ms.put_batch(
        batch(
            topic="P",
            body=[f"{i}:".encode().ljust(40, b".") for i in range(n)],
            tags=pa.array(["m" if i % 5 == 1 else "o" for i in range(n)], pa.string()),
            properties=pa.array([list(p.items()) for p in props], pa.map_(pa.string(), pa.string())),
            queueId=pa.array([0] * n, pa.int32()),
        )
    )
    ms.dispatch()
    return ms


def _both(s: rmqlog.MessageStore, *args: object, **kw: object) -> tuple[S, int, list[int]]:
    t = s.read_window(*args, **kw)  # type: ignore[arg-type]
    r = s.read_window(*args, raw=True, **kw)  # type: ignore[arg-type]
    assert r.records is not None
    assert (r.status, r.next_begin_offset, r.records.queue_offsets.tolist()) == (
        t.status,
        t.next_begin_offset,
        t.messages["queueOffset"].to_pylist(),
    )
    assert (
        rmqlog.decode_records(r.records.data.to_pybytes())["queueOffset"].to_pylist()
        == r.records.queue_offsets.tolist()
    )
    return t.status, t.next_begin_offset, t.messages["queueOffset"].to_pylist()


@pytest.mark.parametrize(
    ("offset", "max_count", "until"),
    [(0, 3, None), (0, 32, None), (7, 2, None), (45, 32, None), (10, 32, 14), (0, 1, None), (3, 4, 40)],
)
def test_a_sql92_filter_scans_as_a_tag_filter_of_the_same_selectivity(
    ps: rmqlog.MessageStore, offset: int, max_count: int, until: int | None
) -> None:
    flt = compile_filter("m = 'yes'")
    by_tag = _both(ps, "P", 0, offset, max_count=max_count, tags="m", until=until)
    by_sql = _both(ps, "P", 0, offset, max_count=max_count, sql92=flt, until=until)
    assert by_sql == by_tag
    assert by_sql[0] is S.FOUND and all(q % 5 == 1 for q in by_sql[2])


def test_sql92_statuses_next_offsets_and_limits(ps: rmqlog.MessageStore) -> None:
    f = compile_filter
    # the scan stops at the unit after the max_count-th match (isTheBatchFull), matches or not
    assert _both(ps, "P", 0, 0, max_count=2, sql92=f("n >= 10 AND odd IS NOT NULL")) == (S.FOUND, 14, [11, 13])
    # nothing matches: the whole window scanned, next offset past it (to the file's end here)
    assert _both(ps, "P", 0, 0, sql92=f("n > 1000")) == (S.NO_MATCHED_MESSAGE, PER_FILE, [])
    assert _both(ps, "P", 0, 10, sql92=f("n > 1000"), until=14) == (S.NO_MATCHED_MESSAGE, 14, [])
    # missing properties and conversion failures match nothing; the scan still advances
    assert _both(ps, "P", 0, 0, sql92=f("nope = 1")) == (S.NO_MATCHED_MESSAGE, PER_FILE, [])
    assert _both(ps, "P", 0, 0, sql92=f("m > 1")) == (S.NO_MATCHED_MESSAGE, PER_FILE, [])  # 'yes' is no number: throws
    assert _both(ps, "P", 0, 0, max_count=3, sql92=f("nope IS NULL AND n BETWEEN 4 AND 100")) == (S.FOUND, 7, [4, 5, 6])
    # a match far into the window: a second chunk, the rest of the window, decides the batch
    assert _both(ps, "P", 0, 0, max_count=1, sql92=f("n = 48")) == (S.FOUND, 49, [48])
    # the byte budget: after the first match, a unit whose size would pass it ends the batch
    size = int(ps.read_window("P", 0, 0, max_count=1, raw=True).records.sizes[0])  # type: ignore[union-attr]
    got = _both(ps, "P", 0, 0, max_count=32, max_bytes=2 * size, sql92=f("m = 'yes'"))
    tag = _both(ps, "P", 0, 0, max_count=32, max_bytes=2 * size, tags="m")
    assert got == tag and 1 <= len(got[2]) <= 2
    # outside the queue: the same statuses as without a filter
    assert _both(ps, "P", 0, 120, sql92=f("TRUE")) == (S.OFFSET_OVERFLOW_ONE, 120, [])
    assert _both(ps, "Nope", 0, 0, sql92=f("TRUE")) == (S.NO_MATCHED_LOGIC_QUEUE, 0, [])


def test_sql92_and_tags_together_and_system_properties(ps: rmqlog.MessageStore) -> None:
    # both: a unit must pass the tag filter and the expression
    st, nxt, got = _both(ps, "P", 0, 0, max_count=4, tags="m", sql92=compile_filter("odd IS NULL"))
    assert st is S.FOUND and got == [6, 16, 26, 36] and nxt == 37
    # TAGS is a property to the expression, as in Java (the whole properties string is decoded)
    assert _both(ps, "P", 0, 0, max_count=3, sql92=compile_filter("TAGS = 'm'"))[2] == [1, 6, 11]


def test_sql92_argument_is_checked(ps: rmqlog.MessageStore) -> None:
    with pytest.raises(rmqlog.InvalidArgumentError, match="sql92"):
        ps.read_window("P", 0, 0, sql92="m = 'yes'")  # type: ignore[arg-type]
