"""Redis Streams as a peer of the broker benchmark (``jobs/bench_broker.py``): RESP spoken
directly over a socket, no client library.

- :func:`command` encodes one RESP command (an array of bulk strings); the benchmark encodes
  every request before its clock starts, as it does for the broker's frames.
- :class:`RespReader` takes bytes in and hands back whole replies (sans-I/O: no socket): simple
  strings, errors (as :class:`RespError` values, not raised), integers, bulk strings, arrays.
- :class:`RedisWire` is the blocking client of the one-at-a-time figures (the shape of the
  broker's ``Wire``: a socket with TCP_NODELAY, one request written, its reply read).
- :class:`RespCounter` counts a pipelined load's replies for ``broker_load.Pipeline``:
  ``XADD`` replies as messages stored, ``XREAD`` replies by the entries they hold.
- :func:`redis_argv` is the ``redis-server`` command line of one instance: 127.0.0.1, a port
  and a data folder of the benchmark's, the append-only file on with the given
  ``appendfsync`` (``always``: each write command's AOF write fsynced before its reply;
  ``everysec``: fsynced by a background thread once a second), no RDB snapshots.

Streams are named ``<topic>:<queue>``; the pull figures' streams are filled with explicit
ids ``0-1, 0-2, ...`` so that pipelined ``XREAD`` requests know their start ids beforehand
(``XREAD ... STREAMS s 0-N`` answers the entries after ``0-N``).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the reply code a counter books for a Redis error reply (the broker's codes are >= 0)
ERROR_CODE = -1


@dataclass(frozen=True)
class RespError:
    """An error reply (``-ERR ...``)."""

    text: str


def command(*args: bytes | str | int) -> bytes:
    """One RESP command: ``*N`` then each argument as a bulk string."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def xadd(stream: str, body: bytes, entry_id: str = "*") -> bytes:
    """``XADD stream id body <body>`` (one field, named ``body``)."""
    return command("XADD", stream, entry_id, "body", body)


def xread(stream: str, after: str, count: int, *, block_ms: int | None = None) -> bytes:
    """``XREAD [BLOCK ms] COUNT n STREAMS stream after``: up to ``count`` entries after id ``after``."""
    block = ("BLOCK", block_ms) if block_ms is not None else ()
    return command("XREAD", *block, "COUNT", count, "STREAMS", stream, after)


class RespReader:
    """Whole RESP replies out of a byte stream (``feed`` returns those completed so far)."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list[Any]:
        self.buf += data
        out = []
        pos = 0
        while True:
            got = _parse(self.buf, pos)
            if got is None:
                break
            value, pos = got
            out.append(value)
        self.buf = self.buf[pos:]
        return out


def _parse(buf: bytes, pos: int) -> tuple[Any, int] | None:
    """The reply starting at ``pos`` and the position after it; None if it is not all here."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        return None
    kind, line = buf[pos : pos + 1], buf[pos + 1 : end]
    nxt = end + 2
    if kind == b"+":
        return line, nxt
    if kind == b"-":
        return RespError(line.decode(errors="replace")), nxt
    if kind == b":":
        return int(line), nxt
    if kind == b"$":
        n = int(line)
        if n < 0:
            return None, nxt
        if len(buf) < nxt + n + 2:
            return None
        return buf[nxt : nxt + n], nxt + n + 2
    if kind == b"*":
        n = int(line)
        if n < 0:
            return None, nxt
        items = []
        for _ in range(n):
            got = _parse(buf, nxt)
            if got is None:
                return None
            item, nxt = got
            items.append(item)
        return items, nxt
    raise ValueError(f"not a RESP reply at byte {pos}: {buf[pos : pos + 40]!r}")


def xread_entries(reply: Any) -> int:
    """How many entries an ``XREAD`` reply holds (0 for a null reply: nothing arrived)."""
    if reply is None:
        return 0
    return sum(len(entries) for _name, entries in reply)


class RedisWire:
    """A blocking connection for one-at-a-time requests (TCP_NODELAY, the reply read whole)."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = RespReader()
        self.pending: list[Any] = []

    def send(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def read(self) -> Any:
        """The next reply; ``RuntimeError`` for an error reply."""
        while not self.pending:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("redis-server closed the connection")
            self.pending.extend(self.reader.feed(data))
        reply = self.pending.pop(0)
        if isinstance(reply, RespError):
            raise RuntimeError(f"redis-server answered {reply.text!r}")
        return reply

    def call(self, frame: bytes) -> Any:
        self.send(frame)
        return self.read()

    def take(self, data: bytes) -> list[Any]:
        """The replies completed by ``data`` (bytes this caller read from :attr:`sock`)."""
        return self.reader.feed(data)

    def close(self) -> None:
        self.sock.close()


class RespCounter:
    """Counts a pipelined load's replies (``broker_load.Pipeline``): ``feed`` returns how many
    requests were answered and books each on ``outcome`` (code 0 for a reply, ``ERROR_CODE``
    for an error reply; messages: one per ``XADD``, an ``XREAD``'s entries with ``entries``)."""

    def __init__(self, outcome: Any, *, entries: bool) -> None:
        self.outcome, self.entries = outcome, entries
        self.reader = RespReader()

    def feed(self, data: bytes) -> tuple[int, bytes]:
        replies = self.reader.feed(data)
        codes = self.outcome.codes
        for r in replies:
            if isinstance(r, RespError):
                codes[ERROR_CODE] = codes.get(ERROR_CODE, 0) + 1
                continue
            codes[0] = codes.get(0, 0) + 1
            self.outcome.messages += xread_entries(r) if self.entries else 1
        return len(replies), b""


def redis_argv(binary: str, port: int, folder: Path, fsync: str) -> list[str]:
    """``redis-server`` serving 127.0.0.1:``port`` with its files in ``folder``: the AOF on,
    ``appendfsync`` = ``fsync``, no RDB snapshots, the log on stdout."""
    return [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(folder),
        "--appendonly",
        "yes",
        "--appendfsync",
        fsync,
        "--save",
        "",
        "--protected-mode",
        "no",
        "--daemonize",
        "no",
        "--logfile",
        "",
    ]


def redis_ready(port: int) -> bool:
    """Whether the instance on ``port`` answers ``PING``."""
    try:
        w = RedisWire(port)
    except OSError:
        return False
    try:
        return bool(w.call(command("PING")) == b"PONG")
    except (OSError, RuntimeError):
        return False
    finally:
        w.close()


def blocked_clients(wire: RedisWire) -> int:
    """``INFO clients``' ``blocked_clients``: connections waiting in a blocking command."""
    info = wire.call(command("INFO", "clients")).decode()
    for line in info.splitlines():
        if line.startswith("blocked_clients:"):
            return int(line.split(":", 1)[1])
    raise RuntimeError(f"INFO clients has no blocked_clients: {info!r}")
