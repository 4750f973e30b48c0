"""The gRPC tests' harness: a broker over a real store with its gRPC endpoint on 127.0.0.1 (a
free port), and calls of ``apache.rocketmq.v2.MessagingService`` by method name through a
grpc.aio channel (the compiled messages, no generated stubs)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf import message_factory

from rmqnet.broker.broker import Broker
from rmqnet.broker.grpc_server import SERVICE, GrpcEndpoint

T = TypeVar("T")
#: a call's metadata: (key, value) pairs, or None
Metadata = Sequence[tuple[str, str]] | None


class Client:
    """Calls by method name on one channel: ``await client.call("SendMessage", request)``;
    server-streaming calls return the list of responses; ``telemetry`` writes commands and
    reads one answer per command."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel

    def _method(self, name: str) -> tuple[str, Any, Any, Any]:
        m = SERVICE.methods_by_name[name]
        req = message_factory.GetMessageClass(m.input_type)
        res = message_factory.GetMessageClass(m.output_type)
        return f"/{SERVICE.full_name}/{name}", req, res, m

    async def call(self, name: str, request: Any, timeout: float = 10.0, metadata: Metadata = None) -> Any:
        path, req, res, m = self._method(name)
        if m.server_streaming:
            stream = self.channel.unary_stream(
                path, request_serializer=req.SerializeToString, response_deserializer=res.FromString
            )
            return [r async for r in stream(request, timeout=timeout, metadata=metadata)]
        unary = self.channel.unary_unary(
            path, request_serializer=req.SerializeToString, response_deserializer=res.FromString
        )
        return await unary(request, timeout=timeout, metadata=metadata)

    async def telemetry(self, commands: list[Any], timeout: float = 10.0, metadata: Metadata = None) -> list[Any]:
        """One answer read per command written; a stream the server ends early: what it wrote."""
        path, req, res, _ = self._method("Telemetry")
        bidi = self.channel.stream_stream(
            path, request_serializer=req.SerializeToString, response_deserializer=res.FromString
        )
        call = bidi(timeout=timeout, metadata=metadata)
        answers = []
        for cmd in commands:
            await call.write(cmd)
            answer = await call.read()
            if answer is grpc.aio.EOF:
                return answers
            answers.append(answer)
        await call.done_writing()
        rest = [r async for r in _rest(call)]
        return answers + rest


async def _rest(call: Any) -> AsyncIterator[Any]:
    while True:
        r = await call.read()
        if r is grpc.aio.EOF:
            return
        yield r


def serve(broker: Broker, body: Callable[[Client, GrpcEndpoint], Awaitable[T]]) -> T:
    """Run ``body(client, endpoint)`` against ``broker``'s gRPC endpoint (started and stopped
    around it, in one event loop as the broker's process runs it)."""

    async def main() -> T:
        endpoint = GrpcEndpoint(broker, "127.0.0.1", 0)
        await endpoint.start()
        try:
            async with grpc.aio.insecure_channel(endpoint.address) as channel:
                return await body(Client(channel), endpoint)
        finally:
            await endpoint.stop(0)

    return asyncio.run(main())
