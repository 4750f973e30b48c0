"""Broker registration on the name server, sans-I/O: REGISTER_BROKER (103) and
UNREGISTER_BROKER (104) headers and bodies, and the bodies of cluster info (106) and the
topic list (206), as RocketMQ 4.9.8 writes them.

REGISTER_BROKER request extFields (``RegisterBrokerRequestHeader``; all required but the
last two)::

    brokerName, brokerAddr, clusterName, haServerAddr, brokerId (long),
    compressed (boolean, default false), bodyCrc32 (int, default 0)

``bodyCrc32`` is ``CRC32(body) & 0x7FFFFFFF`` (``UtilAll.crc32``); 0 means "not checked". A
mismatch is answered ``SYSTEM_ERROR`` "crc32 not match", as Java does.

Its body, ``RegisterBrokerBody``, uncompressed (fastjson, keys sorted)::

    {"filterServerList": [],
     "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": 0, "timestamp": 1700000000000},
        "topicConfigTable": {"T": {"order": false, "perm": 6, "readQueueNums": 4,
                                   "topicFilterType": "SINGLE_TAG", "topicName": "T",
                                   "topicSysFlag": 0, "writeQueueNums": 4}}}}

and with ``compressed=true`` (``RegisterBrokerBody.encode(true)``), one zlib stream
(``DeflaterOutputStream``) of, all integers big-endian int32::

    len, DataVersion JSON
    n, n x (len, TopicConfig.encode(): "name readQueueNums writeQueueNums perm filterType")
    len, filterServerList JSON

The compressed form carries neither ``topicSysFlag`` nor ``order`` (Java drops them too).
The response extFields are ``haServerAddr`` and ``masterAddr`` (a slave learns its master
there); its body is the name server's ``ORDER_TOPIC_CONFIG`` KV table, empty here.

UNREGISTER_BROKER extFields: ``brokerName, brokerAddr, clusterName, brokerId``.

Cluster info (106) body: ``{"brokerAddrTable": {brokerName: BrokerData}, "clusterAddrTable":
{cluster: [brokerName]}}``; topic list (206): ``{"topicList": [topic]}``.

Every decoder here raises :class:`~rmqnet.remoting.errors.FieldError` naming what was wrong
(the name server answers it ``SYSTEM_ERROR`` with that remark); a compressed body is inflated
to at most :data:`MAX_INFLATED` bytes, so a small hostile body cannot cost a large buffer.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from .errors import FieldError
from .header_table import BOOL, INT, LONG, STR, Header, header, java
from .json_values import loads_body
from .names import PERM_RW
from .route import BrokerData, loads_fastjson

#: a compressed registration body inflates to at most this many bytes (a broker with 100,000
#: topics needs ~6 MiB); beyond it the body is refused rather than buffered
MAX_INFLATED = 64 * 1024 * 1024
#: ``TopicFilterType`` values
FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
_I32 = struct.Struct(">i")
_DIGITS = re.compile(r"\s*-?\d{1,20}\s*")
_JAVA_INT = (-(1 << 31), (1 << 31) - 1)
_JAVA_LONG = (-(1 << 63), (1 << 63) - 1)


def body_crc32(body: bytes) -> int:
    """``UtilAll.crc32``: the CRC-32 of ``body`` with the sign bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def _loads(body: bytes, what: str) -> Any:
    return loads_body(body, what)


def _java_int(obj: dict[str, Any], key: str, default: int, where: str, bounds: tuple[int, int] = _JAVA_INT) -> int:
    v = obj.get(key, default)
    if v is None:
        return default
    if isinstance(v, str) and _DIGITS.fullmatch(v):  # fastjson reads "4" for an int as well
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not bounds[0] <= v <= bounds[1]:
        raise FieldError("body", f"{where}: {key} is {v!r}, not a Java {'int' if bounds == _JAVA_INT else 'long'}")
    return v


@dataclass(frozen=True, slots=True)
class DataVersion:
    """``DataVersion``: a broker's topic configs change when this does (the name server
    re-reads them only then)."""

    timestamp: int = 0
    counter: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @staticmethod
    def from_json(obj: Any) -> DataVersion:
        if obj is None:
            return DataVersion()
        if not isinstance(obj, dict):
            raise FieldError("body", f"dataVersion is a {type(obj).__name__}, not an object")
        return DataVersion(
            _java_int(obj, "timestamp", 0, "dataVersion", _JAVA_LONG),
            _java_int(obj, "counter", 0, "dataVersion", _JAVA_LONG),
        )


