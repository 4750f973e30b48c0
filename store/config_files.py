"""RocketMQ's JSON config files under ``<root>/config/``.

- ``topics.json``: ``{"dataVersion":{"counter":N,"timestamp":ms},"topicConfigTable":{"T":
  {"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T",
  "topicSysFlag":0,"writeQueueNums":4}}}`` (perm bits: read 4, write 2, inherit 1).
- ``consumerOffset.json``: ``{"offsetTable":{"<topic>@<group>":{0:250,1:250}}}``. RocketMQ
  writes it with fastjson, whose integer map keys are *unquoted* (not strict JSON); we read
  both forms and write quoted keys, which fastjson also reads.

Both are written RocketMQ's way: ``<f>.tmp`` then rename, the previous file kept as
``<f>.bak``; a reader falls back to ``.bak`` when the main file is missing or unreadable.
Changes from several processes are serialized by ``<root>/config.lock`` and each change is
a read-modify-write of the current file, so no process overwrites another's update.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, CorruptStoreError
from .fileio import InterProcessLock, replace_file
from .paths import validate_group, validate_topic

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


def load_fastjson(path: Path) -> Any | None:
    """Parse a RocketMQ config file (or its ``.bak``); ``None`` if neither exists."""
    last_error: Exception | None = None
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            raw = candidate.read_bytes()
        except FileNotFoundError:
            continue
        if not raw.strip():
            continue
        try:  # not UTF-8 is as unreadable as not JSON (UnicodeDecodeError is a ValueError)
            return json.loads(quote_int_keys(raw.decode("utf-8")))
        except ValueError as exc:
            last_error = exc
    if last_error is not None:
        raise CorruptStoreError(f"unreadable config file: {last_error}", path=str(path))
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
        return cls(
            topic_name=str(d["topicName"]),
            read_queue_nums=int(d.get("readQueueNums", 4)),
            write_queue_nums=int(d.get("writeQueueNums", 4)),
            perm=int(d.get("perm", 6)),
            topic_filter_type=str(d.get("topicFilterType", "SINGLE_TAG")),
            topic_sys_flag=int(d.get("topicSysFlag", 0)),
            order=bool(d.get("order", False)),
        )


class TopicConfigManager:
    """``topics.json``: queues per topic; unknown topics auto-created when allowed."""

    def __init__(self, path: Path, lock: InterProcessLock, *, default_queues: int, auto_create: bool) -> None:
        self.path = path
        self.lock = lock
        self.default_queues = default_queues
        self.auto_create = auto_create
        self._topics: dict[str, TopicConfig] = {}
        self._data_version: dict[str, int] = {"counter": 0, "timestamp": 0}
        self._mutex = threading.Lock()
        self.reload()

    def reload(self) -> None:
        raw = load_fastjson(self.path)
        topics: dict[str, TopicConfig] = {}
        version = {"counter": 0, "timestamp": 0}
        if raw is not None:
            try:
                for name, d in (raw.get("topicConfigTable") or {}).items():
                    topics[name] = TopicConfig.from_json(d)
                version = dict(raw.get("dataVersion") or version)
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                raise CorruptStoreError(f"bad topics.json: {exc}", path=str(self.path)) from exc
        with self._mutex:
            # a reload without the lock (planned_queue_counts) may have read the file just
            # before another thread of this process wrote a newer one: never go back to it
            # (the topic that thread had just created would vanish under it)
            if int(version.get("counter", 0)) < int(self._data_version.get("counter", 0)):
                return
            self._topics = topics
            self._data_version = version

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def topics(self) -> dict[str, TopicConfig]:
        return dict(self._topics)

    def _write(self) -> None:
        body = {
            "dataVersion": {"counter": int(self._data_version.get("counter", 0)) + 1,
                            "timestamp": int(time.time() * 1000)},
            "topicConfigTable": {name: tc.to_json() for name, tc in sorted(self._topics.items())},
        }
        replace_file(self.path, dump_fastjson(body), keep_backup=True)
        self._data_version = body["dataVersion"]  # type: ignore[assignment]

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

    def planned_queue_counts(self, topics: list[str], *, unknown: int | None = None) -> list[int]:
        """Write queue count of each topic as it is or would be once auto-created (creates nothing).

        A missing topic when auto-creation is off counts as ``unknown`` if given, else raises
        :class:`store.errors.InvalidTopicError`.
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
            out.append(tc.write_queue_nums if tc is not None else self.default_queues)
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
                            self._topics[t] = TopicConfig(t, self.default_queues, self.default_queues)
                        self._write()
        return [self._topics[t].write_queue_nums for t in topics]


class ConsumerOffsetManager:
    """``consumerOffset.json``: each group's committed offset per topic queue."""

    def __init__(self, path: Path, lock: InterProcessLock) -> None:
        self.path = path
        self.lock = lock

    def _load(self) -> dict[str, dict[int, int]]:
        raw = load_fastjson(self.path)
        if raw is None:
            return {}
        try:
            return {
                str(k): {int(q): int(o) for q, o in (v or {}).items()}
                for k, v in (raw.get("offsetTable") or {}).items()
            }
        except (AttributeError, TypeError, ValueError) as exc:
            raise CorruptStoreError(f"bad consumerOffset.json: {exc}", path=str(self.path)) from exc

    def table(self) -> dict[str, dict[int, int]]:
        """The whole offset table, ``{"topic@group": {queueId: offset}}``."""
        return self._load()

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        validate_group(group)
        validate_topic(topic)
        if queue_id < 0 or offset < 0:
            raise ConfigError("queue id and offset must be non-negative")
        with self.lock.held():
            table = self._load()
            table.setdefault(f"{topic}@{group}", {})[int(queue_id)] = int(offset)
            body = {"offsetTable": {k: {str(q): o for q, o in sorted(v.items())} for k, v in table.items()}}
            replace_file(self.path, dump_fastjson(body), keep_backup=True)

    def committed(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group has none for that queue (RocketMQ's answer)."""
        validate_group(group)
        validate_topic(topic)
        return self._load().get(f"{topic}@{group}", {}).get(int(queue_id), -1)


__all__ = ["TopicConfig", "TopicConfigManager", "ConsumerOffsetManager", "quote_int_keys",
           "load_fastjson", "dump_fastjson"]


def set_aside_if_unreadable(path: Path) -> Path | None:
    """``repair``: move a config file that neither it nor its ``.bak`` can be read from aside.

    Renamed to ``<name>.damaged-<ms>`` (kept for a person to look at, never read again) so the
    store can start from what the log holds. Returns the new name, or ``None`` when the file
    was readable (or absent).
    """
    try:
        load_fastjson(path)
        return None
    except CorruptStoreError:
        pass
    stamp = int(time.time() * 1000)
    moved = path.with_name(f"{path.name}.damaged-{stamp}")
    path.replace(moved)
    bak = path.with_name(path.name + ".bak")
    if bak.exists():
        bak.replace(bak.with_name(f"{bak.name}.damaged-{stamp}"))
    return moved
