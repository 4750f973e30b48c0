"""A put of a few messages as RocketMQ clients send them, encoded one record at a time with
``struct`` (the direct path of :meth:`rmqlog.access.wire.WireCalls.put_messages`): no Arrow call, so
a put of one message costs microseconds where the vectorized path (:mod:`rmqlog.log.encode.wire_put`,
:func:`rmqlog.log.encode.prepare.prepare_batch`) has a fixed cost of ~1 ms in Arrow calls
whatever the batch's size.

It encodes only what it can give byte for byte as the vectorized path would (a test pins the
two to the same records on random input): the *clean* message, which is what every client
sends: a valid topic, a queue id, a body within ``max_message_size``, the usual SYSFLAG bits
(``COMPRESSED``, ``MULTI_TAGS``, ``TRANSACTION_COMMIT``), a born time within the record's
range, a born host (``"ip:port"``, ``"[v6]:port"`` or its 8/20 bytes), and properties that
are ``name\\x01value\\x02`` repeated, ASCII, with non-empty names and values and no name the
rules route or refuse (``DELAY``, the timer's, ``REAL_TOPIC``/``REAL_QID`` outside a system
put, ``RMQLOG_*``). The rules applied here are those of the vectorized path: ``WAIT`` items
dropped, ``CLUSTER`` replaced by the put's ``cluster``, a ``UNIQ_KEY`` made for a message
without one, the idempotence marker on the last record. A put holding any message it cannot
encode is answered ``None`` as a whole, and the caller takes the vectorized path, which
routes it or raises the typed error naming the row and field.

Each record is returned as its bytes with QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP
zero (given under the append lock by :mod:`rmqlog.access.direct_append`) and what the
dispatch needs of it (its queue, tagsCode, UNIQ_KEY and KEYS for the index).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ...hashing import java_string_hash
from ...paths import topic_problem
from ..msgid import UniqKeyGenerator
from ..properties import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, STORE_PROPERTY_PREFIX
from ..record import (
    MAGIC_V1,
    MAX_TIMESTAMP_MS,
    NAME_VALUE_SEPARATOR,
    PROPERTIES_MAX_BYTES,
    PROPERTY_SEPARATOR,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    body_crc,
)
from .columns import BORN_MS_MIN
from .kept_properties import _SLOW_NAMES, PROPERTY_CLUSTER, PROPERTY_WAIT, SYSTEM_ALLOWED
from .wire_put import _KEPT_BITS, _host_bytes

#: the largest put the direct path takes (past it the vectorized path's fixed cost is paid
#: back by its per-row cost: measured crossover ~100 messages on this VM)
DIRECT_MAX_MESSAGES = 64
_INT32 = (-(1 << 31), (1 << 31) - 1)
_SLOW_SYSTEM = _SLOW_NAMES - SYSTEM_ALLOWED


class WireMessage(NamedTuple):
    """One message of :meth:`rmqlog.access.wire.WireCalls.put_messages`, as a client sends it (the
    columns of :meth:`rmqlog.access.wire.WireCalls.put_wire`, one row)."""

    topic: str
    queue_id: int
    body: bytes
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str | bytes | None = None  # None: the store's configured born host
    properties: str = ""
    reconsume_times: int = 0


@dataclass(slots=True)
class DirectRecord:
    """One encoded record (lock-given fields zero) and what its dispatch needs."""

    data: bytearray
    topic: str
    queue_id: int
    queue_key: str  # "<topic>/<queueId>": its entry in the append state's topicQueueTable
    tags_code: int
    uniq_key: str  # its UNIQ_KEY (the client's, or the one made here)
    keys: str | None  # its KEYS as stored (None: none)
    store_ts_at: int  # where its STORETIMESTAMP is (48 + the born host's width)


@functools.cache
def _header(born_v6: bool, store_v6: bool) -> struct.Struct:
    """The record header up to BODYLENGTH (:func:`rmqlog.log.record.header_dtype`), big-endian."""
    return struct.Struct(f">iiiiiqqiq{20 if born_v6 else 8}sq{20 if store_v6 else 8}siqi")


#: offsets of QUEUEOFFSET and PHYSICALOFFSET in every layout (both before the hosts);
#: STORETIMESTAMP follows BORNHOST: 48 + its width (:attr:`DirectRecord.store_ts_at`)
QUEUE_OFFSET_AT, PHYSICAL_OFFSET_AT = 20, 28


@functools.lru_cache(maxsize=4096)
def _topic_ok(topic: str) -> bool:
    return topic_problem(topic) is None


def encode_direct(
    messages: Sequence[WireMessage],
    *,
    cluster: str | None,
    system: bool,
    store_host: bytes,
    default_born_host: bytes,
    uniq: UniqKeyGenerator,
    max_message_size: int,
    max_record_size: int,
    not_allowed: frozenset[str],
    marker: tuple[str, str] | None = None,
) -> list[DirectRecord] | None:
    """The records of ``messages`` (see the module docstring), or ``None`` when one of them is
    not a clean message (the caller takes the vectorized path)."""
    if not messages or len(messages) > DIRECT_MAX_MESSAGES:
        return None
    slow = _SLOW_SYSTEM if system else _SLOW_NAMES
    suffix = f"{PROPERTY_CLUSTER}{NAME_VALUE_SEPARATOR}{cluster}{PROPERTY_SEPARATOR}" if cluster else ""
    store_v6 = len(store_host) == 20
    out: list[DirectRecord] = []
    last = len(messages) - 1
    first_id: int | None = None
    for i, m in enumerate(messages):
        if type(m) is not WireMessage:
            if not isinstance(m, tuple) or not 3 <= len(m) <= len(WireMessage._fields):
                return None  # (the vectorized path names it)
            m = WireMessage(*m)
        topic, queue_id, body = m.topic, m.queue_id, m.body
        if type(topic) is not str or not _topic_ok(topic) or topic in not_allowed:
            return None
        if type(queue_id) is not int or not 0 <= queue_id <= _INT32[1]:
            return None
        if type(body) is not bytes or len(body) > max_message_size:
            return None
        flag, sys_flag, born, reconsume = m.flag, m.sys_flag, m.born_timestamp, m.reconsume_times
        if (
            type(flag) is not int
            or not _INT32[0] <= flag <= _INT32[1]
            or type(sys_flag) is not int
            or sys_flag & ~_KEPT_BITS
            or type(born) is not int
            or not BORN_MS_MIN <= born <= MAX_TIMESTAMP_MS
            or type(reconsume) is not int
            or not 0 <= reconsume <= _INT32[1]
        ):
            return None
        host = m.born_host
        if host is None:
            born_host = default_born_host
        elif type(host) is str:
            born_host = _host_bytes(host)
            if not born_host:
                return None
        elif type(host) is bytes and len(host) in (8, 20):
            born_host = host
        else:
            return None
        if out and len(born_host) + 48 != out[0].store_ts_at:
            return None  # IPv4 and IPv6 born hosts in one put: the vectorized path refuses it, named
        props = m.properties
        if type(props) is not str:
            return None
        tags = keys = uniq_key = None
        kept: list[str] = []
        if props:
            if not props.isascii() or props[-1] != PROPERTY_SEPARATOR:
                return None
            for item in props[:-1].split(PROPERTY_SEPARATOR):
                name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
                if (
                    not sep
                    or not name
                    or not value
                    or NAME_VALUE_SEPARATOR in value
                    or name in slow
                    or name.startswith(STORE_PROPERTY_PREFIX)
                ):
                    return None
                if name == PROPERTY_WAIT or (cluster and name == PROPERTY_CLUSTER):
                    continue
                kept.append(item)
                if name == PROPERTY_TAGS:
                    tags = value  # (a name given twice: the last, as RocketMQ's map reads it)
                elif name == PROPERTY_KEYS:
                    keys = value
                elif name == PROPERTY_UNIQ_KEY:
                    uniq_key = value
        text = PROPERTY_SEPARATOR.join(kept) + PROPERTY_SEPARATOR if kept else ""
        text += suffix
        if uniq_key is None:
            if first_id is None:  # one sequence value per message, as the vectorized path takes them
                first_id = uniq.reserve(len(messages))
            uniq_key = uniq.id_at(first_id + i)
            text += f"{PROPERTY_UNIQ_KEY}{NAME_VALUE_SEPARATOR}{uniq_key}{PROPERTY_SEPARATOR}"
        if i == last and marker is not None:
            text += f"{marker[0]}{NAME_VALUE_SEPARATOR}{marker[1]}{PROPERTY_SEPARATOR}"
        raw_props = text.encode()
        if len(raw_props) > PROPERTIES_MAX_BYTES:
            return None
        raw_topic = topic.encode()
        header = _header(len(born_host) == 20, store_v6)
        size = header.size + len(body) + 1 + len(raw_topic) + 2 + len(raw_props)
        if size > max_record_size:
            return None
        flags = (
            sys_flag | (SYSFLAG_BORNHOST_V6 if len(born_host) == 20 else 0) | (SYSFLAG_STOREHOST_V6 if store_v6 else 0)
        )
        data = bytearray(size)
        header.pack_into(
            data,
            0,
            size,
            MAGIC_V1,
            body_crc(body),
            queue_id,
            flag,
            0,
            0,
            flags,
            born,
            born_host,
            0,
            store_host,
            reconsume,
            0,
            len(body),
        )
        at = header.size
        data[at : at + len(body)] = body
        at += len(body)
        data[at] = len(raw_topic)
        data[at + 1 : at + 1 + len(raw_topic)] = raw_topic
        at += 1 + len(raw_topic)
        data[at : at + 2] = len(raw_props).to_bytes(2, "big")
        data[at + 2 :] = raw_props
        out.append(
            DirectRecord(
                data,
                topic,
                queue_id,
                f"{topic}/{queue_id}",
                java_string_hash(tags) if tags is not None else 0,
                uniq_key,
                keys,
                48 + len(born_host),
            )
        )
    return out
