"""A fault-injecting TCP proxy for the test hosts (this kernel has no ``netem``).

``FaultProxy(hosts, "p", 10911, ("10.231.0.3", 10911))`` listens on host ``p``'s address,
port 10911, on an asyncio loop of its own in a thread inside host ``p``'s namespace
(:meth:`Hosts.thread_in`), and forwards every connection to the target. Each direction of
every connection (``"up"``: client to target, ``"down"``: target to client) obeys its
direction's current mode, changed from the test's thread at any time:

- :meth:`stall` / :meth:`resume`: bytes are held (not read further: TCP's window fills, as on
  a link that stopped delivering) until resumed;
- :meth:`delay`: each chunk is forwarded that many seconds after it was read (a slow link);
- :meth:`drop`: chunks read are discarded (loss; on a byte stream the peer then sees a
  damaged or silent stream);
- :meth:`cut`: every open connection is reset (both sides), new ones are accepted as usual;
- :meth:`refuse`: new connections are reset at once.

``stats()`` counts connections accepted and bytes forwarded per direction.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from typing import Any

from .hosts import Hosts

DIRECTIONS = ("up", "down")
_CHUNK = 65536


class _Mode:
    def __init__(self) -> None:
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.delay_s = 0.0
        self.drop = False


class FaultProxy:
    """See the module docstring. ``close()`` (or the context manager) stops it."""

    def __init__(self, hosts: Hosts, host: str, port: int, target: tuple[str, int], *, timeout_s: float = 30) -> None:
        self.address = f"{hosts.addr(host)}:{port}"
        self._listen = (hosts.addr(host), port)
        self._target = target
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._modes: dict[str, _Mode] = {}
        self._conns: set[asyncio.StreamWriter] = set()
        self._refuse = False
        self._stats = {"accepted": 0, "up": 0, "down": 0}
        self._thread = hosts.thread_in(host, self._run, f"proxy-{host}")
        if not self._ready.wait(timeout_s):
            raise RuntimeError("the proxy did not start")
        if self._error is not None:
            raise RuntimeError(f"the proxy could not listen on {self.address}: {self._error}")

    # ---- the loop (in host p) --------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to the constructor if it happened at start
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._modes = {d: _Mode() for d in DIRECTIONS}
        server = await asyncio.start_server(self._serve, *self._listen)
        self._ready.set()
        async with server:
            await self._stop.wait()
            server.close()
            for w in list(self._conns):
                _reset(w)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._stats["accepted"] += 1
        if self._refuse:
            _reset(writer)
            return
        try:
            t_reader, t_writer = await asyncio.open_connection(*self._target)
        except OSError:
            _reset(writer)
            return
        self._conns.update((writer, t_writer))
        pumps = [
            asyncio.create_task(self._pump(reader, t_writer, "up")),
            asyncio.create_task(self._pump(t_reader, writer, "down")),
        ]
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for p in pumps:
            p.cancel()
        for w in (writer, t_writer):
            self._conns.discard(w)
            _reset(w)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str) -> None:
        mode = self._modes[direction]
        with contextlib.suppress(OSError, ConnectionError):
            while True:
                await mode.flowing.wait()  # a stall holds the bytes in the kernel: nothing more is read
                data = await reader.read(_CHUNK)
                if not data:
                    return
                if mode.delay_s > 0:
                    await asyncio.sleep(mode.delay_s)  # the injected latency itself
                await mode.flowing.wait()
                if mode.drop:
                    continue
                writer.write(data)
                await writer.drain()
                self._stats[direction] += len(data)

    # ---- control (from any thread) -----------------------------------------------------

    def _on_loop(self, fn: Any) -> Any:
        loop = self._loop
        assert loop is not None

        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), loop).result(30)

    def _mode(self, direction: str) -> _Mode:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}: {direction!r}")
        return self._modes[direction]

    def stall(self, direction: str) -> None:
        self._on_loop(lambda: self._mode(direction).flowing.clear())

    def resume(self, direction: str) -> None:
        self._on_loop(lambda: self._mode(direction).flowing.set())

    def delay(self, direction: str, seconds: float) -> None:
        self._on_loop(lambda: setattr(self._mode(direction), "delay_s", float(seconds)))

    def drop(self, direction: str, on: bool = True) -> None:
        self._on_loop(lambda: setattr(self._mode(direction), "drop", on))

    def refuse(self, on: bool = True) -> None:
        self._on_loop(lambda: setattr(self, "_refuse", on))

    def cut(self) -> int:
        """Reset every open connection; how many proxied connections there were."""

        def reset_all() -> int:
            conns = list(self._conns)
            self._conns.clear()
            for w in conns:
                _reset(w)
            return len(conns) // 2

        return int(self._on_loop(reset_all))

    def stats(self) -> dict[str, int]:
        return dict(self._on_loop(lambda: self._stats))

    def close(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a reset (RST), not a FIN: a cut, not a clean end."""
    transport = writer.transport
    if not transport.is_closing():
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # linger 0: close() sends RST
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
