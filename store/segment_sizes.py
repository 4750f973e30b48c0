"""The store's segment sizes, recorded when it is created: ``config/segmentSizes.json``.

A commitlog segment's and a consume-queue file's size are properties of the store, not of
whoever opens it: a reader that maps a 2,000-byte consume-queue file as a 6,000,000-byte one
reads nothing right. So the first process that owns a store writes (RocketMQ's config names)::

    {"mappedFileSizeCommitLog": 1073741824, "mappedFileSizeConsumeQueue": 6000000, "crc": 1234567890}

``crc`` the zlib CRC-32 of ``"<commitlog>,<consume queue>"``. Every later opener, writer or
reader, in any process, uses these sizes whatever its own config says; a configured size that
differs is logged once (a warning: the store's sizes win, as they do for the index geometry,
:mod:`rmqlog.index.geometry`) and ``MessageStore.config`` holds the store's sizes.
Refusing such an opener (``ConfigError``) was the alternative: a reader with a default config
(the CLI, a notebook, a Spark executor) would then need the writer's settings to read at all.

Where the sizes come from, in order (a derived file never outweighs the log):

1. the commitlog's segments, when there are any (their most common size: the log itself; a
   record that disagrees is logged and left as it is);
2. the record, when it is sound (a damaged one is logged and ignored; a writer rewrites it);
3. the consume-queue files, for that size, when there are any (a store an older version
   created has no record);
4. the opener's config, and a writer records what it decided (durably, under ``config.lock``).

A reader that finds neither record nor files for a size (a read-only open of a store an older
version made, before any segment exists) holds that size *provisionally*: the first time it
needs it once a segment exists (:class:`rmqlog.log.mapped_file_queue.MappedFileQueue`), it
reads the record again, else the file's own size, and keeps that.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import safe_open
from .fileio import replace_file
from .paths import parse_segment_name

log = logging.getLogger(__name__)

SIZES_FILE = "segmentSizes.json"
#: within a Java int, as RocketMQ holds them
_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class SegmentSizes:
    """A commitlog segment's and a consume-queue file's size (bytes)."""

    commit_log: int
    consume_queue: int


def _crc(sizes: SegmentSizes) -> int:
    return zlib.crc32(f"{sizes.commit_log},{sizes.consume_queue}".encode())


def encode(sizes: SegmentSizes) -> bytes:
    """The file's content for ``sizes``."""
    return json.dumps(
        {
            "mappedFileSizeCommitLog": sizes.commit_log,
            "mappedFileSizeConsumeQueue": sizes.consume_queue,
            "crc": _crc(sizes),
        }
    ).encode()


def _decode(raw: bytes) -> SegmentSizes:
    """The sizes a file's bytes name; ``ValueError`` saying why when they name none."""
    try:
        doc: Any = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    got = []
    for name in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue"):
        v = doc.get(name)
        if (
            isinstance(v, bool)
            or not isinstance(v, int)
            or not _valid(v, *((4096, 1) if "CommitLog" in name else (20, 20)))
        ):
            raise ValueError(f"{name} is {v!r}, not a size a store can have")
        got.append(v)
    sizes = SegmentSizes(got[0], got[1])
    if doc.get("crc") != _crc(sizes):
        raise ValueError(f"crc {doc.get('crc')!r} does not match the sizes")
    return sizes


def recorded(config_dir: Path) -> SegmentSizes | None:
    """The sizes recorded in ``config_dir``, or ``None`` when there is no sound record (a
    damaged one is logged)."""
    path = config_dir / SIZES_FILE
    try:
        raw = safe_open.read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except IsADirectoryError:
        raw = b"a directory"
    try:
        return _decode(raw)
    except ValueError as exc:
        log.warning("%s: unreadable segment sizes (%s); taken from the files or the config instead", path, exc)
        return None


def commit_log_found(directory: Path) -> int | None:
    """The most common size of the commitlog's segments (``None``: none, or all empty)."""
    counts: dict[int, int] = {}
    for name, found in safe_open.entries(directory) if safe_open.is_folder(directory) else ():
        if found == safe_open.FILE and parse_segment_name(name) is not None:
            try:
                n = safe_open.lstat(directory / name).st_size
            except FileNotFoundError:
                continue
            if n > 0:
                counts[n] = counts.get(n, 0) + 1
    return max(counts, key=lambda n: (counts[n], n)) if counts else None


def resolve(
    config_dir: Path,
    configured: SegmentSizes,
    commit_log_found: int | None,
    consume_queue_found: int | None,
    *,
    read_only: bool,
) -> tuple[SegmentSizes, bool, bool]:
    """The store's sizes (see the module docstring) from the record in ``config_dir``, the sizes
        found on disk (``None``: no file of that kind) and ``configured``; a writer (not
        ``read_only``) records them when the record is missing or differs. The caller holds
        ``config.lock`` (shared when ``read_only``). A size found on disk that no store can have (a
    damaged segment) is not taken (recovery names the file); a sound record is never rewritten. Returns (sizes, whether
    the commitlog's size is
        provisional, whether the consume queues' is: a reader that found neither record nor file)."""
    record = recorded(config_dir)
    if commit_log_found is not None and not _valid(commit_log_found, 4096, 1):
        commit_log_found = None  # (a damaged segment: left to recovery, which names it)
    if consume_queue_found is not None and not _valid(consume_queue_found, 20, 20):
        consume_queue_found = None
    cl = commit_log_found or (record.commit_log if record else None)
    cq = (record.consume_queue if record else None) or consume_queue_found
    if record is not None and commit_log_found and commit_log_found != record.commit_log:
        log.warning(
            "%s records commitlog segments of %d bytes, the commitlog's are %d: the log's size is used "
            "(the record is left as it is)",
            config_dir / SIZES_FILE,
            record.commit_log,
            commit_log_found,
        )
    sizes = SegmentSizes(cl or configured.commit_log, cq or configured.consume_queue)
    if sizes != configured:
        log.warning(
            "the store's segment sizes (commitlog %d, consume queue %d bytes) are used, not the configured "
            "ones (%d, %d)",
            sizes.commit_log,
            sizes.consume_queue,
            configured.commit_log,
            configured.consume_queue,
        )
    if not read_only and record is None:
        replace_file(config_dir / SIZES_FILE, encode(sizes), durable=True)
    return sizes, read_only and cl is None, read_only and cq is None


def _valid(size: int, least: int, multiple: int) -> bool:
    """A size a store can have (:class:`rmqlog.StoreConfig`'s ranges)."""
    return least <= size <= _MAX and size % multiple == 0


def settler(config_dir: Path, pick: Callable[[SegmentSizes], int]) -> Callable[[], int | None]:
    """What a provisional size is settled by: the record's size (``pick`` of it), read again
    each time until there is one; ``None`` while there is none."""

    def settle() -> int | None:
        record = recorded(config_dir)
        return pick(record) if record is not None else None

    return settle
