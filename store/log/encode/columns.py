"""Input validation of a put's table: its columns, and each column's values made ready to encode.

Every function here raises a typed error of the :class:`rmqlog.errors.InvalidMessageError`
family naming the first bad row (counted from 0 in the table) and the field, before anything
is written; ``row=None`` when the problem is the table's shape. Checks run over whole
columns (numpy/Arrow), never per row. What each column may hold is documented on
:meth:`rmqlog.MessageStore.put_batch`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...arguments import bool_arg, text_arg
from ...errors import (
    InvalidArgumentError,
    InvalidMessageError,
    InvalidTopicError,
    MessageTooLargeError,
    QueueIdError,
)
from ...paths import topic_problem
from ...schema import PUT_COLUMNS
from .arrays import (
    all_equal,
    data_and_offsets,
    first,
    flat,
    is_stringish,
    repeat_cycle,
    value_lengths,
)

#: Resolves distinct topics to their number of write queues (creating topics as configured).
QueueCounts = Callable[[list[str]], list[int]]
#: ``round_robin(topic, queues, n)``: the first queue for ``n`` rows without a queue id.
RoundRobin = Callable[[str, int, int], int]

#: The BORNTIMESTAMP range the store accepts, in ms since the epoch: 1970-01-01T00:00:00.000Z
#: to 9999-12-31T23:59:59.999Z. Every value decodes everywhere a message goes: Arrow's
#: timestamp[us] (the store's read schema), Python's datetime and Spark's TimestampType.
BORN_MS_MIN, BORN_MS_MAX = 0, 253_402_300_799_999
_PER_MS = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}


def checked_columns(table: pa.Table) -> dict[str, pa.Array]:
    """The table's columns by name, each one contiguous array; refuses a column named twice,
    an unknown column and a missing ``topic`` or ``body``."""
    names = table.column_names
    if len(set(names)) != len(names):  # which one would be the message's?
        dup = next(name for name in names if names.count(name) > 1)
        raise InvalidMessageError(f"the table has {names.count(dup)} columns of this name", row=None, field=dup)
    for name in names:
        if name not in PUT_COLUMNS:
            raise InvalidMessageError(f"unknown column; allowed: {', '.join(PUT_COLUMNS)}", row=None, field=name)
    for name in ("topic", "body"):
        if name not in names:
            raise InvalidMessageError("required column is missing", row=None, field=name)
    return {name: flat(table.column(name)) for name in names}


def as_string(col: pa.Array, field: str, error: type[InvalidMessageError] = InvalidMessageError) -> pa.Array:
    """A string column (dictionary decoded, all-null typed as string), every value UTF-8
    (:func:`utf8_checked`); another type is refused with ``error``."""
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if pa.types.is_null(col.type):
        return pa.nulls(len(col), pa.string())
    if not is_stringish(col.type):
        valid = ~np.asarray(col.is_null())
        row = first(valid) if valid.any() else 0
        raise error(f"must be a string, got {col.type}", row=row, field=field)
    if col.type != pa.string():
        try:
            col = col.cast(pa.string())
        except pa.ArrowInvalid as exc:  # a large_string column of more than 2 GiB of values
            raise error(f"cannot be held as a string column: {exc}", row=None, field=field) from None
    utf8_checked(col, field, error=error)
    return col


def check_utf8_column(column: object, field: object, *, topic: object = False) -> None:
    """The public form of :func:`utf8_checked` (``rmqlog.check_utf8_column``), for callers that
    compute on a string column before putting it (the Spark sink hashes keys and topics):
    raises :class:`InvalidTopicError` (``topic=True``) or :class:`InvalidMessageError` naming
    the row of the first value of ``column`` (a string or large_string array) that is not
    UTF-8, as a put would; :class:`InvalidArgumentError` for anything else."""
    field, topic = text_arg("field", field), bool_arg("topic", topic)
    if not isinstance(column, pa.Array) or not (
        pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
    ):
        raise InvalidArgumentError(f"column must be a string array, got {type(column).__name__}")
    utf8_checked(column, field, error=InvalidTopicError if topic else InvalidMessageError)


def utf8_checked(
    col: pa.Array, field: str, parent: np.ndarray | None = None, error: type[InvalidMessageError] = InvalidMessageError
) -> None:
    """Refuse a value of a string column that is not UTF-8, naming its row (``parent``: the
    table row of each value, for flattened lists and maps). Arrow takes such values (built from
    binary buffers, or Spark's ``CAST(binary AS STRING)``); RocketMQ's decoder and every reader
    of the log expect UTF-8, and Python cannot even make a str of them.

    One pass over the value bytes, no per-value work in the usual case: all ASCII (one numpy
    ``max``) is valid. Otherwise all the bytes are checked as one string by Arrow's UTF-8
    validator and every value's first byte must not continue a character (a value cut
    inside one); only when that fails is the first bad value looked for, by halving.
    """
    n = len(col)
    data = col.buffers()[2] if n else None
    if data is None:
        return
    width = 8 if pa.types.is_large_string(col.type) else 4
    ends = np.frombuffer(col.buffers()[1], np.int64 if width == 8 else np.int32, n + 1, col.offset * width)
    start, end = int(ends[0]), int(ends[n])
    raw = np.frombuffer(data, np.uint8, end - start, start)
    if not len(raw) or raw.max() < 0x80:  # ASCII: the usual tags, keys and names
        return
    if _valid_utf8_bytes(data, start, end):
        firsts = ends[:-1][np.greater(ends[1:], ends[:-1])] - start  # each non-empty value's first byte
        if not ((raw[firsts] & 0xC0) == 0x80).any():
            return
    i = _first_not_utf8(col, 0, n)
    if i is None:  # the only bad bytes are under null values (Arrow lets a null span bytes)
        return
    value = col.view(pa.binary() if width == 4 else pa.large_binary())[i].as_py()
    row = int(parent[i]) if parent is not None else i
    raise error(f"value {value[:64]!r} is not valid UTF-8", row=row, field=field)


def _valid_utf8_bytes(data: pa.Buffer, start: int, end: int) -> bool:
    """Whether ``data[start:end]`` is UTF-8 (Arrow's validator, over all of it as one value)."""
    offsets = np.array([start, end], np.int64 if end > 2**31 - 1 else np.int32)
    cls = pa.LargeStringArray if offsets.dtype == np.int64 else pa.StringArray
    try:
        cls.from_buffers(1, pa.py_buffer(offsets), data).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _first_not_utf8(col: pa.Array, a: int, b: int) -> int | None:
    """The first value of rows ``[a, b)`` that is not UTF-8 (Arrow's check of each valid
    value of a slice), found by halving; ``None`` if there is none."""
    try:
        col.slice(a, b - a).validate(full=True)
        return None
    except pa.ArrowInvalid:
        pass
    while b - a > 1:
        mid = (a + b) // 2
        try:
            col.slice(a, mid - a).validate(full=True)
            a = mid
        except pa.ArrowInvalid:
            b = mid
    return a


def _may_hold_separator(col: pa.Array, *, space: bool) -> bool:
    """Cheap screen over the raw value bytes: ``False`` means no value holds a separator."""
    if not (pa.types.is_string(col.type) or pa.types.is_binary(col.type)) or len(col) == 0:
        return True
    data = col.buffers()[2]
    if data is None:
        return False
    offsets = data_and_offsets(col)[1]
    raw = np.frombuffer(data, np.uint8)[int(offsets[0]) : int(offsets[-1])]
    low = raw < 3  # \x00 too: rare, and the exact check below sorts it out
    return bool(low.any() or (space and (raw == 32).any()))


def may_be_empty(col: pa.Array) -> bool:
    """Whether some non-null value of a string column is empty (cheap screen)."""
    empty = value_lengths(col) == 0
    if col.null_count:
        empty &= ~np.asarray(col.is_null())
    return bool(empty.any())


def no_separators(col: pa.Array, field: str, parent: np.ndarray | None = None, *, space: bool = False) -> None:
    """Reject values holding the properties separators (\\x01, \\x02) or, for keys, a space.
    ``parent``: the table row of each value (flattened lists and maps)."""
    if not _may_hold_separator(col, space=space):
        return
    pattern = "[\\x01\\x02 ]" if space else "[\\x01\\x02]"
    bad = pc.fill_null(pc.match_substring_regex(col, pattern), False)
    if pc.any(bad).as_py():
        i = first(np.asarray(bad))
        row = int(parent[i]) if parent is not None else i
        what = "a space or a control separator (\\x01, \\x02)" if space else "a control separator (\\x01 or \\x02)"
        raise InvalidMessageError(f"value {col[i].as_py()!r} contains {what}", row=row, field=field)


def int64_column(col: pa.Array, field: str, error: type[InvalidMessageError] = InvalidMessageError) -> pa.Array:
    """An integer column as int64; a uint64 value over 2**63 - 1 raises ``error`` naming its row."""
    if pa.types.is_uint64(col.type) and len(col):
        over = pc.fill_null(pc.greater(col, pa.scalar(2**63 - 1, pa.uint64())), False)
        if pc.any(over).as_py():
            row = first(np.asarray(over))
            raise error(f"{col[row].as_py()} does not fit a 64-bit signed integer", row=row, field=field)
    return col.cast(pa.int64())


def topic_column(col: pa.Array, n: int) -> tuple[list[str], np.ndarray]:
    """(distinct topics, row -> index in them); every topic a valid name (checked once per topic)."""
    topic = as_string(col, "topic", InvalidTopicError)
    if topic.null_count:
        raise InvalidTopicError("topic is null", row=first(np.asarray(topic.is_null())), field="topic")
    if n and all_equal(topic):  # the usual case: one topic
        topics: list[str] = [topic[0].as_py()]
        topic_index = np.zeros(n, np.int64)
    else:
        enc = pc.dictionary_encode(topic)
        topics = enc.dictionary.to_pylist()
        topic_index = np.asarray(enc.indices, dtype=np.int64)
    for i, t in enumerate(topics):
        problem = topic_problem(t)
        if problem is not None:
            raise InvalidTopicError(problem, row=first(topic_index == i), field="topic")
    return topics, topic_index


def body_column(col: pa.Array, n: int, max_message_size: int) -> tuple[pa.BinaryArray, np.ndarray]:
    """(bodies as one binary array, their lengths); a null or one over ``max_message_size`` is refused."""
    body = col
    if pa.types.is_string(body.type) or pa.types.is_large_string(body.type) or pa.types.is_fixed_size_binary(body.type):
        body = body.cast(pa.binary()) if not pa.types.is_large_string(body.type) else body.cast(pa.large_binary())
    if pa.types.is_large_binary(body.type):
        body = body.cast(pa.binary())
    if not pa.types.is_binary(body.type):
        raise InvalidMessageError(f"must be binary or string, got {body.type}", row=0 if n else None, field="body")
    if body.null_count:
        raise InvalidMessageError(
            "body is null (an empty body is valid, a missing one is not)",
            row=first(np.asarray(body.is_null())),
            field="body",
        )
    body_len = value_lengths(body)
    if n and body_len.max() > max_message_size:
        row = first(body_len > max_message_size)
        raise MessageTooLargeError(
            f"body is {body_len[row]} bytes, over max_message_size {max_message_size}", row=row, field="body"
        )
    return body, body_len


def write_queue_counts(queue_counts: QueueCounts, topics: list[str], topic_index: np.ndarray) -> np.ndarray:
    """Each topic's number of write queues; a topic that does not exist (auto-creation off)
    or is closed to writes (writeQueueNums 0) is refused, naming its first row."""
    counts = np.asarray(queue_counts(topics) if topics else [], dtype=np.int64)
    if (counts < 0).any():
        i = int(np.flatnonzero(counts < 0)[0])
        raise InvalidTopicError(
            f"topic {topics[i]!r} does not exist and auto-creation is off", row=first(topic_index == i), field="topic"
        )
    if (counts == 0).any():
        i = int(np.flatnonzero(counts == 0)[0])
        raise InvalidTopicError(
            f"topic {topics[i]!r} has no write queues (writeQueueNums 0)", row=first(topic_index == i), field="topic"
        )
    return counts


def queue_id_column(
    col: pa.Array | None,
    n: int,
    topics: list[str],
    topic_index: np.ndarray,
    counts: np.ndarray,
    round_robin: RoundRobin,
) -> tuple[np.ndarray, tuple[int, int] | None]:
    """(queue id per row, the round-robin cycle ``(first, count)`` when every row is of one
    topic and none gave a queue id). Given ids must be below the topic's queue count; rows
    without one take the next queues of the topic's round robin (which this moves on)."""
    queue_id = np.full(n, -1, np.int64)
    if col is not None:
        if not (pa.types.is_integer(col.type) or pa.types.is_null(col.type)):
            raise InvalidMessageError(f"must be an integer, got {col.type}", row=0 if n else None, field="queueId")
        if not pa.types.is_null(col.type) and not col.null_count and not pa.types.is_uint64(col.type):
            queue_id = col.to_numpy().astype(np.int64)  # every row gives one (a broker's put): no Arrow kernel
            if (queue_id < 0).any():
                row = first(queue_id < 0)
                raise QueueIdError(f"queue id {queue_id[row]} is negative", row=row, field="queueId")
        elif not pa.types.is_null(col.type):
            qv = np.asarray(pc.fill_null(int64_column(col, "queueId", QueueIdError), -1))
            given = ~np.asarray(col.is_null())
            if (qv[given] < 0).any():
                row = first(given & (qv < 0))
                raise QueueIdError(f"queue id {qv[row]} is negative", row=row, field="queueId")
            queue_id = np.where(given, qv, -1)
    limit = counts[topic_index] if n else np.zeros(0, np.int64)
    over = queue_id >= limit
    if over.any():
        row = first(over)
        raise QueueIdError(
            f"queue id {queue_id[row]} is not below {topics[topic_index[row]]!r}'s {limit[row]} queues",
            row=row,
            field="queueId",
        )
    missing = queue_id < 0
    cycle: tuple[int, int] | None = None
    if len(topics) == 1 and n and missing.all():  # the default: one topic, no queue ids
        c = int(counts[0])
        cycle = (round_robin(topics[0], c, n), c)
        queue_id = round_robin_ids(*cycle, n)
    elif missing.any():  # round robin per topic, continuing where this process left off
        for i, t in enumerate(topics):
            rows = np.flatnonzero(missing & (topic_index == i))
            if len(rows):
                start = round_robin(t, int(counts[i]), len(rows))
                queue_id[rows] = round_robin_ids(start, int(counts[i]), len(rows))
    return queue_id, cycle


def round_robin_ids(start: int, count: int, n: int) -> np.ndarray:
    """Queue ids ``start, start+1, ...`` modulo ``count`` for ``n`` rows."""
    return repeat_cycle((start + np.arange(count, dtype=np.int64)) % count, n)


def flag_column(col: pa.Array | None, n: int) -> np.ndarray:
    """FLAG per row (0 for a null or without the column); must fit 32 bits."""
    if col is None or pa.types.is_null(col.type):
        return np.zeros(n, np.int64)
    if not pa.types.is_integer(col.type):
        raise InvalidMessageError(f"must be an integer, got {col.type}", row=0 if n else None, field="flag")
    if not col.null_count and not pa.types.is_uint64(col.type):
        raw = col.to_numpy()  # no Arrow kernel: each costs ~20 us a put
        flag = raw.astype(np.int64)
        info = np.iinfo(raw.dtype)
        if info.min >= -(1 << 31) and info.max < (1 << 31):  # (int32 and narrower: always in range)
            return flag
    else:
        flag = np.asarray(pc.fill_null(int64_column(col, "flag"), 0))
    bad = (flag < -(1 << 31)) | (flag >= (1 << 31))
    if bad.any():
        raise InvalidMessageError("flag does not fit in 32 bits", row=first(bad), field="flag")
    return flag


def born_column(col: pa.Array | None, n: int, now_ms: int) -> np.ndarray:
    """BORNTIMESTAMP (ms) per row from a ``bornTimestamp`` column; a null (or no column) is ``now_ms``.

    A timestamp column (any unit, any time zone: its values are UTC) is truncated to ms; an
    integer column is ms. Raises :class:`InvalidMessageError` naming the first row outside
    [:data:`BORN_MS_MIN`, :data:`BORN_MS_MAX`] (checked in the column's own unit, before any
    conversion could overflow).
    """
    if col is None or pa.types.is_null(col.type):
        born = np.empty(n, np.int64)
        born.fill(now_ms)
        return born
    if pa.types.is_timestamp(col.type):
        unit, raw = col.type.unit, col.cast(pa.int64())  # the stored integers, no conversion
        per_ms = _PER_MS[unit]
        lo, hi = (
            (BORN_MS_MIN, BORN_MS_MAX // 1000)
            if per_ms is None
            else (BORN_MS_MIN * per_ms, BORN_MS_MAX * per_ms + per_ms - 1)
        )
    elif pa.types.is_integer(col.type):
        unit, raw, lo, hi, per_ms = "ms", col, BORN_MS_MIN, BORN_MS_MAX, 1
    else:
        raise InvalidMessageError(
            f"must be a timestamp or int64 ms, got {col.type}", row=0 if n else None, field="bornTimestamp"
        )
    # uint64 stays uint64: compared before any cast
    values = raw.to_numpy() if not raw.null_count else np.asarray(pc.fill_null(raw, 0))
    valid = ~np.asarray(raw.is_null()) if raw.null_count else None
    bad = (values < lo) | (values > min(hi, 2**63 - 1))
    if valid is not None:
        bad &= valid
    if bad.any():
        row = first(bad)
        raise InvalidMessageError(
            f"{values[row]} {unit} is outside 1970-01-01T00:00:00Z..9999-12-31T23:59:59.999Z "
            f"({BORN_MS_MIN}..{BORN_MS_MAX} ms)",
            row=row,
            field="bornTimestamp",
        )
    ms = values.astype(np.int64)
    if per_ms is None:
        ms *= 1000
    elif per_ms > 1:
        ms //= per_ms
    if valid is not None:
        ms[~valid] = now_ms
    return ms
