"""A window read's arguments as one value (:class:`WindowRequest`), validated once where it is
built (:meth:`WindowRequest.of`) and handed down unchanged: the facade's
:meth:`rmqlog.MessageStore.read_window`, the reader's ``get_messages``, the general read
(:func:`rmqlog.access.window.read_window`) and its direct path for small windows
(:mod:`rmqlog.access.small_window`) all take it. A bad argument raises
:class:`rmqlog.errors.InvalidArgumentError` (``InvalidTopicError`` for a topic) naming it, in
the order of the parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..arguments import bool_arg, int_arg, optional_int_arg, text_arg
from ..errors import InvalidArgumentError
from ..filter.vectorized import Sql92Filter
from ..paths import validate_topic
from ..results import DiskLimits
from ..schema import MESSAGE_SCHEMA


def parse_tag_filter(tags: object) -> set[str] | None:
    """``"A || B"`` -> {"A", "B"}; ``"*"``, ``""`` or ``None`` -> None (everything). Anything
    but a string that can be UTF-8 raises :class:`rmqlog.errors.InvalidArgumentError`."""
    if tags is None:
        return None
    text = text_arg("tags", tags, empty=True)
    parts = {t.strip() for t in text.split("||")}
    parts.discard("")
    if not parts or "*" in parts:
        return None
    return parts


def columns_arg(columns: object) -> tuple[str, ...] | None:
    """``columns`` of a read: ``None`` (all), or names of the message table's columns, each once
    (a list or tuple of strings); else :class:`rmqlog.errors.InvalidArgumentError` naming it."""
    if columns is None:
        return None
    if not isinstance(columns, list | tuple) or not columns or not all(isinstance(c, str) for c in columns):
        raise InvalidArgumentError(f"columns must be None or a non-empty list of column names, got {columns!r}")
    unknown = [c for c in columns if c not in MESSAGE_SCHEMA.names]
    if unknown:
        raise InvalidArgumentError(
            f"columns: {unknown[0]!r} is not a column of the message table ({', '.join(MESSAGE_SCHEMA.names)})"
        )
    if len(set(columns)) != len(columns):
        raise InvalidArgumentError(f"columns: {next(c for c in columns if columns.count(c) > 1)!r} is named twice")
    return tuple(columns)


def _disk_arg(disk: object) -> DiskLimits | None:
    if disk is None:
        return None
    if not isinstance(disk, DiskLimits):
        raise InvalidArgumentError(f"disk must be a DiskLimits or None, got {type(disk).__name__}")
    int_arg("disk.memory", disk.memory, 0)
    int_arg("disk.max_count", disk.max_count, 1)
    int_arg("disk.max_bytes", disk.max_bytes, 1)
    return disk


def _sql92_arg(sql92: object) -> Sql92Filter | None:
    if sql92 is not None and not isinstance(sql92, Sql92Filter):
        raise InvalidArgumentError(
            f"sql92 must be a compiled Sql92Filter (rmqlog.filter.compile_filter) or None, got {type(sql92).__name__}"
        )
    return sql92


@dataclass(frozen=True)
class WindowRequest:
    """One window read: the units of ``topic``/``queue_id`` from ``offset`` (before ``until``,
    ``None``: to the queue's end), at most ``max_count`` messages and, after the first,
    ``max_bytes`` bytes of records (``None``: no limit); ``wanted``: the tags asked for
    (``None``: every message); ``raw``: the stored records instead of the message table;
    ``disk``: RocketMQ's limits for the records it would read from disk; ``sql92``: the
    properties filter; ``columns``: only these columns of the message table (``None``: all).
    ``check_crc`` is resolved (the config's default applied)."""

    topic: str
    queue_id: int
    offset: int
    max_count: int
    max_bytes: int | None
    wanted: set[str] | None
    until: int | None
    check_crc: bool
    raw: bool
    disk: DiskLimits | None
    sql92: Sql92Filter | None
    columns: tuple[str, ...] | None

    @classmethod
    def of(
        cls,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int,
        max_bytes: int | None = None,
        tags: str | None = "*",
        until: int | None = None,
        check_crc: bool | None = None,
        raw: bool = False,
        disk: DiskLimits | None = None,
        sql92: Sql92Filter | None = None,
        columns: list[str] | tuple[str, ...] | None = None,
        crc: Callable[[object], bool],
    ) -> WindowRequest:
        """The request of these arguments, each checked (``crc``: resolves ``check_crc``)."""
        validate_topic(topic)
        queue_id, offset = int_arg("queue_id", queue_id), int_arg("offset", offset)
        max_count = int_arg("max_count", max_count)
        if max_count <= 0:  # RocketMQ answers nothing useful either; say so instead
            raise InvalidArgumentError(f"max_count must be positive, got {max_count}")
        max_bytes = optional_int_arg("max_bytes", max_bytes, 1)
        until = optional_int_arg("until", until)
        if until is not None and until <= offset:
            raise InvalidArgumentError(f"until ({until}) must be past offset ({offset})")
        wanted, checked, raw = parse_tag_filter(tags), crc(check_crc), bool_arg("raw", raw)
        return cls(
            topic,
            queue_id,
            offset,
            max_count,
            max_bytes,
            wanted,
            until,
            checked,
            raw,
            _disk_arg(disk),
            _sql92_arg(sql92),
            columns_arg(columns),
        )
