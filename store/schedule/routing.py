"""The put side of delay messages: rows with a delay level go to ``SCHEDULE_TOPIC_XXXX``.

RocketMQ 4.x (``CommitLog.putMessage``): a message whose ``DELAY`` property (its delay level)
is above 0 is stored in topic ``SCHEDULE_TOPIC_XXXX``, queue ``level - 1``, with its real
topic and queue id kept in the properties ``REAL_TOPIC`` / ``REAL_QID``; a level above the
highest configured one is clamped to it. The scheduler (:mod:`rmqlog.schedule.scheduler`)
delivers it to the real queue once due.

Here the level comes from the batch's ``delayLevel`` column (int, null = none) or from a
``DELAY`` entry of its ``properties`` map (a decimal level, as RocketMQ's clients send it);
a row giving both must give the same level. Rows with a level of 0 or less, or none, are put
as they are. A delayed row without a ``queueId`` gets its real queue now, by the writer's
round robin over the real topic's queues (RocketMQ's producer picks the queue before
sending). Everything is computed over whole columns; the only loop is over the distinct real
topics of the delayed rows that need a queue.

The store's own properties of a delayed row (``REAL_TOPIC``, ``REAL_QID``, ``DELAY``) are
returned as one pre-joined ``name\\x01value\\x02`` string per row, added to the record's
properties by the encoder (:func:`rmqlog.log.encode.prepare.prepare_batch`,
``system_properties``): users still cannot set those names themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidMessageError, InvalidTopicError, QueueIdError
from ..log.encode.arrays import flat
from ..log.encode.columns import as_string
from ..log.properties import PROPERTY_DELAY, PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC, SCHEDULE_TOPIC
from ..log.record import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from ..paths import topic_problem

#: The put column giving a row's delay level (the Spark sink's column of the same name).
DELAY_LEVEL_COLUMN = "delayLevel"

#: (real topic, number of rows) -> their queue ids (the writer's round robin over the topic's queues)
QueueChooser = Callable[[str, int], np.ndarray]
#: real topic -> its number of write queues (as a put would create it)
QueueCount = Callable[[str], int]


@dataclass(frozen=True)
class Routed:
    """A batch ready for the encoder: the table (``delayLevel`` gone, delayed rows moved to
    the schedule topic) and the store's properties per row (``None``: no delayed row)."""

    table: pa.Table
    system_properties: pa.Array | None
    delayed: int = 0


def route_delays(table: pa.Table, max_level: int, choose_queues: QueueChooser, queue_count: QueueCount) -> Routed:
    """Move the delayed rows of ``table`` to the schedule topic (see the module docstring).

    Raises :class:`InvalidMessageError` naming the row and field: a level that is not an
    integer (``delayLevel`` of another type, a ``DELAY`` property that is not decimal), the
    two disagreeing, a row written to ``SCHEDULE_TOPIC_XXXX`` directly, a delayed row whose real
    topic is missing or invalid or whose ``queueId`` is not a queue of it (checked now: the
    delivery must not fail later)."""
    names = table.column_names
    if len(set(names)) != len(names):
        return Routed(table, None)  # a duplicated column: the encoder names it
    has_column = DELAY_LEVEL_COLUMN in names
    has_map = "properties" in names and not pa.types.is_null(table.schema.field("properties").type)
    has_props = has_map and names_present(table, (PROPERTY_DELAY,))
    if not has_column and not has_props:
        if has_map:  # refused before the encoder's checks, as when the maps are taken apart (a wire put's order)
            refuse_topic(table, SCHEDULE_TOPIC, "delayed messages: give a delayLevel")
        # nothing can be delayed (the usual put): a row written to the schedule topic directly
        # is refused after encoding, from the batch's distinct topics (free there, ~50 us here)
        return Routed(table, None)
    n = table.num_rows
    level = np.zeros(n, np.int64)
    given = np.zeros(n, bool)
    if has_column:
        level, given = _level_column(table.column(DELAY_LEVEL_COLUMN))
        table = table.drop_columns([DELAY_LEVEL_COLUMN])
    if has_props:
        table, prop_level, prop_given = _take_delay_property(table)
        both = given & prop_given
        if (both & (level != prop_level)).any():
            row = int(np.flatnonzero(both & (level != prop_level))[0])
            raise InvalidMessageError(
                f"delayLevel {level[row]} and property DELAY {prop_level[row]} disagree",
                row=row,
                field=DELAY_LEVEL_COLUMN,
            )
        level = np.where(prop_given, prop_level, level)
    refuse_topic(table, SCHEDULE_TOPIC, "delayed messages: give a delayLevel")
    delayed = level > 0
    if not delayed.any():
        return Routed(table, None)
    level = np.minimum(level, max_level)  # RocketMQ clamps to the highest level
    return _reroute(table, delayed, level, choose_queues, queue_count)


