"""The broker's gRPC endpoint (``grpcListenPort``): a ``grpc.aio`` server on the broker's own
event loop serving :class:`~rmqnet.broker.grpc_service.MessagingService`.

Every method of ``apache.rocketmq.v2.MessagingService`` (read from the compiled service
descriptor, so a method added to the definitions is covered without a line here) is
registered: the served ones call the service's coroutine, every other one answers status
``UNSUPPORTED`` at once (a server-streaming one: one response holding that status, then the
end of the stream), so no call hangs. A request whose bytes are not its message is answered
``BAD_REQUEST`` (:class:`~rmqnet.broker.grpc_service.CorruptRequest`). With ``aclEnable=true``
every call's caller is authenticated from its metadata first (``UNAUTHORIZED``), then what the
call names is authorized (``FORBIDDEN``; Telemetry's per command, by the service), before its
handler runs (:mod:`rmqnet.broker.acl_grpc`). A handler that raises is answered
``INTERNAL_SERVER_ERROR`` naming the error (logged once with its traceback), never a bare
gRPC failure.

Cleartext HTTP/2 only (the clients open cleartext connections when told ``enable_ssl=False``
/ no TLS). The largest message received is ``2 * maxMessageSize + 1 MiB``, so a body past
``maxMessageSize`` still reaches the service and is answered ``MESSAGE_BODY_TOO_LARGE``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError

from ..grpc.convert import Code, status
from ..grpc.v2 import service_pb2 as svc
from ..remoting.address import grpc_peer_address
from .acl import AclRefusal
from .acl_grpc import CALLER, authenticate, call_needs
from .grpc_routes import name_server_routes
from .grpc_service import CorruptRequest, MessagingService

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

SERVICE = svc.DESCRIPTOR.services_by_name["MessagingService"]
#: method name -> the service's coroutine (attribute name)
SERVED = {
    "QueryRoute": "query_route",
    "Heartbeat": "heartbeat",
    "SendMessage": "send_message",
    "QueryAssignment": "query_assignment",
    "EndTransaction": "end_transaction",
    "NotifyClientTermination": "notify_client_termination",
    "Telemetry": "telemetry",
    "ReceiveMessage": "receive_message",
    "AckMessage": "ack_message",
    "ChangeInvisibleDuration": "change_invisible_duration",
    "ForwardMessageToDeadLetterQueue": "forward_message_to_dead_letter_queue",
}


class GrpcEndpoint:
    """The gRPC server of ``broker`` on ``host:port`` (0: a free port); :meth:`start`, then
    :attr:`port` is the bound one; :meth:`stop` at the broker's stop."""

    def __init__(self, broker: Broker, host: str, port: int, *, advertised_host: str | None = None) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        #: the host the route names (``brokerIP1`` when bound to a wildcard address)
        self.advertised_host = advertised_host or host
        self.service: MessagingService | None = None
        self._server: Any = None

    @property
    def address(self) -> str:
        """The advertised ``host:port`` (``[v6]:port``)."""
        return _join(self.advertised_host, self.port)

    async def start(self) -> None:
        """Bind and serve; raises ``OSError`` naming the address when it cannot be bound."""
        limit = 2 * self.broker.config.max_message_size + (1 << 20)
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit), ("grpc.so_reuseport", 0)])
        try:  # (grpc raises RuntimeError for an address it cannot bind; older versions returned 0)
            bound = server.add_insecure_port(_join(self.host, self.port))
        except RuntimeError:
            bound = 0
        if not bound:
            raise OSError(
                f"grpcListenPort: cannot bind {_join(self.host, self.port)} (in use, or not an address of this host)"
            )
        self.port = bound
        self.service = MessagingService(
            self.broker, self.advertised_host, bound, routes=name_server_routes(self.broker.config, self.broker.clock)
        )
        self.broker.stop_listeners.append(self.service.close)  # (Telemetry streams end at the stop's start)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE.full_name, handlers(self.service)),)
        )
        await server.start()
        self._server = server

    async def stop(self, grace_s: float | None) -> None:
        """Stop accepting calls; calls in flight get ``grace_s`` seconds (open Telemetry streams
        are cancelled then)."""
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
        if self.service is not None and self.service.routes is not None:
            self.service.routes.close()  # (after the calls in flight: a route lookup may be among them)


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def handlers(service: MessagingService) -> dict[str, grpc.RpcMethodHandler]:
    """Method name -> grpc handler, for every method of the service (module docstring)."""
    out: dict[str, grpc.RpcMethodHandler] = {}
    for method in SERVICE.methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        kind = (method.client_streaming, method.server_streaming)
        served = getattr(service, SERVED[method.name]) if method.name in SERVED else None
        wrapped = _wrap(service, method.name, response, served, kind)
        make = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[kind]
        out[method.name] = make(
            wrapped, request_deserializer=_reader(request), response_serializer=response.SerializeToString
        )
    return out


