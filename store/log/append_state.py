"""The shared append state: the published tail and the next queue offsets.

File ``<root>/append.state`` (ours; RocketMQ tooling ignores it). The state itself is JSON:

```
{"version": 1, "tail": <commitlog offset>, "storeTimestamp": <ms>,
 "queues": {"<topic>/<queueId>": <next queue offset>, ...},
 "writers": {"<writer id>": <last sequence>, ...}}
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

The file holds two slots and every publish overwrites the older one in place (one
``pwrite``), instead of replacing the file (a rename costs ~1 ms on ext4, which flushes the
new file's data on rename-over; that capped small appends at ~1,000 per second):

```
offset 0   magic "RMQASTv2" (8 B), slot size (u32 BE), 0 (u32)
offset 16  slot 0: sequence (u64 BE), JSON length (u32 BE), CRC-32 of sequence+length+JSON (u32 BE), JSON
16 + size  slot 1: the same
```

The valid slot with the higher sequence is the state. A publish writes sequence + 1 into the
other slot, so the current state is never touched while it is current: a writer killed (or
a power loss) mid-publish leaves a slot whose CRC fails, and readers take the other one,
the previous state. Readers take no lock: a slot being overwritten under them fails its
CRC and they read again. A state that outgrows the slots is rewritten whole with bigger
slots (write a temporary file, rename). A file in the first format (plain JSON) is read
and converted on the next publish. If the file is missing or unreadable, it is rebuilt
from the commitlog (see ``MessageStore``).

Writers change it only under ``append.lock``.

A large state (many queues, many writers) keeps its tables in a base file and each slot only
the entries changed since, ``{"base": <generation>, "queues": {changed}, "writers": {changed}}``
beside ``tail`` and ``storeTimestamp`` (:mod:`rmqlog.log.append_base`): a publish writes
O(entries changed), never the whole ``topicQueueTable``. In memory both tables are
:class:`~rmqlog.log.append_base.LayeredTable` (the shared base under the state's own changes).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import safe_open
from ..errors import CorruptStoreError, raise_if_disk_full
from ..fileio import replace_file
from .append_base import (
    DELTA_MAX_BYTES,
    BaseMissingError,
    LayeredTable,
    read_base,
    remove_bases_below,
    write_base,
)

VERSION = 1
log = logging.getLogger(__name__)
#: One encoder for every publish: ``json.dumps`` with ``separators`` builds a new encoder
#: object per call (~5 us a put).
_ENCODER = json.JSONEncoder(separators=(",", ":"))


@dataclass
class AppendState:
    tail: int = 0
    store_timestamp: int = 0
    queues: LayeredTable = field(default_factory=LayeredTable)
    writers: LayeredTable = field(default_factory=LayeredTable)
    #: the generation of the base holding the tables under this state's changes (0: none,
    #: every entry is in the slot itself); see :mod:`rmqlog.log.append_base`
    base: int = field(default=0, compare=False)
    # where it was read from (not part of the JSON): slot sequence, slot index, slot size
    seq: int = field(default=0, compare=False)
    slot: int = field(default=-1, compare=False)
    slot_size: int = field(default=0, compare=False)
    ino: int | None = field(default=None, compare=False)
    #: both slots' 16-byte headers as this state's load read them (what :meth:`AppendStateFile.version` reads)
    heads: tuple[bytes, bytes] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self.layered()

    def layered(self) -> None:
        """Tables given (or assigned) as plain dicts become ones without a base (all of them changed)."""
        if not isinstance(self.queues, LayeredTable):
            self.queues = LayeredTable(None, dict(self.queues))
        if not isinstance(self.writers, LayeredTable):
            self.writers = LayeredTable(None, dict(self.writers))

    def to_bytes(self) -> bytes:
        """The slot's JSON: the whole state without a base, else the changes since it."""
        self.layered()
        d: dict[str, Any] = {"version": VERSION, "tail": self.tail, "storeTimestamp": self.store_timestamp}
        if self.base:
            d["base"] = self.base
        d["queues"], d["writers"] = self.queues.delta, self.writers.delta
        return _ENCODER.encode(d).encode()

    def copy(self) -> AppendState:
        """A copy the caller may change (O(changes since the base), not O(entries))."""
        return _copy(self)

    @classmethod
    def from_bytes(
        cls, raw: bytes, path: Path, bases: Callable[[int], tuple[dict[str, int], dict[str, Any]]] | None = None
    ) -> AppendState:
        """The state of a slot's JSON; ``bases``: the tables of a base generation (raises
        :class:`CorruptStoreError` when it cannot be read)."""
        try:
            d = json.loads(raw)
            if d.get("version") != VERSION:
                raise ValueError(f"version {d.get('version')}")
            base = int(d.get("base", 0))
            queues = {str(k): int(v) for k, v in d["queues"].items()}
            writers = dict(d.get("writers", {}))
            if base < 0 or (base and bases is None):
                raise ValueError(f"base {base}")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptStoreError(f"unreadable append state: {exc}", path=str(path)) from exc
        if not base:
            return cls(
                int(d["tail"]), int(d["storeTimestamp"]), LayeredTable(None, queues), LayeredTable(None, writers)
            )
        assert bases is not None
        base_queues, base_writers = bases(base)
        return cls(
            int(d["tail"]),
            int(d["storeTimestamp"]),
            LayeredTable(base_queues, queues),
            LayeredTable(base_writers, writers),
            base=base,
        )


