"""The index's settings (:class:`IndexConfig`) and its files' names: RocketMQ's
``yyyyMMddHHmmssSSS`` of the creation time, local time, one millisecond on when two files are
created in the same one."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from .. import safe_open
from .layout import INT_MAX, file_size

INDEX_DIR = "index"
_NAME_RE = re.compile(r"[0-9]{17}")
_NAME_FORMAT = "%Y%m%d%H%M%S"
#: Suffix of a file a repair set aside.
DAMAGED_SUFFIX = ".damaged"


@dataclass(frozen=True)
class IndexConfig:
    """The index's settings, RocketMQ's ``MessageStoreConfig`` names in snake_case.

    - ``max_hash_slot_num``: hash slots per file (5,000,000);
    - ``max_index_num``: entries per file (20,000,000; a file takes one less key);
    - ``max_msgs_num_batch``: most offsets one query returns (64).

    A full-size file is ``40 + 4*slots + 20*entries`` = 420,000,040 bytes, created sparse.
    Raises :class:`rmqlog.errors.ConfigError` for a value out of range.
    """

    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    max_msgs_num_batch: int = 64

    def __post_init__(self) -> None:
        from ..errors import ConfigError

        for name in ("max_hash_slot_num", "max_index_num", "max_msgs_num_batch"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= INT_MAX:
                raise ConfigError(f"{name} must be an int in [1, {INT_MAX}], not {v!r}")
        if self.max_index_num < 2:
            raise ConfigError("max_index_num must be at least 2 (entry 0 is never used)")
        if file_size(self.max_hash_slot_num, self.max_index_num) > INT_MAX:
            # RocketMQ computes the size as a Java int
            raise ConfigError("40 + 4*max_hash_slot_num + 20*max_index_num must fit in a Java int")


def file_name(ms: int) -> str:
    """RocketMQ's ``UtilAll.timeMillisToHumanString``: ``yyyyMMddHHmmssSSS``, local time."""
    t = dt.datetime.fromtimestamp(ms / 1000.0)
    return t.strftime(_NAME_FORMAT) + f"{ms % 1000:03d}"


def next_file_name(after: str) -> str:
    """The name one millisecond after ``after`` (two files created in the same millisecond)."""
    t = dt.datetime.strptime(after[:14], _NAME_FORMAT) + dt.timedelta(milliseconds=int(after[14:]) + 1)
    return t.strftime(_NAME_FORMAT) + f"{t.microsecond // 1000:03d}"


def index_file_names(directory: Path) -> list[str]:
    """The index files' names in ``directory``, oldest first (none when it is absent)."""
    return sorted(n for n in safe_open.listdir_or_empty(directory) if _NAME_RE.fullmatch(n))