def refuse_topic(table: pa.Table, name: str, what: str) -> None:
    """Raise :class:`InvalidMessageError` naming the first row written to the store's own topic
    ``name`` directly (``what``: what to give instead, for the message)."""
    if "topic" not in table.column_names:
        return
    col = table.column("topic")
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return  # not a string column: the encoder names it
    hit = pc.fill_null(pc.equal(col, name), False)
    if pc.any(hit).as_py():
        row = int(np.flatnonzero(np.asarray(hit.combine_chunks() if isinstance(hit, pa.ChunkedArray) else hit))[0])
        raise InvalidMessageError(f"{name} is the store's topic for {what} instead", row=row, field="topic")


def _level_column(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(level per row, 0 where null; whether given) of the ``delayLevel`` column."""
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), np.int64), np.zeros(len(arr), bool)
    if not pa.types.is_integer(arr.type):
        raise InvalidMessageError(f"must be an integer column, not {arr.type}", row=None, field=DELAY_LEVEL_COLUMN)
    given = np.asarray(arr.is_valid())
    return np.asarray(arr.fill_null(0).cast(pa.int64())), given


@dataclass(frozen=True)
class TakenProperties:
    """Entries taken out of a batch's ``properties`` maps: the row, name and value of each
    (strings), in map order."""

    rows: np.ndarray
    names: pa.Array
    values: pa.Array


def names_present(table: pa.Table, names: tuple[str, ...]) -> bool:
    """Whether a ``properties`` map of ``table`` may have an entry named in ``names``: one
    ``is_in`` over the maps' keys (true whenever it cannot tell: the column is not a map of
    string keys, whose own checks then run). A put whose maps carry only the user's names (a
    Spark sink's rows) is then not taken apart for properties it does not have."""
    col = table.column("properties")
    if not pa.types.is_map(col.type) or not pa.types.is_string(col.type.key_type):
        return True
    wanted = pa.array(names, pa.string())
    return any(pc.any(pc.is_in(chunk.keys, wanted)).as_py() for chunk in col.chunks if len(chunk.keys))


def take_properties(table: pa.Table, names: tuple[str, ...]) -> tuple[pa.Table, TakenProperties | None]:
    """The entries named ``names`` of the ``properties`` maps (a null map's hidden entries do
    not count), and the table without them; ``None`` when there is none."""
    n = table.num_rows
    col = table.column("properties")
    pm = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not pa.types.is_map(pm.type) or not len(pm.keys):
        return table, None
    keys = pm.keys.cast(pa.string())
    hit = np.asarray(pc.fill_null(pc.is_in(keys, pa.array(names, pa.string())), False))
    if not hit.any():
        return table, None
    offsets = np.asarray(pm.offsets, np.int64)
    base = int(offsets[0])
    parent = np.repeat(np.arange(n), np.diff(offsets))
    hit = hit[base : base + len(parent)] & np.asarray(pm.is_valid())[parent]
    if not hit.any():
        return table, None
    at = pa.array(np.flatnonzero(hit))
    taken = TakenProperties(
        parent[np.flatnonzero(hit)],
        keys.slice(base, len(parent)).take(at),
        pm.items.cast(pa.string()).slice(base, len(parent)).take(at),
    )
    keep = ~hit
    new_offsets = np.concatenate([[0], np.cumsum(np.bincount(parent[keep], minlength=n))]).astype(np.int32)
    kept_keys = pm.keys.slice(base, len(parent)).filter(pa.array(keep))
    kept_items = pm.items.slice(base, len(parent)).filter(pa.array(keep))
    maps = pa.MapArray.from_arrays(pa.array(new_offsets), kept_keys, kept_items, mask=pm.is_null())
    return table.set_column(table.column_names.index("properties"), "properties", maps), taken


def _take_delay_property(table: pa.Table) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """The ``DELAY`` entries of the ``properties`` maps as levels, and the table without them."""
    n = table.num_rows
    level, given = np.zeros(n, np.int64), np.zeros(n, bool)
    table, taken = take_properties(table, (PROPERTY_DELAY,))
    if taken is None:
        return table, level, given
    values = taken.values
    digits = np.asarray(pc.fill_null(pc.match_substring_regex(values, r"^-?[0-9]{1,9}$"), False))
    if not digits.all():
        j = int(np.flatnonzero(~digits)[0])
        raise InvalidMessageError(
            f"property DELAY is {values[j].as_py()!r}, not a delay level (an integer)",
            row=int(taken.rows[j]),
            field="properties",
        )
    level[taken.rows] = np.asarray(values.cast(pa.int64()))  # the last DELAY of a row wins, as in a Java map
    given[taken.rows] = True
    return table, level, given


