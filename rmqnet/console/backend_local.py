"""The console's answers from a store opened read-only (``rmqlog console --path ROOT``,
:class:`LocalBackend`): the same pages as over the wire, from the store's own calls (its
topics and queues, ``consumerOffset.json`` and ``subscriptionGroup.json``, reads of a window,
the index by key and client msgId, offset msgIds, store time). Nothing is written; no admin
action is served (the base class refuses them). The store is one "broker", named ``local``;
it has no live consumers and no rates, so the cluster page shows its size and disk use only.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from rmqlog import (
    MESSAGE_SCHEMA,
    IndexDisabledError,
    InvalidArgumentError,
    MessageStore,
    StoreError,
    is_uniq_key,
)
from rmqlog.paths import StorePaths
from rmqlog.safe_open import open_file

from ..remoting.errors import FieldError
from ..remoting.route import loads_fastjson
from .backend import BadRequest, ConsoleBackend, NotFound, Unavailable, message_dicts

T = TypeVar("T")
NAME = "local"
#: the most bytes of a config table the console reads
MAX_TABLE_BYTES = 64 << 20
#: the consumer group named by the console's reads (reading commits nothing)
CONSOLE_GROUP = "rmqlog_console"


@contextmanager
def _answers(what: str) -> Iterator[None]:
    try:
        yield
    except IndexDisabledError as exc:
        raise BadRequest(f"{what}: {exc}") from None
    except InvalidArgumentError as exc:  # (InvalidTopicError, InvalidGroupError are ones)
        raise BadRequest(f"{what}: {exc}") from None
    except (StoreError, OSError) as exc:
        raise Unavailable(f"{what}: the store cannot be read: {type(exc).__name__}: {exc}") from None


class LocalBackend(ConsoleBackend):
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.source = f"store {self.root}"
        self.store = MessageStore.open(self.root, read_only=True)
        self._lock = threading.Lock()  # one read at a time: the pages' calls come from worker threads

    def close(self) -> None:
        self.store.close()

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        with self._lock, _answers(what):
            return fn(*args, **kw)

    def _configs(self) -> dict[str, Any]:
        return self._call("the topics", self.store.topics)

    def _queues_of(self, topic: str) -> int:
        tc = self._configs().get(topic)
        if tc is None:
            raise NotFound(f"no topic {topic!r} in the store at {self.root}")
        return max(tc.read_queue_nums, tc.write_queue_nums)

    def _table(self, path: Path, name: str) -> dict[str, Any]:
        """The object ``name`` of a RocketMQ config file as it is now ({} when there is none):
        read through the store's no-link open, never locked (the store's merges take the
        config lock, which a read-only open may not; writers replace the file whole)."""
        try:
            fd = open_file(path, os.O_RDONLY)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise Unavailable(f"{path.name} cannot be read: {exc}") from None
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_TABLE_BYTES + 1)
        if len(data) > MAX_TABLE_BYTES:
            raise Unavailable(f"{path.name} is over {MAX_TABLE_BYTES} bytes")
        try:
            obj = loads_fastjson(data) if data.strip() else {}
        except (FieldError, ValueError) as exc:
            raise Unavailable(f"{path.name} is not RocketMQ's JSON: {exc}") from None
        table = obj.get(name, {}) if isinstance(obj, dict) else None
        if not isinstance(table, dict):
            raise Unavailable(f"{path.name} has no {name} object")
        return {str(k): v for k, v in table.items()}

    def _offsets(self) -> dict[str, dict[int, int]]:
        """``consumerOffset.json`` as it is now: ``"topic@group"`` -> queue -> offset."""
        table = self._table(StorePaths(self.root).consumer_offset_json, "offsetTable")
        try:
            return {k: {int(q): int(o) for q, o in v.items()} for k, v in table.items() if isinstance(v, dict)}
        except (TypeError, ValueError) as exc:
            raise Unavailable(f"consumerOffset.json holds a queue or offset that is not an integer: {exc}") from None

    def _group_configs(self) -> dict[str, Any]:
        return self._table(StorePaths(self.root).subscription_group_json, "subscriptionGroupTable")

    def cluster(self) -> dict[str, Any]:
        try:
            usage = shutil.disk_usage(self.root)
            ratio: float | None = round(usage.used / usage.total, 4) if usage.total else None
        except OSError:
            ratio = None
        tail = self._call("the store", self.store.published_tail)
        row = {
            "cluster": "-",
            "brokerName": NAME,
            "brokerId": 0,
            "address": str(self.root),
            "role": "STORE (read-only)",
            "version": None,
            "diskUsedRatio": ratio,
            "inTps": 0.0,
            "outTps": 0.0,
            "commitLogMaxOffset": tail,
            "haLagBytes": None,
        }
        return {
            "namesrv": None,
            "brokers": [row],
            "totals": {"brokers": 1, "unreachable": 0, "inTps": 0.0, "outTps": 0.0},
        }

    def topic_names(self) -> list[str]:
        return sorted(self._configs())

    def topic(self, topic: str) -> dict[str, Any]:
        tc = self._configs().get(topic)
        if tc is None:
            raise NotFound(f"no topic {topic!r} in the store at {self.root}")
        queues = []
        for qid in range(max(tc.read_queue_nums, tc.write_queue_nums)):
            lo = self._call(f"{topic}/{qid}", self.store.min_offset, topic, qid)
            hi = self._call(f"{topic}/{qid}", self.store.max_offset, topic, qid)
            queues.append(
                {"brokerName": NAME, "queueId": qid, "min": lo, "max": hi, "messages": max(0, hi - lo), "lastUpdate": 0}
            )
        route = {
            "queueDatas": [
                {
                    "brokerName": NAME,
                    "readQueueNums": tc.read_queue_nums,
                    "writeQueueNums": tc.write_queue_nums,
                    "perm": tc.perm,
                }
            ],
            "brokerDatas": [{"cluster": "-", "brokerName": NAME, "brokerAddrs": {"0": str(self.root)}}],
        }
        return {"topic": topic, "queues": queues, "messages": sum(q["messages"] for q in queues), "route": route}

    def committed_offsets(self, topic: str) -> dict[str, dict[tuple[str, int], int]]:
        out = {}
        for key, committed in sorted(self._offsets().items()):
            t, _, group = key.partition("@")
            if t == topic:
                out[group] = {(NAME, q): o for q, o in committed.items()}
        return out

    def group_names(self) -> list[str]:
        names = {key.partition("@")[2] for key in self._offsets() if "@" in key}
        return sorted(names | set(self._group_configs()))

    def group(self, group: str) -> dict[str, Any]:
        rows = []
        for key, queues in sorted(self._offsets().items()):
            topic, _, g = key.partition("@")
            if g != group:
                continue
            for qid, committed in sorted(queues.items()):
                hi = self._call(f"{topic}/{qid}", self.store.max_offset, topic, qid)
                rows.append(
                    {
                        "topic": topic,
                        "brokerName": NAME,
                        "queueId": qid,
                        "committed": committed,
                        "max": hi,
                        "lag": max(0, hi - committed),
                        "lastTimestamp": 0,
                    }
                )
        config = self._group_configs().get(group)
        if config is None and not rows:
            raise NotFound(f"no consumer group {group!r} in the store at {self.root} (no config, no offsets)")
        shown = config if isinstance(config, dict) else {}
        return {
            "group": group,
            "offsets": rows,
            "totalLag": sum(r["lag"] for r in rows),
            "consumeTps": 0.0,
            "members": [],
            "subscriptions": [],
            "config": shown,
        }

    def browse(self, topic: str, broker: str | None, queue: int, offset: int | None, count: int) -> dict[str, Any]:
        if broker not in (None, NAME):
            raise BadRequest(f"a store has one broker, {NAME!r}, not {broker!r}")
        if queue >= self._queues_of(topic):
            raise BadRequest(f"queue {queue} of topic {topic!r}: the topic has {self._queues_of(topic)} queues")
        where = f"{topic}/{queue}"
        start = offset if offset is not None else self._call(where, self.store.min_offset, topic, queue)
        res = self._call(where, self.store.get_messages, CONSOLE_GROUP, topic, queue, start, count)
        return {
            "messages": message_dicts(res.messages, NAME),
            "brokerName": NAME,
            "queueId": queue,
            "offset": start,
            "status": str(getattr(res.status, "name", res.status)),
            "nextOffset": res.next_begin_offset,
            "minOffset": res.min_offset,
            "maxOffset": res.max_offset,
        }

    def by_key(self, topic: str, key: str, count: int) -> list[dict[str, Any]]:
        self._queues_of(topic)
        return message_dicts(self._call(f"key {key!r} in {topic!r}", self.store.query_by_key, topic, key, count), NAME)

    def by_id(self, topic: str | None, msg_id: str) -> list[dict[str, Any]]:
        if not is_uniq_key(msg_id) and not all(c in "0123456789abcdefABCDEF" for c in msg_id):
            raise BadRequest(f"not a message id: {msg_id!r} (an offset msgId or a client msgId: hex digits)")
        if topic is not None:
            self._queues_of(topic)
        row = self._call(f"msgId {msg_id}", self.store.message_by_id, msg_id)
        if row is None or (topic is not None and row.get("topic") != topic):
            raise NotFound(f"no message with msgId {msg_id} in the store" + (f"'s topic {topic!r}" if topic else ""))
        return message_dicts(pa.Table.from_pylist([row], schema=MESSAGE_SCHEMA), NAME)

    def time_queues(self, topic: str) -> list[tuple[str, int]]:
        return [(NAME, q) for q in range(self._queues_of(topic))]

    def offset_at(self, topic: str, broker: str, queue: int, ms: int) -> int:
        return self._call(f"{topic}/{queue}", self.store.offset_for_timestamp, topic, queue, ms)

    def read(self, topic: str, broker: str, queue: int, offset: int, count: int) -> list[dict[str, Any]]:
        res = self._call(f"{topic}/{queue}", self.store.get_messages, CONSOLE_GROUP, topic, queue, offset, count)
        return message_dicts(res.messages, NAME)
