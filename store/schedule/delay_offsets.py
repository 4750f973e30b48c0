"""``config/delayOffset.json``: how far the scheduler has delivered each delay level.

RocketMQ's ``ScheduleMessageService`` persists its ``offsetTable`` (level -> the next queue
offset of ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` to deliver) with fastjson, whose
integer map keys are not quoted (``{"offsetTable":{1:5,2:0}}``, tab-indented).

Read: RocketMQ's files (unquoted keys), ours, or the ``.bak`` when the file is unreadable
(:func:`rmqlog.config_files.load_fastjson`). Written the same way, atomically, the previous
content kept as ``.bak`` (RocketMQ's ``MixAll.string2File``). Levels are ints in
``[1, 2**31)``, offsets in ``[0, 2**63)`` (JSON integers, not floats or booleans); anything
else makes the file unreadable. The file is a hint: the scheduler's idempotence markers in
the commitlog are the truth, and the file is checked against them and against the queues'
bounds before it is followed (see :mod:`rmqlog.schedule.scheduler`), so a stale, lost or
wrong file never repeats nor strands a delivery of this store. When neither the file nor its
``.bak`` can be read, the pass stops with :class:`rmqlog.errors.CorruptStoreError` saying
``repair=True``, which sets both aside (``<name>.damaged-<ms>``) and lets every level resume
from the log.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..config_files import dump_fastjson, load_fastjson, set_aside_if_unreadable
from ..errors import CorruptStoreError
from ..fileio import replace_file

FILE_NAME = "delayOffset.json"
_QUOTED_INT_KEY = re.compile(r'"(-?[0-9]+)":')


def _decode(raw: Any) -> dict[int, int]:
    table = raw["offsetTable"]
    if not isinstance(table, dict):
        raise TypeError("offsetTable is not an object")
    out = {}
    for k, v in table.items():
        if not (isinstance(k, str) and k.isascii() and k.isdigit() and len(k) <= 10 and 1 <= int(k) < 1 << 31):
            raise ValueError(f"level {k!r} is not an int in [1, 2**31)")
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 63:
            raise ValueError(f"level {k}: offset {v!r} is not an int in [0, 2**63)")
        out[int(k)] = v
    return out


def set_aside_if_unreadable_offsets(config_dir: Path) -> Path | None:
    """``repair``: move ``delayOffset.json`` (and ``.bak``) aside as ``<name>.damaged-<ms>`` when
    neither can be read as an offset table; returns the new name, or ``None``."""
    return set_aside_if_unreadable(config_dir / FILE_NAME, _decode)


def load_delay_offsets(path: Path) -> dict[int, int]:
    """level -> next queue offset; ``{}`` when there is no file. Raises
    :class:`rmqlog.errors.CorruptStoreError` naming the file when neither it nor its ``.bak``
    can be read."""
    try:
        loaded = load_fastjson(path, _decode)
    except CorruptStoreError as exc:
        raise CorruptStoreError(
            f"{str(exc).removesuffix(f'; file {path}')}; open the store with repair=True to set it aside and resume "
            "every "
            "delay level from the log",
            path=str(path),
        ) from None
    return loaded if loaded is not None else {}


def encode_delay_offsets(offsets: dict[int, int]) -> bytes:
    """RocketMQ's layout: tab-indented, integer keys unquoted."""
    text = dump_fastjson({"offsetTable": {str(k): int(v) for k, v in sorted(offsets.items())}}).decode()
    return _QUOTED_INT_KEY.sub(r"\1:", text).encode()


def save_delay_offsets(path: Path, offsets: dict[int, int]) -> None:
    """Replace the file atomically (the old content kept as ``.bak``)."""
    replace_file(path, encode_delay_offsets(offsets), keep_backup=True)