def _copy(state: AppendState) -> AppendState:
    """A copy the caller may change (its deltas are its own; the base is shared, never changed)."""
    return AppendState(
        state.tail,
        state.store_timestamp,
        state.queues.copy(),
        state.writers.copy(),
        state.base,
        state.seq,
        state.slot,
        state.slot_size,
        state.ino,
        state.heads,
    )


MAGIC = b"RMQASTv2"
_HEADER = struct.Struct(">8sII")
_SLOT_HEADER = struct.Struct(">QII")
MIN_SLOT = 64 << 10


class AppendStateFile:
    """Load and publish :class:`AppendState` (callers hold the append lock to publish)."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self._flags = os.O_RDONLY if read_only else os.O_RDWR  # read_only: a read-only store's
        self._fd: int | None = None
        self._dir_fd: int | None = None  # the folder holding the file, for the identity check
        self._ino: int | None = None
        self._open_lock = threading.Lock()
        self._stale_fds: list[int] = []
        # the last state this process loaded or published, keyed by its slot header (file,
        # sequence, slot, length, CRC): while the newest slot still has that header, load()
        # returns a copy instead of reading and parsing the JSON again (~50 us a put)
        self._cache: tuple[tuple[int | None, int, int, int, int], AppendState] | None = None
        self._slot_size: tuple[int | None, int] | None = None  # (inode, slot size) of a file read
        #: the :meth:`version` token of the state this process published last (``None``: unknown)
        self.published_version: tuple[int | None, bytes, bytes, int] | None = None
        #: whether this process is inside :meth:`publish` (it holds the append lock: no other
        #: process publishes meanwhile); the dispatcher's watch, woken by that publish before
        #: :attr:`published_version` names it, tells it is this process's own by this
        self.publishing = False
        #: the bases read or written, by generation (the two newest kept: the slots name at
        #: most two); their tables are shared by every state of that generation, never changed
        self._bases: dict[int, tuple[dict[str, int], dict[str, Any]]] = {}

    def _base(self, generation: int) -> tuple[dict[str, int], dict[str, Any]]:
        """The tables of base ``generation`` (read once per process)."""
        found = self._bases.get(generation)
        if found is None:
            found = read_base(self.path.parent, generation)
            self._keep_base(generation, found)
        return found

    def _keep_base(self, generation: int, tables: tuple[dict[str, int], dict[str, Any]]) -> None:
        bases = dict(self._bases)  # (replaced whole: readers in other threads iterate none)
        bases[generation] = tables
        for old in sorted(bases)[:-2]:
            del bases[old]
        self._bases = bases

    def _compact(self, state: AppendState, *, durable: bool) -> None:
        """Fold ``state``'s changes into a new base (the caller holds the append lock and
        publishes ``state`` next): its tables become the new base's, its deltas empty."""
        generation = state.base + 1
        queues, writers = state.queues.flat(), state.writers.flat()
        write_base(self.path.parent, generation, queues, writers, durable=durable)
        self._keep_base(generation, (queues, writers))
        state.queues, state.writers = LayeredTable(queues), LayeredTable(writers)
        state.base = generation

    def _remember(self, key: tuple[int | None, int, int, int, int], state: AppendState) -> None:
        self._cache = (key, _copy(state))

    def _open(self) -> int | None:
        """A descriptor on the current file (reopened when the file was replaced).

        Under a lock: two threads opening at once each saw the other's half-set descriptor
        as stale and one closed it while the other was about to read (or write) through it.
        """
        with self._open_lock:
            return self._open_locked()

    def _open_locked(self) -> int | None:
        if self._fd is not None and self._dir_fd is not None:
            # the file open is still the one at the path while the name in the kept folder
            # descriptor names its inode: one ``fstat`` and one ``fstatat`` instead of walking
            # the path (the parent's safe open, a ``stat``, a close: ~20-40 us of every
            # append). Not ``st_nlink``: a rewrite renames a new file over the path, and the
            # old inode keeps a link if anything else links it (a hard-linked snapshot)
            try:
                if safe_open.still_named(self._dir_fd, self.path.name, os.fstat(self._fd)):
                    return self._fd
            except OSError:
                pass  # the path decides below
        if self._dir_fd is None:
            with contextlib.suppress(OSError):  # (then no fast path: the path is walked each time)
                self._dir_fd = safe_open.open_folder(self.path.parent)
        try:
            st = safe_open.lstat(self.path)
        except FileNotFoundError:
            return None
        if self._fd is None or self._ino != st.st_ino:
            if self._fd is not None:
                # the file was replaced: another thread may still be reading the old one
                # through this descriptor, so it is closed with the store, not now
                self._stale_fds.append(self._fd)
                self._fd = None
            try:
                self._fd = safe_open.open_file(self.path, self._flags)
            except FileNotFoundError:
                return None
            self._ino = os.fstat(self._fd).st_ino
        return self._fd

    def close(self) -> None:
        with self._open_lock:
            for fd in self._stale_fds:
                os.close(fd)
            self._stale_fds.clear()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            if self._dir_fd is not None:
                os.close(self._dir_fd)
                self._dir_fd = None

    def __del__(self) -> None:
        self.close()

    def _read_slots(self, fd: int, copy: bool = True) -> tuple[AppendState, int, int] | None | bytes:
        """(state, sequence, slot) of the newest valid slot; the raw bytes of an old-format file."""
        known = self._slot_size  # one read: the header never changes in a file (a rewrite is a new file)
        if known is not None and known[0] == self._ino:
            size = known[1]
        else:
            head = os.pread(fd, _HEADER.size, 0)
            if head[:1] == b"{" or len(head) < _HEADER.size or head[:8] != MAGIC:
                return head + os.pread(fd, 1 << 30, _HEADER.size) if head[:1] == b"{" else None
            _, size, _ = _HEADER.unpack(head)
            self._slot_size = (self._ino, size)
        found: list[tuple[int, int, int, int]] = []
        heads = (os.pread(fd, _SLOT_HEADER.size, _HEADER.size), os.pread(fd, _SLOT_HEADER.size, _HEADER.size + size))
        for slot in (0, 1):
            h = heads[slot]
            if len(h) == _SLOT_HEADER.size:
                seq, length, crc = _SLOT_HEADER.unpack(h)
                if 0 < length <= size - _SLOT_HEADER.size:
                    found.append((seq, slot, length, crc))
        for seq, slot, length, crc in sorted(found, reverse=True):
            key = (self._ino, seq, slot, length, crc)
            cache = self._cache  # one read: another thread may replace it meanwhile
            if cache is not None and cache[0] == key:  # unchanged since this process saw it
                got = _copy(cache[1]) if copy else cache[1]
                if copy:
                    got.heads = heads
                return got, seq, slot
            raw = os.pread(fd, _SLOT_HEADER.size + length, _HEADER.size + slot * size)
            seq2, length2, crc2 = _SLOT_HEADER.unpack_from(raw)
            body = raw[_SLOT_HEADER.size :]
            if (seq2, length2, crc2) == (seq, length, crc) and zlib.crc32(raw[:12] + body) == crc:
                try:
                    state = AppendState.from_bytes(body, self.path, self._base)
                except BaseMissingError:
                    continue  # overwritten since, or lost: the other slot, else read again
                state.seq, state.slot, state.slot_size, state.ino = seq, slot, size, self._ino
                state.heads = heads
                self._remember(key, state)
                return state, seq, slot
        return None

    def version(self) -> tuple[int, bytes, bytes, int] | None:
        """A token that changes whenever a new state is published: ``(inode, slot 0's header,
        slot 1's header, that state's tail)``, read through the descriptor already open (one ``fstat``, one
        ``fstatat`` and two 16-byte ``pread``; no path walked, no lock, no JSON), for a
        poller's "anything new?" before it does real work (the dispatcher's idle rounds).

        Only for the state this process loaded or published last: the newest slot header
        must be that state's (sequence, slot, length, CRC). A publish writes its header with
        its JSON in one ``pwrite``, and a reader can see the new header while the JSON is
        still being copied (its CRC then fails and :meth:`load` returns the previous state):
        a token taken then would name a state nobody loaded, and a poller that compared
        tokens would miss it. ``None`` when it cannot tell (that case, nothing loaded yet,
        another publish since, the file replaced, a first-format file): the caller does its
        full look, whose :meth:`load` reads what is there.
        """
        fd, ino, known, cache, dir_fd = self._fd, self._ino, self._slot_size, self._cache, self._dir_fd
        if fd is None or known is None or known[0] != ino or ino is None or cache is None or dir_fd is None:
            return None
        try:
            if not safe_open.still_named(dir_fd, self.path.name, os.fstat(fd)):  # replaced: load() reopens
                return None
            size = known[1]
            heads = os.pread(fd, _SLOT_HEADER.size, _HEADER.size), os.pread(fd, _SLOT_HEADER.size, _HEADER.size + size)
        except OSError:  # closed meanwhile (the store closing): the caller's full look decides
            return None
        if any(len(h) != _SLOT_HEADER.size for h in heads):
            return None
        slots = [(*_SLOT_HEADER.unpack(h), slot) for slot, h in enumerate(heads)]
        seq, length, crc, slot = max(slots)
        if cache[0] != (ino, seq, slot, length, crc):
            return None
        return ino, heads[0], heads[1], cache[1].tail

    def load(self, *, copy: bool = True) -> AppendState | None:
        """The published state, or ``None`` when there is none yet or it is unreadable.

        Unreadable happens after a power loss (both slots torn, or an empty file). The caller
        rebuilds it from the commitlog. ``copy=False``: the state this process keeps (no copy
        made), for a caller that only reads it and never changes it (the published tail).
        """
        for _ in range(20):  # a slot overwritten while we read it fails its CRC: read again
            fd = self._open()
            if fd is None:
                return None
            try:
                got = self._read_slots(fd, copy)
                if isinstance(got, bytes):
                    return AppendState.from_bytes(got, self.path)  # first format: plain JSON
            except CorruptStoreError as exc:
                log.warning("%s; it will be rebuilt from the commitlog", exc)
                return None
            if got is not None:
                return got[0]
        log.warning("append state %s has no valid slot; it will be rebuilt from the commitlog", self.path)
        return None

    def publish(self, state: AppendState, *, durable: bool = False) -> None:
        """Write ``state`` as the newest slot (caller holds the append lock).

        ``state`` is either new (a rebuild) or was returned by :meth:`load` under the same
        hold of the append lock: then it is written into the slot after the one it was read
        from, with no read of the file again. Changes past :data:`DELTA_MAX_BYTES` are first
        compacted into a new base (:mod:`rmqlog.log.append_base`).
        """
        state.layered()
        body = state.to_bytes()
        compacted = False
        self.publishing = True
        try:
            if len(body) > DELTA_MAX_BYTES and (state.queues.delta or state.writers.delta):
                self._compact(state, durable=durable)
                body = state.to_bytes()
                compacted = True
            self._publish(state, body, durable=durable)
        finally:
            self.publishing = False
        if compacted:
            # the other slot names the previous generation (or none): older ones are unused now
            remove_bases_below(self.path.parent, state.base - 1)

    def _publish(self, state: AppendState, body: bytes, *, durable: bool) -> None:
        # loaded under this same hold of the append lock, the file cannot have been replaced
        # since (replacing it takes that lock): no stat of the path to check
        fd = self._fd if state.slot >= 0 and self._fd is not None and self._ino == state.ino else self._open()
        if fd is not None and state.slot >= 0 and self._ino == state.ino:
            seq, slot, size = state.seq, state.slot, state.slot_size  # loaded under this same lock
        else:
            current = self._read_slots(fd) if fd is not None else None
            if not isinstance(current, tuple):
                self._rewrite(state, body, durable=durable)
                return
            seq, slot, size = current[1], current[2], current[0].slot_size
        if _SLOT_HEADER.size + len(body) > size:
            self._rewrite(state, body, durable=durable)
            return
        seq += 1
        slot = 1 - slot
        head = _SLOT_HEADER.pack(seq, len(body), 0)
        crc = zlib.crc32(head[:12] + body)
        data = _SLOT_HEADER.pack(seq, len(body), crc) + body
        assert fd is not None
        try:
            os.pwrite(fd, data, _HEADER.size + slot * size)  # into the file's own blocks: no new one needed
            if durable:
                os.fdatasync(fd)
        except OSError as exc:
            raise_if_disk_full(exc, self.path, "publishing the append state")
            raise
        state.seq, state.slot, state.slot_size, state.ino = seq, slot, size, self._ino
        if state.heads is not None:  # (loaded under this lock hold: the other slot is as read)
            heads = list(state.heads)
            heads[slot] = data[: _SLOT_HEADER.size]
            state.heads = (heads[0], heads[1])
            self.published_version = (self._ino, heads[0], heads[1], state.tail)
        self._remember((self._ino, seq, slot, len(body), crc), state)

    def _rewrite(self, state: AppendState, body: bytes, *, durable: bool) -> None:
        """A new file with slots big enough (twice what the state needs, at least MIN_SLOT)."""
        size = max(MIN_SLOT, 1 << (2 * (_SLOT_HEADER.size + len(body)) - 1).bit_length())
        seq = state.seq + 1
        head = _SLOT_HEADER.pack(seq, len(body), 0)
        slot0 = _SLOT_HEADER.pack(seq, len(body), zlib.crc32(head[:12] + body)) + body
        data = _HEADER.pack(MAGIC, size, 0) + slot0.ljust(size, b"\0") + bytes(size)
        replace_file(self.path, data, durable=durable)
        self._open()
        state.seq, state.slot, state.slot_size, state.ino = seq, 0, size, self._ino
