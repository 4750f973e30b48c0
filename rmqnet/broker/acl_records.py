"""The stored message a request points at by its commitlog offset, as the ACL needs it
(:mod:`rmqnet.broker.acl_resources`): VIEW_MESSAGE_BY_ID (33), CONSUMER_SEND_MSG_BACK (36) and
END_TRANSACTION (37) name an offset, not a topic, so the topic is read from the record there
before the request runs.

:func:`record_at` reads the record's head (``MessageStore.wire.record_head``: one record decoded
by the scalar codec, not a table: ~0.2 ms of CPU on this VM) and takes it only when its queue lists it at that
offset (its consume-queue unit, as VIEW_MESSAGE_BY_ID's handler checks): bytes inside a message
body made to look like a record are no queue's unit, so their forged topic is never the one
authorized. Cost: one record and one unit read, whatever the store's size.

The carrier topics (:data:`CARRIER_TOPICS`) hold messages of other topics until they are
delivered (delayed messages, transactions' half and op messages): a record there is
authorized against its ``REAL_TOPIC`` (:func:`owner_topic`).
"""

from __future__ import annotations

import numpy as np

import rmqlog
from rmqlog import RecordHead

from ..remoting.names import PROPERTY_PGROUP, PROPERTY_REAL_TOPIC, SCHEDULE_TOPIC
from ..remoting.names import TRANS_CHECK_MAX_TIME_TOPIC as CHECK_MAX_TOPIC
from ..remoting.names import TRANS_HALF_TOPIC as HALF_TOPIC
from ..remoting.names import TRANS_OP_HALF_TOPIC as OP_TOPIC

#: topics whose records belong to another topic (their ``REAL_TOPIC``); reading one by name
#: reads every topic's messages
CARRIER_TOPICS = frozenset({SCHEDULE_TOPIC, HALF_TOPIC, OP_TOPIC, CHECK_MAX_TOPIC})
REAL_TOPIC, PGROUP = PROPERTY_REAL_TOPIC, PROPERTY_PGROUP


class RecordUnreadable(Exception):
    """No record the ACL can authorize starts at the offset; ``str()`` says why."""


def record_at(store: rmqlog.MessageStore, offset: int) -> RecordHead:
    """The record starting at commitlog ``offset`` and listed there by its queue
    (``MessageStore.wire.record_head``). Raises :class:`RecordUnreadable` when none does (negative,
    deleted, not yet dispatched, inside a record, damaged) or the store cannot read it."""
    try:
        head = store.wire.record_head(offset) if offset >= 0 else None
    except rmqlog.StoreError as exc:
        raise RecordUnreadable(
            f"the message at the offset {offset} cannot be read: {type(exc).__name__}: {exc}"
        ) from None
    if head is None:
        raise RecordUnreadable(f"no message starts at the offset {offset}")
    return head


def half_at(store: rmqlog.MessageStore, offset: int, queue_offset: int) -> RecordHead:
    """The half message END_TRANSACTION ends: the record at commitlog ``offset`` that is
    queue 0 of the half topic at ``queue_offset``, read as the transaction's handler reads it
    (``MessageStore.wire.stored_rows``: the record's own topic, queue and queue offset checked, so a
    half answered before the dispatcher listed it is found). Its properties hold ``PGROUP`` and
    ``REAL_TOPIC`` only. Raises :class:`RecordUnreadable` when there is none."""
    try:
        table, found = store.wire.stored_rows(
            np.array([offset], np.int64),
            np.array([queue_offset], np.int64),
            topic=HALF_TOPIC,
            queue_id=0,
            find=(PGROUP, REAL_TOPIC),
        )
    except rmqlog.StoreError as exc:
        raise RecordUnreadable(
            f"the half message at the commitLogOffset {offset} cannot be read: {type(exc).__name__}: {exc}"
        ) from None
    if not bool(found[0]):
        raise RecordUnreadable(
            f"no half message at the commitLogOffset {offset} and tranStateTableOffset {queue_offset}"
        )
    props = {name: table.column(name)[0].as_py() for name in (PGROUP, REAL_TOPIC)}
    return RecordHead(HALF_TOPIC, 0, queue_offset, {k: v for k, v in props.items() if v is not None})


def owner_topic(facts: RecordHead) -> str | None:
    """The topic whose message ``facts`` is: its own topic, or a carrier's ``REAL_TOPIC``
    (``None`` when a carrier's record names none: an op record, the broker's own)."""
    if facts.topic in CARRIER_TOPICS:
        return facts.properties.get(REAL_TOPIC) or None
    return facts.topic


__all__ = [
    "CARRIER_TOPICS",
    "HALF_TOPIC",
    "PGROUP",
    "REAL_TOPIC",
    "RecordUnreadable",
    "half_at",
    "owner_topic",
    "record_at",
]
