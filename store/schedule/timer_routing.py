"""The put side of timed messages (RocketMQ 5's timer): rows with a delivery time go to
``rmq_sys_wheel_timer``.

RocketMQ 5 (``HookUtils.transformTimerMessage``): a message with ``TIMER_DELAY_SEC``,
``TIMER_DELAY_MS`` or ``TIMER_DELIVER_MS`` (that order of precedence) is due at
``now + sec * 1000``, ``now + ms`` or the given time. If that is in the future:

- more than ``timer_max_delay_sec`` ahead is refused;
- ``TIMER_OUT_MS`` is the time rounded down to ``timer_precision_ms`` (a time on the
  boundary goes one step down: RocketMQ's timer delivers ``timer_precision_ms`` after it).
  It is kept for RocketMQ's tools; this store delivers at the time itself, to the
  millisecond (:mod:`rmqlog.schedule.timer`);
- the message is stored in ``rmq_sys_wheel_timer`` queue 0 with ``REAL_TOPIC`` /
  ``REAL_QID`` (the queue is chosen now, as the producer does) and the timer property it
  was sent with.

A time already past is no timer message: the row is stored in its topic as it is (with its
timer property). Here the time also comes from the put's ``deliverTime`` column (a timestamp,
or int64 ms since the epoch; null = none), which stands for ``TIMER_DELIVER_MS``; a row may
give one or the other, and a row with a delay level too is refused (RocketMQ would silently
drop the timer). Computed over whole columns; the only loop is over the distinct real topics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidMessageError
from ..log.properties import (
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    TIMER_TOPIC,
)
from ..log.record import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from .routing import (
    DELAY_LEVEL_COLUMN,
    QueueChooser,
    QueueCount,
    names_present,
    queue_id_column,
    real_queues,
    refuse_topic,
    take_properties,
)

#: The put column giving a row's delivery time (the Spark sink's column of the same name).
DELIVER_TIME_COLUMN = "deliverTime"
#: The timer properties a put may give, in RocketMQ's order of precedence.
TIMER_INPUT_PROPERTIES = (PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELIVER_MS)


@dataclass(frozen=True)
class TimerRouted:
    """A batch with its timed rows moved to the timer topic (``deliverTime`` and the timer
    properties gone from the table), the store's properties per row (``None``: no row gave a
    time), and how many rows wait in the timer topic."""

    table: pa.Table
    system_properties: pa.Array | None
    timed: int = 0


def out_ms(deliver_ms: np.ndarray, precision_ms: int) -> np.ndarray:
    """RocketMQ's ``TIMER_OUT_MS`` of each delivery time: rounded down to the precision, a time
    on the boundary one step down (the timer delivers ``precision_ms`` after it)."""
    exact = deliver_ms % precision_ms == 0
    return np.where(exact, deliver_ms - precision_ms, deliver_ms // precision_ms * precision_ms)


def route_timers(
    table: pa.Table,
    now_ms: int,
    max_delay_ms: int,
    precision_ms: int,
    choose_queues: QueueChooser,
    queue_count: QueueCount,
) -> TimerRouted:
    """Move the timed rows of ``table`` to the timer topic (see the module docstring).

    Raises :class:`InvalidMessageError` naming the row and field: a ``deliverTime`` that is not
    a timestamp or int column, a timer property that is not a decimal number, a row giving a
    time twice or with a delay level too, a time more than ``max_delay_ms`` ahead, a row
    written to the timer topic directly, and, for a timed row, what the delay routing checks
    (its real topic and queue)."""
    names = table.column_names
    if len(set(names)) != len(names):
        return TimerRouted(table, None)  # a duplicated column: the encoder names it
    has_column = DELIVER_TIME_COLUMN in names
    has_map = "properties" in names and pa.types.is_map(table.schema.field("properties").type)
    has_props = has_map and names_present(table, TIMER_INPUT_PROPERTIES)
    if not has_column and not has_props:
        if has_map:  # refused before the encoder's checks, as when the maps are taken apart (a wire put's order)
            refuse_topic(table, TIMER_TOPIC, "timed messages: give a deliverTime")
        # nothing can be timed (the usual put): a row written to the timer topic directly is
        # refused after encoding, from the batch's distinct topics (free there)
        return TimerRouted(table, None)
    refuse_topic(table, TIMER_TOPIC, "timed messages: give a deliverTime")
    n = table.num_rows
    deliver = np.zeros(n, np.int64)
    given = np.zeros(n, bool)
    field = np.full(n, DELIVER_TIME_COLUMN, object)
    source = np.full(n, PROPERTY_TIMER_DELIVER_MS, object)  # the property the stored row keeps
    raw = np.zeros(n, np.int64)  # that property's value
    if has_column:
        deliver, given = _deliver_column(table.column(DELIVER_TIME_COLUMN))
        raw = deliver.copy()
        table = table.drop_columns([DELIVER_TIME_COLUMN])
    if has_props:
        table, props = _take_timer_properties(table)
        for name, (value, got) in props.items():
            twice = given & got
            if twice.any():
                row = int(np.flatnonzero(twice)[0])
                raise InvalidMessageError(
                    f"gives a delivery time twice ({field[row]} and property {name}): give one",
                    row=row,
                    field="properties",
                )
            if name == PROPERTY_TIMER_DELAY_SEC:
                at = now_ms + value * 1000
            elif name == PROPERTY_TIMER_DELAY_MS:
                at = now_ms + value
            else:
                at = value
            deliver = np.where(got, at, deliver)
            raw = np.where(got, value, raw)
            source[got] = name
            field[got] = "properties"
            given |= got
    if not given.any():
        return TimerRouted(table, None)
    if DELAY_LEVEL_COLUMN in table.column_names:
        col = table.column(DELAY_LEVEL_COLUMN).combine_chunks()
        if not pa.types.is_null(col.type) and pa.types.is_integer(col.type):
            both = given & np.asarray(col.is_valid()) & (np.asarray(col.fill_null(0).cast(pa.int64())) > 0)
            if both.any():
                row = int(np.flatnonzero(both)[0])
                raise InvalidMessageError(
                    "gives both a delay level and a delivery time: give one", row=row, field=DELAY_LEVEL_COLUMN
                )
    timed = given & (deliver > now_ms)
    too_far = timed & (deliver - now_ms > max_delay_ms)
    if too_far.any():
        row = int(np.flatnonzero(too_far)[0])
        raise InvalidMessageError(
            f"delivery time {int(deliver[row])} is {int(deliver[row] - now_ms) // 1000} s ahead, more than "
            f"timer_max_delay_sec ({max_delay_ms // 1000} s)",
            row=row,
            field=str(field[row]),
        )
    kept = pc.binary_join_element_wise(
        pa.array(source.astype(str)), pc.cast(pa.array(raw), pa.string()), NAME_VALUE_SEPARATOR
    )
    system = pc.if_else(
        pa.array(given), pc.binary_join_element_wise(kept, "", PROPERTY_SEPARATOR), pa.scalar("", pa.string())
    )
    if not timed.any():
        return TimerRouted(table, system.cast(pa.binary()))
    topics, real_q = real_queues(table, timed, choose_queues, queue_count)
    items = pc.binary_join_element_wise(
        PROPERTY_TIMER_OUT_MS + NAME_VALUE_SEPARATOR,
        pc.cast(pa.array(out_ms(deliver, precision_ms)), pa.string()),
        PROPERTY_SEPARATOR + PROPERTY_REAL_TOPIC + NAME_VALUE_SEPARATOR,
        topics,
        PROPERTY_SEPARATOR + PROPERTY_REAL_QID + NAME_VALUE_SEPARATOR,
        pc.cast(pa.array(real_q), pa.string()),
        PROPERTY_SEPARATOR,
        "",
    )
    t = pa.array(timed)
    system = pc.if_else(t, pc.binary_join_element_wise(system, items, ""), system)
    table = table.set_column(table.column_names.index("topic"), "topic", pc.if_else(t, pa.scalar(TIMER_TOPIC), topics))
    qvalid, q = queue_id_column(table)
    new_q = pa.array(np.where(timed, 0, q).astype(np.int32), mask=~(timed | qvalid))
    if "queueId" in table.column_names:
        table = table.set_column(table.column_names.index("queueId"), "queueId", new_q)
    else:
        table = table.append_column("queueId", new_q)
    return TimerRouted(table, system.cast(pa.binary()), int(timed.sum()))


def _deliver_column(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(ms since the epoch per row, 0 where null; whether given) of the ``deliverTime`` column."""
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), np.int64), np.zeros(len(arr), bool)
    if pa.types.is_timestamp(arr.type):
        arr = arr.cast(pa.timestamp("ms"), safe=False).cast(pa.int64())  # sub-ms precision truncated
    elif not pa.types.is_integer(arr.type):
        raise InvalidMessageError(
            f"must be a timestamp or int64 (ms) column, not {arr.type}", row=None, field=DELIVER_TIME_COLUMN
        )
    given = np.asarray(arr.is_valid())
    return np.asarray(arr.fill_null(0).cast(pa.int64())), given