def _reader(request: Any) -> Callable[[bytes], Any]:
    """The call's request parser: bytes that are not its message give a
    :class:`CorruptRequest` (answered ``BAD_REQUEST``) instead of raising into grpc, which
    would log a traceback and answer a bare ``UNKNOWN``."""
    name = request.DESCRIPTOR.full_name

    def read(data: bytes) -> Any:
        try:
            return request.FromString(data)
        except DecodeError as exc:
            return CorruptRequest(name, str(exc))

    return read


def _refusal(service: MessagingService, name: str, response: Any, request: Any, context: Any) -> Any:
    """The answer a call gets before its handler runs, or None to serve it: with
    ``aclEnable``, its caller authenticated (``UNAUTHORIZED``) and set as
    :data:`~rmqnet.broker.acl_grpc.CALLER` for the handler, then what the call names authorized
    (``FORBIDDEN``; a request that does not parse is answered ``BAD_REQUEST`` after the
    authentication, Telemetry's commands by the service)."""
    broker = service.broker
    acl = broker.acl
    if acl is None:
        if broker.config.acl_enable:  # (no ACL files loaded: nothing may pass unchecked)
            return response(status=status(Code.UNAUTHORIZED, "aclEnable=true but no ACL is loaded"))
        return None
    try:
        caller = authenticate(acl, context.invocation_metadata() or (), grpc_peer_address(context.peer()))
    except AclRefusal as exc:
        return response(status=status(Code.UNAUTHORIZED, str(exc)[:500]))
    CALLER.set(caller)
    if isinstance(request, CorruptRequest) or name == "Telemetry":
        return None
    try:
        acl.permitted(caller.account, call_needs(name, request))
    except AclRefusal as exc:
        return response(status=status(Code.FORBIDDEN, str(exc)[:500]))
    return None


def _wrap(
    service: MessagingService, name: str, response: Any, served: Callable[..., Any] | None, kind: tuple[bool, bool]
) -> Callable[..., Any]:
    def failed(exc: BaseException) -> Any:
        log.exception("gRPC %s failed", name)
        return response(status=status(Code.INTERNAL_SERVER_ERROR, f"{name} failed: {type(exc).__name__}: {exc}"[:500]))

    if kind[1]:  # server streaming (ReceiveMessage, PullMessage, Telemetry)

        async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
            refusal = _refusal(service, name, response, request, context)
            if refusal is None and isinstance(request, CorruptRequest):
                refusal = response(status=request.status())
            if refusal is None and served is None:
                refusal = MessagingService.unsupported(name, response)
            if refusal is not None:
                yield refusal
                return
            assert served is not None
            try:
                async for item in served(request, context):
                    yield item
            except Exception as exc:  # noqa: BLE001 - answered typed, logged once
                yield failed(exc)

        return stream

    async def unary(request: Any, context: Any) -> Any:
        refusal = _refusal(service, name, response, request, context)
        if refusal is not None:
            return refusal
        if isinstance(request, CorruptRequest):
            return response(status=request.status())
        if served is None:
            return MessagingService.unsupported(name, response)
        try:
            return await served(request, context)
        except Exception as exc:  # noqa: BLE001 - answered typed, logged once
            return failed(exc)

    return unary
