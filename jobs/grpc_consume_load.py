"""The consume side of ``bench_grpc.py``: gRPC ReceiveMessage + AckMessage beside the remoting
pull, and the redelivery of what is not acked (the gRPC endpoint's receive and redelivery targets).

- :func:`receive_ack_rate`: ``ReceiveMessage`` of up to 32 messages (a server stream: status,
  messages, delivery timestamp) then one ``AckMessage`` of every handle it gave, one pair at a
  time over grpcio's blocking channel, until ``n`` messages were taken; messages a second.
- :func:`pull_rate`: PULL_MESSAGE (11) of 32 at a time, one at a time over a blocking socket,
  from offset 0 of the same queue (a pull moves nothing), until ``n`` messages; messages a second.
- :func:`redelivery_lateness`: one receive of ``n`` messages with an invisible time of
  ``invisible_ms``, none acked; then receives (long polling) until every one came again: each
  one's arrival after its invisible time ended, ms. The end is counted from the moment the
  first receive was *sent* (the broker's pop time is later), so the figure errs long.
"""

from __future__ import annotations

import time

import grpc
from broker_load import Wire, check_ok, pull_frame

from rmqnet.grpc.convert import Code
from rmqnet.grpc.v2 import definition_pb2 as pb
from rmqnet.grpc.v2 import service_pb2 as svc

SERVICE = "/apache.rocketmq.v2.MessagingService/"
BATCH = 32


def receive_request(topic: str, group: str, batch: int, invisible_ms: int, polling_ms: int) -> bytes:
    req = svc.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        batch_size=batch,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=0),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
    )
    req.invisible_duration.FromMilliseconds(invisible_ms)
    req.long_polling_timeout.FromMilliseconds(polling_ms)
    return req.SerializeToString()


def _received(stream: object) -> list[pb.Message]:
    """The messages of one ReceiveMessage stream; ``RuntimeError`` on a status other than OK
    or MESSAGE_NOT_FOUND."""
    out = []
    for raw in stream:  # type: ignore[attr-defined]
        r = svc.ReceiveMessageResponse.FromString(raw)
        kind = r.WhichOneof("content")
        if kind == "status" and r.status.code not in (Code.OK, Code.MESSAGE_NOT_FOUND):
            raise RuntimeError(f"ReceiveMessage answered {r.status}")
        if kind == "message":
            out.append(r.message)
    return out


def _ack(ack: grpc.UnaryUnaryMultiCallable, topic: str, group: str, msgs: list[pb.Message]) -> None:
    req = svc.AckMessageRequest(
        group=pb.Resource(name=group),
        topic=pb.Resource(name=topic),
        entries=[
            svc.AckMessageEntry(
                message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle
            )
            for m in msgs
        ],
    )
    reply = svc.AckMessageResponse.FromString(ack(req.SerializeToString(), timeout=10))
    if reply.status.code != Code.OK:
        raise RuntimeError(f"AckMessage answered {reply.status}")


def receive_ack_rate(address: str, topic: str, group: str, n: int) -> float:
    """Messages a second of receive-32-then-ack pairs, one pair at a time, until ``n`` taken."""
    request = receive_request(topic, group, BATCH, 30_000, 1_000)
    with grpc.insecure_channel(address) as channel:
        receive = channel.unary_stream(SERVICE + "ReceiveMessage")
        ack = channel.unary_unary(SERVICE + "AckMessage")
        got = 0
        t0 = time.perf_counter()
        while got < n:
            msgs = _received(receive(request, timeout=30))
            if not msgs:
                raise RuntimeError(f"ReceiveMessage found nothing after {got} of {n} messages")
            _ack(ack, topic, group, msgs)
            got += len(msgs)
        return got / (time.perf_counter() - t0)


def pull_rate(port: int, topic: str, n: int) -> float:
    """Messages a second of pulls of 32, one at a time, from offset 0 of queue 0."""
    w = Wire(port)
    try:
        offset, opaque = 0, 1
        t0 = time.perf_counter()
        while offset < n:
            head = w.call(pull_frame(topic, 0, offset, BATCH, opaque))
            check_ok(head, "pull")
            nxt = int(head["extFields"]["nextBeginOffset"])
            if nxt <= offset:
                raise RuntimeError(f"the pull at {offset} moved nothing")
            offset, opaque = nxt, opaque + 1
        return offset / (time.perf_counter() - t0)
    finally:
        w.close()


def redelivery_lateness(address: str, topic: str, group: str, n: int, invisible_ms: int) -> list[float]:
    """Each of ``n`` unacked messages' arrival after its invisible time ended, ms (see the
    module docstring); the redelivered ones are acked."""
    with grpc.insecure_channel(address) as channel:
        receive = channel.unary_stream(SERVICE + "ReceiveMessage")
        ack = channel.unary_unary(SERVICE + "AckMessage")
        sent = time.perf_counter()
        first = _received(receive(receive_request(topic, group, n, invisible_ms, 1_000), timeout=30))
        if len(first) != n:
            raise RuntimeError(f"the first receive gave {len(first)} of {n} messages")
        due = sent + invisible_ms / 1000.0
        waiting = {m.system_properties.message_id for m in first}
        late: list[float] = []
        again = receive_request(topic, group, BATCH, 30_000, 5_000)
        while waiting:
            msgs = _received(receive(again, timeout=30))
            now = time.perf_counter()
            for m in msgs:
                if m.system_properties.message_id in waiting:
                    waiting.discard(m.system_properties.message_id)
                    late.append(max(0.0, now - due) * 1000.0)
            if msgs:
                _ack(ack, topic, group, msgs)
            if now - due > 30:
                raise RuntimeError(f"{len(waiting)} messages not redelivered 30 s after their invisible time")
        return late
