"""The name server's route of a topic (``TopicRouteData``) and cluster info
(``ClusterInfo``), as JSON bodies.

Route (GET_ROUTEINFO_BY_TOPIC's body, RocketMQ 4.9.8)::

    {"orderTopicConf": null,
     "queueDatas": [{"brokerName": "b", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSynFlag": 0}],
     "brokerDatas": [{"cluster": "c", "brokerName": "b", "brokerAddrs": {"0": "127.0.0.1:10911"}}],
     "filterServerTable": {}}

``brokerAddrs`` maps a broker id (0 the master, 1.. the slaves) to the address clients dial.
Java's fastjson writes those keys unquoted (``{0:"..."}``) for old clients; we always write
standard JSON, which ali-ons and the C++ client read (the wire notes, section 2.3), and read
both forms (:func:`loads_fastjson`, the network side's one reader of fastjson's JSON, also
takes the objects as keys of the admin bodies). ``perm`` bits: 4 read, 2 write, 1 inherit (``PermName``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import FieldError
from .json_values import check_depth, check_text

# (the perm bits re-exported: spark_rmq and users import them from here)
from .names import PERM_INHERIT as PERM_INHERIT
from .names import PERM_READ as PERM_READ
from .names import PERM_RW
from .names import PERM_WRITE as PERM_WRITE

MASTER_ID = 0

_WS = re.compile(r"[ \t\n\r]*")
_BARE_INT = re.compile(r"-?\d+")
_DECODER = json.JSONDecoder()


# ------------------------------------------------------------------------- the lenient reader


class FastjsonPairs(list[tuple[Any, Any]]):
    """An object whose keys were not all strings (fastjson's ``Map<MessageQueue, V>``): its
    (key, value) pairs, in order."""


def loads_fastjson(body: bytes | str) -> Any:
    """JSON as Java's fastjson may write it, the one reader of it on the network side: standard
    JSON, bare (possibly negative) integer keys (``{0:"..."}``: read as the strings ``"0"``), or
    objects as keys (``{{"topic":...}:{...}}``: :mod:`rmqnet.remoting.admin_bodies`). An object
    with a non-string key is returned as a list of (key, value) pairs (:class:`FastjsonPairs`),
    every other object as a dict. Standard JSON takes ``json.loads`` (C, the common case: large
    topic and offset tables); only what it refuses is walked here, strings never rewritten.
    :class:`FieldError` (field ``body``) if it is not such JSON, nor UTF-8, or is nested deeper
    or holds a string that is not text (:mod:`rmqnet.remoting.json_values`'s one check)."""
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else bytes(body)
    check_depth(raw, "fastjson")  # (both readers below recurse: nothing deep reaches them)
    try:
        text = raw.decode() if not isinstance(body, str) else body
    except UnicodeDecodeError as exc:
        raise FieldError("body", f"is not JSON as fastjson writes it: {exc}") from None
    try:
        value = json.loads(text)
    except ValueError:  # not standard JSON: fastjson's keys, or not JSON at all (said below)
        value = _lenient(text)
    check_text(raw, value, "fastjson")
    return value


def _lenient(text: str) -> Any:
    """fastjson's forms (bare integer keys, objects as keys), read here; :class:`FieldError`."""
    try:
        value, end = _value(text, _skip(text, 0))
    except (ValueError, IndexError) as exc:
        raise FieldError("body", f"is not JSON as fastjson writes it: {exc}") from None
    if _skip(text, end) != len(text):
        raise FieldError("body", f"has data after its JSON value (at {end})")
    return value


def _skip(text: str, i: int) -> int:
    m = _WS.match(text, i)
    return m.end() if m else i


def _value(text: str, i: int) -> tuple[Any, int]:
    c = text[i]
    if c == "{":
        return _object(text, i + 1)
    if c == "[":
        out: list[Any] = []
        i = _skip(text, i + 1)
        if text[i] == "]":
            return out, i + 1
        while True:
            v, i = _value(text, _skip(text, i))
            out.append(v)
            i = _skip(text, i)
            if text[i] == "]":
                return out, i + 1
            if text[i] != ",":
                raise ValueError(f"expected , or ] at {i}")
            i += 1
    return _DECODER.raw_decode(text, i)


def _object(text: str, i: int) -> tuple[Any, int]:
    pairs: list[tuple[Any, Any]] = []
    i = _skip(text, i)
    if text[i] == "}":
        return {}, i + 1
    while True:
        i = _skip(text, i)
        m = _BARE_INT.match(text, i)
        if text[i] in '{["':
            key, i = _value(text, i)
        elif m:
            key, i = m.group(), m.end()
        else:
            raise ValueError(f"expected an object key at {i}")
        i = _skip(text, i)
        if text[i] != ":":
            raise ValueError(f"expected : at {i}")
        value, i = _value(text, _skip(text, i + 1))
        pairs.append((key, value))
        i = _skip(text, i)
        if text[i] == "}":
            i += 1
            break
        if text[i] != ",":
            raise ValueError(f"expected , or }} at {i}")
        i += 1
    if all(isinstance(k, str) for k, _ in pairs):
        return dict(pairs), i
    return FastjsonPairs(pairs), i


# ------------------------------------------------------------------------------ the route


@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_RW
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicSynFlag": self.topic_sys_flag,
        }

    @staticmethod
    def from_json(obj: dict[str, Any]) -> QueueData:
        return QueueData(
            str(obj["brokerName"]),
            int(obj["readQueueNums"]),
            int(obj["writeQueueNums"]),
            int(obj.get("perm", PERM_RW)),
            int(obj.get("topicSynFlag", obj.get("topicSysFlag", 0))),
        )


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "brokerName": self.broker_name,
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
        }

    @staticmethod
    def from_json(obj: dict[str, Any]) -> BrokerData:
        return BrokerData(
            str(obj.get("cluster", "")),
            str(obj["brokerName"]),
            {int(k): str(v) for k, v in (obj.get("brokerAddrs") or {}).items()},
        )


@dataclass(slots=True)
class TopicRouteData:
    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    order_topic_conf: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "orderTopicConf": self.order_topic_conf,
            "queueDatas": [q.to_json() for q in self.queue_datas],
            "brokerDatas": [b.to_json() for b in self.broker_datas],
            "filterServerTable": {},
        }

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @staticmethod
    def decode(body: bytes) -> TopicRouteData:
        """A route body; :class:`FieldError` (field ``body``) if it is not one."""
        try:
            obj = loads_fastjson(body)
            return TopicRouteData(
                [QueueData.from_json(q) for q in obj.get("queueDatas") or []],
                [BrokerData.from_json(b) for b in obj.get("brokerDatas") or []],
                obj.get("orderTopicConf"),
            )
        except (FieldError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise FieldError("body", f"is not a topic route ({type(exc).__name__}: {exc})") from None
