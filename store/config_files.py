"""RocketMQ's JSON config files under ``<root>/config/``.

- ``topics.json``: ``{"dataVersion":{"counter":N,"timestamp":ms},"topicConfigTable":{"T":
  {"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T",
  "topicSysFlag":0,"writeQueueNums":4}}}`` (perm bits: read 4, write 2, inherit 1).
- ``consumerOffset.json``: ``{"offsetTable":{"<topic>@<group>":{0:250,1:250}}}``. RocketMQ
  writes it with fastjson, whose integer map keys are *unquoted* (not strict JSON); we read
  both forms and write quoted keys, which fastjson also reads.

Both are written RocketMQ's way: ``<f>.tmp`` then rename, the previous file kept as
``<f>.bak``; a reader falls back to ``.bak`` when the main file is missing, empty or
unreadable (not UTF-8, not JSON, or not the structure below), as RocketMQ's
``ConfigManager.load`` does; when neither can be read, :class:`rmqlog.errors.CorruptStoreError`
names the file. Changes from several processes are serialized by ``<root>/config.lock`` and
each change is a read-modify-write of the current file, so no process overwrites another's
update.

Names read from these files are never trusted: a ``topics.json`` entry whose key is not a
valid topic name (or whose ``topicName`` differs from its key), and a ``consumerOffset.json``
key that is not ``<valid topic>@<valid group>``, are logged once, never listed nor used (as a
path or otherwise), and written back as they were when the file is rewritten. A valid name
with a bad value (a queue count outside 0..65535, an offset that is not an integer) makes the
file unreadable.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import safe_open
from .arguments import JAVA_INT_MAX, JAVA_LONG_MAX, JAVA_LONG_MIN, offset_arg, queue_id_arg
from .clock import SYSTEM_CLOCK
from .errors import ConfigError, CorruptStoreError, InvalidGroupError, WrongFileTypeError
from .fileio import InterProcessLock, replace_file
from .paths import topic_problem, validate_group, validate_topic

log = logging.getLogger(__name__)
_warned: set[tuple[str, str]] = set()


def _warn_once(path: Path, message: str) -> None:
    """Log a problem of a config file once per process (the files are re-read often)."""
    key = (str(path), message)
    if key not in _warned:
        _warned.add(key)
        log.warning("%s: %s", path, message)

PERM_READ, PERM_WRITE, PERM_INHERIT = 4, 2, 1


def quote_int_keys(text: str) -> str:
    """Quote fastjson's bare integer object keys (``{0:1}`` -> ``{"0":1}``), leaving strings alone."""
    out: list[str] = []
    i, n = 0, len(text)
    in_str = False
    expect_key = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1 : i + 2])
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
            continue
        if c == '"':
            in_str = True
            expect_key = False
        elif c in "{,":
            expect_key = True
        elif expect_key and (c.isdigit() or c == "-"):
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            k = j
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":":
                out.append(f'"{text[i:j]}"')
                i = j
                expect_key = False
                continue
            expect_key = False
        elif not c.isspace():
            expect_key = False
        out.append(c)
        i += 1
    return "".join(out)


def load_fastjson(path: Path, decode: Callable[[Any], Any] | None = None) -> Any | None:
    """Parse a RocketMQ config file, else its ``.bak``; ``None`` if neither exists (or both are empty).

    ``decode`` turns the parsed JSON into the caller's structure, raising ``ValueError``,
    ``TypeError``, ``KeyError`` or ``AttributeError`` when it is not that structure; its result
    is returned. A file that is not UTF-8, not JSON or not the structure is skipped for its
    ``.bak`` (logged); when no candidate is readable, :class:`CorruptStoreError` names the file.
    """
    errors: list[str] = []
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            text = safe_open.read_bytes(candidate).decode("utf-8")
        except FileNotFoundError:
            continue
        except WrongFileTypeError as exc:  # a folder, a link: never read through
            errors.append(f"{candidate.name}: {exc.found} ({exc.path})")
            continue
        except UnicodeDecodeError as exc:
            errors.append(f"{candidate.name}: not UTF-8 ({exc})")
            continue
        if not text.strip():
            continue
        try:
            raw = json.loads(quote_int_keys(text))
            value = decode(raw) if decode is not None else raw
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            errors.append(f"{candidate.name}: {type(exc).__name__}: {exc}")
            continue
        if errors:
            _warn_once(path, f"unreadable, read {candidate.name} instead ({errors[0]})")
        return value
    if errors:
        raise CorruptStoreError(f"unreadable config file ({'; '.join(errors)})", path=str(path))
    return None