def queue_id_column(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(whether each row gives a ``queueId``, its value or 0) of the batch's ``queueId`` column."""
    n = table.num_rows
    if "queueId" not in table.column_names:
        return np.zeros(n, bool), np.zeros(n, np.int64)
    qcol = table.column("queueId").combine_chunks()
    if pa.types.is_null(qcol.type):
        return np.zeros(n, bool), np.zeros(n, np.int64)
    return np.asarray(qcol.is_valid()), np.asarray(qcol.fill_null(0).cast(pa.int64()))


def real_queues(
    table: pa.Table,
    waiting: np.ndarray,
    choose_queues: QueueChooser,
    queue_count: QueueCount,
) -> tuple[pa.Array, np.ndarray]:
    """(the ``topic`` column as strings, the real queue id per row) for the rows that will wait
    (``waiting``) in a delay or timer topic: each one's topic checked, its ``queueId`` checked
    against the topic's queues, or chosen now by the writer's round robin when absent (as
    RocketMQ's producer picks the queue before sending). Other rows keep their ``queueId``."""
    if "topic" not in table.column_names:
        raise InvalidMessageError("missing required column", row=None, field="topic")
    # as the encoder reads it: strings only, every value UTF-8 (the distinct names are decoded below)
    topics = as_string(flat(table.column("topic")), "topic", InvalidTopicError)
    qvalid, qids = queue_id_column(table)
    real_q = qids.copy()
    rows = np.flatnonzero(waiting)
    enc = (topics if len(rows) == len(topics) else topics.take(pa.array(rows))).dictionary_encode()
    idx = np.asarray(enc.indices, np.int64)
    if enc.null_count:
        raise InvalidMessageError(
            "missing topic", row=int(rows[np.flatnonzero(np.asarray(enc.is_null()))[0]]), field="topic"
        )
    for t, name in enumerate(enc.dictionary.to_pylist()):  # per real topic, not per row
        sel = rows[idx == t]
        problem = topic_problem(name)
        if problem is not None:
            raise InvalidTopicError(problem, row=int(sel[0]), field="topic")
        count = queue_count(name)
        given = sel[qvalid[sel]]
        bad = given[(qids[given] < 0) | (qids[given] >= count)]
        if len(bad):
            raise QueueIdError(
                f"queue id {qids[bad[0]]} is not a queue of topic {name!r} ({count} queues)",
                row=int(bad[0]),
                field="queueId",
            )
        need = sel[~qvalid[sel]]
        if len(need):
            real_q[need] = choose_queues(name, len(need))
    return topics, real_q


def _reroute(
    table: pa.Table,
    delayed: np.ndarray,
    level: np.ndarray,
    choose_queues: QueueChooser,
    queue_count: QueueCount,
) -> Routed:
    topics, real_q = real_queues(table, delayed, choose_queues, queue_count)
    qvalid, qids = queue_id_column(table)
    every = bool(delayed.all())  # (a broker's send-back: every row; fewer Arrow calls)
    d = pa.array(delayed)
    new_topics = (
        pa.repeat(pa.scalar(SCHEDULE_TOPIC), len(delayed))
        if every
        else pc.if_else(d, pa.scalar(SCHEDULE_TOPIC), topics)
    )
    new_q = np.where(delayed, level - 1, qids)
    new_q_arr = pa.array(new_q.astype(np.int32), mask=~(delayed | qvalid))
    real_q_str = pc.cast(pa.array(real_q), pa.string())
    level_str = pc.cast(pa.array(level), pa.string())
    items = pc.binary_join_element_wise(
        PROPERTY_REAL_TOPIC + NAME_VALUE_SEPARATOR,
        topics,
        PROPERTY_SEPARATOR + PROPERTY_REAL_QID + NAME_VALUE_SEPARATOR,
        real_q_str,
        PROPERTY_SEPARATOR + PROPERTY_DELAY + NAME_VALUE_SEPARATOR,
        level_str,
        PROPERTY_SEPARATOR,
        "",
    )
    system = (items if every else pc.if_else(d, items, pa.scalar("", pa.string()))).view(pa.binary())
    table = table.set_column(table.column_names.index("topic"), "topic", new_topics)
    if "queueId" in table.column_names:
        table = table.set_column(table.column_names.index("queueId"), "queueId", new_q_arr)
    else:
        table = table.append_column("queueId", new_q_arr)
    return Routed(table, system, int(delayed.sum()))
