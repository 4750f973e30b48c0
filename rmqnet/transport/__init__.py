"""The asyncio layer over :mod:`rmqnet.remoting`: connections that serve requests
concurrently and answer them by opaque, our own requests matched to their answers, frame and
header caps, in-flight bounds, write back-pressure and idle connections closed.

- :class:`RemotingServer` (server.py): listens and serves one handler on every connection.
- :class:`ClientConnection` (client.py): dials; ``invoke`` / ``invoke_oneway``.
- :class:`Connection` (connection.py): one connection, both ends; what a processor sees as its
  peer (``remote``, ``attrs``, ``closed``, ``send_oneway``, ``invoke``, ``close``, ``on_close``).
- :class:`Limits` (limits.py), :class:`IdleSweeper` and its default clock, the event loop's
  (idle.py), the errors (errors.py).

The transport imports nothing of the store (the name server stands on it alone).
"""

from .client import ClientConnection, connect
from .completions import complete, flush_completed
from .connection import Connection, RequestHandler
from .errors import ConnectionLostError, RemotingTimeoutError, TransportError
from .idle import IdleSweeper, LoopClock, MonotonicClock
from .limits import Limits
from .server import RemotingServer

__all__ = [
    "ClientConnection",
    "connect",
    "Connection",
    "RequestHandler",
    "ConnectionLostError",
    "RemotingTimeoutError",
    "TransportError",
    "IdleSweeper",
    "LoopClock",
    "MonotonicClock",
    "Limits",
    "RemotingServer",
    "complete",
    "flush_completed",
]
