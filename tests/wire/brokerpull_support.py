"""What the broker-pull tests share (their brokers are real ones:
:func:`wire.broker_helpers.make_broker`): a fake peer that records what the broker sends it,
request builders with the Java field names, and the commitlog's bytes read straight from the
segment files (what a pull body must equal)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rmqlog
from rmqnet.remoting import RemotingCommand

SEGMENT = 1 << 20


class FakePeer:
    """A connection as a processor sees it; records every oneway request sent to it."""

    _n = itertools.count(1)

    def __init__(self, remote: str | None = None) -> None:
        self.remote = remote or f"127.0.0.1:{50000 + next(self._n)}"
        self.attrs: dict[str, Any] = {}
        self.sent: list[RemotingCommand] = []
        self.on_close: list[Callable[[Any], None]] = []  # as the transport's Connection has
        self._closed = False

    def send_oneway(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        callbacks, self.on_close = self.on_close, []
        for cb in callbacks:
            cb(self)


_opaque = itertools.count(1)


def request(
    code: int, ext: dict[str, Any] | None = None, body: bytes = b"", *, oneway: bool = False
) -> RemotingCommand:
    return RemotingCommand(code, next(_opaque), 2 if oneway else 0, None, dict(ext or {}), body, "JAVA", 435)


def open_store(root: Path, clock: rmqlog.ManualClock, **kw: Any) -> rmqlog.MessageStore:
    config = rmqlog.StoreConfig(mapped_file_size_commit_log=SEGMENT, **kw)
    return rmqlog.MessageStore.open(root, config, clock=clock)


def segment_bytes(root: Path, offset: int, size: int) -> bytes:
    """``size`` bytes of the commitlog at ``offset``, read from its segment file."""
    start = offset - offset % SEGMENT
    with open(root / "commitlog" / f"{start:020d}", "rb") as f:
        f.seek(offset - start)
        return f.read(size)


#: a failing async test must fail, not hang the suite: not a timing assertion (every await in
#: these tests is answered by an event the test itself causes, in milliseconds)
HANG_GUARD_S = 120


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, HANG_GUARD_S))
