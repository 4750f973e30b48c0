"""``config/delayOffset.json``: how far the scheduler has delivered each delay level.

RocketMQ's ``ScheduleMessageService`` persists its ``offsetTable`` (level -> the next queue
offset of ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` to deliver) with fastjson, whose
integer map keys are not quoted (``{"offsetTable":{1:5,2:0}}``, tab-indented).

Read: RocketMQ's files (unquoted keys), ours, or the ``.bak`` when the file is unreadable
(:func:`rmqlog.config_files.load_fastjson`). Written the same way, atomically, the previous
content kept as ``.bak`` (RocketMQ's ``MixAll.string2File``). The file is a hint: the
scheduler's idempotence markers in the commitlog are the truth (see
:mod:`rmqlog.schedule.scheduler`), so a stale or lost file never repeats a delivery.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..config_files import dump_fastjson, load_fastjson
from ..fileio import replace_file

FILE_NAME = "delayOffset.json"
_QUOTED_INT_KEY = re.compile(r'"(-?[0-9]+)":')


def _decode(raw: Any) -> dict[int, int]:
    table = raw["offsetTable"]
    if not isinstance(table, dict):
        raise TypeError("offsetTable is not an object")
    out = {}
    for k, v in table.items():
        level, offset = int(k), int(v)
        if level < 1 or offset < 0:
            raise ValueError(f"level {level} at offset {offset}")
        out[level] = offset
    return out


def load_delay_offsets(path: Path) -> dict[int, int]:
    """level -> next queue offset; ``{}`` when there is no file. Raises
    :class:`rmqlog.errors.CorruptStoreError` naming the file when neither it nor its ``.bak``
    can be read."""
    loaded = load_fastjson(path, _decode)
    return loaded if loaded is not None else {}


def encode_delay_offsets(offsets: dict[int, int]) -> bytes:
    """RocketMQ's layout: tab-indented, integer keys unquoted."""
    text = dump_fastjson({"offsetTable": {str(k): int(v) for k, v in sorted(offsets.items())}}).decode()
    return _QUOTED_INT_KEY.sub(r"\1:", text).encode()


def save_delay_offsets(path: Path, offsets: dict[int, int]) -> None:
    """Replace the file atomically (the old content kept as ``.bak``)."""
    replace_file(path, encode_delay_offsets(offsets), keep_backup=True)
