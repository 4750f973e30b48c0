"""The bodies of the admin requests as RocketMQ 4.9.8's fastjson writes them, sans-I/O:
``TopicStatsTable`` (202), ``ConsumeStats`` (208), ``ConsumerConnection`` (203), and broker
config as Java properties text (25, 26).

fastjson writes a ``HashMap<MessageQueue, V>`` with the queue object itself as the key, which
is not standard JSON (keys sorted within each object, as fastjson sorts fields)::

    {"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:
                    {"lastUpdateTimestamp":1700000000000,"maxOffset":5,"minOffset":0}}}

Java's admin tools (``mqadmin topicStatus``, ``consumerProgress``) read exactly that, so the
broker writes it (:func:`encode_queue_map`) and our client reads it
(:func:`rmqnet.remoting.route.loads_fastjson`, which also takes fastjson's bare integer keys and
standard JSON: the one reader of fastjson's JSON, the routes' too). ``ConsumeStats``'s
``consumeTps`` is a double (``0.0``).

(body: fields (fastjson order))
- ``TopicStatsTable``: ``offsetTable``: queue -> ``{lastUpdateTimestamp, maxOffset, minOffset}``
- ``ConsumeStats``: ``consumeTps`` (double), ``offsetTable``: queue -> ``{brokerOffset, consumerOffset, lastTimestamp}``
- ``SubscriptionGroupWrapper`` (201): ``dataVersion``: ``{counter, timestamp}``, ``subscriptionGroupTable``: group ->
  ``SubscriptionGroupConfig``
- ``SubscriptionGroupConfig`` (200's body): ``brokerId``, ``consumeBroadcastEnable``, ``consumeEnable``,
  ``consumeFromMinEnable``, ``groupName``, ``notifyConsumerIdsChangedEnable``, ``retryMaxTimes``, ``retryQueueNums``,
  ``whichBrokerWhenConsumeSlowly``
- ``ConsumerConnection``: ``connectionSet``: ``[{clientAddr, clientId, language, version}]``, ``consumeFromWhere``,
  ``consumeType``, ``messageModel``, ``subscriptionTable``: topic -> ``SubscriptionData``

Broker config (``MixAll.properties2String``): one ``key=value`` a line, ``\\n`` after each;
UPDATE_BROKER_CONFIG's body is read as ``Properties.load`` reads it (``javaproperties``).

Decoders raise :class:`~rmqnet.remoting.errors.FieldError` naming what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import javaproperties

from .errors import FieldError
from .route import FastjsonPairs, loads_fastjson


@dataclass(frozen=True, slots=True, order=True)
class QueueKey:
    """A ``MessageQueue`` (ordered as Java's ``compareTo``: topic, broker name, queue id)."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @staticmethod
    def from_json(obj: Any) -> QueueKey:
        if not isinstance(obj, dict):
            raise FieldError("MessageQueue", f"is {obj!r}, not an object")
        try:
            return QueueKey(str(obj["topic"]), str(obj["brokerName"]), int(obj["queueId"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise FieldError("MessageQueue", f"{obj!r} lacks topic, brokerName or queueId ({exc})") from None


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def encode_queue_map(entries: dict[QueueKey, dict[str, Any]]) -> str:
    """A ``HashMap<MessageQueue, V>`` as fastjson writes it (queue objects as keys), queues sorted."""
    return "{" + ",".join(_dumps(q.to_json()) + ":" + _dumps(v) for q, v in sorted(entries.items())) + "}"


def _queue_map(obj: Any, name: str) -> dict[QueueKey, dict[str, Any]]:
    table = obj.get("offsetTable") if isinstance(obj, dict) else None
    if table is None or table == {}:
        return {}
    if not isinstance(table, FastjsonPairs):
        raise FieldError(name, "offsetTable is not a map keyed by MessageQueue")
    out = {}
    for k, v in table:
        if not isinstance(v, dict):
            raise FieldError(name, f"the entry of {k!r} is not an object")
        out[QueueKey.from_json(k)] = v
    return out


def _long(v: dict[str, Any], key: str, name: str) -> int:
    x = v.get(key, 0)
    if isinstance(x, bool) or not isinstance(x, int):
        raise FieldError(name, f"{key} is {x!r}, not a long")
    return x


# ------------------------------------------------------------------------------ the bodies


@dataclass(frozen=True, slots=True)
class TopicOffset:
    min_offset: int
    max_offset: int
    last_update_timestamp: int

    def to_json(self) -> dict[str, Any]:
        return {
            "lastUpdateTimestamp": self.last_update_timestamp,
            "maxOffset": self.max_offset,
            "minOffset": self.min_offset,
        }


def encode_topic_stats(table: dict[QueueKey, TopicOffset]) -> bytes:
    """``TopicStatsTable.encode()``."""
    return ('{"offsetTable":' + encode_queue_map({q: o.to_json() for q, o in table.items()}) + "}").encode()


def decode_topic_stats(body: bytes) -> dict[QueueKey, TopicOffset]:
    out = {}
    for q, v in _queue_map(loads_fastjson(body), "TopicStatsTable").items():
        out[q] = TopicOffset(
            _long(v, "minOffset", "TopicStatsTable"),
            _long(v, "maxOffset", "TopicStatsTable"),
            _long(v, "lastUpdateTimestamp", "TopicStatsTable"),
        )
    return out


@dataclass(frozen=True, slots=True)
class OffsetWrapper:
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerOffset": self.broker_offset,
            "consumerOffset": self.consumer_offset,
            "lastTimestamp": self.last_timestamp,
        }


@dataclass(frozen=True, slots=True)
class ConsumeStats:
    offset_table: dict[QueueKey, OffsetWrapper]
    consume_tps: float

    def total_diff(self) -> int:
        """``computeTotalDiff``: the sum of broker offset minus consumer offset."""
        return sum(w.broker_offset - w.consumer_offset for w in self.offset_table.values())


def encode_consume_stats(stats: ConsumeStats) -> bytes:
    """``ConsumeStats.encode()`` (``consumeTps`` a double: always with a fraction)."""
    tps = float(stats.consume_tps)
    return (
        '{"consumeTps":'
        + repr(tps if tps == tps else 0.0)
        + ',"offsetTable":'
        + encode_queue_map({q: w.to_json() for q, w in stats.offset_table.items()})
        + "}"
    ).encode()


def decode_consume_stats(body: bytes) -> ConsumeStats:
    obj = loads_fastjson(body)
    table = {
        q: OffsetWrapper(
            _long(v, "brokerOffset", "ConsumeStats"),
            _long(v, "consumerOffset", "ConsumeStats"),
            _long(v, "lastTimestamp", "ConsumeStats"),
        )
        for q, v in _queue_map(obj, "ConsumeStats").items()
    }
    tps = obj.get("consumeTps", 0) if isinstance(obj, dict) else 0
    if isinstance(tps, bool) or not isinstance(tps, int | float):
        raise FieldError("ConsumeStats", f"consumeTps is {tps!r}, not a number")
    return ConsumeStats(table, float(tps))


def encode_consumer_connection(obj: dict[str, Any]) -> bytes:
    """``ConsumerConnection.encode()`` of a dict with its fields (standard JSON: string keys)."""
    return _dumps(obj).encode()


def decode_consumer_connection(body: bytes) -> dict[str, Any]:
    obj = loads_fastjson(body)
    if not isinstance(obj, dict) or not isinstance(obj.get("connectionSet", []), list):
        raise FieldError("ConsumerConnection", "is not an object with a connectionSet list")
    return obj


def encode_subscription_groups(table: dict[str, dict[str, Any]], data_version: dict[str, int]) -> bytes:
    """``SubscriptionGroupManager.encode()`` (201's body): ``table`` maps a group to its
    ``SubscriptionGroupConfig`` as JSON (fields sorted, as fastjson writes them)."""
    return _dumps({"dataVersion": data_version, "subscriptionGroupTable": table}).encode()


def decode_subscription_groups(body: bytes) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """201's body: the table (group -> config object) and the data version; :class:`FieldError`
    when it is not that shape."""
    obj = loads_fastjson(body)
    table = obj.get("subscriptionGroupTable") if isinstance(obj, dict) else None
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise FieldError("SubscriptionGroupWrapper", "is not an object with a subscriptionGroupTable of objects")
    version = obj.get("dataVersion") or {}
    if not isinstance(version, dict):
        raise FieldError("dataVersion", f"is {version!r}, not an object")
    return {str(k): v for k, v in table.items()}, version


def decode_subscription_group(body: bytes) -> dict[str, Any]:
    """200's body, a ``SubscriptionGroupConfig`` object with a ``groupName`` string;
    :class:`FieldError` naming what is wrong (the values are checked by the broker)."""
    if not body:
        raise FieldError("body", "is empty, not a SubscriptionGroupConfig")
    obj = loads_fastjson(body)
    if not isinstance(obj, dict):
        raise FieldError("body", "is not a SubscriptionGroupConfig object")
    if not isinstance(obj.get("groupName"), str):
        raise FieldError("groupName", f"is {obj.get('groupName')!r}, not a string")
    return obj


def properties_text(values: dict[str, str]) -> str:
    """``MixAll.properties2String``: ``key=value\\n`` per entry (sorted here; Java's is hash order)."""
    return "".join(f"{k}={v}\n" for k, v in sorted(values.items()))


def parse_properties(text: str) -> dict[str, str]:
    """``MixAll.string2Properties`` (``Properties.load``); :class:`FieldError` if it fails."""
    try:
        return dict(javaproperties.loads(text))
    except (ValueError, TypeError) as exc:
        raise FieldError("body", f"is not Java properties text: {exc}") from None


__all__ = [
    "ConsumeStats",
    "OffsetWrapper",
    "QueueKey",
    "TopicOffset",
    "decode_consume_stats",
    "decode_consumer_connection",
    "decode_topic_stats",
    "encode_consume_stats",
    "encode_consumer_connection",
    "encode_queue_map",
    "encode_topic_stats",
    "parse_properties",
    "properties_text",
    "encode_subscription_groups",
    "decode_subscription_groups",
    "decode_subscription_group",
]
