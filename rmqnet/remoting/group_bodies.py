"""The bodies of a consumer group's requests, each written and read here for the broker and
the client alike (fastjson's compact form, keys sorted):

- LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42) requests, ``LockBatchRequestBody`` /
  ``UnlockBatchRequestBody``: ``{"clientId", "consumerGroup", "mqSet": [MessageQueue...]}``;
- 41's answer, ``LockBatchResponseBody``: ``{"lockOKMQSet": [MessageQueue...]}``;
- GET_CONSUMER_LIST_BY_GROUP (38)'s answer, ``GetConsumerListByGroupResponseBody``:
  ``{"consumerIdList": [clientId...]}``.

Reading checks the shape (types, queue ids 0..2^31-1, a bounded queue count) and raises
:class:`LockBodyError` naming what is wrong; the names in a lock body (group, topics) are the
broker's to check against the store's rules.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .admin_bodies import QueueKey
from .errors import FieldError
from .json_values import loads_body

#: the most queues one lock request may name (a body of 16 MiB holds ~250,000; the cap keeps
#: one request's work bounded)
MAX_QUEUES_PER_REQUEST = 65_536


class LockBodyError(ValueError):
    """A 41/42 body that is not a ``LockBatchRequestBody`` (names the field)."""


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True, slots=True)
class LockBatchBody:
    """``LockBatchRequestBody`` / ``UnlockBatchRequestBody``: the queues (``mqSet``, repeats
    dropped, in order) a client of a group locks or unlocks."""

    consumer_group: Any  # (read as sent: the broker checks it as a group name)
    client_id: str
    mq_set: tuple[QueueKey, ...]

    def encode(self) -> bytes:
        return _dumps(
            {
                "clientId": self.client_id,
                "consumerGroup": self.consumer_group,
                "mqSet": [q.to_json() for q in self.mq_set],
            }
        )

    @staticmethod
    def decode(body: bytes) -> LockBatchBody:
        """Parse a 41/42 body; :class:`LockBodyError` naming what is wrong. The topics of
        ``mq_set`` and the group are as sent (the broker checks them as names)."""
        try:
            obj = loads_body(body, "LockBatchRequestBody")
        except FieldError as exc:
            raise LockBodyError(str(exc)) from None
        if not isinstance(obj, dict):
            raise LockBodyError("the lock body is not a JSON object")
        client = obj.get("clientId")
        if not isinstance(client, str) or not client:
            raise LockBodyError(f"clientId is {client!r}, not a non-empty string")
        mqs = obj.get("mqSet")
        if mqs is None:
            mqs = []
        if not isinstance(mqs, list) or not all(isinstance(m, dict) for m in mqs):
            raise LockBodyError("mqSet is not a list of MessageQueue objects")
        if len(mqs) > MAX_QUEUES_PER_REQUEST:
            raise LockBodyError(f"mqSet names {len(mqs)} queues, more than {MAX_QUEUES_PER_REQUEST}")
        return LockBatchBody(obj.get("consumerGroup"), client, tuple(dict.fromkeys(_queue(m) for m in mqs)))


def _queue(m: dict[str, Any]) -> QueueKey:
    topic = m.get("topic")
    if not isinstance(topic, str):
        raise LockBodyError(f"mqSet[].topic is {topic!r}, not a string")
    broker = m.get("brokerName")
    if not isinstance(broker, str) or not broker:
        raise LockBodyError(f"mqSet[].brokerName is {broker!r}, not a non-empty string")
    qid = m.get("queueId")
    if isinstance(qid, str) and qid.strip().isdigit():
        qid = int(qid)
    if isinstance(qid, bool) or not isinstance(qid, int) or not 0 <= qid < 2**31:
        raise LockBodyError(f"mqSet[].queueId is {qid!r}, not a queue id 0..2147483647")
    return QueueKey(topic, broker, qid)


def encode_lock_ok(queues: Iterable[QueueKey]) -> bytes:
    """``LockBatchResponseBody``: the queues the client holds now."""
    return _dumps({"lockOKMQSet": [q.to_json() for q in queues]})


def decode_lock_ok(body: bytes) -> list[QueueKey]:
    """The queues of a ``LockBatchResponseBody``; :class:`FieldError` when it is not one."""
    obj = loads_body(body, "LockBatchResponseBody")
    got = obj.get("lockOKMQSet") if isinstance(obj, dict) else None
    if not isinstance(got, list):
        raise FieldError("lockOKMQSet", f"is {got!r}, not a list of MessageQueue objects")
    return [QueueKey.from_json(m) for m in got]


def encode_consumer_ids(ids: Iterable[str]) -> bytes:
    """``GetConsumerListByGroupResponseBody``."""
    return _dumps({"consumerIdList": list(ids)})


def decode_consumer_ids(body: bytes) -> list[str]:
    """The client ids of a ``GetConsumerListByGroupResponseBody``; :class:`FieldError` when it
    is not one."""
    obj = loads_body(body, "GetConsumerListByGroupResponseBody")
    ids = obj.get("consumerIdList") if isinstance(obj, dict) else None
    if not isinstance(ids, list):
        raise FieldError("consumerIdList", f"is {ids!r}, not a list of client ids")
    return [str(i) for i in ids]
