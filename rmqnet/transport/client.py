"""The dialling side: :class:`ClientConnection`, one connection to a broker or name server.

``conn = await ClientConnection.connect(host, port)``; then ``await conn.invoke(cmd,
timeout_s)`` from any number of tasks at once (each request gets its opaque here, answers are
matched by it, in any order), ``conn.invoke_oneway(cmd)``, and ``conn.request_handler`` for
requests the server sends (NOTIFY_CONSUMER_IDS_CHANGED; the default answers
``REQUEST_CODE_NOT_SUPPORTED``, a oneway one gets nothing). Everything else is
:class:`~rmqnet.transport.connection.Connection`'s.
"""

from __future__ import annotations

import asyncio

from ..remoting import RemotingCommand
from .connection import Connection, RequestHandler
from .errors import ConnectionLostError
from .limits import Limits


class ClientConnection(Connection):
    """A connection we dialled (see the module docstring)."""

    PAUSE_READING_ON_WRITE_PRESSURE = False  # answers are always read (see Connection)

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        limits: Limits | None = None,
        request_handler: RequestHandler | None = None,
        timeout_s: float = 3.0,
    ) -> ClientConnection:
        """Dial ``host:port``. Raises :class:`ConnectionLostError` (also an ``OSError``) if the
        connection is refused or not made within ``timeout_s``."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                _, proto = await loop.create_connection(lambda: cls(request_handler, limits), host, port)
        except (OSError, TimeoutError) as exc:
            raise ConnectionLostError(None, f"{host}:{port}", f"cannot connect ({type(exc).__name__}: {exc})") from exc
        return proto

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        """Send ``cmd`` as a oneway request (``flag`` bit 2; the server never answers it).
        Raises :class:`ConnectionLostError` when the connection is closed."""
        if self.closed:
            raise ConnectionLostError(cmd.code, self.remote, "the connection is closed")
        self.send_oneway(cmd)


async def connect(
    host: str,
    port: int,
    *,
    limits: Limits | None = None,
    request_handler: RequestHandler | None = None,
    timeout_s: float = 3.0,
) -> ClientConnection:
    """:meth:`ClientConnection.connect`."""
    return await ClientConnection.connect(
        host, port, limits=limits, request_handler=request_handler, timeout_s=timeout_s
    )
