"""``config/replicationCheckpoint.json``: how far a replication slave acknowledged this store's
commitlog while this store was a master (ours; RocketMQ 4.x has no such file).

```
{"slaveAckOffset": 1234567, "timestamp": 1700000000000}
```

- ``slaveAckOffset``: a commitlog offset ``A`` (a Java long >= 0) some slave reported holding
  (the master's ``push2SlaveMaxOffset``), or ``null``: nothing recorded (cleared). ``[0, A)``
  of this log is on a slave; a slave may have been promoted with it, so a store that comes
  back as a slave compares what lies past ``A`` with its new master's log before it trusts it
  (``rmqnet.ha.slave``). ``A`` may fall inside a record (a slave acknowledged part of one).
- ``timestamp``: the store's wall clock (ms) when it was written (for a person reading it).

Written as ``config_files`` writes RocketMQ's files: ``<f>.tmp`` then a rename, the previous
content kept as ``<f>.bak``, under ``config.lock``; read with the ``.bak`` as fallback
(:func:`rmqlog.config_files.load_fastjson`); when neither can be read,
:class:`rmqlog.errors.CorruptStoreError` names the file. An older value read back after a
crash (the ``.bak``, or a write a power loss undid) is never wrong, only less: a smaller ``A``
means more of the log is compared, never less.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..arguments import JAVA_LONG_MAX
from ..config_files import load_fastjson
from ..fileio import InterProcessLock, replace_file

FILE_NAME = "replicationCheckpoint.json"


def _decode(raw: Any) -> int | None:
    value = raw["slaveAckOffset"]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= JAVA_LONG_MAX:
        raise ValueError(f"slaveAckOffset {value!r} is not an int in [0, 2**63)")
    return value


class ReplicationCheckpointFile:
    """Read and replace ``config/replicationCheckpoint.json`` (see the module docstring)."""

    def __init__(self, path: Path, lock: InterProcessLock, wall_ms: Callable[[], int]) -> None:
        self.path = path
        self.lock = lock
        self.wall_ms = wall_ms

    def read(self) -> int | None:
        """The recorded offset; ``None`` when there is no file or it was cleared. Raises
        :class:`rmqlog.errors.CorruptStoreError` when neither it nor its ``.bak`` can be read."""
        return load_fastjson(self.path, _decode)

    def write(self, offset: int | None) -> None:
        """Record ``offset`` (``None``: clear), atomically, the previous content kept as ``.bak``."""
        body = json.dumps({"slaveAckOffset": offset, "timestamp": self.wall_ms()}, indent="\t").encode()
        with self.lock.held():
            replace_file(self.path, body, keep_backup=True)
