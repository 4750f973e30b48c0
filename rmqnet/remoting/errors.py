"""What can be wrong with bytes from the wire. Every error names what was wrong; none of
them is raised for a state of ours, only for what a peer sent."""

from __future__ import annotations


class RemotingError(Exception):
    """Base of the wire's errors: a peer sent something this protocol does not allow."""


class FrameError(RemotingError):
    """The frame itself is unusable (length out of bounds, header longer than the frame,
    unknown serialize type): the connection cannot be resynchronised and is closed."""


class HeaderError(RemotingError):
    """A complete frame whose header cannot be decoded (bad JSON, a truncated binary header,
    a field of the wrong type). The frame boundary is intact, but without a readable opaque
    there is nobody to answer: the connection is closed."""


class FieldError(RemotingError):
    """A request's extFields lack a required field or hold one that is not of its type. The
    request is answered (``SYSTEM_ERROR`` with this message as the remark, as RocketMQ's
    ``RemotingCommandException`` is), the connection stays open."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"the request's field {field!r} {problem}")
        self.field = field
