"""The transport's typed errors: what a caller of :meth:`Connection.invoke` can be told
besides an answer. Both are :class:`~rmqnet.remoting.RemotingError` s, and each also is the
builtin exception it means (a timeout, a lost connection), so generic handlers catch them."""

from __future__ import annotations

from ..remoting import RemotingError


class TransportError(RemotingError):
    """Base of the transport's errors (a request that got no answer)."""


class RemotingTimeoutError(TransportError, TimeoutError):
    """No answer to a request within its timeout; names the request code, opaque and peer.
    (``asyncio.TimeoutError`` is ``TimeoutError`` since Python 3.11, so this is one too.)"""

    def __init__(self, code: int, opaque: int, peer: str, timeout_s: float) -> None:
        super().__init__(f"no answer to request code {code} (opaque {opaque}) from {peer} within {timeout_s:g} s")
        self.code = code
        self.opaque = opaque
        self.peer = peer


class ConnectionLostError(TransportError, ConnectionError):
    """The connection closed before the request was answered (or it was closed when the
    request was made); names the request code and peer."""

    def __init__(self, code: int | None, peer: str, reason: str) -> None:
        what = f"request code {code}" if code is not None else "the request"
        super().__init__(f"connection to {peer} lost before {what} was answered: {reason}")
        self.code = code
        self.peer = peer