def dump_fastjson(obj: Any) -> bytes:
    """Tab-indented JSON, as RocketMQ's ``JSON.toJSONString(obj, true)`` lays it out."""
    return json.dumps(obj, indent="\t", sort_keys=False).encode("utf-8")


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
        return {"order": self.order, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicFilterType": self.topic_filter_type, "topicName": self.topic_name,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}

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


def _decode_topics(path: Path, raw: Any) -> tuple[dict[str, TopicConfig], dict[str, Any], dict[str, int]]:
    """(usable topics, entries skipped for their names, dataVersion) of a parsed ``topics.json``."""
    table = raw.get("topicConfigTable") or {}
    if not isinstance(table, dict):
        raise TypeError("topicConfigTable is not an object")
    topics: dict[str, TopicConfig] = {}
    skipped: dict[str, Any] = {}
    for name, d in table.items():
        problem = topic_problem(name)
        if problem is None and isinstance(d, dict) and d.get("topicName") != name:
            problem = f"its topicName {d.get('topicName')!r} differs from its key"
        if problem is not None:
            _warn_once(path, f"topic entry {name!r} skipped: {problem}")
            skipped[name] = d
            continue
        if not isinstance(d, dict):
            raise TypeError(f"topic {name!r}: the entry is not an object")
        topics[name] = TopicConfig.from_json(d)
    version = raw.get("dataVersion") or {"counter": 0, "timestamp": 0}
    return topics, skipped, {"counter": int(version.get("counter", 0)), "timestamp": int(version.get("timestamp", 0))}


class TopicConfigManager:
    """``topics.json``: queues per topic; unknown topics auto-created when allowed."""

    def __init__(
        self, path: Path, lock: InterProcessLock, *, default_queues: int, auto_create: bool,
        wall_ms: Callable[[], int] = SYSTEM_CLOCK.wall_ms,
    ) -> None:
        self.wall_ms = wall_ms  # the store's clock: the dataVersion's timestamp
        self.path = path
        self.lock = lock
        self.default_queues = default_queues
        self.auto_create = auto_create
        self._topics: dict[str, TopicConfig] = {}
        self._skipped: dict[str, Any] = {}  # entries with unusable names: kept in the file as they are
        self._data_version: dict[str, int] = {"counter": 0, "timestamp": 0}
        self._mutex = threading.Lock()
        #: queues a topic already has on disk (its highest consume-queue folder + 1, 0 if
        #: none): a topic auto-created over them gets at least that many, so that it takes
        #: what :meth:`rmqlog.MessageStore.topics` lists (a store RocketMQ wrote without its
        #: config, or a config file lost); set by the store
        self.queues_on_disk: Callable[[str], int] = lambda topic: 0
        self.reload()

    def _auto_count(self, topic: str) -> int:
        return min(65535, max(self.default_queues, self.queues_on_disk(topic)))

    def reload(self) -> None:
        loaded = load_fastjson(self.path, lambda raw: _decode_topics(self.path, raw))
        topics: dict[str, TopicConfig] = {}
        skipped: dict[str, Any] = {}
        version = {"counter": 0, "timestamp": 0}
        if loaded is not None:
            topics, skipped, version = loaded
        with self._mutex:
            # a reload without the lock (planned_queue_counts) may have read the file just
            # before another thread of this process wrote a newer one: never go back to it
            # (the topic that thread had just created would vanish under it)
            if int(version.get("counter", 0)) < int(self._data_version.get("counter", 0)):
                return
            self._topics = topics
            self._skipped = skipped
            self._data_version = version

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def topics(self) -> dict[str, TopicConfig]:
        return dict(self._topics)

    def _write(self) -> None:
        body = {
            "dataVersion": {"counter": int(self._data_version.get("counter", 0)) + 1,
                            "timestamp": self.wall_ms()},
            "topicConfigTable": dict(sorted({**self._skipped, **{name: tc.to_json() for name, tc in self._topics.items()}}.items())),
        }
        replace_file(self.path, dump_fastjson(body), keep_backup=True)
        self._data_version = body["dataVersion"]

    def put(self, config: TopicConfig) -> None:
        """Create or replace a topic's config (validated name)."""
        validate_topic(config.topic_name)
        if not (1 <= config.write_queue_nums <= 65535 and 1 <= config.read_queue_nums <= 65535):
            raise ConfigError("queue counts must be in 1..65535")
        with self.lock.held():
            self.reload()
            with self._mutex:
                self._topics[config.topic_name] = config
                self._write()

    def remove(self, topic: str) -> bool:
        """Remove a topic's entry (validated name); whether there was one."""
        validate_topic(topic)
        with self.lock.held():
            self.reload()
            with self._mutex:
                if topic not in self._topics:
                    return False
                del self._topics[topic]
                self._write()
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
                from .errors import InvalidTopicError

                raise InvalidTopicError(f"topic {t!r} does not exist and auto-creation is off", row=None, field="topic")
            out.append(tc.write_queue_nums if tc is not None else self._auto_count(t))
        return out

    def write_queue_counts(self, topics: list[str]) -> list[int]:
        """Write queue count of each topic, creating missing topics (validated names)."""
        missing = [t for t in topics if t not in self._topics]
        if missing:
            with self.lock.held():
                self.reload()
                missing = [t for t in topics if t not in self._topics]
                if missing:
                    if not self.auto_create:
                        from .errors import InvalidTopicError

                        raise InvalidTopicError(f"topic {missing[0]!r} does not exist and auto-creation is off", row=None, field="topic")
                    with self._mutex:
                        for t in missing:
                            validate_topic(t)
                            n = self._auto_count(t)
                            self._topics[t] = TopicConfig(t, n, n)
                        self._write()
        return [self._topics[t].write_queue_nums for t in topics]


class ConsumerOffsetManager:
    """``consumerOffset.json``: each group's committed offset per topic queue."""

    def __init__(self, path: Path, lock: InterProcessLock) -> None:
        self.path = path
        self.lock = lock

    def _load(self) -> tuple[dict[str, dict[int, int]], dict[str, Any]]:
        """(usable offset table, entries skipped for their keys)."""
        loaded = load_fastjson(self.path, self._decode)
        return loaded if loaded is not None else ({}, {})

    def _decode(self, raw: Any) -> tuple[dict[str, dict[int, int]], dict[str, Any]]:
        table = raw.get("offsetTable") or {}
        if not isinstance(table, dict):
            raise TypeError("offsetTable is not an object")
        out: dict[str, dict[int, int]] = {}
        skipped: dict[str, Any] = {}
        for key, per_queue in table.items():
            problem = _offset_key_problem(key)
            if problem is not None:
                _warn_once(self.path, f"offset entry {key!r} skipped: {problem}")
                skipped[key] = per_queue
                continue
            if not isinstance(per_queue, dict | None):
                raise TypeError(f"{key!r}: not an object")
            offsets: dict[int, int] = {}
            for q, o in (per_queue or {}).items():
                if not (q.isascii() and q.isdigit() and int(q) <= JAVA_INT_MAX):
                    raise ValueError(f"{key!r}: queue id {q!r} is not an int in 0..{JAVA_INT_MAX}")
                if isinstance(o, bool) or not isinstance(o, int) or not JAVA_LONG_MIN <= o <= JAVA_LONG_MAX:
                    raise ValueError(f"{key!r}: offset {o!r} of queue {q} is not a long")
                offsets[int(q)] = o
            out[key] = offsets
        return out, skipped

    def table(self) -> dict[str, dict[int, int]]:
        """The offset table, ``{"topic@group": {queueId: offset}}`` (entries with valid names only)."""
        return self._load()[0]

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store ``offset`` (an int in [0, 2**63)) for a queue id (an int in [0, 2**31)); raises
        :class:`rmqlog.errors.InvalidArgumentError` otherwise."""
        validate_group(group)
        validate_topic(topic)
        queue_id, offset = queue_id_arg(queue_id), offset_arg(offset)
        with self.lock.held():
            table, skipped = self._load()
            table.setdefault(f"{topic}@{group}", {})[queue_id] = offset
            body = {"offsetTable": {**skipped, **{k: {str(q): o for q, o in sorted(v.items())} for k, v in table.items()}}}
            replace_file(self.path, dump_fastjson(body), keep_backup=True)

    def remove_topic(self, topic: str) -> int:
        """Remove every group's offsets of ``topic`` (validated name); how many groups had some."""
        validate_topic(topic)
        with self.lock.held():
            table, skipped = self._load()
            gone = [k for k in table if k.partition("@")[0] == topic]
            if not gone:
                return 0
            for k in gone:
                del table[k]
            body = {"offsetTable": {**skipped, **{k: {str(q): o for q, o in sorted(v.items())} for k, v in table.items()}}}
            replace_file(self.path, dump_fastjson(body), keep_backup=True)
        return len(gone)

    def committed(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group has none for that queue (RocketMQ's answer)."""
        validate_group(group)
        validate_topic(topic)
        return self._load()[0].get(f"{topic}@{group}", {}).get(queue_id_arg(queue_id), -1)


def _offset_key_problem(key: str) -> str | None:
    """Why a consumerOffset.json key is not ``<topic>@<group>`` of valid names, or ``None``."""
    topic, sep, group = key.partition("@")
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


__all__ = ["TopicConfig", "TopicConfigManager", "ConsumerOffsetManager", "quote_int_keys",
           "load_fastjson", "dump_fastjson"]


def set_aside_if_unreadable(path: Path, decode: Callable[[Any], Any] | None = None) -> Path | None:
    """``repair``: move a config file that neither it nor its ``.bak`` can be read from aside
    (``decode``: as for :func:`load_fastjson`, what the content must decode to).

    Renamed to ``<name>.damaged-<ms>`` (kept for a person to look at, never read again) so the
    store can start from what the log holds. Returns the new name, or ``None`` when the file
    was readable (or absent).
    """
    try:
        load_fastjson(path, decode)
        return None
    except CorruptStoreError:
        pass
    stamp = SYSTEM_CLOCK.wall_ms()  # (only a name: a store's clock, say a test's, need not give unique ones)
    moved = [safe_open.set_aside(candidate, stamp)  # (a link is moved itself, its target untouched)
             for candidate in (path, path.with_name(path.name + ".bak")) if safe_open.kind(candidate) is not None]
    return moved[0] if moved else None
