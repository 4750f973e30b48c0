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
both forms. ``perm`` bits: 4 read, 2 write, 1 inherit (``PermName``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import FieldError

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
#: a topic both readable and writable (RocketMQ's default for a topic)
PERM_RW = PERM_READ | PERM_WRITE
MASTER_ID = 0

# fastjson's non-standard form: an object key that is a bare (possibly negative) integer
_BARE_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')


def loads_fastjson(body: bytes | str) -> Any:
    """JSON as Java's fastjson may write it: standard JSON, or with bare integer keys."""
    text = body.decode() if isinstance(body, (bytes, bytearray, memoryview)) else body
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(_BARE_KEY.sub(r'\1"\2"\3', text))


@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_RW
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "readQueueNums": self.read_queue_nums,
                "writeQueueNums": self.write_queue_nums, "perm": self.perm, "topicSynFlag": self.topic_sys_flag}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> QueueData:
        return QueueData(str(obj["brokerName"]), int(obj["readQueueNums"]), int(obj["writeQueueNums"]),
                         int(obj.get("perm", PERM_RW)), int(obj.get("topicSynFlag", obj.get("topicSysFlag", 0))))


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "brokerName": self.broker_name,
                "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())}}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> BrokerData:
        return BrokerData(str(obj.get("cluster", "")), str(obj["brokerName"]),
                          {int(k): str(v) for k, v in (obj.get("brokerAddrs") or {}).items()})


@dataclass(slots=True)
class TopicRouteData:
    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    order_topic_conf: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"orderTopicConf": self.order_topic_conf, "queueDatas": [q.to_json() for q in self.queue_datas],
                "brokerDatas": [b.to_json() for b in self.broker_datas], "filterServerTable": {}}

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
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError, RecursionError) as exc:
            raise FieldError("body", f"is not a topic route ({type(exc).__name__}: {exc})") from None
