"""HEART_BEAT's (34) body, RocketMQ's ``HeartbeatData`` JSON, read and written in one place:
the broker's handler and its ACL read it with :meth:`HeartbeatData.decode`, the clients write
it with :meth:`HeartbeatData.encode`::

    {"clientID": str,
     "producerDataSet": [{"groupName": str}],
     "consumerDataSet": [{"groupName": str, "consumeType": "CONSUME_PASSIVELY"|"CONSUME_ACTIVELY",
                          "messageModel": "CLUSTERING"|"BROADCASTING", "consumeFromWhere": str,
                          "unitMode": bool,
                          "subscriptionDataSet": [{"topic": str, "subString": str, "tagsSet": [str],
                                                   "codeSet": [int], "subVersion": int,
                                                   "classFilterMode": bool, "expressionType": "TAG"|"SQL92"?}]}]}

The decode checks the shape (names are non-empty strings, sets are lists of objects, a
``subVersion`` an integer); whether a group's name is a valid one is the broker's rule
(:mod:`rmqnet.broker.consumers`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import FieldError
from .json_values import loads_body


class HeartbeatError(ValueError):
    """A HEART_BEAT body that is not HeartbeatData (names the field)."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """``SubscriptionData``: what a consumer group reads of one topic."""

    topic: str
    sub_string: str
    expression_type: str
    sub_version: int
    tags: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "subString": self.sub_string,
            "tagsSet": list(self.tags),
            "codeSet": [],
            "subVersion": self.sub_version,
            "classFilterMode": False,
            "expressionType": self.expression_type,
        }


@dataclass(frozen=True, slots=True)
class ConsumerData:
    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    unit_mode: bool
    subscriptions: tuple[Subscription, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "groupName": self.group,
            "consumeType": self.consume_type,
            "messageModel": self.message_model,
            "consumeFromWhere": self.consume_from_where,
            "unitMode": self.unit_mode,
            "subscriptionDataSet": [s.to_json() for s in self.subscriptions],
        }


@dataclass(frozen=True, slots=True)
class HeartbeatData:
    client_id: str
    producer_groups: tuple[str, ...]
    consumers: tuple[ConsumerData, ...]

    def encode(self) -> bytes:
        """The body as RocketMQ's clients send it."""
        return json.dumps(
            {
                "clientID": self.client_id,
                "producerDataSet": [{"groupName": g} for g in self.producer_groups],
                "consumerDataSet": [c.to_json() for c in self.consumers],
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def decode(body: bytes) -> HeartbeatData:
        """Parse and check a HEART_BEAT body; :class:`HeartbeatError` naming what is wrong."""
        try:
            obj = loads_body(body, "HeartbeatData")
        except FieldError as exc:
            raise HeartbeatError(str(exc)) from None
        if not isinstance(obj, dict):
            raise HeartbeatError("the HeartbeatData body is not a JSON object")
        client_id = _text(obj, "clientID", "HeartbeatData")
        producers = tuple(_text(p, "groupName", "producerDataSet[]") for p in _objects(obj, "producerDataSet"))
        consumers = []
        for c in _objects(obj, "consumerDataSet"):
            group = _text(c, "groupName", "consumerDataSet[]")
            subs = []
            for s in _objects(c, "subscriptionDataSet"):
                topic = _text(s, "topic", "subscriptionDataSet[]")
                version = s.get("subVersion", 0)
                if isinstance(version, str) and version.strip().lstrip("-").isdigit():
                    version = int(version)
                if isinstance(version, bool) or not isinstance(version, int):
                    raise HeartbeatError(f"subVersion of {topic!r} is {version!r}, not an integer")
                tags = s.get("tagsSet") or []
                subs.append(
                    Subscription(
                        topic,
                        str(s.get("subString") or "*"),
                        str(s.get("expressionType") or "TAG"),
                        version,
                        tuple(str(t) for t in tags) if isinstance(tags, list) else (),
                    )
                )
            consumers.append(
                ConsumerData(
                    group,
                    str(c.get("consumeType") or ""),
                    str(c.get("messageModel") or ""),
                    str(c.get("consumeFromWhere") or ""),
                    c.get("unitMode") in (True, "true", 1),
                    tuple(subs),
                )
            )
        return HeartbeatData(client_id, producers, tuple(consumers))


def _text(obj: dict[str, Any], key: str, where: str) -> str:
    v = obj.get(key)
    if not isinstance(v, str) or not v:
        raise HeartbeatError(f"{where}.{key} is {v!r}, not a non-empty string")
    return v


def _objects(obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    v = obj.get(key)
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise HeartbeatError(f"{key} is not a list of objects")
    return v


__all__ = ["ConsumerData", "HeartbeatData", "HeartbeatError", "Subscription"]
