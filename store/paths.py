"""Every path of a store directory, built in one place.

```
<root>/commitlog/<20-digit start offset>            commitlog segments
<root>/consumequeue/<topic>/<queueId>/<20-digit>      consume-queue segments
<root>/config/topics.json, consumerOffset.json         RocketMQ config files
<root>/config/subscriptionGroup.json                   RocketMQ's, written by a broker
<root>/config/replicationCheckpoint.json               ours: how far a slave acknowledged this store's log
<root>/checkpoint, abort, lock                         RocketMQ's control files
<root>/append.state, append.lock                       ours: the published tail and queue offsets
<root>/dispatch.state, dispatch.lock                   ours: the dispatcher's progress
<root>/flush.state, flush.lock                         ours: the durable flushed position
<root>/owners/<pid>-<random>, recovering               ours: who has the store open; a recovery under way
<root>/retention.state                                 ours: where the commitlog starts after retention
<root>/commitlog.deleted/<20-digit>                    ours: segments retention is deleting (unlinked next)
<root>/commitlog.prealloc/<20-digit>                   ours: segments prepared ahead of the writer
```

Topic and group names reach the filesystem only through :func:`validate_topic` /
:func:`validate_group`: RocketMQ's charset ``[%|a-zA-Z0-9_-]`` has no ``/`` and no ``.``,
so a valid name can never climb out of its directory.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from . import safe_open
from .arguments import utf8_problem
from .errors import (
    InvalidArgumentError,
    InvalidGroupError,
    InvalidTopicError,
    StoreNotFoundError,
    WrongFileTypeError,
    raise_if_disk_full,
)

TOPIC_MAX_BYTES = 127
_NAME_RE = re.compile(r"[%|a-zA-Z0-9_-]+")


def topic_problem(topic: object) -> str | None:
    """Why ``topic`` is not a valid RocketMQ topic name, or ``None`` when it is."""
    if not isinstance(topic, str):
        return f"topic must be a string, not {type(topic).__name__}"
    return _string_topic_problem(topic)


@functools.lru_cache(maxsize=4096)
def _string_topic_problem(topic: str) -> str | None:
    """:func:`topic_problem` of a string, remembered: every put checks its topics again."""
    if not topic:
        return "topic is empty"
    problem = utf8_problem(topic)
    if problem is not None:
        return f"topic {problem}"
    if len(topic.encode("utf-8")) > TOPIC_MAX_BYTES:
        return f"topic is longer than {TOPIC_MAX_BYTES} bytes"
    if not _NAME_RE.fullmatch(topic):
        return f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]"
    return None


def validate_topic(topic: object, *, row: int | None = None) -> str:
    """Return ``topic`` if valid; raise :class:`InvalidTopicError` naming the row otherwise."""
    problem = topic_problem(topic)
    if problem is not None:
        raise InvalidTopicError(problem, row=row, field="topic")
    assert isinstance(topic, str)
    return topic


def validate_group(group: object) -> str:
    """Return ``group`` if it is a valid RocketMQ group name (same charset, 255 bytes max)."""
    if (
        not isinstance(group, str)
        or not group
        or utf8_problem(group) is not None
        or len(group.encode("utf-8")) > 255
        or not _NAME_RE.fullmatch(group)
    ):
        raise InvalidGroupError(f"invalid consumer group name {group!r}")
    return group


def root_arg(root: object) -> Path:
    """A store root given to a call: a ``str`` or ``os.PathLike`` naming a path this system
    can take (no NUL, encodable to the file system's bytes); raises :class:`InvalidArgumentError`."""
    if not isinstance(root, str | os.PathLike):
        raise InvalidArgumentError(f"root must be a str or os.PathLike path, got {type(root).__name__} {root!r}")
    try:
        path = os.fspath(root)
        raw = os.fsencode(path)
    except (TypeError, UnicodeEncodeError) as exc:  # a PathLike of bytes; a lone surrogate the file system cannot take
        raise InvalidArgumentError(f"root {root!r} is not a usable path: {exc}") from None
    if b"\x00" in raw:
        raise InvalidArgumentError(f"root {root!r} holds a NUL character")
    return Path(path)


def prepare_root(paths: StorePaths, *, create: bool, read_only: bool) -> None:
    """Check that ``paths.root`` holds a store (read-only, or without ``create``), then (unless
    read-only) make the root. A root that is a file, under a file, or that the system
    refuses (a name too long, no permission) raises :class:`InvalidArgumentError` naming it
    (:class:`rmqlog.errors.DiskFullError` for a full disk), a root without a store to open
    :class:`StoreNotFoundError`."""
    root = paths.root
    try:
        if (read_only or not create) and not paths.holds_store():
            raise StoreNotFoundError("no store here (no commitlog/, consumequeue/ or config/ folder)", path=str(root))
        if not read_only:
            # (links are allowed in the root's own path: where the store lives is the user's
            # choice; config/ and the rest are made below it, never through a link, once the
            # store is owned: see rmqlog.recovery.opening)
            safe_open.make_root(root)
    except WrongFileTypeError as exc:  # a file there, or a path through a file
        raise InvalidArgumentError(f"root {str(root)!r} cannot hold a store: {exc}") from None
    except OSError as exc:
        raise_if_disk_full(exc, root, "creating the store's folder")
        raise InvalidArgumentError(f"root {str(root)!r} cannot hold a store: {exc.strerror or exc}") from exc


def segment_name(offset: int) -> str:
    """RocketMQ's segment file name: the start offset zero-padded to 20 digits."""
    return f"{offset:020d}"


def parse_segment_name(name: str) -> int | None:
    """The start offset named by a segment file, or ``None`` for any other file."""
    if len(name) == 20 and name.isascii() and name.isdigit():  # str.isdigit alone takes any script's digits
        return int(name)
    return None


def parse_queue_dir_name(name: str) -> int | None:
    """The queue id a ``consumequeue/<topic>/<queueId>`` folder names (its canonical decimal
    form, as :meth:`StorePaths.queue_dir` writes it, below 2**31), or ``None`` for any other name."""
    if name.isascii() and name.isdigit() and len(name) <= 10 and str(int(name)) == name and int(name) < 1 << 31:
        return int(name)
    return None


@dataclass(frozen=True)
class StorePaths:
    """The paths of one store root."""

    root: Path

    @property
    def commitlog_dir(self) -> Path:
        return self.root / "commitlog"

    @property
    def consumequeue_dir(self) -> Path:
        return self.root / "consumequeue"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    @property
    def topics_json(self) -> Path:
        return self.config_dir / "topics.json"

    @property
    def consumer_offset_json(self) -> Path:
        return self.config_dir / "consumerOffset.json"

    @property
    def subscription_group_json(self) -> Path:
        return self.config_dir / "subscriptionGroup.json"

    @property
    def deleted_topics_json(self) -> Path:
        return self.config_dir / "deletedTopics.json"

    @property
    def replication_checkpoint_json(self) -> Path:
        return self.config_dir / "replicationCheckpoint.json"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def abort(self) -> Path:
        return self.root / "abort"

    @property
    def lock(self) -> Path:
        return self.root / "lock"

    @property
    def append_state(self) -> Path:
        return self.root / "append.state"

    @property
    def append_lock(self) -> Path:
        return self.root / "append.lock"

    @property
    def dispatch_state(self) -> Path:
        return self.root / "dispatch.state"

    @property
    def dispatch_lock(self) -> Path:
        return self.root / "dispatch.lock"

    @property
    def flush_state(self) -> Path:
        return self.root / "flush.state"

    @property
    def flush_lock(self) -> Path:
        return self.root / "flush.lock"

    @property
    def retention_state(self) -> Path:
        return self.root / "retention.state"

    @property
    def pop_dir(self) -> Path:
        """A broker's POP consumption state (:mod:`rmqlog.pop_log`)."""
        return self.root / "pop"

    @property
    def pop_log(self) -> Path:
        """The POP checkpoint log: checkpoints, acks and positions (:class:`rmqlog.pop_log.PopLog`)."""
        return self.pop_dir / "checkpoints.log"

    @property
    def deleted_segments_dir(self) -> Path:
        """Where retention moves the segments it deletes before unlinking them (beside
        ``commitlog/``: nothing that lists the segments, RocketMQ's tooling included, meets one)."""
        return self.root / "commitlog.deleted"

    def holds_store(self) -> bool:
        """Whether ``root`` already holds a store (RocketMQ's or ours): a ``commitlog/``,
        ``consumequeue/`` or ``config/`` folder. Readers open only such a root."""
        return any(p.is_dir() for p in (self.commitlog_dir, self.consumequeue_dir, self.config_dir))

    def queue_dir(self, topic: str, queue_id: int) -> Path:
        """``consumequeue/<topic>/<queueId>``; the topic must already be validated."""
        validate_topic(topic)
        return self.consumequeue_dir / topic / str(int(queue_id))
