"""The put of messages naming light message queues (RocketMQ 4.9.8's ``MultiDispatch``; on with
``enable_lmq`` and ``enable_multi_dispatch``): see :mod:`rmqlog.log.lmq` for the properties.

A row whose properties map holds ``INNER_MULTI_DISPATCH`` names its LMQs (``,``-separated,
Java's ``split``; a blank value: none). The put:

1. encodes the table as any put does (every check, typed errors, nothing written), and refuses
   an LMQ name that is not ``%LMQ%`` + a valid topic name, and an LMQ row routed to the delay
   or timer topic (:class:`rmqlog.errors.InvalidMessageError` naming row and ``properties``);
2. under the append lock: refuses the put when the append state already holds more LMQs than
   ``max_lmq_consume_queue_num`` (:class:`rmqlog.errors.LmqLimitError`; RocketMQ's
   ``isLmqConsumeQueueNumExceeded``, its ``>``), gives each row's LMQs their next offsets
   from the state's ``topicQueueTable`` (key ``"%LMQ%x/0"``: RocketMQ keeps them apart, in
   ``lmqTopicQueueTable``; a name given twice in a row gets the same offset, as Java reads
   every offset before it moves any), and encodes the table again with
   ``INNER_MULTI_QUEUE_OFFSET`` (the offsets, ``,``-joined) as the store's own property of
   each LMQ row; the append publishes the state with the LMQs' next offsets in it, so
   recovery and every other process see them.

The second encoding runs under the lock (its record lengths depend on the offsets' digits):
only puts with LMQ rows pay it; every other put takes the usual path.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidMessageError, LmqLimitError
from ..log.encode.batch import EncodedBatch
from ..log.lmq import (
    LMQ_PREFIX,
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_INNER_MULTI_QUEUE_OFFSET,
    is_blank,
    lmq_problem,
    split_queues,
)
from ..log.properties import WAITING_TOPICS
from ..log.record import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

if TYPE_CHECKING:
    from ..log.append_state import AppendState

#: per LMQ row: (row, its LMQs in order)
LmqRows = list[tuple[int, list[str]]]


def lmq_rows(table: pa.Table | pa.RecordBatch) -> LmqRows:
    """The rows of ``table`` naming LMQs and their names (none: an empty list). A
    ``properties`` column that is no map is left to the encoder, which names it."""
    if not isinstance(table, pa.Table | pa.RecordBatch) or "properties" not in table.column_names:
        return []
    pm = table.column("properties")
    if isinstance(pm, pa.ChunkedArray):
        pm = pm.combine_chunks()
    if not pa.types.is_map(pm.type) or not (
        pa.types.is_string(pm.type.key_type) or pa.types.is_large_string(pm.type.key_type)
    ):
        return []
    values = pc.map_lookup(
        pm, pa.scalar(PROPERTY_INNER_MULTI_DISPATCH, pm.type.key_type), "last"
    )  # Java's map: the last
    rows = np.flatnonzero(np.asarray(values.is_valid()))
    if not len(rows):
        return []
    out: LmqRows = []
    for row, value in zip(rows.tolist(), values.take(pa.array(rows)).to_pylist(), strict=True):
        if is_blank(value):
            continue  # StringUtils.isBlank: not a multi-dispatch message
        names = split_queues(value)
        for name in names or [""]:
            problem = lmq_problem(name) if name else "an empty light message queue name"
            if problem is not None:
                raise InvalidMessageError(f"{PROPERTY_INNER_MULTI_DISPATCH}: {problem}", row=row, field="properties")
        out.append((row, names))
    return out


def lmq_count(queues: MutableMapping[str, int]) -> int:
    """How many LMQs the append state's ``topicQueueTable`` holds (one look at every key: a
    cost only puts naming LMQs pay, under the lock)."""
    return sum(1 for key in queues if key.startswith(LMQ_PREFIX))


def assign_lmq_offsets(rows: LmqRows, queues: MutableMapping[str, int], n: int) -> pa.Array:
    """Each LMQ row's ``INNER_MULTI_QUEUE_OFFSET`` item (binary, empty for other rows), the
    offsets taken from ``queues`` (moved past them), in row order."""
    items = [b""] * n
    for row, names in rows:
        offsets = [queues.get(f"{name}/0", 0) for name in names]  # all read first (MultiDispatch)
        for name, offset in zip(names, offsets, strict=True):
            queues[f"{name}/0"] = offset + 1
        items[row] = (
            PROPERTY_INNER_MULTI_QUEUE_OFFSET + NAME_VALUE_SEPARATOR + ",".join(map(str, offsets)) + PROPERTY_SEPARATOR
        ).encode()
    return pa.array(items, pa.binary())


def refuse_routed(batch: EncodedBatch, rows: LmqRows) -> None:
    """Refuse an LMQ row the encoding routed to the delay or timer topic (its LMQ units would
    come before its delivery)."""
    waiting = [i for i, t in enumerate(batch.topics) if t in WAITING_TOPICS]
    if waiting:
        routed = np.isin(batch.topic_index, waiting)
        for row, _ in rows:
            if routed[row]:
                raise InvalidMessageError(
                    "a delayed or timed message cannot name light message queues", row=row, field="properties"
                )


def lmq_batch(
    state: AppendState, rows: LmqRows, limit: int, n: int, encode: Callable[[pa.Array], EncodedBatch]
) -> list[EncodedBatch]:
    """Under the append lock (the module docstring's step 2): the limit, the offsets from
    ``state``, the table encoded again by ``encode(items)`` with them."""
    count = lmq_count(state.queues)
    if count > limit:
        raise LmqLimitError(count, limit)
    batch = encode(assign_lmq_offsets(rows, state.queues, n))
    batch.lmq = True
    return [batch]
