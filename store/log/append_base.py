"""The append state's base: its large tables kept in a file of their own, so that a publish
writes only what changed (:mod:`rmqlog.log.append_state`).

A store with many queues has a large ``topicQueueTable`` (10 k topics of 4 queues: ~40 k
entries, ~1 MB of JSON). Written whole into ``append.state`` at every publish, it made the
cost of a one-message put grow with the number of queues of the store (~10 ms a put at 10 k
topics). Instead, once the tables pass :data:`DELTA_MAX_BYTES`, they are written once into a
base file and each publish's slot holds only the entries changed since (its *delta*) and the
base's generation; when the delta itself passes :data:`DELTA_MAX_BYTES` the tables are
compacted into a new base. A publish then costs O(entries changed since the last compaction),
bounded by :data:`DELTA_MAX_BYTES`; a compaction costs O(entries) and comes at most once per
that many bytes of changed entries.

File ``<root>/append.base.<generation, 16 hex digits>`` (ours), written once and never
changed (a new generation is a new file, made under ``append.lock``: ``.tmp`` then a rename,
never over a file in use):

```
offset 0   magic "RMQASBv1" (8 B), CRC-32 of the JSON (u32 BE), JSON length (u32 BE)
offset 16  JSON {"generation": G, "queues": {"<topic>/<queueId>": next offset, ...},
                 "writers": {"<writer id>": last sequence, ...}}
```

A slot naming generation ``G`` is the base's tables overlaid with the slot's delta. A base
that is missing, of another generation or fails its CRC makes the state unreadable, which
the store already handles: the state is rebuilt from the commitlog (a base is written before
the first slot that names it, so only a power loss that kept the slot and lost the base can
do that). Bases older than both slots' are removed after the publish that leaves them unused.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import zlib
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from .. import safe_open
from ..errors import CorruptStoreError
from ..fileio import replace_file

#: A delta (or a whole state without a base) past this many bytes of JSON is compacted into a
#: new base: bounds what one publish writes (a slot of ~8 KiB: ~250 queues changed since).
DELTA_MAX_BYTES = 8 << 10
BASE_PREFIX = "append.base."
BASE_MAGIC = b"RMQASBv1"
_BASE_HEADER = struct.Struct(">8sII")
_MISSING = object()


class BaseMissingError(CorruptStoreError):
    """The base a slot names is not there: removed after two compactions since the slot was
    read (a reader in another process: it reads the slots again), or lost with a power loss."""


class LayeredTable(MutableMapping[str, Any]):
    """A mapping read through a shared, never changed ``base`` and its own ``delta``: writes go
    to the delta; a copy copies only the delta (O(changes), not O(entries))."""

    __slots__ = ("base", "delta")

    def __init__(self, base: Mapping[str, Any] | None = None, delta: dict[str, Any] | None = None) -> None:
        self.base: Mapping[str, Any] = base if base is not None else {}
        self.delta: dict[str, Any] = delta if delta is not None else {}

    def __getitem__(self, key: str) -> Any:
        value = self.delta.get(key, _MISSING)
        if value is _MISSING:
            return self.base[key]
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = self.delta.get(key, _MISSING)
        return self.base.get(key, default) if value is _MISSING else value

    def __contains__(self, key: object) -> bool:
        return key in self.delta or key in self.base

    def __setitem__(self, key: str, value: Any) -> None:
        self.delta[key] = value

    def __delitem__(self, key: str) -> None:
        raise TypeError("entries of the append state are never removed")

    def __iter__(self) -> Iterator[str]:
        yield from self.base
        for key in self.delta:
            if key not in self.base:
                yield key

    def __len__(self) -> int:
        return len(self.base) + sum(1 for key in self.delta if key not in self.base)

    def __repr__(self) -> str:
        return f"LayeredTable({dict(self)!r})"

    def copy(self) -> LayeredTable:
        return LayeredTable(self.base, dict(self.delta))

    def flat(self) -> dict[str, Any]:
        """Base and delta as one plain dict (O(entries): a compaction)."""
        out = dict(self.base)
        out.update(self.delta)
        return out


def base_path(root: Path, generation: int) -> Path:
    return root / f"{BASE_PREFIX}{generation:016x}"


def parse_base_name(name: str) -> int | None:
    """The generation of a base file's name, ``None`` for any other name."""
    if not name.startswith(BASE_PREFIX) or len(name) != len(BASE_PREFIX) + 16:
        return None
    digits = name[len(BASE_PREFIX) :]
    if any(c not in "0123456789abcdef" for c in digits):
        return None
    return int(digits, 16)


def write_base(root: Path, generation: int, queues: dict[str, int], writers: dict[str, Any], *, durable: bool) -> None:
    """Write the base of ``generation`` (``.tmp`` then a rename; the caller holds the append lock).
    Raises :class:`rmqlog.errors.DiskFullError` on a full disk (nothing of it is then used)."""
    body = json.dumps({"generation": generation, "queues": queues, "writers": writers}, separators=(",", ":")).encode()
    replace_file(
        base_path(root, generation), _BASE_HEADER.pack(BASE_MAGIC, zlib.crc32(body), len(body)) + body, durable=durable
    )


def read_base(root: Path, generation: int) -> tuple[dict[str, int], dict[str, Any]]:
    """(queues, writers) of the base of ``generation``. Raises :class:`CorruptStoreError` when
    it is missing, of another generation, torn or unreadable (the state is then rebuilt)."""
    path = base_path(root, generation)
    try:
        fd = safe_open.open_file(path, 0)
    except FileNotFoundError:
        raise BaseMissingError(f"the append state's base {path.name} is missing", path=str(path)) from None
    try:
        head = _read_all(fd)
    finally:
        os.close(fd)
    if len(head) < _BASE_HEADER.size:
        raise CorruptStoreError("the append state's base is torn", path=str(path))
    magic, crc, length = _BASE_HEADER.unpack_from(head)
    body = head[_BASE_HEADER.size :]
    if magic != BASE_MAGIC or len(body) != length or zlib.crc32(body) != crc:
        raise CorruptStoreError("the append state's base fails its check", path=str(path))
    try:
        d = json.loads(body)
        if d["generation"] != generation:
            raise ValueError(f"generation {d['generation']}")
        return {str(k): int(v) for k, v in d["queues"].items()}, dict(d["writers"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptStoreError(f"unreadable append state base: {exc}", path=str(path)) from exc


def remove_bases_below(root: Path, generation: int) -> None:
    """Remove the bases older than ``generation`` (neither slot names them any more); best
    effort (a base left behind only holds space until the next compaction's removal)."""
    with contextlib.suppress(OSError):
        for name, found in safe_open.entries(root):
            gen = parse_base_name(name)
            if gen is not None and gen < generation and found == safe_open.FILE:
                with contextlib.suppress(OSError):
                    safe_open.unlink(root / name)


def _read_all(fd: int) -> bytes:
    parts: list[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