@dataclass(frozen=True, slots=True)
class TopicConfigData:
    """One entry of a broker's ``topicConfigTable`` (``TopicConfig``; Java's defaults)."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_RW
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    def to_line(self) -> str:
        """``TopicConfig.encode()``: the compressed form's entry."""
        return f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} {self.perm} {self.topic_filter_type}"

    @staticmethod
    def from_json(key: str, obj: Any) -> TopicConfigData:
        if not isinstance(obj, dict):
            raise FieldError("body", f"topic config {key[:80]!r} is a {type(obj).__name__}, not an object")
        name = obj.get("topicName", key)
        where = f"topic config {key[:80]!r}"
        ftype = obj.get("topicFilterType", "SINGLE_TAG")
        order = obj.get("order", False)
        if ftype not in FILTER_TYPES:
            raise FieldError("body", f"{where}: topicFilterType is {ftype!r}, not one of {', '.join(FILTER_TYPES)}")
        if not isinstance(order, bool):
            raise FieldError("body", f"{where}: order is {order!r}, not a boolean")
        return TopicConfigData(
            _topic_name(name, where),
            _java_int(obj, "readQueueNums", 16, where),
            _java_int(obj, "writeQueueNums", 16, where),
            _java_int(obj, "perm", PERM_RW, where),
            ftype,
            _java_int(obj, "topicSysFlag", 0, where),
            order,
        )

    @staticmethod
    def from_line(line: str) -> TopicConfigData:
        """``TopicConfig.decode``: five space-separated fields, else refused (Java's decode
        returns false and the registration then fails on the missing name)."""
        parts = line.split(" ")
        if len(parts) != 5:
            raise FieldError("body", f"compressed topic config {line[:80]!r} has {len(parts)} fields, not 5")
        name, r, w, perm, ftype = parts
        if ftype not in FILTER_TYPES:
            raise FieldError("body", f"compressed topic config {line[:80]!r}: filter type {ftype[:20]!r} unknown")
        try:
            nums = [int(r), int(w), int(perm)]
        except ValueError:
            raise FieldError(
                "body", f"compressed topic config {line[:80]!r}: a queue count or perm is not an int"
            ) from None
        if not all(_JAVA_INT[0] <= n <= _JAVA_INT[1] for n in nums):
            raise FieldError("body", f"compressed topic config {line[:80]!r}: a number is outside a Java int")
        return TopicConfigData(_topic_name(name, "compressed topic config"), nums[0], nums[1], nums[2], ftype)


def _topic_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not name:
        raise FieldError("body", f"{where}: topicName is {name!r}, not a non-empty string")
    return name


@dataclass(slots=True)
class RegisterBrokerBody:
    """``RegisterBrokerBody``: a broker's topics, their data version, its filter servers."""

    topics: dict[str, TopicConfigData] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)
    filter_server_list: list[str] = field(default_factory=list)

    def encode(self, compressed: bool = False) -> bytes:
        if not compressed:
            return _dumps(
                {
                    "filterServerList": self.filter_server_list,
                    "topicConfigSerializeWrapper": {
                        "dataVersion": self.data_version.to_json(),
                        "topicConfigTable": {k: t.to_json() for k, t in self.topics.items()},
                    },
                }
            )
        parts = [_framed(_dumps(self.data_version.to_json())), _I32.pack(len(self.topics))]
        parts += [_framed(t.to_line().encode()) for t in self.topics.values()]
        parts.append(_framed(_dumps(self.filter_server_list)))
        return zlib.compress(b"".join(parts), 9)  # Deflater.BEST_COMPRESSION, zlib wrapper

    @staticmethod
    def decode(body: bytes, compressed: bool) -> RegisterBrokerBody:
        """The body of a REGISTER_BROKER; an empty body is no topics with version (0, 0), as
        Java reads a request without one."""
        if not body:
            return RegisterBrokerBody()
        if compressed:
            return _decode_compressed(body)
        obj = _loads(body, "a RegisterBrokerBody")
        if not isinstance(obj, dict):
            raise FieldError("body", f"is a JSON {type(obj).__name__}, not a RegisterBrokerBody object")
        wrapper = obj.get("topicConfigSerializeWrapper")
        wrapper = {} if wrapper is None else wrapper
        if not isinstance(wrapper, dict):
            raise FieldError("body", "topicConfigSerializeWrapper is not an object")
        table = wrapper.get("topicConfigTable")
        table = {} if table is None else table
        if not isinstance(table, dict):
            raise FieldError("body", "topicConfigTable is not an object")
        topics = {}
        for key, value in table.items():
            t = TopicConfigData.from_json(key, value)
            topics[t.topic_name] = t  # Java keys the name server's table by the entry's topicName
        return RegisterBrokerBody(
            topics, DataVersion.from_json(wrapper.get("dataVersion")), _string_list(obj.get("filterServerList"))
        )


