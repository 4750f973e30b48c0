"""What can be wrong with bytes from the wire. Every error names what was wrong; none of
them is raised for a state of ours, only for what a peer sent."""

from __future__ import annotations

from typing import Any


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


class TextError(HeaderError):
    """A JSON header that parses but holds a string that is not Unicode text (a lone surrogate,
    which JSON's ``\\ud800`` escape can carry and no UTF-8 can: no answer echoing it, no file, no
    log line could be written). :func:`~rmqnet.remoting.command.decode` raises it for a request
    with :attr:`request` set (the command as decoded): the transport answers it
    ``SYSTEM_ERROR`` with this message as the remark, naming the field, before any handler runs,
    and the connection stays open. Without a request (its code or opaque unreadable, or raised
    by ``decode_json_header`` alone) it is a :class:`HeaderError` like any other."""

    def __init__(self, field: str, problem: str, header: dict[str, Any] | None = None) -> None:
        super().__init__(f"the request's field {field!r} {problem}")
        self.field = field
        #: the header object as parsed (what :func:`decode` builds the request from)
        self.header = header
        #: the request, once :func:`decode` has built it (its opaque and flag are the answer's)
        self.request: Any = None  # (a RemotingCommand: typed loosely, errors import nothing of the codec)
