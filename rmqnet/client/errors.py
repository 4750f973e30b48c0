"""The client's typed errors: a broker or name server that answered with a failure code."""

from __future__ import annotations

from ..remoting import RemotingError, ResponseCode


def code_name(code: int) -> str:
    """RocketMQ's name of a response code (``ResponseCode``), or ``"CODE_<n>"``."""
    try:
        return ResponseCode(code).name
    except ValueError:
        return f"CODE_{code}"


class ClientError(RemotingError):
    """Base of the client's errors (besides the transport's timeouts and lost connections)."""


class BrokerError(ClientError):
    """A request answered with a code that is not a success for it; ``code``, ``code_name``
    (RocketMQ's name), ``remark`` (the server's reason) and ``addr`` (who answered)."""

    def __init__(self, code: int, remark: str | None, addr: str = "", request_code: int | None = None) -> None:
        self.code = code
        self.code_name = code_name(code)
        self.remark = remark
        self.addr = addr
        self.request_code = request_code
        where = f" from {addr}" if addr else ""
        what = f" to request code {request_code}" if request_code is not None else ""
        super().__init__(f"{self.code_name} ({code}){where}{what}: {remark or 'no remark'}")


class TopicNotFoundError(BrokerError):
    """The name server knows no route for the topic (``TOPIC_NOT_EXIST``)."""

    def __init__(self, topic: str, remark: str | None, addr: str = "") -> None:
        super().__init__(ResponseCode.TOPIC_NOT_EXIST, remark, addr, 105)
        self.topic = topic


class NoRouteError(ClientError):
    """A route without what the call needs (no writable queue, no master address, an unknown
    broker name); names the topic and what is missing."""