def _string_list(v: Any) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise FieldError("body", f"filterServerList is {str(v)[:80]}, not a list of strings")
    return list(v)


def _framed(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


def _decode_compressed(body: bytes) -> RegisterBrokerBody:
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, MAX_INFLATED)
    except zlib.error as exc:
        raise FieldError("body", f"is not a zlib stream ({exc})") from None
    if inflater.unconsumed_tail:
        raise FieldError("body", f"inflates to more than {MAX_INFLATED} bytes")
    pos = 0

    def chunk(what: str) -> bytes:
        nonlocal pos
        if pos + 4 > len(data):
            raise FieldError("body", f"compressed body ends before the length of {what} (at byte {pos} of {len(data)})")
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise FieldError(
                "body", f"compressed body: {what} of {n} bytes at byte {pos} runs past its {len(data)} bytes"
            )
        out = data[pos : pos + n]
        pos += n
        return out

    version = DataVersion.from_json(_loads(chunk("the data version"), "a DataVersion"))
    if pos + 4 > len(data):
        raise FieldError("body", "compressed body ends before the number of topic configs")
    (count,) = _I32.unpack_from(data, pos)
    pos += 4
    if count < 0 or count > (len(data) - pos) // 4:
        raise FieldError(
            "body", f"compressed body: {count} topic configs cannot fit in its {len(data) - pos} bytes left"
        )
    topics = {}
    for i in range(count):
        raw = chunk(f"topic config {i}")
        try:
            t = TopicConfigData.from_line(raw.decode())
        except UnicodeDecodeError:
            raise FieldError("body", f"compressed body: topic config {i} is not UTF-8") from None
        topics[t.topic_name] = t
    filters = _string_list(_loads(chunk("the filter server list"), "a filter server list"))
    if pos != len(data):
        raise FieldError("body", f"compressed body has {len(data) - pos} bytes after the filter server list")
    return RegisterBrokerBody(topics, version, filters)


@header
@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerHeader(Header):
    """``RegisterBrokerRequestHeader``."""

    broker_name: str = java("brokerName", STR)
    broker_addr: str = java("brokerAddr", STR)
    cluster_name: str = java("clusterName", STR)
    ha_server_addr: str = java("haServerAddr", STR)
    broker_id: int = java("brokerId", LONG)
    compressed: bool = java("compressed", BOOL, False)
    body_crc32: int = java("bodyCrc32", INT, 0)


@header
@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerHeader(Header):
    """``UnRegisterBrokerRequestHeader``."""

    broker_name: str = java("brokerName", STR)
    broker_addr: str = java("brokerAddr", STR)
    cluster_name: str = java("clusterName", STR)
    broker_id: int = java("brokerId", LONG)


@header
@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerResult(Header):
    """``RegisterBrokerResponseHeader``: for a slave, its master's address and HA address
    (empty for a master, or while the master is not registered: absent and empty alike)."""

    ha_server_addr: str | None = java("haServerAddr", STR, None)
    master_addr: str | None = java("masterAddr", STR, None)

    def __post_init__(self) -> None:
        # an empty address is none (the name server may send "" for a master)
        if not self.ha_server_addr:
            object.__setattr__(self, "ha_server_addr", None)
        if not self.master_addr:
            object.__setattr__(self, "master_addr", None)


@dataclass(slots=True)
class ClusterInfo:
    """``ClusterInfo``: brokers by name, and broker names by cluster."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)

    def encode(self) -> bytes:
        return _dumps(
            {
                "brokerAddrTable": {k: b.to_json() for k, b in self.broker_addr_table.items()},
                "clusterAddrTable": {k: sorted(v) for k, v in self.cluster_addr_table.items()},
            }
        )

    @staticmethod
    def decode(body: bytes) -> ClusterInfo:
        try:  # fastjson writes brokerAddrs' long keys bare: loads_fastjson reads both
            obj = loads_fastjson(body)
            return ClusterInfo(
                {str(k): BrokerData.from_json(v) for k, v in (obj.get("brokerAddrTable") or {}).items()},
                {str(k): [str(n) for n in v] for k, v in (obj.get("clusterAddrTable") or {}).items()},
            )
        except (FieldError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise FieldError("body", f"is not a cluster info ({type(exc).__name__}: {exc})") from None


def encode_topic_list(topics: list[str]) -> bytes:
    """``TopicList`` (brokerAddr is null and so left out, as fastjson does)."""
    return _dumps({"topicList": topics})


def decode_topic_list(body: bytes) -> list[str]:
    obj = _loads(body, "a TopicList")
    topics = obj.get("topicList") if isinstance(obj, dict) else None
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise FieldError("body", "is not a TopicList (no list of strings under topicList)")
    return topics
