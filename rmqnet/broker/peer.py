"""What a processor may know of the connection a request came on (the transport's
connection object satisfies it; tests pass a plain stand-in)."""

from __future__ import annotations

from typing import Any, Protocol

from ..remoting import RemotingCommand


class Peer(Protocol):
    #: the client's address as ``"ip:port"`` (BORNHOST of what it sends)
    remote: str
    #: per-connection state kept by processors (client id, ACL account...)
    attrs: dict[str, Any]

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """Send a request that wants no answer (NOTIFY_CONSUMER_IDS_CHANGED)."""

    @property
    def closed(self) -> bool:
        """Whether the connection is gone."""
