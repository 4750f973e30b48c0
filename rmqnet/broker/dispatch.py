"""From request code to processor, and the answers every processor shares.

A processor is ``handler(broker, peer, request)`` returning the response, ``None`` (nothing
to answer), or an awaitable of either (a held pull, a send waiting for its flush). The
transport answers a plain return at once and awaits an awaitable in a task of its own, so
only requests that wait cost a task.

Errors a processor raises are answered here as RocketMQ answers them: a request field
missing or mistyped (:class:`~rmqnet.remoting.FieldError`) is ``SYSTEM_ERROR`` with the
reason as remark (Java's ``RemotingCommandException``); an unknown code is
``REQUEST_CODE_NOT_SUPPORTED`` (RocketMQ's remark: "request type N not supported"). A oneway
request gets no answer whatever happens (the transport never writes one for it).

Hooks (:attr:`ProcessorTable.before`, e.g. the ACL of :mod:`rmqnet.broker.acl`) run before
any handler, whatever the code (RocketMQ's RPC hooks run before its default processor too):
``hook(broker, peer, request)`` returns None to go on, or the answer that ends the request
there (the handler never runs).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from ..remoting import FieldError, RemotingCommand, ResponseCode
from .peer import Peer

if TYPE_CHECKING:
    from .broker import Broker

#: a processor: ``handler(broker, peer, request)`` (see the module docstring)
Handler = Callable[["Broker", Peer, RemotingCommand], "RemotingCommand | None | Awaitable[RemotingCommand | None]"]
#: a hook run before every handler: None (go on) or the answer that ends the request
BeforeHook = Callable[["Broker", Peer, RemotingCommand], "RemotingCommand | None"]


class ProcessorTable:
    """Request code -> handler; :meth:`process` runs one request. Built with its entries
    (:func:`rmqnet.broker.processors.processor_table` lists the broker's); a code given two
    handlers raises ``ValueError`` naming it (a broker that would serve a code twice does not
    start)."""

    def __init__(self, handlers: Iterable[tuple[int, Handler]] = (), before: Iterable[BeforeHook] = ()) -> None:
        self._handlers: dict[int, Handler] = {}
        for code, handler in handlers:
            self.register(code, handler)
        #: hooks run in order before every request's handler (see the module docstring)
        self.before: list[BeforeHook] = list(before)

    def register(self, code: int, handler: Handler) -> None:
        """Serve ``code`` with ``handler``; ``ValueError`` when the code has one already."""
        if code in self._handlers:
            raise ValueError(f"request code {code} already has a processor")
        self._handlers[code] = handler

    def codes(self) -> list[int]:
        return sorted(self._handlers)

    def handler(self, code: int) -> Handler | None:
        """The handler of ``code``, or None when the code is not served."""
        return self._handlers.get(code)

    def process(
        self, broker: Broker, peer: Peer, req: RemotingCommand
    ) -> RemotingCommand | None | Awaitable[RemotingCommand | None]:
        for hook in self.before:
            refusal = hook(broker, peer, req)
            if refusal is not None:
                return None if req.is_oneway else refusal
        handler = self._handlers.get(req.code)
        if handler is None:
            return (
                None
                if req.is_oneway
                else req.reply(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {req.code} not supported")
            )
        try:
            res = handler(broker, peer, req)
        except FieldError as exc:
            res = req.reply(ResponseCode.SYSTEM_ERROR, str(exc))
        if req.is_oneway and not isinstance(res, Awaitable):
            return None  # (an awaitable still runs: the transport awaits it and writes nothing)
        return res