def _take_timer_properties(table: pa.Table) -> tuple[pa.Table, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """{name: (value per row, whether given)} of the timer properties in the ``properties``
    maps (:data:`TIMER_INPUT_PROPERTIES`; a row's first given name in that order wins, as in
    RocketMQ), and the table without them."""
    n = table.num_rows
    table, taken = take_properties(table, TIMER_INPUT_PROPERTIES)
    if taken is None:
        return table, {}
    rows, which, values = taken.rows, taken.names, taken.values
    digits = np.asarray(pc.fill_null(pc.match_substring_regex(values, r"^-?[0-9]{1,15}$"), False))
    if not digits.all():
        j = int(np.flatnonzero(~digits)[0])
        raise InvalidMessageError(
            f"property {which[j].as_py()} is {values[j].as_py()!r}, not a number", row=int(rows[j]), field="properties"
        )
    numbers = np.asarray(values.cast(pa.int64()))
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    taken_rows = np.zeros(n, bool)
    for name in TIMER_INPUT_PROPERTIES:  # precedence: a row's first name in this order counts
        sel = np.asarray(pc.equal(which, name))
        value, got = np.zeros(n, np.int64), np.zeros(n, bool)
        value[rows[sel]] = numbers[sel]  # the last entry of a name wins, as in a Java map
        got[rows[sel]] = True
        got &= ~taken_rows
        taken_rows |= got
        if got.any():
            out[name] = (value, got)
    return table, out
