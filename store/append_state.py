"""The shared append state: the published tail and the next queue offsets.

File ``<root>/append.state`` (ours; RocketMQ tooling ignores it), JSON:

```
{"version": 1, "tail": <commitlog offset>, "storeTimestamp": <ms>,
 "queues": {"<topic>/<queueId>": <next queue offset>, ...},
 "writers": {"<writer id>": <opaque marker>, ...}}
```

- ``tail`` is the *published* end of the commitlog: every byte below it is a whole, valid
  record (or blank), and no reader or dispatcher looks past it. Bytes past it may be a
  crashed writer's leftovers; the next append scrubs them.
- ``queues`` is RocketMQ's ``topicQueueTable``: the QUEUEOFFSET the next message of each
  queue gets. Assigned under the append lock, so offsets are dense and unique per queue.
- ``storeTimestamp`` is the last STORETIMESTAMP given; store times never go back, so a
  queue's store times are sorted and a binary search can find an offset for a time.
- ``writers`` holds idempotence markers published atomically with the data they describe
  (used by the Spark sink to make replays no-ops).

Writers change it only under ``append.lock`` and replace it atomically (write ``.tmp``,
rename), so a reader sees the old or the new state, never a mix, and a writer killed at any
instant leaves the previous state: its unpublished bytes are simply not part of the log.
If the file is missing or unreadable, it is rebuilt from the commitlog (see ``MessageStore``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CorruptStoreError
from .fileio import replace_file

VERSION = 1
log = logging.getLogger(__name__)


@dataclass
class AppendState:
    tail: int = 0
    store_timestamp: int = 0
    queues: dict[str, int] = field(default_factory=dict)
    writers: dict[str, Any] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return json.dumps(
            {"version": VERSION, "tail": self.tail, "storeTimestamp": self.store_timestamp,
             "queues": self.queues, "writers": self.writers},
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, path: Path) -> AppendState:
        try:
            d = json.loads(raw)
            if d.get("version") != VERSION:
                raise ValueError(f"version {d.get('version')}")
            return cls(int(d["tail"]), int(d["storeTimestamp"]),
                       {str(k): int(v) for k, v in d["queues"].items()}, dict(d.get("writers", {})))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptStoreError(f"unreadable append state: {exc}", path=str(path)) from exc


class AppendStateFile:
    """Load and publish :class:`AppendState` (callers hold the append lock to publish)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> AppendState | None:
        """The published state, or ``None`` when there is none yet or it is unreadable.

        Unreadable happens after a power loss: the rename of a state file whose bytes never
        reached the disk can leave it empty. The caller rebuilds it from the commitlog.
        """
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return AppendState.from_bytes(raw, self.path)
        except CorruptStoreError as exc:
            log.warning("%s; it will be rebuilt from the commitlog", exc)
            return None

    def publish(self, state: AppendState, *, durable: bool = False) -> None:
        replace_file(self.path, state.to_bytes(), durable=durable)
