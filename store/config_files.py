"""RocketMQ's JSON config files under ``<root>/config/``: ``topics.json``,
``consumerOffset.json`` and ``subscriptionGroup.json``, each a table kept in memory and merged
with the file under the store's ``config.lock`` (:mod:`rmqlog.config_tables`: the one rule for
processes that share a store).

- ``topics.json``: ``{"dataVersion":{"counter":N,"timestamp":ms},"topicConfigTable":{"T":
  {"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T",
  "topicSysFlag":0,"writeQueueNums":4}}}`` (perm bits: read 4, write 2, inherit 1).
- ``consumerOffset.json``: ``{"offsetTable":{"<topic>@<group>":{0:250,1:250}}}`` (RocketMQ's
  fastjson writes the queue ids bare; we read both forms and write them quoted).
- ``subscriptionGroup.json``: ``{"dataVersion":{...},"subscriptionGroupTable":{"G":
  {"groupName":"G","consumeEnable":true,...}}}`` (RocketMQ's ``SubscriptionGroupConfig``; only
  a broker keeps one).

How they are read and written (``.bak``, atomic replacement, unreadable files) is
:mod:`rmqlog.config_json`. Names read from these files are never trusted: a ``topics.json``
entry whose key is not a valid topic name (or whose ``topicName`` differs from its key), a
``consumerOffset.json`` key that is not ``<valid topic>@<valid group>``, a
``subscriptionGroup.json`` key that is not a valid group (or whose ``groupName`` differs) are
logged once, never listed nor used (as a path or otherwise), and written back as they were
when the file is rewritten. A valid name with a bad value (a queue count outside 0..65535, an
offset that is not an integer) makes the file unreadable.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .arguments import JAVA_INT_MAX, JAVA_LONG_MAX, JAVA_LONG_MIN, offset_arg, queue_id_arg
from .clock import SYSTEM_CLOCK
from .config_json import dump_fastjson, load_fastjson, quote_int_keys, set_aside_if_unreadable
from .config_tables import FileStamp, TableCodec, TableFile, TableMerge
from .errors import ConfigError, InvalidArgumentError, InvalidGroupError, InvalidTopicError
from .fileio import InterProcessLock
from .paths import topic_problem, validate_group, validate_topic

PERM_READ, PERM_WRITE, PERM_INHERIT = 4, 2, 1


@dataclass(frozen=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ | PERM_WRITE
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

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicConfig:
        """A ``topicConfigTable`` entry; ``ValueError`` when a queue count is not an int in 0..65535."""
        return cls(
            topic_name=str(d["topicName"]),
            read_queue_nums=_queue_count(d, "readQueueNums"),
            write_queue_nums=_queue_count(d, "writeQueueNums"),
            perm=int(d.get("perm", 6)),
            topic_filter_type=str(d.get("topicFilterType", "SINGLE_TAG")),
            topic_sys_flag=int(d.get("topicSysFlag", 0)),
            order=bool(d.get("order", False)),
        )


def _queue_count(d: dict[str, Any], key: str) -> int:
    value = d.get(key, 4)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError(f"topic {d.get('topicName')!r}: {key} {value!r} is not an int in 0..65535")
    return value


def topic_config_problem(config: object) -> str | None:
    """Why ``config`` is not a :class:`TopicConfig` the store can keep, or ``None``: a valid
    name, queue counts 1..65535, perm 0..7, a Java int sysflag, a text filter type, a bool order."""
    if not isinstance(config, TopicConfig):
        return f"a topic config must be a TopicConfig, got {type(config).__name__}"
    problem = topic_problem(config.topic_name)
    if problem is not None:
        return problem
    for name in ("read_queue_nums", "write_queue_nums"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
            return f"{name} of topic {config.topic_name!r} must be an int in 1..65535, got {value!r}"
    if isinstance(config.perm, bool) or not isinstance(config.perm, int) or not 0 <= config.perm <= 7:
        perm = config.perm
        return f"perm of topic {config.topic_name!r} must be an int in 0..7 (4 read, 2 write, 1 inherit), got {perm!r}"
    flag = config.topic_sys_flag
    if isinstance(flag, bool) or not isinstance(flag, int) or not -(2**31) <= flag <= JAVA_INT_MAX:
        return f"topic_sys_flag of topic {config.topic_name!r} must be a Java int, got {flag!r}"
    if not isinstance(config.topic_filter_type, str) or not isinstance(config.order, bool):
        return f"topic_filter_type (str) or order (bool) of topic {config.topic_name!r} has the wrong type"
    return None


def _topic_entry_problem(name: str, raw: Any) -> str | None:
    problem = topic_problem(name)
    if problem is None and isinstance(raw, dict) and raw.get("topicName") != name:
        problem = f"its topicName {raw.get('topicName')!r} differs from its key"
    return problem


def _decode_topic(name: str, raw: Any) -> TopicConfig:
    if not isinstance(raw, dict):
        raise TypeError(f"topic {name!r}: the entry is not an object")
    return TopicConfig.from_json(raw)


TOPICS: TableCodec[TopicConfig] = TableCodec(
    "topicConfigTable", True, _topic_entry_problem, _decode_topic, encode=TopicConfig.to_json
)


class TopicConfigManager:
    """``topics.json`` in memory: queues, perm and flags per topic; unknown topics
    auto-created by puts when allowed. Thread-safe.

    A change is :meth:`put` (written at once) or :meth:`stage` (in memory, written by the next
    :meth:`persist`: a broker's auto-created topics); both are merged with the file by the rule
    of :mod:`rmqlog.config_tables`. :meth:`reload` takes in what other processes wrote (one
    ``lstat`` when nothing changed)."""

    def __init__(
        self,
        path: Path,
        lock: InterProcessLock,
        *,
        default_queues: int,
        auto_create: bool,
        wall_ms: Callable[[], int] = SYSTEM_CLOCK.wall_ms,
    ) -> None:
        self.file = TableFile(path, lock, TOPICS, wall_ms=wall_ms)
        self.path = path
        self.lock = lock
        self.default_queues = default_queues
        self.auto_create = auto_create
        self._topics: dict[str, TopicConfig] = {}
        self._stamp: FileStamp | None = None
        #: changes made in memory and not yet written (:meth:`stage`; ``None``: removed)
        self._pending: dict[str, TopicConfig | None] = {}
        self._mutex = threading.RLock()
        #: queues a topic already has on disk (its highest consume-queue folder + 1, 0 if
        #: none): a topic auto-created over them gets at least that many, so that it takes
        #: what :meth:`rmqlog.MessageStore.topics` lists (a store RocketMQ wrote without its
        #: config, or a config file lost); set by the store
        self.queues_on_disk: Callable[[str], int] = lambda topic: 0
        self.reload()

    def _auto_count(self, topic: str) -> int:
        return min(65535, max(self.default_queues, self.queues_on_disk(topic)))

    def reload(self) -> None:
        """Take ``topics.json`` in when another process wrote it since this one last read or
        wrote it (the changes not yet persisted stay over it); one ``lstat`` otherwise."""
        with self._mutex:
            m = self.file.current(self._topics, self._stamp)
            self._take(m)

    def _take(self, m: TableMerge[TopicConfig]) -> None:
        if m.reread:
            for name, tc in self._pending.items():
                if tc is None:
                    m.table.pop(name, None)
                else:
                    m.table[name] = tc
        self._topics, self._stamp = m.table, m.stamp

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def topics(self) -> dict[str, TopicConfig]:
        return dict(self._topics)

    def table(self) -> Mapping[str, TopicConfig]:
        """The topics in memory, read-only (no copy; the next change or reload may replace it)."""
        return MappingProxyType(self._topics)

    @property
    def pending(self) -> int:
        """How many changes wait for :meth:`persist`."""
        return len(self._pending)

    def stage(self, config: TopicConfig) -> None:
        """Create or replace a topic's config in memory; written by the next :meth:`persist`
        (no I/O). :class:`rmqlog.errors.InvalidTopicError` for a bad name, :class:`ConfigError`
        for another problem :func:`topic_config_problem` names."""
        problem = topic_config_problem(config)
        if problem is not None:
            if isinstance(config, TopicConfig) and topic_problem(config.topic_name) is not None:
                raise InvalidTopicError(problem, row=None, field="topic")
            raise ConfigError(problem)
        with self._mutex:
            self._topics[config.topic_name] = config
            self._pending[config.topic_name] = config

    def persist(self, *, durable: bool = True) -> bool:
        """Merge the staged changes with ``topics.json`` (:mod:`rmqlog.config_tables`: the file
        read again only if another process wrote it; its other entries taken in); written only
        when there are changes (synced with ``durable``). Returns whether it was written."""
        with self._mutex:
            m = self.file.merge(self._pending, base=self._topics, since=self._stamp, durable=durable)
            self._pending = {}
            self._take(m)
            return m.written

    def put(self, config: TopicConfig) -> None:
        """Create or replace a topic's config, written at once (validated as :meth:`stage`);
        when it cannot be written, this process keeps the topic as it was."""
        with self._mutex:
            name = config.topic_name if isinstance(config, TopicConfig) else None
            before = self._topics.get(name) if isinstance(name, str) else None
            pending = dict(self._pending)
            self.stage(config)
            try:
                self.persist(durable=False)
            except BaseException:
                self._pending = pending
                if before is None:
                    self._topics.pop(config.topic_name, None)
                else:
                    self._topics[config.topic_name] = before
                raise

    def remove(self, topic: str) -> bool:
        """Remove a topic's entry (validated name), written at once; whether there was one."""
        validate_topic(topic)
        with self.lock.held(), self._mutex:
            self.reload()
            if topic not in self._topics:
                return False
            del self._topics[topic]
            self._pending[topic] = None
            self.persist(durable=False)
        return True

    def planned_queue_counts(self, topics: list[str], *, unknown: int | None = None) -> list[int]:
        """Write queue count of each topic as it is or would be once auto-created (creates nothing).

        A missing topic when auto-creation is off counts as ``unknown`` if given, else raises
        :class:`rmqlog.errors.InvalidTopicError`.
        """
        if any(t not in self._topics for t in topics):
            self.reload()
        out = []
        for t in topics:
            tc = self._topics.get(t)
            if tc is None and not self.auto_create:
                if unknown is not None:
                    out.append(unknown)
                    continue
                raise InvalidTopicError(f"topic {t!r} does not exist and auto-creation is off", row=None, field="topic")
            out.append(tc.write_queue_nums if tc is not None else self._auto_count(t))
        return out

    def write_queue_counts(self, topics: list[str]) -> list[int]:
        """Write queue count of each topic, creating missing topics (validated names)."""
        missing = [t for t in topics if t not in self._topics]
        if missing:
            with self.lock.held(), self._mutex:
                self.reload()
                missing = [t for t in topics if t not in self._topics]
                if missing:
                    if not self.auto_create:
                        raise InvalidTopicError(
                            f"topic {missing[0]!r} does not exist and auto-creation is off", row=None, field="topic"
                        )
                    for t in missing:
                        validate_topic(t)
                        n = self._auto_count(t)
                        self.stage(TopicConfig(t, n, n))
                    self.persist(durable=False)
        return [self._topics[t].write_queue_nums for t in topics]

    def close(self) -> None:
        self.file.close()


# ------------------------------------------------------------------ consumer offsets
#: a ``<topic>@<group>`` key of names in RocketMQ's charset (ASCII: bytes = characters), the
#: common case checked in one match; anything else gets the full checks
_OFFSET_KEY = re.compile(r"[%|a-zA-Z0-9_-]{1,127}@[%|a-zA-Z0-9_-]{1,255}")


def offset_key_problem(key: str, raw: Any = None) -> str | None:
    """Why a consumerOffset.json key is not ``<topic>@<group>`` of valid names, or ``None``."""
    if isinstance(key, str) and _OFFSET_KEY.fullmatch(key):
        return None
    topic, sep, group = str(key).partition("@")
    if not sep:
        return "not <topic>@<group>"
    problem = topic_problem(topic)
    if problem is not None:
        return problem
    try:
        validate_group(group)
    except InvalidGroupError as exc:
        return str(exc)
    return None


def _decode_offsets(key: str, per_queue: Any) -> dict[int, int]:
    if not isinstance(per_queue, dict | None):
        raise TypeError(f"{key!r}: not an object")
    offsets: dict[int, int] = {}
    for q, o in (per_queue or {}).items():
        if not (q.isascii() and q.isdigit() and int(q) <= JAVA_INT_MAX):
            raise ValueError(f"{key!r}: queue id {q!r} is not an int in 0..{JAVA_INT_MAX}")
        if isinstance(o, bool) or not isinstance(o, int) or not JAVA_LONG_MIN <= o <= JAVA_LONG_MAX:
            raise ValueError(f"{key!r}: offset {o!r} of queue {q} is not a long")
        offsets[int(q)] = o
    return offsets


def apply_offsets(table: dict[str, dict[int, int]], key: str, change: Mapping[int, int] | None) -> None:
    """An offset change: the queues' offsets set (the key's other queues kept), or the whole
    key removed (``None``)."""
    if change is None:
        table.pop(key, None)
    else:
        table.setdefault(key, {}).update(change)


OFFSETS: TableCodec[dict[int, int]] = TableCodec(
    "offsetTable", False, offset_key_problem, _decode_offsets, apply=apply_offsets
)


def offset_changes_arg(changes: object) -> dict[str, dict[int, int] | None]:
    """Offset changes as :meth:`rmqlog.MessageStore.merge_consumer_offsets` takes them:
    ``{"<topic>@<group>": {queue_id: offset} or None}``, checked (a name: its typed error; a
    queue id or offset out of range, or a wrong type: :class:`InvalidArgumentError` naming it)."""
    if not isinstance(changes, Mapping):
        raise InvalidArgumentError(f"changes must be a mapping of '<topic>@<group>' keys, got {type(changes).__name__}")
    out: dict[str, dict[int, int] | None] = {}
    for key, per_queue in changes.items():
        if not isinstance(key, str) or "@" not in key:
            raise InvalidArgumentError(f"changes: key {key!r} is not '<topic>@<group>'")
        if offset_key_problem(key) is not None:
            topic, _, group = key.partition("@")
            validate_topic(topic)
            validate_group(group)
        if per_queue is None:
            out[key] = None
            continue
        if not isinstance(per_queue, Mapping):
            raise InvalidArgumentError(f"changes[{key!r}] must be a mapping of queue id to offset or None")
        out[key] = {queue_id_arg(q): offset_arg(o) for q, o in per_queue.items()}
    return out


class ConsumerOffsetManager:
    """``consumerOffset.json``: each group's committed offset per topic queue, as this process
    reads and writes it one entry at a time (the ``rmqlog`` command, a Spark query); a broker
    keeps its own table and merges it (:meth:`rmqlog.MessageStore.merge_consumer_offsets`).
    The table last read or written is kept and used while the file stays the same (one
    ``lstat`` a read)."""

    def __init__(
        self, path: Path, lock: InterProcessLock, *, wall_ms: Callable[[], int] = SYSTEM_CLOCK.wall_ms
    ) -> None:
        self.file = TableFile(path, lock, OFFSETS, wall_ms=wall_ms)
        self.path = path
        self.lock = lock
        self._cache: TableMerge[dict[int, int]] | None = None
        self._mutex = threading.RLock()

    def _current(self) -> dict[str, dict[int, int]]:
        with self._mutex:
            c = self._cache
            self._cache = self.file.current(c.table if c else None, c.stamp if c else None)
            return self._cache.table

    def table(self) -> dict[str, dict[int, int]]:
        """The offset table, ``{"topic@group": {queueId: offset}}`` (entries with valid names only; a copy)."""
        return {k: dict(v) for k, v in self._current().items()}

    def merge(
        self,
        changes: Mapping[str, Mapping[int, int] | None],
        *,
        base: dict[str, dict[int, int]] | None = None,
        since: FileStamp | None = None,
        applied: bool = False,
    ) -> TableMerge[dict[int, int]]:
        """:meth:`rmqlog.config_tables.TableFile.merge` of checked changes."""
        return self.file.merge(changes, base=base, since=since, applied=applied)

    def _merge_cached(self, changes: Mapping[str, Mapping[int, int] | None]) -> None:
        with self._mutex:
            c, self._cache = self._cache, None  # (a failed write leaves no table it changed)
            self._cache = self.file.merge(
                changes, base=c.table if c else None, since=c.stamp if c else None, durable=False
            )

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store ``offset`` (an int in [0, 2**63)) for a queue id (an int in [0, 2**31)); raises
        :class:`rmqlog.errors.InvalidArgumentError` otherwise."""
        validate_group(group)
        validate_topic(topic)
        queue_id, offset = queue_id_arg(queue_id), offset_arg(offset)
        self._merge_cached({f"{topic}@{group}": {queue_id: offset}})

    def groups_of(self, topic: str) -> int:
        """How many groups have offsets of ``topic`` (validated name)."""
        validate_topic(topic)
        return sum(1 for k in self._current() if k.partition("@")[0] == topic)

    def remove_topic(self, topic: str) -> int:
        """Remove every group's offsets of ``topic`` (validated name); how many groups had some."""
        validate_topic(topic)
        with self.lock.held(), self._mutex:
            gone = [k for k in self._current() if k.partition("@")[0] == topic]
            if gone:
                self._merge_cached(dict.fromkeys(gone))
            self._cache = None  # (a delete is rare: no copy of the table kept for it)
        return len(gone)

    def committed(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group has none for that queue (RocketMQ's answer)."""
        validate_group(group)
        validate_topic(topic)
        return self._current().get(f"{topic}@{group}", {}).get(queue_id_arg(queue_id), -1)

    def close(self) -> None:
        with self._mutex:
            self._cache = None
            self.file.close()


# --------------------------------------------------------------- subscription groups
#: ``SubscriptionGroupConfig``'s fields: JSON name -> (attribute, type)
_GROUP_FIELDS: dict[str, tuple[str, type]] = {
    "consumeEnable": ("consume_enable", bool),
    "consumeFromMinEnable": ("consume_from_min_enable", bool),
    "consumeBroadcastEnable": ("consume_broadcast_enable", bool),
    "retryQueueNums": ("retry_queue_nums", int),
    "retryMaxTimes": ("retry_max_times", int),
    "brokerId": ("broker_id", int),
    "whichBrokerWhenConsumeSlowly": ("which_broker_when_consume_slowly", int),
    "notifyConsumerIdsChangedEnable": ("notify_consumer_ids_changed_enable", bool),
    "consumeMessageOrderly": ("consume_message_orderly", bool),
}


@dataclass(frozen=True)
class SubscriptionGroupConfig:
    """RocketMQ 4.9.8's ``SubscriptionGroupConfig`` (its defaults): what a broker keeps per
    consumer group in ``subscriptionGroup.json``."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    #: RocketMQ 5's field: a FIFO group (a gRPC receive pops orderly, its Settings say ``fifo``)
    consume_message_orderly: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"groupName": self.group_name, **{key: getattr(self, attr) for key, (attr, _) in _GROUP_FIELDS.items()}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubscriptionGroupConfig:
        """A ``subscriptionGroupTable`` entry (missing fields: the defaults; unknown ones
        dropped); ``ValueError`` naming a field of the wrong type."""
        values: dict[str, Any] = {}
        for key, (attr, kind) in _GROUP_FIELDS.items():
            if key in d:
                value = d[key]
                ok = (
                    isinstance(value, bool)
                    if kind is bool
                    else isinstance(value, int)
                    and not isinstance(value, bool)
                    and JAVA_LONG_MIN <= value <= JAVA_LONG_MAX
                )
                if not ok:
                    raise ValueError(f"group {d.get('groupName')!r}: {key} {value!r} is not a {kind.__name__}")
                values[attr] = value
        return cls(str(d["groupName"]), **values)


def subscription_group_problem(config: object) -> str | None:
    """Why ``config`` is not a :class:`SubscriptionGroupConfig` the store can keep, or ``None``."""
    if not isinstance(config, SubscriptionGroupConfig):
        return f"a subscription group must be a SubscriptionGroupConfig, got {type(config).__name__}"
    try:
        validate_group(config.group_name)
        SubscriptionGroupConfig.from_json(config.to_json())
    except (InvalidGroupError, ValueError) as exc:
        return str(exc)
    return None


def _group_entry_problem(name: str, raw: Any) -> str | None:
    try:
        validate_group(name)
    except InvalidGroupError as exc:
        return str(exc)
    if isinstance(raw, dict) and raw.get("groupName") != name:
        return f"its groupName {raw.get('groupName')!r} differs from its key"
    return None


def _decode_group(name: str, raw: Any) -> SubscriptionGroupConfig:
    if not isinstance(raw, dict):
        raise TypeError(f"group {name!r}: the entry is not an object")
    return SubscriptionGroupConfig.from_json(raw)


SUBSCRIPTION_GROUPS: TableCodec[SubscriptionGroupConfig] = TableCodec(
    "subscriptionGroupTable", True, _group_entry_problem, _decode_group, encode=SubscriptionGroupConfig.to_json
)


__all__ = [
    "TopicConfig",
    "TopicConfigManager",
    "ConsumerOffsetManager",
    "SubscriptionGroupConfig",
    "quote_int_keys",
    "load_fastjson",
    "dump_fastjson",
    "set_aside_if_unreadable",
    "offset_key_problem",
    "topic_config_problem",
    "subscription_group_problem",
    "offset_changes_arg",
    "TOPICS",
    "OFFSETS",
    "SUBSCRIPTION_GROUPS",
]
